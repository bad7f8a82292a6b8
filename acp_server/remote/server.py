"""`serve_remote`: the remote endpoint on hypercorn, in the caller's event loop, until a drain ends it.

hypercorn is the maintained ASGI server that speaks HTTP/1.1, HTTP/2 (h2c and TLS with ALPN) and WebSocket on
asyncio, and runs inside an event loop it is handed (`hypercorn.asyncio.serve`), so the agent and every connection
share one loop and one process, as the cancel path needs (anyio's asyncio backend).

The listening sockets are made here and handed to hypercorn as `fd://N` binds (its documented way to serve sockets
made by someone else): so the port is known before the first request (port 0 in tests), and the socket options
every accepted connection needs are set once on the listening socket, which on Linux the accepted sockets inherit
(SO_KEEPALIVE, TCP_KEEPIDLE/KEEPINTVL/KEEPCNT, TCP_USER_TIMEOUT, TCP_NODELAY: checked on an accepted socket by
tests/e2e/test_remote_transport.py). hypercorn pings WebSockets but never looks at the pongs, so a peer that vanished
(a laptop closed, a cable pulled) is found by the kernel instead: keepalive probes an idle connection, and
TCP_USER_TIMEOUT ends one whose sent data (or zero window, Linux 5.11 on) stays unacknowledged. The connection then
reaches the app as a disconnect, and its handler sees EOF.

Stopping is a drain (decision 9), asked for by `RemoteServer.drain()` or one of `stop_signals`: `/healthz` and new
connections get 503 at once, every connection's input ends as at stdin EOF and its handler gets `drain_timeout` to
finish (its turns cancelled within the cleanup deadline), then hypercorn stops listening and closes what is left.
Cancelling `serve_remote` drains too (shielded, bounded) before hypercorn is stopped.
"""

from __future__ import annotations

import logging
import signal
import socket
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import anyio
from anyio.abc import TaskStatus
from hypercorn.asyncio import serve as hypercorn_serve
from hypercorn.config import Config as HypercornConfig

from acp_server.errors import ServeSetupError
from acp_server.remote.app import ENDPOINT, MetricsPage, RemoteApp
from acp_server.remote.peer import ConnectionHandler
from acp_server.remote.settings import RemoteSettings, check
from acp_server.remote.tokens import Tokens, default_tokens, read_token_file

__all__ = ["RemoteServer", "bind_socket", "serve_remote"]

log = logging.getLogger(__name__)

# How long hypercorn may take to stop once the connections are closed (it waits this long for its own tasks).
HYPERCORN_GRACE = 1.0
LISTEN_BACKLOG = 128


@dataclass(slots=True)
class RemoteServer:
    """What `serve_remote` hands its starter (`task_status.started`): where it listens, and the drain."""

    url: str  # ws://HOST:PORT/acp or wss://...
    address: tuple[str, int]  # the bound address (the real port when 0 was asked for)
    token_file: Path
    _app: RemoteApp
    _drain_requested: anyio.Event = field(default_factory=anyio.Event)

    @property
    def draining(self) -> bool:
        return self._app.draining

    @property
    def connections(self) -> int:
        return self._app.connections

    def drain(self) -> None:
        """Stop serving: `serve_remote` drains and returns (bounded by the settings' `drain_timeout`)."""
        self._app.draining = True  # /healthz says so from this moment
        self._drain_requested.set()


