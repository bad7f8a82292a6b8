"""What the HTTP model providers (`openai`, `anthropic`) share: importing an SDK without stalling the event loop,
making one model call within its timeouts and attempts (`EndpointTimeouts`, so a silent endpoint ends the turn
instead of holding it), reading no more of an error answer's body than an error needs (the SDKs would read all of
it, however large it inflates), reading untrusted tool-call arguments, and turning any failure into one line a user
can act on.

The failure wording recognises SDK errors by shape (`status_code`, `body`, the exception chain) rather than by class,
so it serves both SDKs without importing either, and it never shows a traceback or the API key.
"""

from __future__ import annotations

import logging
import math
import random
import re
import socket
import ssl
import time
import zlib
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from types import ModuleType
from typing import Any, ClassVar, cast
from urllib.parse import urlsplit, urlunsplit

import anyio
import orjson

from acp_server.errors import KeyRefusedError, ListingError, ModelError
from acp_server.runtime.model import INVALID_ARGUMENTS, Emit
from acp_server.runtime.providers.catalog import MAX_LIST_BYTES, decode_listing, endpoint_key, too_large
from acp_server.settings.files import DEFAULT_TIMEOUTS, EndpointTimeouts

__all__ = ["HttpProvider", "describe_failure", "import_sdk", "one_line", "parse_arguments"]

log = logging.getLogger(__name__)

MAX_DETAIL_CHARS = 300
# How each SDK's endpoint lists its models (path below the base URL, query), and how long a listing may take at
# most: it runs in the background, and a slow endpoint only means the configured models are offered alone.
MODEL_LISTS: dict[str, tuple[str, dict[str, object]]] = {
    "openai": ("/models", {}),
    "anthropic": ("/v1/models", {"limit": 1000}),
}
MAX_LIST_SECONDS = 10.0
# How much of an error answer's body (status >= 400) is read, as sent and once inflated: the SDKs read the whole
# body of an error before raising, unbounded and on the event loop, so a hostile endpoint's gzip bomb would take
# the server's memory (issue 20 item 7). An error's message fits in far less; the rest is cut.
MAX_ERROR_BODY_BYTES = 64 * 1024
_CLOSE_SECONDS = 1.0  # closing a connection is local work; the bound is for a cleanup that must not hang
# Things that look like credentials, for error texts that quote them back ("Incorrect API key provided: sk-...").
_SECRET_PATTERN = re.compile(r"\b(?:sk|rk|pk)-[\w*.\-]{4,}|\bBearer\s+\S+", re.IGNORECASE)


