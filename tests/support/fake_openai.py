"""A loopback OpenAI-compatible server that streams scripted Chat Completions, for provider tests and benchmarks.

The provider SDKs use `httpx2`, which request-mocking libraries do not intercept, and a mock would skip the code we
most need to trust anyway: SSE framing, chunked transfer, retries, and closing the connection on a cancel. So tests
talk to a real HTTP server on 127.0.0.1 (port 0). It runs in its own threads (`ThreadingHTTPServer`), so it serves an
in-process pytest-asyncio test, a spawned `acp-server`, and a synchronous benchmark alike.

Each test queues the replies the server gives, one per request, in order (`FakeModelServer.script`); the builders
below produce them in the wire format the real API streams. The server records every request it received (path,
headers, JSON body) and every time a client closed a connection in the middle of a reply it was holding open, so a
test can assert what the model was sent and that a cancel really closed the HTTP connection.

`GET .../models` (model discovery) is answered apart from the scripted queue, so it never takes a reply meant for a
model call: `FakeModelServer.serve_models` sets the list it answers (or makes it fail, hang or answer garbage), and
those requests are recorded apart too (`model_list_requests`). Until a test sets one, the list is a 404, as from a
server without it.

`FakeModelServer` knows HTTP and SSE only; `tests/support/fake_anthropic.py` builds Anthropic Messages replies for it.
"""

from __future__ import annotations

import base64
import contextlib
import select
import socket
import sys
import threading
import time
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any, Literal, Self

import anyio
import orjson

__all__ = [
    "FakeModelServer",
    "FakeOpenAI",
    "ListBehaviour",
    "Received",
    "ServerReply",
    "chunk",
    "error",
    "images_sent",
    "raw_reply",
    "reasoning_reply",
    "refusal_reply",
    "silent",
    "text_reply",
    "tool_call_reply",
    "usage_chunk",
]

# How a reply ends once its events are written: normally ("done"), or by holding the connection open until the
# client goes away ("hang"), or by cutting the connection with the chunked body unfinished ("drop").
Ending = Literal["done", "hang", "drop"]
# How `GET .../models` answers: with the list, with it once the test calls `release_models`, an error status, never
# (held open until the client goes), a body that is not a list, or bytes the test made (`serve_models_bytes`).
ListBehaviour = Literal["list", "held", "fail", "hang", "garbage", "bytes"]

MODEL = "fake-model"


@dataclass(frozen=True, slots=True)
class ServerReply:
    """One scripted answer to one request: an SSE stream, or an error status with a JSON body."""

    status: int = 200
    # SSE events as (event name or None, data); data is a JSON-able object or raw text sent as is.
    events: tuple[tuple[str | None, Any], ...] = ()
    ending: Ending = "done"
    # For Chat Completions the stream ends with `data: [DONE]`; the Messages API has no such marker.
    done_marker: bool = True
    body: Any = None  # the JSON body of an error answer
    # An error answer's body as these exact bytes instead (sent with `headers`, e.g. a Content-Encoding).
    raw_body: bytes | None = None
    headers: tuple[tuple[str, str], ...] = ()
    # True: read the request, then send nothing at all (not even headers) until the client goes away.
    silent: bool = False
    # Seconds between events: a model streaming at 1/every events per second (0: all in one write).
    every: float = 0.0


@dataclass(frozen=True, slots=True)
class Received:
    """A request as the server saw it."""

    path: str
    headers: dict[str, str]
    body: dict[str, Any]
    client_port: int  # the client's end of the TCP connection: equal ports mean a reused connection


