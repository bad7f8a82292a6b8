"""v2 authentication (ACP-V2.md §16): `auth/login {methodId}` and `auth/logout {}`, both `{}`, on v1's logic
(`authenticate` re-reads the configuration for the key, `logout` forgets the keys until the next login), shared
with v1 in protocol/shared_methods.py.

The single `agent` method, `<provider>-key`, is offered in `initialize` only while the default model's key is
missing. A non-empty `authMethods` obliges both methods; with `authMethods: []` clients must not call either, so
on such a connection both answer `-32601`, as an unknown method would (there is no logout marker in v2).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from acp_server.jsonrpc.rpc import ErrorCode, RpcError
from acp_server.protocol.context import RequestContext
from acp_server.protocol.editor_connection import EditorConnection
from acp_server.protocol.shared_methods import log_in, log_out
from acp_server.protocol.v2.initialize import auth_method_id

if TYPE_CHECKING:  # the models are imported on first use (protocol/params.py)
    from acp_server.protocol.schema import AuthenticateRequest, LogoutRequest

__all__ = ["auth_login", "auth_logout"]


def _require_offered(connection: EditorConnection, method: str) -> None:
    if not connection.handshake.auth_offered:
        raise RpcError(
            ErrorCode.METHOD_NOT_FOUND,
            f"Method not found: {method} (initialize offered no authentication methods)",
        )


async def auth_login(context: RequestContext, params: AuthenticateRequest) -> dict[str, Any]:
    _require_offered(context.connection, "auth/login")
    if params.method_id != auth_method_id(context.agent.config):
        raise RpcError(ErrorCode.INVALID_PARAMS, f"Invalid params: methodId: unknown auth method {params.method_id!r}")
    return log_in(context)


async def auth_logout(context: RequestContext, params: LogoutRequest) -> dict[str, Any]:
    """Forget the keys for new sessions and prompts until the next `auth/login`; a running turn finishes (§23 Q16).
    Idempotent."""
    _require_offered(context.connection, "auth/logout")
    return log_out(context)
