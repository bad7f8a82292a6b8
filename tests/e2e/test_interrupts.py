"""The cancellation invariants of docs/interrupts.md, black-box with the scripted model, over every transport.

Where ACP v1 and v2 make the same promise in two wire shapes, the test states it once and takes the `acp` fixture:
it runs as `v1` and as `v2` (ACP-V2.md §20.7: the v1 prompt's answer is v2's `idle`; a tool call a cancel ends is v1
`failed`, v2 `cancelled`), the shapes kept in tests/support/versions.py. What one version alone has stays
single-version here (v1's `reject` policy, `$/cancel_request` of a running prompt) and in test_v2_invariants.py /
test_v2_cancel.py (held prompts, the v2 cancel family). Every test that reaches its server through the fixtures runs
over each transport of tests/support/harness.py's TRANSPORTS (stdio today).

Durations are scaled down and latency bounds up, as "Timing in tests" allows (see tests/support/harness.py). Every test
also gets the common checks at teardown: one response per request, schema-valid output, no turn update or client
request for a session with no unanswered prompt, clean stderr, exit 0 in time.
"""

from __future__ import annotations

import asyncio
import os
import random
import time
from collections import Counter
from typing import Any

import orjson
import pytest

from tests.conftest import StartServer
from tests.support.harness import (
    GRACE,
    T_ACK,
    T_ESC,
    T_EXIT,
    T_START,
    TURN_SCOPED_V2,
    W_QUIET,
    RawClient,
    scaled,
    wait_for_exit_undrained,
)
from tests.support.versions import Acp, AcpV2

# The invariants hold on every transport: each test that reaches a server through the fixtures runs over each.
pytestmark = pytest.mark.every_transport


def position(client: RawClient, message: dict[str, Any]) -> int:
    return next(i for i, m in enumerate(client.received) if m is message)


def after(client: RawClient, message: dict[str, Any]) -> list[dict[str, Any]]:
    return client.received[position(client, message) + 1 :]


def chunk(text: str) -> Any:
    """A predicate: an agent_message_chunk with exactly this text."""

    def matches(message: dict[str, Any]) -> bool:
        update = message.get("params", {}).get("update", {})
        return bool(update.get("sessionUpdate") == "agent_message_chunk" and update["content"].get("text") == text)

    return matches


def of_session(session_id: str) -> Any:
    """A predicate: a `session/update` of this session."""

    def matches(message: dict[str, Any]) -> bool:
        return bool(message.get("method") == "session/update" and message["params"]["sessionId"] == session_id)

    return matches


def not_probe(message: dict[str, Any]) -> bool:
    return message.get("method") != "_scripted/probe"


def mentions_session(message: dict[str, Any], session_id: str) -> bool:
    return message.get("method") != "_scripted/probe" and session_id.encode() in repr(message).encode()


@pytest.mark.at_once
async def test_cancel_during_model_stream_answers_cancelled_and_stops_the_stream(acp: Acp) -> None:
    """I1: the model step exits `cancelled` before the work ends (v1: the prompt answered, v2: the idle) saying
    `cancelled` within T_ACK; opening the gate later produces nothing for the session."""
    server = acp.client
    a = await acp.new_session()
    turn = await acp.prompt(a, [{"say": "a"}, {"gate": "g1"}, {"say": "b"}])
    await server.probe("gate_reached", sessionId=a, gate="g1")
    t0 = await server.cancel(a)
    end = await acp.end(turn)
    assert server.arrival_time(end) - t0 <= T_ACK
    acp.assert_stopped(end, "cancelled")
    exited = await server.probe("step_exited", sessionId=a, reason="cancelled")
    assert position(server, exited) < position(server, end)
    await server.release(a, "g1")  # the late gate opens: nothing may happen
    await server.quiet(W_QUIET, lambda m: m in after(server, end) and mentions_session(m, a))
    assert server.texts(a) == ["a"]


async def test_a_paced_stream_is_cut_off_between_chunks_by_a_cancel(acp: Acp) -> None:
    """The scripted model's `every` streams like a model at 1/every chunks per second; a cancel lands between two
    chunks and no chunk of that turn follows its end (v1: its response, v2: its idle)."""
    server = acp.client
    a = await acp.new_session()
    turn = await acp.prompt(a, [{"say": "p ", "repeat": 1000, "every": 0.02}])
    await server.wait_for(chunk("p "))
    t0 = await server.cancel(a)
    end = await acp.end(turn)
    assert server.arrival_time(end) - t0 <= T_ACK
    acp.assert_stopped(end, "cancelled")
    await asyncio.sleep(0.1)  # five chunk intervals: a stream still running would show
    assert not [m for m in after(server, end) if m.get("method") == "session/update"]
    assert 1 <= len(server.updates(a, "agent_message_chunk")) < 1000


@pytest.mark.at_once
async def test_abort_surfacing_as_an_error_still_answers_cancelled(acp: Acp) -> None:
    """I2 (A): an HTTP-client-style error raised by the abort is still `cancelled` (v1: a result, v2: an idle
    `cancelled` with no error), within T_ACK."""
    server = acp.client
    a = await acp.new_session()
    turn = await acp.prompt(a, [{"gate_raise": "g1"}])
    await server.probe("gate_reached", sessionId=a, gate="g1")
    t0 = await server.cancel(a)
    end = await acp.end(turn)
    acp.assert_stopped(end, "cancelled")
    assert server.arrival_time(end) - t0 <= T_ACK


async def test_model_failure_without_cancel_answers_an_error_not_end_turn(acp: Acp) -> None:
    """I2 (B): a model failure is an error, never `end_turn` (v1: the prompt answered with it; v2, §6.4, §23 Q14:
    the prompt was answered at insertion, the idle says `error` with it); the session goes on (I19)."""
    server = acp.client
    b = await acp.new_session()
    error = acp.failure(await acp.end(await acp.prompt(b, [{"say": "x"}, {"fail": "boom"}])))
    assert error["code"] == -32603
    assert "boom" in error["message"]
    assert server.texts(b) == ["x"]
    await acp.stopped(await acp.prompt(b, [{"say": "ok"}]), "end_turn")


