"""`tool_call/cancel` (ACP-V2.md §20.3): stop one running tool call and let the turn go on.

Routed by its ids like every cancel: the session's running turn (`RunRegistry.running`), then the call's own scope in
the turn's `cancellable_calls` (kept by runtime/loop.py while a cancellable call runs). The scope is cancelled the
moment `{}` is queued, so the answer always precedes the call's final `tool_call_update` (`cancelled`, or `completed` /
`failed` if it finished first). The foreground state does not change; the model is told the user cancelled the call.
An unknown, finished or non-cancellable call is `-32602`; an unknown session `-32002`.
"""

from __future__ import annotations

from typing import Any

from acp_server.jsonrpc.rpc import ErrorCode, RpcError
from acp_server.protocol.context import RequestContext
from acp_server.protocol.v2.schema import CancelToolCallRequest

__all__ = ["tool_call_cancel"]


async def tool_call_cancel(context: RequestContext, params: CancelToolCallRequest) -> dict[str, Any]:
    parts = context.parts
    session = parts.sessions.require(params.session_id)
    run = parts.runs.running(session.session_id)
    scope = None if run is None or run.fenced else run.cancellable_calls.get(params.tool_call_id)
    if scope is None:
        raise RpcError(
            ErrorCode.INVALID_PARAMS,
            f"Invalid params: toolCallId: no running cancellable tool call {params.tool_call_id!r} in this session",
        )
    # After the response is queued: `{}` (accepted) always precedes the call's final update.
    context.after.append(scope.cancel)
    return {}
