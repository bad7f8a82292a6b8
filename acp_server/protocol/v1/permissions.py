"""The permission question in ACP v1's shape: `session/request_permission` with the tool call as `toolCall`.

`PermissionGate` (protocol/editor.py) decides when to ask and reads the answer, the same on both versions; each version
says how it asks (v2's is protocol/v2/permissions.py).
"""

from __future__ import annotations

from typing import Any

from acp_server.agent.sessions.runs import Session
from acp_server.protocol.v1.updates import tool_content
from acp_server.runtime.ports import PermissionRequest

__all__ = ["permission_params"]


def permission_params(
    session: Session, request: PermissionRequest, options: list[dict[str, Any]], meta: dict[str, Any] | None
) -> dict[str, Any]:
    """The params of v1's `session/request_permission` (`meta`: on the tool call and on the request, so a client finds
    it where it looks)."""
    tool_call: dict[str, Any] = {
        "toolCallId": request.tool_call_id,
        "title": request.title,
        "kind": request.kind,
        "status": "pending",
        "rawInput": request.raw_input,
        "content": [tool_content(c) for c in request.content],
        "locations": [{"path": p} for p in request.locations],
    }
    params: dict[str, Any] = {"sessionId": session.session_id, "toolCall": tool_call, "options": options}
    if meta is not None:
        tool_call["_meta"] = params["_meta"] = meta
    return params
