"""The methods a v2 connection serves, by wire name (ACP-V2.md §21.1). v1-only methods (`authenticate`, `logout`,
`session/load`, `session/set_mode`) are absent, so they are `-32601` on v2 (`auth/login` and `auth/logout` replace
the first two); `session/fork`, `set_title`, `status`, `archive` and `unarchive` are the draft's unstable ones
(v2/schema.unstable.json); `session/cancel`
cancels as v1's does and then answers the held prompts it withdrew (protocol/v2/withdrawals.py); `$/cancel_request` is
v2's own, acting only on a held prompt (see protocol/v2/prompt.py for what a withdrawn held prompt answers).

The start-up side's methods are in `METHODS_V2`; the deferred side's are in its own table
(protocol/deferred_methods.py `DEFERRED_METHODS_V2`), listed here by wire name (`DEFERRED_SIDE_METHODS_V2`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from acp_server.protocol.context import Handler, NotificationHandler, RequestContext
from acp_server.protocol.editor_connection import EditorConnection
from acp_server.protocol.mcp_over_acp import MCP_MESSAGE_NOTIFICATION, MCP_MESSAGE_REQUEST
from acp_server.protocol.params import INITIALIZE, wire
from acp_server.protocol.provider_methods import auth_status, providers_disable, providers_list, providers_set
from acp_server.protocol.shared_methods import NO_PARAMS, stats
from acp_server.protocol.v2.initialize import initialize_v2
from acp_server.protocol.v2.withdrawals import session_cancel_v2, withdraw

if TYPE_CHECKING:  # imported on first use (protocol/params.py)
    from acp_server.protocol.schema import CancelRequestNotification, PromptRequest

__all__ = ["DEFERRED_SIDE_METHODS_V2", "METHODS_V2", "NOTIFICATIONS_V2"]


async def session_prompt(context: RequestContext, params: PromptRequest) -> dict[str, Any]:
    """`session/prompt` on v2 (protocol/v2/prompt.py). Admitted or refused as its line is read, like v1's: a refused
    one is answered at once; an admitted one names an open session, so the deferred side is loaded."""
    if context.admission_error is not None:
        raise context.admission_error
    from acp_server.protocol.v2.prompt import session_prompt_v2  # noqa: PLC0415 (start-up: the deferred side, loaded once a session is open)

    return await session_prompt_v2(context, params)


METHODS_V2: dict[str, Handler] = {
    "initialize": (INITIALIZE, initialize_v2),
    "session/prompt": (wire("PromptRequest"), session_prompt),
    "_acp_server/stats": (NO_PARAMS, stats),
    # Unstable, as on v1 (protocol/provider_methods.py).
    "auth/status": (NO_PARAMS, auth_status),
    "providers/list": (NO_PARAMS, providers_list),
    "providers/set": (wire("SetProviderRequest"), providers_set),
    "providers/disable": (wire("DisableProviderRequest"), providers_disable),
    # Unstable MCP-over-ACP, as on v1 (protocol/mcp_over_acp.py).
    "mcp/message": MCP_MESSAGE_REQUEST,
}

# Served by the deferred side once it is loaded (protocol/deferred_methods.py `DEFERRED_METHODS_V2`: their params and
# handlers), listed here by wire name only: a request for one waits for that load (protocol/deferred.py).
# `auth/login` and `auth/logout` are start-up code served there, in order behind the requests pipelined before them.
DEFERRED_SIDE_METHODS_V2 = frozenset(
    {
        "auth/login",
        "auth/logout",
        "session/new",
        "session/set_config_option",
        "session/close",
        "session/resume",
        "session/list",
        "session/delete",
        "session/fork",
        "session/set_title",
        "session/status",
        "session/archive",
        "session/unarchive",
        "tool_call/cancel",
        "terminal/cancel",
    }
)


def cancel_request_v2(connection: EditorConnection, params: CancelRequestNotification) -> None:
    """`$/cancel_request` on v2 (§20.5, §23 Q10): it withdraws a prompt still held (QUEUED, not inserted) and
    nothing else. A prompt inserted at admission (an idle session) is already the session's work, whose only
    cancel is `session/cancel`: naming it is ignored, as is naming any other request."""
    run = connection.prompts.get(params.request_id)  # this connection's own prompts
    if run is not None and connection.agent.runs.cancel_held(run):
        withdraw(connection, run)  # answered -32800 now (protocol/v2/withdrawals.py)


NOTIFICATIONS_V2: dict[str, NotificationHandler] = {
    "session/cancel": (wire("CancelNotification"), session_cancel_v2),
    "$/cancel_request": (wire("CancelRequestNotification"), cancel_request_v2),
    "mcp/message": MCP_MESSAGE_NOTIFICATION,
}