@pytest.mark.parametrize("cancelled_first_started", [True, False], ids=["first-started", "last-started"])
@pytest.mark.at_once
async def test_cancel_is_routed_by_session_id_and_leaves_other_sessions_running(
    acp: Acp, cancelled_first_started: bool
) -> None:
    """I3, run both ways so a single "active run" slot overwritten by the newest run is caught: only the named
    session's work ends `cancelled`; the other runs on to `end_turn`; nothing for the cancelled session after its end;
    no update crosses sessions; both sessions run their next prompt normally."""
    server = acp.client
    first, second = await acp.new_session(), await acp.new_session()
    turns = {}
    for session, tag in ((first, "1"), (second, "2")):
        turns[session] = await acp.prompt(session, [{"say": f"{tag}a"}, {"gate": "g"}, {"say": f"{tag}b"}])
        await server.probe("gate_reached", sessionId=session, gate="g")
    victim, survivor = (first, second) if cancelled_first_started else (second, first)
    t0 = await server.cancel(victim)
    cancelled = await acp.stopped(turns[victim], "cancelled")
    assert server.arrival_time(cancelled) - t0 <= T_ACK
    t2 = await server.release(survivor, "g")
    finished = await acp.stopped(turns[survivor], "end_turn")
    assert server.arrival_time(finished) - t2 <= T_ACK
    await server.probe("step_exited", sessionId=survivor, reason="completed", step=1)
    assert not any(
        m.get("params", {}).get("sessionId") == victim
        for m in after(server, cancelled)
        if m.get("method") == "session/update"
    )
    for session in (first, second):  # no cancelled state left behind on either session
        await acp.stopped(await acp.prompt(session, [{"say": "ok"}]), "end_turn")
    for update_message in (m for m in server.received if m.get("method") == "session/update"):
        content = update_message["params"]["update"].get("content", {})
        text = content.get("text", "") if isinstance(content, dict) else ""
        owner = first if text.startswith("1") else second if text.startswith("2") else None
        if owner is not None:
            assert update_message["params"]["sessionId"] == owner


async def test_cancel_never_blocks_other_requests_while_the_turn_cleans_up(acp: Acp) -> None:
    """I4: accepted at once, settled later; other sessions and new sessions are served meanwhile, and both come
    before the cancelled work's end."""
    server = acp.client
    a, b = await acp.new_session(), await acp.new_session()
    turn_a = await acp.prompt(a, [{"tool": "test_hang_finalizer", "args": {"s": 30, "f": 60}}])
    await server.probe("tool_started", sessionId=a)
    turn_b = await acp.prompt(b, [{"gate": "gB"}, {"say": "b"}])
    await server.probe("gate_reached", sessionId=b, gate="gB")
    t0 = await server.cancel(a)
    await asyncio.sleep(0.01)
    new_session = await server.call("session/new", acp.session_new_params())
    assert "result" in new_session
    assert server.arrival_time(new_session) - t0 <= scaled(0.5)  # target 100 ms, 5x for CI
    t_open = await server.release(b, "gB")
    done_b = await acp.stopped(turn_b, "end_turn")
    assert server.arrival_time(done_b) - t_open <= T_ACK
    done_a = await acp.stopped(turn_a, "cancelled", timeout=T_ESC + 1)
    assert server.arrival_time(done_a) - t0 <= T_ESC
    assert position(server, new_session) < position(server, done_a)
    assert position(server, done_b) < position(server, done_a)


@pytest.mark.at_once
async def test_cancel_during_a_cooperative_tool_fails_its_tool_call_and_stops_the_turn(server: RawClient) -> None:
    """I5 with a test tool"""
    a = await server.new_session()
    prompt = await server.prompt(a, [{"tool": "test_sleep", "args": {"s": 30}}, {"say": "after"}])
    started = await server.probe("tool_started", sessionId=a)
    call_id = started["params"]["toolCallId"]
    t0 = await server.cancel(a)
    response = await server.response(prompt)
    assert response["result"] == {"stopReason": "cancelled"}
    assert server.arrival_time(response) - t0 <= T_ACK
    await server.probe("tool_exited", sessionId=a, toolCallId=call_id, reason="cancelled")
    final = [u for u in server.updates(a, "tool_call_update") if u["toolCallId"] == call_id][-1]
    assert final["status"] == "failed"
    assert server.texts(a) == []
    assert not [
        m
        for m in server.received
        if m.get("params", {}).get("event") == "step_started" and m["params"].get("action") == "say"
    ]


async def test_tool_ignoring_cancel_is_abandoned_at_the_deadline_and_fenced(acp: Acp) -> None:
    """I6: abandoned at the cleanup deadline (the probe before the end of the work), the tool call ends as a cancel
    leaves it (v1 `failed`, v2 `cancelled`), the end says `cancelled` within T_ESC; the next prompt's first chunk
    within T_START; when the zombie tool returns, nothing of it (its call id, its next step's text) follows, and it
    takes no further model step."""
    server = acp.client
    a = await acp.new_session()
    stubborn_seconds = 3.0  # 30 s in the scenario, scaled
    turn = await acp.prompt(a, [{"tool": "test_stubborn", "args": {"s": stubborn_seconds}}, {"say": "late"}])
    started = await server.probe("tool_started", sessionId=a)
    call_id = started["params"]["toolCallId"]
    t0 = await server.cancel(a)
    end = await acp.stopped(turn, "cancelled", timeout=T_ESC + 1)
    assert server.arrival_time(end) - t0 <= T_ESC
    abandoned = await server.probe("step_exited", sessionId=a, reason="abandoned")
    assert position(server, abandoned) < position(server, end)
    assert acp.call_status(a, call_id) == acp.cancelled_call_status
    next_prompt, next_turn = acp.prompt_message(a, [{"say": "x"}])
    t2 = await server.send(next_prompt)
    first_chunk = await server.wait_for(chunk("x"))
    assert server.arrival_time(first_chunk) - t2 <= T_START
    await acp.stopped(next_turn, "end_turn")
    # The zombie finishes later; it may report a probe, nothing else.
    await server.probe("tool_exited", sessionId=a, toolCallId=call_id, reason="completed", timeout=stubborn_seconds + 2)
    await asyncio.sleep(scaled(0.2))
    # The zombie must not go on to the next model step after its tool returns (docs/interrupts.md I5/I6).
    assert not [
        m
        for m in after(server, end)
        if m.get("method") == "_scripted/probe"
        and m["params"]["prompt"] == turn.request_id
        and m["params"]["event"] in ("step_started", "tool_started")
    ]
    await server.quiet(
        W_QUIET,
        lambda m: (
            m.get("method") != "_scripted/probe"
            and ((call_id in repr(m) and m in after(server, end)) or "late" in repr(m))
        ),
    )