def bind_socket(settings: RemoteSettings) -> socket.socket:
    """The listening socket, bound, with the options the accepted connections inherit (see the module docstring)."""
    infos = socket.getaddrinfo(settings.host, settings.port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    family, kind, proto, _, address = infos[0]
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
        for option, value in (
            ("TCP_KEEPIDLE", settings.keepalive_idle),
            ("TCP_KEEPINTVL", settings.keepalive_interval),
            ("TCP_KEEPCNT", settings.keepalive_count),
            ("TCP_USER_TIMEOUT", int(settings.user_timeout * 1000)),  # milliseconds
        ):
            if hasattr(socket, option):  # Linux has all four; elsewhere the system's keepalive defaults apply
                sock.setsockopt(socket.IPPROTO_TCP, getattr(socket, option), value)
        sock.bind(address)
        sock.listen(LISTEN_BACKLOG)
    except BaseException:
        sock.close()
        raise
    return sock


def _tokens(settings: RemoteSettings) -> tuple[Path, Tokens, bool | None]:
    if settings.token_file is not None:
        return settings.token_file, read_token_file(settings.token_file), None
    return default_tokens(settings.state_dir)


def _hypercorn_config(settings: RemoteSettings, fd: int) -> HypercornConfig:
    config = HypercornConfig()
    config.bind = [f"fd://{fd}"]
    config.certfile = settings.certfile
    config.keyfile = settings.keyfile
    # hypercorn counts a text message in characters, never more than its UTF-8 bytes: never stricter than our limit,
    # which websocket.py checks in bytes.
    config.websocket_max_message_size = settings.max_message_bytes
    config.websocket_ping_interval = settings.ping_interval
    config.graceful_timeout = HYPERCORN_GRACE
    config.include_server_header = False  # no version for a scanner to match
    config.accesslog = None  # the app logs one line per connection; an access log would add nothing but volume
    config.errorlog = logging.getLogger("acp_server.remote.hypercorn")
    config.backlog = LISTEN_BACKLOG
    return config


def _announce(url: str, token_file: Path, made: bool | None) -> None:
    """On stderr, for the person who started `serve` (Jupyter's pattern, without the token: the file holds it).
    `made`: None for a `--token-file`, else whether the default file was made now."""
    how = "" if made is None else " (made now; mode 0600)" if made else " (kept from before; mode 0600)"
    sys.stderr.write(f"acp-server: serving {url}\nacp-server: tokens in {token_file}{how}\n")
    sys.stderr.flush()


async def serve_remote(
    settings: RemoteSettings,
    handler: ConnectionHandler,
    *,
    stop_signals: Sequence[signal.Signals] = (),
    announce: bool = True,
    admit: Callable[[Tokens], None] | None = None,
    metrics: MetricsPage | None = None,
    task_status: TaskStatus[RemoteServer] = anyio.TASK_STATUS_IGNORED,
) -> None:
    """Serve remote ACP until drained: each accepted, authenticated connection (WebSocket or Streamable HTTP) is
    served by `handler(peer, lines, sink)`. ServeSetupError (before anything listens) for settings that must not
    start, and from `admit`, which sees the principals read from the token file before anything listens.
    `task_status.started` hands over the `RemoteServer` once the socket listens. `metrics`: what `GET /metrics`
    answers (none: 404)."""
    check(settings)
    token_file, tokens, made = _tokens(settings)
    if admit is not None:
        admit(tokens)
    sock = bind_socket(settings)
    host, port = sock.getsockname()[:2]
    shown = f"[{host}]" if ":" in host else host
    url = f"{'wss' if settings.tls else 'ws'}://{shown}:{port}{ENDPOINT}"
    app = RemoteApp(settings, tokens, handler, metrics)
    server = RemoteServer(url, (host, port), token_file, app)
    try:
        config = _hypercorn_config(settings, sock.fileno())
        if settings.tls:
            try:  # a certificate or key that cannot be loaded fails here, before anything says it serves
                config.create_ssl_context()
            except (OSError, ValueError) as exc:  # ssl.SSLError is an OSError
                raise ServeSetupError(
                    f"cannot use the TLS certificate {settings.certfile} with the key {settings.keyfile}: {exc}"
                ) from None
    except BaseException:
        sock.close()
        raise
    sock.detach()  # hypercorn owns the descriptor from here (`fd://`)
    stopped = anyio.Event()
    hypercorn_done = anyio.Event()

    async def run_hypercorn() -> None:
        try:
            await hypercorn_serve(cast(Any, app), config, shutdown_trigger=cast(Any, stopped.wait), mode="asgi")
        finally:
            hypercorn_done.set()
            server._drain_requested.set()  # nothing listens any more: whatever ended it, end the rest

    async def watch_signals(*, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        with anyio.open_signal_receiver(*stop_signals) as received:
            task_status.started()  # handled from here on: a signal from now drains, never kills
            async for number in received:
                log.info("received %s: draining", signal.Signals(number).name)
                server.drain()
                return

    async with anyio.create_task_group() as group:
        app.tasks = group  # the HTTP profile's connections outlive the POST that made them
        group.start_soon(run_hypercorn)
        if stop_signals:
            await group.start(watch_signals)
        if announce:
            _announce(url, token_file, made)
        log.info("serving remote ACP on %s (%d principal(s))", url, len(tokens.principals))
        task_status.started(server)
        try:
            await server._drain_requested.wait()
        finally:
            with anyio.CancelScope(shield=True):
                await app.drain(settings.drain_timeout)
                stopped.set()
                with anyio.move_on_after(HYPERCORN_GRACE + 1.0):
                    await hypercorn_done.wait()
            group.cancel_scope.cancel()
