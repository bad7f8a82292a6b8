"""JSON-RPC 2.0 batches (§6), end to end over every transport (stdio, WebSocket): what the conformance kit's batch
requirements ask (acp-tck v2 ACP-BATCH-201..205 and the batch halves of ACP-JSONRPC-001/003/005), and what serving
them means for acp-server's own rules.

A batch is one line (one WebSocket frame) holding a JSON array. Its entries are admitted one by one, in order, as
separate lines would be, so the epoch rule (docs/interrupts.md I10) holds inside it: a cancel binds to the prompts
before it. Its answers are one array, written once every request in it is answered: a v1 `session/prompt` in a
batch holds the array until its turn ends, while the turn's updates flow. The harness checks each element of a batch
response against the schema as the response it is (tests/support/wire_schema.py `server_wrote_any`).
"""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from acp_server.jsonrpc.rpc import MAX_BATCH_ENTRIES
from tests.support.harness import W_QUIET, Entry, RawClient, is_response

pytestmark = [pytest.mark.timeout(40), pytest.mark.every_transport]

Message = dict[str, Any]


def request(request_id: Any, method: str, params: Any = None) -> Message:
    message: Message = {"jsonrpc": "2.0", "id": request_id, "method": method}
    if params is not None:
        message["params"] = params
    return message


def notification(method: str, params: Any = None) -> Message:
    message: Message = {"jsonrpc": "2.0", "method": method}
    if params is not None:
        message["params"] = params
    return message


def prompt_entry(client: RawClient, session_id: str, script: list[dict[str, Any]], request_id: Any) -> Message:
    return {"jsonrpc": "2.0", **client.prompt_message(session_id, script, request_id)}


async def write_batch(client: RawClient, entries: list[Any]) -> int:
    """Write one batch line; returns how many lines the log held before it (for `lines_after`)."""
    before = len(client.log)
    await client.write_raw(orjson.dumps(entries) + b"\n")
    return before


def lines_after(client: RawClient, before: int) -> list[Entry]:
    """What the server wrote since the log held `before` lines."""
    return [entry for entry in client.log[before:] if entry.dir == "out"]


async def marker(client: RawClient) -> Message:
    """A request answered after everything written before it was read: what a batch gets is in by then."""
    return await client.call("_acp_server/stats", {})


async def batch_answer(client: RawClient, request_id: Any) -> list[Message]:
    """The batch response array that holds the response to `request_id` (waited for)."""
    response = await client.response(request_id)
    [line] = [e for e in client.log if e.dir == "out" and isinstance(e.msg, list) and any(m is response for m in e.msg)]
    answer: list[Message] = line.msg
    return answer


# --- the kit's requirements ---


async def test_acp_batch_201_an_empty_array_gets_one_invalid_request_object_with_id_null(server_v2: RawClient) -> None:
    """One error object, `id: null`, -32600: never an array (empty or not), and nothing else."""
    before = await write_batch(server_v2, [])
    done = await marker(server_v2)
    lines = lines_after(server_v2, before)
    assert len(lines) == 2 and lines[1].msg is done, lines
    answer = lines[0].msg
    assert isinstance(answer, dict) and answer["id"] is None and answer["error"]["code"] == -32600, answer


async def test_acp_batch_202_jsonrpc_003_a_batch_of_notifications_gets_no_reply_and_each_one_is_handled(
    server_v2: RawClient,
) -> None:
    """The kit's probe (an unknown `_` notification alone in a batch) and a batch of several notifications get
    nothing at all, not even an empty array; the notifications in it are handled, not dropped: the batch's
    `session/cancel` cancels the session's running work (`idle cancelled`)."""
    session_id = await server_v2.new_session_v2()
    prompt = await server_v2.prompt(session_id, [{"gate": "g"}, {"say": "never"}])
    assert "result" in await server_v2.response(prompt)
    await server_v2.probe("gate_reached", sessionId=session_id, gate="g")
    before = await write_batch(server_v2, [notification("_tck/notify_only")])
    await server_v2.quiet(W_QUIET, lambda m: "method" not in m and m.get("id") is None)
    batch = [
        notification("_vendor/unknown", {"x": [1]}),
        notification("$/cancel_request", {"requestId": 12345}),
        notification("session/cancel", {"sessionId": session_id}),
    ]
    await write_batch(server_v2, batch)
    idle = await server_v2.idle(session_id)
    assert idle["params"]["update"]["stopReason"] == "cancelled"
    done = await marker(server_v2)
    replies = [e for e in lines_after(server_v2, before) if isinstance(e.msg, list) or "method" not in e.msg]
    assert [e.msg for e in replies] == [done], replies
    assert "never" not in server_v2.texts(session_id)