@dataclass
class _State:
    """What the handler threads share with the test; every access holds `lock`."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    arrived: threading.Condition = field(init=False)  # notified on each request, under `lock`
    queue: deque[ServerReply] = field(default_factory=deque)
    default: ServerReply | None = None
    requests: list[Received] = field(default_factory=list)
    disconnects: list[float] = field(default_factory=list)  # time.monotonic() when a held reply saw its client go
    disconnected: threading.Event = field(default_factory=threading.Event)
    stopping: threading.Event = field(default_factory=threading.Event)
    # The last reply's wire bytes: a benchmark's default reply of 10,000 chunks is encoded once, not per request.
    encoded: tuple[ServerReply, bytes] | None = None
    # GET .../models: the body it answers with and how (None: 404), and the requests it got.
    model_list: tuple[ListBehaviour, Any] | None = None
    model_list_requests: list[Received] = field(default_factory=list)
    models_released: threading.Event = field(default_factory=threading.Event)

    def __post_init__(self) -> None:
        self.arrived = threading.Condition(self.lock)


def _sse(event: str | None, data: Any) -> bytes:
    payload = data.encode() if isinstance(data, str) else orjson.dumps(data)
    return (b"event: " + event.encode() + b"\n" if event else b"") + b"data: " + payload + b"\n\n"


def _http_chunk(data: bytes) -> bytes:
    return f"{len(data):x}\r\n".encode() + data + b"\r\n"


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, and chunked bodies exactly like the real endpoints
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:
        return None  # quiet: the test output is for the test

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        try:
            body = orjson.loads(raw) if raw else {}
        except orjson.JSONDecodeError:
            body = {"__unparsable__": raw.decode(errors="replace")}
        state = self.server.state
        with state.lock:
            headers = {k.lower(): v for k, v in self.headers.items()}
            state.requests.append(Received(self.path, headers, body, int(self.client_address[1])))
            state.arrived.notify_all()
            reply = state.queue.popleft() if state.queue else state.default
        if reply is None:
            # Answered 400 (never retried) so a test that scripted too few replies fails at once and says why.
            reply = error(400, "fake server: no scripted reply left for this request")
        if reply.silent:
            self._hold_until_client_leaves()
        elif reply.status != 200:
            self._send_error(reply)
        else:
            self._send_stream(reply)

    def do_GET(self) -> None:
        state = self.server.state
        with state.lock:
            headers = {k.lower(): v for k, v in self.headers.items()}
            received = Received(self.path, headers, {}, int(self.client_address[1]))
            listed = self.path.partition("?")[0].endswith("/models")
            if listed:
                state.model_list_requests.append(received)
                state.arrived.notify_all()
            answer = state.model_list if listed else None
        if answer is None:
            self._send_error(error(404, f"fake server: nothing at {self.path}"))
            return
        behaviour, body = answer
        if behaviour == "held":
            while not state.models_released.wait(0.01):
                if state.stopping.is_set():
                    return
        if behaviour == "hang":
            self._hold_until_client_leaves()
        elif behaviour == "fail":
            self._send_error(error(500, "fake server: the models list failed", kind="server_error"))
        elif behaviour == "bytes":
            payload, encoding, status = body
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            if encoding:
                self.send_header("Content-Encoding", encoding)
            self.end_headers()
            with contextlib.suppress(OSError):  # a client that stops reading a body too large goes away
                self.wfile.write(payload)
        elif behaviour == "garbage":
            payload = b"<html>not a models list</html>"
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)
        else:
            self._send_error(ServerReply(status=200, body=body))

    def _send_error(self, reply: ServerReply) -> None:
        payload = orjson.dumps(reply.body) if reply.raw_body is None else reply.raw_body
        self.send_response(reply.status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        for name, value in reply.headers:
            self.send_header(name, value)
        self.end_headers()
        with contextlib.suppress(OSError):  # a client that reads only part of an error body goes away
            self.wfile.write(payload)

    def _send_stream(self, reply: ServerReply) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream; charset=utf-8")
        self.send_header("Transfer-Encoding", "chunked")
        self.send_header("Cache-Control", "no-cache")
        for name, value in reply.headers:
            self.send_header(name, value)
        self.end_headers()
        try:
            if reply.every:
                self._send_paced(reply)
            else:
                self.wfile.write(self._encode(reply))
        except OSError:
            self.close_connection = True
            return
        if reply.ending == "hang":
            self._hold_until_client_leaves()
        elif reply.ending == "drop":
            self.close_connection = True
            # Shut down without the terminating chunk: the client sees the body cut short.
            with contextlib.suppress(OSError):
                self.connection.shutdown(socket.SHUT_RDWR)

    def _send_paced(self, reply: ServerReply) -> None:
        """One event every `reply.every` seconds; a client that goes away mid-stream is noted like a held one."""
        state = self.server.state
        for index, (event, data) in enumerate(reply.events):
            if index and state.stopping.wait(reply.every):
                raise OSError("the fake server is stopping")
            try:
                self.wfile.write(_http_chunk(_sse(event, data)))
                self.wfile.flush()
            except OSError:
                with state.lock:
                    state.disconnects.append(time.monotonic())
                state.disconnected.set()
                raise
        if reply.ending == "done":
            self.wfile.write((_http_chunk(b"data: [DONE]\n\n") if reply.done_marker else b"") + b"0\r\n\r\n")

    def _encode(self, reply: ServerReply) -> bytes:
        """One HTTP chunk per SSE event, as the real servers flush them, sent in one write."""
        state = self.server.state
        with state.lock:
            cached = state.encoded
        if cached is not None and cached[0] is reply:
            return cached[1]
        frames = [_http_chunk(_sse(event, data)) for event, data in reply.events]
        if reply.ending == "done":
            if reply.done_marker:
                frames.append(_http_chunk(b"data: [DONE]\n\n"))
            frames.append(b"0\r\n\r\n")
        wire = b"".join(frames)
        with state.lock:
            state.encoded = (reply, wire)
        return wire

    def _hold_until_client_leaves(self) -> None:
        """Keep the reply open, as a slow model would, and note when the client closes the connection."""
        self.close_connection = True
        state = self.server.state
        sock = self.connection
        while not state.stopping.is_set():
            readable, _, _ = select.select([sock], [], [], 0.01)
            if not readable:
                continue
            try:
                gone = sock.recv(1, socket.MSG_PEEK) == b""
            except OSError:
                gone = True
            if gone:
                with state.lock:
                    state.disconnects.append(time.monotonic())
                state.disconnected.set()
                return
            # Bytes from the client while its reply is open: it is not gone; keep waiting.
            time.sleep(0.01)


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    state: _State

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A client that hangs up mid-reply (a cancelled turn closes its model stream) is what the tests provoke,
        # not a fault of the fake: keep it out of the test output. Anything else still prints its traceback.
        if isinstance(sys.exc_info()[1], ConnectionError):
            return
        super().handle_error(request, client_address)


class FakeModelServer:
    """The HTTP side, shared by the OpenAI and Anthropic fakes. Use as a context manager (or start()/stop())."""

    api_prefix = ""

    def __init__(self, port: int = 0) -> None:
        self._server = _Server(("127.0.0.1", port), _Handler)
        self._server.state = _State()
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}{self.api_prefix}"

    def start(self) -> Self:
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.state.stopping.set()  # releases replies held open
        if self._thread is not None:
            self._server.shutdown()
            self._thread.join(5)
        self._server.server_close()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    # --- scripting ---

    def script(self, *replies: ServerReply) -> None:
        """Queue replies: the next requests get them in order."""
        with self._server.state.lock:
            self._server.state.queue.extend(replies)

    def serve_models(self, *ids: str, behaviour: ListBehaviour = "list") -> None:
        """What `GET .../models` answers from now on: these ids in the family's list shape, or a failure."""
        with self._server.state.lock:
            self._server.state.model_list = (behaviour, self.models_body(ids))

    def serve_models_bytes(self, payload: bytes, encoding: str | None = None, status: int = 200) -> None:
        """What `GET .../models` answers from now on: exactly these bytes, with this Content-Encoding if any, and
        this status."""
        with self._server.state.lock:
            self._server.state.model_list = ("bytes", (payload, encoding, status))

    def release_models(self) -> None:
        """Let held models-list requests (behaviour "held") answer."""
        self._server.state.models_released.set()

    @staticmethod
    def models_body(ids: Sequence[str]) -> dict[str, Any]:
        """A models list as OpenAI (and Ollama, vLLM, LM Studio, OpenRouter) answer it."""
        data = [{"id": name, "object": "model", "created": 1_700_000_000, "owned_by": "fake"} for name in ids]
        return {"object": "list", "data": data}

    def set_default(self, reply: ServerReply | None) -> None:
        """The reply for any request once the queue is empty (benchmarks send many alike)."""
        with self._server.state.lock:
            self._server.state.default = reply

    # --- what happened ---

    @property
    def requests(self) -> list[Received]:
        with self._server.state.lock:
            return list(self._server.state.requests)

    async def wait_requests(self, count: int, timeout: float) -> bool:
        """Wait (without blocking the event loop) until `count` requests have arrived."""
        state = self._server.state

        def wait() -> bool:
            with state.arrived:
                return state.arrived.wait_for(lambda: len(state.requests) >= count, timeout)

        arrived: bool = await anyio.to_thread.run_sync(wait, abandon_on_cancel=True)
        return arrived

    @property
    def model_list_requests(self) -> list[Received]:
        with self._server.state.lock:
            return list(self._server.state.model_list_requests)

    async def wait_model_list_requests(self, count: int, timeout: float) -> bool:
        """Wait (without blocking the event loop) until `count` models-list requests have arrived."""
        state = self._server.state

        def wait() -> bool:
            with state.arrived:
                return state.arrived.wait_for(lambda: len(state.model_list_requests) >= count, timeout)

        arrived: bool = await anyio.to_thread.run_sync(wait, abandon_on_cancel=True)
        return arrived

    @property
    def disconnects(self) -> list[float]:
        """time.monotonic() of each client disconnect seen while a reply was held open ("hang")."""
        with self._server.state.lock:
            return list(self._server.state.disconnects)

    def wait_disconnect(self, timeout: float) -> bool:
        """Block until a held reply saw its client go (from a thread or synchronous code)."""
        return self._server.state.disconnected.wait(timeout)

    async def wait_disconnect_async(self, timeout: float) -> bool:
        """The same from async code, without blocking the event loop."""
        seen: bool = await anyio.to_thread.run_sync(
            self._server.state.disconnected.wait, timeout, abandon_on_cancel=True
        )
        return seen

    def reset_disconnected(self) -> None:
        self._server.state.disconnected.clear()


