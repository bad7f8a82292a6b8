"""The core's events as ACP v1 `session/update`s: a turn's (the v1 `TurnSink`: sent through the connection's fence,
and handed to the turn's store log, protocol/store_log.py, which keeps them as the store's own records) and a session's
own (title, mode, config options, slash commands).

v1's renderer, a sibling of v2's (protocol/v2/updates.py): what both write the same way comes from
protocol/update_shapes.py. v1 has no append of tool call content, so an appended item is sent with everything the call
showed before it; a diff is `{path, oldText, newText}`; a notice or a compaction is shown as such only to a client that
advertised `session.notices` / `session.compaction`, else as a message of its own. The per-chunk hot path: plain dicts,
no models, one type check per text chunk.
"""

from __future__ import annotations

import uuid
from typing import Any

from acp_server.agent.sessions.edge import (
    ConfigChanged,
    ModeChanged,
    SessionEvent,
    SlashCommandsAvailable,
    TitleChanged,
)
from acp_server.agent.sessions.runs import RunContext
from acp_server.jsonrpc.connection import Connection
from acp_server.protocol.option_shapes import available_commands, config_options
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
    PlanUpdated,
    ReplyStarted,
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

__all__ = ["TurnUpdates", "session_update", "tool_content"]


def tool_content(content: ToolContent) -> dict[str, Any]:
    """Tool content as v1's `ToolCallContent`."""
    if isinstance(content, TextOutput):
        return text_content(content.text)
    if isinstance(content, DiffOutput):
        return {"type": "diff", "path": content.path, "oldText": content.old_text, "newText": content.new_text}
    return {"type": "terminal", "terminalId": content.terminal_id}


