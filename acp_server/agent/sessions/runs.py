"""Sessions, the per-turn `RunContext`, and the run registry that routes a cancel by session id.

The defect this module exists to avoid (seed RFC-0023): an agent that keeps "the active run" in an instance field
cancels the wrong session, or nothing, when several sessions run at once, and an interrupt that takes a lock held
by the streaming turn never arrives. Here the `RunRegistry` holds one lookup table, session id
-> the running turn's `RunContext`; every piece of run state lives on that context, and `interrupt(session_id)` is
synchronous: look up, mark stopping, cancel the turn's scope, return. No lock, no await, no fallback to "the only
running session".

Admission happens when the reader reads the prompt's line, before any await (`admit`), so a cancel read after it,
even from the same write, always finds it: a cancel binds to exactly the prompts admitted before it (the epoch rule
of docs/interrupts.md I10). Prompts admitted behind a running turn wait in the session's admission queue.

A turn's whole lifecycle is one `RunState` on its `RunContext`, moved only by named transitions that check the state
they leave (admit, hand_over, start, claim_cancel, settle, fail, seal, end); `sessions/turn.py` drives them from
admission to release, and "cancelled" and "the fence is up" are read off the state, never kept beside it.

A steering prompt (the `steer` policy) waits there too, marked `steers`: the running turn hands over to it at its
next model-call boundary (`hand_over_due`). The hand-over ends the running prompt's turn with `end_turn` with
everything it did in the history, tool results included, and the steering prompt's turn continues from exactly that
conversation plus the new message, so the model's next call sees the whole task and the correction. Each prompt
keeps its own run context, registry entry, fence and store record; the task simply changes hands between them.
"""

from __future__ import annotations

import enum
import itertools
import logging
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import anyio

from acp_server.agent.sessions.inputs import ClientTools, Prompt, RequestId
from acp_server.errors import PromptRejectedError, TransitionError
from acp_server.runtime.call_stops import CallStop
from acp_server.runtime.model import Message, StopReason
from acp_server.settings.choices import PermissionMode, PromptPolicy

if TYPE_CHECKING:  # the store (and sqlite3) load only when a session needs them, never at start-up
    from acp_server.mcp_bridge.hub import McpHub
    from acp_server.store import TurnLog

__all__ = [
    "AdmissionQueue",
    "RunContext",
    "RunRegistry",
    "RunState",
    "Session",
    "SessionService",
]

log = logging.getLogger(__name__)

_run_ids = itertools.count(1)


class RunState(enum.Enum):
    """Where a prompt turn is in its life. One state, changed only by the transitions on `RunContext`:

    QUEUED -hand_over-> ADMITTED -start-> RUNNING -settle-> SETTLING -seal-> SEALED -end-> ENDED, and a cancel
    (`claim_cancel`) takes QUEUED, ADMITTED or RUNNING to STOPPING, which seals too (in SETTLING the outcome is
    decided and stays). Admission (`RunRegistry.admit`) creates the run QUEUED behind a busy session, else ADMITTED.
    """

    QUEUED = "queued"  # admitted behind another turn of its session, in the session's admission queue
    ADMITTED = "admitted"  # the session's current prompt; not started yet
    RUNNING = "running"
    STOPPING = "stopping"  # a cancel claimed it before its outcome was decided: it answers `cancelled`
    SETTLING = "settling"  # the outcome is decided; post-turn work before the response
    SEALED = "sealed"  # the fence is up: its response is being queued and nothing it does reaches the client
    ENDED = "ended"  # answered, and the session handed on


# The states a cancel claims (the outcome is not decided yet), and those in which the fence is up.
_CLAIMABLE = frozenset({RunState.QUEUED, RunState.ADMITTED, RunState.RUNNING})
_FENCED = frozenset({RunState.SEALED, RunState.ENDED})
_SEALABLE = frozenset({RunState.RUNNING, RunState.STOPPING, RunState.SETTLING})
_ENDABLE = frozenset(RunState) - {RunState.ENDED}


