"""Drive `acp-server` over a real transport and check what crosses the wire.

A `Transport` moves whole lines between a test and one connection of a server it started: `StdioTransport` is the
subprocess over its stdin/stdout, the way an editor runs it; `TRANSPORTS` lists every transport by name, and a test
marked `every_transport` (tests/conftest.py) runs once over each. `RawClient` writes exact bytes (several messages in
one write, malformed lines, odd ids) and records every line in both directions with a monotonic timestamp, in wire
order, validating each line the server writes against the schema as it arrives. A batch (a line holding a JSON array,
either way) is logged as one entry whose `msg` is the array; `received` holds a batch response's elements one by one,
and the checks read a batch's entries as the messages they are. `check_wire` then applies the common checks of
docs/interrupts.md to the log: C1 (one response per request, none to notifications), C2 (only valid JSON-RPC lines,
each valid against the official schema, every element of a batch response too), C3 (no turn-scoped update for a
session with no unanswered prompt), C4 (no agent-to-client request for a session with no unanswered prompt), and,
from stderr, C6.
A v2 connection (its `initialize` answered `protocolVersion: 2`) is checked against the v2 schema, and C3/C4 take
their v2 reading (ACP-V2.md §20.7): the prompt is answered on acceptance, so turn-scoped updates and requests to the
client belong between a session's `running` (or `requires_action`) `state_update` and its `idle`, or inside an open
`session/resume` (its replay); an `idle` with a stop reason must end work that a `running` started.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import functools
import itertools
import math
import os
import re
import shutil
import signal
import sys
import tempfile
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Coroutine, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Protocol, Self

import orjson
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed

from acp_server.jsonrpc.rpc import MAX_BATCH_ENTRIES
from tests.support.wire_schema import WireValidator


def _time_scale() -> float:
    """ACP_TEST_TIME_SCALE: how much slower than a quiet machine this one may be (1 by default; `.ci/run` sets a
    fixed value). An empty value counts as unset, as for every variable of the project."""
    raw = os.environ.get("ACP_TEST_TIME_SCALE", "").strip() or "1"
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value > 0):
        raise SystemExit(f"ACP_TEST_TIME_SCALE must be a positive number (a factor like 3), found {raw!r}")
    return value


TIME_SCALE = _time_scale()


def scaled(seconds: float) -> float:
    """A bound a test waits for, scaled by the one factor ACP_TEST_TIME_SCALE: a safety bound, never a speed claim."""
    return seconds * TIME_SCALE


# docs/interrupts.md "Timing in tests": durations the server is given (GRACE) define behaviour and stay as they are;
# every bound a test waits for is the target times a safety factor, times TIME_SCALE for a loaded machine.
GRACE = 0.5  # the cleanup deadline the tests start the server with
# For tests whose point is "at once, not at the deadline": a deadline far above T_ACK, scaled with it, so the two
# never blur however big the scale factor.
LONG_GRACE = scaled(10.0)
T_ACK = scaled(1.0)  # target 250 ms p95 / 1 s max; a loaded 2-core CI machine gets the max
T_ESC = GRACE + scaled(0.5 + 1.0)  # target T_grace + 0.5 s, plus slack for CI
T_START = scaled(1.25)  # target 250 ms, 5x
T_EXIT = GRACE + scaled(1.0 + 1.0)  # target T_grace + 1 s, plus slack for process teardown on a loaded machine
T_WAIT = scaled(5.0)  # the default wait for something that must happen (a response, a probe, a request)
W_QUIET = scaled(0.5)  # observation window for "nothing more happens"

TURN_SCOPED = {"agent_message_chunk", "agent_thought_chunk", "tool_call", "tool_call_update", "plan"}
# v2's turn output (ACP-V2.md §6.2): only between `running` and `idle`, or in a resume's replay.
TURN_SCOPED_V2 = {
    "agent_message_chunk",
    "agent_message",
    "agent_thought_chunk",
    "agent_thought",
    "tool_call_update",
    "tool_call_content_chunk",
    "plan_update",
    "terminal_update",
    "terminal_output_chunk",
}
STDERR_RED_FLAGS = (
    "Task exception was never retrieved",
    "Attempted to exit cancel scope in a different task",
    "Unhandled CancelledError",
    "was never awaited",
)


@functools.cache
def _scratch_root() -> str:
    """One directory per test process for every server's state directory and log file, removed when the process
    exits: a state directory per server started once leaked into the temp directory (thousands per run, tens of MB
    each), and the demo turn's `list_files` of `/tmp` slowed with them."""
    root = tempfile.mkdtemp(prefix="acp-server-tests-")
    atexit.register(shutil.rmtree, root, ignore_errors=True)
    return root


