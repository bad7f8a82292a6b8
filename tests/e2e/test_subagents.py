"""Subagents (`delegate`): child sessions run inside the parent's tool call, never speak under their own id, and are
cancelled with their parent (docs/interrupts.md I16, decisions 5, 7), end to end over stdio with the scripted model
(a `delegate` step carries the child's own script)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.e2e.test_interrupts import after, position
from tests.support.harness import T_ACK, RawClient

FINAL = ("completed", "failed")


def delegate(task: str, script: list[dict[str, Any]]) -> dict[str, Any]:
    return {"tool": "delegate", "args": {"task": task, "script": script}}


def child_ids(server: RawClient, session: str) -> set[str]:
    return {
        u["_meta"]["acpServer"]["childSessionId"] for u in server.updates(session, "tool_call_update") if "_meta" in u
    }


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


@pytest.mark.at_once
async def test_cancelling_the_parent_cancels_child_and_grandchild_before_the_parent_answers(
    server: RawClient,
) -> None:
    """I16: cascade down."""
    a = await server.new_session()
    grandchild = [{"gate": "gg"}]
    child = [{"say": "c1"}, delegate("deeper", grandchild), {"say": "c2"}]
    prompt = await server.prompt(a, [delegate("work", child), {"say": "never"}])
    reached = await server.probe("gate_reached", gate="gg")
    grandchild_id = reached["params"]["sessionId"]
    t0 = await server.cancel(a)
    response = await server.response(prompt)
    assert response["result"] == {"stopReason": "cancelled"}
    assert server.arrival_time(response) - t0 <= T_ACK
    exited = await server.probe("step_exited", sessionId=grandchild_id, reason="cancelled")
    assert position(server, exited) < position(server, response)
    delegate_calls = {u["toolCallId"] for u in server.updates(a, "tool_call")}
    final = {u["toolCallId"]: u["status"] for u in server.updates(a, "tool_call_update") if "status" in u}
    assert all(final[call] == "failed" for call in delegate_calls)
    await server.release(grandchild_id, "gg")
    await server.quiet(0.4, lambda m: m in after(server, response) and m.get("method") == "session/update")
    assert "never" not in server.texts(a)
    stats = await server.stats()
    assert stats["runningTurns"] == 0


async def test_cancelling_a_child_stops_only_the_child_and_the_parent_goes_on(server: RawClient) -> None:
    """I16 reverse: the child (and its grandchild) stop; the parent's delegate call fails and the parent continues."""
    a = await server.new_session()
    child = [{"say": "c1"}, delegate("deeper", [{"gate": "gg"}]), {"say": "c2"}]
    prompt = await server.prompt(a, [delegate("work", child), {"say": "parent continues"}])
    await server.probe("gate_reached", gate="gg")
    await server.wait_for(lambda m: bool(child_ids(server, a)))
    first_delegate = server.updates(a, "tool_call")[0]["toolCallId"]
    child_id = next(
        u["_meta"]["acpServer"]["childSessionId"]
        for u in server.updates(a, "tool_call_update")
        if u["toolCallId"] == first_delegate and "_meta" in u
    )
    await server.cancel(child_id)
    response = await server.response(prompt)
    assert response["result"] == {"stopReason": "end_turn"}
    assert server.texts(a) == ["parent continues"]
    outcome = [u for u in server.updates(a, "tool_call_update") if u["toolCallId"] == first_delegate and "status" in u]
    assert outcome[-1]["status"] == "failed"
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


async def test_closing_the_parent_session_cancels_its_children_before_either_answer(server: RawClient) -> None:
    """I20 (c) with I16: the close cascades to the child; the prompt answers `cancelled`, then the close `{}`."""
    a = await server.new_session()
    prompt = await server.prompt(a, [delegate("work", [{"say": "c1"}, {"gate": "cg"}]), {"say": "never"}])
    reached = await server.probe("gate_reached", gate="cg")
    child = reached["params"]["sessionId"]
    close = await server.request("session/close", {"sessionId": a})
    closed, cancelled = await server.response(close), await server.response(prompt)
    assert cancelled["result"] == {"stopReason": "cancelled"} and closed["result"] == {}
    exited = await server.probe("step_exited", sessionId=child, reason="cancelled")
    assert position(server, exited) < position(server, cancelled) < position(server, closed)
    assert (await server.stats())["runningTurns"] == 0


async def test_cancelling_one_child_leaves_its_siblings_and_other_sessions_children_running(server: RawClient) -> None:
    """Isolation: the next child of the same parent runs to its end, and another session's child is untouched."""
    a, b = await server.new_session(), await server.new_session()
    prompt_a = await server.prompt(
        a, [delegate("first", [{"gate": "ga"}]), delegate("second", [{"say": "second done"}]), {"say": "a done"}]
    )
    prompt_b = await server.prompt(b, [delegate("other", [{"gate": "gb"}, {"say": "b child done"}]), {"say": "b done"}])
    first = (await server.probe("gate_reached", gate="ga"))["params"]["sessionId"]
    other = (await server.probe("gate_reached", gate="gb"))["params"]["sessionId"]
    await server.cancel(first)
    assert (await server.response(prompt_a))["result"] == {"stopReason": "end_turn"}
    statuses = [u["status"] for u in server.updates(a, "tool_call_update") if u.get("status") in FINAL]
    assert statuses == ["failed", "completed"]  # the cancelled child, then its sibling
    assert server.texts(a) == ["a done"]
    assert not [m for m in server.received if m.get("id") == prompt_b]  # b's child still waits at its gate
    await server.release(other, "gb")
    assert (await server.response(prompt_b))["result"] == {"stopReason": "end_turn"}
    final_b = [u for u in server.updates(b, "tool_call_update") if u.get("status") == "completed"]
    assert "b child done" in final_b[-1]["content"][0]["content"]["text"]