class FakeOpenAI(FakeModelServer):
    """`POST /v1/chat/completions`: point the OpenAI SDK at `base_url`."""

    api_prefix = "/v1"


# --- Chat Completions replies, in the chunk shapes api.openai.com streams ---


def chunk(delta: dict[str, Any] | None = None, finish: str | None = None, *, usage: Any = None) -> dict[str, Any]:
    """One `chat.completion.chunk`; with `stream_options.include_usage` every chunk carries `usage: null`."""
    choices = [] if delta is None else [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}]
    return {
        "id": "chatcmpl-fake",
        "object": "chat.completion.chunk",
        "created": 1_700_000_000,
        "model": MODEL,
        "system_fingerprint": "fp_fake",
        "choices": choices,
        "usage": usage,
    }


def usage_chunk(prompt_tokens: int, completion_tokens: int) -> dict[str, Any]:
    """The final chunk of a stream with include_usage: no choices, only the totals."""
    usage = {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
    }
    return chunk(None, usage=usage)


def _opening() -> dict[str, Any]:
    return chunk({"role": "assistant", "content": "", "refusal": None})


def _events(chunks: Iterable[Any]) -> tuple[tuple[str | None, Any], ...]:
    return tuple((None, c) for c in chunks)


def raw_reply(chunks: Sequence[Any], ending: Ending = "done") -> ServerReply:
    """Chunks exactly as given (objects, or raw text for malformed data), then the ending."""
    return ServerReply(events=_events(chunks), ending=ending)


