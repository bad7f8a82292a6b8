"""The protocol side of the core's `Edge` (sessions/edge.py) for one connection: where a turn's events are rendered
(by v1's renderer, or v2's in protocol/v2/ once `initialize` chose v2) and sent, and the editor's side of its tools.
The composition root (`server.py`) builds it and hands it to the core inside the `TurnServices`.
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import Any

from acp_server.agent.sessions.edge import Ports, SessionEvent, TurnSink
from acp_server.agent.sessions.runs import RunContext
from acp_server.jsonrpc.connection import Connection
from acp_server.protocol.editor import (
    EditorFileSystem,
    EditorQuestions,
    EditorTerminalRunner,
    PermissionGate,
    SplitFileSystem,
)
from acp_server.protocol.editor_connection import Handshake
from acp_server.protocol.updates import TurnUpdates, session_update
from acp_server.protocol.v2.permissions import asking_v2
from acp_server.protocol.v2.terminals import TerminalRunner
from acp_server.protocol.v2.updates import V2TurnUpdates, session_update_v2
from acp_server.runtime.local_commands import LocalCommandRunner
from acp_server.runtime.local_fs import LocalFileSystem
from acp_server.runtime.ports import CommandRunner, NoQuestions, Questions
from acp_server.runtime.processes import ProcessTable
from acp_server.runtime.sandbox import Sandbox, Unconfined
from acp_server.settings.config import Config

__all__ = ["AcpEdge"]


class AcpEdge:
    """ACP over one connection, in the version its `initialize` chose."""

    def __init__(
        self,
        connection: Connection,
        config: Config,
        processes: ProcessTable,
        handshake: Handshake,
        sandbox: Sandbox | Unconfined | None = None,
    ) -> None:
        """`sandbox`: how local commands are confined (None: not at all; Unconfined: asked for, but impossible
        here), decided once at start-up."""
        self._connection = connection
        self._config = config
        self._processes = processes
        self._handshake = handshake
        self._sandbox = sandbox

    def turn_sink(self, run: RunContext) -> TurnSink:
        if self._handshake.v2:
            return V2TurnUpdates(self._connection, run)
        return TurnUpdates(self._connection, run)

    def session_event(self, session_id: str, event: SessionEvent) -> None:
        update = session_update_v2(event) if self._handshake.v2 else session_update(event)
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

        async def request_v1(method: str, params: dict[str, Any]) -> Any:
            return await connection.request(method, params, fence=run)

        request = asking_v2(connection, run) if self._handshake.v2 else request_v1

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
        if self._handshake.v2:  # no client terminals in v2: local commands shown as display terminals
            commands = TerminalRunner(
                connection, run, self._processes, deadline, sandbox=self._sandbox, roots=session.sandbox_roots
            )
        elif session.client.terminals:
            commands = EditorTerminalRunner(request, session.session_id, deadline)
        else:
            commands = LocalCommandRunner(self._processes, deadline, self._sandbox, session.sandbox_roots)
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
        return Ports(fs, commands, PermissionGate(session, request, on_behalf_of), request, questions)
