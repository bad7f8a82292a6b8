"""`acp-server chat --connect URL`: the agent is a remote `acp-server serve`, reached over a WebSocket.

The conversation is the same one the chat holds with its child (`session`); only the pipe differs. `WebSocketPipe`
turns one WebSocket connection into the two byte streams the chat's `RpcClient` reads and writes (a text frame in is
a line; a line out is a text frame; binary frames are ignored, as the transport says), so nothing above it knows the
agent is remote. `RemoteAgent` makes those connections: each one carries the token (`Authorization: Bearer`) and the
cookies this client was given before, and keeps the ones the answer sets, so a balancer's affinity cookie (REMOTE.md,
"Many machines") sends a reconnecting chat back to the replica that ran its session.

The token never comes from the command line (it would show in `ps`): it is read from `--token-file` (the token alone,
or one `PRINCIPAL TOKEN [ROOT ...]` line as `serve` reads them, so a principal's own line can be handed over as it is)
or from `ACP_SERVER_TOKEN`. The file must be private (mode 0600 or 0400), as `serve` wants its own.

`websockets` comes with the `remote` extra and is imported only here, only for `--connect`.
"""

from __future__ import annotations

import email.message
import http.cookiejar
import os
import stat
import urllib.parse
import urllib.request
from collections.abc import Mapping
from typing import TYPE_CHECKING

import anyio
from anyio.abc import ByteReceiveStream, ByteSendStream

from acp_server.chat.rpc_client import MAX_LINE_BYTES

if TYPE_CHECKING:
    from websockets.asyncio.client import ClientConnection

__all__ = [
    "INSTALL_HINT",
    "TOKEN_ENV",
    "ConnectError",
    "CookieJar",
    "RemoteAgent",
    "WebSocketPipe",
    "read_token",
]

INSTALL_HINT = "acp-server chat --connect needs the remote extra: pip install 'acp-server[remote]'"
TOKEN_ENV = "ACP_SERVER_TOKEN"
MAX_TOKEN_FILE_BYTES = 1 << 16
# Statuses a new try cannot change: the token or the address is wrong, or this client is not let in.
FATAL_STATUSES = frozenset({400, 401, 403, 404, 405, 426})


class ConnectError(Exception):
    """The agent could not be reached; `final` when trying again cannot help (a refused token)."""

    def __init__(self, message: str, final: bool = False) -> None:
        super().__init__(message)
        self.final = final


def read_token(path: str | None, env: Mapping[str, str]) -> str:
    """The token: from the file `path` (the token alone, or one token-file line), else from ACP_SERVER_TOKEN.
    ValueError in words that never repeat the token."""
    if path is None:
        token = env.get(TOKEN_ENV, "").strip()
        if not token:
            raise ValueError(f"--connect needs a token: give --token-file FILE, or set {TOKEN_ENV}")
        return token
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK)
    except OSError as exc:
        raise ValueError(f"cannot open the token file {path}: {exc.strerror}") from None
    try:
        info = os.fstat(fd)  # checked on the descriptor that is read: nothing can be swapped in between
        if not stat.S_ISREG(info.st_mode):
            raise ValueError(f"the token file {path} is not a regular file")
        if info.st_mode & 0o077:
            raise ValueError(f"the token file {path} may be read or changed by others: chmod 600 {path}")
        data = os.read(fd, MAX_TOKEN_FILE_BYTES + 1)
    finally:
        os.close(fd)
    if len(data) > MAX_TOKEN_FILE_BYTES:
        raise ValueError(f"the token file {path} is too large to hold one token")
    lines = [line.split() for line in data.decode(errors="replace").splitlines()]
    lines = [fields for fields in lines if fields and not fields[0].startswith("#")]
    if len(lines) != 1:
        raise ValueError(
            f"the token file {path} must hold one token, or one `PRINCIPAL TOKEN [ROOT ...]` line; "
            f"it holds {len(lines)} lines"
        )
    fields = lines[0]
    return fields[0] if len(fields) == 1 else fields[1]


class _SetCookies:
    """What `http.cookiejar` reads of a response: its headers, through `info()`."""

    def __init__(self, values: list[str]) -> None:
        self._headers = email.message.Message()
        for value in values:
            self._headers["Set-Cookie"] = value

    def info(self) -> email.message.Message:
        return self._headers


