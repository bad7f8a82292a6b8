"""The connection's handshake (what `initialize` told us) and its table of open sessions, looked up by id."""

from __future__ import annotations

from collections.abc import Iterator

import anyio

from acp_server.agent.sessions.runs import RunRegistry, Session
from acp_server.jsonrpc.rpc import ErrorCode, RpcError
from acp_server.protocol.initialize import Capabilities

__all__ = ["Handshake", "SessionTable"]


class Handshake:
    """The client's capabilities from `initialize`: None until it has been read (recorded in reader order), and the
    protocol version it chose for the whole connection (1 or 2; protocol/v2/negotiation.py)."""

    def __init__(self) -> None:
        self.client_capabilities: Capabilities | None = None
        self.version = 1
        # Why a key was missing when `initialize` was read (None: none was), recorded then, in reader order, so that
        # its answer's `authMethods` says what held before the requests pipelined behind it (an `auth/login` there
        # may run before the `initialize` handler does).
        self.auth_problem: str | None = None
        # Whether a v2 `initialize` offered `authMethods`: only then are `auth/login` and `auth/logout` served.
        self.auth_offered = False
        self._unanswered = 0  # `initialize` requests read and not yet answered
        self._answered: anyio.Event | None = None  # set when the last of them is

    def initialize_read(self) -> None:
        """An `initialize` was read (in reader order): what comes behind it waits for its answer (`answered`)."""
        self._unanswered += 1
        if self._answered is None or self._answered.is_set():
            self._answered = anyio.Event()

    def initialize_answered(self) -> None:
        self._unanswered -= 1
        if self._unanswered == 0 and self._answered is not None:
            self._answered.set()

    async def answered(self) -> None:
        """Once every `initialize` read so far is answered (at once if none is waiting): a request pipelined behind
        one acts after it, and the session side is loaded after its answer, never before (protocol/deferred.py)."""
        if self._answered is not None and not self._answered.is_set():
            await self._answered.wait()

    @property
    def v2(self) -> bool:
        return self.version == 2

    def require_initialized(self) -> None:
        if self.client_capabilities is None:
            raise RpcError(
                ErrorCode.INVALID_REQUEST,
                "Invalid request: the connection is not initialized; send initialize first",
            )


class SessionTable:
    """The sessions the client opened on this connection, by id. A subagent's session is not here: it lives only
    in the run registry, while its turn runs."""

    def __init__(self, handshake: Handshake, runs: RunRegistry) -> None:
        self._handshake = handshake
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

    def add(self, session: Session) -> None:
        """Register a session, in place of one with the same id (a load or resume of an open session)."""
        self._sessions[session.session_id] = session

    def discard(self, session_id: str) -> None:
        self._sessions.pop(session_id, None)

    def require(self, session_id: str) -> Session:
        """The open session a request names, or the error the client gets for it."""
        self._handshake.require_initialized()
        session = self._sessions.get(session_id)
        if session is None or session.closed:
            running = self._runs.running(session_id)
            if running is not None and running.parent_session_id is not None:
                # docs/interrupts.md, decision 7: clients never created child sessions; they may only cancel them.
                raise RpcError(
                    ErrorCode.INVALID_PARAMS, "Invalid params: a subagent's session accepts only session/cancel"
                )
            # v2 adds the data (SessionNotFoundErrorData); v1 answers exactly as it always did.
            data = {"sessionId": session_id} if self._handshake.v2 else None
            raise RpcError(ErrorCode.RESOURCE_NOT_FOUND, f"unknown session: {session_id}", data)
        return session
