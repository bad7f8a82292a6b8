"""`run_turn`: ask the model, run the tools it calls, feed the results back, until the model ends the turn.

The loop reports everything through `await emit(event)` and knows nothing of JSON-RPC. It catches no cancellation:
a cancel of the turn's scope unwinds it from whichever await it is in (model stream, tool, client request), and
the turn boundary in `sessions/turn.py` decides the stop reason.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import anyio
from anyio.abc import Process
from pydantic import ValidationError

from acp_server.errors import ModelError, ToolError
from acp_server.runtime.call_stops import Abandonment, CallStop, run_abandonable
from acp_server.runtime.compaction import ContextCompactor
from acp_server.runtime.model import (
    INVALID_ARGUMENTS,
    DiffOutput,
    Emit,
    Message,
    ModelTurn,
    Probe,
    ReplyStarted,
    StopReason,
    TextOutput,
    ToolCall,
    ToolCallFinished,
    ToolCallStarted,
    ToolCallUpdated,
    ToolContentAppended,
    TurnEvent,
)
from acp_server.runtime.ports import (
    Answer,
    CommandResult,
    CommandRunner,
    Decision,
    FileSystem,
    PermissionRequest,
    Permissions,
    Question,
    Questions,
    Subagents,
)
from acp_server.runtime.processes import Processes
from acp_server.runtime.text_guard import NO_SECRETS, Redactor, guard_tool_content, sanitize_text
from acp_server.runtime.tools import ToolBox, ToolContext, ToolResult

__all__ = ["fence_context", "run_turn"]

ToolContextFactory = Callable[[ToolCall], ToolContext]
# What the model reads for a tool call the user stopped on its own (ACP-V2.md §23 Q6).
USER_CANCELLED = "The tool call was cancelled by the user; it did not finish."
# What the model reads for a cancellable call refused because the session's abandoned calls reached the cap.
TOO_MANY_ABANDONED = (
    "not started: earlier tool calls of this session ignored their cancel and are still running; "
    "no new one starts until they end (or the session is closed)"
)
# What an abandoned call's body is told when it still asks for something (the model never reads it).
ABANDONED = "the tool call was abandoned"


async def run_turn(
    model: ModelTurn,
    messages: list[Message],
    tools: ToolBox,
    emit: Emit,
    *,
    tool_context: ToolContextFactory,
    probe: Probe,
    max_requests: int,
    compactor: ContextCompactor | None = None,
    hand_over: Callable[[], bool] = lambda: False,
    redactor: Redactor = NO_SECRETS,
    cancellable_calls: dict[str, CallStop] | None = None,
    abandonment: Abandonment | None = None,
) -> StopReason:
    """Run one turn; `messages` (the turn's own copy of the conversation) grows as the turn goes.

    `cancellable_calls` (the turn's): from its `in_progress` until it ends, a cancellable call's id -> what stops it
    alone; the model is then told the user cancelled it, and the turn goes on. With `abandonment`, such a call runs
    so that it is abandoned at its cleanup deadline if it ignores the cancel (see runtime/call_stops.py).

    `hand_over` is asked at every model-call boundary (before each model call, when every tool call so far has its
    result): True ends the turn there with `end_turn`, so a steering prompt can carry on from this conversation.

    Tool output, what the client is shown and what the model reads, is made valid Unicode and has the secrets of
    `redactor` removed before anything sees it (see runtime/text_guard.py); model text is guarded by the provider
    (text_guard.GuardedProvider).
    """
    if compactor is not None:
        emit = compactor.watch
    for index in range(max_requests):
        # Yield before every model call and tool call: a cancel that arrived while work ran without awaiting (a
        # tool that ignored cancellation, a model reply that needed no I/O) must stop the turn here, not later.
        await anyio.lowlevel.checkpoint()
        if hand_over():
            probe("handed_over", modelCalls=index)
            return StopReason.END_TURN
        await emit(ReplyStarted(index))
        if compactor is not None:
            await compactor.before_call(messages)
        try:
            reply = await model.respond(messages, tools.specs, emit)
        except ModelError as exc:
            if compactor is None or not await compactor.on_overflow(messages, exc):
                raise
            reply = await model.respond(messages, tools.specs, emit)
        messages.append(Message("assistant", reply.text, reply.tool_calls))
        if not reply.tool_calls:
            return reply.stop_reason
        for call in reply.tool_calls:
            await anyio.lowlevel.checkpoint()
            result = await _run_tool_call(
                call,
                tools,
                emit,
                tool_context(call),
                probe,
                redactor=redactor,
                cancellable_calls=cancellable_calls,
                abandonment=abandonment,
            )
            messages.append(Message("tool", result.output, tool_call_id=call.id, media=result.media))
    return StopReason.MAX_TURN_REQUESTS


async def _run_tool_call(
    call: ToolCall,
    tools: ToolBox,
    emit: Emit,
    context: ToolContext,
    probe: Probe,
    *,
    redactor: Redactor,
    cancellable_calls: dict[str, CallStop] | None = None,
    abandonment: Abandonment | None = None,
) -> ToolResult:
    emit = _guarded_emit(emit, redactor)
    context = replace(context, emit=emit)
    tool = tools.get(call.name)
    if tool is None:
        await emit(ToolCallStarted(call, call.name, "other"))
        return await _finish(emit, call, ToolResult(f"error: there is no tool named {call.name!r}", ok=False))
    if INVALID_ARGUMENTS in call.arguments:
        await emit(ToolCallStarted(call, call.name, tool.kind))
        raw = str(call.arguments[INVALID_ARGUMENTS])[:2000]
        message = f"error: the arguments are not a valid JSON object; nothing was done. You sent: {raw}"
        return await _finish(emit, call, ToolResult(message, ok=False))
    try:
        args: Any = tool.args_model.model_validate(call.arguments)
    except ValidationError as exc:
        await emit(ToolCallStarted(call, call.name, tool.kind))
        problem = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'arguments'}: {e['msg']}" for e in exc.errors())
        return await _finish(emit, call, ToolResult(f"error: invalid arguments: {problem}", ok=False))
    try:
        locations = tool.locations(args, context.cwd)
    except Exception:  # only a hint for the client; the tool itself reports a bad path properly
        locations = ()
    cancellable = tool.cancellable and cancellable_calls is not None
    await emit(ToolCallStarted(call, tool.title(args) or call.name, tool.kind, locations, cancellable))
    if cancellable and abandonment is not None and not abandonment.has_room():
        # Too many earlier calls of this session ignored their cancel and still run: refused before it is in
        # progress or its body starts, so work the user cannot stop does not pile up (runtime/call_bodies.py).
        probe("tool_exited", toolCallId=call.id, reason="refused")
        return await _finish(emit, call, ToolResult(f"error: {TOO_MANY_ABANDONED}", ok=False))
    own = CallStop(abandonment.grace if abandonment is not None else 0.0)  # this call alone, for `tool_call/cancel`

    async def in_progress() -> None:
        # One source of truth: the call may be stopped alone exactly from the `in_progress` that advertises it
        # (`capabilities.cancel`), never while its permission question is still open (§20.3).
        if cancellable and cancellable_calls is not None:
            cancellable_calls[call.id] = own
        await emit(ToolCallUpdated(call.id, "in_progress"))

    if tool.asks_permission:
        context = replace(context, permissions=_InProgressOnApproval(context.permissions, in_progress))
    else:
        await in_progress()
    probe("tool_started", toolCallId=call.id, tool=call.name)
    reason = "cancelled"  # unless the body returns or raises on its own
    result: ToolResult | None = None
    try:
        if cancellable and abandonment is not None:
            result = await run_abandonable(
                lambda: tool.run(_fenced_context(context, own), args),
                own,
                abandonment,
                context.cleanup_deadline,
                on_late_end=lambda event, **fields: probe(event, toolCallId=call.id, **fields),
            )
        else:
            with own.scope:
                result = await tool.run(context, args)
        if result is not None:
            reason = "completed"
    except Exception as exc:
        # If the turn was cancelled, the error is how the abort surfaced: let the cancellation win.
        await anyio.lowlevel.checkpoint()
        reason = "failed"
        result = ToolResult(f"error: {exc}", ok=False)
    finally:
        if cancellable_calls is not None:
            cancellable_calls.pop(call.id, None)
        if own.cancel_called and (result is None or not result.ok):
            reason = "cancelled_by_user"
        if not own.abandoned:  # an abandoned body still runs, fenced: it reports `tool_exited` when it ends
            probe("tool_exited", toolCallId=call.id, reason=reason)
    if own.abandoned:  # by its own cancel (the turn's would have unwound past here), at the call's deadline
        probe("tool_abandoned", toolCallId=call.id)
    if own.cancel_called and (result is None or not result.ok):
        # Stopped by the user on its own (the turn's own cancel would have unwound past here): the model is told.
        return await _finish(emit, call, ToolResult(USER_CANCELLED, ok=False), cancelled=True)
    assert result is not None
    # Redacted before it is capped: a cut must never leave half a secret behind.
    output = redactor.redact(sanitize_text(result.output))
    content = None if result.content is None else guard_tool_content(result.content, redactor)
    raw_output = _guard_json(result.raw_output, redactor)
    return await _finish(emit, call, ToolResult(output, result.ok, raw_output, content, result.media).capped())


def _fenced_context(context: ToolContext, stop: CallStop) -> ToolContext:
    """The context of a call that may be abandoned: once it is, nothing it reports reaches the client, and whatever
    it still asks for is refused with ToolError in the body (a client request, a permission, a question, a command or
    terminal, a local process, a file, a subagent), so nothing reaches the client and nothing starts. Its own cleanup
    is due by the call's deadline as well as the turn's."""
    fenced = fence_context(context, lambda: stop.abandoned)
    turn_deadline = context.cleanup_deadline
    return replace(fenced, cleanup_deadline=lambda: min(turn_deadline(), stop.deadline()))


def fence_context(context: ToolContext, abandoned: Callable[[], bool]) -> ToolContext:
    """`context` behind the fence of an abandoned call: once `abandoned()` is True, nothing reported through it reaches
    the client and whatever is asked through it is refused with ToolError. Also the context of every tool of a
    subagent that a `delegate` call runs (sessions/subagents.py), with that call's fence: the child's work is the
    call's body too. A subagent started through it carries the fence on to its own tools."""

    def refuse() -> None:
        if abandoned():
            raise ToolError(ABANDONED)

    async def emit(event: TurnEvent) -> None:
        if not abandoned():
            await context.emit(event)

    async def client_request(method: str, params: dict[str, Any]) -> Any:
        refuse()
        return await context.client_request(method, params)

    return replace(
        context,
        emit=emit,
        client_request=client_request,
        permissions=_FencedPermissions(context.permissions, refuse),
        questions=_FencedQuestions(context.questions, refuse),
        commands=_FencedCommands(context.commands, refuse),
        processes=_FencedProcesses(context.processes, refuse),
        fs=_FencedFiles(context.fs, refuse),
        subagents=_FencedSubagents(context.subagents, abandoned),
    )


class _FencedPermissions:
    def __init__(self, inner: Permissions, refuse: Callable[[], None]) -> None:
        self._inner, self._refuse = inner, refuse

    async def decide(self, request: PermissionRequest) -> Decision:
        self._refuse()
        return await self._inner.decide(request)


class _FencedQuestions:
    def __init__(self, inner: Questions, refuse: Callable[[], None]) -> None:
        self._inner, self._refuse = inner, refuse

    async def ask(self, question: Question) -> Answer | None:
        self._refuse()
        return await self._inner.ask(question)


class _FencedCommands:
    def __init__(self, inner: CommandRunner, refuse: Callable[[], None]) -> None:
        self._inner, self._refuse = inner, refuse

    async def run(
        self, command: str, cwd: Path, timeout: float | None, on_terminal: Callable[[str], Awaitable[None]]
    ) -> CommandResult:
        self._refuse()
        return await self._inner.run(command, cwd, timeout, on_terminal)


class _FencedProcesses:
    """Only starting a process is refused: a body's cleanup must still be able to stop and forget its own."""

    def __init__(self, inner: Processes, refuse: Callable[[], None]) -> None:
        self._inner, self._refuse = inner, refuse

    async def open(self, argv: Sequence[str], *, cwd: str | None = None) -> Process:
        self._refuse()
        return await self._inner.open(argv, cwd=cwd)

    async def terminate(self, process: Process) -> None:
        await self._inner.terminate(process)

    def forget(self, process: Process, *, keep_group_if_alive: bool = False) -> None:
        self._inner.forget(process, keep_group_if_alive=keep_group_if_alive)


class _FencedFiles:
    def __init__(self, inner: FileSystem, refuse: Callable[[], None]) -> None:
        self._inner, self._refuse = inner, refuse

    async def read_text(self, path: Path, line: int | None = None, limit: int | None = None) -> str:
        self._refuse()
        return await self._inner.read_text(path, line, limit)

    async def write_text(self, path: Path, content: str) -> None:
        self._refuse()
        await self._inner.write_text(path, content)


class _FencedSubagents:
    """Refuses to start a subagent once the call is abandoned, and hands the fence to the subagent it starts: a
    subagent already running when the call is abandoned is fenced as well (docs/interrupts.md I6)."""

    def __init__(self, inner: Subagents, abandoned: Callable[[], bool]) -> None:
        self._inner, self._abandoned = inner, abandoned

    async def run(
        self,
        task: str,
        meta: dict[str, Any],
        call_id: str,
        emit: Callable[..., Awaitable[None]],
        *,
        fenced: Callable[[], bool] | None = None,
    ) -> str:
        if self._abandoned():
            raise ToolError(ABANDONED)
        own, outer = self._abandoned, fenced
        # Fences nest (a fenced call inside a fenced subagent): the subagent is fenced by whichever goes up first.
        fence = own if outer is None else (lambda: own() or outer())
        return await self._inner.run(task, meta, call_id, emit, fenced=fence)


def _guarded_emit(emit: Emit, redactor: Redactor) -> Emit:
    """A tool call's event sink: the progress a tool reports (`ToolCallUpdated` content, appended items) is guarded
    too."""

    async def guarded(event: TurnEvent) -> None:
        if isinstance(event, ToolCallUpdated) and event.content is not None:
            event = replace(event, content=guard_tool_content(event.content, redactor))
        elif isinstance(event, ToolContentAppended):
            [item] = guard_tool_content((event.item,), redactor)
            assert isinstance(item, TextOutput | DiffOutput)  # guarding keeps an item's kind
            event = replace(event, item=item)
        await emit(event)

    return guarded


def _guard_json(value: Any, redactor: Redactor) -> Any:
    if isinstance(value, str):
        return redactor.redact(sanitize_text(value))
    if isinstance(value, dict):
        return {_guard_json(k, redactor): _guard_json(v, redactor) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_guard_json(item, redactor) for item in value]
    return value


class _InProgressOnApproval:
    """Reports the call `in_progress` once the user allows it (or no question was needed)."""

    def __init__(self, inner: Permissions, in_progress: Callable[[], Awaitable[None]]) -> None:
        self._inner = inner
        self._in_progress = in_progress

    async def decide(self, request: PermissionRequest) -> Decision:
        decision = await self._inner.decide(request)
        if decision.allowed:
            await self._in_progress()
        return decision


async def _finish(emit: Emit, call: ToolCall, result: ToolResult, *, cancelled: bool = False) -> ToolResult:
    await emit(ToolCallFinished(call.id, result.ok, result.output, result.raw_output, result.content, cancelled))
    return result
