"""MCP servers the client offers over the ACP connection itself (ACP's unstable "MCP-over-ACP": an `mcpServers` entry
`{"type": "acp", "name", "serverId"}`), used like any other: their traffic is carried in `mcp/message`.

Why it exists: a client (an editor, an IDE plugin) can give the agent tools that live in the client, with no process
to start and no port to open, and it works the same over `acp-server serve` as over stdio, because the server runs
where the client is.

The binding speaks MCP 2026-07-28 (the TypeScript SDK's `MCP_PROTOCOL_VERSION`), the revision without a session:
every MCP request of ours becomes one ACP `mcp/message` request to the client (`serverId`, `requestId`: the inner
JSON-RPC id, made unique on the connection; `method`, `params`), answered with exactly one inner outcome
(`{"result": ...}` or `{"error": {code, message}}`); the client's MCP notifications for a request still in flight
(progress, a subscription's events) come back as `mcp/message` notifications naming the same pair. Cancelling an
MCP request (a cancelled turn: the MCP SDK writes `notifications/cancelled`) withdraws its ACP request
(`$/cancel_request`), as the TypeScript SDK's caller does; the 2026 revision has no other client-to-server
notifications and no server-to-client requests, so nothing else is carried.

`AcpMcpMessages` is one connection's routing table (held by the protocol side's connection, which hands it to its
sessions' servers); `acp_transport` is one server's transport, streams of the MCP SDK's messages like stdio's.
Imports nothing of the SDK until a transport opens (the SDK is loaded by then: transports.connect).
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import asynccontextmanager, suppress
from typing import Any

import anyio

__all__ = ["MCP_OVER_ACP_VERSION", "AcpMcpMessages", "acp_transport"]

log = logging.getLogger(__name__)

# The only MCP revision the binding carries (the TypeScript SDK 2.4.0's `mcp` entry: MCP_PROTOCOL_VERSION).
MCP_OVER_ACP_VERSION = "2026-07-28"
# Outer ACP error the binding reserves for "the backend or transport failed without a valid MCP outcome" (the
# TypeScript SDK's `McpBindingErrorCode.backendFailed`); what a client's answer we cannot read is told as.
BACKEND_FAILED = -33002
# The client's notifications waiting for the MCP SDK to read them, per server; beyond it they are dropped (a
# notification is never answered, and one flood must not grow without bound).
INCOMING_BUFFER = 256

# Sends one `mcp/message` request to the client and returns its result; raises (with an int `code` and a `message`
# where it can) when the client answers with an error, the request is withdrawn, or the connection is gone.
Send = Callable[[dict[str, Any]], Awaitable[Any]]
# Receives one of the client's MCP notifications for a request in flight: its inner method and params.
Deliver = Callable[[str, dict[str, Any] | None], None]


class AcpMcpMessages:
    """One ACP connection's `mcp/message` traffic: sending our MCP requests to the client, and routing its
    notifications to the request in flight they name. Long-lived (one per connection); it holds only the routes of
    requests in flight, each removed when its request ends."""

    def __init__(self, send: Send) -> None:
        self._send = send
        self._routes: dict[tuple[str, str], Deliver] = {}
        # Numbers the transports opened on this connection: each MCP client numbers its requests from 1, and the
        # same server may serve several sessions of the connection at once, while a `requestId` must be unique on
        # it for the server (the binding refuses a duplicate) and for routing.
        self._transports = itertools.count(1)

    def transport_number(self) -> int:
        return next(self._transports)

    async def request(self, params: dict[str, Any]) -> Any:
        return await self._send(params)

    def route(self, server_id: str, request_id: str, deliver: Deliver) -> Callable[[], None]:
        """Deliver the client's notifications for (`server_id`, `request_id`) until the returned function is called."""
        key = (server_id, request_id)
        self._routes[key] = deliver

        def unroute() -> None:
            if self._routes.get(key) is deliver:
                del self._routes[key]

        return unroute

    def received(self, server_id: str, request_id: str, method: str, params: Mapping[str, Any] | None) -> bool:
        """A client's `mcp/message` notification: handed to the request it names; False (and dropped, as the
        binding says) when no request of ours is in flight under that pair."""
        deliver = self._routes.get((server_id, request_id))
        if deliver is None:
            log.info("ignored an mcp/message notification for no MCP request in flight (%r, %r)", server_id, request_id)
            return False
        deliver(method, dict(params) if params is not None else None)
        return True

    def __len__(self) -> int:
        """Requests in flight."""
        return len(self._routes)


def _outer_error(exc: Exception) -> tuple[int, str]:
    code = getattr(exc, "code", None)
    message = getattr(exc, "message", None)
    return (
        code if isinstance(code, int) else BACKEND_FAILED,
        message if isinstance(message, str) and message else str(exc) or type(exc).__name__,
    )


