"""The `session/update` shapes ACP v1 and v2 share, for both renderers (protocol/v1/, protocol/v2/) to build from.

The two versions render the core's events and the store's records each for itself; what is written the same way on
both lives here once: a message's text chunk, a notice, a compaction, the context usage, a plan's entries, a tool
call's text and terminal content, and `tool_call_update` with the fields that are set (each version hands in how it
shows a tool call's content: the versions differ on a diff). Plain dicts: the text chunk is on the per-chunk hot path.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from acp_server.protocol.schema import notice_update
from acp_server.runtime.model import Compaction, Notice, PlanEntry, ToolContent

if TYPE_CHECKING:
    from acp_server.agent.sessions.runs import RunContext
    from acp_server.jsonrpc.connection import Connection

__all__ = [
    "ContentShape",
    "compaction_update",
    "notice_of",
    "plan_entries",
    "send_text_chunk",
    "text_chunk",
    "text_content",
    "tool_call_update",
    "usage_update",
]

# How one version shows one item of a tool call's content (ACP `ToolCallContent`).
ContentShape = Callable[[ToolContent], dict[str, Any]]


def text_chunk(kind: str, text: str, message_id: str) -> dict[str, Any]:
    """`agent_message_chunk` / `agent_thought_chunk` / `user_message_chunk` of one plain text block."""
    return {"sessionUpdate": kind, "content": {"type": "text", "text": text}, "messageId": message_id}


async def send_text_chunk(
    connection: Connection, run: RunContext, session_id: str, message_id: str, text: str, *, thought: bool
) -> None:
    """A streamed message (or thought) chunk, the same on both versions: sent, then straight to its row in the turn's
    store log, no record built. The hot path, one per streamed chunk: written out in full."""
    update = {
        "sessionUpdate": "agent_thought_chunk" if thought else "agent_message_chunk",
        "content": {"type": "text", "text": text},
        "messageId": message_id,
    }
    message = {"jsonrpc": "2.0", "method": "session/update", "params": {"sessionId": session_id, "update": update}}
    if await connection.send_fenced(message, run):
        turn_log = run.turn_log
        if turn_log is not None:
            turn_log.append_text(message_id, text, thought)


def notice_of(event: Notice) -> dict[str, Any]:
    """A `notice` (ACP v1 unstable, behind `session.notices`; stable in v2): live, never stored."""
    return notice_update(event.title or event.text.strip(), event.text.strip() if event.title else None, event.severity)


def compaction_update(event: Compaction) -> dict[str, Any]:
    """`compaction_update` (v1 behind `session.compaction`; v2 always): the compaction by its id."""
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


def usage_update(used: int, size: int) -> dict[str, Any]:
    return {"sessionUpdate": "usage_update", "used": used, "size": size}


def plan_entries(entries: Sequence[PlanEntry]) -> list[dict[str, Any]]:
    return [{"content": e.content, "priority": e.priority, "status": e.status} for e in entries]


def text_content(text: str) -> dict[str, Any]:
    """A tool call's text as `ToolCallContent` (the same on both versions)."""
    return {"type": "content", "content": {"type": "text", "text": text}}


def tool_call_update(
    call_id: str,
    status: str | None,
    content: Sequence[ToolContent] | None,
    locations: Sequence[str] | None,
    shape: ContentShape,
    *,
    raw_output: Any = None,
    meta: Any = None,
) -> dict[str, Any]:
    """A `tool_call_update` with the fields that are set, in the order the client has always seen them: one builder
    for the live turn and for a stored turn replayed, on either version (`shape`: how that version shows content)."""
    update: dict[str, Any] = {"sessionUpdate": "tool_call_update", "toolCallId": call_id}
    if status is not None:
        update["status"] = status
    if content is not None:
        update["content"] = [shape(c) for c in content]
    if locations is not None:
        update["locations"] = [{"path": path} for path in locations]
    if raw_output is not None:
        update["rawOutput"] = raw_output
    if meta is not None:
        update["_meta"] = meta
    return update
