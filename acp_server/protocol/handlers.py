"""The ACP methods, registered by their wire names in two literal tables.

Requests are small typed `(context, params)` functions; jsonrpcserver dispatches them (see `rpc.py`). Notifications
are handled inline by the reader, in arrival order, and never answered, even when invalid. `session/prompt` is
special in one way only: it is admitted in `AcpDispatcher.prepare`, synchronously, when its line is read. These are
the start-up side's methods; the session lifecycle's (`session_handlers.py`) are served by the session side once it is
loaded, from its own table (`session_methods.py`), and listed here by wire name only (`SESSION_SIDE_METHODS`).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

import anyio

from acp_server import __version__
from acp_server.agent.sessions.options import PROMPT_POLICIES
from acp_server.errors import MissingCredentialsError
from acp_server.jsonrpc.rpc import ErrorCode, RpcError
from acp_server.protocol.context import Handler, NotificationHandler, Parts, RequestContext
from acp_server.protocol.discovery import discover_models
from acp_server.protocol.initialize import InitializeParams
from acp_server.protocol.params import INITIALIZE, wire
from acp_server.protocol.providers import close_providers
from acp_server.protocol.store_access import not_saved
from acp_server.protocol.v2.initialize import initialize_result

if TYPE_CHECKING:  # the models are imported on first use (protocol/params.py)
    from acp_server.protocol.schema import (
        AuthenticateRequest,
        CancelNotification,
        CancelRequestNotification,
        LogoutRequest,
        PromptRequest,
    )

__all__ = ["METHODS", "NOTIFICATIONS", "NO_PARAMS", "SESSION_SIDE_METHODS", "log_in", "log_out"]

PROTOCOL_VERSION = 1

log = logging.getLogger(__name__)


# `_acp_server/stats`: no params of its own (`_meta` and unknown fields allowed, as everywhere).
NO_PARAMS = wire("NoParams")


# --- requests ---


async def initialize(context: RequestContext, params: InitializeParams) -> dict[str, Any]:
    # The client's capabilities and the version were recorded in AcpDispatcher.prepare, in reader order
    # (protocol/v2/negotiation.py: 1 -> 1, 2 and above -> 2, else -32022; only 1 with `--protocol 1`).
    if context.admission_error is not None:
        raise context.admission_error
    parts = context.parts
    stored = context.parts.config.store  # loading, listing and resuming need the session store
    # The endpoints' models lists: the cached ones read in a worker thread (awaited: a short local read, off the
    # event loop), a refresh in the background (never awaited); a session/new right behind offers them.
    discover_models(context.parts)
    await context.parts.models.ready()
    # Images (sounds) when any model a session may pick takes them; a prompt for one that does not is refused then.
    taken = frozenset().union(*(context.parts.config.accepts(spec) for spec in context.parts.models.current))
    # Once this answer is out: the session side loaded (protocol/deferred.py), then the default model warmed
    # (protocol/warmup.py); a session on another model warms its own when it opens.
    context.after.append(lambda: parts.connection.spawn(_warm_up_after_initialize, parts))
    if parts.handshake.v2:
        return initialize_result(parts, taken)
    return {
        "protocolVersion": PROTOCOL_VERSION,
        "agentCapabilities": {
            "loadSession": stored,
            "promptCapabilities": {"image": "image" in taken, "audio": "audio" in taken, "embeddedContext": True},
            "mcpCapabilities": {"http": True, "sse": True},  # stdio always (ACP); see acp_server/mcp_bridge
            "auth": {"logout": {}},  # `logout` forgets the keys until the next `authenticate`
            "sessionCapabilities": {
                "additionalDirectories": {},
                "close": {},
                # `fork` is unstable in ACP v1 (schema.unstable.json); clients that do not know it ignore it.
                **({"list": {}, "resume": {}, "delete": {}, "fork": {}} if stored else {}),
            },
            "_meta": {
                "acpServer": {
                    "promptPolicies": [policy.value for policy in PROMPT_POLICIES],
                    "defaultPromptPolicy": context.parts.config.prompt_policy,
                    "extensionMethods": ["_acp_server/stats"],
                    "extensionNotifications": list(context.parts.extension_notifications),
                }
            },
        },
        "authMethods": _auth_methods(context.parts),
        "agentInfo": {"name": "acp-server", "title": "acp-server", "version": __version__},
    }


async def _warm_up_after_initialize(parts: Parts) -> None:
    """Load the session side, then warm the default model (protocol/warmup.py). Counted as a warm-up throughout
    (`_acp_server/stats`), so a test that waits for the warm-ups to end waits for the load too.

    Nothing is started once the input has ended (the connection is shutting down). A session side that cannot be
    loaded is said once on stderr and ends this task alone: the connection goes on, answering each request that
    needs the side that error (protocol/deferred.py)."""
    if parts.connection.closing:
        return
    parts.providers.warm_ups_running += 1
    try:
        await parts.session_side.load()
        tools = parts.turns.tools
    except Exception as exc:  # a broken install (an RpcError naming the module); a cancel goes on as one
        log.error("%s", exc, exc_info=exc.__cause__)
        return
    finally:
        parts.providers.warm_ups_running -= 1
    if parts.connection.closing:
        return
    from acp_server.protocol.warmup import warm_up  # noqa: PLC0415 (start-up: the session side loads after `initialize`)

    await warm_up(parts.providers, tools, parts.config.model)


AUTH_METHOD_ID = "api-key"


def _auth_methods(parts: Parts) -> list[dict[str, Any]]:
    """Offered only while a key is missing: the description says exactly where to put it (ACP `agent` method)."""
    problem = parts.handshake.auth_problem  # as `initialize` was read (protocol/session_table.py)
    if problem is None:
        return []
    return [{"id": AUTH_METHOD_ID, "name": "API key", "description": problem}]


async def authenticate(context: RequestContext, params: AuthenticateRequest) -> dict[str, Any]:
    """Re-read the configuration and environment for the key. Instant, idempotent, never interactive."""
    if params.method_id != AUTH_METHOD_ID:
        raise RpcError(ErrorCode.INVALID_PARAMS, f"Invalid params: methodId: unknown auth method {params.method_id!r}")
    return log_in(context)


def log_in(context: RequestContext) -> dict[str, Any]:
    """What v1's `authenticate` and v2's `auth/login` do once the method is known: end a logout, look for the key
    again, and let the endpoints that needed it be asked for their models."""
    parts = context.parts
    was_missing = parts.auth.problem is not None
    if not parts.auth.authenticate():
        raise MissingCredentialsError(parts.auth.problem)
    if was_missing:
        parts.models.credentials_changed()  # the endpoints that could not be asked without a key can be now
        context.after.append(lambda: discover_models(parts))
    return {}


async def logout(context: RequestContext, params: LogoutRequest) -> dict[str, Any]:
    """Forget the keys this process holds until the next `authenticate` (protocol/providers.py). Idempotent."""
    return log_out(context)


def log_out(context: RequestContext) -> dict[str, Any]:
    """What v1's `logout` and v2's `auth/logout` do: forget the keys; the dropped providers' clients are closed
    later."""
    parts = context.parts
    dropped = parts.auth.logout()
    if dropped:  # their clients are closed in a task of the connection, once the turns running now have ended
        running = parts.runs.current()
        deadline = parts.config.cleanup_deadline
        context.after.append(lambda: parts.connection.spawn(close_providers, dropped, running, deadline))
    return {}


async def session_prompt(context: RequestContext, params: PromptRequest) -> dict[str, Any]:
    if context.admission_error is not None:
        raise context.admission_error
    assert context.run is not None, "a valid prompt is always admitted or refused in prepare()"
    context.parts.auth.require_for(context.run.session.model)  # a model that takes no key is never refused
    from acp_server.agent.sessions.turn import execute_prompt  # noqa: PLC0415 (start-up: the session side loads after `initialize`)

    # A turn that fails raises `TurnFailedError`, answered as protocol/wire_errors.py says.
    stop_reason = await execute_prompt(context.parts.turns, context.run)
    if not context.run.saved:  # its commit failed: the outcome holds, but nothing claims it survives a restart
        return {"stopReason": stop_reason, "_meta": not_saved()}
    return {"stopReason": stop_reason}


async def stats(context: RequestContext, params: object) -> dict[str, Any]:
    """Live counts, so tests and users can see that nothing leaks. The request's own task is counted."""
    parts = context.parts
    sessions = list(parts.sessions)
    return {
        "sessions": len(sessions),
        "runningTurns": parts.runs.running_turns,
        "queuedPrompts": parts.runs.queued_prompts(sessions),
        "pendingClientRequests": parts.connection.pending_client_requests,
        "requestsInFlight": parts.connection.requests_in_flight,
        "tasks": len(anyio.get_running_tasks()),
        # Background warm-ups of a model (protocol/warmup.py) among those tasks: they end on their own, so a test
        # that counts tasks before and after takes its "before" once they have.
        "warmUps": parts.providers.warm_ups_running,
        "childProcesses": len(parts.processes),
        # Sessions whose MCP servers are not all shut down yet (closed sessions' servers included until they are).
        "mcpSessions": len(parts.mcp),
        **_traced_bytes(),
    }


