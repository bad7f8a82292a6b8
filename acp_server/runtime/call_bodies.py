"""The owner of every cancellable tool call's body on one connection, by session: what keeps an abandoned call's
body tracked, capped and cancelled (docs/interrupts.md, "Abandoned tool calls").

A body that ignores cancellation can outlive its turn (runtime/call_stops.py abandons it at the call's cleanup
deadline). It is not a child of the connection's task group: a task group cannot exit before its children, so a body
that never ends would hold the connection's `serve()` forever. Each body is a task of its own, registered here under
its session until it ends; the owner cancels it (an anyio scope of its own, so the cancel is delivered again at each
checkpoint the body reaches) and waits for it, bounded: at `session/close` (`close`: shielded, at most the cleanup
deadline) and at the connection's shutdown (`cancel_all` with the turns, `wait_all` within the shutdown's own
deadline for the turns' cleanup, so the exit bound of I17 is unchanged). One still running after that wait is left
behind, logged, and never waited for.

At most `MAX_LINGERING_CALLS` abandoned bodies may still run per session: beyond it a new cancellable call is refused
before its body starts (`has_room`), so a tool that keeps ignoring cancels cannot pile up work the user cannot stop.
Light at start-up: the connection builds it before the deferred side is loaded.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any

import anyio

__all__ = ["MAX_LINGERING_CALLS", "CallBodies"]

log = logging.getLogger(__name__)

# Abandoned bodies still running that one session may have; a new cancellable call beyond it is refused (it would
# only add work that ignores the user's stop). Four: a turn rarely runs more than a couple of calls it cannot stop.
MAX_LINGERING_CALLS = 4


@dataclass(eq=False)
class _Body:
    abandoned: Callable[[], bool]
    scope: anyio.CancelScope = field(default_factory=anyio.CancelScope)
    ended: anyio.Event = field(default_factory=anyio.Event)


class CallBodies:
    """Session id -> the bodies of its cancellable calls still running (abandoned ones included). One per
    connection; holds no turn state, only the tasks that outlive their turns."""

    def __init__(self, start_detached: Callable[[Callable[[], Coroutine[Any, Any, None]]], None]) -> None:
        self._bodies: dict[str, set[_Body]] = {}
        # Starts a task that is no child of any task group (`jsonrpc.transport.start_detached`: the event loop's
        # backend is the transport's business, never the runtime's).
        self._start_detached = start_detached

    def lingering(self, session_id: str) -> int:
        """The session's abandoned bodies still running."""
        return sum(1 for body in self._bodies.get(session_id, ()) if body.abandoned())

    def has_room(self, session_id: str) -> bool:
        """Whether a new cancellable call of the session may start (see MAX_LINGERING_CALLS)."""
        return self.lingering(session_id) < MAX_LINGERING_CALLS

    def start(
        self, session_id: str, body: Callable[[], Coroutine[Any, Any, None]], abandoned: Callable[[], bool]
    ) -> None:
        """Run `body()` in a task owned here, under the session; `abandoned()` says whether its call was given up."""
        owned = _Body(abandoned)
        self._bodies.setdefault(session_id, set()).add(owned)

        async def host() -> None:
            try:
                with owned.scope:
                    await body()
            finally:
                owned.ended.set()
                bodies = self._bodies.get(session_id)
                if bodies is not None:
                    bodies.discard(owned)
                    if not bodies:
                        del self._bodies[session_id]

        self._start_detached(host)

    async def close(self, session_id: str, timeout: float) -> None:
        """`session/close`: cancel the session's bodies and wait for them, shielded, at most `timeout` s."""
        bodies = [*self._bodies.get(session_id, ())]
        for body in bodies:
            body.scope.cancel()
        with anyio.CancelScope(shield=True), anyio.move_on_after(timeout):
            for body in bodies:
                await body.ended.wait()
        left = sum(1 for body in bodies if not body.ended.is_set())
        if left:
            log.warning(
                "session %s: %d tool call(s) ignoring cancellation still running; left behind", session_id, left
            )

    def cancel_all(self) -> None:
        """The connection's shutdown begins: every session's bodies are cancelled (again), alongside the turns."""
        for bodies in self._bodies.values():
            for body in bodies:
                body.scope.cancel()

    async def wait_all(self) -> None:
        """Until every body has ended: the shutdown bounds this wait by its own deadline (the turns' cleanup)."""
        while self._bodies:
            body = next(iter(next(iter(self._bodies.values()))))
            await body.ended.wait()

    def left_behind(self) -> int:
        """Bodies still running (at exit: logged, never waited for)."""
        return sum(len(bodies) for bodies in self._bodies.values())