def isolated_env() -> dict[str, str]:
    """No user's real config file, session store or log file is touched by a test: a config path that does not
    exist, and a fresh state directory and log file for every server started (under `_scratch_root`)."""
    root = _scratch_root()
    return {
        "ACP_SERVER_CONFIG": "/nonexistent/acp-server-test/config.toml",
        "ACP_SERVER_STATE_DIR": tempfile.mkdtemp(prefix="state-", dir=root),
        "ACP_SERVER_LOG_FILE": os.path.join(tempfile.mkdtemp(prefix="log-", dir=root), "acp-server.log"),
        # A Python MCP server takes seconds to start on a loaded machine: the turn's wait for it scales too.
        "ACP_SERVER_MCP_START_WAIT": f"{scaled(10):g}",
    }


def server_command(*args: str) -> list[str]:
    """The installed console script when there is one (the real entry point), else `python -m acp_server`."""
    script = shutil.which("acp-server", path=str(Path(sys.executable).parent))
    base = [script] if script else [sys.executable, "-m", "acp_server"]
    return [*base, *args]


DEFAULT_ARGS = ("--model", "scripted", "--test-mode", "--cleanup-deadline", str(GRACE))
# The same server with a deadline far above T_ACK (see LONG_GRACE).
LONG_GRACE_ARGS = ("--model", "scripted", "--test-mode", "--cleanup-deadline", f"{LONG_GRACE:g}")


# --- transports: how a test reaches a server ---


class Transport(Protocol):
    """One editor's connection to a server started for a test: what `RawClient` and the SDK tee need from the wire.

    Everything above this seam (the log, the schema validation of every line the server writes, C1-C4, C6) is the
    same on every transport; a transport only moves whole lines: stdio, and remote ACP's `websocket` and `http`, one
    class each (start `acp-server serve`, connect, map a frame or an SSE event to a line); an entry in `TRANSPORTS`
    runs every test that takes the `transport` fixture over it too.
    """

    name: ClassVar[str]

    @classmethod
    async def start(
        cls,
        args: Sequence[str],
        *,
        env: dict[str, str] | None = None,
        cwd: str | None = None,
        command: Sequence[str] | None = None,
        line_limit: int = ...,
    ) -> Self:
        """Start a server with the settings `args` (as `acp-server ARGS` takes them) and connect to it. `env` is added
        to the isolated environment; `command`, where a transport can honour it, replaces the whole command line;
        `line_limit` bounds the longest line `receive` returns."""
        ...

    @property
    def process(self) -> asyncio.subprocess.Process:
        """The server process behind the connection (its stderr piped): for signals, RSS, exit status."""
        ...

    async def send(self, data: bytes) -> None:
        """Write `data` exactly as given: one or more lines, in one write where the transport can."""
        ...

    async def receive(self) -> bytes:
        """The next line the server wrote to this connection, with its newline; b"" once it will write no more."""
        ...

    @property
    def at_eof(self) -> bool:
        """Whether `receive` has nothing more to give."""
        ...

    async def close(self) -> None:
        """End the connection as an editor does and let the server this transport started stop: stdin EOF does
        both on stdio; a remote transport closes its connection (WebSocket close, HTTP `DELETE`), then asks its
        server to drain (SIGTERM, REMOTE.md decision 9). The caller waits for `process` to exit, bounded."""
        ...


READ_LIMIT = 256 * 1024 * 1024  # the longest line a test reads: far above anything the server may write


class StdioTransport:
    """The server as an editor starts it: a subprocess (in its own process group) speaking over its stdin/stdout."""

    name: ClassVar[str] = "stdio"

    def __init__(self, process: asyncio.subprocess.Process) -> None:
        assert process.stdin is not None and process.stdout is not None
        self._process = process
        self._stdin = process.stdin
        self._stdout = process.stdout

    @classmethod
    async def start(
        cls,
        args: Sequence[str],
        *,
        env: dict[str, str] | None = None,
        cwd: str | None = None,
        command: Sequence[str] | None = None,
        line_limit: int = READ_LIMIT,
    ) -> StdioTransport:
        process = await asyncio.create_subprocess_exec(
            *(command if command is not None else server_command(*args)),
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            # A user's real config file never leaks into a test: point at one that does not exist unless told.
            env={**os.environ, **isolated_env(), **(env or {})},
            cwd=cwd,
            limit=line_limit,
            start_new_session=True,
        )
        return cls(process)

    @property
    def process(self) -> asyncio.subprocess.Process:
        return self._process

    async def send(self, data: bytes) -> None:
        self._stdin.write(data)
        await self._stdin.drain()

    async def receive(self) -> bytes:
        return await self._stdout.readline()

    @property
    def at_eof(self) -> bool:
        return self._stdout.at_eof()

    async def close(self) -> None:
        self._stdin.close()


# The token `WebSocketTransport` connects with (base64url, 216 bits), for its principal `editor`.
WEBSOCKET_TOKEN = "editor-" + "E" * 30