async def test_hanging_finalizer_delays_neither_the_response_nor_the_next_prompt_nor_exit(acp: Acp) -> None:
    """I7: the tool's body stops at once, its shielded finalizer hangs; the work is abandoned at the deadline (before
    its end), the call ends as a cancel leaves it, the end comes within T_ESC; the next prompt runs; stdin EOF exits
    within T_EXIT, not after the finalizer."""
    server = acp.client
    a = await acp.new_session()
    turn = await acp.prompt(a, [{"tool": "test_hang_finalizer", "args": {"s": 30, "f": 60}}])
    started = await server.probe("tool_started", sessionId=a)
    call_id = started["params"]["toolCallId"]
    t0 = await server.cancel(a)
    await server.probe("body_exited", sessionId=a, reason="cancelled")  # the body stopped at once
    end = await acp.stopped(turn, "cancelled", timeout=T_ESC + 1)
    assert server.arrival_time(end) - t0 <= T_ESC
    abandoned = await server.probe("step_exited", sessionId=a, reason="abandoned")
    assert position(server, abandoned) < position(server, end)
    assert server.updates(a, "tool_call_update")[-1]["toolCallId"] == call_id  # its only call
    assert acp.call_status(a, call_id) == acp.cancelled_call_status
    await acp.stopped(await acp.prompt(a, [{"say": "x"}]), "end_turn")
    code, took = await server.close()
    assert code == 0
    assert took <= T_EXIT


@pytest.mark.timeout(60)
@pytest.mark.at_once
async def test_cancel_written_with_its_prompt_is_never_lost(acp: Acp) -> None:
    """I10a: 200 iterations, the prompt and its cancel in a single write; the gate never opens: each work ends
    `cancelled` within T_ACK (on v2 after its insertion); nothing of any work is said."""
    server = acp.client
    a = await acp.new_session()
    for _ in range(200):
        prompt, turn = acp.prompt_message(a, [{"gate": "never"}])
        t0 = await server.send(prompt, {"method": "session/cancel", "params": {"sessionId": a}})
        end = await acp.stopped(turn, "cancelled", timeout=T_ACK + 1)
        assert server.arrival_time(end) - t0 <= T_ACK
    assert server.texts(a) == []


async def test_cancel_on_an_idle_session_leaves_no_residue(acp: Acp) -> None:
    """I10b: a cancel while idle, then a prompt: it runs to `end_turn` (on v2 with one running..idle)."""
    server = acp.client
    a = await acp.new_session()
    await server.cancel(a)
    await acp.stopped(await acp.prompt(a, [{"say": "ok"}]), "end_turn")
    assert server.texts(a) == ["ok"]
    if isinstance(acp, AcpV2):
        assert acp.states(a) == ["running", "idle"]


async def test_cancel_after_the_turn_or_in_its_settlement_window_yields_exactly_one_response(
    server: RawClient,
) -> None:
    """I11"""
    a = await server.new_session()
    first = await server.response(await server.prompt(a, [{"say": "a"}]))
    assert first["result"] == {"stopReason": "end_turn"}
    # The session's title follows its first completed turn; it is expected, and not the cancel's doing.
    await server.wait_for(lambda m: m.get("params", {}).get("update", {}).get("sessionUpdate") == "session_info_update")
    count = len(server.received)
    await server.cancel(a)
    await server.quiet(W_QUIET, lambda m: m in server.received[count:])
    second = await server.prompt(a, [{"say": "b"}, {"after_turn_gate": "gs"}])
    await server.probe("gate_reached", sessionId=a, gate="gs")
    await server.cancel(a)
    await server.release(a, "gs")
    response = await server.response(second)
    assert response["result"] == {"stopReason": "end_turn"}  # the decided outcome stands
    third = await server.response(await server.prompt(a, [{"say": "c"}]))
    assert third["result"] == {"stopReason": "end_turn"}
    assert server.texts(a) == ["a", "b", "c"]


