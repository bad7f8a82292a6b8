"""The core's events as ACP v2 `session/update`s (ACP-V2.md §8, §9, §13, §14, §21.2): the v2 `TurnSink` of one turn
and a session's own updates, plus the lifecycle's own (`state_update`, the `user_message` echo).

v2's renderer, a sibling of v1's (protocol/v1/updates.py): each renders the core's events for its own version, and
what both write the same way comes from protocol/update_shapes.py. On v2 a tool call is one upsert
(`tool_call_update` creates it, with its `name`), content is appended by `tool_call_content_chunk`, a call stopped by
a cancel ends `cancelled`, a diff is `{changes, patch}`, a plan is a `plan_update` of one `planId` per session,
notices and compactions are shown to every client, config options carry `configId`, commands `type: "command"`. Every
event sent is handed to the turn's store log (protocol/store_log.py), which keeps the store's own records, the same
as for v1, so the session replays on either version; a display terminal is kept as records of its own.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any

from acp_server.agent.sessions.edge import (
    ConfigChanged,
    ModeChanged,
    SessionEvent,
    SlashCommandsAvailable,
    TitleChanged,
)
from acp_server.agent.sessions.options import SlashCommand
from acp_server.agent.sessions.runs import RunContext
from acp_server.jsonrpc.connection import Connection
from acp_server.protocol.option_shapes import config_options
from acp_server.protocol.store_log import StoreLog
from acp_server.protocol.update_shapes import (
    compaction_update,
    notice_of,
    plan_entries,
    send_text_chunk,
    text_chunk,
    text_content,
    tool_call_update,
    usage_update,
)
from acp_server.runtime.model import (
    Compaction,
    DiffOutput,
    Notice,
    PlanEntry,
    PlanUpdated,
    ReplyStarted,
    StopReason,
    TextDelta,
    TextOutput,
    ThoughtDelta,
    ToolCallFinished,
    ToolCallStarted,
    ToolCallUpdated,
    ToolContent,
    ToolContentAppended,
    TurnEvent,
    UsageReported,
)

__all__ = [
    "V2TurnUpdates",
    "available_commands_v2",
    "config_options_v2",
    "idle",
    "plan_id",
    "plan_update",
    "requires_action",
    "running",
    "session_update_v2",
    "tool_content_v2",
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


def plan_update(session_id: str, entries: Sequence[PlanEntry]) -> dict[str, Any]:
    """The session's one plan (§13), complete."""
    return {
        "sessionUpdate": "plan_update",
        "plan": {"type": "items", "planId": plan_id(session_id), "entries": plan_entries(entries)},
    }


