"""Unit tests where the logic is intricate: framing, classification, the run registry, scripts, sealed history.

The end-to-end tests prove the behaviour over stdio; these pin down the edge cases of each piece directly.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import anyio.lowlevel
import pytest

from acp_server.agent.sessions.inputs import Prompt
from acp_server.agent.sessions.runs import RunContext, RunRegistry, RunState, Session
from acp_server.agent.sessions.turn import _sealed_history
from acp_server.errors import ScriptError, TransitionError
from acp_server.jsonrpc.rpc import (
    MAX_BATCH_ENTRIES,
    ErrorCode,
    IncomingBatch,
    IncomingNotification,
    IncomingRequest,
    IncomingResponse,
    InvalidLine,
    classify,
    is_batch,
)
from acp_server.jsonrpc.transport import LINES_PER_BATCH, Oversized, _InputLines, _LineSplitter
from acp_server.protocol.prompts import prompt_input
from acp_server.protocol.schema import PromptRequest
from acp_server.runtime.model import Message, StopReason, ToolCall
from acp_server.runtime.providers.echo import _chunks
from acp_server.runtime.providers.scripted import parse_script
from acp_server.settings.choices import PromptPolicy


def split(chunks: list[bytes], limit: int = 10) -> list[bytes | Oversized]:
    lines = _InputLines(-1, lambda: None)
    splitter = _LineSplitter(lines, limit)
    for chunk in chunks:
        splitter.data_received(chunk)
    splitter.eof_received()
    return list(lines._lines)


def test_lines_split_across_reads_are_joined() -> None:
    assert split([b"ab", b"c\nde", b"f\n"]) == [b"abc", b"def"]


def test_oversized_line_is_skipped_whole_and_the_next_line_survives() -> None:
    assert split([b"0123456", b"789abcdef", b"xyz\nok\n"]) == [Oversized(19), b"ok"]
    assert split([b"0123456789abc\nok\n"]) == [Oversized(13), b"ok"]


def test_blank_lines_are_ignored_and_a_last_line_without_newline_counts() -> None:
    assert split([b"\n \r\n", b"a\n", b"last"]) == [b"a", b"last"]


async def test_lines_already_read_are_handed_over_in_bounded_batches_not_one_per_loop_iteration() -> None:
    """With a thousand sessions busy, one event-loop iteration per line let a cancel wait a second behind the prompts
    written before it; a batch is bounded, so a flood still lets the tasks its lines started run in between."""
    lines = _InputLines(-1, lambda: None)
    for index in range(LINES_PER_BATCH * 2 + 1):
        lines.put(b"%d" % index)
    lines.close()
    iterations = 0
    seen_at: list[int] = []

    async def tick() -> None:
        nonlocal iterations
        while True:
            iterations += 1
            await anyio.lowlevel.checkpoint()

    async with anyio.create_task_group() as tg:
        tg.start_soon(tick)
        await anyio.lowlevel.checkpoint()
        async for _ in lines.lines():
            seen_at.append(iterations)
        tg.cancel_scope.cancel()
    batches = [seen_at.count(at) for at in sorted(set(seen_at))]
    assert batches == [LINES_PER_BATCH, LINES_PER_BATCH, 1]


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        (b"{", InvalidLine(ErrorCode.PARSE_ERROR, "")),
        (b"[]", InvalidLine(ErrorCode.INVALID_REQUEST, "")),
        (b'"x"', InvalidLine(ErrorCode.INVALID_REQUEST, "")),
        (b'{"id":3,"method":"m"}', InvalidLine(ErrorCode.INVALID_REQUEST, "", 3)),
        (b'{"jsonrpc":"2.0","id":"a","method":7}', InvalidLine(ErrorCode.INVALID_REQUEST, "", "a")),
        (b'{"jsonrpc":"2.0","id":1.5,"method":"m"}', InvalidLine(ErrorCode.INVALID_REQUEST, "")),
        (b'{"jsonrpc":"2.0","id":true,"method":"m"}', InvalidLine(ErrorCode.INVALID_REQUEST, "")),
        (b'{"jsonrpc":"2.0","id":1,"method":"m","params":"x"}', InvalidLine(ErrorCode.INVALID_REQUEST, "", 1)),
        (b'{"jsonrpc":"2.0","method":"m","params":5}', IncomingNotification("m", 5)),
        (b'{"jsonrpc":"2.0","id":null,"result":{}}', IncomingResponse(None, {}, None)),
    ],
)
def test_classify_sorts_lines_as_json_rpc_says(line: bytes, expected: Any) -> None:
    got = classify(line)
    assert type(got) is type(expected)
    if isinstance(expected, InvalidLine):
        assert isinstance(got, InvalidLine)
        assert (got.code, got.id) == (expected.code, expected.id)
        assert got.message and "\n" not in got.message
    else:
        assert got == expected


def test_classify_keeps_a_null_id_request_as_a_request() -> None:
    got = classify(b'{"jsonrpc":"2.0","id":null,"method":"m"}')
    assert isinstance(got, IncomingRequest)
    assert got.id is None


def test_classify_splits_a_batch_into_its_entries_each_classified_as_a_line_would_be() -> None:
    """JSON-RPC 2.0 §6: an entry that is no object (a number, a boolean, null, an array) is its own -32600 with id
    null; the others are what they would be on a line of their own, in order."""
    got = classify(
        b'[17, true, null, [1], {"jsonrpc":"2.0","id":1,"method":"m"}, {"jsonrpc":"2.0","method":"n"},'
        b' {"jsonrpc":"2.0","id":2,"result":{}}, {"id":3,"method":"m"}]'
    )
    assert isinstance(got, IncomingBatch)
    kinds = [(type(entry).__name__, getattr(entry, "id", None)) for entry in got.entries]
    assert kinds == [
        ("InvalidLine", None),
        ("InvalidLine", None),
        ("InvalidLine", None),
        ("InvalidLine", None),
        ("IncomingRequest", 1),
        ("IncomingNotification", None),
        ("IncomingResponse", 2),
        ("InvalidLine", 3),  # no "jsonrpc": "2.0", its id echoed as on a line of its own
    ]
    assert all(entry.code == ErrorCode.INVALID_REQUEST for entry in got.entries if isinstance(entry, InvalidLine))
    nested = got.entries[3]
    assert isinstance(nested, InvalidLine) and "batch entry" in nested.message


def test_classify_refuses_an_empty_batch_and_one_over_the_bound_whole() -> None:
    assert classify(b"[]") == InvalidLine(ErrorCode.INVALID_REQUEST, "Invalid request: an empty batch")
    over = classify(b"[" + b",".join([b"1"] * (MAX_BATCH_ENTRIES + 1)) + b"]")
    assert isinstance(over, InvalidLine) and over.id is None and str(MAX_BATCH_ENTRIES) in over.message
    full = classify(b"[" + b",".join([b"1"] * MAX_BATCH_ENTRIES) + b"]")
    assert isinstance(full, IncomingBatch) and len(full.entries) == MAX_BATCH_ENTRIES


@pytest.mark.parametrize(
    ("data", "batch"),
    [(b"[]", True), (b" \r\n\t[1]", True), (b'{"id":[1]}', False), (b"", False), (b"  ", False), (b"1", False)],
)
def test_is_batch_tells_an_array_by_its_first_byte(data: bytes, batch: bool) -> None:
    assert is_batch(data) is batch


def make_session(name: str = "s") -> Session:
    return Session(name, Path("/tmp"), (), ())


def prompt(session: Session) -> Prompt:
    """An empty prompt (the core's command; the protocol edge parses `session/prompt` into these)."""
    return prompt_input(PromptRequest.model_validate({"sessionId": session.session_id, "prompt": []}))


async def test_interrupt_marks_stopping_cancels_the_scope_and_is_idempotent() -> None:
    agent, session = RunRegistry(), make_session()
    run = agent.admit(session, 1, prompt(session))
    agent.interrupt(session.session_id)
    first = run.cancelled_at
    agent.interrupt(session.session_id)
    assert (run.state, run.cancelled, run.scope.cancel_called) == (RunState.STOPPING, True, True)
    assert run.cancelled_at == first  # the deadline runs from the first cancel


async def test_interrupt_of_unknown_or_idle_sessions_touches_nothing() -> None:
    agent, a, b = RunRegistry(), make_session("a"), make_session("b")
    run = agent.admit(a, 1, prompt(a))
    agent.interrupt("nope")
    agent.interrupt(b.session_id)
    assert not run.cancelled and run.state is RunState.ADMITTED


async def test_busy_session_rejects_a_second_prompt_but_queues_one_behind_a_stopping_turn() -> None:
    agent, session = RunRegistry(), make_session()
    session.prompt_policy = PromptPolicy.REJECT
    first = agent.admit(session, 1, prompt(session))
    with pytest.raises(Exception, match="already running"):
        agent.admit(session, 2, prompt(session))
    agent.interrupt(session.session_id)
    waiting = agent.admit(session, 3, prompt(session))
    assert list(session.waiting) == [waiting] and not waiting.cancelled
    assert waiting.state is RunState.QUEUED
    woken = waiting._changed  # what its prompt handler waits on
    agent.release(first)
    assert agent.running(session.session_id) is waiting
    assert (waiting.state, woken.is_set()) == (RunState.ADMITTED, True)


async def test_a_cancel_claims_waiting_prompts_admitted_before_it_only() -> None:
    agent, session = RunRegistry(), make_session()
    first = agent.admit(session, 1, prompt(session))
    agent.interrupt(session.session_id)
    claimed = agent.admit(session, 2, prompt(session))
    agent.interrupt(session.session_id)
    later = agent.admit(session, 3, prompt(session))
    assert claimed.cancelled and not later.cancelled
    agent.release(claimed)  # answered early, while still waiting
    assert list(session.waiting) == [later]
    agent.release(first)
    assert agent.running(session.session_id) is later


async def test_release_only_removes_its_own_registry_entry() -> None:
    agent, session = RunRegistry(), make_session()
    first = agent.admit(session, 1, prompt(session))
    agent.release(first)
    second = agent.admit(session, 2, prompt(session))
    agent.release(first)  # a late, second release of the old run
    assert agent.running(session.session_id) is second


async def test_cancel_in_the_settlement_window_keeps_the_decided_outcome() -> None:
    agent, session = RunRegistry(), make_session()
    run = agent.admit(session, 1, prompt(session))
    assert run.start() and run.settle(StopReason.END_TURN)
    woken = run._changed  # what its prompt handler waits on
    agent.interrupt(session.session_id)
    assert run.state is RunState.SETTLING and run.outcome == "end_turn"
    assert not run.cancelled and not run.scope.cancel_called
    assert run.cancelled_at is not None and woken.is_set()


async def test_transitions_refuse_a_state_they_do_not_leave() -> None:
    agent, session = RunRegistry(), make_session()
    session.prompt_policy = PromptPolicy.QUEUE
    first = agent.admit(session, 1, prompt(session))
    queued = agent.admit(session, 2, prompt(session), ("clear", ""))
    assert (queued.state, queued.command) == (RunState.QUEUED, ("clear", ""))
    with pytest.raises(TransitionError):
        queued.start()  # its predecessor has not handed the session over
    with pytest.raises(TransitionError):
        queued.seal()  # nothing to seal: it never ran, and no cancel claimed it
    assert queued.state is RunState.QUEUED
    assert first.start()
    with pytest.raises(TransitionError):
        first.start()
    assert first.settle(StopReason.END_TURN)
    first.seal()
    assert first.fenced and not first.cancelled
    with pytest.raises(TransitionError):
        first.seal()


async def test_a_claimed_turn_answers_cancelled_and_a_sealed_one_decides_nothing_more() -> None:
    agent, session = RunRegistry(), make_session()
    run = agent.admit(session, 1, prompt(session))
    assert run.start()
    agent.interrupt(session.session_id)
    assert not run.settle(
        StopReason.END_TURN
    )  # the cancel came first: the outcome is `cancelled`, whatever the work says
    assert run.outcome == "cancelled"
    run.seal()
    assert run.fenced and run.cancelled
    run.fail(RuntimeError("a late error of abandoned work"))
    assert not run.settle(StopReason.END_TURN)
    assert (run.outcome, run.error, run.state) == ("cancelled", None, RunState.SEALED)
    agent.interrupt(session.session_id)  # past cancelling: a no-op
    assert run.state is RunState.SEALED
    agent.release(run)
    assert (run.state, agent.running(session.session_id)) == (RunState.ENDED, None)


async def test_a_prompt_claimed_before_it_started_never_starts() -> None:
    agent, session = RunRegistry(), make_session()
    run = agent.admit(session, 1, prompt(session))
    agent.interrupt(session.session_id)
    assert not run.start() and run.state is RunState.STOPPING
    run.seal()
    assert run.outcome == "cancelled" and run.fenced


@pytest.mark.parametrize(
    ("script", "problem"),
    [
        ({"say": "x"}, "list of steps"),
        ([{"say": "x", "think": "y"}], "step 0: needs exactly one"),
        ([{"say": "x"}, {"sleep": "1"}], "step 1: 'sleep' takes a number"),
        ([{"stop": "done"}], "stop takes one of"),
        ([{"say": "x", "repeat": 0}], "repeat takes a positive integer"),
        ([{"tool": "t", "args": []}], "args takes an object"),
        ([{"gate": "g", "colour": 1}], "unexpected key"),
        ([{"say": "x", "every": -1}], "every takes a number of seconds"),
        ([{"say": "x", "every": True}], "every takes a number of seconds"),
        ([{"sleep": 1, "every": 0.1}], "unexpected key"),
    ],
)
def test_a_bad_script_is_refused_naming_the_step(script: Any, problem: str) -> None:
    with pytest.raises(ScriptError, match=problem):
        parse_script(script)


@pytest.mark.parametrize("text", ["", "one", "a b c " * 100, "x" * 500, "word " * 7 + "y" * 200])
def test_echo_chunks_rejoin_to_the_original_and_stay_small(text: str) -> None:
    pieces = _chunks(text)
    assert "".join(pieces) == text
    assert all(0 < len(piece) <= 48 for piece in pieces)


async def test_sealed_history_keeps_a_reply_cut_off_mid_stream_as_one_assistant_message() -> None:
    session = make_session()
    run = RunContext(session, 1, prompt(session))
    run.messages = [Message("user", "earlier"), Message("assistant", "before"), Message("user", "go")]
    run.turn_start = 3
    run.replies_started = 1
    run.streamed_text = ["half ", "an answer"]
    sealed = _sealed_history(run, "cancelled")
    assert sealed[3:] == [Message("assistant", "half an answer\n\n[cancelled]")]
    run.messages.append(Message("assistant", "written later by an abandoned run"))
    assert len(sealed) == 4  # a copy: the run's own list may still grow


async def test_sealed_history_answers_tool_calls_right_after_their_reply() -> None:
    session = make_session()
    run = RunContext(session, 1, prompt(session))
    first, second = ToolCall("c1", "read_file", {}), ToolCall("c2", "grep", {})
    run.messages = [
        Message("user", "go"),
        Message("assistant", "let me look", (first, second)),
        Message("tool", "file text", tool_call_id="c1"),
    ]
    run.turn_start = 1
    run.replies_started = 1
    run.streamed_text = ["let me look"]  # the reply completed; its text is already recorded
    assert _sealed_history(run, "cancelled")[1:] == [
        Message("assistant", "let me look", (first, second)),
        Message("tool", "file text", tool_call_id="c1"),
        Message("tool", "[cancelled]", tool_call_id="c2"),
        Message("assistant", "[cancelled]"),
    ]


async def test_sealed_history_of_a_completed_turn_is_the_turn_as_it_was() -> None:
    session = make_session()
    run = RunContext(session, 1, prompt(session))
    run.messages = [Message("user", "go"), Message("assistant", "done")]
    assert _sealed_history(run, None) == run.messages


async def test_interrupt_policy_cancels_the_running_turn_and_everything_admitted_before() -> None:
    agent, session = RunRegistry(), make_session()
    first = agent.admit(session, 1, prompt(session))
    second = agent.admit(session, 2, prompt(session))
    assert first.cancelled and first.state is RunState.STOPPING and not second.cancelled
    third = agent.admit(session, 3, prompt(session))
    assert second.cancelled and not third.cancelled  # P2 superseded by P3, possibly without starting
    assert list(session.waiting) == [second, third]


async def test_queue_policy_waits_first_in_first_out_and_cancels_nothing() -> None:
    agent, session = RunRegistry(), make_session()
    session.prompt_policy = PromptPolicy.QUEUE
    first = agent.admit(session, 1, prompt(session))
    second = agent.admit(session, 2, prompt(session))
    third = agent.admit(session, 3, prompt(session))
    assert not any(run.cancelled for run in (first, second, third))
    agent.release(first)
    assert agent.running(session.session_id) is second
    agent.release(second)
    assert agent.running(session.session_id) is third