async def test_repeated_cancels_act_once_and_do_not_restart_the_deadline(acp: Acp) -> None:
    """I12 (with a client request the client never answers, and a tool that ignores cancellation): two cancels in
    one write and a third after the end act as one: one withdrawal, one tool call ended as a cancel leaves it, one
    end (on v2 one idle per session); the deadline runs from the first cancel; a late answer to the withdrawn
    request is dropped without a trace."""
    server = acp.client
    a = await acp.new_session()
    turn = await acp.prompt(a, [{"tool": "test_client_request", "args": acp.held_request}, {"say": "never"}])
    held = await server.wait_for(lambda m: m.get("method") == acp.held_request["method"])
    t0 = await server.send(
        {"method": "session/cancel", "params": {"sessionId": a}},
        {"method": "session/cancel", "params": {"sessionId": a}},
    )
    end = await acp.end(turn)
    await server.cancel(a)  # during or after cleanup: still nothing more
    acp.assert_stopped(end, "cancelled")
    assert server.arrival_time(end) - t0 <= T_ACK
    retractions = [m for m in server.received if m.get("method") == "$/cancel_request"]
    assert [m["params"]["requestId"] for m in retractions] == [held["id"]]
    assert position(server, retractions[0]) < position(server, end)
    ended = [u for u in server.updates(a, "tool_call_update") if u.get("status") == acp.cancelled_call_status]
    assert len(ended) == 1
    # The deadline runs from the first cancel: a cancel at +0.4 s must not push an abandon to +0.9 s.
    b = await acp.new_session()
    stubborn = await acp.prompt(b, [{"tool": "test_stubborn", "args": {"s": 5}}])
    await server.probe("tool_started", sessionId=b)
    t0 = await server.cancel(b)
    await asyncio.sleep(0.4)
    await server.cancel(b)
    settled = await acp.stopped(stubborn, "cancelled", timeout=T_ESC + 1)
    assert server.arrival_time(settled) - t0 <= GRACE + 0.3
    # A late answer to the retracted request is dropped without a trace.
    count = len(server.received)
    await server.send({"id": held["id"], "result": acp.late_answer})
    await server.quiet(W_QUIET, lambda m: m in server.received[count:] and m.get("method") != "_scripted/probe")
    if isinstance(acp, AcpV2):
        assert acp.states(a).count("idle") == 1
        assert acp.states(b).count("idle") == 1


async def test_cancel_for_unknown_missing_or_mistyped_sessions_is_silent_and_harmless(acp: Acp) -> None:
    """I13: no reply, no effect on the only running session (no fallback routing); its work ends `end_turn`."""
    server = acp.client
    a = await acp.new_session()
    turn = await acp.prompt(a, [{"gate": "g1"}, {"say": "done"}])
    await server.probe("gate_reached", sessionId=a, gate="g1")
    count = len(server.received)
    await server.send(
        {"method": "session/cancel", "params": {"sessionId": "sess_does_not_exist"}},
        {"method": "session/cancel", "params": {}},
        {"method": "session/cancel", "params": {"sessionId": 42}},
        {"method": "session/cancel", "params": {"sessionId": None}},
        {"method": "session/cancel"},
        {"method": "session/cancel", "params": [a]},
    )
    await server.quiet(W_QUIET, lambda m: m in server.received[count:])
    await server.release(a, "g1")
    await acp.stopped(turn, "end_turn")
    assert server.texts(a) == ["done"]


async def test_second_prompt_on_a_busy_session_is_rejected_and_changes_nothing(start_server: StartServer) -> None:
    """The `reject` policy: refused, and the running turn is unaffected."""
    server = await start_server("--model", "scripted", "--test-mode", "--prompt-policy", "reject")
    await server.initialize()
    a = await server.new_session()
    running = await server.prompt(a, [{"gate": "g"}, {"say": "first"}])
    await server.probe("gate_reached", sessionId=a, gate="g")
    rejected = await server.response(await server.prompt(a, [{"say": "second"}]))
    assert rejected["error"]["code"] == -32600
    assert rejected["error"]["message"] == "a prompt is already running in this session"
    await server.release(a, "g")
    assert (await server.response(running))["result"] == {"stopReason": "end_turn"}
    assert server.texts(a) == ["first"]


async def test_prompt_sent_while_a_cancelled_turn_cleans_up_runs_after_the_cleanup(server: RawClient) -> None:
    """docs/interrupts.md, decision 1: admitted after the cancel, it waits for the cleanup, then runs; one turn at a
    time."""
    a = await server.new_session()
    old = await server.prompt(a, [{"tool": "test_stubborn", "args": {"s": 2}}])
    await server.probe("tool_started", sessionId=a)
    await server.cancel(a)
    new = await server.prompt(a, [{"say": "next"}])
    old_response = await server.response(old, timeout=T_ESC + 1)
    new_response = await server.response(new, timeout=T_ESC + 1)
    assert old_response["result"] == {"stopReason": "cancelled"}
    assert new_response["result"] == {"stopReason": "end_turn"}
    first_chunk = next(m for m in server.received if chunk("next")(m))
    assert position(server, old_response) < position(server, first_chunk) < position(server, new_response)
    assert server.arrival_time(first_chunk) - server.arrival_time(old_response) <= T_START


async def test_a_second_cancel_claims_a_prompt_waiting_behind_a_stopping_turn(acp: Acp) -> None:
    """I10 epoch rule: a cancel applies to every prompt admitted before it, including one still waiting behind a
    turn that an earlier cancel is stopping: answered within T_ACK (v1 `cancelled`, v2 withdrawn `-32800`), before
    that turn's end; nothing of it runs (on v2 nothing of it is echoed); the session's next prompt runs."""
    server = acp.client
    a = await acp.new_session()
    old = await acp.prompt(a, [{"tool": "test_stubborn", "args": {"s": 2}}])
    await server.probe("tool_started", sessionId=a)
    await server.cancel(a)
    waiting = await acp.prompt(a, [{"say": "never"}])
    t0 = await server.cancel(a)
    claimed = await acp.claimed(waiting)
    assert server.arrival_time(claimed) - t0 <= T_ACK
    old_end = await acp.stopped(old, "cancelled", timeout=T_ESC + 1)
    assert position(server, claimed) < position(server, old_end)
    assert server.texts(a) == []
    if isinstance(acp, AcpV2):
        assert len(server.updates(a, "user_message")) == 1
    await acp.stopped(await acp.prompt(a, [{"say": "ok"}]), "end_turn", timeout=T_ESC + 1)


