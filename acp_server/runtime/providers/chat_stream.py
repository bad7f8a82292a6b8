"""The chunks of one streamed Chat Completions reply, read from the HTTP response the official SDK opened.

The SDK still builds and sends the request (authentication, base URL, headers, error statuses, the connection pool)
and hands back its `AsyncStream`; only the reading of the body is ours. The SDK's reading (its SSE decoder, then
`json`) measured 8 to 11 µs an event on a loaded 2-core VM, where the agent's whole budget per streamed chunk is
12 µs; this one measured 2.3 to 3.5 µs there: `SseDecoder` over the response's byte stream (httpx still undoes any
content encoding) and orjson (bench/README.md, "The provider figure").

What the SDK's `AsyncStream` does for a Chat Completions stream, this does the same way:
- `data: [DONE]` ends the reply; on HTTP/1.1 the rest of the body is read (a tenth of a second at most) so the
  connection goes back to the pool for the next turn;
- a data object with a truthy `error` is the endpoint failing mid-reply: the SDK's `APIError`, its body the error;
- data is parsed as `json` parses it (orjson first, `json` itself for what orjson refuses, such as a lone surrogate
  escape); data that is not JSON raises `JSONDecodeError`, or `UnicodeDecodeError` when it is not UTF-8;
- transport failures (a cut connection, a read timeout) are raised as httpx raised them (the SDK wraps them in its
  `APIConnectionError`, whose words `describe_failure` skips anyway).
Closing is the SDK stream's: the caller holds it in `async with`, so a cancel closes the connection at once.
"""

from __future__ import annotations

import json  # noqa: TID251  (only for what orjson refuses and the SDK's json accepted: see _strict_loads)
import logging
import ssl
from collections import deque
from collections.abc import AsyncIterator, Callable
from typing import Any, cast

import anyio
import orjson

from acp_server.runtime.providers.sse import SseDecoder

__all__ = ["ChatChunks"]

log = logging.getLogger(__name__)

DONE = b"[DONE]"
# How long the body after `[DONE]` may take to arrive (the SDK's own bound): it is normally the final empty chunk.
DRAIN_SECONDS = 0.1
DEFAULT_ERROR = "An error occurred during streaming"  # the SDK's words for an error event without a message


def _body(response: Any) -> AsyncIterator[bytes]:
    """The body's bytes as the transport reads them when it is not content-encoded (as model streams are not),
    which skips two of httpx's generator steps a read (~2 µs, its decoder and byte chunker doing nothing), else
    through httpx's decoding (gzip, brotli, ...). Either way httpx's own errors; the response closes as before."""
    encoding = response.headers.get("content-encoding", "")
    if encoding.strip().lower() in ("", "identity"):
        return cast(AsyncIterator[bytes], response.stream.__aiter__())
    return cast(AsyncIterator[bytes], response.aiter_bytes())


def _strict_loads(data: bytes) -> Any:
    """What the SDK's parser makes of data orjson refuses: a lone surrogate escape (half an emoji, the other half in
    the next chunk: `text_guard` joins them), NaN, a huge integer are values to it; anything else raises as it did,
    `UnicodeDecodeError` for data that is not UTF-8 (the SDK decodes every line first), else `JSONDecodeError`."""
    return json.loads(data.decode())


class ChatChunks:
    """An async iterator of the reply's chunks (the JSON values of its events), for `HttpProvider.stream_reply`."""

    __slots__ = ("_api_error", "_body", "_decoder", "_ended", "_ready", "_response")

    def __init__(self, response: Any, api_error: Callable[..., Exception]) -> None:
        self._response = response  # the SDK's httpx response, its body not read yet
        self._api_error = api_error  # the SDK's APIError(message, request, *, body)
        self._body = _body(response)
        self._decoder = SseDecoder()
        self._ready: deque[bytes] = deque()  # the data of events read but not yet handed out
        self._ended = False

    def __aiter__(self) -> ChatChunks:
        return self

    async def __anext__(self) -> Any:
        ready = self._ready
        while not ready:
            if self._ended:
                raise StopAsyncIteration
            try:
                chunk = await self._body.__anext__()
            except StopAsyncIteration:
                self._ended = True
                raise
            ready.extend([data for _, data in self._decoder.feed(chunk)])
        data = ready.popleft()
        if data.startswith(DONE):
            ready.clear()
            self._ended = True
            await self._drain()
            raise StopAsyncIteration
        try:
            value = orjson.loads(data)
        except orjson.JSONDecodeError:
            value = _strict_loads(data)
        if type(value) is dict and value.get("error"):
            error = value["error"]
            message = error.get("message") if type(error) is dict else None
            if not message or type(message) is not str:
                message = DEFAULT_ERROR
            raise self._api_error(message, self._response.request, body=error)
        return value

    async def _drain(self) -> None:
        """Read what follows `[DONE]`, so that HTTP/1.1 can reuse the connection. A failure here ends nothing: the
        reply is complete; the connection is then closed rather than reused."""
        if self._response.http_version != "HTTP/1.1":
            return  # HTTP/2 closes the stream and keeps the connection without it
        import httpx2  # noqa: PLC0415 (start-up: httpx2 loads with the SDK, after `initialize`)

        with anyio.move_on_after(DRAIN_SECONDS):
            try:
                async for _ in self._body:
                    await anyio.lowlevel.checkpoint()  # the bound holds even when the rest is already buffered
            # httpx maps its transport's failures, but lets a TLS one (a peer that ends without close_notify) and
            # anyio's end of stream through as they are: the SDK's drain swallows those too.
            except (
                httpx2.HTTPError,
                httpx2.StreamError,
                ssl.SSLError,
                anyio.EndOfStream,
                anyio.BrokenResourceError,
            ) as exc:
                log.debug("the body after [DONE] could not be read: %r", exc)
