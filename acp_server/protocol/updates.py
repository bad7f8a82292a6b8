"""Runtime events of one turn as ACP `session/update`s, sent through the connection's fence and recorded, as sent,
in the turn's log in the session store (as the store's own records: protocol/store_log.py).

The per-chunk hot path: plain dicts, no models, one type check per event.
"""

from __future__ import annotations

import uuid
from typing import Any

from acp_server.jsonrpc.connection import Connection
from acp_server.protocol.editor import tool_content
from acp_server.protocol.store_log import log_update
from acp_server.runtime.model import (
    Notice,
    PlanUpdated,
    ReplyStarted,
    TextDelta,
    TextOutput,
    ThoughtDelta,
    ToolCallFinished,
    ToolCallStarted,
    ToolCallUpdated,
    TurnEvent,
    UsageReported,
)
from acp_server.sessions.runs import RunContext

__all__ = ["Reporter", "log_update"]


class Reporter:
    """Translates runtime events into `session/update`s for one turn, through the fence."""

    __slots__ = ("_connection", "_message_id", "_run", "_session_id", "_thought_id")

    def __init__(self, connection: Connection, run: RunContext) -> None:
        self._connection = connection
        self._run = run
        self._session_id = run.session_id
        self._message_id = ""
        self._thought_id = ""

    async def __call__(self, event: TurnEvent) -> None:
        run = self._run
        if run.closed:
            return
        update: dict[str, Any]
        if type(event) is TextDelta:
            run.streamed_text.append(event.text)
            update = {
                "sessionUpdate": "agent_message_chunk",
                "content": {"type": "text", "text": event.text},
                "messageId": self._message_id,
            }
        elif type(event) is Notice:
            update = {
                "sessionUpdate": "agent_message_chunk",
                "content": {"type": "text", "text": event.text},
                "messageId": f"msg_{uuid.uuid4().hex}",
            }
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
            run.replies_started += 1
            run.streamed_text.clear()
            return
        elif isinstance(event, ToolCallStarted):
            run.open_tool_calls[event.call.id] = event.title
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
            update = {"sessionUpdate": "tool_call_update", "toolCallId": event.call_id}
            if event.status is not None:
                update["status"] = event.status
            if event.content is not None:
                update["content"] = [tool_content(c) for c in event.content]
            if event.locations is not None:
                update["locations"] = [{"path": path} for path in event.locations]
            if event.meta is not None:
                update["_meta"] = event.meta
        elif isinstance(event, ToolCallFinished):
            run.open_tool_calls.pop(event.call_id, None)
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
            run.session.context_usage = (event.used, event.size)
            update = {"sessionUpdate": "usage_update", "used": event.used, "size": event.size}
        else:  # pragma: no cover - the event union is closed
            raise TypeError(f"unknown turn event {event!r}")
        message = {
            "jsonrpc": "2.0",
            "method": "session/update",
            "params": {"sessionId": self._session_id, "update": update},
        }
        if await self._connection.send_fenced(message, run):
            log_update(run.turn_log, update)  # what the client was sent, in wire order
