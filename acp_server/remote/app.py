"""The ASGI application hypercorn serves: routing, the door (gate.py) in a fixed order, the connection limit, the
health endpoint, and the table of live connections a drain ends.

    GET /healthz            200 `ok` while serving, 503 `draining` while draining; no auth, no detail, no Host check
                            (a load balancer probes by address, and the answer says nothing)
    GET /metrics            the Prometheus text format (remote/metrics.py), behind the Host, Origin and token checks
                            of /acp; served while draining too (an operator watches the drain)
    GET /acp + Upgrade      the WebSocket profile: 101 with `Acp-Connection-Id`, the connection handed to the handler
    POST/GET/DELETE /acp    the Streamable HTTP profile (http.py): POST `initialize` makes a connection (200, its
                            answer as the body, `Acp-Connection-Id`); POST with the id: 202; GET with
                            `Accept: text/event-stream`: the connection's SSE stream, or with `Acp-Session-Id` a
                            session's; DELETE: the connection ends
    anything else           404 (405 for another method on /acp)

With `--replica-name NAME`, every /acp answer that is not a refusal (the WebSocket upgrade, the HTTP profile's 200
and 202, its streams) sets the affinity cookie `acp_replica=NAME`, so a balancer that cannot insert a cookie of its
own routes a returning client by it (nginx's `map $cookie_acp_replica`, docs/deploy.md).

Every /acp request passes, in this order: its Host (403), its Origin (403), the drain (503), its token (401), and
for a new connection the limit (503, before any upgrade). The first two come first because they cost nothing and a
refused page learns nothing from them. Then the HTTP profile's own checks, as REMOTE.md's status list and the
TypeScript SDK's own server (`dist/transports/server.js`) answer them: 415 a body that is not `application/json`, 413
one over the message limit (the connection stays), 400 JSON that does not parse or an object missing, 501 a JSON
array (no batches over Streamable HTTP), 400 a missing `Acp-Connection-Id` or an `Acp-Session-Id` missing or other
than `params.sessionId`, 404 an unknown `Acp-Connection-Id` or another principal's (the same answer: ids leak
nothing), 406 a stream GET without `Accept: text/event-stream`, 409 a session's stream that already has a reader (the
connection's may have several: http.py). Nothing
session-scoped is 404: any session id gets its stream (decision 4: whether a session exists is JSON-RPC's to say).
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any, Protocol

import anyio
import orjson
from anyio.abc import TaskGroup

from acp_server.remote.gate import (
    SUBPROTOCOL,
    allowed_hosts,
    header,
    host_allowed,
    normalise_origins,
    origin_allowed,
    presented_token,
)
from acp_server.remote.http import HttpConnection, is_event_stream
from acp_server.remote.peer import ConnectionHandler, Peer
from acp_server.remote.settings import RemoteSettings
from acp_server.remote.tokens import Principal, Tokens
from acp_server.remote.websocket import CLOSE_GOING_AWAY, Receive, Send, WebSocketConnection

__all__ = ["ENDPOINT", "HEALTH", "METRICS", "REPLICA_COOKIE", "MetricsPage", "RemoteApp", "replica_cookie"]

log = logging.getLogger(__name__)

ENDPOINT = "/acp"
HEALTH = "/healthz"
METRICS = "/metrics"
REPLICA_COOKIE = "acp_replica"
_TEXT = ((b"content-type", b"text/plain; charset=utf-8"),)
_JSON = b"application/json"
CONNECTION_ID = b"acp-connection-id"
SESSION_ID = b"acp-session-id"
# Longer ids are refused (400) before they are looked up or kept: the SDK's own server's bound.
MAX_ID_LENGTH = 1024


class _Live(Protocol):
    """What a drain does to a connection of either profile."""

    why: str

    def stop(self, why: str, code: int = ...) -> None: ...

    def cancel(self) -> None: ...


class MetricsPage(Protocol):
    """What `/metrics` answers (remote/metrics.py `ReplicaMetrics`): kept behind this port, so the app never loads
    the exposition library itself."""

    content_type: str

    def page(self) -> bytes: ...

    def count_connections(self, connections: Callable[[], int]) -> None:
        """Where the number of open connections is read (the app's table)."""
        ...


def replica_cookie(settings: RemoteSettings) -> list[tuple[bytes, bytes]]:
    """The `Set-Cookie` header of a named replica (none for an unnamed one). HttpOnly: no page script needs it;
    SameSite=Lax: a browser sends it on a same-site WebSocket; Secure when this server speaks TLS itself (behind a
    TLS-terminating balancer the balancer's own cookie carries that)."""
    if settings.replica_name is None:
        return []
    secure = "; Secure" if settings.tls else ""
    value = f"{REPLICA_COOKIE}={settings.replica_name}; Path=/; HttpOnly; SameSite=Lax{secure}"
    return [(b"set-cookie", value.encode("ascii"))]


class _Refusal(Exception):  # noqa: N818 - a response, not an error
    """A request answered with a status instead of being served."""

    def __init__(self, status: int, body: bytes, headers: list[tuple[bytes, bytes]] | None = None) -> None:
        super().__init__(status)
        self.status = status
        self.body = body
        self.headers = headers or []


class RemoteApp:
    """One per `serve_remote`: what it holds lives as long as the server (the live connections, the drain flag)."""

    def __init__(
        self,
        settings: RemoteSettings,
        tokens: Tokens,
        handler: ConnectionHandler,
        metrics: MetricsPage | None = None,
    ) -> None:
        self._settings = settings
        self._tokens = tokens
        self._handler = handler
        self._metrics = metrics
        if metrics is not None:
            metrics.count_connections(lambda: len(self._connections))
        self._cookie = replica_cookie(settings)
        self._hosts = allowed_hosts(settings.host, settings.allow_hosts)
        self._origins = normalise_origins(settings.allow_origins)
        self._connections: set[_Live] = set()
        self._http_connections: dict[str, HttpConnection] = {}  # by `Acp-Connection-Id`
        # Where the HTTP profile's connections run: they outlive the POST that made them (serve_remote's group).
        self.tasks: TaskGroup | None = None
        self._none_left = anyio.Event()
        self._none_left.set()
        self.draining = False

    @property
    def connections(self) -> int:
        return len(self._connections)

    async def __call__(self, scope: Mapping[str, Any], receive: Receive, send: Send) -> None:
        kind = scope["type"]
        if kind == "http":
            await self._http(scope, receive, send)
        elif kind == "websocket":
            await self._websocket(scope, receive, send)
        elif kind == "lifespan":
            await _lifespan(receive, send)

    def _track(self, connection: _Live) -> None:
        """Counted from here (call it before any await: the limit holds under a burst) until `_untrack`."""
        self._connections.add(connection)
        self._none_left = anyio.Event() if self._none_left.is_set() else self._none_left

    def _untrack(self, connection: _Live) -> None:
        self._connections.discard(connection)
        if not self._connections:
            self._none_left.set()

    @contextmanager
    def _tracked(self, connection: _Live) -> Iterator[None]:
        self._track(connection)
        try:
            yield
        finally:
            self._untrack(connection)

    def _room_for_one_more(self) -> None:
        if len(self._connections) >= self._settings.max_connections:
            log.warning("remote connection refused: %d connections open (--max-connections)", self.connections)
            raise _Refusal(503, b"too many connections\n", [(b"retry-after", b"1")])

    # --- the door ---

    def _admit(self, scope: Mapping[str, Any], *, while_draining: bool = False) -> Principal:
        """The principal of an /acp (or /metrics) request, or the `_Refusal` that answers it."""
        headers = scope["headers"]
        if not host_allowed(header(headers, b"host"), self._hosts):
            raise _Refusal(403, b"this Host is not served (--allow-host)\n")
        if not origin_allowed(header(headers, b"origin"), self._origins):
            raise _Refusal(403, b"this Origin is not allowed (--allow-origin)\n")
        if self.draining and not while_draining:
            raise _Refusal(503, b"draining\n")
        token = presented_token(headers, scope.get("subprotocols", ()))
        principal = self._tokens.principal_for(token) if token is not None else None
        if principal is None:
            raise _Refusal(401, b"a valid token is needed\n", [(b"www-authenticate", b'Bearer realm="acp"')])
        return principal

    # --- HTTP ---

    async def _http(self, scope: Mapping[str, Any], receive: Receive, send: Send) -> None:
        path, method = scope["path"], scope["method"]
        headers: list[tuple[bytes, bytes]]
        try:
            if path == HEALTH:
                if method not in ("GET", "HEAD"):
                    raise _Refusal(405, b"", [(b"allow", b"GET, HEAD")])
                if self.draining:
                    raise _Refusal(503, b"draining\n")
                status, body, headers = 200, b"ok\n", []
            elif path == METRICS and self._metrics is not None:
                if method not in ("GET", "HEAD"):
                    raise _Refusal(405, b"", [(b"allow", b"GET, HEAD")])
                self._admit(scope, while_draining=True)
                status, body = 200, self._metrics.page()
                headers = [(b"content-type", self._metrics.content_type.encode("ascii"))]
            elif path == ENDPOINT:
                principal = self._admit(scope)
                if method == "POST":
                    status, body, headers = await self._post(scope, receive, principal)
                elif method == "GET":
                    await self._stream(scope, receive, send, principal)
                    return
                elif method == "DELETE":
                    connection = self._connection(scope, principal)
                    del self._http_connections[connection.peer.connection_id]  # unknown from now on: 404
                    connection.delete()
                    status, body, headers = 202, b"", []
                else:
                    raise _Refusal(405, b"", [(b"allow", b"GET, POST, DELETE")])
                headers = [*headers, *self._cookie]
            else:
                raise _Refusal(404, b"not found\n")
        except _Refusal as refusal:
            status, body, headers = refusal.status, refusal.body, refusal.headers
        if body and not any(name == b"content-type" for name, _ in headers):
            headers = [*_TEXT, *headers]
        await send(
            {
                "type": "http.response.start",
                "status": status,
                "headers": [(b"content-length", str(len(body)).encode()), *headers],
            }
        )
        await send({"type": "http.response.body", "body": b"" if method == "HEAD" else body})

    # --- Streamable HTTP ---

    def _connection(self, scope: Mapping[str, Any], principal: Principal) -> HttpConnection:
        """The connection a request names; another principal's is answered as an unknown one."""
        value = header(scope["headers"], CONNECTION_ID)
        if value is None:
            raise _Refusal(400, b"Acp-Connection-Id is missing\n")
        connection = self._http_connections.get(value.decode("latin-1"))
        if connection is None or connection.peer.principal.name != principal.name:
            raise _Refusal(404, b"unknown Acp-Connection-Id\n")
        return connection

    async def _post(
        self, scope: Mapping[str, Any], receive: Receive, principal: Principal
    ) -> tuple[int, bytes, list[tuple[bytes, bytes]]]:
        content_type = header(scope["headers"], b"content-type") or b""
        if content_type.partition(b";")[0].strip().lower() != _JSON:
            raise _Refusal(415, b"a message is application/json\n")
        line = await self._body(receive)
        try:
            message = orjson.loads(line)
        except orjson.JSONDecodeError:
            raise _Refusal(400, b"the body is not JSON\n") from None
        if isinstance(message, list):
            raise _Refusal(501, b"JSON-RPC batches are not served over Streamable HTTP\n")
        if not isinstance(message, dict):
            raise _Refusal(400, b"the body is not a JSON-RPC message\n")
        line = orjson.dumps(message)  # one line, whatever the client's layout
        if header(scope["headers"], CONNECTION_ID) is None and message.get("method") == "initialize":
            return await self._initialize(scope, principal, line, message)
        connection = self._connection(scope, principal)
        session = header(scope["headers"], SESSION_ID)
        expected = connection.expected_session(message)
        if session is not None and len(session) > MAX_ID_LENGTH:
            raise _Refusal(400, b"Acp-Session-Id is too long\n")
        if expected is not None and session is None:
            raise _Refusal(400, b"Acp-Session-Id is missing: it must equal params.sessionId\n")
        routed = session.decode("latin-1") if session is not None else None
        if expected is not None and routed != expected:
            raise _Refusal(400, b"Acp-Session-Id does not match params.sessionId\n")
        if not await connection.post(line, message, routed):
            raise _Refusal(404, b"unknown Acp-Connection-Id\n")  # it ended meanwhile
        return 202, b"", []

    async def _body(self, receive: Receive) -> bytes:
        """The request's body, 413 as soon as it is longer than a message may be (the connection stays)."""
        chunks: list[bytes] = []
        size = 0
        while True:
            event = await receive()
            if event["type"] == "http.disconnect":
                raise _Refusal(400, b"the request ended early\n")
            chunk = event.get("body", b"")
            size += len(chunk)
            if size > self._settings.max_message_bytes:
                raise _Refusal(413, b"the message is over the limit\n")
            chunks.append(chunk)
            if not event.get("more_body", False):
                return b"".join(chunks)

    async def _initialize(
        self, scope: Mapping[str, Any], principal: Principal, line: bytes, message: dict[str, Any]
    ) -> tuple[int, bytes, list[tuple[bytes, bytes]]]:
        """A new connection: its `initialize` answered in the body (200, with `Acp-Connection-Id`, also when the
        answer is a JSON-RPC error: the SDK's client reads a JSON-RPC body only from a 2xx carrying the id, and the
        connection stays, as stdio's does after a failed initialize). No answer in time: 500 with a JSON-RPC error,
        as the SDK's own server answers, and the connection is ended."""
        if "id" not in message or message["id"] is None:
            raise _Refusal(400, b"initialize must carry an id\n")
        self._room_for_one_more()
        assert self.tasks is not None  # set by serve_remote before anything is served
        client = scope.get("client")
        peer = Peer(str(uuid.uuid4()), principal, (str(client[0]), int(client[1])) if client else None)
        connection = HttpConnection(
            peer,
            max_queued_bytes=self._settings.max_queued_bytes,
            flush_timeout=self._settings.flush_timeout,
            idle_timeout=self._settings.http_idle_timeout,
            keepalive_interval=self._settings.sse_keepalive,
            max_session_streams=self._settings.max_session_streams,
        )
        self._track(connection)
        self._http_connections[peer.connection_id] = connection

        async def run() -> None:
            log.info("remote connection %s opened (Streamable HTTP)", peer.describe())
            try:
                await connection.run(self._handler)
            finally:
                if self._http_connections.get(peer.connection_id) is connection:
                    del self._http_connections[peer.connection_id]
                self._untrack(connection)
                log.info("remote connection %s ended: %s", peer.describe(), connection.why)

        self.tasks.start_soon(run)
        answer = await connection.initialize(line, message["id"], self._settings.initialize_timeout)
        if answer is None:
            connection.stop("initialize was not answered")
            failed = {"jsonrpc": "2.0", "id": message["id"], "error": {"code": -32603, "message": "Initialize failed"}}
            return 500, orjson.dumps(failed), [(b"content-type", _JSON)]
        return 200, answer, [(b"content-type", _JSON), (CONNECTION_ID, peer.connection_id.encode())]

    async def _stream(self, scope: Mapping[str, Any], receive: Receive, send: Send, principal: Principal) -> None:
        if not is_event_stream(header(scope["headers"], b"accept")):
            raise _Refusal(406, b"a stream is read with Accept: text/event-stream\n")
        connection = self._connection(scope, principal)
        session = header(scope["headers"], SESSION_ID)
        if session is not None and len(session) > MAX_ID_LENGTH:
            raise _Refusal(400, b"Acp-Session-Id is too long\n")
        key = session.decode("latin-1") if session is not None else None
        refused = connection.stream_refused(key)
        if refused is not None:
            raise _Refusal(refused[0], f"{refused[1]}\n".encode())
        await connection.serve_stream(key, receive, send, self._cookie)

    # --- WebSocket ---

    async def _websocket(self, scope: Mapping[str, Any], receive: Receive, send: Send) -> None:
        connect = await receive()
        if connect["type"] != "websocket.connect":
            return
        try:
            if scope["path"] != ENDPOINT:
                raise _Refusal(404, b"not found\n")
            principal = self._admit(scope)
            self._room_for_one_more()
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
        with self._tracked(connection):
            # Selecting `acp` (never the `acp.bearer.` one) keeps the token out of the response.
            subprotocol = SUBPROTOCOL if SUBPROTOCOL in scope.get("subprotocols", ()) else None
            await send(
                {
                    "type": "websocket.accept",
                    "subprotocol": subprotocol,
                    "headers": [(b"acp-connection-id", peer.connection_id.encode()), *self._cookie],
                }
            )
            log.info("remote connection %s opened", peer.describe())
            try:
                await connection.run(self._handler)
            finally:
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