async def _start_serve(
    args: Sequence[str], env: dict[str, str] | None, cwd: str | None
) -> tuple[asyncio.subprocess.Process, str]:
    """`acp-server serve` for a remote transport (workspace root `/`, one token), and the URL it announced."""
    tokens = Path(tempfile.mkdtemp(prefix="acp-server-test-tokens-")) / "tokens"
    tokens.write_text(f"editor {WEBSOCKET_TOKEN}\n")
    tokens.chmod(0o600)
    serve = ("serve", "--listen", "127.0.0.1:0", "--token-file", str(tokens), "--workspace-root", "/")
    process = await asyncio.create_subprocess_exec(
        *server_command(*serve, *args),
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
        env={**os.environ, **isolated_env(), **(env or {})},
        cwd=cwd,
        start_new_session=True,
    )
    assert process.stderr is not None
    announced = b""
    async with asyncio.timeout(T_START * 8):
        while (found := re.search(rb"serving (ws://\S+)", announced)) is None:
            line = await process.stderr.readline()
            assert line, f"serve ended before it listened: {announced.decode(errors='replace')}"
            announced += line
    return process, found.group(1).decode()


class WebSocketTransport:
    """The server as `acp-server serve` (a subprocess in its own process group, on 127.0.0.1 port 0) and one
    authenticated WebSocket connection to it (the `websockets` client): a line sent is one text frame, a frame
    received is one line. Its workspace root is `/`, given explicitly: the invariant tests' sessions live in temp
    directories, and roots are tests/e2e/test_serve.py's to test. `close` drains the server (SIGTERM, REMOTE.md
    decision 9): the connection's input ends as stdin's does at EOF, and its last answers still arrive before the
    server closes it and exits."""

    name: ClassVar[str] = "websocket"

    def __init__(self, process: asyncio.subprocess.Process, ws: ClientConnection) -> None:
        self._process = process
        self._ws = ws
        self._partial = b""
        self._eof = False

    @classmethod
    async def start(
        cls,
        args: Sequence[str],
        *,
        env: dict[str, str] | None = None,
        cwd: str | None = None,
        command: Sequence[str] | None = None,
        line_limit: int = READ_LIMIT,
    ) -> WebSocketTransport:
        del command, line_limit  # a wrapper command line is stdio's; a frame is never split into lines
        process, url = await _start_serve(args, env, cwd)
        headers = {"Authorization": f"Bearer {WEBSOCKET_TOKEN}"}
        ws = await connect(url, additional_headers=headers, max_size=None)
        return cls(process, ws)

    @property
    def process(self) -> asyncio.subprocess.Process:
        return self._process

    async def send(self, data: bytes) -> None:
        *lines, self._partial = (self._partial + data).split(b"\n")
        if not lines:
            return
        # One frame per line, and all the frames of one `send` in one socket write, as stdio's one `write` puts its
        # lines in the pipe at once, so lines sent together arrive together (docs/remote.md, "Messages sent
        # together"). Awaiting `ws.send` per line let this loop run its reader between the frames: under load the
        # second of two back-to-back prompts reached the server after the first was inserted (I14). `send_context`
        # writes what the protocol queued when it exits: that is taken here and written as one piece.
        ws = self._ws
        async with ws.send_context():
            for line in lines:
                ws.protocol.send_text(line.decode(errors="surrogateescape").encode())
            frames = b"".join(ws.protocol.data_to_send())
            ws.transport.write(frames)

    async def receive(self) -> bytes:
        try:
            frame = await self._ws.recv()
        except ConnectionClosed:
            self._eof = True
            return b""
        return (frame.encode() if isinstance(frame, str) else frame) + b"\n"

    @property
    def at_eof(self) -> bool:
        return self._eof

    async def close(self) -> None:
        # A drain is this transport's stdin EOF: the connection's input ends, its turns are cancelled and answered,
        # what it wrote is flushed, then the server closes the connection and exits. A client-side close first would
        # lose those answers, which stdio's half-closed pipe still delivers (C1).
        if self._process.returncode is None:
            self._process.send_signal(signal.SIGTERM)