async def test_acp_batch_203_jsonrpc_005_each_invalid_entry_gets_its_own_invalid_request_and_the_rest_runs(
    server_v2: RawClient,
) -> None:
    """The kit's probe: `[17, true, null]` gets one array of three -32600 errors with `id: null` (one per entry, in
    order), and the connection stays usable. Beside valid entries, each invalid one still gets its own error in its
    place, and the valid ones run: the `session/new` creates its session."""
    before = await write_batch(server_v2, [17, True, None])
    await marker(server_v2)
    [line, _] = lines_after(server_v2, before)
    assert isinstance(line.msg, list) and len(line.msg) == 3, line.raw
    for error in line.msg:
        assert error["id"] is None and error["error"]["code"] == -32600, error
    assert "result" in await server_v2.call("session/list", {})
    mixed = [
        request("new-1", "session/new", {"cwd": "/tmp"}),
        {"jsonrpc": "2.0"},
        7,
        [request("nested", "session/list", {})],
        notification("_vendor/ignored"),
        request("list-1", "session/list", {}),
    ]
    await write_batch(server_v2, mixed)
    answer = await batch_answer(server_v2, "new-1")
    assert [m["id"] for m in answer] == ["new-1", None, None, None, "list-1"], answer
    assert "sessionId" in answer[0]["result"] and "sessions" in answer[4]["result"]
    assert all(m["error"]["code"] == -32600 for m in answer[1:4]), answer
    assert "batch entry" in answer[3]["error"]["message"]
    assert (await server_v2.stats())["sessions"] == 1  # the batch's session/new ran, the nested one did not exist
    assert not [m for m in server_v2.received if m.get("id") == "nested"]


async def test_acp_batch_204_205_jsonrpc_001_a_batch_of_requests_gets_one_array_of_their_responses_matched_by_id(
    server_v2: RawClient,
) -> None:
    """The kit's probe (two `session/list` with string ids) and ids of every kind: one line, an array holding one
    response per request, each echoing its request's id with the same type and value, in the order the requests
    came (the kit matches by id; we keep the order too); a request that fails is answered in its place."""
    ids: list[Any] = ["tck-batch-a", "tck-batch-b", 0, 2**53 + 1, "7", 7, "id \u00e9 \U0001f600"]
    before = await write_batch(server_v2, [request(i, "session/list") for i in ids[:2]])
    answer = await batch_answer(server_v2, "tck-batch-a")
    assert [m["id"] for m in answer] == ids[:2] and all("sessions" in m["result"] for m in answer), answer
    assert [e.msg for e in lines_after(server_v2, before)] == [answer]
    batch = [request(i, "session/list", {}) for i in ids[2:]] + [request("unknown", "nobody/knows", {})]
    await write_batch(server_v2, batch)
    answer = await batch_answer(server_v2, "unknown")
    assert [(type(m["id"]), m["id"]) for m in answer] == [(type(i), i) for i in [*ids[2:], "unknown"]], answer
    assert all("result" in m for m in answer[:-1]) and answer[-1]["error"]["code"] == -32601, answer


# --- bounds and acp-server's own rules inside a batch ---


async def test_a_batch_over_the_bound_is_one_invalid_request_naming_the_bound_and_nothing_of_it_runs(
    server_v2: RawClient,
) -> None:
    """MAX_BATCH_ENTRIES + 1 `session/new` requests: one -32600 object with `id: null` that names the bound, and no
    session is created; a batch of exactly MAX_BATCH_ENTRIES is served whole."""
    over = [request(f"over-{n}", "session/new", {"cwd": "/tmp"}) for n in range(MAX_BATCH_ENTRIES + 1)]
    before = await write_batch(server_v2, over)
    done = await marker(server_v2)
    [refused, last] = lines_after(server_v2, before)
    assert last.msg is done and isinstance(refused.msg, dict), refused.raw[:200]
    assert refused.msg["id"] is None and refused.msg["error"]["code"] == -32600
    assert str(MAX_BATCH_ENTRIES) in refused.msg["error"]["message"]
    assert done["result"]["sessions"] == 0
    full = [request(f"full-{n}", "session/list", {}) for n in range(MAX_BATCH_ENTRIES)]
    await write_batch(server_v2, full)
    assert len(await batch_answer(server_v2, "full-0")) == MAX_BATCH_ENTRIES


