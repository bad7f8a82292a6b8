"""`run_command`: the model runs a shell command line, in an editor terminal when the client offers one, else as a
local child process.

The tool is written once against the `CommandRunner` and `Permissions` ports, so it never knows which side runs the
command; cancellation, timeouts and the kill-and-release cleanup live in the runners. What lives here is what every
runner shares: where the command runs (confined to the session's directories), asking the user first, showing the
live terminal, and telling the model how the command ended in words it can act on.

`command_prefix` is the rule an "always allow" answer remembers for a command. It lives in the runtime (not in the
editor layer) so that any permission gate, and this tool, agree on it.
"""

from __future__ import annotations

import shlex
from typing import Any

import anyio
from pydantic import BaseModel, ConfigDict, Field, field_validator

from acp_server.errors import ToolError
from acp_server.runtime.model import TerminalOutput, TextOutput, ToolCallUpdated, ToolContent
from acp_server.runtime.paths import display, resolve_path
from acp_server.runtime.ports import CommandResult, PermissionRequest
from acp_server.runtime.tools import Tool, ToolContext, ToolResult

__all__ = ["COMMAND_TOOLS", "DEFAULT_TIMEOUT_S", "MAX_OUTPUT_CHARS", "MAX_TIMEOUT_S", "command_prefix"]

DEFAULT_TIMEOUT_S = 120.0
MAX_TIMEOUT_S = 600.0
# What the model reads of a command's output. Errors tend to be at the end, so the tail gets most of the room.
MAX_OUTPUT_CHARS = 30_000
_HEAD_CHARS = 8_000

# Text that makes a command line more than one simple command: a remembered prefix must never cover it
# (`git status && rm -rf ~` is not `git status`). Operators are found by the tokenizer; these by plain search.
_COMPOUND_MARKERS = ("`", "$(", "\n", "\r")
_OPERATOR_CHARS = frozenset("();<>|&")
# How what the sandbox refused reads in a command's output: EACCES (Landlock), EROFS (its read-only mounts).
_REFUSALS = ("permission denied", "read-only file system")


