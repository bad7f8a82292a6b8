"""What the store keeps of a turn (acp_server/protocol/store_log.py), built from the core's events by both renderers
(protocol/v1/updates.py, protocol/v2/updates.py), never read back out of the wire message.

v1: for every event, exactly the record that reading the sent v1 update gives (`entry_of`, how the store was fed
before records were built from events, and how a store of schema 1 is still read), text chunks straight to their rows.
v2: the same records, except that a display terminal (agent-owned, v2 only) is kept as records of its own and never
named by the call's changes, which keep the command's text: a v1 replay never names a terminal its client never had.
"""

from __future__ import annotations

import types
from dataclasses import replace
from typing import Any

import pytest

from acp_server.agent.sessions.inputs import ClientTools
from acp_server.protocol.v1.legacy import entry_of
from acp_server.protocol.v1.replay import render
from acp_server.protocol.v1.updates import TurnUpdates
from acp_server.protocol.v2.updates import V2TurnUpdates
from acp_server.runtime.model import (
    Compaction,
    DiffOutput,
    Notice,
    PlanEntry,
    PlanUpdated,
    ReplyStarted,
    TerminalOutput,
    TextDelta,
    TextOutput,
    ThoughtDelta,
    ToolCall,
    ToolCallFinished,
    ToolCallStarted,
    ToolCallUpdated,
    ToolContentAppended,
    TurnEvent,
    UsageReported,
)
from acp_server.store import AgentText, AgentThought, ToolCallChanged, ToolCallTerminal, TurnEntry

pytestmark = pytest.mark.timeout(10)


class _Log:
    """A turn's log that keeps what it is given, a text chunk's row as the record it stands for."""

    def __init__(self) -> None:
        self.entries: list[TurnEntry] = []
        self.rows = 0  # text chunks written straight to their row (the hot path: no record built)

    def append(self, entry: TurnEntry) -> None:
        self.entries.append(entry)

    def append_text(self, message_id: str, text: str, thought: bool = False) -> None:
        self.rows += 1
        self.entries.append(AgentThought(message_id, text) if thought else AgentText(message_id, text))


class _Connection:
    """Sends everything (no fence is up) and keeps the updates, in order."""

    def __init__(self) -> None:
        self.updates: list[dict[str, Any]] = []

    async def send_fenced(self, message: dict[str, Any], run: Any) -> bool:
        self.updates.append(message["params"]["update"])
        return True

    def notify(self, method: str, params: dict[str, Any]) -> None:
        self.updates.append(params["update"])


def _run(client: ClientTools, parent: str | None = None) -> Any:
    session = types.SimpleNamespace(client=client)
    return types.SimpleNamespace(
        session_id="s", session=session, turn_log=_Log(), parent_session_id=parent, cancelled=False
    )


CALL = ToolCall("c1", "write_file", {"path": "a.py"})
# Every kind of event a turn reports, in a turn's order, tool content of every kind included.
EVENTS: list[TurnEvent] = [
    ReplyStarted(0),
    ThoughtDelta("hmm"),
    TextDelta("Hel"),
    TextDelta("lo"),
    Notice("an MCP server stopped", title="MCP", severity="warning"),
    ToolCallStarted(CALL, "Edit a.py", "edit", locations=("/w/a.py",)),
    ToolCallStarted(ToolCall("c2", "run_command", {"command": "ls"}), "ls", "execute", cancellable=True),
    ToolCallUpdated("c1", status="in_progress"),
    ToolCallUpdated("c1", locations=("/w/b.py",), meta={"x": 1}),
    ToolCallUpdated("c1", content=(TextOutput("so far"),)),
    ToolContentAppended("c1", DiffOutput("/w/a.py", None, "x\n")),
    ToolContentAppended("c1", TextOutput("more")),
    ToolCallUpdated("c2", content=(TerminalOutput("term_1"),)),
    ToolCallFinished("c1", ok=True, output="done", raw_output={"exit": 0}, content=(DiffOutput("/w/a.py", "", "y"),)),
    ToolCallFinished("c2", ok=False, output="exit 1"),
    Compaction("k1", "in_progress"),
    Compaction("k1", "completed", summary="short", notice=Notice("The conversation was compacted.")),
    PlanUpdated((PlanEntry("x", "high", "pending"),)),
    UsageReported(1200, 200_000),
    ReplyStarted(1),
    TextDelta("after"),
]