class HttpTransport:
    """The server as `acp-server serve` (as `WebSocketTransport` starts it) and one Streamable HTTP connection to it
    (httpx), as the TypeScript SDK's `createHttpStream` speaks it: each line sent is POSTed (the first, `initialize`,
    makes the connection and its body is the first line received), with `Acp-Session-Id` for a session's message
    and for the answer to a request that came on a session's stream; the connection's SSE stream is read from the
    start, and a session's from before its first message is POSTed or as soon as an answer names it. Every event of
    every stream is one line received, in the order it arrives. `close` drains the server, as WebSocket's does."""

    name: ClassVar[str] = "http"

    def __init__(self, process: asyncio.subprocess.Process, url: str) -> None:
        import httpx

        self._process = process
        self._url = url
        self._client = httpx.AsyncClient(
            timeout=httpx.Timeout(T_START * 8, read=None), trust_env=False, limits=httpx.Limits(max_connections=None)
        )
        self._partial = b""
        self._connection_id: str | None = None
        self._lines: asyncio.Queue[bytes] = asyncio.Queue()
        self._streams: dict[str | None, asyncio.Event] = {}  # each stream read, and whether its headers came
        self._reading = 0
        self._readers: set[asyncio.Task[None]] = set()  # owned here, cancelled by `close`
        self._asked: dict[bytes, str] = {}  # the id of a request that came on a session's stream -> that session
        self._eof = False

    @classmethod
    async def start(
        cls,
        args: Sequence[str],
        *,
        env: dict[str, str] | None = None,
        cwd: str | None = None,
        command: Sequence[str] | None = None,
        line_limit: int = READ_LIMIT,
    ) -> HttpTransport:
        del command, line_limit
        process, url = await _start_serve(args, env, cwd)
        return cls(process, url.replace("ws://", "http://", 1))

    @property
    def process(self) -> asyncio.subprocess.Process:
        return self._process

    def _headers(self, session: str | None = None) -> dict[str, str]:
        headers = {"Authorization": f"Bearer {WEBSOCKET_TOKEN}"}
        if self._connection_id is not None:
            headers["Acp-Connection-Id"] = self._connection_id
        if session is not None:
            headers["Acp-Session-Id"] = session
        return headers

    async def _open(self, session: str | None) -> None:
        """Start reading a stream (once per stream) and wait for its headers."""
        opened = self._streams.get(session)
        if opened is None:
            opened = self._streams[session] = asyncio.Event()
            self._reading += 1
            self._spawn(self._read(session, opened))
        await opened.wait()

    def _spawn(self, work: Coroutine[Any, Any, None]) -> None:
        task = asyncio.get_running_loop().create_task(work)
        self._readers.add(task)
        task.add_done_callback(self._readers.discard)

    async def _read(self, session: str | None, opened: asyncio.Event) -> None:
        headers = {**self._headers(session), "Accept": "text/event-stream"}
        try:
            async with self._client.stream("GET", self._url, headers=headers) as response:
                opened.set()
                async for text in response.aiter_lines():
                    if not text.startswith("data: "):
                        continue
                    line = text[6:].encode()
                    message = orjson.loads(line)
                    if isinstance(message, dict):
                        if session is not None and "method" in message and "id" in message:
                            self._asked[orjson.dumps(message["id"])] = session
                        result = message.get("result")
                        if isinstance(result, dict) and isinstance(result.get("sessionId"), str):
                            self._spawn(self._open(result["sessionId"]))
                    await self._lines.put(line + b"\n")
        except Exception:
            pass
        finally:
            opened.set()
            self._reading -= 1
            if self._reading == 0:  # every stream has ended: so has the connection
                await self._lines.put(b"")
                await self._client.aclose()

    async def send(self, data: bytes) -> None:
        *lines, self._partial = (self._partial + data).split(b"\n")
        for line in lines:
            await self._post(line)

    async def _post(self, line: bytes) -> None:
        try:
            message = orjson.loads(line)
        except orjson.JSONDecodeError:
            message = None
        session: str | None = None
        if isinstance(message, dict):
            params = message.get("params")
            if isinstance(params, dict) and isinstance(params.get("sessionId"), str):
                session = params["sessionId"]
            elif "method" not in message and "id" in message:
                session = self._asked.pop(orjson.dumps(message["id"]), None)
        if self._connection_id is None:
            answer = await self._client.post(
                self._url, content=line, headers={**self._headers(), "Content-Type": "application/json"}
            )
            self._connection_id = answer.headers.get("acp-connection-id")
            if answer.content:
                await self._lines.put(answer.content + b"\n")
            if self._connection_id is not None:
                await self._open(None)
            return
        if session is not None:
            await self._open(session)
        headers = {**self._headers(session), "Content-Type": "application/json"}
        await self._client.post(self._url, content=line, headers=headers)

    async def receive(self) -> bytes:
        if self._eof:
            return b""
        line = await self._lines.get()
        if not line:
            self._eof = True
        return line

    @property
    def at_eof(self) -> bool:
        return self._eof

    async def close(self) -> None:
        # As WebSocket's: a drain is this transport's stdin EOF (a DELETE would drop the connection's last answers).
        if self._process.returncode is None:
            self._process.send_signal(signal.SIGTERM)


# Every transport a test can be run over, by the id it shows in a test's name; tests taking the `transport` fixture
# (tests/conftest.py) under `every_transport` run over each. `HttpTransport` is not among them yet: over it every
# `every_transport` test passed but one, I14 on v2 in test_v2_invariants.py
# (test_v2_back_to_back_prompts_under_interrupt_leave_only_the_last_to_run), whose two prompts must "arrive together":
# over Streamable HTTP each message is its own POST, answered before the next is sent, so the second arrives a round
# trip later, after the first was already inserted. That profile has no way to send two messages together (a batch is
# 501, the RFD; docs/remote.md, "Messages sent together"), so that scenario cannot be written for it; until the test
# says so, the profile's own tests are tests/e2e/test_remote_http.py.
TRANSPORTS: dict[str, type[Transport]] = {
    StdioTransport.name: StdioTransport,
    WebSocketTransport.name: WebSocketTransport,
}


