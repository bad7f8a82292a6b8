"""The test tools (`--test-mode`, see mode.py): work that cooperates with cancellation, ignores it, or hangs in cleanup.

They exist so the cancellation invariants of docs/interrupts.md can be driven black-box; production never offers them.
Names start with `test_` so they never collide with product tools.
"""

from __future__ import annotations

import time
from typing import Any, Literal

import anyio
import anyio.to_thread
import orjson
from pydantic import BaseModel, ConfigDict, Field

from acp_server.errors import ToolError
from acp_server.runtime.model import TextOutput, ToolCallUpdated
from acp_server.runtime.ports import PermissionRequest, Question
from acp_server.runtime.tools import Tool, ToolContext, ToolResult

__all__ = ["TEST_TOOLS"]

# Output a local process may print before it is cut (the model sees at most this much).
MAX_PROC_OUTPUT = 256 * 1024


class _Args(BaseModel):
    model_config = ConfigDict(extra="forbid", defer_build=True)  # built on first use, not at start-up


class SleepArgs(_Args):
    s: float = Field(ge=0, description="seconds")


class StubbornArgs(SleepArgs):
    progress: str = Field(default="", description="text reported as the call's progress once the sleep is over")
    then: Literal["", "permission", "ask", "command", "proc"] = Field(
        default="",
        description="once the sleep is over, ask a permission, ask a question, run `command` (a terminal or local "
        "command) or start it as a local process; reports `late_action` with outcome `done`, `refused` or `cancelled`",
    )
    command: str = Field(default="true", description="the /bin/sh command line of `then` command or proc")
    blocking: bool = Field(
        default=False,
        description="sleep in a worker thread instead (a blocking library call): nothing, not even the event loop's "
        "teardown at exit, can stop it",
    )


class HangFinalizerArgs(_Args):
    s: float = Field(ge=0, description="seconds the body sleeps (cooperatively)")
    f: float = Field(ge=0, description="seconds the finally block sleeps, shielded from cancellation")


class LocalProcArgs(_Args):
    command: str = Field(description="a /bin/sh command line run as a local child process")


async def _sleep(ctx: ToolContext, args: SleepArgs) -> ToolResult:
    await anyio.sleep(args.s)
    return ToolResult(f"slept {args.s} s")


async def _stubborn(ctx: ToolContext, args: StubbornArgs) -> ToolResult:
    # Models work that cannot be interrupted (a blocking call, a library that swallows cancellation).
    with anyio.CancelScope(shield=True):
        if args.blocking:
            await anyio.to_thread.run_sync(time.sleep, args.s)
        else:
            await anyio.sleep(args.s)
    if args.progress:  # late output of work that may have been abandoned meanwhile: the fence must stop it
        await ctx.emit(ToolCallUpdated(ctx.tool_call_id, content=(TextOutput(args.progress),)))
    if args.then:  # a late request of work that may have been abandoned: the fence must refuse it
        try:
            await _late_action(ctx, args)
        except ToolError:
            ctx.probe("late_action", toolCallId=ctx.tool_call_id, then=args.then, outcome="refused")
            raise
        except anyio.get_cancelled_exc_class():  # got as far as its first await: the action was under way
            ctx.probe("late_action", toolCallId=ctx.tool_call_id, then=args.then, outcome="cancelled")
            raise
        ctx.probe("late_action", toolCallId=ctx.tool_call_id, then=args.then, outcome="done")
    return ToolResult(f"ignored cancellation for {args.s} s")


async def _late_action(ctx: ToolContext, args: StubbornArgs) -> None:
    if args.then == "permission":
        request = PermissionRequest(ctx.tool_call_id, ctx.tool_name, "execute", "test_stubborn", "late permission")
        await ctx.permissions.decide(request)
    elif args.then == "ask":
        schema = {"type": "object", "properties": {"answer": {"type": "string"}}}
        await ctx.questions.ask(Question(ctx.tool_call_id, "late question", schema))
    elif args.then == "command":

        async def shown(terminal_id: str) -> None:
            pass

        await ctx.commands.run(args.command, ctx.cwd, None, shown)
    else:
        process = await ctx.processes.open(["/bin/sh", "-c", args.command], cwd=str(ctx.cwd))
        try:
            await process.wait()
        finally:
            ctx.processes.forget(process)


