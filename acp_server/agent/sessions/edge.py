"""The core's side of the protocol edge: its outgoing vocabulary, and the interfaces `protocol/` implements.

A turn reports the runtime's `TurnEvent`s (text, thought, tool call started/updated/finished, plan, usage, notice);
a session adds the events below (title, mode, config options, slash commands). The core emits these typed events and
never a wire shape: the protocol edge renders them (protocol/v1/ and protocol/v2/, sibling renderers, one per
version; the store's records are built from them in protocol/store_log.py) and the composition root hands an `Edge`
in with the `TurnServices`, so nothing here knows which version a connection speaks.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Coroutine, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, cast

from acp_server.runtime.model import (
    Compaction,
    Provider,
    ReplyStarted,
    TextDelta,
    ToolCallFinished,
    ToolCallStarted,
    TurnEvent,
    UsageReported,
)
from acp_server.runtime.ports import CommandRunner, FileSystem, NoQuestions, Permissions, Questions
from acp_server.settings.choices import PermissionMode, PromptPolicy

if TYPE_CHECKING:
    from acp_server.agent.sessions.options import SlashCommand
    from acp_server.agent.sessions.runs import RunContext, Session
    from acp_server.mcp_bridge.over_acp import AcpMcpMessages

__all__ = [
    "ConfigChanged",
    "Edge",
    "ModeChanged",
    "Ports",
    "SessionEvent",
    "SlashCommandsAvailable",
    "TitleChanged",
    "TurnOutput",
    "TurnSink",
    "attached",
    "edge_of",
    "provider_for",
]


@dataclass(frozen=True, slots=True)
class TitleChanged:
    title: str


@dataclass(frozen=True, slots=True)
class ModeChanged:
    mode: PermissionMode


@dataclass(frozen=True, slots=True)
class ConfigChanged:
    """The session's config options, all of them (ACP: the client replaces its list)."""

    model: str
    mode: PermissionMode
    prompt_policy: PromptPolicy
    models: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class SlashCommandsAvailable:
    """The slash commands a session offers (on the wire: `available_commands_update`)."""

    commands: Sequence[SlashCommand]


SessionEvent = TitleChanged | ModeChanged | ConfigChanged | SlashCommandsAvailable


@dataclass(frozen=True, slots=True)
class Ports:
    """The outside world of one turn's tools: the editor's where the client offers it, else the local machine."""

    fs: FileSystem
    commands: CommandRunner
    permissions: Permissions
    # A raw request to the client, fenced by the turn (the test tools' `test_client_request`).
    request: Callable[[str, dict[str, Any]], Awaitable[Any]]
    # Structured questions to the user (`elicitation/create`), or none where the client cannot be asked.
    questions: Questions = field(default_factory=NoQuestions)


class TurnSink(Protocol):
    """One turn's events on their way out: rendered, sent through the turn's fence, recorded in its log."""

    async def send(self, event: TurnEvent) -> None:
        """Per event of the running turn; waits while the client is far behind, drops what the fence stops."""
        ...

    def send_now(self, event: TurnEvent) -> None:
        """Synchronous, for the turn's close: queued before its response, with nothing able to slip in between."""
        ...


class Edge(Protocol):
    """What the core needs from the protocol side of its connection."""

    def turn_sink(self, run: RunContext) -> TurnSink: ...

    def session_event(self, session_id: str, event: SessionEvent) -> None:
        """A session's own update, outside any turn's fence."""
        ...

    def tool_ports(self, run: RunContext, on_behalf_of: str | None = None) -> Ports:
        """The outside world of the turn's tools: the editor's files, terminals and permission questions where the
        client offers them, else the local machine. `on_behalf_of`: for a subagent's tools, the parent's
        `delegate` tool call its permission questions name."""
        ...

    def spawn(self, func: Callable[..., Coroutine[Any, Any, Any]], *args: Any) -> None:
        """Start work in a task the connection owns (it outlives the request that started it)."""
        ...

    def retract(self, request_id: int) -> None:
        """Withdraw a request the turn sent the client and that is still unanswered."""
        ...

    def routed_provider(self, spec: str) -> Provider | None:
        """The provider for `spec` through the client's own gateway (ACP `providers/set`: its connection's alone),
        or None where the agent's serves it. Raises `MissingCredentialsError` for a provider the client disabled."""
        ...

    def key_refused(self, spec: str) -> None:
        """A model call for one of the connection's sessions was refused for its key (401, 403)."""
        ...

    @property
    def mcp_messages(self) -> AcpMcpMessages | None:
        """The connection's `mcp/message` traffic, which carries the MCP servers its client offers over ACP
        (`{"type": "acp"}`, mcp_bridge/over_acp.py); None where no client can offer one."""
        ...


def provider_for(providers: Callable[[str], Provider], session: Session, spec: str) -> Provider:
    """The provider a turn of `session` uses for `spec`: its connection's gateway where its client set one, else
    the agent's (`providers`)."""
    edge = attached(session)
    routed = edge.routed_provider(spec) if edge is not None else None
    return routed if routed is not None else providers(spec)


def attached(session: Session) -> Edge | None:
    """The edge of the connection `session` is attached to (`Session.edge`), or None once that has ended."""
    return cast("Edge | None", session.edge)


def edge_of(session: Session) -> Edge:
    """The edge of the connection `session` is attached to: where its turns' events and requests go. A turn runs
    only for a session a connection opened (agent/sessions/lifecycle.py attaches it before anything runs)."""
    edge = attached(session)
    assert edge is not None, f"session {session.session_id} is attached to no connection"
    return edge


class TurnOutput:
    """A turn's `emit`: keeps the turn's own books on what it reported (what its close and its sealed history need),
    then hands the event to the edge's sink. Nothing reaches the sink once the turn's fence is up.

    The per-chunk hot path: one type check per event before the sink.
    """

    __slots__ = ("_run", "_sink")

    def __init__(self, run: RunContext, sink: TurnSink) -> None:
        self._run = run
        self._sink = sink

    async def __call__(self, event: TurnEvent) -> None:
        run = self._run
        if run.fenced:
            return
        if type(event) is TextDelta:
            run.streamed_text.append(event.text)
        elif isinstance(event, ReplyStarted):
            run.replies_started += 1
            run.streamed_text.clear()
        elif isinstance(event, ToolCallStarted):
            run.open_tool_calls[event.call.id] = event.title
        elif isinstance(event, ToolCallFinished):
            run.open_tool_calls.pop(event.call_id, None)
        elif isinstance(event, UsageReported):
            run.session.context_usage = (event.used, event.size)
        elif isinstance(event, Compaction):
            if event.status == "in_progress":
                run.open_compactions.add(event.compaction_id)
            else:
                run.open_compactions.discard(event.compaction_id)
        await self._sink.send(event)