async def test_cancel_request_naming_a_prompt_cancels_that_prompt_only(server: RawClient) -> None:
    """I20 (a)"""
    a, b = await server.new_session(), await server.new_session()
    prompt_a = await server.prompt(a, [{"gate": "g1"}])
    prompt_b = await server.prompt(b, [{"gate": "g2"}, {"say": "b"}])
    await server.probe("gate_reached", sessionId=a, gate="g1")
    await server.probe("gate_reached", sessionId=b, gate="g2")
    t0 = await server.notify("$/cancel_request", {"requestId": prompt_a})
    response = await server.response(prompt_a)
    assert response["result"] == {"stopReason": "cancelled"}
    assert server.arrival_time(response) - t0 <= T_ACK
    count = len(server.received)
    await server.notify("$/cancel_request", {"requestId": 999})
    await server.notify("$/cancel_request", {"requestId": prompt_a})  # already answered
    await server.quiet(W_QUIET, lambda m: m in server.received[count:])
    await server.release(b, "g2")
    assert (await server.response(prompt_b))["result"] == {"stopReason": "end_turn"}


@pytest.mark.parametrize(
    "script, cancel, outcome",
    [
        ([{"say": "x"}], False, "end_turn"),
        ([{"say": "x"}, {"gate": "g"}], True, "cancelled"),
        ([{"say": "x"}, {"fail": "boom"}], False, "error"),
        ([{"tool": "test_stubborn", "args": {"s": 2}}], True, "cancelled"),
        ([{"tool": "test_hang_finalizer", "args": {"s": 30, "f": 30}}], True, "cancelled"),
        ([{"say": "x"}, {"stop": "refusal"}], False, "refusal"),
        ([{"say": "x"}, {"stop": "max_tokens"}], False, "max_tokens"),
    ],
    ids=["end_turn", "cancel", "fail", "stubborn+cancel", "hang_finalizer+cancel", "refusal", "max_tokens"],
)
async def test_every_outcome_answers_once_and_leaves_the_session_reusable(
    acp: Acp, script: list[dict[str, Any]], cancel: bool, outcome: str
) -> None:
    """I19: whatever ends the work, it ends once with its stop reason (v1: the prompt's one answer, an error for a
    failure; v2: one idle, `error` with the error for a failure, after the prompt's one `{messageId}`), a stale cancel
    after it is a no-op, and the next prompt's first chunk comes within T_START; nothing is left registered."""
    server = acp.client
    a = await acp.new_session()
    turn = await acp.prompt(a, script)
    if cancel:
        await server.wait_for(lambda m: m.get("params", {}).get("event") in ("gate_reached", "tool_started"))
        await server.cancel(a)
    end = await acp.end(turn, timeout=T_ESC + 1)
    if outcome == "error":
        acp.assert_failed(end)
    else:
        assert acp.stop_reason(end) == outcome
        if isinstance(acp, AcpV2):
            acp.assert_stopped(end, outcome)
    await server.cancel(a)  # a stale-registry probe: must be a no-op
    follow, follow_turn = acp.prompt_message(a, [{"say": "ok"}])
    t0 = await server.send(follow)
    first_chunk = await server.wait_for(chunk("ok"))
    assert server.arrival_time(first_chunk) - t0 <= T_START
    await acp.stopped(follow_turn, "end_turn")
    if isinstance(acp, AcpV2):
        assert acp.states(a).count("idle") == 2
    stats = await server.stats()
    assert stats["runningTurns"] == 0
    assert stats["queuedPrompts"] == 0
    assert stats["pendingClientRequests"] == 0


# The request each version's fourth session leaves unanswered at EOF: v1 a client file read, v2 a permission question.
UNANSWERED: dict[str, tuple[dict[str, Any], str]] = {
    "v1": (
        {"tool": "test_client_request", "args": {"method": "fs/read_text_file", "params": {"path": "/x"}}},
        "fs/read_text_file",
    ),
    "v2": ({"tool": "run_command", "args": {"command": "true"}}, "session/request_permission"),
}


@pytest.mark.timeout(30)
async def test_stdin_eof_cancels_every_turn_and_exits_in_time_leaving_no_process(acp: Acp) -> None:
    """I17: EOF with a gated turn (on v2 with a prompt held behind it), a local process, a stubborn tool and an
    unanswered request to the client: exit 0 within T_EXIT, the local process's group gone, and on v1 every prompt
    answered `cancelled`."""
    server = acp.client
    a, b, c, d = [await acp.new_session() for _ in range(4)]
    unanswered, asked = UNANSWERED[acp.version]
    turns = [await acp.prompt(a, [{"gate": "gA"}])]
    if isinstance(acp, AcpV2):
        await acp.inserted(turns[0])
        await acp.prompt(a, [{"say": "held"}])  # held behind the gated work, never inserted
    turns.append(await acp.prompt(b, [{"tool": "test_local_proc", "args": {"command": "sleep 600"}}]))
    turns.append(await acp.prompt(c, [{"tool": "test_stubborn", "args": {"s": 30}}]))
    turns.append(await acp.prompt(d, [unanswered]))
    if isinstance(acp, AcpV2):
        for turn in turns[1:]:
            await acp.inserted(turn)
    await server.probe("gate_reached", sessionId=a)
    pid = (await server.probe("proc_started", sessionId=b))["params"]["pid"]
    await server.probe("tool_started", sessionId=c)
    await server.wait_for(lambda m: m.get("method") == asked)
    assert (await server.stats())["childProcesses"] == 1
    code, took = await server.close()
    assert code == 0
    assert took <= T_EXIT
    deadline = time.monotonic() + scaled(2)
    while True:
        try:
            os.killpg(pid, 0)
        except ProcessLookupError:
            break
        assert time.monotonic() < deadline, f"process group {pid} survived the server"
        await asyncio.sleep(0.05)
    if acp.version == "v1":
        answered = [m for m in server.received if "result" in m and m.get("result", {}).get("stopReason")]
        assert len(answered) == 4
        assert {m["result"]["stopReason"] for m in answered} == {"cancelled"}


