"""Restoring a stored session: the records to replay to the client, and the model history to continue.

History keeps what happened (docs/interrupts.md decision 6): `replay_entries` closes a cancelled, interrupted or
failed turn (a `TurnClosed` after it, and a failed change for each tool call it left open), and the model history
of an interrupted turn is rebuilt from what was streamed, ending with the same note. Pure functions of the records:
no SQL, no I/O, no wire shapes (the protocol edge renders the result).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from acp_server.runtime.model import Message, TextOutput
from acp_server.store.records import LoadedSession, TurnRecord, TurnStatus, decode_messages
from acp_server.store.turn_records import AgentText, ToolCallChanged, ToolCallOpened, TurnEntry

__all__ = ["ReplayEntry", "TurnClosed", "rebuild_history", "replay_entries"]

_CLOSING_NOTES: Mapping[str, str] = {"cancelled": "[cancelled]", "interrupted": "[interrupted]", "failed": "[failed]"}


@dataclass(frozen=True, slots=True)
class TurnClosed:
    """The end of a turn that did not complete, shown as a closing note (`note`) on replay; never stored."""

    turn_id: str
    status: TurnStatus

    @property
    def note(self) -> str:
        return _CLOSING_NOTES[self.status]


ReplayEntry = TurnEntry | TurnClosed


# --- replay (docs/interrupts.md decision 6) ---


def replay_entries(loaded: LoadedSession) -> list[ReplayEntry]:
    """What to show, in order, before answering `session/load`.

    Every stored record as the client first saw it. A finished turn whose tool calls never reached a final status
    (the process died) gets a `failed` change for each, and a cancelled, interrupted or failed turn ends with a
    `TurnClosed`. A turn still running in another live process is replayed as far as it has been committed,
    without a close.
    """
    out: list[ReplayEntry] = []
    for turn in loaded.turns:
        out += turn.entries
        if turn.status == "running":
            continue
        ended = (TextOutput(_ended_call_text(turn)),)
        out += [ToolCallChanged(call_id, "failed", ended) for call_id in _open_tool_calls(turn.entries)]
        if turn.status in _CLOSING_NOTES:
            out.append(TurnClosed(turn.turn_id, turn.status))
    return out


def _ended_call_text(turn: TurnRecord) -> str:
    return "The tool call was interrupted." if turn.status == "interrupted" else f"The tool call was {turn.status}."


def _open_tool_calls(entries: Sequence[TurnEntry]) -> list[str]:
    status: dict[str, str] = {}
    for entry in entries:
        if isinstance(entry, ToolCallOpened):
            status[entry.call_id] = entry.status or "pending"
        elif isinstance(entry, ToolCallChanged) and entry.status is not None:
            status[entry.call_id] = entry.status
    return [call_id for call_id, s in status.items() if s not in ("completed", "failed")]


def _interrupted_messages(turn: TurnRecord) -> list[Message]:
    """What the model is told about a turn the process died in: the prompt, what was streamed, and a note."""
    parts: list[str] = []
    message_id: object = None
    titles: dict[str, str] = {}
    status: dict[str, str] = {}
    for entry in turn.entries:
        if isinstance(entry, AgentText):
            if message_id != entry.message_id or not parts:
                parts.append("")
                message_id = entry.message_id
            parts[-1] += entry.text
        elif isinstance(entry, ToolCallOpened):
            if entry.title is not None:
                titles[entry.call_id] = entry.title
            status[entry.call_id] = entry.status or "pending"
            parts.append("")  # the reply after a tool call is a new paragraph
            message_id = None
        elif isinstance(entry, ToolCallChanged) and entry.status is not None:
            status[entry.call_id] = entry.status
    lines = [p for p in parts if p]
    lines += [f'[tool call "{titles.get(c, c)}": {s}]' for c, s in status.items()]
    lines.append(_CLOSING_NOTES["interrupted"])
    return [Message("user", turn.prompt_text), Message("assistant", "\n\n".join(lines))]


def rebuild_history(turns: Sequence[TurnRecord], rows: Sequence[Sequence[Any]]) -> list[Message]:
    """The model history: from the last turn that replaced it, each turn's messages in order."""
    start = 0
    for index in range(len(rows) - 1, -1, -1):
        if rows[index][8] and rows[index][7] is not None:
            start = index
            break
    history: list[Message] = []
    for turn, row in zip(turns[start:], rows[start:], strict=True):
        messages = row[7]
        if messages is not None:
            decoded = decode_messages(messages)
            if row[8]:
                history = decoded
            else:
                history.extend(decoded)
        elif turn.status == "interrupted":
            history.extend(_interrupted_messages(turn))
        # else: still running in another live process; not part of the history yet
    return history