@dataclass
class Entry:
    seq: int
    t: float
    dir: str  # "in" (client -> server) or "out"
    msg: Any  # parsed message (a list for a batch), or None for a raw line that is not JSON
    raw: bytes


def messages_of(msg: Any) -> list[dict[str, Any]]:
    """The JSON-RPC objects of a logged line: itself, or a batch's entries that are objects."""
    if isinstance(msg, dict):
        return [msg]
    if isinstance(msg, list):
        return [entry for entry in msg if isinstance(entry, dict)]
    return []


@dataclass
class RawClient:
    """A raw-line client over any `Transport`: exact bytes out, every line in both directions logged and the
    server's lines validated against the schema of the connection's version."""

    transport: Transport
    validator: WireValidator = field(default_factory=WireValidator)
    log: list[Entry] = field(default_factory=list)
    received: list[dict[str, Any]] = field(default_factory=list)
    stderr_text: str = ""
    _ids: itertools.count[int] = field(default_factory=lambda: itertools.count(1))
    _seq: itertools.count[int] = field(default_factory=itertools.count)
    _arrived: asyncio.Event = field(default_factory=asyncio.Event)
    _reader: asyncio.Task[None] | None = None
    _stderr_reader: asyncio.Task[bytes] | None = None
    _eof: bool = False
    _responses: dict[tuple[str, Any], dict[str, Any]] = field(default_factory=dict)
    # When each response arrived, by the message's identity: arrival_time without scanning the whole log.
    _response_arrivals: dict[int, float] = field(default_factory=dict)

    @classmethod
    async def start(
        cls,
        *args: str,
        env: dict[str, str] | None = None,
        cwd: str | None = None,
        command: Sequence[str] | None = None,
        transport: type[Transport] = StdioTransport,
    ) -> RawClient:
        """`command`: the server's command line instead of `server_command(*args)` (another user's interpreter,
        behind `setpriv` or a wrapper shell). `transport`: how to reach it (stdio unless told)."""
        client = cls(await transport.start(args or DEFAULT_ARGS, env=env, cwd=cwd, command=command))
        client._reader = asyncio.create_task(client._read_stdout())
        stderr = client.process.stderr
        assert stderr is not None
        client._stderr_reader = asyncio.create_task(stderr.read())
        return client

    @property
    def process(self) -> asyncio.subprocess.Process:
        """The server process (whatever the transport): for signals, RSS and its exit."""
        return self.transport.process

    @property
    def at_eof(self) -> bool:
        """Whether the server has written its last line to this connection."""
        return self.transport.at_eof

    async def _read_stdout(self) -> None:
        while line := await self.transport.receive():
            written = self.validator.server_wrote_any(line)
            arrived = time.monotonic()
            self.log.append(Entry(next(self._seq), arrived, "out", written, line))
            for message in messages_of(written):
                self.received.append(message)
                if "method" not in message and "id" in message:
                    self._responses.setdefault(request_key(message["id"]), message)
                    self._response_arrivals[id(message)] = arrived
            self._arrived.set()
        self._eof = True
        self._arrived.set()

    # --- writing ---

    async def write_raw(self, data: bytes) -> float:
        """Write bytes exactly as given; returns the time the write was flushed."""
        for line in data.splitlines():
            message = _parse_sent(line)
            self.validator.client_sent(message)
            self.log.append(Entry(next(self._seq), time.monotonic(), "in", message, line))
        await self.transport.send(data)
        return time.monotonic()

    async def send(self, *messages: dict[str, Any]) -> float:
        """Send messages in a single write (so they arrive together)."""
        return await self.write_raw(b"".join(orjson.dumps({"jsonrpc": "2.0", **m}) + b"\n" for m in messages))

    def next_id(self) -> int:
        return next(self._ids)

    async def request(self, method: str, params: Any = None, request_id: Any = None) -> Any:
        request_id = self.next_id() if request_id is None else request_id
        message: dict[str, Any] = {"id": request_id, "method": method}
        if params is not None:
            message["params"] = params
        await self.send(message)
        return request_id

    async def notify(self, method: str, params: Any = None) -> float:
        message: dict[str, Any] = {"method": method}
        if params is not None:
            message["params"] = params
        return await self.send(message)

    async def call(self, method: str, params: Any = None, timeout: float = T_WAIT) -> dict[str, Any]:
        """Send a request and wait for its response message."""
        return await self.response(await self.request(method, params), timeout)

    # --- reading ---

    async def read_to_end(self, timeout: float = T_WAIT) -> None:
        """Wait until stdout has been read to its end: everything the server wrote before it exited is received."""
        async with asyncio.timeout(timeout):
            while not self._eof:
                self._arrived.clear()
                await self._arrived.wait()

    async def wait_for(self, predicate: Callable[[dict[str, Any]], bool], timeout: float = T_WAIT) -> dict[str, Any]:
        """The first message (from the start of the connection) that matches."""
        deadline = time.monotonic() + timeout
        checked = 0
        while True:
            for message in self.received[checked:]:
                if predicate(message):
                    return message
            checked = len(self.received)
            if self._eof:
                raise AssertionError("the server closed stdout while a message was awaited")
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError(f"no matching message within {timeout} s; last: {self.received[-3:]}")
            self._arrived.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._arrived.wait(), remaining)

    async def response(self, request_id: Any, timeout: float = T_WAIT) -> dict[str, Any]:
        """The (first) response to `request_id`, looked up by id rather than by scanning everything received."""
        key = request_key(request_id)
        deadline = time.monotonic() + timeout
        while key not in self._responses:
            if self._eof:
                raise AssertionError(f"the server closed stdout before answering {request_id!r}")
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError(f"no response to {request_id!r} within {timeout} s; last: {self.received[-3:]}")
            self._arrived.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._arrived.wait(), remaining)
        return self._responses[key]

    async def probe(self, event: str, timeout: float = T_WAIT, **match: Any) -> dict[str, Any]:
        def matches(message: dict[str, Any]) -> bool:
            if message.get("method") != "_scripted/probe":
                return False
            params = message["params"]
            return bool(params.get("event") == event and all(params.get(k) == v for k, v in match.items()))

        return await self.wait_for(matches, timeout)

    def arrival_time(self, message: dict[str, Any]) -> float:
        arrived = self._response_arrivals.get(id(message))  # every message recorded stays alive in `received`
        if arrived is not None:
            return arrived
        return next(e.t for e in self.log if e.msg is message)

    def updates(self, session_id: str, kind: str | None = None) -> list[dict[str, Any]]:
        return [
            m["params"]["update"]
            for m in self.received
            if m.get("method") == "session/update"
            and m["params"]["sessionId"] == session_id
            and (kind is None or m["params"]["update"]["sessionUpdate"] == kind)
        ]

    def texts(self, session_id: str) -> list[str]:
        return [u["content"]["text"] for u in self.updates(session_id, "agent_message_chunk")]

    async def quiet(self, seconds: float, predicate: Callable[[dict[str, Any]], bool]) -> None:
        """Assert that nothing matching `predicate` arrives for `seconds` (W_quiet)."""
        await asyncio.sleep(seconds)
        offending = [m for m in self.received if predicate(m)]
        assert not offending, f"unexpected: {offending[:3]}"

    # --- ACP conveniences ---

    async def initialize(self, capabilities: dict[str, Any] | None = None) -> dict[str, Any]:
        response = await self.call("initialize", {"protocolVersion": 1, "clientCapabilities": capabilities or {}})
        assert "result" in response, response
        return response

    async def initialize_v2(self, capabilities: dict[str, Any] | None = None) -> dict[str, Any]:
        """The ACP v2 handshake: `info` and `capabilities` (object markers)."""
        params = {"protocolVersion": 2, "info": {"name": "harness", "version": "0"}, "capabilities": capabilities or {}}
        response = await self.call("initialize", params)
        assert response.get("result", {}).get("protocolVersion") == 2, response
        return response

    async def new_session_v2(self, cwd: str = "/tmp") -> str:
        """v2 `session/new`: `mcpServers` may be left out."""
        response = await self.call("session/new", {"cwd": cwd})
        assert "result" in response, response
        session_id: str = response["result"]["sessionId"]
        return session_id

    def states(self, session_id: str) -> list[dict[str, Any]]:
        """The session's v2 `state_update` states, in wire order."""
        return [u for u in self.updates(session_id, "state_update")]

    async def idle(self, session_id: str, nth: int = 1, timeout: float = T_WAIT) -> dict[str, Any]:
        """The session's `nth` v2 `idle` (from the start of the connection), as its whole message."""

        def matches(message: dict[str, Any]) -> bool:
            if message.get("method") != "session/update" or message["params"].get("sessionId") != session_id:
                return False
            update = message["params"]["update"]
            return bool(update.get("sessionUpdate") == "state_update" and update.get("state") == "idle")

        seen = 0

        def nth_match(message: dict[str, Any]) -> bool:
            nonlocal seen  # wait_for looks at each message once, in order
            if matches(message):
                seen += 1
                return seen == nth
            return False

        return await self.wait_for(nth_match, timeout)

    async def new_session(self, cwd: str = "/tmp") -> str:
        response = await self.call("session/new", {"cwd": cwd, "mcpServers": []})
        assert "result" in response, response
        session_id: str = response["result"]["sessionId"]
        return session_id

    def prompt_message(
        self, session_id: str, script: Sequence[dict[str, Any]], request_id: Any = None, text: str = "go"
    ) -> dict[str, Any]:
        return {
            "id": self.next_id() if request_id is None else request_id,
            "method": "session/prompt",
            "params": {
                "sessionId": session_id,
                "prompt": [{"type": "text", "text": text}],
                "_meta": {"scripted": list(script)},
            },
        }

    async def prompt(self, session_id: str, script: Sequence[dict[str, Any]], request_id: Any = None) -> Any:
        message = self.prompt_message(session_id, script, request_id)
        await self.send(message)
        return message["id"]

    async def cancel(self, session_id: Any) -> float:
        return await self.notify("session/cancel", {"sessionId": session_id})

    async def release(self, session_id: str, gate: str) -> float:
        return await self.notify("_scripted/release", {"sessionId": session_id, "gate": gate})

    async def stats(self) -> dict[str, Any]:
        response = await self.call("_acp_server/stats", {})
        result: dict[str, Any] = response["result"]
        return result

    # --- ending ---

    async def close(self, timeout: float = T_EXIT) -> tuple[int, float]:
        """End the connection (stdio: close stdin) and wait for the server to exit; returns (exit code, seconds it
        took)."""
        started = time.monotonic()
        await self.transport.close()
        try:
            code = await asyncio.wait_for(self.process.wait(), timeout)
        except TimeoutError:
            self.kill()
            raise AssertionError(f"the server did not exit within {timeout} s of stdin EOF") from None
        took = time.monotonic() - started
        if self._reader is not None:
            await asyncio.wait_for(self._reader, T_WAIT)
        if self._stderr_reader is not None:
            self.stderr_text = (await asyncio.wait_for(self._stderr_reader, T_WAIT)).decode(errors="replace")
        return code, took

    def kill(self) -> None:
        if self.process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, 9)