class SessionService(Protocol):
    """State a provider keeps per session (the scripted model's gate board), opaque to the session."""

    def turn_ended(self) -> None:
        """The session's running turn has ended (its response is queued)."""
        ...


class AdmissionQueue(list["RunContext"]):
    """A session's prompts admitted behind its running turn, first in first out. A list, not a deque: a deque
    allocates a 64-slot block the moment it is made (760 bytes), and most sessions never queue a prompt; the few
    that do hold a handful, so taking the first is as cheap."""

    __slots__ = ()

    def popleft(self) -> RunContext:
        return self.pop(0)


@dataclass(eq=False, slots=True)
class Session:
    """A conversation: its working directory, history and admission queue. Mutated only by its own turns, except
    the admission queue, which the reader and cancels also touch.

    An editor keeps hundreds of these open and idle, so one holds only what it must (no `__dict__`; empty containers
    that allocate nothing until used; its client tools and paths shared with the other sessions): what a turn needs
    is made by the turn, on its run context."""

    session_id: str
    cwd: Path
    additional_directories: tuple[Path, ...]
    mcp_servers: tuple[dict[str, Any], ...]
    history: list[Message] = field(default_factory=list)
    waiting: AdmissionQueue = field(default_factory=AdmissionQueue)
    # Kept here for the provider, by name (see runtime/model.py `TurnInput.session_services`).
    services: dict[str, SessionService] = field(default_factory=dict)
    turns_started: int = 0
    # What the client can do for this session's tools (its initialize capabilities).
    client: ClientTools = field(default_factory=ClientTools)
    # What a prompt sent while a turn runs does: interrupt, queue, reject or steer (the `prompt_policy` option).
    prompt_policy: PromptPolicy = PromptPolicy.INTERRUPT
    # The permission mode and the "always" answers, "edit:write_file" -> allowed.
    mode: PermissionMode = PermissionMode.DEFAULT
    permission_rules: dict[str, bool] = field(default_factory=dict)
    # The model spec this session talks to (the `model` config option) and its title (`session_info_update`).
    model: str = ""
    # The `model` option's choices this session's client was last told of; None until the response that opened the
    # session is sent (a changed list is announced only after it, see agent/model_choices.py).
    offered_models: tuple[str, ...] | None = None
    title: str | None = None
    title_requested: bool = False
    # The text of the session's first ordinary prompt: what the title is made from, whichever turn completes first.
    first_prompt: str | None = None
    # The last context usage the provider reported (tokens used, window), so a turn can compact before it starts.
    context_usage: tuple[int, int] | None = None
    # Set by session/close: the id is refused from then on, even while the close is still settling.
    closed: bool = False
    # Scopes of work the session does outside its turns (title generation); cancelled when the session closes. A
    # list (an empty set is 216 bytes): at most one or two at a time.
    background: list[anyio.CancelScope] = field(default_factory=list)
    # The session's MCP servers (editor's and config file's), connecting in the background; None without any.
    mcp: McpHub | None = None
    # Held by a request changing the session's settings (mode, model, prompt policy) from the store write its answer
    # waits for to the change in memory: each reads the settings the one before it committed and applied. Made on
    # first use (most sessions never change a setting).
    settings_lock: anyio.Lock | None = None
    # The cwd and additional directories as they resolved when the session was made: what the sandbox makes
    # writable (runtime/sandbox.py). Not resolved again for each command: a command may since have swapped a link in
    # on their way (the launcher then refuses that directory, sandbox_exec.py `pinned`), and a link the user made
    # beforehand (a symlinked home, macOS's /tmp) keeps working.
    sandbox_roots: tuple[Path, ...] = field(init=False)
    # The connection the session is attached to (the one that created, loaded or resumed it), as the core's `Edge`
    # (typed in sessions/edge.py, which reads it: `attached`, `edge_of`; that module imports this one): where its
    # updates and its turns' requests to the client go, and whose cancels, close and EOF reach it. None until it is
    # registered (agent/sessions/lifecycle.py), and again once that connection has ended.
    edge: object | None = None

    def __post_init__(self) -> None:
        self.sandbox_roots = tuple(Path(os.path.realpath(root)) for root in (self.cwd, *self.additional_directories))


