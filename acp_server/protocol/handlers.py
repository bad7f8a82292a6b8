"""The ACP v1 methods, registered by their wire names in two literal tables (v2's are protocol/v2/handlers.py).

Requests are small typed `(context, params)` functions; jsonrpcserver dispatches them (see `rpc.py`). Notifications
are handled inline by the reader, in arrival order, and never answered, even when invalid. `session/prompt` is
special in one way only: it is admitted in `AcpDispatcher.prepare`, synchronously, when its line is read. These are
the start-up side's methods; the session lifecycle's (`session_handlers.py`) are served by the deferred side once it is
loaded, from its own table (`deferred_methods.py`), and listed here by wire name only (`DEFERRED_SIDE_METHODS`). What
both versions do alike is in `shared_methods.py`.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from acp_server import __version__
from acp_server.agent.sessions.options import PROMPT_POLICIES
from acp_server.jsonrpc.rpc import ErrorCode, RpcError
from acp_server.protocol.context import Handler, NotificationHandler, RequestContext
from acp_server.protocol.initialize import InitializeParams
from acp_server.protocol.mcp_over_acp import MCP_MESSAGE_NOTIFICATION, MCP_MESSAGE_REQUEST
from acp_server.protocol.params import INITIALIZE, wire
from acp_server.protocol.provider_methods import auth_status, providers_disable, providers_list, providers_set
from acp_server.protocol.shared_methods import NO_PARAMS, log_in, log_out, not_saved, stats, taken_media

if TYPE_CHECKING:  # the models are imported on first use (protocol/params.py)
    from acp_server.protocol.editor_connection import EditorConnection
    from acp_server.protocol.schema import (
        AuthenticateRequest,
        CancelNotification,
        CancelRequestNotification,
        LogoutRequest,
        PromptRequest,
    )

__all__ = ["DEFERRED_SIDE_METHODS", "METHODS", "NOTIFICATIONS", "authenticate", "logout"]

PROTOCOL_VERSION = 1

log = logging.getLogger(__name__)


# --- requests ---


async def initialize(context: RequestContext, params: InitializeParams) -> dict[str, Any]:
    # The client's capabilities and the version were recorded in AcpDispatcher.prepare, in reader order
    # (protocol/v2/negotiation.py: 1 -> 1, 2 and above -> 2, else -32022; only 1 with `--protocol 1`). A connection
    # that chose v2 is served v2's `initialize` (protocol/v2/initialize.py).
    if context.admission_error is not None:
        raise context.admission_error
    agent, connection = context.agent, context.connection
    stored = agent.config.store  # loading, listing and resuming need the session store
    taken = await taken_media(context)
    return {
        "protocolVersion": PROTOCOL_VERSION,
        "agentCapabilities": {
            "loadSession": stored,
            "promptCapabilities": {"image": "image" in taken, "audio": "audio" in taken, "embeddedContext": True},
            # stdio always (ACP); `acp` (unstable): servers the client offers over ACP itself, their traffic in
            # `mcp/message` (mcp_bridge/over_acp.py). See acp_server/mcp_bridge.
            "mcpCapabilities": {"http": True, "sse": True, "acp": True},
            # `logout` forgets the keys until the next `authenticate`; `status` (unstable) is `auth/status`, and
            # `providers` (unstable) the `providers/*` methods (protocol/provider_methods.py).
            "auth": {"logout": {}, "status": {}},
            "providers": {},
            "sessionCapabilities": {
                "additionalDirectories": {},
                "close": {},
                # `fork`, `archive`, `status` and `title` are unstable in ACP v1 (schema.unstable.json); clients that
                # do not know them ignore them. `archive` also means `session/list`'s filter and `archived` flag.
                **(
                    {"list": {}, "resume": {}, "delete": {}, "fork": {}, "archive": {}, "status": {}, "title": {}}
                    if stored
                    else {}
                ),
            },
            "_meta": {
                "acpServer": {
                    "promptPolicies": [policy.value for policy in PROMPT_POLICIES],
                    "defaultPromptPolicy": agent.config.prompt_policy,
                    "extensionMethods": ["_acp_server/stats"],
                    "extensionNotifications": list(connection.extension_notifications),
                }
            },
        },
        "authMethods": _auth_methods(connection),
        "agentInfo": {"name": "acp-server", "title": "acp-server", "version": __version__},
    }


AUTH_METHOD_ID = "api-key"


def _auth_methods(connection: EditorConnection) -> list[dict[str, Any]]:
    """Offered only while a key is missing: the description says exactly where to put it (ACP `agent` method)."""
    problem = connection.handshake.auth_problem  # as `initialize` was read (protocol/editor_connection.py)
    if problem is None:
        return []
    return [{"id": AUTH_METHOD_ID, "name": "API key", "description": problem}]


async def authenticate(context: RequestContext, params: AuthenticateRequest) -> dict[str, Any]:
    """Re-read the configuration and environment for the key. Instant, idempotent, never interactive."""
    if params.method_id != AUTH_METHOD_ID:
        raise RpcError(ErrorCode.INVALID_PARAMS, f"Invalid params: methodId: unknown auth method {params.method_id!r}")
    return log_in(context)


async def logout(context: RequestContext, params: LogoutRequest) -> dict[str, Any]:
    """Forget the keys until the next `authenticate`, for this connection (agent/providers.py). Idempotent."""
    return log_out(context)


async def session_prompt(context: RequestContext, params: PromptRequest) -> dict[str, Any]:
    if context.admission_error is not None:
        raise context.admission_error
    assert context.run is not None, "a valid prompt is always admitted or refused in prepare()"
    context.connection.credentials.require_for(context.run.session.model)  # a model that takes no key is never refused
    from acp_server.agent.sessions.turn import execute_prompt  # noqa: PLC0415 (start-up: the deferred side loads after `initialize`)

    # A turn that fails raises `TurnFailedError`, answered as protocol/wire_errors.py says.
    stop_reason = await execute_prompt(context.agent.turns, context.run)
    if not context.run.saved:  # its commit failed: the outcome holds, but nothing claims it survives a restart
        return {"stopReason": stop_reason, "_meta": not_saved()}
    return {"stopReason": stop_reason}


METHODS: dict[str, Handler] = {
    "initialize": (INITIALIZE, initialize),
    "session/prompt": (wire("PromptRequest"), session_prompt),
    "_acp_server/stats": (NO_PARAMS, stats),
    # Unstable, the connection's own (REMOTE.md decision 10): protocol/provider_methods.py.
    "auth/status": (NO_PARAMS, auth_status),
    "providers/list": (NO_PARAMS, providers_list),
    "providers/set": (wire("SetProviderRequest"), providers_set),
    "providers/disable": (wire("DisableProviderRequest"), providers_disable),
    # Unstable MCP-over-ACP (protocol/mcp_over_acp.py): we call the client's servers; we offer none.
    "mcp/message": MCP_MESSAGE_REQUEST,
}

# Served by the deferred side once it is loaded (protocol/deferred_methods.py `DEFERRED_METHODS`: their params and
# handlers), listed here by wire name only: a request for one waits for that load (protocol/deferred.py).
# `authenticate` and `logout` are start-up code served there, in order behind the requests pipelined before them.
DEFERRED_SIDE_METHODS = frozenset(
    {
        "authenticate",
        "logout",
        "session/new",
        "session/set_mode",
        "session/set_config_option",
        "session/close",
        "session/load",
        "session/resume",
        "session/list",
        "session/delete",
        "session/fork",
        "session/set_title",
        "session/status",
        "session/archive",
        "session/unarchive",
    }
)


# --- notifications ---


def session_cancel(connection: EditorConnection, params: CancelNotification) -> None:
    """Routed by session id, and only to a session of this connection: another editor's session is untouched."""
    runs = connection.agent.runs
    run = runs.running(params.session_id)
    if run is not None and connection.owns(run.session):
        runs.interrupt(params.session_id)


def cancel_request(connection: EditorConnection, params: CancelRequestNotification) -> None:
    run = connection.prompts.get(params.request_id)  # this connection's own prompts
    if run is not None:
        connection.agent.runs.cancel_run(run)
    # Every other request of ours answers at once, so there is nothing else to cancel: ignored, as ACP allows.


NOTIFICATIONS: dict[str, NotificationHandler] = {
    "session/cancel": (wire("CancelNotification"), session_cancel),
    "$/cancel_request": (wire("CancelRequestNotification"), cancel_request),
    # Unstable MCP-over-ACP: the client's MCP notifications for our requests in flight (protocol/mcp_over_acp.py).
    "mcp/message": MCP_MESSAGE_NOTIFICATION,
}
