"""The core's events as ACP v2 `session/update`s (ACP-V2.md §8, §9, §13, §14, §21.2): the v2 `TurnSink` of one turn
and a session's own updates, plus the lifecycle's own (`state_update`, the `user_message` echo).

What changes from v1 (`protocol/updates.py`): a tool call is one upsert (`tool_call_update` creates it, with its
`name`), a call stopped by a cancel ends `cancelled`, a diff is `{changes, patch}`, a plan is a `plan_update` of one
`planId` per session, config options carry `configId`, commands `type: "command"`. Message chunks are the same on
both versions. The turn's store log keeps what v1 would have sent (`v1.render`), so the session replays on either
version from the same records; a display terminal is kept as records of its own, which only v2 replays.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from acp_server.agent.sessions.edge import CommandsAvailable, ConfigChanged, ModeChanged, SessionEvent, TitleChanged
from acp_server.agent.sessions.options import SlashCommand
from acp_server.agent.sessions.runs import RunContext
from acp_server.jsonrpc.connection import Connection
from acp_server.protocol.editor import tool_content
from acp_server.protocol.options import config_options
from acp_server.protocol.store_log import log_update
from acp_server.protocol.updates import TurnUpdates
from acp_server.runtime.model import (
    DiffOutput,
    StopReason,
    TerminalOutput,
    TextOutput,
    ToolCallFinished,
    ToolCallStarted,
    ToolCallUpdated,
    ToolContent,
    ToolContentAppended,
    TurnEvent,
)

__all__ = [
    "V2TurnUpdates",
    "available_commands_v2",
    "config_options_v2",
    "idle",
    "plan_id",
    "running",
    "session_update_v2",
    "to_v2",
    "user_message",
]


def running() -> dict[str, Any]:
    return {"sessionUpdate": "state_update", "state": "running"}


def requires_action() -> dict[str, Any]:
    return {"sessionUpdate": "state_update", "state": "requires_action"}


def idle(stop_reason: StopReason | str, error: dict[str, Any] | None = None) -> dict[str, Any]:
    """`idle` with its stop reason (the 2.4.0 schema wants one on every idle), and `error` for the `error` reason
    (§6.4)."""
    update: dict[str, Any] = {"sessionUpdate": "state_update", "state": "idle", "stopReason": str(stop_reason)}
    if error is not None:
        update["error"] = error
    return update


def user_message(message_id: str, content: list[dict[str, Any]]) -> dict[str, Any]:
    """The prompt's echo (whole message, the id its response returned)."""
    return {"sessionUpdate": "user_message", "messageId": message_id, "content": content}


def plan_id(session_id: str) -> str:
    return f"plan-{session_id}"


class V2TurnUpdates:
    """One turn's events as v2 `session/update`s, through the fence (the `TurnSink` of `sessions/edge.py`)."""

    __slots__ = ("_cancellable", "_connection", "_run", "_session_id", "_v1")

    def __init__(self, connection: Connection, run: RunContext) -> None:
        self._connection = connection
        self._run = run
        self._session_id = run.session_id
        self._v1 = TurnUpdates(connection, run)  # renders (never sends): its message ids are the v2 messages' too
        self._cancellable: set[str] = set()  # tool calls that advertise `capabilities.cancel` once in progress

    async def send(self, event: TurnEvent) -> None:
        v1 = self._v1.render(event)
        if v1 is None:
            return
        run = self._run
        message = {
            "jsonrpc": "2.0",
            "method": "session/update",
            "params": {"sessionId": self._session_id, "update": self._shown(v1, event)},
        }
        if await self._connection.send_fenced(message, run):
            _log(run, v1, event)

    def send_now(self, event: TurnEvent) -> None:
        v1 = self._v1.render(event)
        if v1 is None:
            return
        self._connection.notify("session/update", {"sessionId": self._session_id, "update": self._shown(v1, event)})
        _log(self._run, v1, event)

    def _shown(self, v1: dict[str, Any], event: TurnEvent) -> dict[str, Any]:
        update = to_v2(v1, event, self._run)
        if isinstance(event, ToolCallStarted):
            if event.cancellable:
                self._cancellable.add(event.call.id)
        elif isinstance(event, ToolCallUpdated):
            if event.status == "in_progress" and event.call_id in self._cancellable:
                update["capabilities"] = {"cancel": {}}  # `tool_call/cancel` may name it now (§9, §23 Q6)
        elif isinstance(event, ToolCallFinished):
            update["capabilities"] = None  # final: no controls
            self._cancellable.discard(event.call_id)
        return update


def _log(run: RunContext, v1: dict[str, Any], event: TurnEvent) -> None:
    """What the store keeps: v1's update, except that a v2 display terminal (agent-owned) is kept apart from the
    call's changes, which keep the command's text output: a v1 replay shows that text and never names a terminal its
    client never had. For v2, a `ToolCallTerminal` says which terminals the call's content named: on its own where
    the content was only that (the anchor), right before the change it came with (the final one); the terminal's
    end is kept by terminals.py. v2's replay (protocol/v2/replay.py) puts them back as they were shown."""
    if isinstance(event, ToolCallFinished) and event.content is not None and _names_terminal(event.content):
        _log_terminals(run, event.call_id, event.content)  # right before the change v2 showed with its terminal
        v1 = {**v1, "content": [tool_content(TextOutput(event.output))]}
    elif isinstance(event, ToolCallUpdated) and event.content is not None and _names_terminal(event.content):
        _log_terminals(run, event.call_id, event.content)
        v1 = {k: v for k, v in v1.items() if k != "content"}
        if v1.keys() <= {"sessionUpdate", "toolCallId"}:
            return
    elif isinstance(event, ToolContentAppended) and any(item.get("type") == "terminal" for item in v1["content"]):
        # Appended after a display terminal the call showed (kept apart, above): v1's whole content names it, and
        # a v1 replay must never name a terminal its client never had.
        v1 = {**v1, "content": [item for item in v1["content"] if item.get("type") != "terminal"]}
    log_update(run.turn_log, v1)


