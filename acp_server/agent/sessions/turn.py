"""One prompt turn, from admission to its release: the turn boundary of docs/interrupts.md.

The lifecycle in one place: `admit_prompt` (when the reader reads the line), `execute_prompt` (start, work, seal)
and `release_prompt` (after the response), driving the transitions of the run's state (see runs.py).
`execute_prompt` waits for the turn's place in its session, starts the work in a task owned by the connection (so
work that ignores cancellation can be abandoned: a task group cannot exit before its children), then waits for the
work to end or for a cancel. After a cancel it waits at most until the cleanup deadline, measured from the first
cancel, and abandons whatever is still running. `_seal` then retracts the turn's outstanding client requests,
fails its open tool calls, commits its history, and raises the fence, all synchronously, so every update of the
turn is queued before its response and nothing of it after.

The stop reason is decided here and only here: a turn a cancel claimed answers `cancelled` whatever exception the
abort surfaced as; a turn that fails without a cancel answers a JSON-RPC error, never `end_turn`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import date
from typing import TYPE_CHECKING

import anyio

from acp_server.agent.sessions.edge import TurnOutput, edge_of, provider_for
from acp_server.agent.sessions.inputs import Prompt, RequestId
from acp_server.agent.sessions.options import parse_slash_command
from acp_server.agent.sessions.runs import RunContext, RunState, Session
from acp_server.agent.sessions.services import TurnMeter, TurnServices
from acp_server.agent.sessions.slash_commands import prompt_title, run_slash_command
from acp_server.agent.sessions.subagents import ChildSessions
from acp_server.agent.sessions.turn_tools import bound_probe, tool_context, tool_ports
from acp_server.errors import KeyRefusedError, ModelError, PromptRejectedError, ToolError, TurnFailedError
from acp_server.runtime.attachments import read_image
from acp_server.runtime.call_stops import Abandonment
from acp_server.runtime.compaction import ContextCompactor
from acp_server.runtime.loop import run_turn
from acp_server.runtime.model import (
    Compaction,
    Media,
    Message,
    ModelTurn,
    StopReason,
    ToolCallFinished,
    TurnInput,
    UsageReported,
)
from acp_server.runtime.processes import TURN_SESSION
from acp_server.runtime.system_prompt import build_system_prompt, read_instructions
from acp_server.runtime.text_guard import redactor_for

if TYPE_CHECKING:
    from acp_server.store import TurnStatus

__all__ = ["admit_prompt", "execute_prompt", "execute_unjoined_steer", "release_prompt"]

log = logging.getLogger(__name__)


def admit_prompt(
    services: TurnServices,
    request_id: RequestId,
    session_id: str,
    prompt: Prompt,
    session_of: Callable[[str], Session],
) -> RunContext:
    """Admission, the first transition: synchronous, called as the reader reads the prompt's line (see runs.py).

    Refuses what cannot run (an unknown session, a script the model refuses: `PromptRejectedError`; the protocol edge
    has refused content no model here takes), decides once whether the prompt is a slash command (kept on the run),
    and hands it to the run registry, which applies the session's prompt policy.
    """
    session = session_of(session_id)
    command = parse_slash_command(prompt.text) if prompt.block_count == 1 else None
    if command is None:  # a slash command never reaches the model, so the model has nothing to check
        problem = provider_for(services.providers, session, session.model).check_turn(
            prompt.meta, session.turns_started
        )
        if problem is not None:
            raise PromptRejectedError(problem, invalid_params=True)
    return services.runs.admit(session, request_id, prompt, command)


def release_prompt(services: TurnServices, run: RunContext) -> str | None:
    """The last transition, once the prompt's response is queued: the run ends and its session passes to the next
    prompt. The session's first ordinary prompt that really started (its turn built the conversation: not one
    refused, nor one cancelled before it ran) names it: its first words are stored as the title at once (listed by
    `session/list`, kept if the process ends before the model's title), and after the first ordinary turn that
    completes (once) the first prompt is returned for the model to title in the background."""
    services.runs.release(run)
    session = run.session
    if run.command is not None or session.title is not None or session.title_requested:
        return None
    if run.turn_start is None:
        return None  # never ran: it says nothing about what the session is for
    if session.first_prompt is None:
        session.first_prompt = run.prompt.text
        fallback = prompt_title(run.prompt.text)
        store = services.store()
        if store is not None and fallback is not None:
            store.set_title(session.session_id, fallback)
    if run.outcome != StopReason.END_TURN:
        return None
    session.title_requested = True
    return session.first_prompt


def open_turn_record(services: TurnServices, run: RunContext) -> None:
    """The turn's record in the store (its prompt's blocks as the user's message), opened once: by `execute_prompt`,
    or before it by a protocol edge whose answer acknowledges the message before the turn runs (`commit_prompt`)."""
    store = services.store()
    if store is not None and run.turn_log is None:
        run.turn_log = store.begin_turn(
            run.session_id, run.prompt.blocks(), run.prompt.text, message_id=run.prompt.message_id
        )


async def commit_prompt(services: TurnServices, run: RunContext) -> bool:
    """Open the turn's record now and commit it, with everything buffered before it: for an answer that acknowledges
    the user's message (v2's `session/prompt`, with its `messageId`), written only once the message is stored. False
    when that commit failed (the store keeps it for its next flush); True without a store."""
    open_turn_record(services, run)
    store = services.store()
    # Fenced (this replica lost the session's lease: PostgreSQL) is not committed either.
    return store is None or (await store.flush() and not store.lease_lost(run.session_id))


async def execute_prompt(services: TurnServices, run: RunContext) -> StopReason:
    """The turn, to its stop reason; raises `TurnFailedError` for a turn that failed without a cancel."""
    store = services.store()
    meter = services.meter
    # Recorded from the start, so even a prompt cancelled before it ran is replayed with its outcome.
    open_turn_record(services, run)
    if meter is not None:
        meter.turn_started()
    try:
        return await _execute(services, run)
    finally:
        # Committed before the response, whatever the outcome. A failed commit leaves the outcome as it is (the turn
        # ran, the client saw it; after a cancel the answer must be `cancelled`), but the response says it was not
        # saved; the store keeps it and retries it with its next flush.
        if store is not None:
            began = anyio.current_time() if meter is not None else 0.0
            if not await store.flush():
                run.saved = False
                log.warning("session %s: the end of the turn was not saved (the session store failed)", run.session_id)
            elif store.lease_lost(run.session_id):
                run.saved = False  # fenced: another replica runs the session now (agent/sessions/leasing.py)
                log.warning("session %s: the end of the turn was not saved (another replica holds it)", run.session_id)
            if meter is not None:
                meter.store_committed(anyio.current_time() - began)
        if meter is not None:
            _count_end(meter, run)


def _count_end(meter: TurnMeter, run: RunContext) -> None:
    """The turn's end for the operator's metrics: its stop reason (`failed` without one), and how long its answer
    took after the first cancel."""
    cancelled = run.cancelled or run.outcome == StopReason.CANCELLED
    if cancelled:
        stop = StopReason.CANCELLED.value
    elif run.error is not None:
        stop = "failed"
    else:
        stop = (run.outcome or StopReason.END_TURN).value
    waited = anyio.current_time() - run.cancelled_at if run.cancelled_at is not None else None
    meter.turn_ended(stop, waited)


async def execute_unjoined_steer(services: TurnServices, run: RunContext) -> StopReason:
    """A steering prompt that a cancel claimed with the work it joined, before the hand-over. It was inserted (the
    protocol edge answered and echoed it), so it is the user's words: once the session is handed to it (the joined
    work sealed its own history), its turn is recorded like one that ran zero model steps, with its message in the
    history and the `[cancelled]` note after it, and replayed with it."""
    await run.wait_until(lambda: services.runs.running(run.session_id) is run)
    message = await _user_message(run.prompt.text, run.prompt, run.session)
    run.messages = [*run.session.history, message]
    run.turn_start = len(run.messages)
    return await execute_prompt(services, run)


async def _execute(services: TurnServices, run: RunContext) -> StopReason:
    await run.wait_until(lambda: run.state is not RunState.QUEUED)  # its place in the session, or a cancel
    if not run.start():
        return _seal(services, run)  # claimed before it started: zero model steps
    edge_of(run.session).spawn(_work, services, run)
    await run.wait_until(lambda: run.work_done or run.cancelled_at is not None)
    if not run.work_done:  # woken by a cancel: wait for the cleanup, but not past the deadline
        with anyio.move_on_at(run.cleanup_deadline(services.config.cleanup_deadline)):
            await run.wait_until(lambda: run.work_done)
        if not run.work_done:
            log.warning(
                "session %s run %d: work still running at the cleanup deadline; abandoned and fenced",
                run.session_id,
                run.run_id,
            )
            services.probe(run, "step_exited", reason="abandoned")
    return _seal(services, run)


async def _work(services: TurnServices, run: RunContext) -> None:
    session = run.session
    TURN_SESSION.set(session.session_id)  # this task's and its tool calls' processes are the session's
    probe = bound_probe(services, run)
    reporter = TurnOutput(run, edge_of(session).turn_sink(run))
    provider = provider_for(services.providers, session, session.model)
    model_turn: ModelTurn | None = None
    try:
        stop: StopReason | None = None
        with run.scope:
            text = run.prompt.text
            command = run.command
            tools = services.tools
            if session.mcp is not None and command is None:
                # Its MCP servers' tools join the built-ins (see mcp_bridge/hub.py); a slash command uses no tools,
                # so it never waits for a server that is still starting.
                tools = await session.mcp.toolbox(tools, reporter)
            system_prompt = build_system_prompt(
                cwd=session.cwd,
                roots=(session.cwd, *session.additional_directories),
                tools=tools.specs,
                instructions=await read_instructions(session.cwd),
                today=date.today(),
            )

            def open_model(instructions: str) -> ModelTurn:
                return provider.open_turn(
                    TurnInput(
                        session_id=session.session_id,
                        run_id=run.run_id,
                        turn_index=session.turns_started,
                        meta=run.prompt.meta,
                        probe=probe,
                        session_services=session.services,
                        system_prompt=instructions or system_prompt,
                        accepts=services.config.accepts(session.model),
                    )
                )

            # Read before the turn touches the history (a linked image file is read from disk): a cancel while it
            # is read leaves the history as it was.
            # (A slash command is one text block: it has no attachments to read.)
            user_message = await _user_message(text, run.prompt, session)
            run.messages = list(session.history)
            run.turn_start = len(run.messages)
            if command is not None:
                stop = await run_slash_command(
                    *command,
                    run=run,
                    model=open_model,
                    emit=reporter,
                    announce_title=lambda title: services.announce_title(session, title),
                )
            else:
                model_turn = open_model("")
                session.turns_started += 1
                run.messages.append(user_message)
                run.turn_start = len(run.messages)
                ports = tool_ports(services, run)
                children = ChildSessions(services, run, run, tools)
                compactor = ContextCompactor(
                    lambda: open_model(""),
                    reporter,
                    keep_from=run.turn_start - 1 if run.turn_start else 0,
                    usage=UsageReported(*session.context_usage) if session.context_usage else None,
                )
                stop = await run_turn(
                    model_turn,
                    run.messages,
                    tools,
                    reporter,
                    tool_context=lambda call: tool_context(
                        services, run, ports, call, emit=reporter, subagents=children
                    ),
                    probe=probe,
                    max_requests=services.config.max_turn_requests,
                    compactor=compactor,
                    hand_over=lambda: services.runs.hand_over_due(session),
                    redactor=redactor_for(services.config.held_secrets),
                    cancellable_calls=run.cancellable_calls,
                    abandonment=Abandonment(services.calls, session.session_id, services.config.cleanup_deadline),
                )
        if run.settle(stop) and model_turn is not None:
            await model_turn.settle()  # outside the turn's scope: a late cancel cannot undo a decided outcome
    except Exception as exc:
        if run.state is RunState.SETTLING:
            log.exception("session %s: post-turn work failed; the outcome stands", run.session_id)
        # A model's failure is its message (the provider logged the details). Kept on the run as it was raised, its
        # traceback would hold the model call's frames, the request body among them, and this frame, which holds
        # the run: a cycle only the cyclic collector frees, which the server runs rarely (server.GC_THRESHOLD), so
        # every failed call kept its body (issue 20, item 4). Any other error keeps its traceback for the log.
        if isinstance(exc, KeyRefusedError):
            edge_of(session).key_refused(session.model)  # its connection's `auth/status` says so
        run.fail(ModelError(str(exc)) if isinstance(exc, ModelError) else exc)
    finally:
        run.work_ended()


async def _user_message(text: str, prompt: Prompt, session: Session) -> Message:
    """The prompt as the model's user message: its text, then its images (and sounds). A linked image file is read
    now, beneath the session's directories; one that cannot be read is named in the text with the reason."""
    media: list[Media] = []
    notes: list[str] = []
    for attachment in prompt.attachments():
        if isinstance(attachment, Media):
            media.append(attachment)
            continue
        try:
            media.append(await read_image(attachment.path, (session.cwd, *session.additional_directories)))
        except ToolError as exc:
            notes.append(f"[The image {attachment.path} is not shown: {exc}]")
    return Message("user", "\n".join([text, *notes]), media=tuple(media))