@asynccontextmanager
async def acp_transport(
    messages: AcpMcpMessages, server_id: str
) -> AsyncIterator[tuple[anyio.abc.ObjectReceiveStream[Any], anyio.abc.ObjectSendStream[Any]]]:
    """The MCP SDK's two streams for the client's server `server_id`: what the SDK writes (requests, and
    `notifications/cancelled` for one it gave up) goes out as `mcp/message`; answers and the client's notifications
    come back. Leaving it withdraws every request still in flight."""
    import mcp_types as types  # noqa: PLC0415 (MCP SDK: loaded only for a session with an MCP server)
    from mcp.shared.message import SessionMessage  # noqa: PLC0415 (MCP SDK: loaded only for a session with an MCP server)

    number = messages.transport_number()

    def outer_id(inner: object) -> str:
        """The `requestId` of an inner request: the MCP SDK's string ids (`listen-N`) are unique in the process,
        its integer ones only in one client, so those are numbered by transport too."""
        return inner if isinstance(inner, str) else f"{number}:{inner}"

    incoming_send, incoming = anyio.create_memory_object_stream[SessionMessage | Exception](INCOMING_BUFFER)
    outgoing, outgoing_receive = anyio.create_memory_object_stream[SessionMessage](0)
    in_flight: dict[str, anyio.CancelScope] = {}

    def deliver(method: str, params: dict[str, Any] | None) -> None:
        notification = types.JSONRPCNotification(jsonrpc="2.0", method=method, params=params)
        try:
            incoming_send.send_nowait(SessionMessage(notification))
        except anyio.WouldBlock:
            log.warning("MCP server %r over ACP: dropped a notification (%s): too many unread", server_id, method)
        except (anyio.ClosedResourceError, anyio.BrokenResourceError):
            pass  # the transport is closing

    async def forward(request: types.JSONRPCRequest) -> None:
        request_id = outer_id(request.id)
        params: dict[str, Any] = {"serverId": server_id, "requestId": request_id, "method": request.method}
        if request.params is not None:
            params["params"] = request.params
        reply: types.JSONRPCResponse | types.JSONRPCError
        with anyio.CancelScope() as scope:
            in_flight[request_id] = scope
            unroute = messages.route(server_id, request_id, deliver)
            try:
                reply = _reply(types, request.id, await messages.request(params))
            except Exception as exc:  # the client's outer error, a withdrawal, a closed connection: this request's
                code, message = _outer_error(exc)
                reply = types.JSONRPCError(
                    jsonrpc="2.0", id=request.id, error=types.ErrorData(code=code, message=message)
                )
            finally:
                unroute()
                in_flight.pop(request_id, None)
        if scope.cancelled_caught:
            return  # withdrawn (`notifications/cancelled`): the SDK no longer waits for it
        with suppress(anyio.ClosedResourceError, anyio.BrokenResourceError):  # the transport is closing
            await incoming_send.send(SessionMessage(reply))

    async def write_loop() -> None:
        async with outgoing_receive:
            async for item in outgoing_receive:
                message = item.message
                if isinstance(message, types.JSONRPCRequest):
                    requests.start_soon(forward, message)
                elif isinstance(message, types.JSONRPCNotification) and message.method == "notifications/cancelled":
                    cancelled = (message.params or {}).get("requestId")
                    scope = in_flight.get(outer_id(cancelled))
                    if scope is not None:
                        scope.cancel()  # its `mcp/message` request is withdrawn: `$/cancel_request`
                # Anything else has no place on MCP 2026-07-28 over ACP (no other client notification, no
                # server-to-client request to answer): not sent.

    async with anyio.create_task_group() as requests:
        requests.start_soon(write_loop)
        try:
            yield incoming, outgoing
        finally:
            requests.cancel_scope.cancel()
            # All four ends: the SDK's two are done with too, and a stream left open is a leak the GC complains of.
            for stream in (incoming_send, incoming, outgoing, outgoing_receive):
                stream.close()


def _reply(types: Any, request_id: Any, result: Any) -> Any:
    """An `mcp/message` response as the inner JSON-RPC reply: its `result` wins over `error`, as the binding says; a
    carrier with neither, or a result that is not an object, is the client's failure, told as the binding's -33002."""
    problem = "the client's mcp/message answer carries no MCP outcome"
    if isinstance(result, dict) and "result" in result:
        if isinstance(result["result"], dict):
            return types.JSONRPCResponse(jsonrpc="2.0", id=request_id, result=result["result"])
        problem = "the client's mcp/message answer is not an MCP result (an object)"  # every MCP result is one
    else:
        error = result.get("error") if isinstance(result, dict) else None
        if isinstance(error, dict) and type(error.get("code")) is int and isinstance(error.get("message"), str):
            return types.JSONRPCError(jsonrpc="2.0", id=request_id, error=types.ErrorData.model_validate(error))
    return types.JSONRPCError(jsonrpc="2.0", id=request_id, error=types.ErrorData(code=BACKEND_FAILED, message=problem))
