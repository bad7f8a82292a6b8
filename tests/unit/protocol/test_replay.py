"""The v1 edge of the session store (acp_server/protocol/v1/replay.py, and v1/legacy.py, which reads the v1 updates a
store of schema 1 kept): each update kept is replayed exactly as it was sent, cancelled and interrupted turns close as
docs/interrupts.md decision 6 says, and a store written by the server before the turn records (fixtures/stores/v1,
schema 1) replays after its upgrade what that server replayed."""

from __future__ import annotations

import shutil
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from acp_server.protocol.v1.legacy import entry_of
from acp_server.protocol.v1.replay import render, replay_updates
from acp_server.runtime.model import Message
from acp_server.store import STORE_FILENAME, LoadedSession, SessionStore, TurnLog

pytestmark = pytest.mark.timeout(60)

ROOT = Path(__file__).resolve().parents[3]
LEGACY = ROOT / "fixtures" / "stores" / "v1"
PROMPT = [{"type": "text", "text": "hello"}, {"type": "resource_link", "uri": "file:///a.py", "name": "a.py"}]
SESSION_SCOPED = {"available_commands_update", "session_info_update", "current_mode_update", "config_option_update"}


def text_chunk(text: str, message_id: str = "msg_a") -> dict[str, Any]:
    return {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": text}, "messageId": message_id}


def log_update(turn: TurnLog | None, update: dict[str, Any]) -> None:
    """A v1 update kept as the store's record, read as a store of schema 1 is when it is upgraded (nothing without a
    store, and nothing for an update the records cannot hold)."""
    entry = entry_of(update)
    if turn is not None and entry is not None:
        turn.append(entry)


# Every shape of update a v1 turn sends (protocol/v1/updates.py, agent/sessions/turn.py), and the prompt's blocks.
SENT: list[dict[str, Any]] = [
    {"sessionUpdate": "user_message_chunk", "content": PROMPT[1], "messageId": "msg_u"},
    text_chunk("Hel"),
    {**text_chunk("with meta"), "_meta": {"n": 1}},
    {"sessionUpdate": "agent_thought_chunk", "content": {"type": "text", "text": "hmm"}, "messageId": "msg_t"},
    {
        "sessionUpdate": "tool_call",
        "toolCallId": "c1",
        "title": "Edit a.py",
        "kind": "edit",
        "status": "pending",
        "rawInput": {"path": "a.py"},
        "locations": [{"path": "/w/a.py"}],
    },
    {"sessionUpdate": "tool_call", "toolCallId": "c2", "title": "Run", "kind": "execute", "status": "pending"},
    {"sessionUpdate": "tool_call_update", "toolCallId": "c1", "status": "in_progress"},
    {"sessionUpdate": "tool_call_update", "toolCallId": "c1", "locations": [{"path": "/w/b.py"}], "_meta": {"x": 1}},
    {
        "sessionUpdate": "tool_call_update",
        "toolCallId": "c1",
        "status": "completed",
        "content": [
            {"type": "content", "content": {"type": "text", "text": "ok"}},
            {"type": "diff", "path": "/w/a.py", "oldText": None, "newText": "x\n"},
            {"type": "terminal", "terminalId": "term_1"},
        ],
        "rawOutput": {"exit": 0},
    },
    {"sessionUpdate": "tool_call_update", "toolCallId": "c2", "status": "failed", "content": []},
    {"sessionUpdate": "plan", "entries": [{"content": "x", "priority": "high", "status": "pending"}]},
    {"sessionUpdate": "usage_update", "used": 1200, "size": 200000},
]


@pytest.mark.parametrize("update", SENT, ids=lambda u: str(u["sessionUpdate"]))
def test_every_update_a_turn_sends_is_rendered_back_exactly(update: dict[str, Any]) -> None:
    entry = entry_of(update)
    assert entry is not None
    assert render(entry) == update
    assert list(render(entry)) == list(update)  # the same key order: the same bytes on the wire


@pytest.mark.parametrize(
    "update",
    [
        {"sessionUpdate": "notice", "severity": "info", "title": "live only"},
        {"sessionUpdate": "available_commands_update", "availableCommands": []},
        {**text_chunk("x"), "extra": 1},
        {"sessionUpdate": "agent_message_chunk", "content": {"type": "image", "data": "AA", "mimeType": "image/png"}},
        {"sessionUpdate": "agent_message_chunk", "content": object()},
        {"sessionUpdate": "tool_call_update", "toolCallId": "c", "content": [{"type": "content", "content": {}}]},
        {"sessionUpdate": "tool_call", "toolCallId": "c", "rawInput": None},
        {"sessionUpdate": "plan", "entries": [{"content": "x"}]},
    ],
)
def test_an_update_the_records_cannot_hold_exactly_is_not_read(update: dict[str, Any]) -> None:
    assert entry_of(update) is None


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[SessionStore]:
    opened = SessionStore.open(tmp_path / STORE_FILENAME)
    yield opened
    await opened.aclose()


async def loaded(store: SessionStore, session_id: str) -> LoadedSession:
    result = await store.load(session_id)
    assert result is not None
    return result


async def test_a_turn_replays_every_update_as_sent_after_its_prompt(store: SessionStore) -> None:
    store.create_session("s", "/w")
    turn = store.begin_turn("s", PROMPT, "hello", message_id="msg_user1")
    for update in SENT:
        log_update(turn, update)
    log_update(turn, {**text_chunk("x"), "content": object()})  # not JSON: skipped, the rest kept
    log_update(None, text_chunk("no store"))  # without a store nothing is recorded, and nothing fails
    store.finish_turn(turn, "completed", stop_reason="end_turn")
    user_chunks = [{"sessionUpdate": "user_message_chunk", "content": b, "messageId": "msg_user1"} for b in PROMPT]
    assert replay_updates(await loaded(store, "s")) == user_chunks + SENT


async def test_replay_closes_cancelled_and_interrupted_turns_with_a_marked_chunk(store: SessionStore) -> None:
    store.create_session("s", "/w")
    cancelled = store.begin_turn("s", PROMPT, "hello")
    log_update(cancelled, text_chunk("partial"))
    store.finish_turn(
        cancelled, "cancelled", stop_reason="cancelled", messages=[Message("user", "hello"), Message("assistant", "x")]
    )
    completed = store.begin_turn("s", [{"type": "text", "text": "ok"}], "ok")
    log_update(completed, {"sessionUpdate": "notice", "severity": "info", "title": "live only"})
    store.finish_turn(completed, "completed", stop_reason="end_turn")
    crashed = store.begin_turn("s", [{"type": "text", "text": "go"}], "go")
    log_update(crashed, {"sessionUpdate": "tool_call", "toolCallId": "c9", "title": "Run tests", "kind": "execute"})
    log_update(crashed, text_chunk("running tests", "msg_c"))
    await store.flush()
    conn = store._conn  # the process dies here: its turn is left running, then found gone
    conn.execute("UPDATE turns SET status = 'interrupted' WHERE turn_id = ?", (crashed.turn_id,))
    result = await loaded(store, "s")
    replayed = replay_updates(result)
    turns = result.turns
    closing = {
        status: {
            "sessionUpdate": "agent_message_chunk",
            "content": {"type": "text", "text": f"[{status}]"},
            "messageId": f"msg_{turn.turn_id}_end",
            "_meta": {"acpServer": {"turnStatus": status}},
        }
        for status, turn in (("cancelled", turns[0]), ("interrupted", turns[2]))
    }
    failed_tool_call = {
        "sessionUpdate": "tool_call_update",
        "toolCallId": "c9",
        "status": "failed",
        "content": [{"type": "content", "content": {"type": "text", "text": "The tool call was interrupted."}}],
    }
    assert replayed == [
        {"sessionUpdate": "user_message_chunk", "content": PROMPT[0], "messageId": replayed[0]["messageId"]},
        {"sessionUpdate": "user_message_chunk", "content": PROMPT[1], "messageId": replayed[0]["messageId"]},
        text_chunk("partial"),
        closing["cancelled"],
        {"sessionUpdate": "user_message_chunk", "content": {"type": "text", "text": "ok"}, "messageId": ANY_ID},
        # the notice is not replayed
        {"sessionUpdate": "user_message_chunk", "content": {"type": "text", "text": "go"}, "messageId": ANY_ID},
        {"sessionUpdate": "tool_call", "toolCallId": "c9", "title": "Run tests", "kind": "execute"},
        text_chunk("running tests", "msg_c"),
        failed_tool_call,
        closing["interrupted"],
    ]
    assert result.history[-2:] == [
        Message("user", "go"),
        Message("assistant", 'running tests\n\n[tool call "Run tests": pending]\n\n[interrupted]'),
    ]


class _AnyMessageId(str):
    """Equal to any `msg_` id: the prompt's message ids are made by the store."""

    __slots__ = ()

    def __eq__(self, other: object) -> bool:
        return isinstance(other, str) and other.startswith("msg_")

    def __hash__(self) -> int:
        return 0


ANY_ID = _AnyMessageId("msg_*")


async def test_coalesced_replay_merges_chunks_of_one_message_and_keeps_the_text(store: SessionStore) -> None:
    store.create_session("s", "/w")
    turn = store.begin_turn("s", [{"type": "text", "text": "hi"}], "hi", message_id="msg_u")
    for piece in ("a", "b", "c"):
        log_update(turn, text_chunk(piece, "msg_1"))
    log_update(
        turn, {"sessionUpdate": "agent_thought_chunk", "content": {"type": "text", "text": "t"}, "messageId": "m2"}
    )
    for piece in ("d", "e"):
        log_update(turn, text_chunk(piece, "msg_3"))
    store.finish_turn(turn, "completed")
    replayed = replay_updates(await loaded(store, "s"), coalesce=True)
    assert replayed == [
        {"sessionUpdate": "user_message_chunk", "content": {"type": "text", "text": "hi"}, "messageId": "msg_u"},
        text_chunk("abc", "msg_1"),
        {"sessionUpdate": "agent_thought_chunk", "content": {"type": "text", "text": "t"}, "messageId": "m2"},
        text_chunk("de", "msg_3"),
    ]


# --- a store written before the turn records ---


async def test_a_store_written_before_the_records_replays_what_its_server_replayed(tmp_path: Path) -> None:
    shutil.copyfile(LEGACY / STORE_FILENAME, tmp_path / STORE_FILENAME)
    expected = orjson.loads((LEGACY / "expected.json").read_bytes())
    store = SessionStore.open(tmp_path / STORE_FILENAME, read_legacy=entry_of)
    try:
        for role in ("completed", "cancelled", "failed", "interrupted"):
            session = expected[role]
            replayed = replay_updates(await loaded(store, session["sessionId"]))
            assert replayed == [u for u in session["updates"] if u["sessionUpdate"] not in SESSION_SCOPED], role
    finally:
        await store.aclose()