def _seal(services: TurnServices, run: RunContext) -> StopReason:
    """Everything between the end of the work and the response. Synchronous: nothing can slip in between."""
    for request_id in list(run.pending_requests):
        edge_of(run.session).retract(request_id)
    for end_terminal in list(run.terminal_ends.values()):  # a command the cleanup deadline cut short: exited now
        end_terminal()
    cancelled = run.cancelled or run.outcome == StopReason.CANCELLED
    failed = run.error is not None and not cancelled
    note = "cancelled" if cancelled else "failed" if failed else None
    if run.open_tool_calls:
        sink = edge_of(run.session).turn_sink(run)
        for call_id in list(run.open_tool_calls):
            sink.send_now(ToolCallFinished(call_id, ok=False, output=f"The tool call was {note or 'abandoned'}."))
    run.open_tool_calls.clear()
    if run.open_compactions:  # a compaction the turn's end interrupted: `cancelled`, or `failed` with the turn
        sink = edge_of(run.session).turn_sink(run)
        for compaction_id in sorted(run.open_compactions):
            ended = Compaction(compaction_id, "failed", error="the turn failed") if failed else None
            sink.send_now(ended or Compaction(compaction_id, "cancelled"))
    run.open_compactions.clear()
    previous = run.session.history
    if run.turn_start is not None:
        run.session.history = _sealed_history(run, note)
    _record(services, run, previous, "cancelled" if cancelled else "failed" if failed else "completed")
    run.seal()  # the fence: from here on nothing this run does reaches the client
    if failed:
        raise _failure(run)
    return StopReason.CANCELLED if cancelled else (run.outcome or StopReason.END_TURN)