def text_reply(
    *pieces: str,
    finish: str = "stop",
    usage: tuple[int, int] | None = None,
    ending: Ending = "done",
    every: float = 0.0,
) -> ServerReply:
    """Text in one chunk per piece (`every` seconds apart, if given). With ending "hang" or "drop" the finish and
    usage chunks are not sent."""
    chunks: list[Any] = [_opening(), *(chunk({"content": p}) for p in pieces)]
    if ending == "done":
        chunks.append(chunk({}, finish))
        if usage is not None:
            chunks.append(usage_chunk(*usage))
    return ServerReply(events=_events(chunks), ending=ending, every=every)


def reasoning_reply(thoughts: Sequence[str], pieces: Sequence[str], *, field: str = "reasoning_content") -> ServerReply:
    """Reasoning deltas first, in `field` (DeepSeek/vLLM/llama.cpp: reasoning_content; OpenRouter/Ollama: reasoning)."""
    chunks: list[Any] = [_opening()]
    chunks += [chunk({"content": None, field: t}) for t in thoughts]
    chunks += [chunk({"content": p}) for p in pieces]
    chunks.append(chunk({}, "stop"))
    return raw_reply(chunks)


def tool_call_reply(
    *calls: tuple[str, str, Sequence[str]], text: str = "", finish: str = "tool_calls", interleave: bool = False
) -> ServerReply:
    """Tool calls as (id, name, argument fragments). The first fragment of each call carries its id and name, like
    the real API; with `interleave` the calls' fragments alternate, so only `index` tells them apart."""
    chunks: list[Any] = [_opening()]
    if text:
        chunks.append(chunk({"content": text}))
    fragments: list[list[dict[str, Any]]] = []
    for index, (call_id, name, parts) in enumerate(calls):
        first = {"index": index, "id": call_id, "type": "function", "function": {"name": name, "arguments": ""}}
        fragments.append([first, *({"index": index, "function": {"arguments": p}} for p in parts)])
    if interleave:
        order = [frag for row in _zip_longest(fragments) for frag in row]
    else:
        order = [frag for row in fragments for frag in row]
    chunks += [chunk({"tool_calls": [frag]}) for frag in order]
    chunks.append(chunk({}, finish))
    return raw_reply(chunks)


