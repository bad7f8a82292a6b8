"""The lean reading of a Chat Completions stream: `SseDecoder`'s framing, and `ChatChunks` over a real httpx response.

The provider tests (test_providers.py) run the whole path against a loopback server, which writes its events the one
tidy way; these feed the framing the other ways servers and proxies cut it (any byte boundary, CRLF or CR, comments,
multi-line data) and check that each comes out as the same events, and that a stream which fails or stops short is
reported the way the SDK's own reader reported it.
"""

from __future__ import annotations

import ssl
import zlib
from collections.abc import AsyncIterator, Sequence
from typing import Any

import anyio
import httpx2
import openai
import orjson
import pytest

from acp_server.runtime.providers.chat_stream import ChatChunks
from acp_server.runtime.providers.sse import SseDecoder, SseEvent

ONE = b'{"choices":[{"index":0,"delta":{"content":"one"}}]}'
TWO = b'{"choices":[{"index":0,"delta":{"content":"two"}}]}'
STREAM = b"data: " + ONE + b"\n\n" + b"data: " + TWO + b"\n\n" + b"data: [DONE]\n\n"


def decode(*reads: bytes) -> list[SseEvent]:
    decoder = SseDecoder()
    return [event for read in reads for event in decoder.feed(read)]


def cut(data: bytes, size: int) -> list[bytes]:
    return [data[i : i + size] for i in range(0, len(data), size)]


# --- SseDecoder ---


def test_one_event_per_read_is_its_data() -> None:
    assert decode(b"data: " + ONE + b"\n\n", b"data: " + TWO + b"\n\n") == [(None, ONE), (None, TWO)]


@pytest.mark.parametrize("size", [1, 2, 3, 7, 50, 1000])
def test_reads_cut_anywhere_give_the_same_events(size: int) -> None:
    assert decode(*cut(STREAM, size)) == [(None, ONE), (None, TWO), (None, b"[DONE]")]


@pytest.mark.parametrize("ending", [b"\r\n", b"\r"], ids=["crlf", "cr"])
@pytest.mark.parametrize("size", [1, 5, 1000])
def test_crlf_and_cr_line_ends_read_like_lf_even_split_between_reads(ending: bytes, size: int) -> None:
    stream = STREAM.replace(b"\n", ending)
    assert decode(*cut(stream, size)) == [(None, ONE), (None, TWO), (None, b"[DONE]")]


def test_a_crlf_split_between_two_reads_ends_one_line_not_two() -> None:
    # "data: a" CR | LF "data: b" CR LF CR LF: with the LF counted as a second line end, "a" would be an event alone.
    assert decode(b"data: a\r", b"\ndata: b\r\n\r\n") == [(None, b"a\nb")]


def test_a_read_that_looks_like_a_whole_event_still_continues_what_came_before_it() -> None:
    assert decode(b'data: {"a":', b"data: 1}\n\n") == [(None, b'{"a":data: 1}')]  # one line, cut in two
    assert decode(b"data: a\n", b"data: b\n\n") == [(None, b"a\nb")]  # the second data line of one event
    assert decode(b"event: e\n", b"data: x\n\n", b"data: y\n\n") == [("e", b"x"), (None, b"y")]


def test_comments_and_keep_alives_are_skipped() -> None:
    reads = (b": keep-alive\n\n", b":\n", b"data: " + ONE + b"\n", b": in the middle\n", b"\n", b"\n\n\n")
    assert decode(*reads) == [(None, ONE)]


def test_data_lines_of_one_event_are_joined_with_newlines() -> None:
    assert decode(b'data: {"a":\ndata:  1}\ndata\ndata:x\n\n') == [(None, b'{"a":\n 1}\n\nx')]


def test_event_names_apply_to_their_event_only_and_id_and_retry_are_dropped() -> None:
    reads = b"event: error\nid: 7\nretry: 100\ndata: " + ONE + b"\n\ndata: " + TWO + b"\n\n"
    assert decode(reads) == [("error", ONE), (None, TWO)]


def test_an_event_without_data_is_not_dispatched() -> None:
    assert decode(b"event: ping\n\n", b"id: 3\n\n", b"data: " + ONE + b"\n\n") == [(None, ONE)]


