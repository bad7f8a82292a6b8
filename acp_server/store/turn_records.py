"""What the store keeps of a turn: the project's own records of what the client was shown, not wire messages.

Each turn's log is a sequence of these records, in the order the client was shown them: the user's prompt, the
agent's text and thoughts, tool calls opening and changing, the plan, the context usage, and ACP v2's display
terminals (which tool call showed one; once it ended, what it ran and the tail of its output). They carry the ids the
client knows (message and tool call ids), so a replay rebuilds the same conversation. The protocol edge renders them
into the negotiated protocol's updates on a load or resume (protocol/v1/replay.py, protocol/v2/replay.py), and builds
them from the core's events (protocol/store_log.py), so a session stored on one protocol version can be resumed on
another; nothing here knows a wire shape.

A row stores a record as a JSON array, its tag first and then its fields in order (`encode_entry`), compact and
quick to write on the hot path; `decode_entry` is its inverse and refuses anything it did not write.
"""

from __future__ import annotations

import base64
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from acp_server.runtime.model import DiffOutput, PlanEntry, TerminalOutput, TextOutput, ToolContent

__all__ = [
    "AgentText",
    "AgentThought",
    "ContextUsage",
    "PlanSet",
    "TerminalEnded",
    "ToolCallChanged",
    "ToolCallOpened",
    "ToolCallTerminal",
    "TurnEntry",
    "UserChunk",
    "decode_entry",
    "encode_entry",
    "encode_text",
]


@dataclass(frozen=True, slots=True)
class UserChunk:
    """One block of the user's prompt, as the client sent it (a text, an image, a resource or a link)."""

    message_id: str
    content: dict[str, Any]


@dataclass(frozen=True, slots=True)
class AgentText:
    """A piece of the agent's reply text; the pieces of one message share its id."""

    message_id: str
    text: str
    meta: dict[str, Any] | None = None  # extension data the client was sent with it