class TurnUpdates:
    """One turn's events as v1 `session/update`s, through the fence (the `TurnSink` of agent/sessions/edge.py), each
    one sent handed to the turn's store log."""

    __slots__ = ("_client", "_connection", "_message_id", "_run", "_session_id", "_shown", "_store", "_thought_id")

    def __init__(self, connection: Connection, run: RunContext) -> None:
        self._connection = connection
        self._run = run
        self._session_id = run.session_id
        self._client = run.session.client
        self._store = StoreLog(run)
        self._message_id = ""
        self._thought_id = ""
        # What each running call that set or appended content shows now: v1 has no append, so an appended item is
        # sent with everything before it. Per turn, like the message ids; a call's entry goes when it finishes.
        self._shown: dict[str, list[ToolContent]] = {}

    async def send(self, event: TurnEvent) -> None:
        run = self._run
        if type(event) is TextDelta:  # the hot path, one per streamed chunk
            await send_text_chunk(self._connection, run, self._session_id, self._message_id, event.text, thought=False)
            return
        if type(event) is ThoughtDelta:
            await send_text_chunk(self._connection, run, self._session_id, self._thought_id, event.text, thought=True)
            return
        text = self._as_message(event)
        if text is not None:
            message_id = f"msg_{uuid.uuid4().hex}"
            if await self._connection.send_fenced(
                self._message(text_chunk("agent_message_chunk", text, message_id)), run
            ):
                self._store.text(message_id, text)
            return
        shown = self._render(event)
        if shown is not None and await self._connection.send_fenced(self._message(shown), run):
            self._record(event)

    def send_now(self, event: TurnEvent) -> None:
        text = self._as_message(event)
        if text is not None:
            message_id = f"msg_{uuid.uuid4().hex}"
            self._connection.notify("session/update", self._params(text_chunk("agent_message_chunk", text, message_id)))
            self._store.text(message_id, text)
            return
        update = self._render(event)
        if update is not None:
            self._connection.notify("session/update", self._params(update))
            self._record(event)

    def _params(self, update: dict[str, Any]) -> dict[str, Any]:
        return {"sessionId": self._session_id, "update": update}

    def _message(self, update: dict[str, Any]) -> dict[str, Any]:
        return {"jsonrpc": "2.0", "method": "session/update", "params": self._params(update)}

    def _record(self, event: TurnEvent) -> None:
        """What the store keeps of an event sent: a text chunk in its message, anything else as the store log says."""
        if type(event) is TextDelta:
            self._store.text(self._message_id, event.text)
        elif type(event) is ThoughtDelta:
            self._store.text(self._thought_id, event.text, thought=True)
        else:
            self._store.record(event)

    def _as_message(self, event: TurnEvent) -> str | None:
        """The text of a notice shown as a message of its own, to a client that shows no notices (as before they
        existed); None for everything else."""
        if type(event) is Notice:
            return None if self._client.notices else event.text
        if type(event) is Compaction and not self._client.compaction and event.notice is not None:
            return None if self._client.notices else event.notice.text
        return None

    def _render(self, event: TurnEvent) -> dict[str, Any] | None:
        update: dict[str, Any]
        if type(event) is TextDelta:
            update = text_chunk("agent_message_chunk", event.text, self._message_id)
        elif type(event) is ThoughtDelta:
            update = text_chunk("agent_thought_chunk", event.text, self._thought_id)
        elif type(event) is Notice:
            update = notice_of(event)  # a client that shows notices (`_as_message` took the others)
        elif type(event) is Compaction:
            if self._client.compaction:
                update = compaction_update(event)
            elif event.notice is not None:
                update = notice_of(event.notice)
            else:
                return None  # its start, or its failure: the turn's error says what went wrong
        elif isinstance(event, ReplyStarted):
            # Each model reply is its own message, and its thoughts another; ids are unique across turns and
            # processes.
            self._message_id = f"msg_{uuid.uuid4().hex}"
            self._thought_id = f"msg_{uuid.uuid4().hex}"
            return None
        elif isinstance(event, ToolCallStarted):
            update = {
                "sessionUpdate": "tool_call",
                "toolCallId": event.call.id,
                "title": event.title,
                "kind": event.kind,
                "status": "pending",
                "rawInput": event.call.arguments,
            }
            if event.locations:
                update["locations"] = [{"path": path} for path in event.locations]
        elif isinstance(event, ToolCallUpdated):
            if event.content is not None:
                self._shown[event.call_id] = list(event.content)  # replaces whatever was appended before
            update = tool_call_update(
                event.call_id, event.status, event.content, event.locations, tool_content, meta=event.meta
            )
        elif isinstance(event, ToolContentAppended):
            items = self._shown.setdefault(event.call_id, [])
            items.append(event.item)
            update = tool_call_update(event.call_id, None, items, None, tool_content)
        elif isinstance(event, ToolCallFinished):
            self._shown.pop(event.call_id, None)
            shown = event.content if event.content is not None else (TextOutput(event.output),)
            update = {
                "sessionUpdate": "tool_call_update",
                "toolCallId": event.call_id,
                "status": "completed" if event.ok else "failed",
                "content": [tool_content(c) for c in shown],
            }
            if event.raw_output is not None:
                update["rawOutput"] = event.raw_output
        elif isinstance(event, PlanUpdated):
            update = {"sessionUpdate": "plan", "entries": plan_entries(event.entries)}
        elif isinstance(event, UsageReported):
            update = usage_update(event.used, event.size)
        else:  # pragma: no cover - the event union is closed
            raise TypeError(f"unknown turn event {event!r}")
        return update


def session_update(event: SessionEvent) -> dict[str, Any]:
    """A session's own update (outside any turn)."""
    if isinstance(event, TitleChanged):
        return {"sessionUpdate": "session_info_update", "title": event.title}
    if isinstance(event, ModeChanged):
        return {"sessionUpdate": "current_mode_update", "currentModeId": event.mode}
    if isinstance(event, ConfigChanged):
        options = config_options(event.model, event.mode, event.prompt_policy, event.models)
        return {"sessionUpdate": "config_option_update", "configOptions": options}
    if isinstance(event, SlashCommandsAvailable):
        return {"sessionUpdate": "available_commands_update", "availableCommands": available_commands(event.commands)}
    raise TypeError(f"unknown session event {event!r}")  # pragma: no cover - the event union is closed