def _traced_bytes() -> dict[str, int]:
    """`tracedBytes`: what Python holds allocated right now, when it traces allocations (`PYTHONTRACEMALLOC=1`), so
    a test (or a user) can see that what a turn allocated was let go, without collecting anything first: memory only
    the cyclic collector would free counts, since the server runs it rarely (server.GC_THRESHOLD). Absent otherwise."""
    import tracemalloc  # noqa: PLC0415 (start-up: tracemalloc only for the stats request)

    return {"tracedBytes": tracemalloc.get_traced_memory()[0]} if tracemalloc.is_tracing() else {}


METHODS: dict[str, Handler] = {
    "initialize": (INITIALIZE, initialize),
    "session/prompt": (wire("PromptRequest"), session_prompt),
    "_acp_server/stats": (NO_PARAMS, stats),
}

# Served by the session side once it is loaded (protocol/session_methods.py `SESSION_METHODS`: their params and
# handlers), listed here by wire name only: a request for one waits for that load (protocol/deferred.py).
# `authenticate` and `logout` are start-up code served there, in order behind the requests pipelined before them.
SESSION_SIDE_METHODS = frozenset(
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
    }
)


# --- notifications ---


def session_cancel(parts: Parts, params: CancelNotification) -> None:
    parts.runs.interrupt(params.session_id)


def cancel_request(parts: Parts, params: CancelRequestNotification) -> None:
    run = parts.prompts.get(params.request_id)
    if run is not None:
        parts.runs.cancel_run(run)
    # Every other request of ours answers at once, so there is nothing else to cancel: ignored, as ACP allows.


NOTIFICATIONS: dict[str, NotificationHandler] = {
    "session/cancel": (wire("CancelNotification"), session_cancel),
    "$/cancel_request": (wire("CancelRequestNotification"), cancel_request),
}
