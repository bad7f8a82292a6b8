"""The ports through which tools reach the outside world: files, commands, the user's permission, and questions
to the user.

Each has two kinds of implementation: through the editor (ACP `fs/*`, `terminal/*`,
`session/request_permission`, `elicitation/create`, in `protocol/editor.py`) and local (`runtime/local_fs.py`; for
questions, `NoQuestions`: the tool asks in its reply instead), chosen per session from the client's advertised
capabilities. Tools are written once, against these protocols, and never know which side
they talk to; the runtime stays free of JSON-RPC.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Protocol

from acp_server.runtime.model import ToolContent

__all__ = [
    "Answer",
    "CommandResult",
    "CommandRunner",
    "Decision",
    "FileSystem",
    "NoQuestions",
    "PermissionRequest",
    "Permissions",
    "Question",
    "Questions",
    "Subagents",
]


class FileSystem(Protocol):
    """Text files by absolute path. Paths are already resolved and confined by the caller."""

    async def read_text(self, path: Path, line: int | None = None, limit: int | None = None) -> str:
        """The file's text, or `limit` lines from 1-based `line`. Raises ToolError if it cannot be read."""
        ...

    async def write_text(self, path: Path, content: str) -> None:
        """Create or replace the file. Raises ToolError if it cannot be written."""
        ...


@dataclass(frozen=True, slots=True)
class CommandResult:
    output: str
    exit_code: int | None
    signal: str | None = None
    truncated: bool = False
    timed_out: bool = False
    # The sandbox mode it ran in (runtime/sandbox.py: "workspace-write", "read-only"), None when unconfined.
    sandbox: str | None = None
    # Why it ran unconfined although a sandbox was meant to hold it (the default mode, where none can be had).
    unconfined: str | None = None
    # The directories its sandbox would have let it write and did not, each with why (they hold the server's code).
    refused: tuple[str, ...] = ()


class CommandRunner(Protocol):
    """Runs one shell command line (`/bin/sh -c LINE`) and returns when it has exited.

    Cancellation kills the command (and, for an editor terminal, releases it) within the cleanup deadline.
    """

    async def run(
        self,
        command: str,
        cwd: Path,
        timeout: float | None,
        on_terminal: Callable[[str], Awaitable[None]],
    ) -> CommandResult:
        """`on_terminal(terminal_id)` is awaited once an editor terminal exists, so the tool call can show it."""
        ...


@dataclass(frozen=True, slots=True)
class PermissionRequest:
    """What a tool wants to do, for the user to allow or refuse."""

    tool_call_id: str
    tool_name: str
    kind: Literal["edit", "execute"]
    # What an "always" answer remembers: the tool name for edits, the command prefix for run_command.
    rule: str
    title: str
    raw_input: Any = None
    content: tuple[ToolContent, ...] = ()
    locations: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Decision:
    allowed: bool
    # Why not, in words for the model ("the user rejected the edit", "the session is read-only").
    reason: str = ""


class Permissions(Protocol):
    async def decide(self, request: PermissionRequest) -> Decision: ...


@dataclass(frozen=True, slots=True)
class Question:
    """A structured question for the user: `message` as they read it, `schema` the fields of the answer (a JSON
    schema of an object whose properties are strings, numbers, integers, booleans or string choices)."""

    tool_call_id: str
    message: str
    schema: dict[str, Any]
    # A link the user is sent to instead of a form (URL mode: signing in, approving in a browser, entering a secret
    # where it belongs). Accepting it says the user agreed to go there, not that they finished there.
    url: str | None = None


@dataclass(frozen=True, slots=True)
class Answer:
    """The user's answer: `accept` with `content` (the fields), `decline`, `cancel`, or another word a newer client
    may use, kept as it came."""

    action: str
    content: dict[str, Any] | None = None


class Questions(Protocol):
    async def ask(self, question: Question) -> Answer | None:
        """The user's answer; None when this client cannot be asked (the tool then asks in its reply). Cancelled
        with the turn; raises ToolError when the client fails the request."""
        ...


class NoQuestions:
    """A client that cannot be asked structured questions."""

    async def ask(self, question: Question) -> Answer | None:
        return None


class Subagents(Protocol):
    """Runs a child session's turn for a `delegate` tool call, inside the calling turn (so cancelling the parent
    cancels the child), and returns the child's final answer. Raises ToolError if the child is cancelled or fails.

    `fenced`: the fence of the calling `delegate` call, when it may be abandoned (runtime/loop.py::fence_context):
    once it returns True, nothing the child's tools ask for reaches the client or starts."""

    async def run(
        self,
        task: str,
        meta: dict[str, Any],
        call_id: str,
        emit: Callable[..., Awaitable[None]],
        *,
        fenced: Callable[[], bool] | None = None,
    ) -> str: ...