class CookieJar:
    """This client's cookies, in memory, for its whole run: the standard library's jar, which knows domains, paths,
    expiry and `Secure`, fed through a request for the same address over http(s) (a WebSocket URL is an HTTP request
    until the upgrade, and cookies are scoped by host and path, not scheme, apart from `Secure`)."""

    def __init__(self) -> None:
        self._jar = http.cookiejar.CookieJar()

    def header(self, url: str) -> str | None:
        """The `Cookie` header to send to `url`, or None."""
        request = urllib.request.Request(_http_url(url))
        self._jar.add_cookie_header(request)
        return request.get_header("Cookie")

    def remember(self, url: str, set_cookies: list[str]) -> None:
        """Keep what the `Set-Cookie` headers of the answer from `url` set (and forget what they expire)."""
        if set_cookies:
            self._jar.extract_cookies(_SetCookies(set_cookies), urllib.request.Request(_http_url(url)))  # type: ignore[arg-type]

    def __len__(self) -> int:
        return len(self._jar)


def _http_url(url: str) -> str:
    parts = urllib.parse.urlsplit(url)
    scheme = {"ws": "http", "wss": "https"}.get(parts.scheme, parts.scheme)
    return urllib.parse.urlunsplit((scheme, *parts[1:]))


class _FrameSender(ByteSendStream):
    """Lines out, each one text frame."""

    def __init__(self, ws: ClientConnection) -> None:
        self._ws = ws

    async def send(self, item: bytes) -> None:
        from websockets.exceptions import ConnectionClosed  # noqa: PLC0415 (loaded already by the connection)

        try:
            for line in item.split(b"\n"):
                if line.strip():
                    await self._ws.send(line.decode(errors="replace"))
        except ConnectionClosed:
            raise anyio.BrokenResourceError from None

    async def aclose(self) -> None:
        await self._ws.close()


class _FrameReceiver(ByteReceiveStream):
    """Text frames in, each one line."""

    def __init__(self, ws: ClientConnection) -> None:
        self._ws = ws

    async def receive(self, max_bytes: int = 65536) -> bytes:
        from websockets.exceptions import ConnectionClosed  # noqa: PLC0415 (loaded already by the connection)

        del max_bytes  # a frame is a whole message; the reader buffers what it is given
        while True:
            try:
                frame = await self._ws.recv()
            except ConnectionClosed:
                raise anyio.EndOfStream from None
            if isinstance(frame, str):
                return frame.encode() + b"\n"
            # A binary frame: ignored (the transport defines none).

    async def aclose(self) -> None:
        await self._ws.close()


class WebSocketPipe:
    """One WebSocket connection as the chat's agent pipe: `stdin` and `stdout` as a child's would be."""

    def __init__(self, ws: ClientConnection) -> None:
        self.ws = ws
        self.stdin: ByteSendStream = _FrameSender(ws)
        self.stdout: ByteReceiveStream = _FrameReceiver(ws)

    async def close(self, timeout: float) -> None:
        """A normal close (1000): for the server, this connection's EOF. Shielded and bounded."""
        with anyio.CancelScope(shield=True), anyio.move_on_after(timeout):
            await self.ws.close()


class RemoteAgent:
    """Where the agent is, how to prove who we are, and the cookies kept across this run's connections."""

    def __init__(self, url: str, token: str) -> None:
        self.url = url
        self._token = token
        self.cookies = CookieJar()

    def __repr__(self) -> str:  # never the token
        return f"RemoteAgent({self.url!r})"

    async def connect(self, timeout: float) -> WebSocketPipe:
        """A new connection, or ConnectError saying why not (`final` when another try cannot help)."""
        from websockets.asyncio.client import connect  # noqa: PLC0415 (only for --connect: an extra)
        from websockets.exceptions import InvalidHandshake, InvalidStatus, InvalidURI  # noqa: PLC0415

        headers = {"Authorization": f"Bearer {self._token}"}
        cookie = self.cookies.header(self.url)
        if cookie is not None:
            headers["Cookie"] = cookie
        try:
            ws = await connect(
                self.url,
                additional_headers=headers,
                max_size=MAX_LINE_BYTES,
                open_timeout=timeout,
                compression=None,  # the server offers none; nothing to negotiate
            )
        except InvalidURI:
            raise ConnectError(
                f"not a WebSocket URL: {self.url} (ws://HOST:PORT/acp or wss://...)", final=True
            ) from None
        except InvalidStatus as exc:
            status = exc.response.status_code
            self.cookies.remember(self.url, exc.response.headers.get_all("Set-Cookie"))
            reason = {401: "the token was refused", 403: "this client is not allowed (Origin or Host)"}.get(status, "")
            what = f"the server answered {status}" + (f": {reason}" if reason else "")
            raise ConnectError(what, final=status in FATAL_STATUSES) from None
        except (InvalidHandshake, OSError, TimeoutError) as exc:
            raise ConnectError(f"cannot connect to {self.url}: {exc}") from None
        if ws.response is not None:
            self.cookies.remember(self.url, ws.response.headers.get_all("Set-Cookie"))
        return WebSocketPipe(ws)