class HttpProvider:
    """A model behind an HTTP API: its configuration, and the SDK's client, made on first use (the client is
    configuration plus a connection pool, never turn state). Subclasses name their SDK and open their turns."""

    SDK: ClassVar[str]  # the SDK's name as a user reads it (and its models list's key), e.g. "openai"
    CLIENT: ClassVar[str]  # its async client class, e.g. "AsyncOpenAI"
    MISSING_SDK: ClassVar[str]  # what to tell the user when the SDK is not installed
    DEFAULT_BASE_URL: ClassVar[str]

    def __init__(
        self,
        model: str,
        *,
        api_key: str | None,
        base_url: str | None,
        context_window: int | None = None,
        timeouts: EndpointTimeouts = DEFAULT_TIMEOUTS,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        """`headers`: sent with every request, over the SDK's own (a client's gateway, `providers/set`)."""
        self.model = model
        self.base_url = base_url
        self.context_window = context_window
        self.timeouts = timeouts
        self._api_key = api_key
        self._headers = dict(headers) if headers else None
        # The SDK's objects, made on first use; typed Any so the SDK stays out of this module's imports.
        self._client: Any = None
        self.sdk: Any = None  # the SDK's module, once imported
        self.stream_cls: Any = None  # what the SDK wraps a streamed reply in (`stream_class`)
        self._setting_up = anyio.Lock()

    def __repr__(self) -> str:
        return f"{type(self).__name__}(model={self.model!r}, base_url={self.base_url!r})"  # never the key

    def check_turn(self, meta: dict[str, Any], turn_index: int) -> str | None:
        return None

    async def client(self) -> Any:
        """The provider's one client, made on first use: the SDK imported and the client built in worker threads
        (together most of a second on a quiet machine), so the event loop keeps serving every other session."""
        if self._client is None:
            async with self._setting_up:  # one set-up at a time: a second first turn waits for the first's client
                if self._client is None:
                    sdk = await import_sdk(self.sdk_module, self.MISSING_SDK)
                    client = await anyio.to_thread.run_sync(self._new_client, sdk, abandon_on_cancel=True)
                    self.sdk = sdk
                    self.stream_cls = self.stream_class(sdk)
                    self._client = client
        return self._client

    @staticmethod
    def sdk_module() -> ModuleType:
        """The SDK's module, imported by a plain import (a subclass names its own): called in a worker thread, on
        first use (`import_sdk`)."""
        raise NotImplementedError

    def stream_class(self, sdk: ModuleType) -> Any:
        """The class the SDK wraps each streamed reply's response in: its own `AsyncStream[object]`, whose chunks stay
        plain dicts. A subclass that reads the response's body itself may give one that holds nothing more."""
        return sdk.AsyncStream[object]

    async def warm(self) -> None:
        """Import the SDK and build the client now, in the background, so the first turn finds them ready."""
        await self.client()

    async def aclose(self) -> None:
        """Close the client (its connection pool), if one was made. For a provider no one uses any more (a logout
        dropped it); a later turn would make a new client."""
        client, self._client = self._client, None
        if client is not None:
            await client.close()

    def _new_client(self, sdk: ModuleType) -> Any:
        limits = self.timeouts
        # The socket timeouts are only a backstop: the first-byte and between-chunks bounds are `stream_reply`'s
        # own (a scope per attempt, a watchdog per reply), so it can tell which one fired. The SDK retries nothing:
        # the attempts are ours, so each one gets its own first-byte bound and all of them the total bound.
        patience = max(limits.first_byte, limits.between_chunks)
        try:
            timeout = sdk.Timeout(patience, connect=limits.connect, pool=limits.connect)
            # The HTTP client the SDK would make itself (its defaults: pool limits, redirects, proxies from the
            # environment, TLS), plus one response hook that bounds error bodies before the SDK reads them.
            http_client = sdk.DefaultAsyncHttpxClient(timeout=timeout, event_hooks={"response": [_bound_error_body]})
            return getattr(sdk, self.CLIENT)(
                api_key=self._api_key,
                base_url=self.base_url,
                max_retries=0,
                timeout=timeout,
                http_client=http_client,
                default_headers=self._headers,
            )
        except Exception as exc:  # e.g. no API key: the SDK refuses to build a client
            raise ModelError(one_line(f"cannot set up the {self.SDK} client: {exc}", self._api_key)) from exc

    def endpoint(self) -> str:
        """The endpoint as the user configured it, minus any credentials in it."""
        url = str(self._client.base_url) if self._client is not None else self.base_url or self.DEFAULT_BASE_URL
        return _display_url(url)

    def models_endpoint(self) -> str:
        """The endpoint a models list is kept under: the configured URL without credentials, query or final `/`
        (the same before and after the client exists, unlike `endpoint`)."""
        return endpoint_key(self.base_url or self.DEFAULT_BASE_URL)

    async def list_models(self) -> tuple[str, ...]:
        """The chat models the endpoint lists, through the provider's own client (its headers, key and base URL),
        within a time bound and a size bound (MAX_LIST_BYTES, as sent and once decompressed); the body is inflated
        and parsed in a worker thread, never on the event loop. Any failure is one `ModelError` line without the
        key. A cancel stays a cancel."""
        client = await self.client()
        path, params = MODEL_LISTS[self.SDK]
        limits = self.timeouts
        bound = min(MAX_LIST_SECONDS, limits.connect + limits.first_byte, limits.total)
        raw, encoding = b"", ""
        failure: Exception | None = None
        with anyio.move_on_after(bound) as waiting:
            try:
                # stream=True: the SDK hands over the response with its body unread, which is read here, bounded.
                # Only gzip is asked for, which `decode_listing` inflates within the same bound.
                options = {"params": params, "timeout": bound, "headers": {"Accept-Encoding": "gzip"}}
                stream = await client.get(
                    path, cast_to=object, options=options, stream=True, stream_cls=self.stream_cls
                )
                try:
                    encoding = stream.response.headers.get("content-encoding", "")
                    raw = await _read_bounded(stream.response)
                finally:
                    with anyio.CancelScope(shield=True), anyio.move_on_after(limits.connect):
                        await stream.response.aclose()
            except Exception as exc:
                failure = exc
        await anyio.lowlevel.checkpoint_if_cancelled()
        if waiting.cancelled_caught:
            raise ModelError(f"the model endpoint {self.endpoint()} did not list its models within {bound:g} s")
        if isinstance(failure, ListingError):
            problem = str(failure)
            failure = None  # its traceback holds this frame: kept, the two would be a cycle (see stream_reply)
            raise ModelError(f"the model endpoint {self.endpoint()} answered {path}, but {problem}") from None
        if failure is not None:
            log.debug("listing the models failed", exc_info=failure)
            message = self.describe(failure, streaming=False)
            failure = None  # as above
            raise ModelError(message) from None
        try:
            return await anyio.to_thread.run_sync(decode_listing, raw, encoding, abandon_on_cancel=True)
        except ListingError as exc:
            raise ModelError(f"the model endpoint {self.endpoint()} answered {path}, but {exc}") from None

    def describe(self, exc: BaseException, *, streaming: bool) -> str:
        return describe_failure(exc, endpoint=self.endpoint(), streaming=streaming, secret=self._api_key)

    def items(self, stream: Any) -> AsyncIterator[Any]:
        """What `stream_reply` reads a reply's items from: the SDK's stream itself, unless a subclass reads the
        stream's body its own way. Either way the SDK's stream stays the one closed when the reading ends."""
        return cast(AsyncIterator[Any], stream)

    async def stream_reply(
        self, path: str, body: dict[str, Any], feed: Callable[[Any, Emit], Awaitable[None]], emit: Emit
    ) -> None:
        """One model call: POST `body` to `path`, then hand each streamed item to `feed` (with `emit`), within the
        timeouts.

        Failures before the reply starts (no connection, no headers in time, 408/409/429/5xx) are retried up to
        `attempts` in all, with a short backoff; a reply that has started is never sent again, since its text has
        reached the user. Every bound that fires ends the call with a `ModelError` naming the endpoint and the
        setting; a cancel from outside stays a cancellation (each scope's own `cancelled_caught` says which fired,
        and `checkpoint_if_cancelled` lets an outer cancel through first).
        """
        client = await self.client()
        limits = self.timeouts
        attempt = 0
        with anyio.move_on_after(limits.total) as whole_call:
            while True:
                attempt += 1
                failure: Exception | None = None
                with anyio.move_on_after(limits.first_byte) as waiting:
                    try:
                        stream = await client.post(
                            path,
                            body=body,
                            cast_to=object,
                            stream=True,
                            stream_cls=self.stream_cls,
                            # The header the SDK's own retries would send, so the endpoint can tell a retry.
                            options={"headers": {"x-stainless-retry-count": str(attempt - 1)}},
                        )
                    except Exception as exc:
                        failure = exc
                await anyio.lowlevel.checkpoint_if_cancelled()  # an abort that surfaced as an error is a cancel
                if failure is None and not waiting.cancelled_caught:
                    break
                if waiting.cancelled_caught:
                    message = (
                        f"the model endpoint {self.endpoint()} sent no response headers within "
                        f"{limits.first_byte:g} s (first_byte_timeout)"
                    )
                    retry = True
                    refused = False
                else:
                    assert failure is not None
                    log.debug("the model request failed", exc_info=failure)
                    message = self._timeout_message(failure) or self.describe(failure, streaming=False)
                    retry = _retryable(failure)
                    refused = getattr(failure, "status_code", None) in (401, 403)
                delay = _retry_delay(failure, attempt)
                # The failure's traceback holds this frame, and this frame `body` (the whole conversation) and the
                # failure its request (the body serialized): kept in a local, the two would be a cycle that only
                # the cyclic collector frees, which the server runs rarely (server.GC_THRESHOLD): one body retained
                # per failed call (issue 20, item 4). The same for `raised` below.
                failure = None
                left = whole_call.deadline - anyio.current_time()
                if not retry or attempt >= limits.attempts:
                    tried = f" ({attempt} attempts)" if attempt > 1 else ""
                    # The key refused (401, 403): its own error, so the connection's `auth/status` can say so.
                    raise (KeyRefusedError if refused else ModelError)(one_line(message + tried, self._api_key))
                if delay >= left:
                    tried = f"{attempt} attempts" if attempt > 1 else "1 attempt"
                    raise ModelError(
                        one_line(
                            f"{message} ({tried}; no time left for another within {limits.total:g} s, total_timeout)",
                            self._api_key,
                        )
                    )
                log.info("model endpoint: %s; trying again in %.2f s", message, delay)
                await anyio.sleep(delay)
            raised: BaseException | None = None
            reading = anyio.CancelScope()
            silence = _Silence(limits.between_chunks, reading)
            # Leaving `stream` closes the connection, whatever ends the reading (a cancel, a timeout, an error). Errors
            # are kept for after the task group, which would wrap them in an ExceptionGroup.
            async with stream, anyio.create_task_group() as watching:
                items = self.items(stream)
                watching.start_soon(silence.watch)
                clock = time.monotonic  # see _Silence: the clock read twice a chunk
                with reading:
                    while True:
                        silence.since = clock()
                        try:
                            item = await items.__anext__()
                        except StopAsyncIteration:
                            break
                        except Exception as exc:
                            await anyio.lowlevel.checkpoint_if_cancelled()
                            log.debug("the model stream failed", exc_info=True)
                            raised = ModelError(self.describe(exc, streaming=True))
                            raised.__cause__ = exc
                            break
                        silence.since = math.inf  # the time our side takes is not the endpoint's silence
                        try:
                            await feed(item, emit)
                        except Exception as exc:
                            raised = exc
                            break
                watching.cancel_scope.cancel()
            if silence.fired:
                await anyio.lowlevel.checkpoint_if_cancelled()  # a cancel from outside comes first
                raise ModelError(
                    f"the model endpoint {self.endpoint()} sent nothing for {limits.between_chunks:g} s "
                    "in the middle of its reply (chunk_timeout)"
                )
            if raised is not None:
                try:
                    raise raised
                finally:
                    raised = None  # no cycle through this frame (see `failure` above)
            return
        await anyio.lowlevel.checkpoint_if_cancelled()
        tried = f" after {attempt} attempts" if attempt > 1 else ""
        raise ModelError(
            f"the model endpoint {self.endpoint()} did not finish its reply within {limits.total:g} s "
            f"(total_timeout){tried}"
        )

    def _timeout_message(self, exc: BaseException) -> str | None:
        """The words for the SDK's connect timeout, which names no endpoint and no setting."""
        if any(type(error).__name__ == "ConnectTimeout" for error in _chain(exc)):
            return (
                f"the model endpoint {self.endpoint()} did not accept a connection within "
                f"{self.timeouts.connect:g} s (connect_timeout)"
            )
        return None


class _Silence:
    """The between-chunks bound for one streamed reply, at the cost of two clock reads a chunk: one watchdog task
    that cancels the reading scope once the endpoint has been silent for `limit` while we wait for it. (A cancel
    scope around each chunk's read would cost more than handling the chunk.) The clock is `time.monotonic`, the
    asyncio loop's own clock, read directly: `anyio.current_time()` looks up the backend first, ~2 µs a chunk."""

    __slots__ = ("fired", "limit", "scope", "since")

    def __init__(self, limit: float, scope: anyio.CancelScope) -> None:
        self.limit = limit
        self.scope = scope
        self.since = math.inf  # when we started waiting for the next chunk; inf while we handle one
        self.fired = False

    async def watch(self) -> None:
        while True:
            now = time.monotonic()
            due = self.since + self.limit
            if now >= due:
                self.fired = True
                self.scope.cancel()
                return
            await anyio.sleep(min(due - now, self.limit))


# The statuses worth sending a request again for, as the SDKs decide (timeout, conflict, rate limit, server error).
_RETRY_STATUSES = (408, 409, 429)
_INITIAL_BACKOFF = 0.5
_MAX_BACKOFF = 4.0


def _retryable(exc: BaseException) -> bool:
    """Whether a failed request may be sent again: the endpoint could not be reached or timed out, or answered a
    status the SDKs retry (or told us to with `x-should-retry`). By shape, like `describe_failure`."""
    status = getattr(exc, "status_code", None)
    if isinstance(status, int):
        headers = getattr(getattr(exc, "response", None), "headers", None) or {}
        told = headers.get("x-should-retry") if hasattr(headers, "get") else None
        if told in ("true", "false"):
            return bool(told == "true")
        return status in _RETRY_STATUSES or status >= 500
    return type(exc).__name__ in ("APIConnectionError", "APITimeoutError")


def _retry_delay(exc: BaseException | None, attempt: int) -> float:
    """The wait before the next attempt: the server's Retry-After when it gives one (a wait longer than the time
    left ends the call), else a short exponential backoff with jitter (0.5 s, 1 s, 2 s, at most 4 s, less up to a
    quarter), short enough that the total bound leaves room for every attempt."""
    headers = getattr(getattr(exc, "response", None), "headers", None)
    if headers is not None and hasattr(headers, "get"):
        for name, divisor in (("retry-after-ms", 1000.0), ("retry-after", 1.0)):
            try:
                seconds = float(headers.get(name) or "") / divisor
            except ValueError:
                continue
            if seconds > 0:  # also refuses NaN
                return seconds
    backoff: float = min(_INITIAL_BACKOFF * 2.0 ** (attempt - 1), _MAX_BACKOFF)
    return backoff * (1 - 0.25 * random.random())


async def _read_bounded(response: Any) -> bytes:
    """A models list's body as it comes over the wire (still compressed, if it is), refused (`ListingTooLargeError`) as
    soon as it is larger than MAX_LIST_BYTES: a said length is believed when it is too large, and checked anyway."""
    said = response.headers.get("content-length", "")
    if said.isdigit() and int(said) > MAX_LIST_BYTES:
        raise too_large()
    body = bytearray()
    async for piece in response.aiter_raw():
        body += piece
        if len(body) > MAX_LIST_BYTES:
            raise too_large()
    return bytes(body)


async def _bound_error_body(response: Any) -> None:
    """The HTTP client's response hook: an error answer's body is read here, at most MAX_ERROR_BODY_BYTES as sent
    and as many once inflated (gzip or deflate; a body in another encoding is dropped), and the response is handed
    on with that much, decoded, in place of its stream, so the SDK's own unbounded read of it finds only that. Any
    other answer passes untouched, at the cost of one comparison a request (never a chunk)."""
    if response.status_code < 400:
        return
    import httpx2  # noqa: PLC0415 (loaded with the SDK already; kept off this module's start-up imports)

    raw = bytearray()
    stream = response.stream
    try:
        async for piece in stream:
            raw += piece
            if len(raw) >= MAX_ERROR_BODY_BYTES:
                break
    finally:
        # The rest of the body is never read: the connection is closed rather than drained back into the pool.
        with anyio.CancelScope(shield=True), anyio.move_on_after(_CLOSE_SECONDS):
            await stream.aclose()
    encoding = response.headers.get("content-encoding", "").strip().lower()
    body = _inflate_bounded(bytes(raw[:MAX_ERROR_BODY_BYTES]), encoding)
    response.headers.pop("content-encoding", None)
    response.headers["content-length"] = str(len(body))
    response.stream = httpx2.ByteStream(body)


def _inflate_bounded(raw: bytes, encoding: str) -> bytes:
    """An error body decoded, at most MAX_ERROR_BODY_BYTES of it (a cut gzip stream decodes as far as it goes)."""
    if encoding in ("", "identity"):
        return raw
    if encoding in ("gzip", "x-gzip"):
        wbits = [zlib.MAX_WBITS | 16]
    elif encoding == "deflate":
        wbits = [zlib.MAX_WBITS, -zlib.MAX_WBITS]  # zlib-wrapped, or raw as some servers send it (as httpx tries)
    else:
        return b""  # brotli, zstd, a chain of encodings: not worth a decoder here; the SDK falls back to the status
    for bits in wbits:
        try:
            return zlib.decompressobj(bits).decompress(raw, MAX_ERROR_BODY_BYTES)
        except zlib.error:
            continue
    return b""


def parse_arguments(raw: str) -> dict[str, Any]:
    """Tool-call arguments from the model's text: an object, or the marker the loop turns into an error."""
    if not raw.strip():
        return {}  # a call with no arguments; some servers send nothing rather than "{}"
    try:
        value = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return {INVALID_ARGUMENTS: raw}
    return value if isinstance(value, dict) else {INVALID_ARGUMENTS: raw}


async def import_sdk(sdk_module: Callable[[], ModuleType], missing: str) -> ModuleType:
    """Import a provider SDK on first use (`sdk_module`, a function of a plain import), in a worker thread so the
    event loop keeps serving meanwhile.

    Always through the import system, never a `sys.modules` peek: after a turn cancelled during the first import,
    the abandoned thread may still be running it, and an import statement waits for that import to finish where
    `sys.modules` would hand out a half-initialised module.
    """
    try:
        module: ModuleType = await anyio.to_thread.run_sync(sdk_module, abandon_on_cancel=True)
    except ImportError:
        raise ModelError(missing) from None
    return module


# --- the words a user reads when the model fails ---


def describe_failure(exc: BaseException, *, endpoint: str, streaming: bool, secret: str | None) -> str:
    """One line for the user: what failed and the likely cause, never a traceback and never the key.

    SDK errors are recognised by shape (`status_code`, `body`, the exception chain) rather than by class, so the
    same wording serves both SDKs without importing either.
    """
    status = getattr(exc, "status_code", None)
    if isinstance(status, int) and status >= 400:
        text = f"the model endpoint answered {status}: {_error_detail(exc)}"
    elif getattr(exc, "body", None) is not None:
        # An error event inside a stream that had started fine (an overloaded or failing backend).
        text = f"the model endpoint reported an error: {_error_detail(exc)}"
    elif streaming:
        text = f"the model stream broke off: {_cause(exc)}"
    elif isinstance(exc, TypeError):
        # What an SDK raises before sending anything when it has no credentials ("Could not resolve
        # authentication method").
        text = f"the model client is not configured: {exc}"
    else:
        text = f"cannot reach the model endpoint {_display_url(endpoint)}: {_cause(exc)}"
    return one_line(text, secret)


def _error_detail(exc: BaseException) -> str:
    body = getattr(exc, "body", None)
    for candidate in (body, body.get("error") if isinstance(body, dict) else None):
        if isinstance(candidate, dict) and isinstance(candidate.get("message"), str) and candidate["message"]:
            return str(candidate["message"])
        if isinstance(candidate, str) and candidate:
            return candidate
    message = getattr(exc, "message", None)
    return message if isinstance(message, str) and message else type(exc).__name__


def _chain(exc: BaseException) -> list[BaseException]:
    seen: list[BaseException] = []
    current: BaseException | None = exc
    while current is not None and current not in seen:
        seen.append(current)
        current = current.__cause__ or current.__context__
    return seen


def _cause(exc: BaseException) -> str:
    """The most telling reason in the exception chain (the SDKs wrap the socket error two or three times)."""
    chain = _chain(exc)
    for error in chain:
        if isinstance(error, ConnectionRefusedError):
            return "connection refused"
        if isinstance(error, socket.gaierror):
            return f"unknown host ({error.strerror or error})"
        if isinstance(error, ssl.SSLError):
            return f"TLS failed ({error.reason or error})"
    for error in chain:
        if isinstance(error, TimeoutError) or "Timeout" in type(error).__name__:
            return "timed out"
    for error in chain:
        if type(error).__name__ == "JSONDecodeError":
            return "the endpoint sent data that is not valid JSON"
        if isinstance(error, UnicodeDecodeError):
            return "the endpoint sent data that is not valid UTF-8"
    # The innermost error with something to say ("peer closed connection without sending complete message body").
    for error in reversed(chain):
        text = str(error).strip()
        if text and text not in ("Connection error.", "All connection attempts failed"):
            return text
    return type(exc).__name__


def _display_url(url: str) -> str:
    """The endpoint as the user configured it, minus any credentials in it."""
    parts = urlsplit(url.rstrip("/"))
    host = parts.hostname or ""
    netloc = f"{host}:{parts.port}" if parts.port else host
    return urlunsplit((parts.scheme, netloc, parts.path, "", ""))


def one_line(text: str, secret: str | None) -> str:
    """A message made safe to show: the key and anything key-like redacted, whitespace folded, length capped."""
    if secret and len(secret) >= 4:
        text = text.replace(secret, "[redacted]")
    text = _SECRET_PATTERN.sub("[redacted]", text)
    text = " ".join(text.split())
    return text if len(text) <= MAX_DETAIL_CHARS else text[: MAX_DETAIL_CHARS - 1] + "…"
