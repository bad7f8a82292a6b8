"""The store's turn records and ACP v1 `session/update`s, both ways: what the turn log keeps of each update sent,
and the updates a `session/load` replays.

The store keeps records of its own (store/turn_records.py), never wire messages, so a session stored on one protocol
version can be replayed on another: this module is the v1 side. `entry_of` reads an update as a record (for
protocol/store_log.py, which records each update as sent, and for the upgrade of a store written before the records,
schema 1, which holds updates), and `replay_updates` renders a loaded session back into the same updates, with the
closing of turns that did not complete (store/replay.py decides which). Loaded with the store, never at start-up.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from acp_server.protocol.editor import tool_call_update
from acp_server.protocol.schema import notice_update
from acp_server.runtime.model import DiffOutput, PlanEntry, TerminalOutput, TextOutput, ToolContent
from acp_server.store.replay import ReplayEntry, TurnClosed, replay_entries
from acp_server.store.turn_records import (
    AgentText,
    AgentThought,
    ContextUsage,
    PlanSet,
    TerminalEnded,
    ToolCallChanged,
    ToolCallOpened,
    ToolCallTerminal,
    TurnEntry,
    UserChunk,
)

if TYPE_CHECKING:
    from acp_server.store import LoadedSession

__all__ = ["entry_of", "render", "replay_updates"]

log = logging.getLogger(__name__)

_CHUNK_KEYS = frozenset({"sessionUpdate", "content", "messageId", "_meta"})


# --- reading what was sent ---


def entry_of(update: Mapping[str, Any]) -> TurnEntry | None:
    """The record of a v1 update; None for one the store does not keep (a live-only `notice`) or cannot read."""
    read = _READERS.get(update.get("sessionUpdate"))
    if read is None:
        return None
    try:
        return read(update)
    except (KeyError, TypeError, ValueError):
        return None


def _only(update: Mapping[str, Any], keys: frozenset[str]) -> None:
    """Refuse an update with a field the record would not keep: it must replay exactly as it was sent."""
    if not update.keys() <= keys:
        raise ValueError(f"unexpected fields {sorted(update.keys() - keys)}")


def _string(value: Any) -> str:
    if not isinstance(value, str):
        raise TypeError("not a string")
    return value


def _meta(value: Any) -> dict[str, Any] | None:
    if value is not None and not isinstance(value, dict):
        raise TypeError("_meta is an object")
    return value


def _text_chunk(update: Mapping[str, Any]) -> TurnEntry:
    _only(update, _CHUNK_KEYS)
    content = update["content"]
    if not (isinstance(content, dict) and content.keys() == {"type", "text"} and content["type"] == "text"):
        raise ValueError("not a text block")
    record = AgentThought if update["sessionUpdate"] == "agent_thought_chunk" else AgentText
    return record(_string(update["messageId"]), _string(content["text"]), _meta(update.get("_meta")))


def _user_chunk(update: Mapping[str, Any]) -> TurnEntry:
    _only(update, frozenset({"sessionUpdate", "content", "messageId"}))
    content = update["content"]
    if not isinstance(content, dict):
        raise TypeError("content is a block")
    return UserChunk(_string(update["messageId"]), content)


def _locations(update: Mapping[str, Any]) -> tuple[str, ...] | None:
    if "locations" not in update:
        return None
    places = update["locations"]
    if not all(isinstance(p, dict) and p.keys() == {"path"} for p in places):
        raise ValueError("a location other than a path")
    return tuple(_string(p["path"]) for p in places)


_TOOL_CALL_KEYS = frozenset({"sessionUpdate", "toolCallId", "title", "kind", "status", "rawInput", "locations"})


def _tool_call(update: Mapping[str, Any]) -> TurnEntry:
    _only(update, _TOOL_CALL_KEYS)
    if update.get("rawInput", ...) is None:
        raise ValueError("a null rawInput")  # None means "not shown" in the record
    return ToolCallOpened(
        _string(update["toolCallId"]),
        update.get("title"),
        update.get("kind"),
        update.get("status"),
        update.get("rawInput"),
        _locations(update),
    )


def _tool_content(item: Any) -> ToolContent:
    kind = item["type"]
    if kind == "content" and item.keys() == {"type", "content"}:
        block = item["content"]
        if isinstance(block, dict) and block.keys() == {"type", "text"} and block["type"] == "text":
            return TextOutput(_string(block["text"]))
    elif kind == "diff" and item.keys() == {"type", "path", "oldText", "newText"}:
        return DiffOutput(_string(item["path"]), item["oldText"], _string(item["newText"]))
    elif kind == "terminal" and item.keys() == {"type", "terminalId"}:
        return TerminalOutput(_string(item["terminalId"]))
    raise ValueError("tool content the store does not keep")


_TOOL_UPDATE_KEYS = frozenset({"sessionUpdate", "toolCallId", "status", "content", "locations", "rawOutput", "_meta"})


def _tool_call_update(update: Mapping[str, Any]) -> TurnEntry:
    _only(update, _TOOL_UPDATE_KEYS)
    if update.get("rawOutput", ...) is None:
        raise ValueError("a null rawOutput")
    content = update.get("content")
    return ToolCallChanged(
        _string(update["toolCallId"]),
        update.get("status"),
        None if content is None else tuple(_tool_content(c) for c in content),
        _locations(update),
        update.get("rawOutput"),
        _meta(update.get("_meta")),
    )


def _plan(update: Mapping[str, Any]) -> TurnEntry:
    _only(update, frozenset({"sessionUpdate", "entries"}))
    entries = update["entries"]
    if not all(isinstance(e, dict) and e.keys() == {"content", "priority", "status"} for e in entries):
        raise ValueError("a plan entry the store does not keep")
    return PlanSet(tuple(PlanEntry(e["content"], e["priority"], e["status"]) for e in entries))


def _usage(update: Mapping[str, Any]) -> TurnEntry:
    _only(update, frozenset({"sessionUpdate", "used", "size"}))
    return ContextUsage(update["used"], update["size"])


_READERS: Mapping[Any, Callable[[Mapping[str, Any]], TurnEntry]] = {
    "user_message_chunk": _user_chunk,
    "agent_message_chunk": _text_chunk,
    "agent_thought_chunk": _text_chunk,
    "tool_call": _tool_call,
    "tool_call_update": _tool_call_update,
    "plan": _plan,
    "usage_update": _usage,
}


# --- replaying ---


def _text(entry: AgentText | AgentThought) -> dict[str, Any]:
    kind = "agent_thought_chunk" if type(entry) is AgentThought else "agent_message_chunk"
    update: dict[str, Any] = {
        "sessionUpdate": kind,
        "content": {"type": "text", "text": entry.text},
        "messageId": entry.message_id,
    }
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
        entry.call_id, entry.status, entry.content, entry.locations, raw_output=entry.raw_output, meta=entry.meta
    )


def _plan_shown(entry: PlanSet) -> dict[str, Any]:
    entries = [{"content": e.content, "priority": e.priority, "status": e.status} for e in entry.entries]
    return {"sessionUpdate": "plan", "entries": entries}


def _usage_shown(entry: ContextUsage) -> dict[str, Any]:
    return {"sessionUpdate": "usage_update", "used": entry.used, "size": entry.size}


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


# Records only v2 shows (its agent-owned display terminals); `replay_updates` leaves them out unless told how.
_V2_ONLY = frozenset({ToolCallTerminal, TerminalEnded})


def replay_updates(
    loaded: LoadedSession,
    *,
    coalesce: bool = False,
    notices: bool = False,
    v2_only: Callable[[ReplayEntry], dict[str, Any]] | None = None,
) -> list[dict[str, Any]]:
    """The `update` objects to send, in order, before answering `session/load` (docs/interrupts.md decision 6).

    Every stored update as the client first saw it; a cancelled, interrupted or failed turn closes with a `failed`
    tool_call_update for each tool call it left open and an `agent_message_chunk` `[cancelled]` / `[interrupted]` /
    `[failed]` whose `_meta` is `{"acpServer": {"turnStatus": ...}}` (a turn still running elsewhere is not closed);
    with `notices` (the client advertised `session.notices`) that marker is a `warning` `notice` with the same `_meta`.
    With `coalesce`, consecutive text chunks of one message are merged into one chunk: the client shows the same
    text, from far fewer notifications. `v2_only` renders the records v1 never shows (v2's display terminals, for
    protocol/v2/replay.py), in their place; without it they are left out.
    """
    if v2_only is None:
        # v1 never had v2's display terminals: the tool call's own records show the command's text output.
        updates = [render(entry, notices=notices) for entry in replay_entries(loaded) if type(entry) not in _V2_ONLY]
    else:
        updates = [
            v2_only(entry) if type(entry) in _V2_ONLY else render(entry, notices=notices)
            for entry in replay_entries(loaded)
        ]
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