async def _hang_finalizer(ctx: ToolContext, args: HangFinalizerArgs) -> ToolResult:
    try:
        await anyio.sleep(args.s)
        ctx.probe("body_exited", toolCallId=ctx.tool_call_id, reason="completed")
        return ToolResult(f"slept {args.s} s")
    except anyio.get_cancelled_exc_class():
        ctx.probe("body_exited", toolCallId=ctx.tool_call_id, reason="cancelled")
        raise
    finally:
        with anyio.CancelScope(shield=True):
            await anyio.sleep(args.f)
            ctx.probe("finalizer_exited", toolCallId=ctx.tool_call_id)


async def _local_proc(ctx: ToolContext, args: LocalProcArgs) -> ToolResult:
    process = await ctx.processes.open(["/bin/sh", "-c", args.command], cwd=str(ctx.cwd))
    ctx.probe("proc_started", toolCallId=ctx.tool_call_id, pid=process.pid)
    output = bytearray()
    try:
        assert process.stdout is not None
        async for piece in process.stdout:
            if len(output) < MAX_PROC_OUTPUT:
                output += piece[: MAX_PROC_OUTPUT - len(output)]
        code = await process.wait()
    finally:
        # Shielded and bounded: a cancel must still take the whole process group down, within the deadline.
        with anyio.CancelScope(shield=True), anyio.move_on_at(ctx.cleanup_deadline()):
            if process.returncode is None:
                await ctx.processes.terminate(process)
        ctx.processes.forget(process)
    text = output.decode(errors="replace")
    return ToolResult(f"exit code {code}\n{text}", ok=code == 0, raw_output={"exitCode": code})


class ClientRequestArgs(_Args):
    method: str = Field(description="an agent-to-client method, e.g. fs/read_text_file")
    params: dict[str, Any] = Field(default_factory=dict)


async def _client_request(ctx: ToolContext, args: ClientRequestArgs) -> ToolResult:
    # Lets tests hold a turn on an arbitrary client request (the editor may answer late, or never).
    result = await ctx.client_request(args.method, {"sessionId": ctx.session_id, **args.params})
    return ToolResult(orjson.dumps(result).decode(), raw_output=result)


TEST_TOOLS: tuple[Tool[Any], ...] = (
    Tool(
        "test_sleep",
        "Sleep s seconds, cooperatively.",
        SleepArgs,
        "other",
        _sleep,
        lambda a: "test_sleep",
        cancellable=True,
    ),
    Tool(
        "test_stubborn",
        "Sleep s seconds, ignoring cancellation; then report `progress`, if given, and do `then`, if given.",
        StubbornArgs,
        "other",
        _stubborn,
        lambda a: "test_stubborn",
        cancellable=True,
    ),
    Tool(
        # The same work, but not a cancellable call: it runs inside the turn, not as a body of its own behind a
        # call's fence, so after the turn's cleanup deadline only the turn's own fence stands between what it does
        # late and the client (docs/interrupts.md I6).
        "test_stubborn_inline",
        "Like test_stubborn, but not cancellable on its own: it runs inside the turn and is abandoned with it.",
        StubbornArgs,
        "other",
        _stubborn,
        lambda a: "test_stubborn_inline",
    ),
    Tool(
        "test_hang_finalizer",
        "Sleep s seconds, then f seconds in a shielded finally block.",
        HangFinalizerArgs,
        "other",
        _hang_finalizer,
        lambda a: "test_hang_finalizer",
        cancellable=True,
    ),
    Tool(
        "test_local_proc",
        "Run a command as a local child process in its own process group.",
        LocalProcArgs,
        "execute",
        _local_proc,
        lambda a: a.command,
    ),
    Tool(
        "test_client_request",
        "Send a request to the client and return its answer.",
        ClientRequestArgs,
        "other",
        _client_request,
        lambda a: a.method,
    ),
)