def _names_terminal(content: Sequence[ToolContent] | None) -> bool:
    return content is not None and any(isinstance(item, TerminalOutput) for item in content)


def _log_terminals(run: RunContext, call_id: str, content: Sequence[ToolContent]) -> None:
    # A subagent's terminal is shown in its parent's session, not the one this log belongs to (terminals.py).
    if run.turn_log is None or run.parent_session_id is not None:
        return
    from acp_server.store.turn_records import ToolCallTerminal  # noqa: PLC0415 (the store and sqlite3 load only when persistence is on)

    for item in content:
        if isinstance(item, TerminalOutput):
            run.turn_log.append(ToolCallTerminal(call_id, item.terminal_id))


def to_v2(v1: dict[str, Any], event: TurnEvent | None, run: RunContext | None) -> dict[str, Any]:
    """A v1 update as v2 shows it (live, with the event at hand, or replayed from the store without it)."""
    if isinstance(event, ToolContentAppended):
        # v2 appends the one item (`tool-calls § Streaming Content`); v1's update, which the store keeps, carries
        # all of them, so a replay shows the content so far as upserts of the whole.
        return {
            "sessionUpdate": "tool_call_content_chunk",
            "toolCallId": event.call_id,
            "content": tool_content_v2(event.item),
        }
    kind = v1["sessionUpdate"]
    if kind == "tool_call":
        update = {**v1, "sessionUpdate": "tool_call_update"}
        if isinstance(event, ToolCallStarted):
            update["name"] = event.call.name
        return update
    if kind == "tool_call_update":
        update = dict(v1)
        if isinstance(event, (ToolCallUpdated, ToolCallFinished)):
            shown: Sequence[ToolContent] | None = event.content
            if isinstance(event, ToolCallFinished):
                shown = event.content if event.content is not None else (TextOutput(event.output),)
                if event.cancelled or (not event.ok and run is not None and run.cancelled):
                    update["status"] = "cancelled"  # ACP-V2.md §23 Q7: v2 has the status; v1 keeps `failed`
            if shown is not None:
                update["content"] = [tool_content_v2(item) for item in shown]
        elif "content" in update:
            update["content"] = [_content_v2(item) for item in update["content"]]
        return update
    if kind == "plan":
        session_id = run.session_id if run is not None else ""
        plan = {"type": "items", "planId": plan_id(session_id), "entries": v1["entries"]}
        return {"sessionUpdate": "plan_update", "plan": plan}
    return v1


def tool_content_v2(content: ToolContent) -> dict[str, Any]:
    if isinstance(content, TextOutput):
        return {"type": "content", "content": {"type": "text", "text": content.text}}
    if isinstance(content, DiffOutput):
        return _diff(content.path, content.old_text, content.new_text)
    return {"type": "terminal", "terminalId": content.terminal_id}


def _content_v2(item: dict[str, Any]) -> dict[str, Any]:
    """A stored v1 `ToolCallContent` as v2's (a v1 diff becomes `{changes, patch}`)."""
    if item.get("type") == "diff":
        return _diff(str(item.get("path", "")), item.get("oldText"), str(item.get("newText", "")))
    return item


def _diff(path: str, old_text: str | None, new_text: str) -> dict[str, Any]:
    """v2's `Diff`: the change is authoritative, the git patch renders it (absolute paths, no a/ b/ prefixes)."""
    import difflib  # noqa: PLC0415 (only when a file is edited)

    old_lines = [] if old_text is None else old_text.splitlines(keepends=True)
    new_lines = new_text.splitlines(keepends=True)
    source = "/dev/null" if old_text is None else path
    body = "".join(difflib.unified_diff(old_lines, new_lines, fromfile=source, tofile=path))
    header = f"diff --git {path} {path}\n" + ("new file mode 100644\n" if old_text is None else "")
    operation = "add" if old_text is None else "modify"
    return {
        "type": "diff",
        "changes": [{"operation": operation, "path": path}],
        "patch": {"format": "git_patch", "text": header + body},
    }


# --- a session's own updates ---


def config_options_v2(options: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """v1's config options with v2's `configId` (§14)."""
    return [{"configId": option["id"], **{k: v for k, v in option.items() if k != "id"}} for option in options]


def available_commands_v2(commands: Sequence[SlashCommand]) -> list[dict[str, Any]]:
    return [
        {
            "type": "command",
            "name": c.name,
            "description": c.description,
            **({"input": {"type": "text", "hint": c.hint}} if c.hint is not None else {}),
        }
        for c in commands
    ]


def session_update_v2(event: SessionEvent) -> dict[str, Any] | None:
    """A session's own update; None for what v2 no longer has (modes live in the `mode` config option only)."""
    if isinstance(event, TitleChanged):
        return {"sessionUpdate": "session_info_update", "title": event.title}
    if isinstance(event, ModeChanged):
        return None  # `current_mode_update` is gone; the ConfigChanged that follows says it
    if isinstance(event, ConfigChanged):
        options = config_options(event.model, event.mode, event.prompt_policy, event.models)
        return {"sessionUpdate": "config_option_update", "configOptions": config_options_v2(options)}
    if isinstance(event, CommandsAvailable):
        return {
            "sessionUpdate": "available_commands_update",
            "availableCommands": available_commands_v2(event.commands),
        }
    raise TypeError(f"unknown session event {event!r}")  # pragma: no cover - the event union is closed
