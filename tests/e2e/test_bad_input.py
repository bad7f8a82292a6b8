"""Bad input never breaks the connection: each case gets the answer the issue's table asks for, then a valid request.

The server sits on an editor's stdio for the whole editing session, so one broken line, odd id, unknown method, huge
message or internal failure must cost that one message and nothing more. Every test here sends the bad input and
then a valid request on the same connection and checks that it still gets a real answer. The table (input ->
answer) comes from the issue and the errors paragraph of docs/acp.md.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

import orjson
import pytest

from tests.support.harness import DEFAULT_ARGS, GRACE, T_WAIT, W_QUIET, RawClient, is_response, scaled

StartServer = Callable[..., Awaitable[RawClient]]
Message = dict[str, Any]

NEW_SESSION: dict[str, Any] = {"cwd": "/tmp", "mcpServers": []}
QUIET = W_QUIET  # how long "never a reply" waits
MAX_LINE_BYTES = 64 * 1024 * 1024  # the line limit of docs/acp.md
INT64_MAX = 2**63 - 1
INT64_MIN = -(2**63)


# --- helpers ---


def line(message: Any) -> bytes:
    """One wire line, exactly as given (no "jsonrpc" added)."""
    return orjson.dumps(message) + b"\n"


def is_null_id_error(message: Message) -> bool:
    return "method" not in message and "error" in message and "id" in message and message["id"] is None


def error_of(message: Message) -> dict[str, Any]:
    assert "error" in message and "result" not in message, message
    error: dict[str, Any] = message["error"]
    return error


async def next_after(
    client: RawClient, start: int, predicate: Callable[[Message], bool], timeout: float = T_WAIT
) -> Message:
    """The first message the server wrote after `client.received[start]` that matches."""
    deadline = time.monotonic() + timeout
    while True:
        for message in client.received[start:]:
            if predicate(message):
                return message
        if time.monotonic() > deadline:
            raise TimeoutError(f"no matching message within {timeout} s; got: {client.received[start:][-3:]}")
        await asyncio.sleep(0.01)


async def assert_still_serving(client: RawClient, timeout: float = T_WAIT) -> Message:
    """A valid request on the same connection still gets a real result (a new session, then its commands)."""
    response = await client.response(await client.request("session/new", NEW_SESSION), timeout)
    assert "result" in response, response
    session_id = response["result"]["sessionId"]
    assert isinstance(session_id, str), response
    await client.wait_for(lambda m: announces_commands(m) and m["params"]["sessionId"] == session_id, timeout)
    return response


def announces_commands(message: Message) -> bool:
    """The `available_commands_update` every new session gets right after its `session/new` response."""
    update = message.get("params", {}).get("update", {}) if message.get("method") == "session/update" else {}
    return bool(update.get("sessionUpdate") == "available_commands_update")


def significant(client: RawClient, start: int) -> list[Message]:
    """What the server wrote since `start`, less the commands announcements of sessions created meanwhile."""
    return [m for m in client.received[start:] if not announces_commands(m)]


async def null_id_error_then_still_serving(client: RawClient, data: bytes, timeout: float = T_WAIT) -> dict[str, Any]:
    """Write `data`; it must be answered by exactly one error with id null, and the connection must keep working."""
    start = len(client.received)
    await client.write_raw(data)
    answer = await next_after(client, start, is_null_id_error, timeout)
    follow_up = await assert_still_serving(client)
    assert [m for m in significant(client, start) if m is not follow_up] == [answer], "one answer, nothing else"
    return error_of(answer)


async def error_then_still_serving(client: RawClient, message: Message) -> dict[str, Any]:
    """Send one request (as given, with its own id); return its error and check the connection keeps working."""
    start = len(client.received)
    await client.write_raw(line(message))
    answer = await client.response(message["id"])
    follow_up = await assert_still_serving(client)
    assert [m for m in significant(client, start) if m is not follow_up] == [answer], "one answer, nothing else"
    return error_of(answer)


async def never_answered_then_still_serving(client: RawClient, data: bytes) -> None:
    """Write `data`, wait QUIET seconds, assert the server wrote nothing, then check the connection still works."""
    start = len(client.received)
    await client.write_raw(data)
    await asyncio.sleep(QUIET)
    assert significant(client, start) == [], "a notification must never be answered"
    follow_up = await assert_still_serving(client)
    assert significant(client, start) == [follow_up]


def request_message(request_id: Any, method: str = "session/new", params: Any = NEW_SESSION) -> Message:
    return {"jsonrpc": "2.0", "id": request_id, "method": method, "params": params}


# --- malformed JSON and invalid UTF-8: -32700, id null ---


@pytest.mark.parametrize(
    "data",
    [
        b"{\n",
        b'{"jsonrpc": "2.0", "id": 3, "method": "session/new"\n',
        b"not json at all\n",
        b'{"jsonrpc": "2.0", "id": 3, "method": "session/new", }\n',
        b"{'jsonrpc': '2.0', 'id': 3}\n",
        b'{"jsonrpc": "2.0", "id": 3, "method": "session/new"} trailing\n',
    ],
    ids=["lone-brace", "unterminated-object", "bare-words", "trailing-comma", "single-quotes", "trailing-garbage"],
)
async def test_malformed_json_is_a_parse_error_with_null_id(server: RawClient, data: bytes) -> None:
    error = await null_id_error_then_still_serving(server, data)
    assert error["code"] == -32700, error


async def test_invalid_utf8_is_a_parse_error_with_null_id(server: RawClient) -> None:
    data = (
        b'{"jsonrpc": "2.0", "id": 3, "method": "session/new", "params": {"cwd": "/tmp/\xff\xfe", "mcpServers": []}}\n'
    )
    error = await null_id_error_then_still_serving(server, data)
    assert error["code"] == -32700, error


# --- valid JSON that is not one request object: -32600, id null ---


@pytest.mark.parametrize(
    "data",
    [
        b'"initialize"\n',
        b"42\n",
        b"3.5\n",
        b"true\n",
        b"null\n",
        b"[]\n",
        line([0] * 101),
    ],
    ids=["string", "integer", "float", "boolean", "null", "empty-array", "batch-over-the-bound"],
)
async def test_json_that_is_not_one_request_object_is_an_invalid_request_with_null_id(
    server: RawClient, data: bytes
) -> None:
    """Not an object, or a batch that is empty or over its bound (100 entries): one error object, nothing else."""
    error = await null_id_error_then_still_serving(server, data)
    assert error["code"] == -32600, error


# --- a batch (JSON-RPC 2.0 §6): its entries admitted one by one, answered with one array ---


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        (b"[1, 2]\n", [(None, -32600), (None, -32600)]),
        (line([request_message(900)]), [(900, "result")]),
        (
            line([request_message(901), request_message(902, "_acp_server/stats", {})]),
            [(901, "result"), (902, "result")],
        ),
        (line([request_message(903), {"jsonrpc": "2.0", "method": "_vendor/ignored"}]), [(903, "result")]),
    ],
    ids=["array-of-invalid-entries", "batch-of-one", "batch-of-two", "request-and-notification"],
)
async def test_a_batch_gets_one_array_answering_each_request_and_invalid_entry_in_order(
    server: RawClient, data: bytes, expected: list[tuple[Any, Any]]
) -> None:
    """Each invalid entry gets its own -32600 with id null, each request its response, in the entries' order, all
    in one array on one line; a notification gets nothing; the requests ran (a batch's `session/new` makes a
    session, announced as any is); the connection goes on."""
    start = len(server.received)
    before = len(server.log)
    await server.write_raw(data)
    follow_up = await assert_still_serving(server)
    [batch] = [e.msg for e in server.log[before:] if e.dir == "out" and isinstance(e.msg, list)]
    got = [(m["id"], m["error"]["code"] if "error" in m else "result") for m in batch]
    assert got == expected, batch
    assert [m for m in significant(server, start) if m is not follow_up] == batch, "the array, nothing else"


# --- an object without "jsonrpc": "2.0", or with a non-string method: -32600, the id echoed when readable ---


@pytest.mark.parametrize(
    "message",
    [
        {"id": 11, "method": "session/new", "params": NEW_SESSION},
        {"jsonrpc": "1.0", "id": 12, "method": "session/new", "params": NEW_SESSION},
        {"jsonrpc": 2.0, "id": 13, "method": "session/new", "params": NEW_SESSION},
        {"jsonrpc": None, "id": "fourteen", "method": "session/new", "params": NEW_SESSION},
    ],
    ids=["no-jsonrpc", "jsonrpc-1.0", "jsonrpc-number", "jsonrpc-null-string-id"],
)
async def test_request_without_jsonrpc_2_0_is_an_invalid_request_echoing_its_id(
    server: RawClient, message: Message
) -> None:
    error = await error_then_still_serving(server, message)
    assert error["code"] == -32600, error


@pytest.mark.parametrize(
    "message",
    [
        {"method": "session/cancel", "params": {"sessionId": "sess_x"}},
        {"jsonrpc": "1.0", "method": "session/cancel", "params": {"sessionId": "sess_x"}},
        {"jsonrpc": "2.0", "method": 5},
    ],
    ids=["notification-without-jsonrpc", "notification-jsonrpc-1.0", "notification-numeric-method"],
)
async def test_invalid_object_without_an_id_is_an_invalid_request_with_null_id(
    server: RawClient, message: Message
) -> None:
    error = await null_id_error_then_still_serving(server, line(message))
    assert error["code"] == -32600, error


async def test_non_string_method_is_an_invalid_request_echoing_a_readable_id(server: RawClient) -> None:
    bad: list[Message] = [
        {"jsonrpc": "2.0", "id": 21, "method": 5, "params": {}},
        {"jsonrpc": "2.0", "id": "twenty-two", "method": None},
        {"jsonrpc": "2.0", "id": 23, "method": ["session/new"], "params": NEW_SESSION},
        {"jsonrpc": "2.0", "id": 24, "method": {"name": "session/new"}},
    ]
    for message in bad:
        error = await error_then_still_serving(server, message)
        assert error["code"] == -32600, (message, error)


async def test_non_string_method_with_an_unreadable_id_is_an_invalid_request_with_null_id(server: RawClient) -> None:
    start = len(server.received)
    await server.write_raw(b'{"jsonrpc": "2.0", "id": {"n": 1}, "method": 7}\n')
    answer = await next_after(server, start, is_null_id_error)
    assert error_of(answer)["code"] == -32600, answer
    follow_up = await assert_still_serving(server)
    assert significant(server, start) == [answer, follow_up]


# --- unknown methods, including _-prefixed extension requests: -32601 ---


@pytest.mark.parametrize(
    "method",
    ["nonexistent/method", "session/fly", "_unknown/extension", "_acp_server/nope", "$/unknown_request", ""],
    ids=["unknown", "unknown-session-verb", "extension", "own-extension-namespace", "dollar-request", "empty"],
)
async def test_unknown_method_is_method_not_found(server: RawClient, method: str) -> None:
    error = await error_then_still_serving(server, request_message(server.next_id(), method, {}))
    assert error["code"] == -32601, error


# --- notifications we do not handle, or with invalid params: ignored, never a reply ---


@pytest.mark.parametrize(
    "message",
    [
        {"method": "nonexistent/notification", "params": {}},
        {"method": "_unknown/extension", "params": {"x": 1}},
        {"method": "_unknown/no_params"},
        {"method": "$/progress", "params": {"token": 1, "value": {}}},
        {"method": "$/setTrace", "params": {"value": "verbose"}},
        {"method": "session/cancel"},
        {"method": "session/cancel", "params": {"sessionId": 5}},
        {"method": "session/cancel", "params": {}},
        {"method": "session/cancel", "params": ["sess_x"]},
        {"method": "session/cancel", "params": "sess_x"},
        {"method": "session/cancel", "params": {"sessionId": "sess_unknown"}},
        {"method": "$/cancel_request", "params": {"requestId": {"no": "id"}}},
        {"method": "$/cancel_request", "params": {}},
        {"method": "_scripted/release", "params": {"sessionId": "sess_x"}},
        {"method": "_scripted/release", "params": {"sessionId": "sess_x", "gate": "g"}},
    ],
    ids=[
        "unknown",
        "extension",
        "extension-without-params",
        "dollar-progress",
        "dollar-set-trace",
        "cancel-without-params",
        "cancel-numeric-session",
        "cancel-empty-params",
        "cancel-array-params",
        "cancel-string-params",
        "cancel-unknown-session",
        "cancel-request-object-id",
        "cancel-request-without-id",
        "release-without-gate",
        "release-unknown-session",
    ],
)
async def test_notification_unknown_or_with_invalid_params_is_never_answered(
    server: RawClient, message: Message
) -> None:
    await never_answered_then_still_serving(server, line({"jsonrpc": "2.0", **message}))


@pytest.mark.parametrize("request_id", [424242, "no-such-request", None], ids=["integer", "string", "null"])
async def test_cancel_request_naming_an_unknown_id_produces_nothing(server: RawClient, request_id: Any) -> None:
    message = {"jsonrpc": "2.0", "method": "$/cancel_request", "params": {"requestId": request_id}}
    await never_answered_then_still_serving(server, line(message))


async def test_session_cancel_with_invalid_params_gets_no_reply(server: RawClient) -> None:
    session = await server.new_session()
    for params in ({"sessionId": 1}, {"session": session}, [session], None):
        message: Message = {"jsonrpc": "2.0", "method": "session/cancel"}
        if params is not None:
            message["params"] = params
        await never_answered_then_still_serving(server, line(message))
    # The session was not touched by any of them: it still runs a turn.
    prompt = await server.prompt(session, [{"say": "still here"}])
    assert (await server.response(prompt))["result"] == {"stopReason": "end_turn"}


# --- missing or mistyped params: -32602, a one-line message naming the field ---


@pytest.mark.parametrize(
    ("method", "params", "field"),
    [
        ("initialize", None, "protocolVersion"),
        ("initialize", {}, "protocolVersion"),
        ("initialize", {"protocolVersion": "1"}, "protocolVersion"),
        ("initialize", {"protocolVersion": 1.5}, "protocolVersion"),
        ("initialize", {"protocolVersion": True}, "protocolVersion"),
        ("initialize", {"protocolVersion": 1, "clientCapabilities": {"terminal": "yes"}}, "terminal"),
        ("session/new", {"mcpServers": []}, "cwd"),
        ("session/new", {"cwd": 5, "mcpServers": []}, "cwd"),
        ("session/new", {"cwd": "/tmp"}, "mcpServers"),
        ("session/new", {"cwd": "/tmp", "mcpServers": {}}, "mcpServers"),
        ("session/prompt", {"prompt": [{"type": "text", "text": "hi"}]}, "sessionId"),
        ("session/prompt", {"sessionId": 5, "prompt": [{"type": "text", "text": "hi"}]}, "sessionId"),
        ("session/prompt", {"sessionId": "sess_x"}, "prompt"),
        ("session/prompt", {"sessionId": "sess_x", "prompt": "hi"}, "prompt"),
        ("session/prompt", {"sessionId": "sess_x", "prompt": [{"type": "text"}]}, "text"),
    ],
    ids=[
        "initialize-without-params",
        "initialize-without-version",
        "initialize-string-version",
        "initialize-float-version",
        "initialize-boolean-version",
        "initialize-mistyped-capability",
        "new-without-cwd",
        "new-numeric-cwd",
        "new-without-mcp-servers",
        "new-object-mcp-servers",
        "prompt-without-session",
        "prompt-numeric-session",
        "prompt-without-prompt",
        "prompt-string-prompt",
        "prompt-block-without-text",
    ],
)
async def test_missing_or_mistyped_params_are_invalid_params_naming_the_field(
    server: RawClient, method: str, params: Any, field: str
) -> None:
    message: Message = {"jsonrpc": "2.0", "id": server.next_id(), "method": method}
    if params is not None:
        message["params"] = params
    error = await error_then_still_serving(server, message)
    assert error["code"] == -32602, error
    assert "\n" not in error["message"], error
    assert field in error["message"], error


@pytest.mark.parametrize(
    ("method", "params"),
    [
        ("initialize", [1, {}]),
        ("session/new", ["/tmp", []]),
        ("session/new", []),
        ("session/prompt", ["sess_x", [{"type": "text", "text": "hi"}]]),
        ("_acp_server/stats", [1]),
        ("_acp_server/stats", []),
    ],
    ids=["initialize", "new-session", "new-session-empty", "prompt", "stats", "stats-empty"],
)
async def test_array_params_are_invalid_params(server: RawClient, method: str, params: list[Any]) -> None:
    error = await error_then_still_serving(server, request_message(server.next_id(), method, params))
    assert error["code"] == -32602, error


# --- a request naming an unknown session: -32002 "unknown session: <id>" ---


@pytest.mark.parametrize("session_id", ["sess_does_not_exist", "", "sess_0123456789abcdef0123456789abcdef"])
async def test_prompt_naming_an_unknown_session_is_resource_not_found(server: RawClient, session_id: str) -> None:
    params = {"sessionId": session_id, "prompt": [{"type": "text", "text": "hi"}]}
    error = await error_then_still_serving(server, request_message(server.next_id(), "session/prompt", params))
    assert error == {"code": -32002, "message": f"unknown session: {session_id}"}


# --- a session method before initialize: -32600, saying to initialize first ---


@pytest.mark.parametrize(
    ("method", "params"),
    [
        ("session/new", NEW_SESSION),
        ("session/prompt", {"sessionId": "sess_x", "prompt": [{"type": "text", "text": "hi"}]}),
    ],
    ids=["new", "prompt"],
)
async def test_session_method_before_initialize_says_to_initialize_first(
    start_server: StartServer, method: str, params: Message
) -> None:
    client = await start_server()
    request_id = client.next_id()
    await client.write_raw(line(request_message(request_id, method, params)))
    error = error_of(await client.response(request_id))
    assert error["code"] == -32600, error
    assert "initialize" in error["message"], error
    await client.initialize()
    await assert_still_serving(client)


# --- a 20 MiB prompt: accepted ---


@pytest.mark.timeout(60)
async def test_prompt_of_20_mib_is_accepted_and_echoed(start_server: StartServer) -> None:
    client = await start_server("--model", "echo")
    await client.initialize()
    session = await client.new_session()
    words = " ".join(f"w{i}" for i in range(4 * 1024 * 1024))
    text = (words * (20 * 1024 * 1024 // len(words) + 1))[: 20 * 1024 * 1024]
    assert len(text.encode()) == 20 * 1024 * 1024
    request_id = client.next_id()
    params = {"sessionId": session, "prompt": [{"type": "text", "text": text}]}
    await client.write_raw(line(request_message(request_id, "session/prompt", params)))
    response = await client.response(request_id, timeout=scaled(40))
    assert response.get("result") == {"stopReason": "end_turn"}, response
    assert "".join(client.texts(session)) == text[:10_000]
    await assert_still_serving(client)


# --- an exception inside a handler: -32603, short message; the traceback on stderr only ---


async def test_handler_exception_is_internal_error_with_traceback_on_stderr_only(start_server: StartServer) -> None:
    client = await start_server()
    await client.initialize()
    request_id = client.next_id()
    await client.write_raw(line(request_message(request_id, "_scripted/raise", {})))
    error = error_of(await client.response(request_id))
    assert error["code"] == -32603, error
    assert len(error["message"]) <= 100, error
    assert "\n" not in error["message"], error
    assert "data" not in error, error
    await assert_still_serving(client)
    code, _ = await client.close()
    assert code == 0
    stdout = b"".join(e.raw for e in client.log if e.dir == "out")
    assert b"secret" not in stdout
    assert b"/etc/passwd" not in stdout
    assert b"Traceback" not in stdout
    assert "Traceback (most recent call last)" in client.stderr_text
    assert "RuntimeError: secret internal detail /etc/passwd" in client.stderr_text


# --- ids are echoed exactly ---


@pytest.mark.parametrize(
    "request_id",
    ["abc", "1", "", "id with spaces and ünïcödé", 7, 0, -3, INT64_MAX, INT64_MIN],
    ids=[
        "string",
        "numeric-string",
        "empty-string",
        "unicode-string",
        "int",
        "zero",
        "negative",
        "int64-max",
        "int64-min",
    ],
)
async def test_request_id_is_echoed_exactly(server: RawClient, request_id: str | int) -> None:
    start = len(server.received)
    await server.write_raw(line(request_message(request_id)))
    response = await server.response(request_id)
    assert "result" in response, response
    assert type(response["id"]) is type(request_id) and response["id"] == request_id
    out = next(e.raw for e in server.log if e.msg is response)
    assert orjson.dumps(request_id) in out
    follow_up = await assert_still_serving(server)
    assert significant(server, start) == [response, follow_up]


async def test_null_request_id_is_echoed_as_null(server: RawClient) -> None:
    start = len(server.received)
    await server.write_raw(line(request_message(None)))
    response = await next_after(server, start, lambda m: "result" in m and "id" in m and m["id"] is None)
    assert isinstance(response["result"]["sessionId"], str), response
    follow_up = await assert_still_serving(server)
    assert significant(server, start) == [response, follow_up]


@pytest.mark.parametrize(
    "raw_id",
    [b"1.5", b"1.0", b"1e3", b"true", b"false", b'{"n": 1}', b"[1]"],
    ids=["float", "integral-float", "exponent", "true", "false", "object", "array"],
)
async def test_request_id_that_is_not_string_integer_or_null_is_invalid_request_with_null_id(
    server: RawClient, raw_id: bytes
) -> None:
    start = len(server.received)
    data = (
        b'{"jsonrpc": "2.0", "id": '
        + raw_id
        + b', "method": "session/new", "params": {"cwd": "/tmp", "mcpServers": []}}\n'
    )
    await server.write_raw(data)
    answer = await next_after(server, start, is_null_id_error)
    assert error_of(answer)["code"] == -32600, answer
    follow_up = await assert_still_serving(server)
    assert significant(server, start) == [answer, follow_up], "no session was created for the bad request"


# --- framing ---


async def test_several_messages_in_one_write_are_all_answered(server: RawClient) -> None:
    ids = [server.next_id() for _ in range(4)]
    data = b"".join(
        [
            line(request_message(ids[0])),
            line(request_message(ids[1], "_acp_server/stats", {})),
            line(request_message(ids[2], "no/such_method", {})),
            b"{broken\n",
            line(request_message(ids[3])),
        ]
    )
    start = len(server.received)
    await server.write_raw(data)
    answers = [await server.response(request_id) for request_id in ids]
    assert "result" in answers[0] and "result" in answers[1] and "result" in answers[3], answers
    assert error_of(answers[2])["code"] == -32601
    parse_error = await next_after(server, start, is_null_id_error)
    assert error_of(parse_error)["code"] == -32700
    follow_up = await assert_still_serving(server)
    messages = significant(server, start)
    assert len(messages) == 6 and messages[-1] is follow_up


@pytest.mark.timeout(60)
async def test_line_over_64_mib_is_invalid_request_and_the_connection_keeps_working(server: RawClient) -> None:
    # A request that would be valid, one byte over the limit; written in 1 MiB pieces (none of them a line).
    head = orjson.dumps(request_message(777_777, "session/prompt", {"sessionId": "sess_x", "pad": ""}))[:-3]
    tail = b'"}}'
    pad = MAX_LINE_BYTES + 1 - len(head) - len(tail)
    oversized = head + b"x" * pad + tail
    assert len(oversized) == MAX_LINE_BYTES + 1
    start = len(server.received)
    piece = 1024 * 1024
    for offset in range(0, len(oversized), piece):
        await server.write_raw(oversized[offset : offset + piece])
    await server.write_raw(b"\n")
    answer = await next_after(server, start, is_null_id_error, timeout=scaled(30))
    assert error_of(answer)["code"] == -32600, answer
    follow_up = await assert_still_serving(server, timeout=scaled(30))
    assert significant(server, start) == [answer, follow_up]
    assert not any(is_response(m, 777_777) for m in server.received)


async def test_crlf_line_endings_work(server: RawClient) -> None:
    first, second = server.next_id(), server.next_id()
    data = (
        orjson.dumps(request_message(first)) + b"\r\n" + orjson.dumps(request_message(second, "_acp_server/stats", {}))
    )
    start = len(server.received)
    await server.write_raw(data + b"\r\n")
    assert "result" in await server.response(first)
    assert "result" in await server.response(second)
    follow_up = await assert_still_serving(server)
    messages = significant(server, start)
    assert len(messages) == 3 and messages[-1] is follow_up, "no error for the \\r"


async def test_blank_lines_are_ignored(server: RawClient) -> None:
    await never_answered_then_still_serving(server, b"\n\n   \n\t\n\r\n \r\n")


async def test_last_request_without_trailing_newline_is_answered_before_exit(start_server: StartServer) -> None:
    client = await start_server()
    await client.initialize()
    await assert_still_serving(client)
    last = client.next_id()
    await client.write_raw(orjson.dumps(request_message(last)))
    code, _ = await client.close()
    assert code == 0
    response = await client.response(last, timeout=0)
    assert "result" in response, response


# --- stdout carries only protocol lines; logs go to stderr ---


async def test_stdout_has_one_json_rpc_object_per_line_and_logs_only_on_stderr(start_server: StartServer) -> None:
    client = await start_server(*DEFAULT_ARGS, "--log-level", "debug")
    await client.initialize()
    session = await client.new_session()
    # Errors of every kind.
    await client.write_raw(b"{nope\n" + b"[1]\n" + b'{"jsonrpc": "2.0", "id": 5000, "method": "session/new"}\n')
    await client.response(5000)
    assert error_of(await client.call("no/such_method", {}))["code"] == -32601
    assert error_of(await client.call("session/prompt", {"sessionId": "sess_nope", "prompt": []}))["code"] == -32002
    assert error_of(await client.call("_scripted/raise", {}))["code"] == -32603
    await client.notify("_unknown/notification", {"x": 1})
    # A scripted turn with thoughts, chunks and a tool.
    turn = await client.prompt(
        session,
        [
            {"think": "hmm"},
            {"say": "chunk ", "repeat": 3},
            {"tool": "test_sleep", "args": {"s": 0.05}},
            {"say": "done"},
        ],
    )
    assert (await client.response(turn))["result"] == {"stopReason": "end_turn"}
    assert client.updates(session, "tool_call") and client.updates(session, "agent_thought_chunk")
    # A cancelled turn.
    held = await client.prompt(session, [{"say": "before"}, {"gate": "g", "timeout": 10}, {"say": "never"}])
    await client.probe("gate_reached", gate="g")
    await client.cancel(session)
    assert (await client.response(held, timeout=GRACE + 3))["result"] == {"stopReason": "cancelled"}
    await assert_still_serving(client)
    code, _ = await client.close()
    assert code == 0

    out = [e for e in client.log if e.dir == "out"]
    assert len(out) > 20
    for entry in out:
        assert entry.raw.endswith(b"\n") and entry.raw.count(b"\n") == 1, entry.raw[:200]
        message = orjson.loads(entry.raw)
        # One object, or the array answering the batch `[1]` (its one -32600): never anything else.
        for one in message if isinstance(message, list) and message else [message]:
            assert isinstance(one, dict) and one.get("jsonrpc") == "2.0", entry.raw[:200]
            kinds = [key for key in ("method", "result", "error") if key in one]
            assert len(kinds) == 1, entry.raw[:200]
            assert isinstance(message, dict) or "error" in one, entry.raw[:200]
    assert not client.validator.violations
    log_lines = [text for text in client.stderr_text.splitlines() if " DEBUG " in text or " WARNING " in text]
    assert any(" DEBUG acp_server" in text for text in log_lines), client.stderr_text[-2000:]
    assert any(" WARNING acp_server" in text for text in log_lines), client.stderr_text[-2000:]
    stdout = b"".join(e.raw for e in out)
    assert b" DEBUG " not in stdout and b" WARNING " not in stdout and b"Traceback" not in stdout


async def test_session_method_with_bad_params_before_initialize_still_says_initialize_first(
    start_server: StartServer,
) -> None:
    client = await start_server()
    answer = await client.call("session/new", {})
    assert answer["error"]["code"] == -32600, answer
    assert "initialize" in answer["error"]["message"]
    await client.initialize()
    assert "result" in await client.call("session/new", NEW_SESSION)


# --- deep JSON, bounded `_meta`, session roots (issue 10, items 1 and 10) ---


def nested_text(levels: int) -> str:
    """JSON text of objects nested `levels` deep: built as text, since orjson writes nothing past 254 levels."""
    return '{"a":' * levels + "1" + "}" * levels


def nested(levels: int) -> dict[str, Any]:
    value: dict[str, Any] = {"a": 1}
    for _ in range(levels - 1):
        value = {"a": value}
    return value


def sized(size: int, base: dict[str, Any]) -> dict[str, Any]:
    """`base` padded so that its compact JSON is exactly `size` bytes."""
    padded = {**base, "pad": ""}
    padded["pad"] = "a" * (size - len(orjson.dumps(padded)))
    assert len(orjson.dumps(padded)) == size
    return padded


@pytest.mark.parametrize("recording", [False, True], ids=["plain", "recording"])
@pytest.mark.parametrize("levels", [300, 1000], ids=["300-levels", "1000-levels"])
async def test_deep_json_anywhere_in_a_line_is_answered_and_the_server_lives(
    start_server: StartServer, tmp_path: Any, levels: int, recording: bool
) -> None:
    """Nested past what orjson writes again (254) but within what it reads (1024): every request is answered, by
    its id (a deep id is no id: -32600 with id null), a notification or stray response is ignored, and the server
    stays up, with or without a transcript (which keeps such a line as raw text)."""
    path = tmp_path / "deep.jsonl"
    client = await start_server(*DEFAULT_ARGS, *(("--record", str(path)) if recording else ()))
    await client.initialize()
    session = await client.new_session()
    deep = nested_text(levels)
    script = '"_meta":{"scripted":[{"say":"never"}]}'
    lines = [
        f'{{"jsonrpc":"2.0","id":"params","method":"session/list","params":{{"x":{deep}}}}}',
        f'{{"jsonrpc":"2.0","id":{deep},"method":"session/list","params":{{}}}}',
        f'{{"jsonrpc":"2.0","id":"meta","method":"session/new","params":{{"cwd":"/tmp","mcpServers":[],"_meta":{deep}}}}}',
        f'{{"jsonrpc":"2.0","id":"mcp","method":"session/new","params":{{"cwd":"/tmp","mcpServers":'
        f'[{{"name":"x","command":"/nonexistent/mcp","args":[],"env":[],"_meta":{deep}}}]}}}}',
        f'{{"jsonrpc":"2.0","id":"block","method":"session/prompt","params":{{"sessionId":"{session}",'
        f'"prompt":[{{"type":"text","text":"hi","_meta":{deep}}}],{script}}}}}',
        f'{{"jsonrpc":"2.0","method":"session/cancel","params":{{"sessionId":"{session}","_meta":{deep}}}}}',
        f'{{"jsonrpc":"2.0","id":4242,"result":{deep}}}',
    ]
    start = len(client.received)
    await client.write_raw("".join(text + "\n" for text in lines).encode())
    answers = {request_id: await client.response(request_id) for request_id in ("params", "meta", "mcp", "block")}
    invalid = await next_after(client, start, is_null_id_error)
    assert error_of(invalid)["code"] == -32600, invalid
    for request_id, answer in answers.items():
        assert error_of(answer)["code"] == -32602, (request_id, answer)
    assert "prompt.0.text._meta" in answers["block"]["error"]["message"]
    follow_up = await assert_still_serving(client)
    assert {id(m) for m in significant(client, start)} == {id(m) for m in [*answers.values(), invalid, follow_up]}
    code, _ = await client.close()
    assert code == 0
    assert "Recursion limit" not in client.stderr_text and "Traceback" not in client.stderr_text
    if recording:
        from acp_server.transcripts.format import load_transcript

        recorded = load_transcript(path).lines
        raw = {line.raw for line in recorded if line.dir == "in" and line.raw is not None}
        assert set(lines) <= raw, "a line the recorder cannot write again is kept as its text"
        assert any(line.dir == "out" and line.msg == follow_up for line in recorded), "and recording went on"


META_PLACES = ["session/new", "prompt", "prompt-block", "mcp-server", "mcp-server-env"]


def _with_meta(place: str, meta: dict[str, Any], session: str, cwd: str) -> tuple[str, dict[str, Any]]:
    script = {"scripted": [{"say": "ok"}]}
    block: dict[str, Any] = {"type": "text", "text": "hi"}
    server: dict[str, Any] = {"name": "x", "command": "/nonexistent/mcp", "args": [], "env": []}
    if place == "session/new":
        return "session/new", {"cwd": cwd, "mcpServers": [], "_meta": meta}
    if place == "prompt":
        return "session/prompt", {"sessionId": session, "prompt": [block], "_meta": {**meta, **script}}
    if place == "prompt-block":
        return "session/prompt", {"sessionId": session, "prompt": [{**block, "_meta": meta}], "_meta": script}
    if place == "mcp-server":
        return "session/new", {"cwd": cwd, "mcpServers": [{**server, "_meta": meta}]}
    entry = {"name": "LEVEL", "value": "1", "_meta": meta}
    return "session/new", {"cwd": cwd, "mcpServers": [{**server, "env": [entry]}]}


@pytest.mark.parametrize("place", META_PLACES)
async def test_meta_deeper_than_32_levels_or_over_64_kib_is_invalid_params_wherever_it_is(
    server: RawClient, tmp_path: Any, place: str
) -> None:
    session = await server.new_session(str(tmp_path))
    limit_sized = 64 * 1024
    # The prompt's own `_meta` also carries the script (`_with_meta` adds it), which the sizes below account for.
    base = {"scripted": [{"say": "ok"}]} if place == "prompt" else {}
    cases = [
        (nested(32), True),
        (nested(33), False),
        (sized(limit_sized, base), True),
        (sized(limit_sized + 1, base), False),
    ]
    for meta, accepted in cases:
        method, params = _with_meta(place, meta, session, str(tmp_path))
        answer = await server.call(method, params)
        if accepted:
            assert "result" in answer, (place, answer)
        else:
            error = error_of(answer)
            assert error["code"] == -32602 and "_meta" in error["message"], (place, error)
            assert "\n" not in error["message"]
    await assert_still_serving(server)


def _initialize_with_meta(version: int, place: str, meta: dict[str, Any]) -> dict[str, Any]:
    """`initialize` params of `version` with `meta` as the `_meta` of its capabilities, of the client's info, or of
    a capability kept as it came (`session`)."""
    capabilities: dict[str, Any] = {"_meta": meta} if place == "capabilities" else {}
    if place == "session":
        capabilities["session"] = {"_meta": meta}
    info: dict[str, Any] = {"name": "bounds", "version": "1", **({"_meta": meta} if place == "info" else {})}
    if version == 1:
        return {"protocolVersion": 1, "clientCapabilities": capabilities, "clientInfo": info}
    return {"protocolVersion": 2, "capabilities": capabilities, "info": info}


@pytest.mark.parametrize("place", ["capabilities", "info", "session"])
@pytest.mark.parametrize("version", [1, 2], ids=["v1", "v2"])
async def test_initialize_meta_is_bounded_the_same_on_both_versions(
    start_server: StartServer, version: int, place: str
) -> None:
    """Issue 20, item 11: v2 took a `_meta` nested 40 deep or of 70 KB in `capabilities` or `info`, which v1
    refuses. Both refuse past 32 levels or 64 KiB with -32602, and take one at both limits."""
    client = await start_server()
    limit_sized = 64 * 1024
    for meta in (nested(33), nested(40), sized(limit_sized + 1, {}), sized(70 * 1000, {})):
        answer = await client.call("initialize", _initialize_with_meta(version, place, meta))
        error = error_of(answer)
        assert error["code"] == -32602 and "_meta" in error["message"], (version, place, error)
    at_limits = sized(limit_sized, nested(32))
    answer = await client.call("initialize", _initialize_with_meta(version, place, at_limits))
    assert answer.get("result", {}).get("protocolVersion") == version, answer


async def test_a_prompt_refused_for_its_meta_keeps_the_conversation_in_the_store(
    start_server: StartServer, tmp_path: Any
) -> None:
    state = {"ACP_SERVER_STATE_DIR": str(tmp_path / "state")}
    client = await start_server(*DEFAULT_ARGS, env=state)
    await client.initialize()
    session = await client.new_session(str(tmp_path))

    def prompt(text: str, block_meta: str = "") -> bytes:
        block = f'{{"type":"text","text":"{text}"{block_meta}}}'
        params = f'{{"sessionId":"{session}","prompt":[{block}],"_meta":{{"scripted":[{{"say":"ok"}}]}}}}'
        return f'{{"jsonrpc":"2.0","id":"{text}","method":"session/prompt","params":{params}}}\n'.encode()

    await client.write_raw(prompt("first"))
    assert (await client.response("first"))["result"]["stopReason"] == "end_turn"
    for text, levels in (("refused-deep", 300), ("refused-33", 33)):
        await client.write_raw(prompt(text, f',"_meta":{nested_text(levels)}'))
        error = error_of(await client.response(text))
        assert error["code"] == -32602 and "prompt.0.text._meta" in error["message"], error
    await client.write_raw(prompt("third", f',"_meta":{nested_text(32)}'))
    assert (await client.response("third"))["result"]["stopReason"] == "end_turn"
    code, _ = await client.close()
    assert code == 0

    again = await start_server(*DEFAULT_ARGS, env=state)
    await again.initialize()
    loaded = await again.call("session/load", {"sessionId": session, "cwd": str(tmp_path), "mcpServers": []})
    assert "result" in loaded, loaded
    said = [u["content"] for u in again.updates(session, "user_message_chunk")]
    assert [block["text"] for block in said] == ["first", "third"], said
    assert said[1]["_meta"] == nested(32), "an accepted block is stored as it came, `_meta` and all"


async def test_a_session_root_that_is_not_an_existing_absolute_directory_is_invalid_params(
    server: RawClient, tmp_path: Any
) -> None:
    a_file = tmp_path / "file.txt"
    a_file.write_text("not a directory")
    session = await server.new_session(str(tmp_path))
    before = (await server.call("session/list", {}))["result"]["sessions"]
    bad: list[tuple[str, str]] = [
        ("cwd", "/tmp/with\x00nul"),
        ("cwd", "relative/dir"),
        ("cwd", str(tmp_path / "does-not-exist")),
        ("cwd", str(a_file)),
        ("additionalDirectories", "/tmp/extra\x00nul"),
        ("additionalDirectories", str(tmp_path / "no-extra")),
    ]
    for method in ("session/new", "session/load", "session/resume", "session/fork"):
        for field, path in bad:
            params: dict[str, Any] = {"cwd": str(tmp_path), "mcpServers": []}
            if method != "session/new":
                params["sessionId"] = session
            if field == "cwd":
                params["cwd"] = path
            else:
                params["additionalDirectories"] = [path]
            error = error_of(await server.call(method, params))
            assert error["code"] == -32602, (method, path, error)
            assert "\n" not in error["message"] and "\x00" not in error["message"], error
    after = (await server.call("session/list", {}))["result"]["sessions"]
    assert after == before, "no session was created (or forked) half-way"
    reply = await server.call("session/prompt", server.prompt_message(session, [{"say": "still here"}])["params"])
    assert reply["result"]["stopReason"] == "end_turn", "and the session the failed loads named still works"


async def test_error_messages_quoting_client_input_stay_one_line(server: RawClient) -> None:
    for method, params in (
        ("no\nsuch\r\nmethod", {}),
        ("session/prompt", {"sessionId": "sess\nbroken\u2028id", "prompt": [{"type": "text", "text": "hi"}]}),
        ("session/set_mode", {"sessionId": "sess\nbroken", "modeId": "x"}),
    ):
        error = error_of(await server.call(method, params))
        assert error["code"] in (-32601, -32002), error
        assert error["message"].splitlines() == [error["message"]], error
    await assert_still_serving(server)
