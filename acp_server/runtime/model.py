"""The runtime's own words: messages, tool calls, the events a turn reports, and the `Provider` protocol.

Nothing here knows JSON-RPC or ACP; the protocol edge renders these events as `session/update`s (protocol/v1/ and
protocol/v2/, one renderer per version). Providers are
long-lived and immutable; everything a provider needs to remember during one turn lives on the `ModelTurn` it opens
for that turn, so no run state ever sits on a long-lived object (the bug the seed RFC is about).
"""

from __future__ import annotations

import enum
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

__all__ = [
    "INVALID_ARGUMENTS",
    "TEXT_ONLY",
    "Compaction",
    "DiffOutput",
    "Emit",
    "Media",
    "Message",
    "ModelTurn",
    "Notice",
    "PlanEntry",
    "PlanUpdated",
    "Probe",
    "Provider",
    "Reply",
    "ReplyStarted",
    "StopReason",
    "TerminalOutput",
    "TextDelta",
    "TextOutput",
    "ThoughtDelta",
    "ToolCall",
    "ToolCallFinished",
    "ToolCallStarted",
    "ToolCallUpdated",
    "ToolContent",
    "ToolContentAppended",
    "ToolSpec",
    "TurnEvent",
    "TurnInput",
    "UsageReported",
]


# The key of the one-entry `ToolCall.arguments` a provider sends when the model's arguments were not a JSON object;
# the loop answers the model with an error instead of running the tool.
INVALID_ARGUMENTS = "__invalid_arguments__"


class StopReason(enum.StrEnum):
    """Why a turn ended (ACP `StopReason`; the values are the wire's)."""

    END_TURN = "end_turn"
    MAX_TOKENS = "max_tokens"
    MAX_TURN_REQUESTS = "max_turn_requests"
    REFUSAL = "refusal"
    CANCELLED = "cancelled"


@dataclass(frozen=True, slots=True)
class ToolCall:
    """A tool call the model asked for. `arguments` is what the model sent, still unvalidated."""

    id: str
    name: str
    arguments: dict[str, Any]


@dataclass(frozen=True, slots=True)
class Media:
    """An image or a sound the model is shown beside a message's text: the user's pasted screenshot, an image file
    the prompt links to, an image an MCP tool returned. `data` is base64, as every provider's wire wants it."""

    kind: Literal["image", "audio"]
    mime_type: str
    data: str

    def describe(self) -> str:
        """A short stand-in for the text of a model that is not shown it."""
        size = len(self.data) * 3 // 4
        return f"[{self.kind} ({self.mime_type}, about {size} bytes) not shown: the model takes no {self.kind}]"


# What a model takes besides text (settings/config.py `Config.accepts`); a provider renders a `Media` it is not
# given leave to send as its `describe()` text.
TEXT_ONLY: frozenset[str] = frozenset({"text"})


@dataclass(frozen=True, slots=True)
class Message:
    """One entry of a conversation as the model sees it; `media` follow the text (a user's prompt, a tool's result)."""

    role: Literal["user", "assistant", "tool"]
    content: str
    tool_calls: tuple[ToolCall, ...] = ()
    tool_call_id: str | None = None
    media: tuple[Media, ...] = ()


@dataclass(frozen=True, slots=True)
class ToolSpec:
    """What the model is told about a tool."""

    name: str
    description: str
    parameters: dict[str, Any]


# --- events a turn reports through `await emit(event)` ---


@dataclass(frozen=True, slots=True)
class ReplyStarted:
    """A model call begins; its text belongs to a new assistant message."""

    index: int


@dataclass(frozen=True, slots=True)
class TextDelta:
    text: str


@dataclass(frozen=True, slots=True)
class Notice:
    """Something the agent itself tells the user during a turn (an MCP server that stopped, a compaction): never
    part of a model reply or of the model's history. Shown as a notice where the client can show one, else as
    `text`, a message of its own. `title` stands alone (empty: `text` is the title); `text` is then the detail."""

    text: str
    title: str = ""
    severity: Literal["info", "warning", "error"] = "info"


@dataclass(frozen=True, slots=True)
class Compaction:
    """A context compaction of the conversation, by its id: `in_progress` when it starts, then `completed` (with
    the summary the model made) or `failed`, or `cancelled` when the turn ended while it ran (sessions/turn.py
    ends it then). A client that cannot show compactions is shown `notice` once it completed; nothing of it enters
    the model's history but the summary itself."""

    compaction_id: str
    status: Literal["in_progress", "completed", "failed", "cancelled"]
    summary: str | None = None
    error: str | None = None
    notice: Notice | None = None


@dataclass(frozen=True, slots=True)
class ThoughtDelta:
    text: str


# --- what a tool call shows the client (translated to ACP ToolCallContent at the edge) ---


