"""A stored session's history as v2 `session/update`s, for `session/resume` with `replayFrom: {"type": "start"}`
(ACP-V2.md §5.3, §23 Q11): one whole-message upsert per message with its stored `messageId` (the user message keeps
the id its prompt response returned, ACP-RESUME-204), tool calls as `tool_call_update`s, plans as `plan_update`s, a
command's display terminal as the tool call naming it and one `terminal_update` with its command, cwd, `output`
snapshot and `exitStatus` (never its chunks again; §23 Q8). No historical `state_update` is replayed. v2's replay, a
sibling of v1's (protocol/v1/replay.py): both render the store's records (store/turn_records.py) directly, so a
session stored by either version replays on either. Loaded with the store, never at start-up.
"""

from __future__ import annotations

import base64
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from acp_server.protocol.update_shapes import tool_call_update, usage_update
from acp_server.protocol.v2.updates import plan_update, tool_content_v2
from acp_server.store.restore import TurnClosed, replay_entries
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
    from acp_server.store.restore import ReplayEntry

__all__ = ["replay_updates_v2"]

# The records that are pieces of a whole message, by the message's kind.
_WHOLE: Mapping[type, str] = {
    UserChunk: "user_message",
    AgentText: "agent_message",
    AgentThought: "agent_thought",
    TurnClosed: "agent_message",
}


def replay_updates_v2(loaded: LoadedSession) -> list[dict[str, Any]]:
    session_id = loaded.session.session_id
    anchors: set[int] = set()  # the updates `ToolCallTerminal`s are rendered as (alive in the list, so ids hold)
    # A terminal of a turn still running (resumed on its own connection, §23 Q12) has not ended: never say it has.
    running = {
        entry.terminal_id
        for turn in loaded.turns
        if turn.status == "running"
        for entry in turn.entries
        if isinstance(entry, ToolCallTerminal)
    }
    shown: list[dict[str, Any]] = []
    for entry in replay_entries(loaded):
        whole = _WHOLE.get(type(entry))
        if whole is not None:
            # The pieces of one message (consecutive, with one id and one `_meta`) are one whole-message upsert.
            message_id, block, meta = _piece(entry)
            last = shown[-1] if shown else None
            if (
                last is not None
                and last["sessionUpdate"] == whole
                and last["messageId"] == message_id
                and last.get("_meta") == meta
            ):
                last["content"].append(block)
                continue
            message: dict[str, Any] = {"sessionUpdate": whole, "messageId": message_id, "content": [block]}
            if meta is not None:
                message["_meta"] = meta
            shown.append(message)
            continue
        update = _RENDERERS[type(entry)](entry, session_id)
        if type(entry) is ToolCallTerminal:
            anchors.add(id(update))
        shown.append(update)
    return _joined_texts(_with_terminals(shown, anchors, running))


def _piece(entry: ReplayEntry) -> tuple[str, dict[str, Any], dict[str, Any] | None]:
    """A piece of a message: its id, its block, its `_meta`."""
    if isinstance(entry, UserChunk):
        return entry.message_id, entry.content, None
    if isinstance(entry, TurnClosed):
        # The closing note of a turn that did not complete (§23 Q11), the text v1 shows without notices.
        return (
            f"msg_{entry.turn_id}_end",
            {"type": "text", "text": entry.note},
            {"acpServer": {"turnStatus": entry.status}},
        )
    assert isinstance(entry, AgentText | AgentThought)
    return entry.message_id, {"type": "text", "text": entry.text}, entry.meta


def _opened(entry: ToolCallOpened, session_id: str) -> dict[str, Any]:
    update: dict[str, Any] = {"sessionUpdate": "tool_call_update", "toolCallId": entry.call_id}
    for key, value in (("title", entry.title), ("kind", entry.kind), ("status", entry.status)):
        if value is not None:
            update[key] = value
    if entry.raw_input is not None:
        update["rawInput"] = entry.raw_input
    if entry.locations is not None:
        update["locations"] = [{"path": path} for path in entry.locations]
    return update


