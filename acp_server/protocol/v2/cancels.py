"""`tool_call/cancel` (ACP-V2.md §20.3): stop one running tool call and let the turn go on.

Routed by its ids like every cancel: `RunRegistry.tool_call_stop` looks in the session's running turn for the call's
own stop (kept by runtime/loop.py while a cancellable call runs). The call is stopped the
moment `{}` is queued, so the answer always precedes the call's final `tool_call_update` (`cancelled`, or `completed` /
`failed` if it finished first); a call that ignores the stop is abandoned at the cleanup deadline and ends `cancelled`
(runtime/call_stops.py). The foreground state does not change; the model is told the user cancelled the call.
An unknown, finished or non-cancellable call is `-32602`; an unknown session `-32002`.
"""

from __future__ import annotations

from typing import Any

from acp_server.jsonrpc.rpc import ErrorCode, RpcError
from acp_server.protocol.context import RequestContext
from acp_server.protocol.v2.schema import CancelToolCallRequest

__all__ = ["not_running", "tool_call_cancel"]


def not_running(field: str, what: str) -> RpcError:
    """The `-32602` of a by-id cancel naming nothing running and cancellable in its session."""
    return RpcError(ErrorCode.INVALID_PARAMS, f"Invalid params: {field}: no running cancellable {what} in this session")


async def tool_call_cancel(context: RequestContext, params: CancelToolCallRequest) -> dict[str, Any]:
    context.connection.session(params.session_id, even_if_lost=True)  # this connection's own sessions only: else -32002
    stop = context.agent.runs.tool_call_stop(params.session_id, params.tool_call_id)
    if stop is None:
        raise not_running("toolCallId", f"tool call {params.tool_call_id!r}")
    # After the response is queued: `{}` (accepted) always precedes the call's final update.
    context.after.append(stop)
    return {}
