"""One small client for every transport, so bench/remote.py compares the transports and not two clients.

A `Link` moves whole JSON-RPC lines between the benchmark and one connection of a server: `StdioLink` over a spawned
`acp-server`'s stdin/stdout, `WebSocketLink` over an `acp-server serve` WebSocket (the `websockets` client: a line
sent is one text frame, a frame received is one line), and `HttpLink` over the Streamable HTTP profile (REMOTE.md's
table: `POST /acp`, the connection's and each session's SSE `GET`, `DELETE`; httpx2, the HTTP client the openai SDK
already brings). `Client` sits on any of them: it sends requests, matches responses by id, and counts
`agent_message_chunk` lines per session by a byte-prefix test instead of parsing them (as bench/wire.py does), so
the client's own cost stays small and the same for all.

Times: `send` returns `perf_counter_ns` once the message is handed to the kernel (stdio, WebSocket) or, over HTTP,
just before the `POST` starts (its `202` may come after the answer on the stream); a line's read time is when the
block or frame holding it was read.

`Spawned` starts the server for a transport: the stdio agent, or `serve` on 127.0.0.1 port 0 with a token file of
its own (`--model scripted --test-mode` either way, plus what the benchmark adds).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import secrets
import shutil
import tempfile
import time
from pathlib import Path
from types import TracebackType
from typing import IO, TYPE_CHECKING, Any, ClassVar, Protocol

import orjson

from bench.wire import MESSAGE_CHUNK, UPDATE_PREFIX, WireError
from tests.support.harness import isolated_env, server_command

if TYPE_CHECKING:
    from websockets.asyncio.client import ClientConnection

__all__ = [
    "TRANSPORTS",
    "Client",
    "HttpLink",
    "HttpNotServedError",
    "Link",
    "Spawned",
    "StdioLink",
    "WebSocketLink",
]

Message = dict[str, Any]

# Every update line starts with UPDATE_PREFIX, then `,"params":{"sessionId":"` (update_shapes.py builds them so):
# the session id is read at a fixed offset, without parsing the line.
_SESSION_AT = len(UPDATE_PREFIX) + len(b',"params":{"sessionId":"')
READ_BLOCK = 1 << 20


class HttpNotServedError(WireError):
    """The server answered `POST /acp` with 404 or 405: it serves no Streamable HTTP profile (yet)."""


class Link(Protocol):
    """One connection: whole lines out, batches of whole lines in (an empty batch at the end)."""

    name: str

    async def send(self, *messages: Message) -> int:
        """Write the messages (in one write where the transport allows); perf_counter_ns of the write."""
        ...

    async def receive(self) -> tuple[list[bytes], int]:
        """The next lines the server wrote, and when they were read; `[]` once it will write no more."""
        ...

    async def close(self) -> None: ...


def _line(message: Message) -> bytes:
    return orjson.dumps({"jsonrpc": "2.0", **message})


class StdioLink:
    """The stdio agent's one connection: its stdin and stdout."""

    name = "stdio"

    def __init__(self, process: asyncio.subprocess.Process) -> None:
        assert process.stdin is not None and process.stdout is not None
        self._stdin = process.stdin
        self._stdout = process.stdout
        self._partial = b""

    async def send(self, *messages: Message) -> int:
        self._stdin.write(b"".join(_line(m) + b"\n" for m in messages))
        await self._stdin.drain()
        return time.perf_counter_ns()

    async def receive(self) -> tuple[list[bytes], int]:
        while True:
            block = await self._stdout.read(READ_BLOCK)
            t_read = time.perf_counter_ns()
            if not block:
                return [], t_read
            cut = block.rfind(b"\n")
            if cut < 0:
                self._partial += block
                continue
            head = self._partial + block[:cut]
            self._partial = block[cut + 1 :]
            return head.split(b"\n"), t_read

    async def close(self) -> None:
        if not self._stdin.is_closing():
            self._stdin.close()


