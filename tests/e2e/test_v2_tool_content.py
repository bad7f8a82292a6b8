"""A tool call that reports as it goes, end to end over stdio (ACP-V2.md §9, `tool-calls § Streaming Content`): on v2
each new piece is one `tool_call_content_chunk` that appends it, sent once; on v1, which has no append, each
`tool_call_update` carries the call's whole content so far; and a v2 replay shows what the client had accumulated in
upserts of the whole content. Tests named `test_acp_…` hold the acp-tck v2 requirement of that id
(src/tck/v2/requirements.py at 1314e0951863b03844fd530e0e14bd88843aabe7). The reporting tool is `delegate`: a line
for each piece of the child's text, each tool it starts and how that ended, then its answer."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import StartServer
from tests.e2e.test_interrupts import position
from tests.e2e.test_subagents import delegate
from tests.support.harness import DEFAULT_ARGS, RawClient

pytestmark = pytest.mark.timeout(40)

CHILD: list[dict[str, Any]] = [{"say": "c1"}, {"tool": "test_sleep", "args": {"s": 0}}, {"say": "c2"}]


def texts(content: list[dict[str, Any]]) -> list[str]:
    """The text of v2 `content` items (each `{type: content, content: {type: text, text}}`)."""
    return [item["content"]["text"] for item in content]


def the_delegate_call(server: RawClient, session_id: str) -> str:
    calls = {
        str(u["toolCallId"]) for u in server.updates(session_id, "tool_call_update") if u.get("name") == "delegate"
    }
    [call] = calls
    return call


def chunks_of(server: RawClient, session_id: str, call: str) -> list[dict[str, Any]]:
    return [u for u in server.updates(session_id, "tool_call_content_chunk") if u["toolCallId"] == call]


def accumulated(updates: list[dict[str, Any]], call: str) -> list[dict[str, Any]]:
    """The call's content as a v2 client builds it (§9): an upsert with `content` replaces it, a chunk appends."""
    content: list[dict[str, Any]] = []
    for update in updates:
        if update.get("toolCallId") != call:
            continue
        if update["sessionUpdate"] == "tool_call_content_chunk":
            content.append(update["content"])
        elif update["sessionUpdate"] == "tool_call_update" and "content" in update:
            content = list(update["content"] or [])
    return content


async def test_acp_patch_204_a_reporting_tool_call_streams_each_piece_once_as_a_content_chunk_before_its_final_update(
    server_v2: RawClient, tmp_path: Path
) -> None:
    """ACP-PATCH-204 for chunks: each carries its non-empty toolCallId and one content item."""
    session_id = await server_v2.new_session_v2(str(tmp_path))
    await server_v2.prompt(session_id, [delegate("work", CHILD), {"say": "parent done"}])
    assert (await server_v2.idle(session_id))["params"]["update"]["stopReason"] == "end_turn"
    call = the_delegate_call(server_v2, session_id)
    chunks = chunks_of(server_v2, session_id, call)
    assert chunks and all(c["toolCallId"] and isinstance(c["content"], dict) for c in chunks)
    shown = texts([c["content"] for c in chunks])
    assert shown[0] == "c1" and shown[1].startswith("→ ") and shown[2:] == ["  done", "c2"], shown
    updates = [u for u in server_v2.updates(session_id) if u.get("toolCallId") == call]
    final = updates[-1]
    assert final["sessionUpdate"] == "tool_call_update" and final["status"] == "completed"
    # Nothing re-sends what a chunk already appended: before the final report, no upsert carries content.
    assert not [u for u in updates[:-1] if u["sessionUpdate"] == "tool_call_update" and "content" in u]
    assert accumulated(updates[:-1], call) == [c["content"] for c in chunks]
    assert "c2" in texts(final["content"])[0]  # the final report replaces the progress with the call's result
    messages = [m for m in server_v2.received if m.get("method") == "session/update"]
    last_chunk = next(m for m in reversed(messages) if m["params"]["update"] is chunks[-1])
    final_message = next(m for m in reversed(messages) if m["params"]["update"] is final)
    assert position(server_v2, last_chunk) < position(server_v2, final_message)


async def test_on_v1_a_reporting_tool_call_sends_its_whole_content_so_far_each_time(
    server: RawClient, tmp_path: Path
) -> None:
    """v1 has no append: each progress report is the whole content, the earlier items first, so a v1 client that
    replaces the content each time shows the same lines as a v2 client that appends."""
    session_id = await server.new_session(str(tmp_path))
    response = await server.response(await server.prompt(session_id, [delegate("work", CHILD), {"say": "done"}]))
    assert response["result"] == {"stopReason": "end_turn"}
    [call] = [u["toolCallId"] for u in server.updates(session_id, "tool_call")]
    progress = [
        texts(u["content"])
        for u in server.updates(session_id, "tool_call_update")
        if u["toolCallId"] == call and "content" in u and "status" not in u
    ]
    assert server.updates(session_id, "tool_call_content_chunk") == []
    assert [len(p) for p in progress] == [1, 2, 3, 4]
    assert all(later[: len(earlier)] == earlier for earlier, later in itertools.pairwise(progress))
    assert progress[-1][0] == "c1" and progress[-1][2:] == ["  done", "c2"]


async def test_a_v2_replay_shows_a_reported_calls_accumulated_content_in_whole_upserts(
    start_server: StartServer, tmp_path: Path
) -> None:
    state = tmp_path / "state"
    work = tmp_path / "work"
    work.mkdir()
    first = await start_server(*DEFAULT_ARGS, env={"ACP_SERVER_STATE_DIR": str(state)})
    await first.initialize_v2()
    session_id = await first.new_session_v2(str(work))
    await first.prompt(session_id, [delegate("work", CHILD), {"say": "parent done"}])
    await first.idle(session_id)
    call = the_delegate_call(first, session_id)
    live = [u for u in first.updates(session_id) if u.get("toolCallId") == call]
    await first.close()

    second = await start_server(*DEFAULT_ARGS, env={"ACP_SERVER_STATE_DIR": str(state)})
    await second.initialize_v2()
    response = await second.call(
        "session/resume", {"sessionId": session_id, "cwd": str(work), "replayFrom": {"type": "start"}}
    )
    assert "result" in response, response
    replayed = [u for u in second.updates(session_id) if u.get("toolCallId") == call]
    assert not [u for u in replayed if u["sessionUpdate"] == "tool_call_content_chunk"]
    progress = [u for u in replayed if "content" in u and "status" not in u]
    assert progress, replayed
    assert progress[-1]["content"] == accumulated(live[:-1], call)  # what the live client had before the result
    assert accumulated(replayed, call) == accumulated(live, call)