@dataclass(frozen=True, slots=True)
class AgentThought:
    """A piece of the agent's reasoning, shown apart from its reply."""

    message_id: str
    text: str
    meta: dict[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class ToolCallOpened:
    """A tool call the client was shown starting. A field left None was not shown."""

    call_id: str
    title: str | None
    kind: str | None = None
    status: str | None = None
    raw_input: Any = None
    locations: tuple[str, ...] | None = None


@dataclass(frozen=True, slots=True)
class ToolCallChanged:
    """A change to a tool call: only the fields that changed are set (its final status and output included)."""

    call_id: str
    status: str | None = None
    content: tuple[ToolContent, ...] | None = None
    locations: tuple[str, ...] | None = None
    raw_output: Any = None
    meta: dict[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class PlanSet:
    """The complete plan, replacing the one shown before."""

    entries: tuple[PlanEntry, ...]


@dataclass(frozen=True, slots=True)
class ContextUsage:
    """Tokens in the model's context, and the size of its window."""

    used: int
    size: int


@dataclass(frozen=True, slots=True)
class ToolCallTerminal:
    """A tool call's content named a display terminal (ACP v2): kept apart from the call's changes, which keep
    what v1 shows (the command's text), so each version replays what its client could have."""

    call_id: str
    terminal_id: str


@dataclass(frozen=True, slots=True)
class TerminalEnded:
    """A display terminal once its command ended: what it ran, where, the tail of its output kept (the bytes the
    client ended with) and how it exited (neither known: it exited, how is not)."""

    terminal_id: str
    command: str
    cwd: str
    output: bytes
    exit_code: int | None = None
    signal: str | None = None


TurnEntry = (
    UserChunk
    | AgentText
    | AgentThought
    | ToolCallOpened
    | ToolCallChanged
    | PlanSet
    | ContextUsage
    | ToolCallTerminal
    | TerminalEnded
)


# --- rows: a JSON array per record ---


def _content_row(content: ToolContent) -> list[Any]:
    if isinstance(content, TextOutput):
        return ["text", content.text]
    if isinstance(content, DiffOutput):
        return ["diff", content.path, content.old_text, content.new_text]
    return ["terminal", content.terminal_id]


def _content_of(row: Sequence[Any]) -> ToolContent:
    tag, *fields = row
    if tag == "text":
        return TextOutput(*fields)
    if tag == "diff":
        return DiffOutput(*fields)
    if tag == "terminal":
        return TerminalOutput(*fields)
    raise ValueError(f"not stored tool content: {row!r:.200}")


def _optional_tuple(value: Sequence[Any] | None) -> tuple[Any, ...] | None:
    return None if value is None else tuple(value)


def encode_text(
    message_id: str, text: str, meta: Mapping[str, Any] | None, *, thought: bool = False
) -> tuple[Any, ...]:
    """The row of `AgentText` (or `AgentThought`) without building the record: the per-chunk hot path."""
    tag = "thought" if thought else "agent"
    return (tag, message_id, text) if meta is None else (tag, message_id, text, meta)


def encode_entry(entry: TurnEntry) -> tuple[Any, ...]:
    """A record as the JSON array a row stores (orjson encodes the tuple)."""
    if isinstance(entry, AgentText | AgentThought):
        return encode_text(entry.message_id, entry.text, entry.meta, thought=isinstance(entry, AgentThought))
    if isinstance(entry, UserChunk):
        return ("user", entry.message_id, entry.content)
    if isinstance(entry, ToolCallOpened):
        return ("call", entry.call_id, entry.title, entry.kind, entry.status, entry.raw_input, entry.locations)
    if isinstance(entry, ToolCallChanged):
        content = None if entry.content is None else [_content_row(c) for c in entry.content]
        return ("call_update", entry.call_id, entry.status, content, entry.locations, entry.raw_output, entry.meta)
    if isinstance(entry, PlanSet):
        return ("plan", [[e.content, e.priority, e.status] for e in entry.entries])
    if isinstance(entry, ToolCallTerminal):
        return ("call_terminal", entry.call_id, entry.terminal_id)
    if isinstance(entry, TerminalEnded):
        output = base64.b64encode(entry.output).decode("ascii")
        return ("terminal", entry.terminal_id, entry.command, entry.cwd, output, entry.exit_code, entry.signal)
    return ("usage", entry.used, entry.size)


def _opened(fields: Sequence[Any]) -> TurnEntry:
    call_id, title, kind, status, raw_input, locations = fields
    return ToolCallOpened(call_id, title, kind, status, raw_input, _optional_tuple(locations))


def _changed(fields: Sequence[Any]) -> TurnEntry:
    call_id, status, content, locations, raw_output, meta = fields
    shown = None if content is None else tuple(_content_of(c) for c in content)
    return ToolCallChanged(call_id, status, shown, _optional_tuple(locations), raw_output, meta)


def _plan(fields: Sequence[Any]) -> TurnEntry:
    (entries,) = fields
    return PlanSet(tuple(PlanEntry(*e) for e in entries))


def _terminal(fields: Sequence[Any]) -> TurnEntry:
    terminal_id, command, cwd, output, exit_code, signal = fields
    return TerminalEnded(terminal_id, command, cwd, base64.b64decode(output, validate=True), exit_code, signal)


# Records whose row is their fields as they are, and the rest, by tag.
_PLAIN: Mapping[str, Callable[..., TurnEntry]] = {
    "agent": AgentText,
    "thought": AgentThought,
    "user": UserChunk,
    "usage": ContextUsage,
    "call_terminal": ToolCallTerminal,
}
_DECODERS: Mapping[str, Callable[[Sequence[Any]], TurnEntry]] = {
    "call": _opened,
    "call_update": _changed,
    "plan": _plan,
    "terminal": _terminal,
}


def decode_entry(row: Any) -> TurnEntry:
    """The inverse of `encode_entry`; raises ValueError on anything it did not write. One per record on every
    `session/load`, so the common records take the shortest way."""
    try:
        if type(row) is not list or not row:
            raise TypeError("a stored record is a non-empty JSON array")
        plain = _PLAIN.get(row[0])
        if plain is not None:
            return plain(*row[1:])
        return _DECODERS[row[0]](row[1:])
    except (TypeError, ValueError, KeyError) as exc:
        raise ValueError(f"not a stored turn record: {row!r:.200}") from exc
