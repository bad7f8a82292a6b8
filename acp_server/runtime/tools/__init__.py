"""Tools: a name, a description, an argument model and an async function, plus the table a turn looks them up in.

Built-in tool families live in sibling modules. A tool reports only its result; the loop announces the call and
closes it, so every tool call follows the ACP lifecycle whatever the tool does.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Generic, TypeVar

from pydantic import BaseModel

from acp_server.runtime.model import Emit, Media, Probe, ToolContent, ToolSpec
from acp_server.runtime.ports import CommandRunner, FileSystem, NoQuestions, Permissions, Questions, Subagents
from acp_server.runtime.processes import Processes

__all__ = ["Tool", "ToolBox", "ToolContext", "ToolResult"]

ArgsT = TypeVar("ArgsT", bound=BaseModel)

# Tool output the model sees is capped; the note says how much was cut.
MAX_TOOL_OUTPUT_CHARS = 50_000


@dataclass(frozen=True, slots=True)
class ToolResult:
    """`output` is what the model reads; `content` what the client shows (None: `output` as text)."""

    output: str
    ok: bool = True
    raw_output: Any = None
    content: tuple[ToolContent, ...] | None = None
    # Images (or sounds) the model is shown with `output`, on a model that takes them (an MCP tool's image result).
    media: tuple[Media, ...] = ()

    def capped(self) -> ToolResult:
        if len(self.output) <= MAX_TOOL_OUTPUT_CHARS:
            return self
        cut = len(self.output) - MAX_TOOL_OUTPUT_CHARS
        text = f"{self.output[:MAX_TOOL_OUTPUT_CHARS]}\n[output truncated: {cut} more characters not shown]"
        return ToolResult(text, self.ok, self.raw_output, self.content, self.media)


@dataclass(frozen=True, slots=True)
class ToolContext:
    """What a running tool may use. Built per tool call; holds no state of its own."""

    session_id: str
    tool_call_id: str
    tool_name: str
    cwd: Path
    # The directories the session may touch: cwd first, then the additional directories. Resolve every path with
    # runtime.paths.resolve_path against these.
    roots: tuple[Path, ...]
    fs: FileSystem
    commands: CommandRunner
    permissions: Permissions
    processes: Processes
    # The turn's event sink, for progress of this call (ToolCallUpdated) and plans (PlanUpdated).
    emit: Emit
    probe: Probe
    # Absolute anyio time by which cleanup must be done once the turn is cancelled (see RunContext).
    cleanup_deadline: Callable[[], float]
    # Sends an agent-to-client request on behalf of the turn; cancelled with it.
    client_request: Callable[[str, dict[str, Any]], Awaitable[Any]]
    # Child sessions for `delegate`.
    subagents: Subagents
    # Structured questions to the user (`ask_user`), where the client can be asked them.
    questions: Questions = field(default_factory=NoQuestions)


@dataclass(frozen=True, slots=True)
class Tool(Generic[ArgsT]):
    name: str
    description: str
    args_model: type[ArgsT]
    kind: str
    run: Callable[[ToolContext, ArgsT], Awaitable[ToolResult]]
    title: Callable[[ArgsT], str] = field(default=lambda args: "")
    # Absolute paths the call touches, for the client to follow (ACP `locations`); given the session cwd.
    locations: Callable[[ArgsT, Path], tuple[str, ...]] = field(default=lambda args, cwd: ())
    # A tool that may ask the user first stays `pending` until allowed (ACP: pending = awaiting approval).
    asks_permission: bool = False
    # A call may be stopped on its own while it runs (ACP v2 `tool_call/cancel`): the model is told and the turn goes
    # on. Long or open-ended tools (commands, subagents, MCP calls); not the quick file tools.
    cancellable: bool = False
    # The JSON schema the model is shown, for a tool defined elsewhere (an MCP server's, which validates its own
    # arguments); None: the schema of `args_model`.
    parameters: dict[str, Any] | None = None

    def spec(self) -> ToolSpec:
        schema = self.parameters if self.parameters is not None else self.args_model.model_json_schema()
        return ToolSpec(self.name, self.description, schema)


class ToolBox:
    """The immutable set of tools a server offers, looked up by name.

    The specs (each argument model's JSON schema) are made on first use, not at start-up: building them builds every
    argument model, which `initialize` does not need. The provider warm-up makes them before the first prompt
    (agent/warmup.py). Made twice at worst (two threads at once), always the same value.
    """

    def __init__(self, tools: Iterable[Tool[Any]]) -> None:
        self._tools: Mapping[str, Tool[Any]] = {tool.name: tool for tool in tools}
        self._base: ToolBox | None = None  # for an extended box: the box whose specs come first
        self._specs: tuple[ToolSpec, ...] | None = None

    def get(self, name: str) -> Tool[Any] | None:
        return self._tools.get(name)

    def extended(self, tools: Iterable[Tool[Any]]) -> ToolBox:
        """These tools plus a session's own (its MCP servers'); a built-in keeps its name."""
        extra = {tool.name: tool for tool in tools if tool.name not in self._tools}
        if not extra:
            return self
        combined = ToolBox(())
        combined._tools = {**self._tools, **extra}
        combined._base = self  # built-ins' specs reused
        return combined

    @property
    def specs(self) -> tuple[ToolSpec, ...]:
        specs = self._specs
        if specs is None:
            if self._base is None:
                specs = tuple(tool.spec() for tool in self._tools.values())
            else:
                own = (tool for name, tool in self._tools.items() if name not in self._base._tools)
                specs = (*self._base.specs, *(tool.spec() for tool in own))
            self._specs = specs
        return specs
