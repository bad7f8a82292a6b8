"""Subagents (`delegate`): child sessions run inside the parent's tool call, never speak under their own id, and are
cancelled with their parent (docs/interrupts.md I16, decisions 5, 7), end to end with the scripted model (a
`delegate` step carries the child's own script). The cancel tests take `acp` and run as v1 and v2 (ACP-V2.md §20.7:
the v1 prompt's answer is v2's idle; a delegate call a cancel ends is v1 `failed`, v2 `cancelled`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest

from tests.e2e.test_interrupts import after, of_session, position
from tests.support.harness import T_ACK, RawClient
from tests.support.versions import Acp, AcpV2

# I16 holds on every transport: each test that reaches its server through the fixtures runs over each.
pytestmark = pytest.mark.every_transport

ENDED = ("completed", "failed", "cancelled")  # v2 has the `cancelled` status too


def delegate(task: str, script: list[dict[str, Any]]) -> dict[str, Any]:
    return {"tool": "delegate", "args": {"task": task, "script": script}}


def child_ids(server: RawClient, session: str) -> set[str]:
    return {
        u["_meta"]["acpServer"]["childSessionId"] for u in server.updates(session, "tool_call_update") if "_meta" in u
    }


def last_status(server: RawClient, session: str, call_id: str) -> Any:
    """The status the call was last shown with (by the last update of it that carried one)."""
    return [
        u["status"] for u in server.updates(session, "tool_call_update") if u["toolCallId"] == call_id and "status" in u
    ][-1]


def updates_not_for(server: RawClient, allowed: set[str]) -> list[dict[str, Any]]:
    return [
        m for m in server.received if m.get("method") == "session/update" and m["params"]["sessionId"] not in allowed
    ]


async def test_a_delegated_task_runs_as_a_child_whose_answer_comes_back_as_the_tool_result(server: RawClient) -> None:
    a = await server.new_session()
    child_script: list[dict[str, Any]] = [
        {"say": "working "},
        {"tool": "test_sleep", "args": {"s": 0}},
        {"say": "child answer"},
    ]
    response = await server.response(
        await server.prompt(a, [delegate("count the files", child_script), {"say": "parent done"}])
    )
    assert response["result"] == {"stopReason": "end_turn"}
    started = server.updates(a, "tool_call")
    assert [(u["kind"], u["title"]) for u in started] == [("think", "Delegate: count the files")]
    [child] = child_ids(server, a)
    final = [u for u in server.updates(a, "tool_call_update") if u.get("status") == "completed"][-1]
    assert "child answer" in final["content"][0]["content"]["text"]
    assert server.texts(a) == ["parent done"]
    assert updates_not_for(server, {a}) == [], "a child never sends updates under its own id"
    assert await server.probe("step_started", sessionId=child)  # the child really played its script
    assert (await server.stats())["runningTurns"] == 0


async def test_cancelling_the_parent_cancels_child_and_grandchild_before_the_parent_answers(acp: Acp) -> None:
    """I16: cascade down. The grandchild's step exits `cancelled` before the parent's work ends `cancelled` (within
    T_ACK); every delegate call ends as a cancel leaves it (v1 `failed`, v2 `cancelled`); nothing for any session
    after the end, even once the grandchild's gate opens; children never speak under their own ids."""
    server = acp.client
    a = await acp.new_session()
    grandchild = [{"gate": "gg"}]
    child = [{"say": "c1"}, delegate("deeper", grandchild), {"say": "c2"}]
    turn = await acp.prompt(a, [delegate("work", child), {"say": "never"}])
    reached = await server.probe("gate_reached", gate="gg")
    grandchild_id = reached["params"]["sessionId"]
    t0 = await server.cancel(a)
    end = await acp.stopped(turn, "cancelled")
    assert server.arrival_time(end) - t0 <= T_ACK
    exited = await server.probe("step_exited", sessionId=grandchild_id, reason="cancelled")
    assert position(server, exited) < position(server, end)
    delegate_calls = {u["toolCallId"] for u in acp.calls_started(a)}
    assert delegate_calls
    assert all(last_status(server, a, call) == acp.cancelled_call_status for call in delegate_calls)
    await server.release(grandchild_id, "gg")
    await server.quiet(0.4, lambda m: m in after(server, end) and m.get("method") == "session/update")
    assert "never" not in server.texts(a)
    assert updates_not_for(server, {a}) == []
    stats = await server.stats()
    assert stats["runningTurns"] == 0


async def test_cancelling_a_child_stops_only_the_child_and_the_parent_goes_on(acp: Acp) -> None:
    """I16 reverse: `session/cancel` with the child's id stops the child (and its grandchild); the parent's delegate
    call fails (`failed` on v2 too: nobody cancelled the parent's call, its child was stopped under it) and the
    parent's work goes on to `end_turn` (on v2 with one idle)."""
    server = acp.client
    a = await acp.new_session()
    child = [{"say": "c1"}, delegate("deeper", [{"gate": "gg"}]), {"say": "c2"}]
    turn = await acp.prompt(a, [delegate("work", child), {"say": "parent continues"}])
    await server.probe("gate_reached", gate="gg")
    await server.wait_for(lambda m: bool(child_ids(server, a)))
    first_delegate = acp.calls_started(a)[0]["toolCallId"]
    child_id = next(
        u["_meta"]["acpServer"]["childSessionId"]
        for u in server.updates(a, "tool_call_update")
        if u["toolCallId"] == first_delegate and "childSessionId" in u.get("_meta", {}).get("acpServer", {})
    )
    await server.cancel(child_id)
    await acp.stopped(turn, "end_turn")
    assert server.texts(a) == ["parent continues"]
    assert last_status(server, a, first_delegate) == "failed"
    if isinstance(acp, AcpV2):
        assert acp.states(a) == ["running", "idle"]
    else:  # v1 shows the child's words in the call's content (the v2 copy did not look for them)
        shown = [
            line
            for u in server.updates(a, "tool_call_update")
            for item in u.get("content", [])
            for line in item.get("content", {}).get("text", "").splitlines()
        ]
        assert "c1" in shown and "c2" not in shown  # the child stopped at its delegate step