class V2TurnUpdates:
    """One turn's events as v2 `session/update`s, through the fence (the `TurnSink` of agent/sessions/edge.py), each
    one sent handed to the turn's store log."""

    __slots__ = ("_cancellable", "_connection", "_message_id", "_run", "_session_id", "_store", "_thought_id")

    def __init__(self, connection: Connection, run: RunContext) -> None:
        self._connection = connection
        self._run = run
        self._session_id = run.session_id
        # v2 shows commands as agent-owned display terminals (terminals.py): the store keeps them apart.
        self._store = StoreLog(run, display_terminals=True)
        self._message_id = ""
        self._thought_id = ""
        self._cancellable: set[str] = set()  # tool calls that advertise `capabilities.cancel` once in progress

    async def send(self, event: TurnEvent) -> None:
        run = self._run
        if type(event) is TextDelta:  # the hot path, one per streamed chunk
            await send_text_chunk(self._connection, run, self._session_id, self._message_id, event.text, thought=False)
            return
        if type(event) is ThoughtDelta:
            await send_text_chunk(self._connection, run, self._session_id, self._thought_id, event.text, thought=True)
            return
        shown = self._render(event)
        if shown is None:
            return
        message = {
            "jsonrpc": "2.0",
            "method": "session/update",
            "params": {"sessionId": self._session_id, "update": shown},
        }
        if await self._connection.send_fenced(message, run):
            self._store.record(event)

    def send_now(self, event: TurnEvent) -> None:
        update = self._render(event)
        if update is None:
            return
        self._connection.notify("session/update", {"sessionId": self._session_id, "update": update})
        if type(event) is TextDelta:
            self._store.text(self._message_id, event.text)
        elif type(event) is ThoughtDelta:
            self._store.text(self._thought_id, event.text, thought=True)
        else:
            self._store.record(event)

    def _render(self, event: TurnEvent) -> dict[str, Any] | None:
        update: dict[str, Any]
        if type(event) is TextDelta:
            update = text_chunk("agent_message_chunk", event.text, self._message_id)
        elif type(event) is ThoughtDelta:
            update = text_chunk("agent_thought_chunk", event.text, self._thought_id)
        elif type(event) is Notice:
            update = notice_of(event)  # stable in v2, for every client (§18)
        elif type(event) is Compaction:
            update = compaction_update(event)  # stable in v2, no client capability (§18)
        elif isinstance(event, ReplyStarted):
            # Each model reply is its own message, and its thoughts another; ids are unique across turns and
            # processes.
            self._message_id = f"msg_{uuid.uuid4().hex}"
            self._thought_id = f"msg_{uuid.uuid4().hex}"
            return None
        elif isinstance(event, ToolCallStarted):
            # No `tool_call` in v2: the first `tool_call_update` of an id creates the call, with its `name`.
            update = {
                "sessionUpdate": "tool_call_update",
                "toolCallId": event.call.id,
                "title": event.title,
                "kind": event.kind,
                "status": "pending",
                "rawInput": event.call.arguments,
            }
            if event.locations:
                update["locations"] = [{"path": path} for path in event.locations]
            update["name"] = event.call.name
            if event.cancellable:
                self._cancellable.add(event.call.id)
        elif isinstance(event, ToolCallUpdated):
            update = tool_call_update(
                event.call_id, event.status, event.content, event.locations, tool_content_v2, meta=event.meta
            )
            if event.status == "in_progress" and event.call_id in self._cancellable:
                update["capabilities"] = {"cancel": {}}  # `tool_call/cancel` may name it now (§9, §23 Q6)
        elif isinstance(event, ToolContentAppended):
            # v2 appends the one item (`tool-calls § Streaming Content`).
            update = {
                "sessionUpdate": "tool_call_content_chunk",
                "toolCallId": event.call_id,
                "content": tool_content_v2(event.item),
            }
        elif isinstance(event, ToolCallFinished):
            shown = event.content if event.content is not None else (TextOutput(event.output),)
            # ACP-V2.md §23 Q7: a call a cancel stopped ends `cancelled` (v1 has no such status: `failed`).
            cancelled = event.cancelled or (not event.ok and self._run.cancelled)
            update = {
                "sessionUpdate": "tool_call_update",
                "toolCallId": event.call_id,
                "status": "cancelled" if cancelled else "completed" if event.ok else "failed",
                "content": [tool_content_v2(c) for c in shown],
            }
            if event.raw_output is not None:
                update["rawOutput"] = event.raw_output
            update["capabilities"] = None  # final: no controls
            self._cancellable.discard(event.call_id)
        elif isinstance(event, PlanUpdated):
            update = plan_update(self._session_id, event.entries)
        elif isinstance(event, UsageReported):
            update = usage_update(event.used, event.size)
        else:  # pragma: no cover - the event union is closed
            raise TypeError(f"unknown turn event {event!r}")
        return update


def tool_content_v2(content: ToolContent) -> dict[str, Any]:
    """Tool content as v2's `ToolCallContent` (a diff is `{changes, patch}`; a terminal is an agent-owned one)."""
    if isinstance(content, TextOutput):
        return text_content(content.text)
    if isinstance(content, DiffOutput):
        return _diff(content.path, content.old_text, content.new_text)
    return {"type": "terminal", "terminalId": content.terminal_id}


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
    """v1's config options with v2's `configId` (§14): for v2/sessions.py, which answers from the v1 session
    handlers' results until the session lifecycle moves out of the wire layer (issue 22 item 1)."""
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
        options = config_options(event.model, event.mode, event.prompt_policy, event.models, id_key="configId")
        return {"sessionUpdate": "config_option_update", "configOptions": options}
    if isinstance(event, SlashCommandsAvailable):
        return {
            "sessionUpdate": "available_commands_update",
            "availableCommands": available_commands_v2(event.commands),
        }
    raise TypeError(f"unknown session event {event!r}")  # pragma: no cover - the event union is closed