@pytest.mark.timeout(30)
async def test_stdin_eof_while_the_client_no_longer_reads_stdout_still_exits_in_time() -> None:
    """I17 variant: the pipe to the client is full, the writer blocked; EOF must still end the process."""
    from tests.support.harness import DEFAULT_ARGS, server_command

    process = await asyncio.create_subprocess_exec(
        *server_command(*DEFAULT_ARGS),
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.DEVNULL,
        limit=1 << 20,
    )
    assert process.stdin is not None and process.stdout is not None
    process.stdin.write(b'{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":1}}\n')
    process.stdin.write(b'{"jsonrpc":"2.0","id":2,"method":"session/new","params":{"cwd":"/tmp","mcpServers":[]}}\n')
    await process.stdin.drain()
    await process.stdout.readline()
    import orjson

    session = orjson.loads(await process.stdout.readline())["result"]["sessionId"]
    flood = {
        "sessionId": session,
        "prompt": [{"type": "text", "text": "x"}],
        "_meta": {"scripted": [{"say": "y" * 1000, "repeat": 100_000}]},
    }
    process.stdin.write(orjson.dumps({"jsonrpc": "2.0", "id": 3, "method": "session/prompt", "params": flood}) + b"\n")
    await process.stdin.drain()
    await asyncio.sleep(0.5)  # the server fills the pipe; nobody reads it
    started = time.monotonic()
    process.stdin.close()
    took = await wait_for_exit_undrained(process, started, T_EXIT)
    await process.stdout.read()  # what the server managed to write before it left; closes our end
    assert process.returncode == 0
    assert took <= T_EXIT


def is_turn_update(message: dict[str, Any]) -> bool:
    return message.get("method") == "session/update" and message["params"]["update"]["sessionUpdate"] in (
        "agent_message_chunk",
        "agent_thought_chunk",
        "tool_call",
        "tool_call_update",
    )


def random_script(rng: random.Random, run: int) -> tuple[list[dict[str, Any]], bool]:
    """1-8 random steps (say, think, sleep, a cooperative or a stubborn tool, a short gate); whether one is stubborn."""
    steps: list[dict[str, Any]] = []
    stubborn = False
    for _ in range(rng.randint(1, 8)):
        kind = rng.choice(("say", "think", "sleep", "tool", "stubborn", "gate"))
        if kind in ("say", "think"):
            steps.append({kind: f"r{run}"})
        elif kind == "sleep":
            steps.append({"sleep": rng.choice((0, 0.01, 0.05))})
        elif kind == "tool":
            steps.append({"tool": "test_sleep", "args": {"s": rng.choice((0, 0.02, 0.2))}})
        elif kind == "stubborn" and rng.random() < 0.3:
            stubborn = True
            steps.append({"tool": "test_stubborn", "args": {"s": 0.7}})
        else:
            steps.append({"gate": f"g{run}", "timeout": 0.1})
    return steps, stubborn


@pytest.mark.timeout(120)
@pytest.mark.parametrize("protocol", [1, 2], ids=["v1", "v2"])
async def test_randomized_cancels_keep_ordering_answers_and_tool_calls_terminal(
    start_server: StartServer, protocol: int
) -> None:
    """I18 (the scripted-model part): random scripts on one or two sessions, a cancel at a random moment; on a v1
    and on a v2 connection. On v2 (ACP-V2.md §20.1, §20.7) a prompt is sometimes held behind the work the cancel
    names, and the checks are v2's: every prompt answered once ({messageId}, or -32800 for a held prompt the cancel
    withdrew, before the work's idle), one idle per inserted prompt, cancelled within the bound, every tool call
    terminal before its work's idle, and nothing of a work after its idle (see `check_random_run_v2`)."""
    server = await start_server()
    if protocol == 2:
        await server.initialize_v2()
        sessions = [await server.new_session_v2(), await server.new_session_v2()]
    else:
        await server.initialize()
        sessions = [await server.new_session(), await server.new_session()]
    rng = random.Random(int(os.environ.get("ACP_TEST_RANDOM_SEED", "18")))
    # When each run's work ended on each session: the position of its last idle (v2).
    ended: dict[tuple[str, int], int] = {}
    seen: Counter[str] = Counter()  # what the v2 runs went through
    # 60 runs in CI; docs/interrupts.md's full count is ACP_TEST_RANDOM_RUNS=200 (with a longer --timeout).
    for run in range(int(os.environ.get("ACP_TEST_RANDOM_RUNS", "60"))):
        active = sessions[: rng.choice((1, 2))]
        scripts = {session: random_script(rng, run) for session in active}
        stubborn = any(flag for _, flag in scripts.values())
        if protocol == 2:
            seen += await random_run_v2(
                server, rng, run, {s: steps for s, (steps, _) in scripts.items()}, stubborn=stubborn, ended=ended
            )
        else:
            await random_run_v1(server, rng, {s: steps for s, (steps, _) in scripts.items()}, stubborn)
        if stubborn:
            await asyncio.sleep(0.8)  # let zombies finish, so their (fenced) endings happen during the test too
    stats = await server.stats()
    assert (stats["runningTurns"], stats["queuedPrompts"], stats["pendingClientRequests"]) == (0, 0, 0)
    if protocol == 2:
        check_works_v2(server, sessions, ended)
        if (
            os.environ.get("ACP_TEST_RANDOM_SEED", "18") == "18"
        ):  # the default seed exercises both fates of a held prompt
            assert seen["idle cancelled"] and seen["held withdrawn"] and seen["held inserted"], seen
    # C5: step intervals of one session never overlap, except a run that was abandoned.
    abandoned = {m["params"]["prompt"] for m in server.received if m.get("params", {}).get("reason") == "abandoned"}
    for session in sessions:
        running: Any = None
        for message in server.received:
            params = message.get("params", {})
            if message.get("method") != "_scripted/probe" or params.get("sessionId") != session:
                continue
            if params["prompt"] in abandoned:
                continue
            if params["event"] == "step_started":
                assert running is None, f"two turns of {session} executing at once"
                running = params["prompt"]
            elif params["event"] == "step_exited":
                running = None