@dataclass(frozen=True, slots=True)
class TextOutput:
    text: str


@dataclass(frozen=True, slots=True)
class DiffOutput:
    """A file change: `old_text` is None for a new file. `path` is absolute."""

    path: str
    old_text: str | None
    new_text: str


@dataclass(frozen=True, slots=True)
class TerminalOutput:
    """A command running in an editor terminal; the client shows its live output."""

    terminal_id: str


ToolContent = TextOutput | DiffOutput | TerminalOutput


@dataclass(frozen=True, slots=True)
class PlanEntry:
    content: str
    priority: Literal["high", "medium", "low"]
    status: Literal["pending", "in_progress", "completed"]


@dataclass(frozen=True, slots=True)
class ToolCallStarted:
    call: ToolCall
    title: str
    kind: str
    locations: tuple[str, ...] = ()
    # The call may be cancelled on its own while it runs (`Tool.cancellable`).
    cancellable: bool = False


@dataclass(frozen=True, slots=True)
class ToolCallUpdated:
    """Progress of a running tool call; only the fields that changed are set."""

    call_id: str
    status: Literal["in_progress"] | None = None
    content: tuple[ToolContent, ...] | None = None
    locations: tuple[str, ...] | None = None
    # Extension data for the client (ACP `_meta`), e.g. the child session a `delegate` call runs.
    meta: dict[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class ToolContentAppended:
    """One item added to what a running tool call shows, after what it showed so far: a tool that reports as it goes
    (a `delegate` call's child at work) sends each new piece once, never everything again (ACP v2
    `tool_call_content_chunk`; v1 has no append, so its renderer sends the call's whole content each time)."""

    call_id: str
    # Never a terminal: a display terminal is the call's own content (`ToolCallUpdated`), kept apart by the store.
    item: TextOutput | DiffOutput


@dataclass(frozen=True, slots=True)
class ToolCallFinished:
    call_id: str
    ok: bool
    output: str
    raw_output: Any = None
    # What the client is shown; None shows `output` as text.
    content: tuple[ToolContent, ...] | None = None
    # Stopped on its own by the user (ACP v2 `tool_call/cancel`), the turn going on.
    cancelled: bool = False


@dataclass(frozen=True, slots=True)
class PlanUpdated:
    """The complete plan (ACP: the client replaces the previous one)."""

    entries: tuple[PlanEntry, ...]


@dataclass(frozen=True, slots=True)
class UsageReported:
    """Tokens in the context now, and the model's context window."""

    used: int
    size: int


TurnEvent = (
    ReplyStarted
    | TextDelta
    | Notice
    | Compaction
    | ThoughtDelta
    | ToolCallStarted
    | ToolCallUpdated
    | ToolContentAppended
    | ToolCallFinished
    | PlanUpdated
    | UsageReported
)
Emit = Callable[[TurnEvent], Awaitable[None]]
# Probes are test-mode observations (`_scripted/probe`); in production the callable does nothing.
Probe = Callable[..., None]


@dataclass(frozen=True, slots=True)
class Reply:
    """What one model call produced once it finished streaming."""

    text: str = ""
    tool_calls: tuple[ToolCall, ...] = ()
    stop_reason: StopReason = StopReason.END_TURN


@dataclass(frozen=True, slots=True)
class TurnInput:
    """What a provider may know about the turn it serves."""

    session_id: str
    run_id: int
    turn_index: int
    meta: dict[str, Any]
    probe: Probe
    # Who the model is, where it works, with what (see runtime/system_prompt.py).
    system_prompt: str = ""
    # Session-scoped state a provider may keep (the scripted model's gate board), created by the provider itself;
    # the session holds it for the provider and is opaque to it.
    session_services: dict[str, Any] = field(default_factory=dict)
    # The kinds of content the model takes ("text", "image", "audio"): media of any other kind are sent as text.
    accepts: frozenset[str] = TEXT_ONLY


class ModelTurn(Protocol):
    """A provider's state for one turn: created by `Provider.open_turn`, dropped with the turn."""

    async def respond(self, messages: Sequence[Message], tools: Sequence[ToolSpec], emit: Emit) -> Reply:
        """Stream one model reply through `emit`, return it when complete. Cancellable at every await."""
        ...

    async def settle(self) -> None:
        """Post-turn work after the outcome is decided (a settled hook); runs outside the turn's cancel scope."""
        ...


class Provider(Protocol):
    """A model family, configured once and shared by every session."""

    def open_turn(self, turn: TurnInput) -> ModelTurn: ...

    def check_turn(self, meta: dict[str, Any], turn_index: int) -> str | None:
        """A reason this prompt cannot run (e.g. a malformed script), or None. Called before admission."""
        ...