async def test_a_prompt_and_its_cancel_in_one_batch_cancel_that_prompt_v1(server: RawClient) -> None:
    """The epoch rule inside a batch (I10): the cancel after the prompt, in the same batch, binds to it, though its
    turn had not started: the prompt is answered `cancelled`, in the batch's array, and nothing of it ran. A
    cancel before the prompt in a batch binds to nothing: that prompt runs to `end_turn`."""
    session_id = await server.new_session()
    cancel = notification("session/cancel", {"sessionId": session_id})
    await write_batch(server, [prompt_entry(server, session_id, [{"say": "never"}], "p1"), cancel])
    assert await batch_answer(server, "p1") == [{"jsonrpc": "2.0", "id": "p1", "result": {"stopReason": "cancelled"}}]
    assert "never" not in server.texts(session_id)
    await write_batch(server, [cancel, prompt_entry(server, session_id, [{"say": "ran"}], "p2")])
    assert await batch_answer(server, "p2") == [{"jsonrpc": "2.0", "id": "p2", "result": {"stopReason": "end_turn"}}]
    assert server.texts(session_id) == ["ran"]


async def test_a_v1_prompt_in_a_batch_holds_the_array_until_its_turn_ends_while_its_updates_flow(
    server: RawClient,
) -> None:
    """A batch's answers are one array, so a v1 `session/prompt` in it (answered at its turn's end) holds the
    `session/list` beside it: while the turn waits at a gate its text has arrived and nothing of the batch has; once
    the turn ends, one array holds both responses, after every update of the turn."""
    session_id = await server.new_session()
    script = [{"say": "before"}, {"gate": "g"}, {"say": "after"}]
    await write_batch(server, [prompt_entry(server, session_id, script, "turn"), request("listing", "session/list")])
    await server.probe("gate_reached", sessionId=session_id, gate="g")
    assert server.texts(session_id) == ["before"]
    assert not [m for m in server.received if m.get("id") in ("turn", "listing") and "method" not in m]
    await server.release(session_id, "g")
    answer = await batch_answer(server, "turn")
    assert [m["id"] for m in answer] == ["turn", "listing"], answer
    assert answer[0]["result"] == {"stopReason": "end_turn"} and "sessions" in answer[1]["result"]
    assert server.texts(session_id) == ["before", "after"]
    at = next(n for n, m in enumerate(server.received) if m is answer[0])
    chunks = [n for n, m in enumerate(server.received) if m.get("params", {}).get("update", {}).get("content")]
    assert len(chunks) == 2 and max(chunks) < at, server.received


async def test_a_held_v2_prompt_withdrawn_by_a_cancel_in_its_batch_is_answered_minus_32800_in_the_array(
    server_v2: RawClient,
) -> None:
    """[prompt A, prompt B, cancel] on one v2 session: A is inserted (`{messageId}`), B is held behind it, and the
    cancel ends A's work (`idle cancelled`) and withdraws B, whose -32800 (sent by the cancel itself, out of band)
    lands in B's place in the array: one array, nothing of B echoed or run."""
    session_id = await server_v2.new_session_v2()
    batch = [
        prompt_entry(server_v2, session_id, [{"gate": "g"}, {"say": "never"}], "a"),
        prompt_entry(server_v2, session_id, [{"say": "held, never"}], "b"),
        notification("session/cancel", {"sessionId": session_id}),
    ]
    await write_batch(server_v2, batch)
    answer = await batch_answer(server_v2, "a")
    assert [m["id"] for m in answer] == ["a", "b"], answer
    assert "messageId" in answer[0]["result"] and answer[1]["error"]["code"] == -32800, answer
    assert (await server_v2.idle(session_id))["params"]["update"]["stopReason"] == "cancelled"
    await marker(server_v2)
    assert len(server_v2.updates(session_id, "user_message")) == 1
    assert not [m for m in server_v2.received if is_response(m, "b") and m not in answer]
    assert server_v2.texts(session_id) == []


async def test_an_answer_to_the_agents_own_request_inside_a_batch_is_taken_and_the_turn_goes_on(
    server_v2: RawClient,
) -> None:
    """The client answers the agent's permission request inside a batch beside a request of its own: the answer
    resolves the request (the command runs, the turn ends `end_turn`), and the batch's array holds only the response
    to the client's request (an answer gets no answer)."""
    session_id = await server_v2.new_session_v2()
    prompt = await server_v2.prompt(session_id, [{"tool": "run_command", "args": {"command": "printf ran"}}])
    assert "result" in await server_v2.response(prompt)
    asked = await server_v2.wait_for(lambda m: m.get("method") == "session/request_permission")
    allow = {
        "jsonrpc": "2.0",
        "id": asked["id"],
        "result": {"outcome": {"outcome": "selected", "optionId": "allow_once"}},
    }
    await write_batch(server_v2, [allow, request("after-answer", "session/list", {})])
    answer = await batch_answer(server_v2, "after-answer")
    assert [m["id"] for m in answer] == ["after-answer"], answer
    idle = await server_v2.idle(session_id)
    assert idle["params"]["update"]["stopReason"] == "end_turn"
    assert server_v2.updates(session_id, "terminal_update") or server_v2.updates(session_id, "terminal_output_chunk")
