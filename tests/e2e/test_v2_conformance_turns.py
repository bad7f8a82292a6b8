"""acp-tck v2 conformance of a prompt turn, end to end over stdio: what a prompt may hold (ACP-PROMPT-003,
ACP-PROMPTCAP-*), the updates of its turn (ACP-PROMPT-205, ACP-PATCH-201), how it ends (ACP-STATE-202/203) and
`session/cancel` (ACP-CANCEL-205/206/207). Tests named `test_acp_…` hold the requirement of that id (registry
src/tck/v2/requirements.py of agentclientprotocol/acp-tck at 1314e0951863b03844fd530e0e14bd88843aabe7, vendored in
fixtures/acp-tck/), judged against the 2.4.0 schema (fixtures/acp-schema/v2/schema.json): where the kit, written
against an older draft, disagrees with that schema, the schema wins and the test says so."""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import orjson
import pytest

from tests.conftest import StartServer
from tests.e2e.test_interrupts import position
from tests.support.harness import W_QUIET, RawClient
from tests.support.wire_schema import SCHEMA_V2_PATH, validate_v2

pytestmark = pytest.mark.timeout(40)

PNG_B64 = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="
TEXT = {"type": "text", "text": "look at this"}
# The message updates, whole and chunk, that carry a `messageId` (ACP-PATCH-201).
MESSAGES = {f"{kind}{part}" for kind in ("user_message", "agent_message", "agent_thought") for part in ("", "_chunk")}


def schema_stop_reasons() -> set[str]:
    """The stop reasons the v2 schema defines: the `const`s of IdleStateUpdate's branches."""
    idle = orjson.loads(SCHEMA_V2_PATH.read_bytes())["$defs"]["IdleStateUpdate"]
    return {
        branch["properties"]["stopReason"]["const"]
        for branch in idle["anyOf"]
        if "const" in branch.get("properties", {}).get("stopReason", {})
    }


def during(server: RawClient, start: int, end: dict[str, Any]) -> list[dict[str, Any]]:
    """The `session/update` messages received from index `start` up to and including `end`."""
    return [m for m in server.received[start : position(server, end) + 1] if m.get("method") == "session/update"]


async def turn(server: RawClient, session_id: str, prompt: list[dict[str, Any]], nth: int = 1) -> dict[str, Any]:
    """Send a plain prompt (no script: the model's own turn), expect it accepted; the turn's idle."""
    response = await server.call("session/prompt", {"sessionId": session_id, "prompt": prompt})
    assert isinstance(response["result"]["messageId"], str), response
    return await server.idle(session_id, nth)


async def test_acp_prompt_205_patch_201_every_update_of_a_turn_is_schema_valid_for_the_prompted_session_with_ids(
    server_v2: RawClient,
) -> None:
    """The built-in demo turn (a thought, streamed replies, tool calls, a plan) beside a second, idle session: every
    update is a valid `UpdateSessionNotification` for the prompted session, and every message update, live and
    replayed, has a non-empty string `messageId`."""
    session_id = await server_v2.new_session_v2()
    await server_v2.new_session_v2()
    start = len(server_v2.received)
    updates = during(server_v2, start, await turn(server_v2, session_id, [TEXT]))
    kinds = {m["params"]["update"]["sessionUpdate"] for m in updates}
    assert {"user_message", "agent_thought_chunk", "agent_message_chunk", "tool_call_update", "plan_update"} <= kinds
    for message in updates:
        assert message["params"]["sessionId"] == session_id
        assert validate_v2("UpdateSessionNotification", message["params"]) == []
    await server_v2.call("session/close", {"sessionId": session_id})
    start = len(server_v2.received)
    replay = await server_v2.call(
        "session/resume", {"sessionId": session_id, "cwd": "/tmp", "replayFrom": {"type": "start"}}
    )
    replayed = [m["params"]["update"] for m in during(server_v2, start, replay)]
    assert {"user_message", "agent_message", "agent_thought"} <= {u["sessionUpdate"] for u in replayed}
    for update in [m["params"]["update"] for m in updates] + replayed:
        if update["sessionUpdate"] in MESSAGES:
            assert isinstance(update.get("messageId"), str) and update["messageId"], update


async def test_acp_prompt_003_a_prompt_of_text_and_resource_links_is_accepted_and_runs_to_idle(
    server_v2: RawClient, tmp_path: Path
) -> None:
    """A link to a file in the session's directory, and one the agent cannot read (a web address)."""
    (tmp_path / "notes.txt").write_text("remember the milk\n")
    session_id = await server_v2.new_session_v2(str(tmp_path))
    links = [
        {"type": "resource_link", "uri": (tmp_path / "notes.txt").as_uri(), "name": "notes.txt"},
        {"type": "resource_link", "uri": "https://example.com/spec.md", "name": "spec.md"},
    ]
    idle = await turn(server_v2, session_id, [TEXT, *links])
    assert idle["params"]["update"]["stopReason"] == "end_turn"


@pytest.mark.parametrize(
    ("marker", "block"),
    [
        ("image", {"type": "image", "mimeType": "image/png", "data": PNG_B64}),
        ("audio", {"type": "audio", "mimeType": "audio/wav", "data": base64.b64encode(b"RIFF\0\0\0\0WAVE").decode()}),
        ("embeddedContext", {"type": "resource", "resource": {"uri": "file:///tmp/n.txt", "text": "hi"}}),
    ],
)
async def test_acp_promptcap_001_002_003_an_advertised_content_kind_beside_text_is_accepted_and_runs_to_idle(
    start_server: StartServer, marker: str, block: dict[str, Any]
) -> None:
    """ACP-PROMPTCAP-001 image, -002 audio, -003 embedded context: each is advertised (the scripted model takes
    images and sounds), accepted, echoed in the user message, and its turn ends `end_turn`."""
    server = await start_server()
    advertised = (await server.initialize_v2())["result"]["capabilities"]["session"]["prompt"]
    assert advertised[marker] == {}
    session_id = await server.new_session_v2()
    idle = await turn(server, session_id, [TEXT, block])
    assert idle["params"]["update"]["stopReason"] == "end_turn"
    (echo,) = server.updates(session_id, "user_message")
    assert echo["content"][1]["type"] == block["type"]