@dataclass(eq=False)
class RunContext:
    """Everything about one prompt turn. One-shot: created at admission, dropped after the response.

    Its lifecycle is `state`, moved only by the transitions below (`start`, `claim_cancel`, `hand_over`, `settle`,
    `fail`, `seal`, `end`; admission is `RunRegistry.admit`), each of which checks the state it leaves. Everything else
    a caller needs to know about the lifecycle (was it cancelled, is the fence up) is derived from that state.
    """

    session: Session
    request_id: RequestId
    prompt: Prompt
    parent_session_id: str | None = None
    # The slash command this prompt is (`/name argument`), decided once at admission; None for an ordinary prompt.
    command: tuple[str, str] | None = None
    # Admitted under `steer` behind a running turn: that turn hands over to this prompt at its next model call.
    steers: bool = False
    run_id: int = field(default_factory=lambda: next(_run_ids))
    state: RunState = RunState.ADMITTED
    # anyio clock time of the first cancel; the cleanup deadline runs from here and later cancels do not move it.
    cancelled_at: float | None = None
    scope: anyio.CancelScope = field(default_factory=anyio.CancelScope)
    # The turn's work (the task running the model and tools) has returned; a sealed run whose work has not was
    # abandoned at the cleanup deadline. Not a state: abandoned work may outlive the turn.
    work_done: bool = False
    pending_requests: set[int] = field(default_factory=set)
    # Questions to the user (a permission, a form) this run awaits now: its foreground is `requires_action` (ACP v2).
    asking: int = 0
    # Tool calls announced to the client and not yet finished, with their titles.
    open_tool_calls: dict[str, str] = field(default_factory=dict)
    # Compactions announced `in_progress` and not yet ended (each gets exactly one end; sessions/turn.py `_seal`).
    open_compactions: set[str] = field(default_factory=set)
    # Cancellable tool calls while they run: id -> what stops that call alone (runtime/loop.py, call_stops.py).
    cancellable_calls: dict[str, CallStop] = field(default_factory=dict)
    # Display terminals of running commands (ACP v2): terminal id -> what stops that command's process group alone.
    terminal_stops: dict[str, Callable[[], None]] = field(default_factory=dict)
    # ... and what sends each one's final update (its `exitStatus`): the command's end, or `_seal` for a terminal
    # still open when the turn is sealed (sessions/turn.py), which must not leave it running on the client's screen.
    terminal_ends: dict[str, Callable[[], None]] = field(default_factory=dict)
    # The turn's own copy of the conversation; committed to the session only when the turn is answered.
    messages: list[Message] = field(default_factory=list)
    # Where this turn's own messages start in `messages` (after the history it was given); None until the work has
    # built `messages`, so a turn that never ran commits no history.
    turn_start: int | None = None
    # Model replies begun (a reply is recorded in `messages` only once complete), and the text of the latest.
    replies_started: int = 0
    streamed_text: list[str] = field(default_factory=list)
    outcome: StopReason | None = None
    error: BaseException | None = None
    # The turn's record in the session store (None without a store): every update the client was sent.
    turn_log: TurnLog | None = None
    # False when the commit of the turn's end before its response failed (a full disk): the store keeps it for its
    # next flush, and the response says it was not saved (`{"acpServer": {"saved": false}}` in its `_meta`).
    saved: bool = True
    # Set (and replaced) on every change a waiter may be waiting for; see `wait_until`.
    _changed: anyio.Event = field(default_factory=anyio.Event, init=False, repr=False)
    # The prompt has been the session's current one (ADMITTED) at some point: at admission into an idle session or
    # at its hand-over. A cancel that claimed it before then withdrew it while it waited (ACP v2: never inserted).
    was_admitted: bool = field(default=False, init=False)

    def __post_init__(self) -> None:
        self.was_admitted = self.state is RunState.ADMITTED

    @property
    def session_id(self) -> str:
        return self.session.session_id

    @property
    def cancelled(self) -> bool:
        """A cancel claimed this turn before its outcome was decided: it answers `cancelled`, whatever surfaced.
        (Once sealed, the claim lives on as the outcome.)"""
        if self.state in _FENCED:
            return self.outcome == StopReason.CANCELLED
        return self.state is RunState.STOPPING

    @property
    def withdrawn(self) -> bool:
        """A cancel claimed this prompt while it was held, before it was ever the session's current one (ACP v2: it
        was never inserted, and answers `-32800`)."""
        return self.cancelled and not self.was_admitted

    @property
    def fenced(self) -> bool:
        """The fence (what the connection checks): once True, nothing this run does reaches the client."""
        # Identity tests, not a set lookup: read twice for every streamed chunk, and Enum.__hash__ is Python code.
        state = self.state
        return state is RunState.SEALED or state is RunState.ENDED

    def cleanup_deadline(self, grace: float) -> float:
        """The anyio clock time by which cleanup must be over: the first cancel plus the grace period."""
        return float("inf") if self.cancelled_at is None else self.cancelled_at + grace

    async def wait_until(self, condition: Callable[[], bool]) -> None:
        """Wait until `condition` (of this run's state, work or cancel) holds. Every transition wakes the waiters,
        which look again: one event for all of them, so none can miss a change that happened before it waited."""
        while not condition():
            await self._changed.wait()

    async def wait_ended(self) -> None:
        """Wait until the run's response is queued and its session handed on."""
        await self.wait_until(lambda: self.state is RunState.ENDED)

    def _move(self, allowed: frozenset[RunState], to: RunState) -> None:
        if self.state not in allowed:
            raise TransitionError(f"run {self.run_id}: no transition from {self.state.value} to {to.value}")
        self.state = to
        self._wake()

    def _wake(self) -> None:
        self._changed.set()
        self._changed = anyio.Event()

    # --- the transitions ---

    def hand_over(self) -> bool:
        """The session is handed to this prompt (its predecessor ended): QUEUED -> ADMITTED, or a prompt a cancel
        claimed while it waited, which then answers at once. False if it has already been answered (skipped)."""
        if self.state is RunState.ENDED:
            return False
        if self.state is RunState.QUEUED:
            self._move(frozenset({RunState.QUEUED}), RunState.ADMITTED)
            self.was_admitted = True
        else:
            self._wake()  # claimed: whoever waits for its place in the session (sessions/turn.py) may go on
        return True

    def start(self) -> bool:
        """ADMITTED -> RUNNING: the work may begin. False (and no change) for a prompt a cancel claimed first."""
        if self.state is RunState.STOPPING:
            return False
        self._move(frozenset({RunState.ADMITTED}), RunState.RUNNING)
        return True

    def claim_cancel(self, now: float) -> None:
        """A cancel: synchronous, idempotent, no await. An undecided turn (QUEUED, ADMITTED, RUNNING) is claimed:
        STOPPING, its scope cancelled. In SETTLING the outcome is decided and stays; the cancel only starts the
        cleanup deadline. A sealed or ended run is past cancelling."""
        if self.state in _FENCED:
            return
        if self.cancelled_at is None:
            self.cancelled_at = now
        if self.state in _CLAIMABLE:
            self._move(_CLAIMABLE, RunState.STOPPING)
            self.scope.cancel()
        else:
            self._wake()  # SETTLING: its prompt handler now waits for the post-turn work only until the deadline

    def settle(self, stop: StopReason | None) -> bool:
        """The work returned `stop` (None: its scope was cancelled). An undecided running turn decides its outcome:
        RUNNING -> SETTLING, and True: post-turn work may run, which a late cancel cannot undo. A turn a cancel
        claimed (or whose scope was cancelled) answers `cancelled`. A sealed run (abandoned) decides nothing."""
        if self.state is RunState.RUNNING and stop is not None:
            self.outcome = stop
            self._move(frozenset({RunState.RUNNING}), RunState.SETTLING)
            return True
        if self.state in (RunState.RUNNING, RunState.STOPPING):
            self.outcome = StopReason.CANCELLED
        return False

    def fail(self, error: Exception) -> None:
        """The work raised. A claimed turn answers `cancelled` (ACP: an abort that surfaces as an error is still
        `cancelled`); an undecided one fails with `error`; a decided outcome (SETTLING) or a sealed run stays."""
        if self.state is RunState.STOPPING:
            self.outcome = StopReason.CANCELLED
        elif self.state is RunState.RUNNING and self.outcome is None:
            self.error = error

    def work_ended(self) -> None:
        """The work's task returned, whatever the outcome (it may have been abandoned long before)."""
        self.work_done = True
        self._wake()

    def seal(self) -> None:
        """Raise the fence, right before the response is built: from here on nothing this run does reaches the
        client, and a cancel no longer touches it. A claimed turn's outcome is `cancelled` from now on."""
        if self.state is RunState.STOPPING:
            self.outcome = StopReason.CANCELLED
        self._move(_SEALABLE, RunState.SEALED)

    def end(self) -> None:
        """The response is queued: -> ENDED, from SEALED or, for a prompt its handler refused before it started
        (no credentials), from any earlier state. Idempotent: a late second end changes nothing."""
        if self.state is not RunState.ENDED:
            self._move(_ENDABLE, RunState.ENDED)