def _zip_longest(rows: list[list[dict[str, Any]]]) -> list[list[dict[str, Any]]]:
    width = max((len(r) for r in rows), default=0)
    return [[r[i] for r in rows if i < len(r)] for i in range(width)]


def refusal_reply(*pieces: str) -> ServerReply:
    """A refusal as newer OpenAI models stream it: `delta.refusal` text instead of content."""
    chunks: list[Any] = [_opening(), *(chunk({"refusal": p}) for p in pieces), chunk({}, "stop")]
    return raw_reply(chunks)


def silent() -> ServerReply:
    """An endpoint that accepts the request and never answers: no status line, no headers."""
    return ServerReply(silent=True)


def error(
    status: int, message: str, *, kind: str = "invalid_request_error", retry_after_ms: int | None = None
) -> ServerReply:
    """An error answer with an OpenAI-style body; `retry_after_ms` adds the header the SDKs honour."""
    headers = () if retry_after_ms is None else (("retry-after-ms", str(retry_after_ms)),)
    body = {"error": {"message": message, "type": kind, "param": None, "code": None}}
    return ServerReply(status=status, body=body, headers=headers)


# --- image parts (Chat Completions vision and audio input) ---


def images_sent(received: Received) -> list[tuple[str, str, bytes]]:
    """Every image (`image_url` part) and sound (`input_audio` part) a Chat Completions request carried, in order, as
    (role of its message, mime type or audio format, decoded bytes). Each part is checked to have the shape the API
    takes (a base64 data URL; wav or mp3 audio): a malformed one fails the test here, as the real endpoint would
    answer 400."""
    found = []
    for message in received.body.get("messages", []):
        content = message.get("content")
        if not isinstance(content, list):
            continue
        assert message["role"] == "user", f"only user messages carry content parts: {message['role']}"
        for part in content:
            if part["type"] == "image_url":
                url = part["image_url"]["url"]
                header, _, data = url.partition(",")
                assert header.startswith("data:image/") and header.endswith(";base64"), url[:60]
                found.append((message["role"], header[5:-7], base64.b64decode(data, validate=True)))
            elif part["type"] == "input_audio":
                audio = part["input_audio"]
                assert audio["format"] in ("wav", "mp3"), audio["format"]
                found.append((message["role"], audio["format"], base64.b64decode(audio["data"], validate=True)))
            else:
                assert part["type"] == "text" and isinstance(part["text"], str), part
    return found
