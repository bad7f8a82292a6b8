"""Permission questions and `ask_user`'s forms on a v2 connection (ACP-V2.md §12, §15, §23 Q13): the same
`PermissionGate` and `EditorQuestions` ask, in v2's words. The permission params are v2's own (`permission_params_v2`,
the gate's question on v2: `title` and a `command` or `tool_call` subject instead of v1's bare `toolCall`, v2
content); an `elicitation/create` in form mode is already v2's shape (session scope, `toolCallId`, `mode`, `message`,
`requestedSchema`). For both, the foreground state says `requires_action` while the answer is awaited, then
`running` again however the wait ends (not after a cancel of the work: it then ends with its `idle`). Both state
updates go through the turn's fence.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from acp_server.agent.sessions.runs import RunContext, Session
from acp_server.jsonrpc.connection import Connection
from acp_server.protocol.v2.updates import requires_action, running, tool_content_v2
from acp_server.runtime.ports import PermissionRequest

__all__ = ["asking_v2", "permission_params_v2"]

PERMISSION = "session/request_permission"
ELICITATION = "elicitation/create"


def permission_params_v2(
    session: Session, request: PermissionRequest, options: list[dict[str, Any]], meta: dict[str, Any] | None
) -> dict[str, Any]:
    """The params of v2's `session/request_permission`: a command line asks with a `command` subject (what is run and
    where; approval lets us run it), anything else with a `tool_call` subject in v2's shape (§12)."""
    raw = request.raw_input
    command = raw.get("command") if isinstance(raw, dict) and request.kind == "execute" else None
    subject: dict[str, Any]
    if isinstance(command, str):
        where = raw.get("cwd") if isinstance(raw, dict) else None
        cwd = session.cwd / where if isinstance(where, str) else session.cwd  # an absolute `where` replaces it
        subject = {"type": "command", "command": command, "cwd": str(cwd), "toolCallId": request.tool_call_id}
    else:
        tool_call: dict[str, Any] = {
            "toolCallId": request.tool_call_id,
            "title": request.title,
            "kind": request.kind,
            "status": "pending",
            "rawInput": request.raw_input,
            "content": [tool_content_v2(c) for c in request.content],
            "locations": [{"path": p} for p in request.locations],
        }
        if meta is not None:
            tool_call["_meta"] = meta
        subject = {"type": "tool_call", "toolCall": tool_call}
    params: dict[str, Any] = {
        "sessionId": session.session_id,
        "title": request.title or "Allow this tool call?",
        "subject": subject,
        "options": options,
    }
    if meta is not None:
        params["_meta"] = meta
    return params


def asking_v2(connection: Connection, run: RunContext) -> Callable[[str, dict[str, Any]], Awaitable[Any]]:
    """The turn's request to the client, with a permission question or a form asked the v2 way."""
    # A subagent's question blocks its parent's foreground work: the state is the parent session's.
    session_id = run.parent_session_id or run.session_id

    async def state(update: dict[str, Any]) -> None:
        message = {"jsonrpc": "2.0", "method": "session/update", "params": {"sessionId": session_id, "update": update}}
        await connection.send_fenced(message, run)

    async def request(method: str, params: dict[str, Any]) -> Any:
        if method not in (PERMISSION, ELICITATION):
            return await connection.request(method, params, fence=run)
        run.asking += 1  # what a resume's snapshot reads (protocol/v2/sessions.py)
        try:
            await state(requires_action())
            return await connection.request(method, params, fence=run)
        finally:
            run.asking -= 1
            # However the wait ends (an answer, an error, or the call stopped alone by `tool_call/cancel`), the
            # foreground is `running` again (§6.2), unless the work itself was cancelled: it then ends with its
            # `idle`. Synchronous, so it is queued even while a cancel unwinds this frame.
            if not run.cancelled and not run.fenced:
                update = running()
                connection.notify("session/update", {"sessionId": session_id, "update": update})

    return request
