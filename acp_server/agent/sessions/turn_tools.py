"""What a turn's tools reach: the ports the protocol edge builds (the editor's files and terminals when the client
offers them, else the local machine, and the permission gate), and the per-call `ToolContext` built from them.

Built once per turn (the ports) and once per tool call (the context); nothing here outlives the turn.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from acp_server.agent.sessions.edge import Ports, edge_of
from acp_server.agent.sessions.runs import RunContext
from acp_server.runtime.model import Emit, Probe, ToolCall
from acp_server.runtime.ports import Subagents
from acp_server.runtime.tools import ToolContext

if TYPE_CHECKING:
    from acp_server.agent.sessions.services import TurnServices

__all__ = ["Ports", "bound_probe", "tool_context", "tool_ports"]


def bound_probe(services: TurnServices, run: RunContext) -> Probe:
    def probe(event: str, **fields: Any) -> None:
        services.probe(run, event, **fields)

    return probe


def tool_ports(services: TurnServices, run: RunContext, on_behalf_of: str | None = None) -> Ports:
    """`on_behalf_of`: for a subagent's tools, the parent's `delegate` tool call its permission questions name."""
    return edge_of(run.session).tool_ports(run, on_behalf_of)


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
        questions=ports.questions,
    )