def _parse_sent(line: bytes) -> Any:
    """A line the client wrote, as JSON, or None. JSON whose only fault for orjson is a surrogate escape (a lone
    `"\\ud800"`) is still JSON, and a request the server must answer by its id: read with those escapes as U+FFFD
    (only its id and method matter here)."""
    try:
        return orjson.loads(line)
    except orjson.JSONDecodeError:
        pass
    try:
        return orjson.loads(re.sub(rb"\\u[dD][89a-fA-F][0-9a-fA-F]{2}", rb"\\ufffd", line))
    except orjson.JSONDecodeError:
        return None


async def wait_for_exit_undrained(process: asyncio.subprocess.Process, started: float, bound: float) -> float:
    """Poll `process` until it exits or `bound` + 1 s has passed since `started`, then kill it if it is still alive;
    how long after `started` it left. Polled, because asyncio's `wait()` would also wait for a stdout pipe the caller
    never drains (the point of the tests that use it). The caller reads what is left and checks the exit status."""
    while process.returncode is None and time.monotonic() - started < bound + 1:  # noqa: ASYNC110 - no event exists
        await asyncio.sleep(0.02)
    took = time.monotonic() - started
    if process.returncode is None:
        process.kill()
    return took


def is_response(message: dict[str, Any], request_id: Any) -> bool:
    return (
        "method" not in message
        and "id" in message
        and type(message["id"]) is type(request_id)
        and message["id"] == request_id
    )


