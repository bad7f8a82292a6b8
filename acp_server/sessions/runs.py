"""Sessions, the per-turn `RunContext`, and the run registry that routes a cancel by session id.

The defect this module exists to avoid (seed RFC-0023): an agent that keeps "the active run" in an instance field
cancels the wrong session, or nothing, when several sessions run at once, and an interrupt that takes a lock held
by the streaming turn never arrives. Here the `Agent` holds frozen configuration and one lookup table, session id ->
the running turn's `RunContext`; every piece of run state lives on that context, and `interrupt(session_id)` is
synchronous: look up, mark stopping, cancel the turn's scope, return. No lock, no await, no fallback to "the only
running session".

Admission happens when the reader reads the prompt's line, before any await (`admit`), so a cancel read after it,
even from the same write, always finds it: a cancel binds to exactly the prompts admitted before it (the epoch rule
of INTERRUPTS.md I10). Prompts admitted behind a running turn wait in the session's admission queue.

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
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import anyio

from acp_server.runtime.model import Message, StopReason
from acp_server.sessions.commands import ClientTools, Prompt, RequestId
from acp_server.settings.choices import PermissionMode, PromptPolicy

if TYPE_CHECKING:  # the store (and sqlite3) load only when a session needs them, never at start-up
    from acp_server.mcp_bridge.hub import McpHub
    from acp_server.store import TurnLog

__all__ = ["Agent", "PromptRejectedError", "RunContext", "RunState", "Session", "SessionService"]

log = logging.getLogger(__name__)

_run_ids = itertools.count(1)


class PromptRejectedError(Exception):
    """A prompt refused at admission (the `reject` policy); the protocol edge answers it as an invalid request."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class RunState(enum.Enum):
    ADMITTED = "admitted"  # read from the wire; not started (maybe waiting behind another turn)
    RUNNING = "running"
    STOPPING = "stopping"  # a cancel arrived; cleanup under way
    SETTLING = "settling"  # the outcome is decided; post-turn work before the response
    ENDED = "ended"  # answered


class SessionService(Protocol):
    """State a provider keeps per session (the scripted model's gate board), opaque to the session."""

    def turn_ended(self) -> None:
        """The session's running turn has ended (its response is queued)."""
        ...


@dataclass(eq=False)
class Session:
    """A conversation: its working directory, history and admission queue. Mutated only by its own turns, except
    the admission queue, which the reader and cancels also touch."""

    session_id: str
    cwd: Path
    additional_directories: tuple[Path, ...]
    mcp_servers: tuple[dict[str, Any], ...]
    history: list[Message] = field(default_factory=list)
    waiting: deque[RunContext] = field(default_factory=deque)
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
    title: str | None = None
    title_requested: bool = False
    # The last context usage the provider reported (tokens used, window), so a turn can compact before it starts.
    context_usage: tuple[int, int] | None = None
    # Set by session/close: the id is refused from then on, even while the close is still settling.
    closed: bool = False
    # Scopes of work the session does outside its turns (title generation); cancelled when the session closes.
    background: set[anyio.CancelScope] = field(default_factory=set)
    # The session's MCP servers (editor's and config file's), connecting in the background; None without any.
    mcp: McpHub | None = None


@dataclass(eq=False)
class RunContext:
    """Everything about one prompt turn. One-shot: created at admission, dropped after the response."""

    session: Session
    request_id: RequestId
    prompt: Prompt
    parent_session_id: str | None = None
    # Admitted under `steer` behind a running turn: that turn hands over to this prompt at its next model call.
    steers: bool = False
    run_id: int = field(default_factory=lambda: next(_run_ids))
    state: RunState = RunState.ADMITTED
    # A cancel claimed this turn before its outcome was decided: it answers `cancelled`, whatever surfaced.
    cancelled: bool = False
    # anyio clock time of the first cancel; the cleanup deadline runs from here and later cancels do not move it.
    cancelled_at: float | None = None
    scope: anyio.CancelScope = field(default_factory=anyio.CancelScope)
    # Set when this turn reaches the front of its session's admission queue.
    may_start: anyio.Event = field(default_factory=anyio.Event)
    # Set on a cancel, on the hand-over, and when the work ends: what the prompt handler waits for may have happened.
    wake: anyio.Event = field(default_factory=anyio.Event)
    work_done: anyio.Event = field(default_factory=anyio.Event)
    # Set once the run's response has been queued (see Agent.finish).
    ended: anyio.Event = field(default_factory=anyio.Event)
    # The fence: once True, nothing this run does reaches the client.
    closed: bool = False
    abandoned: bool = False
    pending_requests: set[int] = field(default_factory=set)
    # Tool calls announced to the client and not yet finished, with their titles.
    open_tool_calls: dict[str, str] = field(default_factory=dict)
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

    @property
    def session_id(self) -> str:
        return self.session.session_id

    def cleanup_deadline(self, grace: float) -> float:
        """The anyio clock time by which cleanup must be over: the first cancel plus the grace period."""
        return float("inf") if self.cancelled_at is None else self.cancelled_at + grace


