"""The cancel family beside `RunRegistry.interrupt` (agent/sessions/runs.py): one tool call, one terminal, one held
prompt, each found by the ids the client names, in the session it names only, synchronously.

The end-to-end tests (test_v2_cancel.py, test_v2_terminals.py, test_v2_invariants.py) prove what a client sees; these
pin down the look-ups themselves, including the cases a client can reach only by a race."""

from __future__ import annotations

import inspect
from pathlib import Path

import pytest

from acp_server.agent.sessions.inputs import Prompt
from acp_server.agent.sessions.runs import RunContext, RunRegistry, RunState, Session
from acp_server.runtime.call_stops import CallStop
from acp_server.settings.choices import PromptPolicy

pytestmark = pytest.mark.timeout(30)


def make_session(name: str = "s") -> Session:
    return Session(name, Path("/tmp"), (), ())


def prompt() -> Prompt:
    return Prompt("go", 1)


def running(runs: RunRegistry, session: Session) -> RunContext:
    run = runs.admit(session, 1, prompt())
    assert run.start()
    return run


def test_each_cancel_of_the_family_is_synchronous() -> None:
    """Like `interrupt`: called on the reader or right after a response is queued, never awaited."""
    for name in ("interrupt", "cancel_run", "cancel_held", "tool_call_stop", "terminal_stop", "withdrawn"):
        assert not inspect.iscoroutinefunction(getattr(RunRegistry, name)), name


async def test_a_tool_call_stop_cancels_that_call_alone_and_only_in_the_session_named() -> None:
    runs, a, b = RunRegistry(), make_session("a"), make_session("b")
    run_a, run_b = running(runs, a), running(runs, b)
    first, second, other = CallStop(grace=1.0), CallStop(grace=1.0), CallStop(grace=1.0)
    run_a.cancellable_calls.update({"call_1": first, "call_2": second})
    run_b.cancellable_calls["call_3"] = other
    stop = runs.tool_call_stop("a", "call_1")
    assert stop is not None
    assert not first.cancel_called  # found, not made: the caller makes it once `{}` is queued
    stop()
    stop()  # idempotent
    assert first.cancel_called and first.asked_at is not None
    assert not second.cancel_called and not other.cancel_called
    assert not run_a.scope.cancel_called and run_a.state is RunState.RUNNING  # the turn goes on
    # An id no running call of that session has is nothing: never the one call running there, nor another session's.
    assert runs.tool_call_stop("a", "call_bogus") is None
    assert runs.tool_call_stop("b", "call_bogus") is None
    assert runs.tool_call_stop("a", "call_3") is None
    assert runs.tool_call_stop("idle", "call_1") is None


async def test_a_terminal_stop_is_found_only_in_the_session_named() -> None:
    runs, a, b = RunRegistry(), make_session("a"), make_session("b")
    running(runs, a)
    run_b = running(runs, b)
    stopped: list[str] = []
    run_b.terminal_stops["term_b"] = lambda: stopped.append("term_b")
    assert runs.terminal_stop("a", "term_b") is None  # B's command runs on
    stop = runs.terminal_stop("b", "term_b")
    assert stop is not None and stopped == []
    stop()
    assert stopped == ["term_b"]
    assert runs.terminal_stop("b", "term_unknown") is None


async def test_nothing_of_a_fenced_turn_is_reachable_by_id() -> None:
    runs, session = RunRegistry(), make_session()
    run = running(runs, session)
    run.cancellable_calls["call_1"] = CallStop(grace=1.0)
    run.terminal_stops["term_1"] = lambda: None
    run.settle(None)
    run.seal()  # the fence is up: its response is being queued
    assert runs.tool_call_stop(session.session_id, "call_1") is None
    assert runs.terminal_stop(session.session_id, "term_1") is None


async def test_cancel_held_claims_a_held_prompt_alone_and_never_the_inserted_work() -> None:
    runs, session = RunRegistry(), make_session()
    session.prompt_policy = PromptPolicy.QUEUE
    work = runs.admit(session, 1, prompt())
    assert work.start()
    held, behind = runs.admit(session, 2, prompt()), runs.admit(session, 3, prompt())
    assert (held.state, behind.state) == (RunState.QUEUED, RunState.QUEUED)
    assert not runs.cancel_held(work)  # the session's work: only `interrupt` cancels it
    assert work.state is RunState.RUNNING and not work.scope.cancel_called
    assert runs.cancel_held(held)
    assert held.cancelled and held.withdrawn and not behind.cancelled
    assert runs.withdrawn(session) == [held]
    assert not runs.cancel_held(held)  # claimed already: nothing more
    runs.interrupt(session.session_id)  # the work and everything held behind it, in admission order
    assert runs.withdrawn(session) == [held, behind]
    assert not work.withdrawn  # inserted: cancelled, not withdrawn


async def test_a_prompt_inserted_at_its_hand_over_and_then_cancelled_is_not_withdrawn() -> None:
    runs, session = RunRegistry(), make_session()
    session.prompt_policy = PromptPolicy.QUEUE
    work = running(runs, session)
    held = runs.admit(session, 2, prompt())
    work.settle(None)
    work.seal()
    runs.release(work)  # the session is handed to the held prompt: inserted
    assert held.state is RunState.ADMITTED
    assert not runs.cancel_held(held)
    runs.interrupt(session.session_id)
    assert held.cancelled and not held.withdrawn and runs.withdrawn(session) == []