async def test_a_child_session_id_accepts_only_cancel(server: RawClient) -> None:
    a = await server.new_session()
    prompt = await server.prompt(a, [delegate("work", [{"gate": "g"}])])
    reached = await server.probe("gate_reached", gate="g")
    child_id = reached["params"]["sessionId"]
    refused = await server.call("session/prompt", {"sessionId": child_id, "prompt": [{"type": "text", "text": "x"}]})
    assert refused["error"]["code"] == -32602
    await server.release(child_id, "g")
    assert (await server.response(prompt))["result"] == {"stopReason": "end_turn"}


async def test_a_childs_permission_question_goes_out_under_the_parent_naming_its_own_tool_call(
    server: RawClient, tmp_path: Path
) -> None:
    """docs/interrupts.md decision 7: the question carries the parent's session id, the child's tool call (id, title,
    content), and `_meta.acpServer.parentToolCallId` naming the delegate call the client sees; a grandchild's
    question names the same top-level call. The answer reaches the child, which goes on."""
    a = await server.new_session(str(tmp_path))
    write = {"tool": "write_file", "args": {"path": "from-child.txt", "content": "hello"}}
    grandchild: list[dict[str, Any]] = [write, {"say": "grandchild done"}]
    child = [{"say": "c1"}, delegate("deeper", grandchild), {"say": "child done"}]
    prompt = await server.prompt(a, [delegate("work", child), {"say": "parent done"}])
    question = await server.wait_for(lambda m: m.get("method") == "session/request_permission")
    params = question["params"]
    [delegate_call] = [u["toolCallId"] for u in server.updates(a, "tool_call")]
    assert params["sessionId"] == a
    assert params["_meta"] == {"acpServer": {"parentToolCallId": delegate_call}}
    tool_call = params["toolCall"]
    assert tool_call["_meta"] == {"acpServer": {"parentToolCallId": delegate_call}}
    assert tool_call["toolCallId"] != delegate_call and "from-child.txt" in tool_call["title"]
    assert tool_call["content"][0]["type"] == "diff" and tool_call["content"][0]["newText"] == "hello"
    allow = {"outcome": {"outcome": "selected", "optionId": "allow_once"}}
    await server.send({"id": question["id"], "result": allow})
    assert (await server.response(prompt))["result"] == {"stopReason": "end_turn"}
    assert server.texts(a) == ["parent done"]
    assert (tmp_path / "from-child.txt").read_text() == "hello"
    assert updates_not_for(server, {a}) == []


@pytest.mark.at_once
async def test_closing_the_parent_session_cancels_its_children_before_either_answer(acp: Acp) -> None:
    """I20 (c) with I16: the close cascades to the child (its step exits `cancelled`), then the parent's work ends
    `cancelled` (v1: the prompt's answer, v2: the idle), then the close answers `{}` within T_ACK; nothing for the
    session after it."""
    server = acp.client
    a = await acp.new_session()
    turn = await acp.prompt(a, [delegate("work", [{"say": "c1"}, {"gate": "cg"}]), {"say": "never"}])
    reached = await server.probe("gate_reached", gate="cg")
    child = reached["params"]["sessionId"]
    t0 = await server.send({"id": "close-1", "method": "session/close", "params": {"sessionId": a}})
    closed = await server.response("close-1")
    assert closed["result"] == {}
    assert server.arrival_time(closed) - t0 <= T_ACK
    cancelled = await acp.stopped(turn, "cancelled")
    exited = await server.probe("step_exited", sessionId=child, reason="cancelled")
    assert position(server, exited) < position(server, cancelled) < position(server, closed)
    await server.quiet(0.3, lambda m: m in after(server, closed) and of_session(a)(m))
    assert (await server.stats())["runningTurns"] == 0


async def test_cancelling_one_child_leaves_its_siblings_and_other_sessions_children_running(acp: Acp) -> None:
    """Isolation: the next child of the same parent runs to its end, and another session's child is untouched (its
    parent's work still running) until its gate opens."""
    server = acp.client
    a, b = await acp.new_session(), await acp.new_session()
    turn_a = await acp.prompt(
        a, [delegate("first", [{"gate": "ga"}]), delegate("second", [{"say": "second done"}]), {"say": "a done"}]
    )
    turn_b = await acp.prompt(b, [delegate("other", [{"gate": "gb"}, {"say": "b child done"}]), {"say": "b done"}])
    first = (await server.probe("gate_reached", gate="ga"))["params"]["sessionId"]
    other = (await server.probe("gate_reached", gate="gb"))["params"]["sessionId"]
    await server.cancel(first)
    await acp.stopped(turn_a, "end_turn")
    statuses = [u["status"] for u in server.updates(a, "tool_call_update") if u.get("status") in ENDED]
    assert statuses == ["failed", "completed"]  # the cancelled child, then its sibling
    assert server.texts(a) == ["a done"]
    # b's child still waits at its gate: v1 has not answered b's prompt, v2's b is still `running`.
    if isinstance(acp, AcpV2):
        assert acp.states(b) == ["running"]
    else:
        assert not [m for m in server.received if m.get("id") == turn_b.request_id]
    await server.release(other, "gb")
    await acp.stopped(turn_b, "end_turn")
    final_b = [u for u in server.updates(b, "tool_call_update") if u.get("status") == "completed"]
    assert "b child done" in orjson.dumps(final_b[-1]["content"]).decode()