async def random_run_v1(
    server: RawClient, rng: random.Random, scripts: dict[str, list[dict[str, Any]]], stubborn: bool
) -> None:
    prompts = {session: await server.prompt(session, steps) for session, steps in scripts.items()}
    await asyncio.sleep(rng.choice((0, 0.001, 0.01, 0.05, 0.1)))
    t0 = await server.cancel(rng.choice(list(scripts)))
    for session, prompt in prompts.items():
        response = await server.response(prompt, timeout=T_ESC + 2)
        assert "result" in response, response
        if response["result"]["stopReason"] == "cancelled":
            assert server.arrival_time(response) - t0 <= (T_ESC if stubborn else T_ACK)
        # Every tool call this prompt announced reached a terminal status before its response.
        window = server.received[: position(server, response)]
        for update in (
            m["params"]["update"] for m in window if is_turn_update(m) and m["params"]["sessionId"] == session
        ):
            if update["sessionUpdate"] == "tool_call":
                finals = [
                    m
                    for m in window
                    if is_turn_update(m)
                    and m["params"]["update"].get("toolCallId") == update["toolCallId"]
                    and m["params"]["update"].get("status") in ("completed", "failed")
                ]
                assert finals, f"tool call {update['toolCallId']} never reached a terminal status"


def idles_of(server: RawClient, session: str) -> list[dict[str, Any]]:
    return [
        m
        for m in server.received
        if m.get("method") == "session/update"
        and m["params"]["sessionId"] == session
        and m["params"]["update"]["sessionUpdate"] == "state_update"
        and m["params"]["update"]["state"] == "idle"
    ]


async def random_run_v2(
    server: RawClient,
    rng: random.Random,
    run: int,
    scripts: dict[str, list[dict[str, Any]]],
    *,
    stubborn: bool,
    ended: dict[tuple[str, int], int],
) -> Counter[str]:
    """One random run on v2. The sessions are idle, so each prompt is inserted at once; a second prompt to the session
    the cancel names (sometimes) is held behind its work, and either withdrawn by the cancel (-32800, before that
    work's idle, never echoed or run) or inserted after the work's idle (then its own work ends with its own idle)."""
    delay = rng.choice((0, 0.001, 0.01, 0.05, 0.1))
    target = rng.choice(list(scripts))
    hold = rng.random() < 0.5
    seen: Counter[str] = Counter()
    idles_before = {session: len(idles_of(server, session)) for session in scripts}
    echoes_before = {session: len(server.updates(session, "user_message")) for session in scripts}
    prompts = {session: await server.prompt(session, steps) for session, steps in scripts.items()}
    held = await server.prompt(target, [{"say": f"h{run}"}]) if hold else None
    await asyncio.sleep(delay)
    t0 = await server.cancel(target)
    for prompt in prompts.values():
        assert "messageId" in (await server.response(prompt))["result"]
    withdrawn = None
    if held is not None:
        answer = await server.response(held, timeout=T_ESC + 2)
        if "error" in answer:
            assert answer["error"]["code"] == -32800, answer
            withdrawn = answer
        else:
            assert "messageId" in answer["result"], answer
    bound = T_ESC if stubborn else T_ACK
    for session in scripts:
        works = 2 if session == target and held is not None and withdrawn is None else 1
        last = await server.idle(session, idles_before[session] + works, timeout=2 * (T_ESC + 2))
        idles = idles_of(server, session)[idles_before[session] :]
        for idle in idles:
            update = idle["params"]["update"]
            assert update["stopReason"] in ("end_turn", "cancelled"), update
            if update["stopReason"] == "cancelled":
                assert server.arrival_time(idle) - t0 <= bound
        if session == target and withdrawn is not None:
            # §20.1: a held prompt the cancel claims is answered first, and nothing of it is inserted or run.
            assert position(server, withdrawn) < position(server, idles[0])
            assert f"h{run}" not in server.texts(session)
            assert probes_of(server, held, "step_started") == []
        assert len(server.updates(session, "user_message")) - echoes_before[session] == works
        ended[(session, run)] = position(server, last)
        # Nothing of the work after its idle (so far; check_works_v2 looks again at the end).
        late = [m for m in after(server, last) if m.get("method") == "session/update" and turn_output_v2(m, session)]
        assert not late, late
        seen.update(f"idle {idle['params']['update']['stopReason']}" for idle in idles)
    if held is not None:
        seen["held withdrawn" if withdrawn is not None else "held inserted"] += 1
    return seen


def probes_of(server: RawClient, prompt: Any, event: str) -> list[dict[str, Any]]:
    return [
        m
        for m in server.received
        if m.get("method") == "_scripted/probe" and m["params"]["prompt"] == prompt and m["params"]["event"] == event
    ]


def turn_output_v2(message: dict[str, Any], session: str) -> bool:
    return bool(
        message.get("method") == "session/update"
        and message["params"]["sessionId"] == session
        and message["params"]["update"]["sessionUpdate"] in TURN_SCOPED_V2
    )


def check_works_v2(server: RawClient, sessions: list[str], ended: dict[tuple[str, int], int]) -> None:
    """Over the whole v2 log, per session, the works split at its idles: every tool call a work announced reached a
    final status before the work's idle; no tool call id or message id of a work appears in a later one (a fenced
    zombie publishing into its successor); and the text of run k (`r<k>`, `h<k>`) only ever appears on a session
    that run k prompted, before that run's last idle there."""
    for session in sessions:
        windows: list[list[dict[str, Any]]] = [[]]
        for index, message in enumerate(server.received):
            if message.get("method") != "session/update" or message["params"]["sessionId"] != session:
                continue
            update = message["params"]["update"]
            if update["sessionUpdate"] == "state_update" and update["state"] == "idle":
                windows.append([])
            elif update["sessionUpdate"] in TURN_SCOPED_V2:
                windows[-1].append(update)
                text = update.get("content", {}).get("text", "") if isinstance(update.get("content"), dict) else ""
                if text[:1] in ("r", "h") and text[1:].isdigit():
                    run = int(text[1:])
                    assert (session, run) in ended, f"{session} was sent {text!r}, of a run that never prompted it"
                    assert index < ended[(session, run)], f"{text!r} on {session} after its run's last idle"
        seen: set[str] = set()
        for window in windows:
            calls = {u["toolCallId"] for u in window if "toolCallId" in u}
            finished = {u["toolCallId"] for u in window if u.get("status") in ("completed", "failed", "cancelled")}
            assert calls <= finished, f"tool calls never final before their idle: {calls - finished}"
            ids = calls | {u["messageId"] for u in window if "messageId" in u}
            assert not ids & seen, f"ids of an ended work in a later one: {ids & seen}"
            seen |= ids


