"""One cancellable tool call, run so that `tool_call/cancel` stops it alone even when it ignores the cancel (ACP-V2.md
§20.3, §23 Q6: INTERRUPTS I6 for a single call).

A coroutine that ignores cancellation cannot be left behind by the task awaiting it, and a task group cannot exit
before its children. So the call's body runs in a task of its own, owned under its session by the connection's
`CallBodies` (runtime/call_bodies.py: capped, cancelled and waited for, bounded, at `session/close` and shutdown),
and the turn's task waits for it: to its end or, once the call alone is cancelled, at most until
that cancel plus the cleanup grace. Then the call is abandoned: the turn goes on as for any call the user stopped,
and the call's fence is up, so whatever the body still reports (progress, plans) is dropped and whatever it still
asks for (a client request, a permission, a question, a command, a process, a file, a subagent) is refused
(runtime/loop.py::_fenced_context). A cancel
of the whole turn reaches the body too, and the turn's task waits for the body's cleanup as it would inline; the turn
boundary (sessions/turn.py) abandons the whole work at the turn's own deadline, and this wait is bounded past it.
"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any

import anyio

from acp_server.runtime.call_bodies import CallBodies
from acp_server.runtime.model import Probe

__all__ = ["Abandonment", "CallStop", "run_abandonable"]


@dataclass(frozen=True, slots=True)
class Abandonment:
    """How a turn's cancellable calls may be abandoned: the owner of their tasks, their session, the cleanup grace."""

    bodies: CallBodies
    session_id: str
    grace: float

    def has_room(self) -> bool:
        """Whether a new call may start: the session has fewer abandoned calls still running than the cap."""
        return self.bodies.has_room(self.session_id)

    def start(self, body: Callable[[], Coroutine[Any, Any, None]], stop: CallStop) -> None:
        self.bodies.start(self.session_id, body, lambda: stop.abandoned)


@dataclass(eq=False)
class CallStop:
    """What stops one cancellable call alone (`tool_call/cancel`): one per call, dropped with it.

    `cancel()` is synchronous and idempotent: it cancels the call's scope and starts its cleanup deadline (later
    cancels do not move it). `abandoned` is the call's fence: once True, nothing the call does reaches the client.
    """

    grace: float
    scope: anyio.CancelScope = field(default_factory=anyio.CancelScope)
    asked_at: float | None = None
    abandoned: bool = False
    # Set by the cancel or by the body's end, whichever comes first: the turn's task waits on it.
    _woken: anyio.Event = field(default_factory=anyio.Event)
    _finished: anyio.Event = field(default_factory=anyio.Event)

    @property
    def cancel_called(self) -> bool:
        return self.scope.cancel_called

    def cancel(self) -> None:
        if self.asked_at is None:
            self.asked_at = anyio.current_time()
        self.scope.cancel()
        self._woken.set()

    def deadline(self) -> float:
        """The anyio clock time by which the call's cleanup must be over: its cancel plus the grace."""
        return math.inf if self.asked_at is None else self.asked_at + self.grace


async def run_abandonable(
    body: Callable[[], Awaitable[Any]],
    stop: CallStop,
    abandonment: Abandonment,
    turn_deadline: Callable[[], float],
    *,
    on_late_end: Probe,
) -> Any:
    """`body()`'s result, or None if the call's own scope stopped it or it was abandoned (`stop.abandoned`); raises
    what `body` raised. `turn_deadline`: the turn's cleanup deadline (inf until the turn is cancelled).
    `on_late_end(event, reason=...)` reports, as a probe, how an abandoned body ended after all."""
    outcome: list[Any] = []
    turn = anyio.CancelScope()  # the turn's cancel, passed on to the body's task

    async def run() -> None:
        reason = "cancelled"
        try:
            with turn, stop.scope:
                outcome.append(await body())
                reason = "completed"
        except Exception as exc:  # re-raised in the turn's task, where the loop handles a tool's failure
            outcome.append(exc)
            reason = "failed"
        finally:
            stop._finished.set()
            stop._woken.set()
            if stop.abandoned:
                on_late_end("tool_exited", reason=reason)

    abandonment.start(run, stop)
    try:
        await stop._woken.wait()  # the body's end, or the call's own cancel
        with anyio.move_on_at(stop.deadline()):
            await stop._finished.wait()
    except anyio.get_cancelled_exc_class():
        # The turn is cancelled: so is the body, and its cleanup is awaited as if it ran here, within bounds.
        turn.cancel()
        started = turn_deadline()
        bound = min(stop.deadline(), (started if math.isfinite(started) else anyio.current_time()) + stop.grace)
        with anyio.CancelScope(shield=True), anyio.move_on_at(bound):
            await stop._finished.wait()
        stop.abandoned = not stop._finished.is_set()
        raise
    if not stop._finished.is_set():
        stop.abandoned = True
        return None
    if outcome and isinstance(outcome[0], Exception):
        raise outcome[0]
    return outcome[0] if outcome else None