class Agent:
    """The run registry: session id -> the running turn's RunContext. Holds no run state of its own."""

    def __init__(self) -> None:
        self._runs: dict[str, RunContext] = {}

    def running(self, session_id: str) -> RunContext | None:
        return self._runs.get(session_id)

    @property
    def running_turns(self) -> int:
        return len(self._runs)

    def admit(self, session: Session, request_id: RequestId, prompt: Prompt) -> RunContext:
        """Admit a prompt the moment its line is read. Synchronous on purpose (see the module docstring).

        A prompt for a busy session follows the session's policy (INTERRUPTS.md 6.1): `interrupt` cancels the running
        turn (and everything admitted before it) as a `session/cancel` read here would, then waits for the cleanup
        and runs; `queue` waits its turn, first in first out; `steer` waits too, marked so the running turn hands
        over to it at its next model-call boundary; `reject` is refused. A prompt for a turn that is already stopping
        waits for the cleanup and runs, whatever the policy.
        """
        current = self._runs.get(session.session_id)
        run = RunContext(session, request_id, prompt)
        if current is None:
            self._runs[session.session_id] = run
            run.may_start.set()
            return run
        stopping = current.state is RunState.STOPPING
        # Prompts already waiting were admitted while the turn was stopping (under `reject` nothing else waits).
        if session.prompt_policy is PromptPolicy.REJECT and not (stopping or session.waiting):
            raise PromptRejectedError("a prompt is already running in this session")
        if session.prompt_policy is PromptPolicy.INTERRUPT:
            self.interrupt(session.session_id)
        run.steers = session.prompt_policy is PromptPolicy.STEER and not stopping
        session.waiting.append(run)
        return run

    @staticmethod
    def hand_over_due(session: Session) -> bool:
        """Should the session's running turn stop at this model-call boundary and hand over? Yes when the next
        prompt that will run is a steering one (a steering prompt claimed by a cancel will not run: skipped)."""
        for waiting in session.waiting:
            if waiting.state is RunState.ADMITTED and not waiting.cancelled:
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
            self._cancel(waiting, now)
        self._cancel(run, now)

    def cancel_run(self, run: RunContext) -> None:
        """Cancel one prompt only (`$/cancel_request` naming it); other prompts of the session are untouched."""
        self._cancel(run, anyio.current_time())

    def register_child(self, run: RunContext) -> None:
        """A subagent's turn, addressable by its own session id (INTERRUPTS.md §6.5)."""
        self._runs[run.session_id] = run

    def unregister_child(self, run: RunContext) -> None:
        if self._runs.get(run.session_id) is run:
            del self._runs[run.session_id]

    def interrupt_all(self) -> None:
        for session_id in list(self._runs):
            self.interrupt(session_id)

    @staticmethod
    def _cancel(run: RunContext, now: float) -> None:
        if run.state is RunState.ENDED:
            return
        if run.cancelled_at is None:
            run.cancelled_at = now
        if run.state in (RunState.ADMITTED, RunState.RUNNING):
            run.cancelled = True
            run.state = RunState.STOPPING
            run.scope.cancel()
        # In SETTLING the outcome is decided and stays; the cancel only starts the cleanup deadline.
        run.wake.set()

    def finish(self, run: RunContext) -> None:
        """Called once the run's response is queued: hand the session to the next waiting prompt.

        Identity-scoped: a run only ever removes its own registry entry, so a late finisher cannot clear a
        successor's (I19).
        """
        run.state = RunState.ENDED
        run.ended.set()
        session = run.session
        if self._runs.get(session.session_id) is not run:
            if run in session.waiting:
                session.waiting.remove(run)  # answered while waiting (claimed by a cancel)
            return
        for service in session.services.values():
            service.turn_ended()
        while session.waiting:
            successor = session.waiting.popleft()
            if successor.state is not RunState.ENDED:
                self._runs[session.session_id] = successor
                successor.may_start.set()
                successor.wake.set()
                return
        del self._runs[session.session_id]

    def queued_prompts(self, sessions: list[Session]) -> int:
        return sum(len(session.waiting) for session in sessions)