@pytest.mark.parametrize(
    "client",
    [ClientTools(), ClientTools(terminals=True, notices=True, compaction=True)],
    ids=["plain client", "notices and compactions"],
)
async def test_a_v1_turn_keeps_for_each_event_the_record_its_sent_update_reads_as(client: ClientTools) -> None:
    run = _run(client)
    connection = _Connection()
    sink = TurnUpdates(connection, run)  # type: ignore[arg-type]
    for event in EVENTS:
        await sink.send(event)
    sink.send_now(ToolCallFinished("c3", ok=False, output="The tool call was cancelled."))  # the close's way
    read = [entry_of(update) for update in connection.updates]
    assert run.turn_log.entries == [entry for entry in read if entry is not None]
    assert run.turn_log.rows == 4 + (0 if client.notices else 2)  # every text chunk, and each notice shown as text
    # Each record replays as the update that was sent.
    kept = [update for update, entry in zip(connection.updates, read, strict=True) if entry is not None]
    assert [render(entry) for entry in run.turn_log.entries] == kept


def _ids_apart(entries: list[TurnEntry]) -> list[TurnEntry]:
    """The records without their message ids (random, one per reply and sink)."""
    return [replace(e, message_id="msg") if isinstance(e, AgentText | AgentThought) else e for e in entries]


async def test_a_v2_turn_keeps_v1s_records_with_its_display_terminals_apart() -> None:
    shows_all = ClientTools(terminals=True, notices=True, compaction=True)  # what every v2 client is shown
    v1_run, v2_run = _run(shows_all), _run(shows_all)
    v1, v2 = TurnUpdates(_Connection(), v1_run), V2TurnUpdates(_Connection(), v2_run)  # type: ignore[arg-type]
    for event in EVENTS:
        await v1.send(event)
        await v2.send(event)
    on_v1, on_v2 = _ids_apart(v1_run.turn_log.entries), _ids_apart(v2_run.turn_log.entries)
    # The terminal's anchor: a record of its own in place of the change that named it (nothing else changed).
    anchor = on_v1.index(ToolCallChanged("c2", content=(TerminalOutput("term_1"),)))
    assert on_v2[anchor] == ToolCallTerminal("c2", "term_1")
    assert on_v2[:anchor] + on_v2[anchor + 1 :] == on_v1[:anchor] + on_v1[anchor + 1 :]


async def test_a_v2_call_keeps_its_text_in_place_of_the_terminal_it_showed() -> None:
    run = _run(ClientTools(notices=True, compaction=True))
    sink = V2TurnUpdates(_Connection(), run)  # type: ignore[arg-type]
    terminal = (TerminalOutput("term_1"),)
    await sink.send(ToolCallUpdated("c1", status="in_progress", content=terminal))
    await sink.send(ToolContentAppended("c1", TextOutput("more")))
    await sink.send(ToolCallFinished("c1", ok=True, output="exit 0", content=terminal))
    text = {"type": "content", "content": {"type": "text", "text": "more"}}
    assert run.turn_log.entries == [
        ToolCallTerminal("c1", "term_1"),
        ToolCallChanged("c1", "in_progress"),
        ToolCallChanged("c1", content=(TextOutput("more"),)),
        ToolCallTerminal("c1", "term_1"),  # right before the change v2 showed with its terminal
        ToolCallChanged("c1", "completed", (TextOutput("exit 0"),)),
    ]
    # An item appended after a display terminal is kept without the terminal.
    assert render(run.turn_log.entries[2]) == {
        "sessionUpdate": "tool_call_update",
        "toolCallId": "c1",
        "content": [text],
    }


async def test_a_subagents_display_terminal_is_kept_as_text_only() -> None:
    """A child's terminal is shown in its parent's session, which this log is not (protocol/v2/terminals.py)."""
    run = _run(ClientTools(notices=True, compaction=True), parent="parent")
    sink = V2TurnUpdates(_Connection(), run)  # type: ignore[arg-type]
    await sink.send(ToolCallUpdated("c1", content=(TerminalOutput("term_1"),)))
    await sink.send(ToolCallFinished("c1", ok=True, output="exit 0", content=(TerminalOutput("term_1"),)))
    assert run.turn_log.entries == [ToolCallChanged("c1", "completed", (TextOutput("exit 0"),))]