def processes() -> list[tuple[int, int, int, str, str]]:
    """(pid, ppid, pgid, state, command name) of every process, from /proc: to check what a server left running."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        name = stat[stat.find("(") + 1 : stat.rfind(")")]
        state, ppid, pgid = stat.rsplit(")", 1)[1].split()[:3]
        found.append((int(entry.name), int(ppid), int(pgid), state, name))
    return found


def valid_id(request_id: Any) -> bool:
    return request_id is None or isinstance(request_id, str) or type(request_id) is int


def request_key(request_id: Any) -> tuple[str, Any]:
    """Ids 1 and "1" are different requests; an invalid (object) id still gets a hashable key."""
    if isinstance(request_id, (dict, list)):
        try:
            return (type(request_id).__name__, orjson.dumps(request_id, option=orjson.OPT_SORT_KEYS))
        except TypeError:  # nested deeper than orjson writes (the deep-JSON tests): never paired anyway
            return (type(request_id).__name__, id(request_id))
    return (type(request_id).__name__, request_id)


def speaks_v2(client: WireRecord) -> bool:
    """Whether the server answered this connection's `initialize` with protocol version 2."""
    initializes = {
        request_key(m["id"])
        for e in client.log
        if e.dir == "in"
        for m in messages_of(e.msg)
        if m.get("method") == "initialize" and "id" in m
    }
    return any(
        e.dir == "out"
        and request_key(m.get("id")) in initializes
        and isinstance(m.get("result"), dict)
        and m["result"].get("protocolVersion") == 2
        for e in client.log
        for m in messages_of(e.msg)
    )


