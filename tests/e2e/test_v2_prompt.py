"""The v2 prompt lifecycle end to end over stdio (ACP-V2.md §6, §8, §9, §13): the prompt is answered on insertion with
an agent-owned `messageId`, echoed as a `user_message`, and its work runs between `running` and an `idle` that carries
the stop reason (`error` with the error for a failure: test_interrupts.py states that one for v1 and v2). Tests named
`test_acp_…` (lower case, as ruff wants) hold the acp-tck v2 requirement of that id (src/tck/v2/requirements.py at
1314e0951863b03844fd530e0e14bd88843aabe7)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.e2e.test_interrupts import chunk, position
from tests.support.harness import RawClient

pytestmark = pytest.mark.timeout(30)


def update_of(message: dict[str, Any]) -> dict[str, Any]:
    update: dict[str, Any] = message["params"]["update"]
    return update


def is_update(session_id: str, kind: str, **fields: Any) -> Any:
    def matches(message: dict[str, Any]) -> bool:
        if message.get("method") != "session/update" or message["params"]["sessionId"] != session_id:
            return False
        update = message["params"]["update"]
        return bool(update["sessionUpdate"] == kind and all(update.get(k) == v for k, v in fields.items()))

    return matches


async def test_acp_prompt_201_203_state_201_the_prompt_is_answered_on_insertion_then_echoed_then_run_to_idle(
    server_v2: RawClient,
) -> None:
    """Response {messageId} first, then the user_message echo with that id, then running, the reply, idle end_turn
    (§23 Q2). The response comes while the turn is still held at a gate: it answers insertion, not completion."""
    session_id = await server_v2.new_session_v2()
    prompt = await server_v2.prompt(session_id, [{"gate": "g"}, {"say": "hello"}])
    response = await server_v2.response(prompt)
    message_id = response["result"]["messageId"]
    assert isinstance(message_id, str) and message_id
    await server_v2.probe("gate_reached", sessionId=session_id, gate="g")
    echo = await server_v2.wait_for(is_update(session_id, "user_message", messageId=message_id))
    assert update_of(echo)["content"] == [{"type": "text", "text": "go"}]
    running = await server_v2.wait_for(is_update(session_id, "state_update", state="running"))
    assert not [m for m in server_v2.received if is_update(session_id, "state_update", state="idle")(m)]
    await server_v2.release(session_id, "g")
    idle = await server_v2.idle(session_id)
    reply = await server_v2.wait_for(chunk("hello"))
    assert position(server_v2, response) < position(server_v2, echo) < position(server_v2, running)
    assert position(server_v2, running) < position(server_v2, reply) < position(server_v2, idle)
    assert update_of(idle)["stopReason"] == "end_turn"
    assert update_of(reply)["messageId"]  # ACP-PATCH-201


async def test_acp_patch_203_two_prompts_get_two_message_ids(server_v2: RawClient) -> None:
    session_id = await server_v2.new_session_v2()
    ids = []
    for nth in (1, 2):
        response = await server_v2.response(await server_v2.prompt(session_id, [{"say": "x"}]))
        ids.append(response["result"]["messageId"])
        await server_v2.idle(session_id, nth)
    assert ids[0] != ids[1]


async def test_a_refused_prompt_inserts_nothing_and_an_unknown_session_names_itself_in_the_error_data(
    server_v2: RawClient,
) -> None:
    """An error response means nothing was inserted: no echo, no state change (§6.1). -32002 carries
    SessionNotFoundErrorData (§17)."""
    session_id = await server_v2.new_session_v2()
    # A content block type we do not support MUST be refused (§6.1): a future, unknown one here.
    video = {"type": "video", "data": "AAAA", "mimeType": "video/mp4"}
    refused = await server_v2.call(
        "session/prompt", {"sessionId": session_id, "prompt": [{"type": "text", "text": "x"}, video]}
    )
    assert refused["error"]["code"] == -32602
    text = [{"type": "text", "text": "x"}]
    unknown = await server_v2.call("session/prompt", {"sessionId": "sess_nope", "prompt": text})
    assert unknown["error"]["code"] == -32002 and unknown["error"]["data"] == {"sessionId": "sess_nope"}
    assert server_v2.updates(session_id, "user_message") == [] and server_v2.states(session_id) == []


async def test_acp_patch_204_205_208_a_tool_call_is_one_upsert_with_its_name_and_a_plan_is_a_plan_update(
    server_v2: RawClient,
) -> None:
    session_id = await server_v2.new_session_v2()
    entries = [{"content": "step one", "priority": "high", "status": "in_progress"}]
    await server_v2.prompt(session_id, [{"tool": "update_plan", "args": {"entries": entries}}, {"say": "ok"}])
    await server_v2.idle(session_id)
    calls = server_v2.updates(session_id, "tool_call_update")
    assert server_v2.updates(session_id, "tool_call") == []
    first = calls[0]
    assert first["title"] and first["name"] == "update_plan" and first["status"] == "pending"
    assert {c["toolCallId"] for c in calls} == {first["toolCallId"]}
    assert all(c.get("name", first["name"]) == first["name"] for c in calls)  # set once, never changed
    assert calls[-1]["status"] == "completed"
    (plan,) = server_v2.updates(session_id, "plan_update")
    assert plan["plan"] == {"type": "items", "planId": f"plan-{session_id}", "entries": entries}
    assert server_v2.updates(session_id, "plan") == []


async def test_a_session_update_of_the_config_carries_config_ids_and_no_mode_update(server_v2: RawClient) -> None:
    """Modes live only in the `mode` config option on v2 (§14): set_config_option answers the complete list with
    `configId` (ACP-CONFIG-202), and no `current_mode_update` is ever sent."""
    created = await server_v2.call("session/new", {"cwd": "/tmp"})
    session_id = created["result"]["sessionId"]
    assert "modes" not in created["result"]
    assert {c["type"] for c in created["result"]["availableCommands"]} == {"command"}
    response = await server_v2.call(
        "session/set_config_option", {"sessionId": session_id, "configId": "mode", "type": "id", "value": "bypass"}
    )
    options = {o["configId"]: o["currentValue"] for o in response["result"]["configOptions"]}
    assert options["mode"] == "bypass" and set(options) == {"model", "mode", "prompt_policy"}
    await server_v2.wait_for(is_update(session_id, "config_option_update"))
    assert server_v2.updates(session_id, "current_mode_update") == []


async def test_an_edit_shows_as_a_v2_diff_with_its_change_and_git_patch(server_v2: RawClient, tmp_path: Path) -> None:
    """§9: `{changes, patch}` instead of v1's `{path, oldText, newText}`: `add` for a new file, `modify` for an edit,
    absolute paths, a git patch that renders it (every message is schema-checked by the harness)."""
    created = await server_v2.call("session/new", {"cwd": str(tmp_path)})
    session_id = created["result"]["sessionId"]
    await server_v2.call(
        "session/set_config_option", {"sessionId": session_id, "configId": "mode", "type": "id", "value": "bypass"}
    )
    target = tmp_path / "notes.txt"
    script: list[dict[str, Any]] = [
        {"tool": "write_file", "args": {"path": "notes.txt", "content": "one\n"}},
        {"tool": "edit_file", "args": {"path": "notes.txt", "old_text": "one", "new_text": "two"}},
        {"say": "edited"},
    ]
    await server_v2.prompt(session_id, script)
    assert (await server_v2.idle(session_id))["params"]["update"]["stopReason"] == "end_turn"
    diffs = [
        item
        for u in server_v2.updates(session_id, "tool_call_update")
        for item in u.get("content") or []
        if item["type"] == "diff"
    ]
    assert [d["changes"] for d in diffs] == [
        [{"operation": "add", "path": str(target)}],
        [{"operation": "modify", "path": str(target)}],
    ]
    assert "+two" in diffs[1]["patch"]["text"] and "-one" in diffs[1]["patch"]["text"]
    assert all(d["patch"]["format"] == "git_patch" and "oldText" not in d for d in diffs)
    assert target.read_text() == "two\n"
