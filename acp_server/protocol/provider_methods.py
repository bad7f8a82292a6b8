"""ACP's unstable `auth/status` (with the `auth/status_update` notification) and `providers/list`, `providers/set`,
`providers/disable` (RFD "Configurable LLM Providers"), alike on v1 and v2 (both unstable schemas have them, in the
same shapes), advertised by `agentCapabilities.auth.status` / `capabilities.auth.status` and `providers`.

Everything here is the calling connection's (REMOTE.md decision 10): its `Credentials` (agent/providers.py) say what
it knows of each provider's key and hold its client's gateways (agent/routes.py). The status names where a key came
from and never the key. `auth/status_update` goes to this connection alone, when its status changes: after its
`authenticate` / `auth/login` / `logout` / `auth/logout`, its `providers/set` / `providers/disable`, or a model call of
one of its sessions refused for the key (401, 403).
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from acp_server.agent.routes import RouteError, base_url_problem
from acp_server.errors import SettingsError
from acp_server.jsonrpc.rpc import ErrorCode, RpcError
from acp_server.protocol.context import RequestContext
from acp_server.runtime.providers import ROUTED_FAMILIES, needs_credentials
from acp_server.settings.files import config_file, provider_credentials, read_config_file

if TYPE_CHECKING:
    from acp_server.protocol.editor_connection import EditorConnection
    from acp_server.protocol.schema import DisableProviderRequest, SetProviderRequest

__all__ = ["AUTH_STATUS_CAPABILITY", "PROVIDERS_CAPABILITY", "auth_status", "auth_status_changed", "key_refused"]

AUTH_STATUS_CAPABILITY: dict[str, Any] = {}
PROVIDERS_CAPABILITY: dict[str, Any] = {}

_NAMES = {"openai": "OpenAI", "anthropic": "Anthropic"}
_DEFAULT_URLS = {"openai": "https://api.openai.com/v1", "anthropic": "https://api.anthropic.com"}
_SAYS = {
    "server": "configured",
    "client": "set by this client",
    "missing": "missing",
    "refused": "refused by the endpoint",
    "logged_out": "logged out",
    "disabled": "disabled by this client",
}


def _server_keys(connection: EditorConnection) -> dict[str, tuple[str | None, str | None]]:
    """Per provider id: where the server's key comes from, in words (None: it has none), and its endpoint."""
    config = connection.agent.config
    try:
        file_settings = read_config_file(config_file(os.environ))
    except SettingsError:
        file_settings = {}
    found: dict[str, tuple[str | None, str | None]] = {}
    for family in ROUTED_FAMILIES:
        try:
            credentials = provider_credentials(family, file_settings, os.environ, config.base_url, config.model)
        except SettingsError:
            found[family] = (None, None)
            continue
        source = credentials.key_source if credentials.api_key else None
        found[family] = (source, credentials.base_url)
    return found


def status(connection: EditorConnection) -> dict[str, Any]:
    """This connection's `auth/status`: the state of the default model's provider, and an account per provider."""
    credentials = connection.credentials
    keys = _server_keys(connection)
    default = credentials.default_family
    accounts = []
    states: dict[str, str] = {}
    for family in ROUTED_FAMILIES:
        source, _ = keys[family]
        state = states[family] = credentials.key_state(family, source is not None)
        where = f", from the {source}" if state == "server" and source else ""
        accounts.append(
            {
                "label": f"{_NAMES[family]} API key ({_SAYS[state]}{where})",
                "active": state in ("server", "client") and family == default,
                "_meta": {"acpServer": {"providerId": family, "key": state}},
            }
        )
    if not needs_credentials(connection.agent.config.model):
        overall = "not_required"
    elif states[default] in ("server", "client") and (states[default] == "client" or credentials.problem is None):
        overall = "authenticated"
    else:
        overall = "unauthenticated"
    return {"state": overall, "accounts": accounts}


def auth_status_changed(connection: EditorConnection) -> None:
    """Send `auth/status_update` to this connection if its status differs from the last one it was given."""
    if connection.handshake.client_capabilities is None:
        return
    now = status(connection)
    if now != connection.credentials.reported:
        connection.credentials.reported = now
        connection.rpc.notify("auth/status_update", now)


def key_refused(connection: EditorConnection, spec: str) -> None:
    """A model call of one of this connection's sessions was refused for its key (401, 403)."""
    family = spec.partition(":")[0]
    if family in ROUTED_FAMILIES:
        connection.credentials.refused.add(family)
        auth_status_changed(connection)


async def auth_status(context: RequestContext, params: object) -> dict[str, Any]:
    """`auth/status`: never refused for want of authentication (the schema says clients call it to learn that)."""
    connection = context.connection
    connection.handshake.require_initialized()
    connection.credentials.reported = now = status(connection)
    return now


async def providers_list(context: RequestContext, params: object) -> dict[str, Any]:
    connection = context.connection
    connection.handshake.require_initialized()
    credentials = connection.credentials
    keys = _server_keys(connection)
    providers = []
    for family in ROUTED_FAMILIES:
        route = credentials.routes.routes.get(family)
        if family in credentials.routes.disabled:
            current = None
        elif route is not None:
            current = {"apiType": route.api_type, "baseUrl": route.base_url}
        else:
            current = {"apiType": family, "baseUrl": keys[family][1] or _DEFAULT_URLS[family]}
        providers.append({"providerId": family, "supported": [family], "required": False, "current": current})
    return {"providers": providers}


async def providers_set(context: RequestContext, params: SetProviderRequest) -> dict[str, Any]:
    """`providers/set`: this connection's sessions on that provider's models go to the client's gateway, with its
    headers and no key of the server's."""
    connection = context.connection
    connection.handshake.require_initialized()
    problem = base_url_problem(
        params.base_url, connection.agent.config.allow_provider_hosts, loopback_http=connection.whole_process
    )
    if problem is not None:
        raise RpcError(ErrorCode.INVALID_PARAMS, f"Invalid params: {problem}")
    credentials = connection.credentials
    try:
        dropped = credentials.routes.set(params.provider_id, params.api_type, params.base_url, params.headers)
    except RouteError as exc:
        raise RpcError(ErrorCode.INVALID_PARAMS, f"Invalid params: {exc}") from None
    credentials.refused.discard(params.provider_id)
    _after_change(context, dropped)
    return {}


async def providers_disable(context: RequestContext, params: DisableProviderRequest) -> dict[str, Any]:
    connection = context.connection
    connection.handshake.require_initialized()
    try:
        dropped = connection.credentials.routes.disable(params.provider_id)
    except RouteError as exc:
        raise RpcError(ErrorCode.INVALID_PARAMS, f"Invalid params: {exc}") from None
    _after_change(context, dropped)
    return {}


def _after_change(context: RequestContext, dropped: list[Any]) -> None:
    """The providers built for the old route are closed once the turns running now end; the status may change."""
    connection = context.connection
    if dropped:
        from acp_server.agent.providers import close_providers  # noqa: PLC0415 (the same layer; kept lazy like the rest)

        agent = connection.agent
        running = connection.running()
        deadline = agent.config.cleanup_deadline
        context.after.append(lambda: agent.spawn(close_providers, dropped, running, deadline))
    context.after.append(lambda: auth_status_changed(connection))
