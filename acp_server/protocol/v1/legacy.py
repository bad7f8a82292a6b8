"""A store of schema 1 read back: the ACP v1 `session/update`s it kept, as the store's records (`entry_of`).

Before the store kept records of its own (store/turn_records.py), it kept each turn's v1 updates as they were sent;
store/migration.py rewrites such a store's rows on open, and a process of that old version that still had the store
open may append such rows afterwards (store/worker.py reads them when a session is loaded). Both read them here: v1's
wire shape is v1's to know. Live turns never come this way: their records are built from the events
(protocol/store_log.py). Loaded with the store, never at start-up.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from acp_server.runtime.model import DiffOutput, PlanEntry, TerminalOutput, TextOutput, ToolContent
from acp_server.store.turn_records import (
    AgentText,
    AgentThought,
    ContextUsage,
    PlanSet,
    ToolCallChanged,
    ToolCallOpened,
    TurnEntry,
    UserChunk,
)

__all__ = ["entry_of"]

_CHUNK_KEYS = frozenset({"sessionUpdate", "content", "messageId", "_meta"})


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
