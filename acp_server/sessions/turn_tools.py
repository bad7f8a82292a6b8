"""What a turn's tools reach: the editor's files and terminals when the client offers them, else the local machine,
and the permission gate; plus the per-call `ToolContext` built from them.

Built once per turn (the ports) and once per tool call (the context); nothing here outlives the turn.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from acp_server.protocol.editor import EditorFileSystem, EditorTerminalRunner, PermissionGate, SplitFileSystem
from acp_server.runtime.local_commands import LocalCommandRunner
from acp_server.runtime.local_fs import LocalFileSystem
from acp_server.runtime.model import Emit, Probe, ToolCall
from acp_server.runtime.ports import CommandRunner, FileSystem, Permissions, Subagents
from acp_server.runtime.tools import ToolContext
from acp_server.sessions.runs import RunContext

if TYPE_CHECKING:
    from acp_server.sessions.services import TurnServices

__all__ = ["Ports", "bound_probe", "tool_context", "tool_ports"]


def bound_probe(services: TurnServices, run: RunContext) -> Probe:
    def probe(event: str, **fields: Any) -> None:
        services.probe(run, event, **fields)

    return probe


@dataclass(frozen=True, slots=True)
class Ports:
    """The outside world of one turn's tools: the editor's where the client offers it, else the local machine."""

    fs: FileSystem
    commands: CommandRunner
    permissions: Permissions
    request: Callable[[str, dict[str, Any]], Awaitable[Any]]


def tool_ports(services: TurnServices, run: RunContext, on_behalf_of: str | None = None) -> Ports:
    """`on_behalf_of`: for a subagent's tools, the parent's `delegate` tool call its permission questions name."""
    session = run.session
    grace = services.config.cleanup_deadline

    async def request(method: str, params: dict[str, Any]) -> Any:
        return await services.connection.request(method, params, fence=run)

    def deadline() -> float:
        return run.cleanup_deadline(grace)

    roots = (session.cwd, *session.additional_directories)
    local_fs = LocalFileSystem(roots)
    editor_fs = EditorFileSystem(request, session.session_id, roots, local_fs)
    fs = SplitFileSystem(
        editor_fs if session.client.fs.read_text_file else local_fs,
        editor_fs if session.client.fs.write_text_file else local_fs,
    )
    commands: CommandRunner = (
        EditorTerminalRunner(request, session.session_id, deadline)
        if session.client.terminal
        else LocalCommandRunner(services.processes, deadline)
    )
    return Ports(fs, commands, PermissionGate(session, request, on_behalf_of), request)


def tool_context(
    services: TurnServices, run: RunContext, ports: Ports, call: ToolCall, *, emit: Emit, subagents: Subagents
) -> ToolContext:
    session = run.session
    return ToolContext(
        session_id=run.session_id,
        tool_call_id=call.id,
        tool_name=call.name,
        cwd=session.cwd,
        roots=(session.cwd, *session.additional_directories),
        fs=ports.fs,
        commands=ports.commands,
        permissions=ports.permissions,
        processes=services.processes,
        emit=emit,
        probe=bound_probe(services, run),
        cleanup_deadline=lambda: run.cleanup_deadline(services.config.cleanup_deadline),
        client_request=ports.request,
        subagents=subagents,
    )