class WebSocketLink:
    """One authenticated WebSocket connection to `serve`, as a client library opens it: permessage-deflate offered
    (as `websockets` and the TypeScript SDK's `ws` client do by default; hypercorn accepts it) unless `compress` is
    False."""

    name = "websocket"

    def __init__(self, ws: ClientConnection) -> None:
        self._ws = ws

    @property
    def cookies(self) -> dict[str, str]:
        """The cookies the upgrade's answer set (name -> value): a replica's `acp_replica` says which one serves
        this connection behind a balancer."""
        jar: dict[str, str] = {}
        if self._ws.response is not None:
            for value in self._ws.response.headers.get_all("set-cookie"):
                name, _, rest = value.partition("=")
                jar[name.strip()] = rest.split(";", 1)[0].strip()
        return jar

    @classmethod
    async def open(
        cls, url: str, token: str, *, compress: bool = True, cookies: dict[str, str] | None = None
    ) -> WebSocketLink:
        """`cookies`: sent with the upgrade, as a client that keeps them does when it reconnects (affinity)."""
        from websockets.asyncio.client import connect  # only the remote benchmarks need it

        headers = {"Authorization": f"Bearer {token}"}
        if cookies:
            headers["Cookie"] = "; ".join(f"{name}={value}" for name, value in cookies.items())
        ws = await connect(
            url,
            additional_headers=headers,
            max_size=None,
            proxy=None,
            open_timeout=60,
            compression="deflate" if compress else None,
        )
        return cls(ws)

    async def send(self, *messages: Message) -> int:
        for message in messages:
            await self._ws.send(_line(message).decode())
        return time.perf_counter_ns()

    async def receive(self) -> tuple[list[bytes], int]:
        from websockets.exceptions import ConnectionClosed  # loaded with the client already

        try:
            frame = await self._ws.recv()
        except ConnectionClosed:
            return [], time.perf_counter_ns()
        t_read = time.perf_counter_ns()
        return [frame.encode() if isinstance(frame, str) else frame], t_read

    async def close(self) -> None:
        await self._ws.close()


class HttpLink:
    """One Streamable HTTP connection (REMOTE.md's table): `initialize` is a `POST` answered in its body with the
    `Acp-Connection-Id`; every later message a `POST` answered `202`, its answer arriving on an SSE stream: the
    connection's (opened after `initialize`), or for a session-scoped message its session's (opened before the first
    message for that session, as the TypeScript SDK does). `close` is the `DELETE`."""

    name = "http"

    def __init__(self, url: str, token: str) -> None:
        import httpx2  # only the Streamable HTTP benchmark needs it

        self._url = url
        # An idle pooled connection is dropped after 2 s, well before hypercorn's keep-alive timeout (5 s) closes it:
        # with both at 5 s a POST could go out on a connection the server was closing ("Server disconnected without
        # sending a response", seen with 100 busy connections). Node's fetch keeps them 4 s.
        limits = httpx2.Limits(max_connections=None, max_keepalive_connections=None, keepalive_expiry=2.0)
        # Over plain http no certificate is checked: without `verify=False` the client loads the system's trust store
        # when made (~200-500 ms here), which a connect-time figure would count as the transport's.
        self._http = httpx2.AsyncClient(
            headers={"Authorization": f"Bearer {token}"},
            timeout=httpx2.Timeout(60.0, read=None),
            limits=limits,
            verify=url.startswith("https:"),
        )
        self._connection_id: str | None = None
        self._incoming: asyncio.Queue[tuple[list[bytes], int]] = asyncio.Queue()
        self._streams: dict[str | None, asyncio.Task[None]] = {}
        self._closed = False

    async def _post(self, message: Message, headers: dict[str, str]) -> Any:
        return await self._http.post(
            self._url,
            content=_line(message),
            headers={"Content-Type": "application/json", "Accept": "application/json, text/event-stream", **headers},
        )

    async def _open_stream(self, session_id: str | None) -> None:
        """Start reading an SSE stream; returns once the server has answered its `GET` with 200."""
        opened: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._streams[session_id] = asyncio.create_task(self._read_stream(session_id, opened))
        await opened

    async def _read_stream(self, session_id: str | None, opened: asyncio.Future[None]) -> None:
        assert self._connection_id is not None
        headers = {"Accept": "text/event-stream", "Acp-Connection-Id": self._connection_id}
        if session_id is not None:
            headers["Acp-Session-Id"] = session_id
        try:
            async with self._http.stream("GET", self._url, headers=headers) as response:
                if response.status_code != 200:
                    raise WireError(f"SSE GET for {session_id or 'the connection'}: {response.status_code}")
                opened.set_result(None)
                async for text in response.aiter_lines():
                    if text.startswith("data:"):  # one JSON-RPC message per event, on one line
                        self._incoming.put_nowait(([text[5:].strip().encode()], time.perf_counter_ns()))
        except BaseException as exc:
            if not opened.done():
                opened.set_exception(exc if isinstance(exc, Exception) else WireError("stream cancelled"))
            raise

    async def send(self, *messages: Message) -> int:
        t_write = time.perf_counter_ns()
        for message in messages:
            if self._connection_id is None:  # the first message: initialize, answered in the POST's body
                if message.get("method") != "initialize":
                    raise WireError("the first message over Streamable HTTP must be initialize")
                response = await self._post(message, {})
                if response.status_code in (404, 405):
                    raise HttpNotServedError(f"POST /acp answered {response.status_code}")
                if response.status_code != 200 or "acp-connection-id" not in response.headers:
                    raise WireError(f"POST initialize: {response.status_code} {response.text[:200]}")
                self._connection_id = response.headers["acp-connection-id"]
                self._incoming.put_nowait(([response.content.strip()], time.perf_counter_ns()))
                await self._open_stream(None)
                continue
            headers = {"Acp-Connection-Id": self._connection_id}
            session_id = (message.get("params") or {}).get("sessionId")
            if isinstance(session_id, str):
                headers["Acp-Session-Id"] = session_id
                if session_id not in self._streams:
                    await self._open_stream(session_id)
            response = await self._post(message, headers)
            if response.status_code != 202:
                raise WireError(f"POST {message.get('method')}: {response.status_code} {response.text[:200]}")
        return t_write

    async def receive(self) -> tuple[list[bytes], int]:
        if self._closed:
            return [], time.perf_counter_ns()
        return await self._incoming.get()

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._incoming.put_nowait(([], time.perf_counter_ns()))
        with contextlib.suppress(Exception):
            if self._connection_id is not None:
                await self._http.delete(self._url, headers={"Acp-Connection-Id": self._connection_id})
        for task in self._streams.values():
            task.cancel()
        for task in self._streams.values():
            with contextlib.suppress(BaseException):
                await task
        await self._http.aclose()