def test_an_event_the_stream_ends_in_the_middle_of_is_not_dispatched() -> None:
    decoder = SseDecoder()
    assert decoder.feed(b"data: " + ONE + b"\n\ndata: " + TWO[:10]) == [(None, ONE)]
    assert decoder.feed(b"") == []  # nothing more arrives: the half event stays unread
    assert decode(b"data: " + ONE + b"\n") == []  # its data line complete, its blank line missing


def test_a_long_event_in_many_small_reads_is_read_whole() -> None:
    big = b'{"content":"' + b"y" * 100_000 + b'"}'
    assert decode(*cut(b"data: " + big + b"\n\n", 1000)) == [(None, big)]


# --- ChatChunks: the decoder under a real httpx response, the SDK's rules for a Chat Completions stream ---


def response(reads: Sequence[bytes], *, http_version: str = "HTTP/1.1") -> httpx2.Response:
    async def body() -> AsyncIterator[bytes]:
        for read in reads:
            yield read

    request = httpx2.Request("POST", "http://127.0.0.1:9/v1/chat/completions")
    return httpx2.Response(200, content=body(), request=request, extensions={"http_version": http_version.encode()})


async def read_all(chunks: ChatChunks, into: list[Any]) -> None:
    async for value in chunks:
        into.append(value)


async def test_chunks_are_the_json_values_up_to_done() -> None:
    got: list[Any] = []
    await read_all(ChatChunks(response(cut(STREAM + b"data: " + ONE + b"\n\n", 9)), openai.APIError), got)
    assert got == [orjson.loads(ONE), orjson.loads(TWO)]  # what follows [DONE] is not a chunk