# One turn for each way a turn can end, with the stop reason it ends with.
ENDINGS: list[tuple[list[dict[str, Any]], str]] = [
    ([{"say": "done"}], "end_turn"),
    ([{"say": "long"}, {"stop": "max_tokens"}], "max_tokens"),
    ([{"stop": "refusal"}], "refusal"),
    ([{"say": "partial"}, {"fail": "boom"}], "error"),
    ([{"gate": "g"}], "cancelled"),
]


async def run_endings(server: RawClient, session_id: str) -> list[tuple[list[str | None], dict[str, Any]]]:
    """Run ENDINGS in order in one session (cancelling the gated one once it waits); for each turn, the states it
    showed (`running`, …) up to its idle, and the idle's update."""
    ended = []
    for nth, (script, expected) in enumerate(ENDINGS, 1):
        start = len(server.received)
        await server.response(await server.prompt(session_id, script))
        if expected == "cancelled":
            await server.probe("gate_reached", sessionId=session_id, gate="g")
            await server.cancel(session_id)
        idle = await server.idle(session_id, nth)
        ended.append(([m["params"]["update"].get("state") for m in during(server, start, idle)], idle))
    return ended


async def test_acp_state_202_every_turn_that_showed_running_ends_with_an_idle(server_v2: RawClient) -> None:
    """Each of the ways a turn ends (a reply, the token limit, a refusal, a failure, a cancel) first shows `running`,
    then ends with an idle `state_update` for the prompted session."""
    session_id = await server_v2.new_session_v2()
    for states, idle in await run_endings(server_v2, session_id):
        assert "running" in states, states
        assert idle["params"]["sessionId"] == session_id
        assert idle["params"]["update"]["state"] == "idle", idle


async def test_acp_state_203_schema_2_4_0_a_running_turn_ends_with_a_defined_stop_reason_and_error_is_one(
    server_v2: RawClient,
) -> None:
    """Each turn that showed `running` ends with an idle carrying a defined stop reason. The kit (written against an
    older draft) knows five: end_turn, max_tokens, max_turn_requests, refusal, cancelled. The 2.4.0 schema adds
    `error` (IdleStateUpdate, ErrorStopReason): the schema wins, so a failed turn's `error` is defined here, and it
    carries the error."""
    defined = schema_stop_reasons()
    assert defined == {"end_turn", "max_tokens", "max_turn_requests", "refusal", "cancelled", "error"}
    session_id = await server_v2.new_session_v2()
    ended = await run_endings(server_v2, session_id)
    for (script, expected), (states, idle) in zip(ENDINGS, ended, strict=True):
        assert "running" in states, script
        stop = idle["params"]["update"]["stopReason"]
        assert stop == expected and stop in defined
    failed = server_v2.states(session_id)[-3]  # running, idle error; then running, idle cancelled
    assert failed["stopReason"] == "error" and failed["error"]["message"]


async def test_acp_cancel_205_a_cancel_is_never_answered(server_v2: RawClient) -> None:
    """With work in flight, of an idle session, of an unknown one, with an id-like field in its params: the
    responses are exactly those to our requests, one each."""
    session_id = await server_v2.new_session_v2()
    await server_v2.response(await server_v2.prompt(session_id, [{"gate": "g"}]))
    await server_v2.probe("gate_reached", sessionId=session_id, gate="g")
    await server_v2.cancel(session_id)
    await server_v2.idle(session_id)
    await server_v2.cancel(session_id)
    await server_v2.cancel("sess_unknown")
    await server_v2.notify("session/cancel", {"sessionId": session_id, "_meta": {"id": 7}})
    await server_v2.call("session/list", {})  # the cancels were read before this was answered
    await server_v2.quiet(W_QUIET, lambda m: False)
    requests = [e.msg["id"] for e in server_v2.log if e.dir == "in" and "id" in e.msg and "method" in e.msg]
    responses = [m["id"] for m in server_v2.received if "method" not in m]
    assert sorted(responses) == sorted(requests)


async def test_acp_cancel_206_207_a_cancel_with_or_without_meta_ends_the_work_exactly_cancelled(
    server_v2: RawClient,
) -> None:
    """`{sessionId}` alone, then with `_meta` (an object, then null); each ends the work with the stop reason
    `cancelled` itself (never a substitute, nor `error`), even when the model's stream throws its own error as it is
    aborted (`gate_raise`)."""
    session_id = await server_v2.new_session_v2()
    cancels: list[dict[str, Any]] = [
        {"sessionId": session_id},
        {"sessionId": session_id, "_meta": {"reason": "user pressed stop"}},
        {"sessionId": session_id, "_meta": None},  # the schema: omitted and null are equivalent
    ]
    for nth, (params, gate) in enumerate(zip(cancels, ("gate", "gate_raise", "gate"), strict=True), 1):
        await server_v2.response(await server_v2.prompt(session_id, [{gate: "g"}, {"say": "late"}]))
        await server_v2.probe("gate_reached", sessionId=session_id, gate="g")
        await server_v2.notify("session/cancel", params)
        idle = await server_v2.idle(session_id, nth)
        assert idle["params"]["update"]["stopReason"] == "cancelled"
    assert server_v2.texts(session_id) == []