def logged_messages(log: list[Entry]) -> Iterator[tuple[Entry, dict[str, Any]]]:
    """Every JSON-RPC object in the log, in wire order, with its line's entry: a batch's entries one by one, except
    those of a batch over the server's bound (refused whole, with one -32600: none of them is a request it took)."""
    for entry in log:
        if entry.dir == "in" and isinstance(entry.msg, list) and len(entry.msg) > MAX_BATCH_ENTRIES:
            continue
        for message in messages_of(entry.msg):
            yield entry, message


def check_wire_v2(client: WireRecord) -> list[str]:
    """C3/C4 in their v2 reading (see the module docstring), and ACP-STATE-201 (a completing idle follows work)."""
    problems: list[str] = []
    working: set[str] = set()  # sessions between running/requires_action and idle
    resumes: dict[tuple[str, Any], str] = {}
    resuming: Counter[str] = Counter()
    for entry, message in logged_messages(client.log):
        if entry.dir == "in":
            params = message.get("params")
            resumed = params.get("sessionId") if isinstance(params, dict) else None
            if message.get("method") == "session/resume" and "id" in message and isinstance(resumed, str):
                resumes[request_key(message["id"])] = resumed
                resuming[resumed] += 1
            continue
        method = message.get("method")
        if method is None:
            resumed = resumes.pop(request_key(message.get("id")), None)
            if resumed is not None:
                resuming[resumed] -= 1
            continue
        params = message.get("params") or {}
        session_id = str(params.get("sessionId"))
        update = params.get("update", {}) if method == "session/update" else {}
        kind = update.get("sessionUpdate")
        if kind == "state_update":
            state = update.get("state")
            if state in ("running", "requires_action"):
                working.add(session_id)
            elif state == "idle":
                if session_id not in working and not resuming[session_id]:
                    problems.append(f"ACP-STATE-201: an idle outside a resume ends no work: {entry.raw[:200]!r}")
                working.discard(session_id)
            continue
        turn_update = kind in TURN_SCOPED_V2
        # `mcp/message` is the connection's, not a session's (a client's MCP server is listed when a session opens
        # and subscribed to while it lives): like v1's reading, C4 is about requests for a session.
        client_request = (
            "id" in message and not method.startswith("_") and method not in ("session/update", "mcp/message")
        )
        if (turn_update or client_request) and session_id not in working and not resuming[session_id]:
            check = "C3 (v2): turn update" if turn_update else "C4 (v2): client request"
            problems.append(f"{check} outside running..idle on {session_id}: {entry.raw[:200]!r}")
    return problems


class WireRecord(Protocol):
    """What the common checks read: both directions in wire order, the schema verdicts, the server's stderr. A
    `RawClient` is one; so is the SDK tee's `WireTap`."""

    validator: WireValidator
    log: list[Entry]
    stderr_text: str


def check_wire(client: WireRecord) -> list[str]:
    """C1-C4 over the whole wire log, plus schema violations and C6 over stderr."""
    problems = list(client.validator.violations)
    v2 = speaks_v2(client)
    if v2:
        problems += check_wire_v2(client)
    sent: Counter[tuple[str, Any]] = Counter()
    answered: Counter[tuple[str, Any]] = Counter()
    prompt_session: dict[tuple[str, Any], str] = {}
    open_prompts: dict[str, set[tuple[str, Any]]] = defaultdict(set)
    for entry, message in logged_messages(client.log):
        key = request_key(message.get("id"))
        if entry.dir == "in":
            if "method" in message and "id" in message:
                if not valid_id(message["id"]):
                    continue  # answered with id null, as JSON-RPC says; nothing to pair it with
                sent[key] += 1
                params = message.get("params")
                if message["method"] in ("session/prompt", "session/load") and isinstance(params, dict):
                    session_id = params.get("sessionId")
                    if isinstance(session_id, str):
                        # A load's history replay precedes its response, like a prompt's turn (C3 exempts it).
                        prompt_session[key] = session_id
                        open_prompts[session_id].add(key)
            continue
        method = message.get("method")
        if method is None:
            if message.get("id") is not None:
                answered[key] += 1
                if key not in sent:
                    problems.append(f"C1: a response to a request never sent: {entry.raw[:200]!r}")
            session_id = prompt_session.get(key)
            if session_id is not None:
                open_prompts[session_id].discard(key)
            continue
        params = message.get("params") or {}
        session_id = params.get("sessionId")
        turn_update = method == "session/update" and params.get("update", {}).get("sessionUpdate") in TURN_SCOPED
        client_request = "id" in message and not method.startswith("_") and session_id is not None
        if (turn_update or client_request) and not v2 and not open_prompts.get(str(session_id)):
            check = "C3: turn update" if turn_update else "C4: client request"
            problems.append(f"{check} with no unanswered prompt on {session_id}: {entry.raw[:200]!r}")
    for key, count in sent.items():
        if key[1] is not None and answered[key] != count:
            problems.append(f"C1: request id {key[1]!r} sent {count}x, answered {answered[key]}x")
    for flag in STDERR_RED_FLAGS:
        if flag in client.stderr_text:
            problems.append(f"C6: stderr says {flag!r}")
    return problems
