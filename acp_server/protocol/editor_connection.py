"""One editor's side of the agent: what a connected editor has and no other editor shares.

`EditorConnection` owns the JSON-RPC connection to the editor (`rpc`: its transport, fenced writer and pending
requests to the client, jsonrpc/connection.py), what `initialize` negotiated (`Handshake`: the version and the
client's capabilities), the table of its prompts by request id (what `$/cancel_request` names), the held v2 prompts
a cancel already answered (`withdrawn`), and, once it opened a session, its edge (protocol/acp_edge.py `AcpEdge`): the
renderer of the core's events in its version, which the sessions it opened are attached to (`Session.edge`), and
the principal it acts for (`principal`: stdio's is `local`; a remote one's comes from its token, REMOTE.md decision
4), which owns the sessions it creates and bounds the directories they may use. What its client changes of the
model credentials is its own (`credentials`, decision 10), and so is its limit of open sessions (`max_sessions`,
decision 8; none on stdio).

Named so it is not confused with `jsonrpc.connection.Connection` (the wire, which knows nothing of ACP): an
"editor connection" is that wire plus what ACP negotiated on it. stdio is the transport with exactly one of these.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import anyio

from acp_server.agent.providers import Credentials
from acp_server.agent.sessions.owners import LOCAL, Owner
from acp_server.jsonrpc.rpc import ErrorCode, RpcError
from acp_server.mcp_bridge.over_acp import AcpMcpMessages
from acp_server.protocol.initialize import Capabilities

if TYPE_CHECKING:
    from acp_server.agent.agent import Agent
    from acp_server.agent.sessions.edge import Edge
    from acp_server.agent.sessions.runs import RunContext, Session
    from acp_server.jsonrpc.connection import Connection
    from acp_server.protocol.schema import RequestId

__all__ = ["EditorConnection", "EditorConnections", "Handshake"]


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
        one acts after it, and the deferred side is loaded after its answer, never before (protocol/deferred.py)."""
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


class EditorConnection:
    """One editor on the agent: its wire, its handshake, its prompts. Long-lived, one per connection; built where
    the connection is made (cli/server.py)."""

    def __init__(
        self,
        agent: Agent,
        rpc: Connection,
        make_edge: Callable[[EditorConnection], Edge],
        extension_notifications: tuple[str, ...] = (),
        principal: Owner = LOCAL,
        *,
        whole_process: bool,
        max_sessions: int | None = None,
    ) -> None:
        """`make_edge`: this connection as the core's `Edge` (protocol/acp_edge.py `AcpEdge`, on the deferred side),
        built by the composition root with the connection's first session. `whole_process`: the process's only
        connection (stdio), whose logout forgets the process's keys and whose statistics are the process's.
        `max_sessions`: how many sessions it may have open at once (None: no limit)."""
        self.agent = agent
        self.whole_process = whole_process
        # Its client's `authenticate`/`logout` (REMOTE.md decision 10): this connection's sessions only.
        self.credentials = Credentials(agent.auth, whole_process=whole_process)
        self.max_sessions = max_sessions
        self._opening = 0  # sessions being opened now (new, load, resume, fork), each holding a slot
        self._make_edge = make_edge
        self.rpc = rpc
        self.handshake = Handshake()
        # Prompt request id -> its run, so `$/cancel_request` can name a prompt (kept by the dispatcher's admission).
        self.prompts: dict[RequestId, RunContext] = {}
        # Held v2 prompts a cancel withdrew and answered itself, at once (protocol/v2/withdrawals.py): their
        # own request handlers send nothing more (the dispatcher drops their answer). Kept by the run itself
        # (identity), not by its request id: the client chooses ids, and another request may carry the same one while
        # the withdrawn prompt's handler has yet to look (its answer would be dropped, and the withdrawn one answered
        # twice).
        self.withdrawn: set[RunContext] = set()
        # The notifications beyond ACP's that this server handles (advertised in `initialize`).
        self.extension_notifications = extension_notifications
        # Who the editor acts for (REMOTE.md decision 4): `local` over stdio, a token's principal over the network.
        self.principal = principal
        # Its `mcp/message` traffic: the MCP servers its client offers over ACP, and their notifications to us.
        self.mcp_messages = AcpMcpMessages(self._mcp_message)
        self._edge: Edge | None = None

    async def _mcp_message(self, params: dict[str, Any]) -> Any:
        """One MCP request to a server the client offers over ACP (unstable `mcp/message`, mcp_bridge/over_acp.py):
        withdrawn with `$/cancel_request` when the caller is cancelled."""
        return await self.rpc.request("mcp/message", params)

    @property
    def edge(self) -> Edge:
        """This connection as the core's `Edge` (protocol/acp_edge.py): built with the first session it opens, when the
        deferred side (and the sandbox the turn services hold) is loaded."""
        if self._edge is None:
            self._edge = self._make_edge(self)
        return self._edge

    def session(self, session_id: str, *, even_if_lost: bool = False) -> Session:
        """The open session of this connection a request names, or the error its client gets for it (an unknown id,
        another connection's session, a subagent's; one whose lease this replica lost, unless `even_if_lost`: a
        close or a cancel still reaches it). Raises `RpcError` before `initialize`."""
        self.handshake.require_initialized()
        session = self.agent.sessions.require(session_id, self._edge)
        if not even_if_lost:
            self.agent.leases.check(session_id)
        return session

    def owns(self, session: Session) -> bool:
        """Whether `session` is attached to this connection (a subagent's session: its parent's connection)."""
        return self._edge is not None and session.edge is self._edge

    def sessions(self) -> list[Session]:
        """The sessions attached to this connection now."""
        return [] if self._edge is None else self.agent.sessions.attached_to(self._edge)

    @contextlib.contextmanager
    def opening(self, session_id: str | None = None) -> Iterator[None]:
        """What opening a session on this connection takes (new, load, resume, fork; `session_id`: the one a load or
        resume names): the default model's key, as this connection's credentials say (REMOTE.md decision 10), and a
        slot, held while it opens: refused (-32600) when the connection has `max_sessions` open or opening already
        (decision 8). A session this connection has open already takes no new slot; a close or delete frees one."""
        self.credentials.require()
        current = self.agent.sessions.get(session_id) if session_id is not None else None
        if self.max_sessions is None or (current is not None and not current.closed and self.owns(current)):
            yield
            return
        held = sum(1 for session in self.sessions() if not session.closed) + self._opening
        if held >= self.max_sessions:
            raise RpcError(
                ErrorCode.INVALID_REQUEST,
                f"Invalid request: this connection has {self.max_sessions} sessions open, the most it may have; "
                "close one (session/close) before opening another",
            )
        self._opening += 1
        try:
            yield
        finally:
            self._opening -= 1

    def running(self) -> list[RunContext]:
        """The turns running now for this connection's sessions (subagents' turns are nested in theirs)."""
        return [run for run in self.agent.runs.current() if self.owns(run.session) and run.parent_session_id is None]


class EditorConnections:
    """The editors connected to one agent now (stdio: its one), for what must find a session's connection from the
    session alone (test mode's probes, protocol/testmode/mode.py)."""

    def __init__(self) -> None:
        self._connected: list[EditorConnection] = []

    def add(self, editor: EditorConnection) -> None:
        self._connected.append(editor)

    def discard(self, editor: EditorConnection) -> None:
        if editor in self._connected:
            self._connected.remove(editor)

    def of(self, session: Session) -> EditorConnection | None:
        """The connection `session` is attached to, if it is still connected."""
        return next((editor for editor in self._connected if editor.owns(session)), None)

    def __len__(self) -> int:
        return len(self._connected)