class Client:
    """Requests and responses by id over any `Link`, with per-session chunk counts (read, not parsed)."""

    def __init__(self, link: Link) -> None:
        self.link = link
        self.chunks = 0
        self.chunks_by_session: dict[str, int] = {}
        self._ids = 0
        self._pending: dict[int, asyncio.Future[tuple[Message, int]]] = {}
        self._waiting: dict[str, tuple[int, asyncio.Future[None]]] = {}  # session -> (chunk count, wakes at it)
        self._closing = False
        self._reader = asyncio.create_task(self._read())

    async def _read(self) -> None:
        counts = self.chunks_by_session
        while True:
            lines, t_read = await self.link.receive()
            if not lines:
                break
            for line in lines:
                if line.startswith(UPDATE_PREFIX):
                    if MESSAGE_CHUNK in line:
                        self.chunks += 1
                        session = line[_SESSION_AT : line.index(b'"', _SESSION_AT)].decode()
                        count = counts[session] = counts.get(session, 0) + 1
                        waiting = self._waiting.get(session)
                        if waiting is not None and count >= waiting[0]:
                            del self._waiting[session]
                            if not waiting[1].done():
                                waiting[1].set_result(None)
                    continue
                if not line:
                    continue
                message = orjson.loads(line)
                if "method" in message:
                    continue  # other notifications and probes; a scripted turn asks the client nothing
                future = self._pending.pop(message.get("id"), None)
                if future is not None and not future.done():
                    future.set_result((message, t_read))
        for future in self._pending.values():
            if not future.done():  # a close cancels what nobody will wait for; an end from the server is an error
                if self._closing:
                    future.cancel()
                else:
                    future.set_exception(WireError("the connection ended before the answer"))

    async def request(self, method: str, params: Any) -> tuple[asyncio.Future[tuple[Message, int]], int]:
        """Send a request; its response (with the time it was read) is the future's, `int` is the write time."""
        self._ids += 1
        future: asyncio.Future[tuple[Message, int]] = asyncio.get_running_loop().create_future()
        self._pending[self._ids] = future
        try:
            t_write = await self.link.send({"id": self._ids, "method": method, "params": params})
        except BaseException:
            del self._pending[self._ids]
            raise
        return future, t_write

    async def call(self, method: str, params: Any, timeout: float = 60.0) -> Message:
        future, _ = await self.request(method, params)
        message, _ = await asyncio.wait_for(future, timeout)
        if "result" not in message:
            raise WireError(f"{method} failed: {message.get('error')}")
        result: Message = message["result"]
        return result

    async def notify(self, method: str, params: Any) -> int:
        return await self.link.send({"method": method, "params": params})

    async def initialize(self) -> None:
        result = await self.call("initialize", {"protocolVersion": 1, "clientCapabilities": {}})
        if result.get("protocolVersion") != 1:
            raise WireError(f"initialize: {result}")

    async def new_session(self, cwd: str) -> str:
        session: str = (await self.call("session/new", {"cwd": cwd, "mcpServers": []}))["sessionId"]
        return session

    async def streamed(self, session: str, count: int, timeout: float = 60.0) -> None:
        """Wait until `session` has streamed `count` chunks in all."""
        if self.chunks_by_session.get(session, 0) >= count:
            return
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiting[session] = (count, future)
        await asyncio.wait_for(future, timeout)

    async def close(self) -> None:
        self._closing = True
        await self.link.close()
        self._reader.cancel()
        with contextlib.suppress(BaseException):
            await self._reader


TRANSPORTS = ("stdio", "websocket", "http")