def _changed(entry: ToolCallChanged, session_id: str) -> dict[str, Any]:
    return tool_call_update(
        entry.call_id,
        entry.status,
        entry.content,
        entry.locations,
        tool_content_v2,
        raw_output=entry.raw_output,
        meta=entry.meta,
    )


def _plan(entry: PlanSet, session_id: str) -> dict[str, Any]:
    return plan_update(session_id, entry.entries)


def _usage(entry: ContextUsage, session_id: str) -> dict[str, Any]:
    return usage_update(entry.used, entry.size)


def _anchor(entry: ToolCallTerminal, session_id: str) -> dict[str, Any]:
    """The tool call naming its display terminal."""
    content = [{"type": "terminal", "terminalId": entry.terminal_id}]
    return {"sessionUpdate": "tool_call_update", "toolCallId": entry.call_id, "content": content}


def _ended(entry: TerminalEnded, session_id: str) -> dict[str, Any]:
    """A display terminal's one upsert: what it ran, where, the output it ended with, how it exited."""
    status: dict[str, Any] = {}
    if entry.exit_code is not None:
        status["exitCode"] = entry.exit_code
    if entry.signal is not None:
        status["signal"] = entry.signal
    return {
        "sessionUpdate": "terminal_update",
        "terminalId": entry.terminal_id,
        "command": entry.command,
        "cwd": entry.cwd,
        "output": {"data": base64.b64encode(entry.output).decode("ascii")},
        "exitStatus": status,
    }


# By the record's exact type (the message pieces are gathered above).
_RENDERERS: Mapping[type, Callable[[Any, str], dict[str, Any]]] = {
    ToolCallOpened: _opened,
    ToolCallChanged: _changed,
    PlanSet: _plan,
    ContextUsage: _usage,
    ToolCallTerminal: _anchor,
    TerminalEnded: _ended,
}


def _with_terminals(updates: list[dict[str, Any]], anchors: set[int], running: set[str]) -> list[dict[str, Any]]:
    """A tool call naming its terminal right before a change of that call with content is that change's content:
    the call's changes keep v1's text of the command, and v2 showed the terminal in its place. Else it stays on its
    own (the anchor, before the command runs), followed, for a terminal whose end was never kept (the process died
    with the command running), by an `exitStatus` saying it exited, how unknown: none is left running on replay
    unless it runs (`running`: its turn is still going on, and its end will come live)."""
    ended = running | {u["terminalId"] for u in updates if u["sessionUpdate"] == "terminal_update"}
    out: list[dict[str, Any]] = []
    for update in updates:
        anchor = out[-1] if out else None
        if (
            anchor is not None
            and id(anchor) in anchors
            and update["sessionUpdate"] == "tool_call_update"
            and update["toolCallId"] == anchor["toolCallId"]
            and "content" in update
        ):
            out[-1] = {**update, "content": anchor["content"]}
            continue
        out.append(update)
        if id(update) in anchors:
            for item in update["content"]:
                if item["terminalId"] not in ended:
                    ended.add(item["terminalId"])
                    out.append({"sessionUpdate": "terminal_update", "terminalId": item["terminalId"], "exitStatus": {}})
    return out


def _joined_texts(updates: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Consecutive plain text blocks of one message are one block (how the model wrote them, or the user's text the
    client sent in pieces); any other block (an image, a resource) stays where it was."""
    for update in updates:
        if update["sessionUpdate"] in _MESSAGES and len(update["content"]) > 1:
            blocks: list[dict[str, Any]] = []
            for block in update["content"]:
                if blocks and _plain(block) and _plain(blocks[-1]):
                    blocks[-1] = {"type": "text", "text": blocks[-1]["text"] + block["text"]}
                else:
                    blocks.append(block)
            update["content"] = blocks
    return updates


_MESSAGES = frozenset({"user_message", "agent_message", "agent_thought"})


def _plain(block: Any) -> bool:
    """A text block and nothing else (no annotations, no `_meta`)."""
    return (
        isinstance(block, dict)
        and len(block) == 2
        and block.get("type") == "text"
        and isinstance(block.get("text"), str)
    )