def command_prefix(command: str) -> str:
    """What an "always" answer remembers for a command line, and what a later line must match to reuse it.

    A simple command gives its executable and first argument (`git status`, `npm test`), so `git status --short`
    matches an earlier `git status` but `git push` does not. A line that chains, pipes, redirects or substitutes
    (`;`, `&&`, `|`, `>`, `$(...)`, backquotes, several lines) gives the whole line: only the very same line matches.
    The two kinds cannot collide: a prefix is re-quoted with `shlex.join`, so it never reads as a compound line.
    """
    stripped = command.strip()
    if any(marker in stripped for marker in _COMPOUND_MARKERS):
        return stripped
    lexer = shlex.shlex(stripped, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    try:
        tokens = list(lexer)
    except ValueError:  # unbalanced quotes: not a line we can reason about
        return stripped
    if not tokens or any(token and set(token) <= _OPERATOR_CHARS for token in tokens):
        return stripped
    try:
        words = shlex.split(stripped)
    except ValueError:
        return stripped
    return shlex.join(words[:2])


class RunCommandArgs(BaseModel):
    model_config = ConfigDict(extra="forbid", defer_build=True)  # built on first use, not at start-up

    command: str = Field(description="a shell command line, run as `/bin/sh -c COMMAND`")
    cwd: str | None = Field(
        default=None,
        description="the directory to run in, absolute or relative to the session's directory (default: it)",
    )
    timeout_s: float | None = Field(
        default=None,
        gt=0,
        le=MAX_TIMEOUT_S,
        description=f"seconds before the command is killed (default {DEFAULT_TIMEOUT_S:g}, at most {MAX_TIMEOUT_S:g})",
    )

    @field_validator("command")
    @classmethod
    def _one_command_line(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("the command is empty")
        if "\0" in value:
            raise ValueError("the command contains a NUL character")
        return value


async def _run_command(ctx: ToolContext, args: RunCommandArgs) -> ToolResult:
    cwd = resolve_path(args.cwd, ctx.cwd, ctx.roots) if args.cwd else ctx.cwd
    if not await anyio.Path(cwd).is_dir():
        raise ToolError(f"{args.cwd or cwd}: not a directory; nothing was run")
    content: tuple[ToolContent, ...] = () if cwd == ctx.cwd else (TextOutput(f"in {cwd}"),)
    decision = await ctx.permissions.decide(
        PermissionRequest(
            tool_call_id=ctx.tool_call_id,
            tool_name=ctx.tool_name,
            kind="execute",
            rule=command_prefix(args.command),
            title=args.command,
            raw_input=args.model_dump(exclude_none=True),
            content=content,
        )
    )
    if not decision.allowed:
        raise ToolError(f"{decision.reason or 'the command was not allowed'}; nothing was run")

    terminal: list[str] = []

    async def on_terminal(terminal_id: str) -> None:
        terminal.append(terminal_id)
        await ctx.emit(ToolCallUpdated(ctx.tool_call_id, content=(TerminalOutput(terminal_id),)))

    timeout = args.timeout_s if args.timeout_s is not None else DEFAULT_TIMEOUT_S
    result = await ctx.commands.run(args.command, cwd, timeout, on_terminal)
    text = _report(result, timeout, display(cwd, ctx.cwd))
    raw_output = {
        "exitCode": result.exit_code,
        "signal": result.signal,
        "timedOut": result.timed_out,
        "truncated": result.truncated,
    }
    shown: tuple[ToolContent, ...] = (TerminalOutput(terminal[0]),) if terminal else (TextOutput(text),)
    ok = result.exit_code == 0 and not result.timed_out
    return ToolResult(text, ok=ok, raw_output=raw_output, content=shown)


def _report(result: CommandResult, timeout: float, where: str) -> str:
    """The output, then one line saying how the command ended (what the model acts on), with every cut noted."""
    output = result.output
    notes: list[str] = []
    if result.truncated:
        notes.append("the output was longer than the runner keeps; part of it is missing: its beginning")
    if len(output) > MAX_OUTPUT_CHARS:
        cut = len(output) - MAX_OUTPUT_CHARS
        tail = MAX_OUTPUT_CHARS - _HEAD_CHARS
        output = f"{output[:_HEAD_CHARS]}\n[... {cut} characters cut ...]\n{output[-tail:]}"
        notes.append(f"{cut} characters cut from the middle")
    if result.timed_out:
        ending = f"timed out after {timeout:g} s; the command was killed"
    elif result.exit_code is not None:
        ending = f"exit code {result.exit_code}"
    elif result.signal is not None:
        ending = f"killed by signal {result.signal}"
    else:
        ending = "ended without an exit status"
    if where != ".":
        notes.append(f"ran in {where}")
    lowered = output.lower()
    if result.sandbox is not None and result.exit_code != 0 and any(sign in lowered for sign in _REFUSALS):
        # What the sandbox refuses reads as a plain EACCES (Landlock), or EROFS outside the writable directories
        # (its mount namespace): say why, so the model does not try sudo, chmod or a remount.
        where_writable = (
            "nothing may be written"
            if result.sandbox == "read-only"
            else "only the session's directories and the temp directory may be written"
        )
        # And what of that it still may not write, with why: a refused temp directory or root otherwise reads as
        # a sandbox that breaks its own rules.
        notes.append("; ".join([f"it ran in the {result.sandbox} sandbox: {where_writable}", *result.refused]))
    if result.unconfined is not None:
        notes.append(f"NOT sandboxed: it ran with the user's full rights ({result.unconfined})")
    body = output if output.strip() else "(no output)"
    if not body.endswith("\n"):
        body += "\n"
    suffix = f" ({'; '.join(notes)})" if notes else ""
    return f"{body}[{ending}{suffix}]"


COMMAND_TOOLS: tuple[Tool[Any], ...] = (
    Tool(
        "run_command",
        "Run a shell command line (`/bin/sh -c`) in the session's directory, or in `cwd`, and return its output "
        "(stdout and stderr together) and exit code. Not interactive: nothing is typed into it. It is killed, with "
        f"everything it started, after `timeout_s` seconds (default {DEFAULT_TIMEOUT_S:g}, at most "
        f"{MAX_TIMEOUT_S:g}). The user may be asked to allow it first.",
        RunCommandArgs,
        "execute",
        _run_command,
        lambda a: a.command,
        asks_permission=True,
        cancellable=True,
    ),
)