def _record(services: TurnServices, run: RunContext, previous: list[Message], status: TurnStatus) -> None:
    """The turn's outcome and what it added to the model's history, for the store (committed before the
    response). A turn that rewrote the history (/clear, /compact) records the whole new history."""
    store, log_ = services.store(), run.turn_log
    if store is None or log_ is None:
        return
    history = run.session.history
    extends = len(history) >= len(previous) and history[: len(previous)] == previous
    store.finish_turn(
        log_,
        status,
        stop_reason=run.outcome if status == "completed" else status,
        error=str(run.error) if status == "failed" and run.error is not None else None,
        messages=history[len(previous) :] if extends else history,
        replaces_history=not extends,
    )


def _failure(run: RunContext) -> TurnFailedError:
    error = run.error
    if isinstance(error, ModelError):
        return TurnFailedError(f"The model failed: {error}")
    log.error("session %s: the turn failed", run.session_id, exc_info=error)
    return TurnFailedError("Internal error: the turn failed; see the server log")


def _sealed_history(run: RunContext, note: str | None) -> list[Message]:
    """A copy of the turn's conversation that a model can be given again: what was streamed before a cancel is
    kept, every tool call has a result, and the turn ends with a short note saying how it ended."""
    messages = list(run.messages)  # a copy: an abandoned run may still append to its own list later
    if note is None:
        return messages
    recorded = sum(1 for m in messages[run.turn_start or 0 :] if m.role == "assistant")
    partial = "".join(run.streamed_text)
    if run.replies_started > recorded and partial:
        # The reply was cut off mid-stream: keep what the user already saw. (A complete reply is recorded by the
        # loop, and its tool calls may still be waiting for results; those come next, right after it.)
        messages.append(Message("assistant", partial))
    answered = {m.tool_call_id for m in messages if m.role == "tool"}
    for message in list(messages):
        for call in message.tool_calls:
            if call.id not in answered:
                messages.append(Message("tool", f"[{note}]", tool_call_id=call.id))
    last = messages[-1]
    if last.role == "assistant" and not last.tool_calls:
        # One assistant message, not two in a row: some APIs (Anthropic) insist that roles alternate.
        messages[-1] = Message("assistant", f"{last.content}\n\n[{note}]" if last.content else f"[{note}]")
    else:
        messages.append(Message("assistant", f"[{note}]"))
    return messages
