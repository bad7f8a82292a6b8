"""Permission questions and `ask_user`'s forms on a v2 connection (ACP-V2.md §12, §15, §23 Q13): the same
`PermissionGate` and `EditorQuestions` ask, and this wraps their request. The permission params are v2's (`title` and
a `tool_call` subject instead of v1's bare `toolCall`, v2 content); an `elicitation/create` in form mode is already
v2's shape (session scope, `toolCallId`, `mode`, `message`, `requestedSchema`). For both, the foreground state says
`requires_action` while the answer is awaited, then `running` again however the wait ends (not after a cancel of the
work: it then ends with its `idle`). Both state updates go through the turn's fence.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from acp_server.agent.sessions.runs import RunContext
from acp_server.jsonrpc.connection import Connection
from acp_server.protocol.v2.updates import requires_action, running, to_v2

__all__ = ["asking_v2", "permission_params_v2"]

PERMISSION = "session/request_permission"
ELICITATION = "elicitation/create"


def permission_params_v2(params: dict[str, Any], session_cwd: Path) -> dict[str, Any]:
    """v1's `session/request_permission` params as v2's: a command line asks with a `command` subject (what is run
    and where; approval lets us run it), anything else with a `tool_call` subject (§12)."""
    tool_call = dict(params["toolCall"])
    raw = tool_call.get("rawInput")
    command = raw.get("command") if isinstance(raw, dict) and tool_call.get("kind") == "execute" else None
    subject: dict[str, Any]
    if isinstance(command, str):
        where = raw.get("cwd") if isinstance(raw, dict) else None
        cwd = session_cwd / where if isinstance(where, str) else session_cwd  # an absolute `where` replaces it
        subject = {"type": "command", "command": command, "cwd": str(cwd), "toolCallId": tool_call["toolCallId"]}
    else:
        shown = to_v2({"sessionUpdate": "tool_call_update", **tool_call}, None, None)
        del shown["sessionUpdate"]
        subject = {"type": "tool_call", "toolCall": shown}
    v2: dict[str, Any] = {
        "sessionId": params["sessionId"],
        "title": str(tool_call.get("title") or "Allow this tool call?"),
        "subject": subject,
        "options": params["options"],
    }
    if "_meta" in params:
        v2["_meta"] = params["_meta"]
    return v2


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
        if method == PERMISSION:
            params = permission_params_v2(params, run.session.cwd)
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