class Spawned:
    """One server process for a transport, started with `--model scripted --test-mode` and `args`: the stdio agent
    (one connection: its pipes), or `serve` on 127.0.0.1 port 0 with its own token file (any number of
    connections). stderr goes to a file nobody has to drain."""

    ANNOUNCE: ClassVar[re.Pattern[bytes]] = re.compile(rb"serving (ws://\S+)")

    def __init__(self, transport: str, process: asyncio.subprocess.Process, stderr: IO[bytes], workdir: str) -> None:
        self.transport = transport
        self.compress = True  # WebSocket connections offer permessage-deflate
        self.process = process
        self.stderr = stderr
        self.workdir = workdir  # this server's own directory (its token file), removed by `stop`
        self.workspace = workdir  # the sessions' cwd (and serve's workspace root)
        self.token = ""
        self.ws_url = ""
        self._stdio_taken = False

    @classmethod
    async def start(
        cls, transport: str, *args: str, compress: bool = True, token: str | None = None, workspace: str | None = None
    ) -> Spawned:
        """`token` and `workspace` (serve's `--workspace-root`, the sessions' cwd) shared by replicas behind one
        balancer: a client does not know in advance which one it lands on. A `workspace` given is the caller's (not
        removed by `stop`); by default each server gets its own."""
        workdir = tempfile.mkdtemp(prefix="acp-bench-remote-")
        stderr = tempfile.TemporaryFile()  # noqa: SIM115 (closed in stop())
        model = ("--model", "scripted", "--test-mode", *args)
        token = token or secrets.token_urlsafe(24)
        if transport == "stdio":
            command = server_command(*model)
        else:
            tokens = Path(workdir) / "tokens"
            tokens.write_text(f"bench {token}\n")
            tokens.chmod(0o600)
            root = workspace or workdir
            serve = ("serve", "--listen", "127.0.0.1:0", "--token-file", str(tokens), "--workspace-root", root)
            command = server_command(*serve, *model)
        process = await asyncio.create_subprocess_exec(
            *command,
            stdin=asyncio.subprocess.PIPE if transport == "stdio" else asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE if transport == "stdio" else asyncio.subprocess.DEVNULL,
            stderr=stderr,
            env={**os.environ, **isolated_env()},
            cwd=workdir,
            start_new_session=True,
        )
        spawned = cls(transport, process, stderr, workdir)
        spawned.workspace = workspace or workdir
        spawned.token = token
        spawned.compress = compress
        if transport != "stdio":
            await spawned._wait_for_announce()
        return spawned

    async def _wait_for_announce(self, timeout: float = 120.0) -> None:
        deadline = time.monotonic() + timeout
        while (found := self.ANNOUNCE.search(self._stderr_text())) is None:
            if self.process.returncode is not None or time.monotonic() > deadline:
                raise WireError(f"serve did not start listening: {self.stderr_tail()}")
            await asyncio.sleep(0.02)
        self.ws_url = found.group(1).decode()

    def _stderr_text(self) -> bytes:
        self.stderr.seek(0)
        return self.stderr.read()

    def stderr_tail(self, limit: int = 2000) -> str:
        return self._stderr_text().decode(errors="replace")[-limit:]

    @property
    def pid(self) -> int:
        return self.process.pid

    @property
    def http_url(self) -> str:
        return "http" + self.ws_url.removeprefix("ws")

    def rss_kb(self) -> int:
        for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
        raise WireError("no VmRSS in /proc/<pid>/status")

    async def link(self, transport: str | None = None) -> Link:
        """A new connection (`transport`: `http` on a serve started for `websocket` too: one endpoint)."""
        kind = transport or self.transport
        if kind == "stdio":
            if self._stdio_taken:
                raise WireError("the stdio agent has exactly one connection")
            self._stdio_taken = True
            return StdioLink(self.process)
        if kind == "websocket":
            return await WebSocketLink.open(self.ws_url, self.token, compress=self.compress)
        return HttpLink(self.http_url, self.token)

    async def client(self, transport: str | None = None) -> Client:
        """A new connection, initialized (ACP v1)."""
        client = Client(await self.link(transport))
        try:
            await client.initialize()
        except BaseException:
            await client.close()
            raise
        return client

    async def stop(self, timeout: float = 10.0) -> None:
        """stdio: stdin EOF; serve: SIGTERM (its drain). Killed only on a hang."""
        if self.process.returncode is None:
            if self.transport == "stdio":
                if self.process.stdin is not None and not self.process.stdin.is_closing():
                    self.process.stdin.close()
            else:
                self.process.terminate()
            try:
                await asyncio.wait_for(self.process.wait(), timeout)
            except TimeoutError:
                self.process.kill()
                await self.process.wait()
        self.stderr.close()
        shutil.rmtree(self.workdir, ignore_errors=True)

    async def __aenter__(self) -> Spawned:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.stop()
