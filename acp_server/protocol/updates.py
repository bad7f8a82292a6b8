"""The core's events as ACP v1 `session/update`s: a turn's (sent through the connection's fence and recorded, as sent,
in the turn's log in the session store, as the store's own records: protocol/store_log.py) and a session's own
(title, mode, config options, commands).

This is where a v1 turn's and session's events become `session/update`s (`edge.py` sends the session's; v2's
renderer is `v2/updates.py`; a load's replay and the v2 session, prompt, permission and terminal modules write
their own). The per-chunk hot path: plain dicts, no models, one type check per event.
"""

from __future__ import annotations

import uuid
from typing import Any

from acp_server.agent.sessions.edge import CommandsAvailable, ConfigChanged, ModeChanged, SessionEvent, TitleChanged
from acp_server.agent.sessions.runs import RunContext
from acp_server.jsonrpc.connection import Connection
from acp_server.protocol.editor import tool_call_update, tool_content
from acp_server.protocol.options import available_commands, config_options
from acp_server.protocol.schema import notice_update
from acp_server.protocol.store_log import log_update
from acp_server.runtime.model import (
    Compaction,
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

__all__ = ["TurnUpdates", "compaction_update", "log_update", "session_update"]


class TurnUpdates:
    """One turn's events as `session/update`s, through the fence (the `TurnSink` of `sessions/edge.py`)."""

    __slots__ = ("_client", "_connection", "_message_id", "_run", "_session_id", "_shown", "_thought_id")

    def __init__(self, connection: Connection, run: RunContext) -> None:
        self._connection = connection
        self._run = run
        self._session_id = run.session_id
        self._client = run.session.client
        self._message_id = ""
        self._thought_id = ""
        # What each running call that set or appended content shows now: v1 has no append, so an appended item is
        # sent with everything before it. Per turn, like the message ids; a call's entry goes when it finishes.
        self._shown: dict[str, list[ToolContent]] = {}

    async def send(self, event: TurnEvent) -> None:
        update = self._render(event)
        if update is None:
            return
        run = self._run
        message = {
            "jsonrpc": "2.0",
            "method": "session/update",
            "params": {"sessionId": self._session_id, "update": update},
        }
        if await self._connection.send_fenced(message, run):
            # What the client was sent, in wire order. A reply's or thought's chunk (the hot path, one per streamed
            # chunk) goes straight from the event to its row; anything else is read from the update.
            turn_log = run.turn_log
            if turn_log is None:
                return
            if type(event) is TextDelta:
                turn_log.append_text(self._message_id, event.text)
            elif type(event) is ThoughtDelta:
                turn_log.append_text(self._thought_id, event.text, True)
            else:
                log_update(turn_log, update)

    def send_now(self, event: TurnEvent) -> None:
        update = self._render(event)
        if update is None:
            return
        self._connection.notify("session/update", {"sessionId": self._session_id, "update": update})
        log_update(self._run.turn_log, update)

    def render(self, event: TurnEvent) -> dict[str, Any] | None:
        """The event as its v1 update, without sending it: what the v2 renderer builds on and the store keeps
        (protocol/v2/updates.py)."""
        return self._render(event)

    def _render(self, event: TurnEvent) -> dict[str, Any] | None:
        update: dict[str, Any]
        if type(event) is TextDelta:
            update = {
                "sessionUpdate": "agent_message_chunk",
                "content": {"type": "text", "text": event.text},
                "messageId": self._message_id,
            }
        elif type(event) is Notice:
            update = self._notice(event)
        elif type(event) is Compaction:
            if self._client.compaction:
                update = compaction_update(event)
            elif event.notice is not None:
                update = self._notice(event.notice)
            else:
                return None  # its start, or its failure: the turn's error says what went wrong
        elif type(event) is ThoughtDelta:
            update = {
                "sessionUpdate": "agent_thought_chunk",
                "content": {"type": "text", "text": event.text},
                "messageId": self._thought_id,
            }
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
            update = tool_call_update(event.call_id, event.status, event.content, event.locations, meta=event.meta)
        elif isinstance(event, ToolContentAppended):
            items = self._shown.setdefault(event.call_id, [])
            items.append(event.item)
            update = tool_call_update(event.call_id, None, items, None)
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
            update = {
                "sessionUpdate": "plan",
                "entries": [{"content": e.content, "priority": e.priority, "status": e.status} for e in event.entries],
            }
        elif isinstance(event, UsageReported):
            update = {"sessionUpdate": "usage_update", "used": event.used, "size": event.size}
        else:  # pragma: no cover - the event union is closed
            raise TypeError(f"unknown turn event {event!r}")
        return update

    def _notice(self, event: Notice) -> dict[str, Any]:
        """A `notice` where the client advertised `session.notices`, else a message of its own, as before."""
        if self._client.notices:
            return notice_update(
                event.title or event.text.strip(), event.text.strip() if event.title else None, event.severity
            )
        return {
            "sessionUpdate": "agent_message_chunk",
            "content": {"type": "text", "text": event.text},
            "messageId": f"msg_{uuid.uuid4().hex}",
        }


def compaction_update(event: Compaction) -> dict[str, Any]:
    """ACP `compaction_update` (only for a client that advertised `session.compaction`): the compaction by its id."""
    update: dict[str, Any] = {
        "sessionUpdate": "compaction_update",
        "compactionId": event.compaction_id,
        "status": event.status,
    }
    if event.summary is not None:
        update["summary"] = [{"type": "text", "text": event.summary}]
    if event.error is not None:
        update["error"] = event.error
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
    if isinstance(event, CommandsAvailable):
        return {"sessionUpdate": "available_commands_update", "availableCommands": available_commands(event.commands)}
    raise TypeError(f"unknown session event {event!r}")  # pragma: no cover - the event union is closed
