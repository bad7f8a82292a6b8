"""A stored session as ACP v1 `session/update`s, for `session/load` (`replay_updates`): the store's records
(store/turn_records.py, with the closing of turns that did not complete, store/restore.py) rendered the way v1 showed
them live (protocol/v1/updates.py), so the client sees the conversation it saw. v1's replay, a sibling of v2's
(protocol/v2/replay.py): both render the same records, whichever version stored them. Loaded with the store, never at
start-up.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from acp_server.protocol.schema import notice_update
from acp_server.protocol.update_shapes import plan_entries, text_chunk, tool_call_update, usage_update
from acp_server.protocol.v1.updates import tool_content
from acp_server.store.restore import ReplayEntry, TurnClosed, replay_entries
from acp_server.store.turn_records import (
    AgentText,
    AgentThought,
    ContextUsage,
    PlanSet,
    TerminalEnded,
    ToolCallChanged,
    ToolCallOpened,
    ToolCallTerminal,
    UserChunk,
)

if TYPE_CHECKING:
    from acp_server.store import LoadedSession

__all__ = ["render", "replay_updates"]


def _text(entry: AgentText | AgentThought) -> dict[str, Any]:
    kind = "agent_thought_chunk" if type(entry) is AgentThought else "agent_message_chunk"
    update = text_chunk(kind, entry.text, entry.message_id)
    if entry.meta is not None:
        update["_meta"] = entry.meta
    return update


def _user(entry: UserChunk) -> dict[str, Any]:
    return {"sessionUpdate": "user_message_chunk", "content": entry.content, "messageId": entry.message_id}


def _opened(entry: ToolCallOpened) -> dict[str, Any]:
    update: dict[str, Any] = {"sessionUpdate": "tool_call", "toolCallId": entry.call_id}
    for key, value in (("title", entry.title), ("kind", entry.kind), ("status", entry.status)):
        if value is not None:
            update[key] = value
    if entry.raw_input is not None:
        update["rawInput"] = entry.raw_input
    if entry.locations is not None:
        update["locations"] = [{"path": path} for path in entry.locations]
    return update


def _changed(entry: ToolCallChanged) -> dict[str, Any]:
    return tool_call_update(
        entry.call_id,
        entry.status,
        entry.content,
        entry.locations,
        tool_content,
        raw_output=entry.raw_output,
        meta=entry.meta,
    )


def _plan_shown(entry: PlanSet) -> dict[str, Any]:
    return {"sessionUpdate": "plan", "entries": plan_entries(entry.entries)}


def _usage_shown(entry: ContextUsage) -> dict[str, Any]:
    return usage_update(entry.used, entry.size)


def _closed(entry: TurnClosed) -> dict[str, Any]:
    return {
        "sessionUpdate": "agent_message_chunk",
        "content": {"type": "text", "text": entry.note},
        "messageId": f"msg_{entry.turn_id}_end",
        "_meta": {"acpServer": {"turnStatus": entry.status}},
    }


# By the record's exact type: one lookup per record replayed (a long session replays tens of thousands).
_RENDERERS: Mapping[type, Callable[[Any], dict[str, Any]]] = {
    AgentText: _text,
    AgentThought: _text,
    UserChunk: _user,
    ToolCallOpened: _opened,
    ToolCallChanged: _changed,
    PlanSet: _plan_shown,
    ContextUsage: _usage_shown,
    TurnClosed: _closed,
}


_CLOSED_TITLES = {
    "cancelled": "This turn was cancelled",
    "interrupted": "This turn was interrupted",
    "failed": "This turn failed",
}


def _closed_notice(entry: TurnClosed) -> dict[str, Any]:
    """The closing of a turn that did not complete, for a client that shows notices (`session.notices`)."""
    title = _CLOSED_TITLES.get(entry.status, f"This turn ended: {entry.status}")
    return notice_update(title, None, "warning", {"acpServer": {"turnStatus": entry.status}})


def render(entry: ReplayEntry, *, notices: bool = False) -> dict[str, Any]:
    """A record as the v1 update that showed it (a `TurnClosed` as the closing note the turn ends with: a `notice`
    where the client shows notices, else the text marker)."""
    if notices and type(entry) is TurnClosed:
        return _closed_notice(entry)
    return _RENDERERS[type(entry)](entry)


# Records v1 never shows: v2's display terminals (the tool call's own records show the command's text output).
_V2_ONLY = frozenset({ToolCallTerminal, TerminalEnded})


def replay_updates(loaded: LoadedSession, *, coalesce: bool = False, notices: bool = False) -> list[dict[str, Any]]:
    """The `update` objects to send, in order, before answering `session/load` (docs/interrupts.md decision 6).

    Every stored record as the client first saw it; a cancelled, interrupted or failed turn closes with a `failed`
    tool_call_update for each tool call it left open and an `agent_message_chunk` `[cancelled]` / `[interrupted]` /
    `[failed]` whose `_meta` is `{"acpServer": {"turnStatus": ...}}` (a turn still running elsewhere is not closed);
    with `notices` (the client advertised `session.notices`) that marker is a `warning` `notice` with the same `_meta`.
    With `coalesce`, consecutive text chunks of one message are merged into one chunk: the client shows the same
    text, from far fewer notifications.
    """
    updates = [render(entry, notices=notices) for entry in replay_entries(loaded) if type(entry) not in _V2_ONLY]
    return _coalesced(updates) if coalesce else updates


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
