"""`tool_call/cancel` (ACP-V2.md §20.3): stop one running tool call and let the turn go on.

Routed by its ids like every cancel: the session's running turn (`RunRegistry.running`), then the call's own stop in
the turn's `cancellable_calls` (kept by runtime/loop.py while a cancellable call runs). The call is stopped the
moment `{}` is queued, so the answer always precedes the call's final `tool_call_update` (`cancelled`, or `completed` /
`failed` if it finished first); a call that ignores the stop is abandoned at the cleanup deadline and ends `cancelled`
(runtime/call_stops.py). The foreground state does not change; the model is told the user cancelled the call.
An unknown, finished or non-cancellable call is `-32602`; an unknown session `-32002`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from acp_server.agent.sessions.runs import RunContext
from acp_server.jsonrpc.rpc import ErrorCode, RpcError
from acp_server.protocol.context import RequestContext
from acp_server.protocol.v2.schema import CancelToolCallRequest

__all__ = ["cancel_target", "tool_call_cancel"]

T = TypeVar("T")


def cancel_target(
    context: RequestContext, session_id: str, pick: Callable[[RunContext], T | None], field: str, what: str
) -> T:
    """What a by-id cancel names in the session's running, unfenced turn (`pick` looks it up there); an unknown
    session (or another connection's) is `-32002`, anything not running and cancellable `-32602` naming `field`
    and `what`."""
    session = context.connection.session(session_id)  # this connection's own sessions only
    run = context.agent.runs.running(session.session_id)
    target = None if run is None or run.fenced else pick(run)
    if target is None:
        raise RpcError(
            ErrorCode.INVALID_PARAMS, f"Invalid params: {field}: no running cancellable {what} in this session"
        )
    return target


async def tool_call_cancel(context: RequestContext, params: CancelToolCallRequest) -> dict[str, Any]:
    call_id = params.tool_call_id
    stop = cancel_target(
        context,
        params.session_id,
        lambda run: run.cancellable_calls.get(call_id),
        "toolCallId",
        f"tool call {call_id!r}",
    )
    # After the response is queued: `{}` (accepted) always precedes the call's final update.
    context.after.append(stop.cancel)
    return {}
