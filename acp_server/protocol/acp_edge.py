"""The protocol side of the core's `Edge` (agent/sessions/edge.py) for one connection: where a turn's events are
rendered and sent, and the editor's side of its tools. The connection's version, chosen by its `initialize`, picks
the sibling that renders (protocol/v1/ or protocol/v2/: `Version`), once, here; nothing below it asks again. The
composition root (cli/deferred_side.py) builds it and hands it to the core inside the `TurnServices`.
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any

from acp_server.agent.sessions.edge import Ports, SessionEvent, TurnSink
from acp_server.agent.sessions.runs import RunContext
from acp_server.jsonrpc.connection import Connection
from acp_server.mcp_bridge.over_acp import AcpMcpMessages
from acp_server.protocol.editor import (
    ClientRequest,
    EditorFileSystem,
    EditorQuestions,
    EditorTerminalRunner,
    PermissionGate,
    PermissionQuestion,
    SplitFileSystem,
)
from acp_server.protocol.editor_connection import Handshake
from acp_server.protocol.v1.permissions import permission_params
from acp_server.protocol.v1.updates import TurnUpdates, session_update
from acp_server.protocol.v2.permissions import asking_v2, permission_params_v2
from acp_server.protocol.v2.terminals import TerminalRunner
from acp_server.protocol.v2.updates import V2TurnUpdates, session_update_v2
from acp_server.runtime.local_commands import LocalCommandRunner
from acp_server.runtime.local_fs import LocalFileSystem
from acp_server.runtime.model import Provider
from acp_server.runtime.ports import CommandRunner, NoQuestions, Questions
from acp_server.runtime.processes import ProcessTable
from acp_server.runtime.sandbox import Sandbox, Unconfined
from acp_server.settings.config import Config

__all__ = ["V1", "V2", "AcpEdge", "Version", "fenced_request"]


@dataclass(frozen=True, slots=True)
class Version:
    """What differs between the protocol versions on the way out: each sibling's renderer of a turn's events and of
    a session's own, how it asks a permission question, and whether commands are the editor's or the agent's own
    display terminals (v2 has no client terminals or files; its questions say `requires_action`)."""

    turn_sink: Callable[[Connection, RunContext], TurnSink]
    session_update: Callable[[SessionEvent], dict[str, Any] | None]
    question: PermissionQuestion
    # The turn's requests to the client (v2's permission questions and forms say `requires_action` around them).
    asking: Callable[[Connection, RunContext], ClientRequest]
    # Commands run locally and are shown as agent-owned display terminals (v2: the client has no terminals).
    display_terminals: bool


def fenced_request(connection: Connection, run: RunContext) -> ClientRequest:
    """v1's requests to the client: as they are, fenced by the turn."""

    async def request(method: str, params: dict[str, Any]) -> Any:
        return await connection.request(method, params, fence=run)

    return request


V1 = Version(TurnUpdates, session_update, permission_params, fenced_request, display_terminals=False)
V2 = Version(V2TurnUpdates, session_update_v2, permission_params_v2, asking_v2, display_terminals=True)


class AcpEdge:
    """ACP over one connection, in the version its `initialize` chose."""

    def __init__(
        self,
        connection: Connection,
        config: Config,
        processes: ProcessTable,
        handshake: Handshake,
        sandbox: Callable[[], Sandbox | Unconfined | None] = lambda: None,
        *,
        routed: Callable[[str], Provider | None] = lambda spec: None,
        key_refused: Callable[[str], None] = lambda spec: None,
        mcp_messages: AcpMcpMessages | None = None,
    ) -> None:
        """`sandbox`: how local commands are confined (None: not at all; Unconfined: asked for, but impossible
        here), decided once per process, with the turn services: asked for by a turn's tools, as the edge is built
        with the connection's first session, before them."""
        self._connection = connection
        self._config = config
        self._processes = processes
        self._handshake = handshake
        self._sandbox = sandbox
        # The connection's own gateways and key status (protocol/provider_methods.py, REMOTE.md decision 10).
        self.routed_provider = routed
        self.key_refused = key_refused
        # The connection's `mcp/message` traffic: its client's own MCP servers (mcp_bridge/over_acp.py).
        self.mcp_messages = mcp_messages
        self._chosen: Version | None = None

    @property
    def version(self) -> Version:
        """The connection's version, read from its handshake at the first turn or session event (a session exists,
        so `initialize` chose it; the dispatcher refuses another version afterwards) and kept."""
        if self._chosen is None:
            self._chosen = V2 if self._handshake.v2 else V1
        return self._chosen

    def turn_sink(self, run: RunContext) -> TurnSink:
        return self.version.turn_sink(self._connection, run)

    def session_event(self, session_id: str, event: SessionEvent) -> None:
        update = self.version.session_update(event)
        if update is not None:
            self._connection.notify("session/update", {"sessionId": session_id, "update": update})

    def spawn(self, func: Callable[..., Coroutine[Any, Any, Any]], *args: Any) -> None:
        self._connection.spawn(func, *args)

    def retract(self, request_id: int) -> None:
        self._connection.retract(request_id)

    def tool_ports(self, run: RunContext, on_behalf_of: str | None = None) -> Ports:
        session = run.session
        grace = self._config.cleanup_deadline
        connection = self._connection
        version = self.version
        request = version.asking(connection, run)

        def deadline() -> float:
            return run.cleanup_deadline(grace)

        roots = (session.cwd, *session.additional_directories)
        local_fs = LocalFileSystem(roots)
        editor_fs = EditorFileSystem(request, session.session_id, roots, local_fs)
        fs = SplitFileSystem(
            editor_fs if session.client.read_files else local_fs,
            editor_fs if session.client.write_files else local_fs,
        )
        commands: CommandRunner
        if version.display_terminals:  # no client terminals (v2): local commands shown as display terminals
            commands = TerminalRunner(
                connection, run, self._processes, deadline, sandbox=self._sandbox(), roots=session.sandbox_roots
            )
        elif session.client.terminals:
            commands = EditorTerminalRunner(request, session.session_id, deadline)
        else:
            commands = LocalCommandRunner(self._processes, deadline, self._sandbox(), session.sandbox_roots)
        # Forms where the client advertised `elicitation.form`, links where it advertised `.url` (v1 and v2 alike; on
        # v2 `asking_v2` adds the states).
        client = session.client
        questions: Questions = (
            EditorQuestions(
                request, session.session_id, on_behalf_of, forms=client.elicitation, links=client.elicitation_url
            )
            if client.elicitation or client.elicitation_url
            else NoQuestions()
        )
        gate = PermissionGate(session, request, version.question, on_behalf_of)
        return Ports(fs, commands, gate, request, questions)
