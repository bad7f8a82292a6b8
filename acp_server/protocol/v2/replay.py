"""A stored session's history as v2 `session/update`s, for `session/resume` with `replayFrom: {"type": "start"}`
(ACP-V2.md §5.3, §23 Q11): one whole-message upsert per message with its stored `messageId` (the user message keeps
the id its prompt response returned, ACP-RESUME-204), tool calls as `tool_call_update`s, plans as `plan_update`s, a
command's display terminal as the tool call naming it and one `terminal_update` with its command, cwd, `output`
snapshot and `exitStatus` (never its chunks again; §23 Q8). No historical `state_update` is replayed. Built on the v1
rendering of the same records (protocol/replay.py), so a session stored by either version replays on either. Loaded
with the store, never at start-up.
"""

from __future__ import annotations

import base64
from typing import TYPE_CHECKING, Any

from acp_server.protocol.replay import replay_updates
from acp_server.protocol.v2.updates import plan_id, to_v2
from acp_server.store.turn_records import TerminalEnded, ToolCallTerminal

if TYPE_CHECKING:
    from acp_server.store import LoadedSession
    from acp_server.store.replay import ReplayEntry

__all__ = ["replay_updates_v2"]

_WHOLE = {
    "user_message_chunk": "user_message",
    "agent_message_chunk": "agent_message",
    "agent_thought_chunk": "agent_thought",
}


def replay_updates_v2(loaded: LoadedSession) -> list[dict[str, Any]]:
    session_id = loaded.session.session_id
    out: list[dict[str, Any]] = []
    anchors: set[int] = set()  # the updates `ToolCallTerminal`s are rendered as (alive in the list, so ids hold)

    def v2_only(entry: ReplayEntry) -> dict[str, Any]:
        update = _terminal(entry)
        if isinstance(entry, ToolCallTerminal):
            anchors.add(id(update))
        return update

    # A terminal of a turn still running (resumed on its own connection, §23 Q12) has not ended: never say it has.
    running = {
        entry.terminal_id
        for turn in loaded.turns
        if turn.status == "running"
        for entry in turn.entries
        if isinstance(entry, ToolCallTerminal)
    }
    for update in _with_terminals(replay_updates(loaded, coalesce=True, v2_only=v2_only), anchors, running):
        kind = update["sessionUpdate"]
        whole = _WHOLE.get(kind)
        if whole is not None:
            last = out[-1] if out else None
            if (
                last is not None
                and last["sessionUpdate"] == whole
                and last["messageId"] == update["messageId"]
                and last.get("_meta") == update.get("_meta")
            ):
                last["content"].append(update["content"])
                continue
            message: dict[str, Any] = {
                "sessionUpdate": whole,
                "messageId": update["messageId"],
                "content": [update["content"]],
            }
            if update.get("_meta") is not None:
                message["_meta"] = update["_meta"]
            out.append(message)
        elif kind == "plan":
            plan = {"type": "items", "planId": plan_id(session_id), "entries": update["entries"]}
            out.append({"sessionUpdate": "plan_update", "plan": plan})
        else:
            out.append(to_v2(update, None, None))
    return _joined_texts(out)


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


def _terminal(entry: ReplayEntry) -> dict[str, Any]:
    """A display terminal's record as v2 showed it: the tool call naming it, or the terminal's one upsert."""
    if isinstance(entry, ToolCallTerminal):
        content = [{"type": "terminal", "terminalId": entry.terminal_id}]
        return {
            "sessionUpdate": "tool_call_update",
            "toolCallId": entry.call_id,
            "content": content,
        }
    assert isinstance(entry, TerminalEnded)
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


def _joined_texts(updates: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Consecutive plain text blocks of one agent message or thought are one block (how the model wrote them)."""
    for update in updates:
        if update["sessionUpdate"] in ("agent_message", "agent_thought"):
            blocks = update["content"]
            if len(blocks) > 1 and all(b.keys() == {"type", "text"} and b["type"] == "text" for b in blocks):
                update["content"] = [{"type": "text", "text": "".join(b["text"] for b in blocks)}]
    return updates
