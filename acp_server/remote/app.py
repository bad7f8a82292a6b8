"""The ASGI application hypercorn serves: routing, the door (gate.py) in a fixed order, the connection limit, the
health endpoint, and the table of live connections a drain ends.

    GET /healthz            200 `ok` while serving, 503 `draining` while draining; no auth, no detail, no Host check
                            (a load balancer probes by address, and the answer says nothing)
    GET /acp + Upgrade      the WebSocket profile: 101 with `Acp-Connection-Id`, the connection handed to the handler
    anything else on /acp   405 (Allow: GET) for another method, 426 for a GET that is no upgrade: Streamable HTTP
                            (POST, the SSE GETs, DELETE) is routed here in its step
    anything else           404

Every /acp request passes, in this order: its Host (403), its Origin (403), the drain (503), its token (401), and
for a new connection the limit (503, before any upgrade). The first two come first because they cost nothing and a
refused page learns nothing from them.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Mapping
from typing import Any

import anyio

from acp_server.remote.gate import (
    SUBPROTOCOL,
    allowed_hosts,
    header,
    host_allowed,
    normalise_origins,
    origin_allowed,
    presented_token,
)
from acp_server.remote.peer import ConnectionHandler, Peer
from acp_server.remote.settings import RemoteSettings
from acp_server.remote.tokens import Principal, Tokens
from acp_server.remote.websocket import CLOSE_GOING_AWAY, Receive, Send, WebSocketConnection

__all__ = ["ENDPOINT", "HEALTH", "RemoteApp"]

log = logging.getLogger(__name__)

ENDPOINT = "/acp"
HEALTH = "/healthz"
_TEXT = ((b"content-type", b"text/plain; charset=utf-8"),)


class _Refusal(Exception):  # noqa: N818 - a response, not an error
    """A request answered with a status instead of being served."""

    def __init__(self, status: int, body: bytes, headers: list[tuple[bytes, bytes]] | None = None) -> None:
        super().__init__(status)
        self.status = status
        self.body = body
        self.headers = headers or []


class RemoteApp:
    """One per `serve_remote`: what it holds lives as long as the server (the live connections, the drain flag)."""

    def __init__(self, settings: RemoteSettings, tokens: Tokens, handler: ConnectionHandler) -> None:
        self._settings = settings
        self._tokens = tokens
        self._handler = handler
        self._hosts = allowed_hosts(settings.host, settings.allow_hosts)
        self._origins = normalise_origins(settings.allow_origins)
        self._connections: set[WebSocketConnection] = set()
        self._none_left = anyio.Event()
        self._none_left.set()
        self.draining = False

    @property
    def connections(self) -> int:
        return len(self._connections)

    async def __call__(self, scope: Mapping[str, Any], receive: Receive, send: Send) -> None:
        kind = scope["type"]
        if kind == "http":
            await self._http(scope, send)
        elif kind == "websocket":
            await self._websocket(scope, receive, send)
        elif kind == "lifespan":
            await _lifespan(receive, send)

    # --- the door ---

    def _admit(self, scope: Mapping[str, Any]) -> Principal:
        """The principal of an /acp request, or the `_Refusal` that answers it."""
        headers = scope["headers"]
        if not host_allowed(header(headers, b"host"), self._hosts):
            raise _Refusal(403, b"this Host is not served (--allow-host)\n")
        if not origin_allowed(header(headers, b"origin"), self._origins):
            raise _Refusal(403, b"this Origin is not allowed (--allow-origin)\n")
        if self.draining:
            raise _Refusal(503, b"draining\n")
        token = presented_token(headers, scope.get("subprotocols", ()))
        principal = self._tokens.principal_for(token) if token is not None else None
        if principal is None:
            raise _Refusal(401, b"a valid token is needed\n", [(b"www-authenticate", b'Bearer realm="acp"')])
        return principal

    # --- HTTP ---

    async def _http(self, scope: Mapping[str, Any], send: Send) -> None:
        path, method = scope["path"], scope["method"]
        try:
            if path == HEALTH:
                if method not in ("GET", "HEAD"):
                    raise _Refusal(405, b"", [(b"allow", b"GET, HEAD")])
                if self.draining:
                    raise _Refusal(503, b"draining\n")
                status, body, headers = 200, b"ok\n", []
            elif path == ENDPOINT:
                self._admit(scope)
                if method != "GET":
                    raise _Refusal(405, b"only the WebSocket profile is served\n", [(b"allow", b"GET")])
                raise _Refusal(426, b"upgrade to a WebSocket\n", [(b"upgrade", b"websocket")])
            else:
                raise _Refusal(404, b"not found\n")
        except _Refusal as refusal:
            status, body, headers = refusal.status, refusal.body, refusal.headers
        await send(
            {
                "type": "http.response.start",
                "status": status,
                "headers": [*_TEXT, (b"content-length", str(len(body)).encode()), *headers],
            }
        )
        await send({"type": "http.response.body", "body": b"" if method == "HEAD" else body})

    # --- WebSocket ---

    async def _websocket(self, scope: Mapping[str, Any], receive: Receive, send: Send) -> None:
        connect = await receive()
        if connect["type"] != "websocket.connect":
            return
        try:
            if scope["path"] != ENDPOINT:
                raise _Refusal(404, b"not found\n")
            principal = self._admit(scope)
            if len(self._connections) >= self._settings.max_connections:
                log.warning("remote connection refused: %d connections open (--max-connections)", self.connections)
                raise _Refusal(503, b"too many connections\n", [(b"retry-after", b"1")])
        except _Refusal as refusal:
            await send(
                {
                    "type": "websocket.http.response.start",
                    "status": refusal.status,
                    "headers": [*_TEXT, (b"content-length", str(len(refusal.body)).encode()), *refusal.headers],
                }
            )
            await send({"type": "websocket.http.response.body", "body": refusal.body})
            return
        client = scope.get("client")
        peer = Peer(str(uuid.uuid4()), principal, (str(client[0]), int(client[1])) if client else None)
        connection = WebSocketConnection(
            peer,
            receive,
            send,
            initialize_timeout=self._settings.initialize_timeout,
            max_message_bytes=self._settings.max_message_bytes,
            max_queued_bytes=self._settings.max_queued_bytes,
            flush_timeout=self._settings.flush_timeout,
        )
        self._connections.add(connection)  # counted from here, before any await: the limit holds under a burst
        self._none_left = anyio.Event() if self._none_left.is_set() else self._none_left
        try:
            # Selecting `acp` (never the `acp.bearer.` one) keeps the token out of the response.
            subprotocol = SUBPROTOCOL if SUBPROTOCOL in scope.get("subprotocols", ()) else None
            await send(
                {
                    "type": "websocket.accept",
                    "subprotocol": subprotocol,
                    "headers": [(b"acp-connection-id", peer.connection_id.encode())],
                }
            )
            log.info("remote connection %s opened", peer.describe())
            await connection.run(self._handler)
        finally:
            self._connections.discard(connection)
            if not self._connections:
                self._none_left.set()
            log.info("remote connection %s ended: %s", peer.describe(), connection.why)

    # --- the drain ---

    async def drain(self, timeout: float) -> None:
        """Refuse new connections (503, `/healthz` 503), end every connection's input as at stdin EOF, wait up to
        `timeout` for their handlers to end, then cancel what is left (and wait a little for that)."""
        self.draining = True
        for connection in list(self._connections):
            connection.stop("the server is draining", CLOSE_GOING_AWAY)
        with anyio.move_on_after(timeout):
            await self._none_left.wait()
        if self._connections:
            log.warning("drain: %d connection(s) still open after %g s: cancelled", len(self._connections), timeout)
            for connection in list(self._connections):
                connection.cancel()
            with anyio.move_on_after(1.0):
                await self._none_left.wait()


async def _lifespan(receive: Receive, send: Send) -> None:
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await send({"type": "lifespan.shutdown.complete"})
            return
