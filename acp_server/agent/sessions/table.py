"""The agent's table of open sessions, by id: every connection's sessions, each attached to the connection that
opened it (`Session.edge`). A connection sees only its own (`require(session_id, edge)`): another connection's
session id is answered exactly as an unknown one, so ids leak nothing (shared/design/REMOTE.md, decision 4)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from acp_server.agent.sessions.runs import RunRegistry, Session
from acp_server.errors import SubagentSessionError, UnknownSessionError

if TYPE_CHECKING:
    from acp_server.agent.sessions.edge import Edge

__all__ = ["SessionTable"]


class SessionTable:
    """The sessions the clients opened, by id. A subagent's session is not here: it lives only in the run registry,
    while its turn runs."""

    def __init__(self, runs: RunRegistry) -> None:
        self._runs = runs
        self._sessions: dict[str, Session] = {}

    def __contains__(self, session_id: str) -> bool:
        return session_id in self._sessions

    def __iter__(self) -> Iterator[Session]:
        return iter(list(self._sessions.values()))

    def __len__(self) -> int:
        return len(self._sessions)

    def get(self, session_id: str) -> Session | None:
        return self._sessions.get(session_id)

    def attached_to(self, edge: Edge) -> list[Session]:
        """The sessions a connection (its edge) has open, a snapshot."""
        return [session for session in self._sessions.values() if session.edge is edge]

    def add(self, session: Session) -> None:
        """Register a session, in place of one with the same id (a load or resume of an open session)."""
        self._sessions[session.session_id] = session

    def discard(self, session_id: str) -> None:
        self._sessions.pop(session_id, None)

    def require(self, session_id: str, edge: Edge | None) -> Session:
        """The open session a request of the connection `edge` names (None: a connection that has opened none yet),
        or the error the client gets for it."""
        session = self._sessions.get(session_id)
        if session is None or session.closed or session.edge is not edge or edge is None:
            running = self._runs.running(session_id)
            if running is not None and running.parent_session_id is not None and running.session.edge is edge:
                # docs/interrupts.md, decision 7: clients never created child sessions; they may only cancel them.
                raise SubagentSessionError("a subagent's session accepts only session/cancel")
            raise UnknownSessionError(session_id)
        return session