async def test_a_compressed_body_is_decompressed_first() -> None:
    packer = zlib.compressobj(wbits=31)  # gzip
    packed = packer.compress(STREAM) + packer.flush()
    reads = [packed[: len(packed) // 2], packed[len(packed) // 2 :]]
    request = httpx2.Request("POST", "http://127.0.0.1:9/v1/chat/completions")

    async def body() -> AsyncIterator[bytes]:
        for read in reads:
            yield read

    resp = httpx2.Response(200, content=body(), request=request, headers={"content-encoding": "gzip"})
    got: list[Any] = []
    await read_all(ChatChunks(resp, openai.APIError), got)
    assert got == [orjson.loads(ONE), orjson.loads(TWO)]


@pytest.mark.parametrize(("version", "drained"), [("HTTP/1.1", True), ("HTTP/2", False)])
async def test_after_done_the_rest_of_the_body_is_read_on_http_1_1_only(version: str, drained: bool) -> None:
    # On HTTP/1.1 the connection goes back to the pool only once its body has been read to the end.
    read_to_the_end: list[bool] = []

    async def body() -> AsyncIterator[bytes]:
        yield STREAM
        yield b": the end of the body\n\n"
        read_to_the_end.append(True)

    request = httpx2.Request("POST", "http://127.0.0.1:9/v1/chat/completions")
    resp = httpx2.Response(200, content=body(), request=request, extensions={"http_version": version.encode()})
    got: list[Any] = []
    await read_all(ChatChunks(resp, openai.APIError), got)
    assert len(got) == 2
    assert read_to_the_end == ([True] if drained else [])


@pytest.mark.parametrize(
    "failure",
    [
        anyio.EndOfStream(),
        anyio.BrokenResourceError(),
        ssl.SSLEOFError(8, "EOF occurred in violation of protocol"),
        httpx2.ReadError("connection reset"),
    ],
    ids=["end-of-stream", "broken-resource", "tls-eof", "httpx-read-error"],
)
async def test_a_transport_failure_after_done_ends_nothing_as_in_the_sdks_drain(failure: BaseException) -> None:
    # A TLS connection that ends without close_notify after the complete reply: httpx lets anyio's and ssl's errors
    # through unmapped; the SDK's drain swallows them, so the reply is complete and the connection just not reused.
    async def body() -> AsyncIterator[bytes]:
        yield STREAM
        raise failure

    request = httpx2.Request("POST", "https://api.example/v1/chat/completions")
    resp = httpx2.Response(200, content=body(), request=request, extensions={"http_version": b"HTTP/1.1"})
    got: list[Any] = []
    await read_all(ChatChunks(resp, openai.APIError), got)
    assert len(got) == 2


async def test_a_body_that_ends_without_done_ends_the_chunks_after_its_complete_events() -> None:
    got: list[Any] = []
    await read_all(ChatChunks(response([b"data: " + ONE + b"\n\ndata: " + TWO[:20]]), openai.APIError), got)
    assert got == [orjson.loads(ONE)]


async def test_an_error_event_mid_stream_is_the_sdks_api_error_with_its_body_after_the_chunks_before() -> None:
    failing = b'event: error\ndata: {"error":{"message":"backend overloaded","type":"server_error"}}\n\n'
    chunks = ChatChunks(response([b"data: " + ONE + b"\n\n" + failing + b"data: " + TWO + b"\n\n"]), openai.APIError)
    got: list[Any] = []
    with pytest.raises(openai.APIError) as raised:
        await read_all(chunks, got)
    assert got == [orjson.loads(ONE)]
    assert raised.value.message == "backend overloaded"
    assert raised.value.body == {"message": "backend overloaded", "type": "server_error"}


@pytest.mark.parametrize(
    ("error", "message"),
    [
        (b'"the backend went away"', "An error occurred during streaming"),
        (b'{"message": ""}', "An error occurred during streaming"),
        (b'{"code": 500}', "An error occurred during streaming"),
    ],
)
async def test_an_error_event_without_a_message_gets_the_sdks_words(error: bytes, message: str) -> None:
    with pytest.raises(openai.APIError) as raised:
        await read_all(ChatChunks(response([b'data: {"error": ' + error + b"}\n\n"]), openai.APIError), [])
    assert raised.value.message == message
    assert raised.value.body == orjson.loads(error)


async def test_a_falsy_error_field_is_an_ordinary_chunk() -> None:
    got: list[Any] = []
    await read_all(
        ChatChunks(response([b'data: {"error": null, "choices": []}\n\ndata: [DONE]\n\n']), openai.APIError), got
    )
    assert got == [{"error": None, "choices": []}]


@pytest.mark.parametrize(
    ("data", "raised"),
    [(b"{not json", ValueError), (b'{"content": "\xff"}', UnicodeDecodeError)],
    ids=["not-json", "not-utf-8"],
)
async def test_data_that_is_not_json_or_not_utf_8_raises_after_the_chunks_before(
    data: bytes, raised: type[Exception]
) -> None:
    got: list[Any] = []
    with pytest.raises(raised):
        await read_all(ChatChunks(response([b"data: " + ONE + b"\n\ndata: " + data + b"\n\n"]), openai.APIError), got)
    assert got == [orjson.loads(ONE)]


async def test_data_orjson_refuses_but_json_reads_is_read_as_the_sdk_read_it() -> None:
    # Half an emoji in each of two chunks, as some proxies cut it: the halves must reach the text guard to be joined.
    reads = [b'data: {"content": "\\ud83d"}\n\n', b'data: {"content": "\\ude00", "n": NaN}\n\n']
    got: list[Any] = []
    await read_all(ChatChunks(response(reads), openai.APIError), got)
    assert got[0] == {"content": "\ud83d"}
    assert got[1]["content"] == "\ude00" and got[1]["n"] != got[1]["n"]  # NaN


async def test_a_transport_failure_mid_body_is_raised_as_httpx_raised_it() -> None:
    async def body() -> AsyncIterator[bytes]:
        yield b"data: " + ONE + b"\n\ndata: " + TWO[:5]
        raise httpx2.RemoteProtocolError("peer closed connection without sending complete message body")

    request = httpx2.Request("POST", "http://127.0.0.1:9/v1/chat/completions")
    got: list[Any] = []
    with pytest.raises(httpx2.RemoteProtocolError, match="peer closed connection"):
        await read_all(ChatChunks(httpx2.Response(200, content=body(), request=request), openai.APIError), got)
    assert got == [orjson.loads(ONE)]
