"""v2's replay of the store's records (acp_server/protocol/v2/replay.py), rendered directly from the records: the same
upserts the server of commit 15f92d4 sent, when v2's replay was v1's converted. One session of every record shape and
turn ending: a prompt of several blocks (adjacent plain texts joined, anything else kept in place), thoughts and
replies in pieces (one whole message each, `_meta` apart), tool calls, a display terminal anchoring the change after
it or left alone (its end kept, never kept, or still running), a plan, the usage; a turn interrupted, one cancelled,
one still running. fixtures/replays/v2_from_records.json is what that server's `replay_updates_v2` returned for this
session (made by running `python -m tests.unit.protocol.test_v2_replay > fixtures/replays/v2_from_records.json` in a
checkout of 15f92d4 with this file copied in)."""

from __future__ import annotations

import sys
from pathlib import Path

import orjson
import pytest

from acp_server.protocol.v2.replay import replay_updates_v2
from acp_server.runtime.model import DiffOutput, PlanEntry, TerminalOutput, TextOutput
from acp_server.store import (
    AgentText,
    AgentThought,
    ContextUsage,
    LoadedSession,
    PlanSet,
    SessionRecord,
    TerminalEnded,
    ToolCallChanged,
    ToolCallOpened,
    ToolCallTerminal,
    TurnEntry,
    TurnRecord,
    UserChunk,
)

pytestmark = pytest.mark.timeout(10)

EXPECTED = Path(__file__).resolve().parents[3] / "fixtures" / "replays" / "v2_from_records.json"
IMAGE = {"type": "image", "data": "AA", "mimeType": "image/png"}


def session() -> LoadedSession:
    record = SessionRecord("s", "/w", (), (), "t", "t", None, "default", {}, None, None)
    first: list[TurnEntry] = [
        UserChunk("u1", {"type": "text", "text": "a"}),
        UserChunk("u1", {"type": "text", "text": "b"}),
        UserChunk("u1", IMAGE),
        UserChunk("u1", {"type": "text", "text": "c", "annotations": {}}),
        UserChunk("u1", {"type": "text", "text": "d"}),
        AgentThought("t1", "x"),
        AgentThought("t1", "y"),
        AgentText("m1", "p"),
        AgentText("m1", "q", {"k": 1}),
        AgentText("m1", "r", {"k": 1}),
        AgentText("m2", "s"),
        ToolCallOpened("c1", "T", "edit", "pending", {"a": 1}, ("/w/a",)),
        ToolCallChanged("c1", "in_progress", None, ("/w/b",), None, {"m": 1}),
        ToolCallTerminal("c2", "term1"),
        ToolCallChanged("c2", None, (TextOutput("o"),)),
        ToolCallTerminal("c3", "term2"),
        ToolCallChanged("c3", "in_progress"),
        TerminalEnded("term1", "ls", "/w", b"hi", 0, None),
        ToolCallChanged("c1", "completed", (DiffOutput("/w/a", None, "z\n"), TerminalOutput("ed1")), None, {"r": 1}),
        PlanSet((PlanEntry("x", "high", "pending"),)),
        ContextUsage(1, 2),
        AgentText("m3", "end"),
    ]
    interrupted: list[TurnEntry] = [
        UserChunk("u2", {"type": "text", "text": "go"}),
        AgentText("m4", "partial"),
        ToolCallOpened("c4", "Run", "execute", "pending", {}, None),
        ToolCallTerminal("c4", "term3"),
    ]
    running: list[TurnEntry] = [UserChunk("u4", {"type": "text", "text": "y"}), ToolCallTerminal("c5", "term4")]
    turns = [
        TurnRecord("T1", "completed", "end_turn", None, "s", "e", "p", first, True),
        TurnRecord("T2", "interrupted", None, None, "s", None, "go", interrupted, True),
        TurnRecord(
            "T3", "cancelled", "cancelled", None, "s", "e", "x", [UserChunk("u3", {"type": "text", "text": "x"})]
        ),
        TurnRecord("T4", "running", None, None, "s", None, "y", running),
    ]
    return LoadedSession(record, turns, [])


def test_v2_replays_every_record_shape_as_the_previous_server_did() -> None:
    replayed = replay_updates_v2(session())
    expected = orjson.loads(EXPECTED.read_bytes())
    assert replayed == expected
    assert [list(u) for u in replayed] == [list(u) for u in expected]  # the same key order: the same bytes


if __name__ == "__main__":
    sys.stdout.buffer.write(orjson.dumps(replay_updates_v2(session()), option=orjson.OPT_INDENT_2) + b"\n")