class RunRegistry:
    """The run registry: session id -> the running turn's RunContext. Holds no run state of its own.

    The cancel family, each synchronous and lock-free (a look-up, a mark, a scope cancelled; nothing awaited): a
    session's turn and everything admitted behind it (`interrupt`, `interrupt_all`), one prompt (`cancel_run`), one
    held prompt (`cancel_held`), one tool call (`tool_call_stop`) and one terminal (`terminal_stop`), each found by
    the ids the client names. No module but this one reaches into a run's cancellable state."""

    def __init__(self) -> None:
        self._runs: dict[str, RunContext] = {}

    def running(self, session_id: str) -> RunContext | None:
        return self._runs.get(session_id)

    @property
    def running_turns(self) -> int:
        return len(self._runs)

    def current(self) -> list[RunContext]:
        """The turns running now, one per session (a snapshot)."""
        return list(self._runs.values())

    def admit(
        self,
        session: Session,
        request_id: RequestId,
        prompt: Prompt,
        command: tuple[str, str] | None = None,
    ) -> RunContext:
        """Admit a prompt the moment its line is read. Synchronous on purpose (see the module docstring).

        A prompt for a busy session follows the session's policy (docs/interrupts.md, decision 1): `interrupt` cancels
        the running turn (and everything admitted before it) as a `session/cancel` read here would, then waits for the
        cleanup and runs; `queue` waits its turn, first in first out; `steer` waits too, marked so the running turn
        hands over to it at its next model-call boundary; `reject` is refused. A prompt for a turn that is already
        stopping waits for the cleanup and runs, whatever the policy.
        """
        current = self._runs.get(session.session_id)
        if current is None:
            run = RunContext(session, request_id, prompt, command=command)
            self._runs[session.session_id] = run
            return run
        stopping = current.state is RunState.STOPPING
        # Prompts already waiting were admitted while the turn was stopping (under `reject` nothing else waits).
        if session.prompt_policy is PromptPolicy.REJECT and not (stopping or session.waiting):
            raise PromptRejectedError("a prompt is already running in this session")
        if session.prompt_policy is PromptPolicy.INTERRUPT:
            self.interrupt(session.session_id)
        steers = session.prompt_policy is PromptPolicy.STEER and not stopping
        run = RunContext(session, request_id, prompt, command=command, steers=steers, state=RunState.QUEUED)
        session.waiting.append(run)
        return run

    @staticmethod
    def hand_over_due(session: Session) -> bool:
        """Should the session's running turn stop at this model-call boundary and hand over? Yes when the next
        prompt that will run is a steering one (a steering prompt claimed by a cancel will not run: skipped)."""
        for waiting in session.waiting:
            if waiting.state is RunState.QUEUED:
                return waiting.steers
        return False

    def interrupt(self, session_id: str) -> None:
        """Cancel the session's running turn and every prompt admitted behind it. Returns at once; idempotent;
        an unknown or idle session is a no-op."""
        run = self._runs.get(session_id)
        if run is None:
            return
        now = anyio.current_time()
        for waiting in run.session.waiting:
            waiting.claim_cancel(now)
        run.claim_cancel(now)

    def cancel_run(self, run: RunContext) -> None:
        """Cancel one prompt only (`$/cancel_request` naming it); other prompts of the session are untouched."""
        run.claim_cancel(anyio.current_time())

    def cancel_held(self, run: RunContext) -> bool:
        """Cancel one held prompt only (ACP v2 `$/cancel_request` naming it): a prompt admitted behind the session's
        work and not yet inserted (QUEUED) is claimed, and True. Any other prompt is left alone, and False: an
        inserted one is the session's work, whose only cancel is `interrupt`."""
        if run.state is not RunState.QUEUED:
            return False
        run.claim_cancel(anyio.current_time())
        return True

    @staticmethod
    def withdrawn(session: Session) -> list[RunContext]:
        """The session's held prompts a cancel claimed before they were inserted (`RunContext.withdrawn`) and that
        are not released yet, in the order they were admitted."""
        return [run for run in session.waiting if run.withdrawn]

    def tool_call_stop(self, session_id: str, call_id: str) -> Callable[[], None] | None:
        """What cancels one tool call alone (`tool_call/cancel`): the call `call_id`, cancellable and running in the
        session's running turn, unfenced; None when there is none (the call unknown, finished or not cancellable, the
        session idle). Only this session's turn is looked in. The stop is synchronous and idempotent: it cancels the
        call's scope and starts its cleanup deadline (runtime/call_stops.py); the caller makes it once its acceptance
        is queued, so that the acceptance precedes the call's final update."""
        run = self._unfenced(session_id)
        stop = None if run is None else run.cancellable_calls.get(call_id)
        return None if stop is None else stop.cancel

    def terminal_stop(self, session_id: str, terminal_id: str) -> Callable[[], None] | None:
        """What stops one display terminal's command alone (ACP v2 `terminal/cancel`): the terminal `terminal_id` of
        the session's running turn, unfenced, while its command runs (or is being spawned: then it is stopped the
        moment it runs); None when there is none. Only this session's turn is looked in, never another's. The stop is
        synchronous (it starts the process group's termination in a task of the connection); the caller makes it once
        its acceptance is queued."""
        run = self._unfenced(session_id)
        return None if run is None else run.terminal_stops.get(terminal_id)

    def _unfenced(self, session_id: str) -> RunContext | None:
        """The session's running turn, if its fence is not up: what a by-id cancel may still reach."""
        run = self._runs.get(session_id)
        return None if run is None or run.fenced else run

    def register_child(self, run: RunContext) -> None:
        """A subagent's turn, addressable by its own session id (docs/interrupts.md, decision 5)."""
        self._runs[run.session_id] = run

    def unregister_child(self, run: RunContext) -> None:
        if self._runs.get(run.session_id) is run:
            del self._runs[run.session_id]

    def interrupt_all(self) -> None:
        for session_id in list(self._runs):
            self.interrupt(session_id)

    def release(self, run: RunContext) -> None:
        """Called once the run's response is queued: end it and hand the session to the next waiting prompt.

        Identity-scoped: a run only ever removes its own registry entry, so a late finisher cannot clear a
        successor's (I19).
        """
        run.end()
        session = run.session
        if self._runs.get(session.session_id) is not run:
            if run in session.waiting:
                session.waiting.remove(run)  # answered while waiting (claimed by a cancel)
            return
        for service in session.services.values():
            service.turn_ended()
        while session.waiting:
            successor = session.waiting.popleft()
            if successor.hand_over():
                self._runs[session.session_id] = successor
                return
        del self._runs[session.session_id]

    def queued_prompts(self, sessions: list[Session]) -> int:
        return sum(len(session.waiting) for session in sessions)
