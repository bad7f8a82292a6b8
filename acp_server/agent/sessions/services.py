"""What a turn needs from the server, in one frozen bundle: the turn, its tools and its subagents all take it.

Its own module so that the turn (`turn.py`), the ports a tool call gets (`turn_tools.py`) and the subagents that run
child turns (`subagents.py`) can share it without importing each other in a circle.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from acp_server.agent.sessions.edge import TitleChanged, attached
from acp_server.agent.sessions.runs import RunContext, RunRegistry, Session
from acp_server.runtime.call_bodies import CallBodies
from acp_server.runtime.model import Provider
from acp_server.runtime.processes import ProcessTable
from acp_server.runtime.tools import ToolBox
from acp_server.settings.config import Config

if TYPE_CHECKING:
    from acp_server.runtime.sandbox import Sandbox, Unconfined
    from acp_server.store import SessionStore

__all__ = ["Observer", "TurnMeter", "TurnServices"]

# Told each step a turn takes (the probe events of runtime/model.py): a run, the event and its fields.
Observer = Callable[[RunContext, str, dict[str, Any]], None]


class TurnMeter(Protocol):
    """What an operator's metrics are told of the turns (`serve --metrics`: remote/metrics.py feeds Prometheus from
    it); none on stdio. Each call is a counter or a histogram's observation: synchronous, no await, nothing held."""

    def turn_started(self) -> None: ...

    def turn_ended(self, stop_reason: str, cancel_to_answer: float | None) -> None:
        """A turn's end with its stop reason (`failed` for one that failed) and, for a cancelled one, the seconds from
        the first cancel to its answer (the store's commit before the response included)."""
        ...

    def store_committed(self, seconds: float) -> None:
        """A commit of the session store before a response, and how long it took (held or not)."""
        ...

    def store_failed(self) -> None:
        """A commit of the session store that failed: any of them, before a response or in the background (the
        store's hook, `SessionStore.on_failure`)."""
        ...

    def lease_taken_over(self) -> None:
        """A session this replica took over from another's lease that expired unreleased (agent/sessions/leasing.py)."""
        ...


@dataclass(frozen=True, slots=True)
class TurnServices:
    """What a turn needs from the server; all of it long-lived and shared, none of it holding turn state."""

    config: Config
    runs: RunRegistry
    # The provider for a session's model spec (built once per spec, shared by sessions).
    providers: Callable[[str], Provider]
    tools: ToolBox
    processes: ProcessTable
    # The owner of cancellable calls' bodies, by session: what an abandoned one still running belongs to.
    calls: CallBodies
    # The session store once it is open (None without one: `--no-store`, or it could not be opened).
    store: Callable[[], SessionStore | None]
    # Who watches the turns' steps, if anyone (a plug-in: test mode's `_scripted/probe`); None in production.
    observer: Observer | None = None
    # How local commands are confined (None: not at all; Unconfined: asked for, but impossible here), decided once
    # per process; every connection's edge uses it for the commands it runs on this machine.
    sandbox: Sandbox | Unconfined | None = None
    # Who counts turns for an operator's metrics (`serve`: remote/metrics.py); None on stdio.
    meter: TurnMeter | None = None

    def announce_title(self, session: Session, title: str) -> None:
        edge = attached(session)
        if edge is not None:  # a session whose connection ended is told nothing; the store keeps the title
            edge.session_event(session.session_id, TitleChanged(title))
        store = self.store()
        if store is not None:
            store.set_title(session.session_id, title)

    def probe(self, run: RunContext, event: str, **fields: Any) -> None:
        """What the turn is doing, for the observer if there is one (a no-op without)."""
        if self.observer is not None:
            self.observer(run, event, fields)
