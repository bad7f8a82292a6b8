"""ACP's unstable `mcp/message` as the client sends it to us, on v1 and v2 alike (RFD "MCP-over-ACP").

The agent is the consumer of the MCP servers a client offers over ACP (`{"type": "acp"}` in `mcpServers`): our MCP
requests go to the client as `mcp/message` requests (mcp_bridge/over_acp.py), and the client sends us `mcp/message`
notifications for those still in flight (an MCP server's progress, a subscription's events), routed here to the
request they name; one naming none is dropped, as the binding says. The agent offers no MCP server of its own over
ACP, so an `mcp/message` request from the client names a server that is not there: the binding's -33001, saying so.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from acp_server.jsonrpc.rpc import RpcError
from acp_server.protocol.context import Handler, NotificationHandler, RequestContext
from acp_server.protocol.params import wire

if TYPE_CHECKING:
    from acp_server.protocol.editor_connection import EditorConnection
    from acp_server.protocol.schema import MessageMcpNotification

__all__ = ["MCP_MESSAGE_NOTIFICATION", "MCP_MESSAGE_REQUEST", "SERVER_UNAVAILABLE"]

# The binding's outer error for "no registration is available for the requested server ID" (the TypeScript SDK's
# `McpBindingErrorCode.serverUnavailable`).
SERVER_UNAVAILABLE = -33001


async def mcp_message_request(context: RequestContext, params: MessageMcpNotification) -> dict[str, Any]:
    raise RpcError(
        SERVER_UNAVAILABLE,
        f"no MCP server {params.server_id!r} here: this agent offers no MCP servers over ACP (it calls the ones its "
        "client declares with type acp)",
        {"serverId": params.server_id},
    )


def mcp_message_notification(connection: EditorConnection, params: MessageMcpNotification) -> None:
    """Handed to this connection's MCP request it names (its own: another connection's are never reached)."""
    connection.mcp_messages.received(params.server_id, params.request_id, params.method, params.params)


MCP_MESSAGE_REQUEST: Handler = (wire("MessageMcpNotification"), mcp_message_request)
MCP_MESSAGE_NOTIFICATION: NotificationHandler = (wire("MessageMcpNotification"), mcp_message_notification)
