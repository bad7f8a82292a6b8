"""What a loaded session looks like again: the updates to replay to the client, and the model history to continue.

History keeps what happened (INTERRUPTS.md §6 decision 6): `replay_updates` closes a cancelled or interrupted turn
with an `[cancelled]` / `[interrupted]` agent message chunk, and the model history of an interrupted turn is rebuilt
from what was streamed, ending with the same note. Pure functions of the records: no SQL, no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from acp_server.runtime.model import Message
from acp_server.store.records import LoadedSession, TurnRecord, decode_messages

__all__ = ["rebuild_history", "replay_updates"]

_CLOSING_NOTES: Mapping[str, str] = {"cancelled": "[cancelled]", "interrupted": "[interrupted]", "failed": "[failed]"}


# --- replay (INTERRUPTS.md §6 decision 6) ---


def replay_updates(loaded: LoadedSession, *, coalesce: bool = False) -> list[dict[str, Any]]:
    """The `update` objects to send, in order, before answering `session/load`.

    Every stored update as the client first saw it. A finished turn whose tool calls never reached a final status
    (the process died) gets a `failed` tool_call_update for each, and a cancelled, interrupted or failed turn ends
    with an `agent_message_chunk` `[cancelled]` / `[interrupted]` / `[failed]` whose `_meta` is
    `{"acpServer": {"turnStatus": ...}}`. A turn still running in another live process is replayed as far as it
    has been committed, without a closing chunk. `notice` updates are live-only (ACP) and never replayed.
    With `coalesce`, consecutive text chunks of one message are merged into one chunk: the client shows the same
    text, from far fewer notifications.
    """
    out: list[dict[str, Any]] = []
    for turn in loaded.turns:
        updates = [u for u in turn.updates if u.get("sessionUpdate") != "notice"]
        out += _coalesced(updates) if coalesce else updates
        if turn.status == "running":
            continue
        for call_id in _open_tool_calls(turn.updates):
            out.append(
                {
                    "sessionUpdate": "tool_call_update",
                    "toolCallId": call_id,
                    "status": "failed",
                    "content": [{"type": "content", "content": {"type": "text", "text": _ended_call_text(turn)}}],
                }
            )
        note = _CLOSING_NOTES.get(turn.status)
        if note is not None:
            out.append(
                {
                    "sessionUpdate": "agent_message_chunk",
                    "content": {"type": "text", "text": note},
                    "messageId": f"msg_{turn.turn_id}_end",
                    "_meta": {"acpServer": {"turnStatus": turn.status}},
                }
            )
    return out


def _ended_call_text(turn: TurnRecord) -> str:
    return "The tool call was interrupted." if turn.status == "interrupted" else f"The tool call was {turn.status}."


def _open_tool_calls(updates: Sequence[Mapping[str, Any]]) -> list[str]:
    status: dict[str, str] = {}
    for update in updates:
        kind = update.get("sessionUpdate")
        if kind == "tool_call":
            status[str(update.get("toolCallId"))] = str(update.get("status", "pending"))
        elif kind == "tool_call_update" and "status" in update:
            status[str(update.get("toolCallId"))] = str(update["status"])
    return [call_id for call_id, s in status.items() if s not in ("completed", "failed")]


_CHUNK_KINDS = frozenset({"agent_message_chunk", "agent_thought_chunk", "user_message_chunk"})


def _coalesced(updates: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    run: list[str] = []  # the texts of the chunk run that out[-1] starts
    key: tuple[Any, ...] | None = None
    for update in updates:
        text = _text_of(update) if update.get("sessionUpdate") in _CHUNK_KINDS else None
        this = None if text is None else (update.get("sessionUpdate"), update.get("messageId"), update.get("_meta"))
        if this is not None and this == key and update.keys() == out[-1].keys():
            run.append(text or "")
            continue
        if len(run) > 1:
            out[-1] = {**out[-1], "content": {"type": "text", "text": "".join(run)}}
        out.append(update)
        run = [text or ""]
        key = this
    if len(run) > 1:
        out[-1] = {**out[-1], "content": {"type": "text", "text": "".join(run)}}
    return out


def _text_of(update: Mapping[str, Any]) -> str | None:
    """The text of a chunk whose content is exactly a text block (no annotations, no _meta), else None."""
    content = update.get("content")
    if isinstance(content, dict) and len(content) == 2 and content.get("type") == "text":
        text = content.get("text")
        return text if isinstance(text, str) else None
    return None


def _interrupted_messages(turn: TurnRecord) -> list[Message]:
    """What the model is told about a turn the process died in: the prompt, what was streamed, and a note."""
    parts: list[str] = []
    message_id: object = None
    titles: dict[str, str] = {}
    status: dict[str, str] = {}
    for update in turn.updates:
        kind = update.get("sessionUpdate")
        if kind == "agent_message_chunk":
            text = _text_of(update)
            if text is None:
                continue
            if message_id != update.get("messageId") or not parts:
                parts.append("")
                message_id = update.get("messageId")
            parts[-1] += text
        elif kind in ("tool_call", "tool_call_update"):
            call_id = str(update.get("toolCallId"))
            if "title" in update:
                titles[call_id] = str(update["title"])
            if "status" in update or kind == "tool_call":
                status[call_id] = str(update.get("status", "pending"))
            if kind == "tool_call":
                parts.append("")  # the reply after a tool call is a new paragraph
                message_id = None
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