@pytest.mark.at_once
async def test_close_answers_the_running_turn_cancelled_before_its_own_result_and_refuses_the_id(
    server: RawClient,
) -> None:
    """I20 (c), and other sessions untouched."""
    a, b = await server.new_session(), await server.new_session()
    prompt_a = await server.prompt(a, [{"gate": "gA"}, {"say": "a"}])
    prompt_b = await server.prompt(b, [{"gate": "gB"}])
    await server.probe("gate_reached", sessionId=a, gate="gA")
    await server.probe("gate_reached", sessionId=b, gate="gB")
    close = await server.request("session/close", {"sessionId": b})
    t0 = time.monotonic()
    closed = await server.response(close)
    cancelled = await server.response(prompt_b)
    assert cancelled["result"] == {"stopReason": "cancelled"}
    assert closed["result"] == {}
    assert position(server, cancelled) < position(server, closed)
    assert server.arrival_time(closed) - t0 <= T_ACK
    refused = await server.response(await server.prompt(b, [{"say": "late"}]))
    assert refused["error"]["code"] == -32002
    assert (await server.call("session/close", {"sessionId": b}))["error"]["code"] == -32002
    await server.release(a, "gA")
    assert (await server.response(prompt_a))["result"] == {"stopReason": "end_turn"}
    assert (await server.call("session/close", {"sessionId": a}))["result"] == {}  # idle: nothing to cancel
    assert (await server.stats())["sessions"] == 0


async def test_close_with_a_tool_ignoring_cancel_still_answers_both_within_the_deadline(acp: Acp) -> None:
    """I20 (c) with uncooperative work: the work ends `cancelled` (v1: the prompt's answer, v2: the idle) before the
    close's `{}`, which comes within T_ESC; nothing for the session after it."""
    server = acp.client
    a = await acp.new_session()
    turn = await acp.prompt(a, [{"tool": "test_stubborn", "args": {"s": 3}}])
    await server.probe("tool_started", sessionId=a)
    t0 = await server.send({"id": "close-1", "method": "session/close", "params": {"sessionId": a}})
    closed = await server.response("close-1", timeout=T_ESC + 1)
    assert closed["result"] == {}
    cancelled = await acp.stopped(turn, "cancelled")
    assert position(server, cancelled) < position(server, closed)
    assert server.arrival_time(closed) - t0 <= T_ESC
    await server.quiet(0.3, lambda m: m in after(server, closed) and of_session(a)(m))


@pytest.mark.timeout(60)
async def test_many_sessions_streaming_at_once_all_finish_under_backpressure(server: RawClient) -> None:
    """Several turns waiting for room in the outbox at once must all be woken (they once stranded each other)."""
    sessions = [await server.new_session() for _ in range(12)]
    prompts = [await server.prompt(s, [{"say": "x", "repeat": 500}]) for s in sessions]
    for prompt in prompts:
        assert (await server.response(prompt, timeout=scaled(30)))["result"] == {"stopReason": "end_turn"}
    assert all(len(server.texts(s)) == 500 for s in sessions)


async def test_a_client_answering_our_request_with_request_cancelled_fails_the_tool_call_and_the_turn_goes_on(
    acp: Acp,
) -> None:
    """I20(b) with `-32800`: the client gave up on one of our requests. That is an ordinary error answer, not a
    cancel of the work: the tool call ends `failed` (not `cancelled` on v2: nobody cancelled the work) with the code
    in its content, the model goes on, the work ends `end_turn` (on v2 with one idle)."""
    server = acp.client
    a = await acp.new_session()
    turn = await acp.prompt(a, [{"tool": "test_client_request", "args": acp.held_request}, {"say": "after"}])
    held = await server.wait_for(lambda m: m.get("method") == acp.held_request["method"])
    await server.send({"id": held["id"], "error": {"code": -32800, "message": "Request cancelled"}})
    await acp.stopped(turn, "end_turn")
    closing = [
        u for u in server.updates(a, "tool_call_update") if u.get("status") in ("completed", "failed", "cancelled")
    ]
    assert [u["status"] for u in closing] == ["failed"]
    assert "-32800" in orjson.dumps(closing[0].get("content")).decode()
    assert server.texts(a) == ["after"]
    if isinstance(acp, AcpV2):
        assert acp.states(a) == ["running", "idle"]


async def test_a_cancel_naming_a_closed_session_is_silent_and_touches_no_other_turn(acp: Acp) -> None:
    """I13 for a closed session's id: nothing answers the cancel and nothing happens to the work still running (no
    "the only running turn" fallback): nothing at all is written, nothing is refused; the connection stays healthy."""
    server = acp.client
    closed, running = await acp.new_session(), await acp.new_session()
    assert (await server.call("session/close", {"sessionId": closed}))["result"] == {}
    before = len(server.updates(closed))
    turn = await acp.prompt(running, [{"gate": "g"}, {"say": "done"}])
    await server.probe("gate_reached", sessionId=running)
    count = len(server.received)
    await server.cancel(closed)
    # Nothing at all but probes (so the prompt is not answered either on v1), and nothing refused, ever.
    await server.quiet(W_QUIET, lambda m: (m in server.received[count:] and not_probe(m)) or "error" in m)
    await server.release(running, "g")
    await acp.stopped(turn, "end_turn")
    assert server.texts(running) == ["done"]
    assert len(server.updates(closed)) == before
