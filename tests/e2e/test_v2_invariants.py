"""The v2 counterparts of the INTERRUPTS.md invariants that test_v2_cancel.py does not hold (ACP-V2.md §20.7), end to
end over real stdio beside their v1 twins in test_interrupts.py, test_prompt_policies.py and test_subagents.py.

The reading is §20.7's: where v1 answers the prompt `cancelled`, a v2 prompt has been answered `{messageId}` at
insertion and its work ends with the session's `idle` `state_update` saying `cancelled`, within the same bound as the
v1 twin; where v1 says "nothing after the response", v2 says nothing of the work after its idle; a tool call a cancel
ends is `cancelled` (v2 has the status); a held prompt a cancel claims is answered -32800. Each test's docstring names
its invariant; the teardown applies the common checks (C1-C4 in their v2 reading, schema, C6, exit in time).
"""

from __future__ import annotations

import asyncio
import os
import time
from typing import Any

import orjson
import pytest

from tests.conftest import StartServer
from tests.e2e.test_interrupts import after, chunk, position
from tests.e2e.test_v2_cancel import HOLD_V2, is_state, of_session
from tests.support.fake_openai import FakeOpenAI, text_reply, tool_call_reply
from tests.support.harness import (
    GRACE,
    LONG_GRACE_ARGS,
    T_ACK,
    T_ESC,
    T_EXIT,
    T_START,
    W_QUIET,
    RawClient,
    scaled,
)

pytestmark = pytest.mark.timeout(40)

FINAL_V2 = ("completed", "failed", "cancelled")


def stop_of(idle: dict[str, Any]) -> Any:
    return idle["params"]["update"].get("stopReason")


def not_probe(message: dict[str, Any]) -> bool:
    return message.get("method") != "_scripted/probe"


def probes(server: RawClient, event: str, **match: Any) -> list[dict[str, Any]]:
    return [
        m
        for m in server.received
        if m.get("method") == "_scripted/probe"
        and m["params"]["event"] == event
        and all(m["params"].get(k) == v for k, v in match.items())
    ]


def call_statuses(server: RawClient, session_id: str, call_id: str) -> list[str]:
    return [
        u["status"]
        for u in server.updates(session_id, "tool_call_update")
        if u["toolCallId"] == call_id and "status" in u
    ]


async def start_v2(start_server: StartServer, *args: str) -> RawClient:
    server = await start_server(*args)
    await server.initialize_v2()
    return server


async def inserted(server: RawClient, session_id: str, script: list[dict[str, Any]]) -> Any:
    """Send a prompt to an idle session and wait for its insertion ({messageId}); its request id."""
    prompt = await server.prompt(session_id, script)
    assert "messageId" in (await server.response(prompt))["result"]
    return prompt


# --- I1 ---


@pytest.mark.at_once
async def test_v2_cancel_during_model_stream_ends_idle_cancelled_and_the_late_gate_adds_nothing(
    server_v2: RawClient,
) -> None:
    """I1 on v2: the model step exits `cancelled` before the idle; the idle says `cancelled` within T_ACK; opening the
    gate later produces nothing for the session."""
    server = server_v2
    a = await server.new_session_v2()
    await inserted(server, a, [{"say": "a"}, {"gate": "g1"}, {"say": "b"}])
    await server.probe("gate_reached", sessionId=a, gate="g1")
    t0 = await server.cancel(a)
    idle = await server.idle(a)
    assert server.arrival_time(idle) - t0 <= T_ACK
    assert stop_of(idle) == "cancelled"
    exited = await server.probe("step_exited", sessionId=a, reason="cancelled")
    assert position(server, exited) < position(server, idle)
    await server.release(a, "g1")  # the late gate opens: nothing may happen
    await server.quiet(W_QUIET, lambda m: m in after(server, idle) and not_probe(m) and of_session(a)(m))
    assert server.texts(a) == ["a"]


async def test_v2_a_paced_stream_is_cut_off_between_chunks_by_a_cancel(server_v2: RawClient) -> None:
    """I1 on v2 with a streaming model: the cancel lands between two chunks; no chunk of the work follows its idle."""
    server = server_v2
    a = await server.new_session_v2()
    await inserted(server, a, [{"say": "p ", "repeat": 1000, "every": 0.02}])
    await server.wait_for(chunk("p "))
    t0 = await server.cancel(a)
    idle = await server.idle(a)
    assert server.arrival_time(idle) - t0 <= T_ACK
    assert stop_of(idle) == "cancelled"
    await asyncio.sleep(0.1)  # five chunk intervals: a stream still running would show
    assert not [m for m in after(server, idle) if m.get("method") == "session/update"]
    assert 1 <= len(server.updates(a, "agent_message_chunk")) < 1000


# --- I2 ---


@pytest.mark.at_once
async def test_v2_abort_surfacing_as_an_error_still_ends_idle_cancelled_never_error(server_v2: RawClient) -> None:
    """I2 (A) on v2: an HTTP-client-style error raised by the abort still ends the work `idle cancelled`, not
    `idle error`."""
    server = server_v2
    a = await server.new_session_v2()
    await inserted(server, a, [{"gate_raise": "g1"}])
    await server.probe("gate_reached", sessionId=a, gate="g1")
    t0 = await server.cancel(a)
    idle = await server.idle(a)
    assert stop_of(idle) == "cancelled" and "error" not in idle["params"]["update"], idle
    assert server.arrival_time(idle) - t0 <= T_ACK


# --- I3 ---


@pytest.mark.parametrize("cancelled_first_started", [True, False], ids=["first-started", "last-started"])
@pytest.mark.at_once
async def test_v2_cancel_is_routed_by_session_id_and_leaves_other_sessions_running(
    server_v2: RawClient, cancelled_first_started: bool
) -> None:
    """I3 on v2, both ways: only the named session's work ends `idle cancelled`; the other runs on to `idle end_turn`;
    nothing for the cancelled session after its idle; no update crosses sessions; both sessions run their next
    prompt normally."""
    server = server_v2
    first, second = await server.new_session_v2(), await server.new_session_v2()
    for session, tag in ((first, "1"), (second, "2")):
        await inserted(server, session, [{"say": f"{tag}a"}, {"gate": "g"}, {"say": f"{tag}b"}])
        await server.probe("gate_reached", sessionId=session, gate="g")
    victim, survivor = (first, second) if cancelled_first_started else (second, first)
    t0 = await server.cancel(victim)
    cancelled = await server.idle(victim)
    assert stop_of(cancelled) == "cancelled"
    assert server.arrival_time(cancelled) - t0 <= T_ACK
    t2 = await server.release(survivor, "g")
    finished = await server.idle(survivor)
    assert stop_of(finished) == "end_turn"
    assert server.arrival_time(finished) - t2 <= T_ACK
    await server.probe("step_exited", sessionId=survivor, reason="completed", step=1)
    assert not [m for m in after(server, cancelled) if m.get("method") == "session/update" and of_session(victim)(m)]
    for session in (first, second):  # no cancelled state left behind on either session
        await inserted(server, session, [{"say": "ok"}])
        assert stop_of(await server.idle(session, 2)) == "end_turn"
    for update_message in (m for m in server.received if m.get("method") == "session/update"):
        content = update_message["params"]["update"].get("content")
        text = content.get("text", "") if isinstance(content, dict) else ""
        owner = first if text.startswith("1") else second if text.startswith("2") else None
        if owner is not None:
            assert update_message["params"]["sessionId"] == owner


# --- I4 ---


async def test_v2_cancel_never_blocks_other_requests_while_the_work_cleans_up(server_v2: RawClient) -> None:
    """I4 on v2: the cancel is accepted at once and settles later; a new session and another session's work are
    served meanwhile, and both come before the cancelled work's idle."""
    server = server_v2
    a, b = await server.new_session_v2(), await server.new_session_v2()
    await inserted(server, a, [{"tool": "test_hang_finalizer", "args": {"s": 30, "f": 60}}])
    await server.probe("tool_started", sessionId=a)
    await inserted(server, b, [{"gate": "gB"}, {"say": "b"}])
    await server.probe("gate_reached", sessionId=b, gate="gB")
    t0 = await server.cancel(a)
    await asyncio.sleep(0.01)
    new_session = await server.call("session/new", {"cwd": "/tmp"})
    assert "result" in new_session
    assert server.arrival_time(new_session) - t0 <= scaled(0.5)  # target 100 ms, 5x for CI
    t_open = await server.release(b, "gB")
    done_b = await server.idle(b)
    assert stop_of(done_b) == "end_turn"
    assert server.arrival_time(done_b) - t_open <= T_ACK
    done_a = await server.idle(a, timeout=T_ESC + 1)
    assert stop_of(done_a) == "cancelled"
    assert server.arrival_time(done_a) - t0 <= T_ESC
    assert position(server, new_session) < position(server, done_a)
    assert position(server, done_b) < position(server, done_a)


# --- I6, I7 ---


async def test_v2_tool_ignoring_cancel_is_abandoned_at_the_deadline_and_fenced(server_v2: RawClient) -> None:
    """I6 on v2: abandoned at the cleanup deadline (probe before the idle), the tool call ends `cancelled`, the idle
    says `cancelled` within T_ESC; the next prompt's first chunk within T_START; when the zombie tool returns, nothing
    of it (its call id, its next step's text) follows the idle, and it takes no further model step."""
    server = server_v2
    a = await server.new_session_v2()
    stubborn_seconds = 3.0  # 30 s in the scenario, scaled
    prompt = await inserted(server, a, [{"tool": "test_stubborn", "args": {"s": stubborn_seconds}}, {"say": "late"}])
    started = await server.probe("tool_started", sessionId=a)
    call_id = started["params"]["toolCallId"]
    t0 = await server.cancel(a)
    idle = await server.idle(a, timeout=T_ESC + 1)
    assert stop_of(idle) == "cancelled"
    assert server.arrival_time(idle) - t0 <= T_ESC
    abandoned = await server.probe("step_exited", sessionId=a, reason="abandoned")
    assert position(server, abandoned) < position(server, idle)
    assert call_statuses(server, a, call_id)[-1] == "cancelled"
    t2 = await server.send(next_prompt := server.prompt_message(a, [{"say": "x"}]))
    first_chunk = await server.wait_for(chunk("x"))
    assert server.arrival_time(first_chunk) - t2 <= T_START
    assert "messageId" in (await server.response(next_prompt["id"]))["result"]
    assert stop_of(await server.idle(a, 2)) == "end_turn"
    # The zombie finishes later; it may report a probe, nothing else.
    await server.probe("tool_exited", sessionId=a, toolCallId=call_id, reason="completed", timeout=stubborn_seconds + 2)
    await asyncio.sleep(scaled(0.2))
    assert not [
        m
        for m in after(server, idle)
        if m.get("method") == "_scripted/probe"
        and m["params"]["prompt"] == prompt
        and m["params"]["event"] in ("step_started", "tool_started")
    ]
    await server.quiet(
        W_QUIET,
        lambda m: not_probe(m) and ((call_id in repr(m) and m in after(server, idle)) or "late" in repr(m)),
    )


async def test_v2_hanging_finalizer_delays_neither_the_idle_nor_the_next_prompt_nor_exit(server_v2: RawClient) -> None:
    """I7 on v2: the tool's body stops at once, its shielded finalizer hangs; the work is abandoned at the deadline
    (before the idle), the call ends `cancelled`, the idle comes within T_ESC; the next prompt runs; stdin EOF exits
    within T_EXIT, not after the finalizer."""
    server = server_v2
    a = await server.new_session_v2()
    await inserted(server, a, [{"tool": "test_hang_finalizer", "args": {"s": 30, "f": 60}}])
    started = await server.probe("tool_started", sessionId=a)
    call_id = started["params"]["toolCallId"]
    t0 = await server.cancel(a)
    await server.probe("body_exited", sessionId=a, reason="cancelled")  # the body stopped at once
    idle = await server.idle(a, timeout=T_ESC + 1)
    assert stop_of(idle) == "cancelled"
    assert server.arrival_time(idle) - t0 <= T_ESC
    abandoned = await server.probe("step_exited", sessionId=a, reason="abandoned")
    assert position(server, abandoned) < position(server, idle)
    assert call_statuses(server, a, call_id)[-1] == "cancelled"
    await inserted(server, a, [{"say": "x"}])
    assert stop_of(await server.idle(a, 2)) == "end_turn"
    code, took = await server.close()
    assert code == 0
    assert took <= T_EXIT


# --- I8 ---


@pytest.mark.at_once
async def test_v2_a_late_allow_after_a_cancel_runs_nothing_and_sends_nothing(server_v2: RawClient) -> None:
    """I8 on v2, the late answer: the permission wait ends at once with the cancel (idle within T_ACK, the question
    withdrawn before it); an `allow` arriving after the idle runs no command and puts nothing on the wire."""
    server = server_v2
    a = await server.new_session_v2()
    await inserted(server, a, [{"tool": "run_command", "args": {"command": "echo ran"}}, {"say": "never"}])
    asked = await server.wait_for(lambda m: m.get("method") == "session/request_permission")
    t0 = await server.cancel(a)
    idle = await server.idle(a)
    assert server.arrival_time(idle) - t0 <= T_ACK
    assert stop_of(idle) == "cancelled"
    withdrawn = [m for m in server.received if m.get("method") == "$/cancel_request"]
    assert [m["params"]["requestId"] for m in withdrawn] == [asked["id"]]
    assert position(server, withdrawn[0]) < position(server, idle)
    count = len(server.received)
    allow = {"outcome": {"outcome": "selected", "optionId": "allow_once"}}
    await server.send({"id": asked["id"], "result": allow})
    await server.quiet(W_QUIET, lambda m: m in server.received[count:] and not_probe(m))
    assert not server.updates(a, "terminal_update") and "never" not in server.texts(a)


# --- I10 ---


@pytest.mark.timeout(60)
@pytest.mark.at_once
async def test_v2_cancel_written_with_its_prompt_is_never_lost(server_v2: RawClient) -> None:
    """I10a on v2: 200 iterations, the prompt and its cancel in a single write, the gate never opens: each prompt is
    inserted ({messageId}) and its work ends `idle cancelled` within T_ACK; nothing of any work is said."""
    server = server_v2
    a = await server.new_session_v2()
    for nth in range(1, 201):
        prompt = server.prompt_message(a, [{"gate": "never"}])
        t0 = await server.send(prompt, {"method": "session/cancel", "params": {"sessionId": a}})
        assert "messageId" in (await server.response(prompt["id"], timeout=T_ACK + 1))["result"]
        idle = await server.idle(a, nth, timeout=T_ACK + 1)
        assert stop_of(idle) == "cancelled"
        assert server.arrival_time(idle) - t0 <= T_ACK
    assert server.texts(a) == []


async def test_v2_cancel_on_an_idle_session_leaves_no_residue(server_v2: RawClient) -> None:
    """I10b on v2: a cancel while idle, then a prompt: it runs to `idle end_turn`."""
    server = server_v2
    a = await server.new_session_v2()
    await server.cancel(a)
    await inserted(server, a, [{"say": "ok"}])
    assert stop_of(await server.idle(a)) == "end_turn"
    assert server.texts(a) == ["ok"]
    assert [u["state"] for u in server.states(a)] == ["running", "idle"]


@pytest.mark.parametrize("policy", ["queue", "interrupt", "reject", "steer"])
async def test_v2_a_prompt_sent_while_a_cancelled_work_cleans_up_is_held_and_runs_after_the_cleanup(
    start_server: StartServer, policy: str
) -> None:
    """I10 on v2 (decision 1, under every policy): a prompt read after the cancel is not covered by it: held while
    the stopping work cleans up, inserted after that work's `idle cancelled`, its first chunk within T_START of it;
    one work at a time."""
    server = await start_v2(start_server, "--model", "scripted", "--test-mode", "--cleanup-deadline", str(GRACE),
                            "--prompt-policy", policy)  # fmt: skip
    a = await server.new_session_v2()
    await inserted(server, a, [{"tool": "test_stubborn", "args": {"s": 2}}])
    await server.probe("tool_started", sessionId=a)
    await server.cancel(a)
    new = await server.prompt(a, [{"say": "next"}])
    old_idle = await server.idle(a, timeout=T_ESC + 1)
    assert stop_of(old_idle) == "cancelled"
    answer = await server.response(new, timeout=T_ESC + 1)
    assert "messageId" in answer["result"]
    first_chunk = await server.wait_for(chunk("next"))
    assert position(server, old_idle) < position(server, answer) < position(server, first_chunk)
    assert server.arrival_time(first_chunk) - server.arrival_time(old_idle) <= T_START
    assert stop_of(await server.idle(a, 2)) == "end_turn"


async def test_v2_a_second_cancel_claims_a_prompt_held_behind_a_stopping_work(server_v2: RawClient) -> None:
    """I10 epoch rule on v2: a cancel covers every prompt held before it, including one held behind work that an
    earlier cancel is stopping: -32800 within T_ACK, before that work's idle; nothing of it is echoed or run; the
    session's next prompt runs."""
    server = server_v2
    a = await server.new_session_v2()
    await inserted(server, a, [{"tool": "test_stubborn", "args": {"s": 2}}])
    await server.probe("tool_started", sessionId=a)
    await server.cancel(a)
    waiting = await server.prompt(a, [{"say": "never"}])
    t0 = await server.cancel(a)
    claimed = await server.response(waiting)
    assert claimed["error"]["code"] == -32800
    assert server.arrival_time(claimed) - t0 <= T_ACK
    old_idle = await server.idle(a, timeout=T_ESC + 1)
    assert stop_of(old_idle) == "cancelled"
    assert position(server, claimed) < position(server, old_idle)
    assert server.texts(a) == [] and len(server.updates(a, "user_message")) == 1
    await inserted(server, a, [{"say": "ok"}])
    assert stop_of(await server.idle(a, 2, timeout=T_ESC + 1)) == "end_turn"


# --- I11 ---


async def test_v2_cancel_in_the_settlement_window_yields_exactly_one_idle_and_the_decided_outcome(
    server_v2: RawClient,
) -> None:
    """I11 on v2: a cancel read while the work's outcome is decided but it is still settling (post-turn gate) ends it
    with exactly one idle, `end_turn`; a cancel after that sends nothing; the next prompt runs normally."""
    server = server_v2
    a = await server.new_session_v2()
    await inserted(server, a, [{"say": "b"}, {"after_turn_gate": "gs"}])
    await server.probe("gate_reached", sessionId=a, gate="gs")
    await server.cancel(a)
    await server.release(a, "gs")
    idle = await server.idle(a)
    assert stop_of(idle) == "end_turn"  # the decided outcome stands
    await server.cancel(a)
    await server.quiet(W_QUIET, lambda m: m in after(server, idle) and is_state(a, "idle")(m))
    await inserted(server, a, [{"say": "c"}])
    assert stop_of(await server.idle(a, 2)) == "end_turn"
    assert server.texts(a) == ["b", "c"]
    assert [u["state"] for u in server.states(a)] == ["running", "idle", "running", "idle"]


# --- I12 ---


async def test_v2_repeated_cancels_act_once_and_do_not_restart_the_deadline(server_v2: RawClient) -> None:
    """I12 on v2 (a client request never answered, then a tool that ignores cancellation): two cancels in one write
    and a third after the idle act as one: one withdrawal, one `cancelled` tool call update, one idle; the deadline
    runs from the first cancel; a late answer to the withdrawn request is dropped."""
    server = server_v2
    a = await server.new_session_v2()
    await inserted(server, a, [HOLD_V2, {"say": "never"}])
    held = await server.wait_for(lambda m: m.get("method") == "_test/hold")
    t0 = await server.send(
        {"method": "session/cancel", "params": {"sessionId": a}},
        {"method": "session/cancel", "params": {"sessionId": a}},
    )
    idle = await server.idle(a)
    await server.cancel(a)  # during or after cleanup: still nothing more
    assert stop_of(idle) == "cancelled"
    assert server.arrival_time(idle) - t0 <= T_ACK
    retractions = [m for m in server.received if m.get("method") == "$/cancel_request"]
    assert [m["params"]["requestId"] for m in retractions] == [held["id"]]
    assert position(server, retractions[0]) < position(server, idle)
    cancelled = [u for u in server.updates(a, "tool_call_update") if u.get("status") == "cancelled"]
    assert len(cancelled) == 1
    # The deadline runs from the first cancel: a cancel at +0.4 s must not push an abandon to +0.9 s.
    b = await server.new_session_v2()
    await inserted(server, b, [{"tool": "test_stubborn", "args": {"s": 5}}])
    await server.probe("tool_started", sessionId=b)
    t0 = await server.cancel(b)
    await asyncio.sleep(0.4)
    await server.cancel(b)
    settled = await server.idle(b, timeout=T_ESC + 1)
    assert stop_of(settled) == "cancelled"
    assert server.arrival_time(settled) - t0 <= GRACE + 0.3
    # A late answer to the withdrawn request is dropped without a trace; one idle per session, whatever the cancels.
    count = len(server.received)
    await server.send({"id": held["id"], "result": {}})
    await server.quiet(W_QUIET, lambda m: m in server.received[count:] and not_probe(m))
    assert [u["state"] for u in server.states(a)].count("idle") == 1
    assert [u["state"] for u in server.states(b)].count("idle") == 1


# --- I13 ---


async def test_v2_cancel_for_unknown_missing_or_mistyped_sessions_is_silent_and_harmless(server_v2: RawClient) -> None:
    """I13 on v2: no reply and no effect on the only running session (no fallback routing); its work ends
    `idle end_turn`."""
    server = server_v2
    a = await server.new_session_v2()
    await inserted(server, a, [{"gate": "g1"}, {"say": "done"}])
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
    assert stop_of(await server.idle(a)) == "end_turn"
    assert server.texts(a) == ["done"]


async def test_v2_a_cancel_naming_a_closed_session_is_silent_and_touches_no_other_work(server_v2: RawClient) -> None:
    """I13 on v2 for a closed session's id: nothing answers the cancel, the work still running is untouched."""
    server = server_v2
    closed, running = await server.new_session_v2(), await server.new_session_v2()
    assert (await server.call("session/close", {"sessionId": closed}))["result"] == {}
    before = len(server.updates(closed))
    await inserted(server, running, [{"gate": "g"}, {"say": "done"}])
    await server.probe("gate_reached", sessionId=running)
    count = len(server.received)
    await server.cancel(closed)
    await server.quiet(W_QUIET, lambda m: m in server.received[count:] and not_probe(m))  # nothing at all
    await server.release(running, "g")
    assert stop_of(await server.idle(running)) == "end_turn"
    assert server.texts(running) == ["done"]
    assert len(server.updates(closed)) == before


# --- I14 ---


async def test_v2_interrupting_a_stubborn_work_ends_it_at_the_deadline_and_its_late_result_publishes_nothing(
    start_server: StartServer,
) -> None:
    """I14 stubborn variant on v2 (§7 interrupt): P1's idle `cancelled` within T_ESC, then P2 is inserted and runs;
    the stubborn tool's late completion publishes nothing of P1."""
    server = await start_v2(
        start_server,
        "--model",
        "scripted",
        "--test-mode",
        "--cleanup-deadline",
        str(GRACE),
        "--prompt-policy",
        "interrupt",
    )
    a = await server.new_session_v2()
    # Not a cancellable call (test_stubborn has a fence of its own): after the idle only the turn's fence stands
    # between its late result and the client (mutation 12).
    await inserted(server, a, [{"tool": "test_stubborn_inline", "args": {"s": 2}}, {"say": "late"}])
    started = await server.probe("tool_started", sessionId=a)
    call_id = started["params"]["toolCallId"]
    t0 = await server.send(second := server.prompt_message(a, [{"say": "p2"}]))
    first = await server.idle(a, timeout=T_ESC + 1)
    assert stop_of(first) == "cancelled"
    assert server.arrival_time(first) - t0 <= T_ESC
    answer = await server.response(second["id"])
    assert "messageId" in answer["result"] and position(server, first) < position(server, answer)
    p2_chunk = await server.wait_for(chunk("p2"))
    assert server.arrival_time(p2_chunk) - server.arrival_time(first) <= T_START
    assert stop_of(await server.idle(a, 2)) == "end_turn"
    await server.probe("tool_exited", sessionId=a, toolCallId=call_id, reason="completed", timeout=scaled(4))
    await server.quiet(
        0.3,
        lambda m: (
            m.get("method") == "session/update"
            and m in after(server, first)
            and (call_id in repr(m) or "late" in repr(m))
        ),
    )


async def test_v2_back_to_back_prompts_under_interrupt_leave_only_the_last_to_run(start_server: StartServer) -> None:
    """I14 on v2: P2 and P3 arrive together while P1 runs: P1's work ends `idle cancelled`; P2, superseded before it
    was inserted, is withdrawn (-32800, no echo); P3 is inserted after P1's idle and runs."""
    server = await start_v2(start_server, *LONG_GRACE_ARGS, "--prompt-policy", "interrupt")
    a = await server.new_session_v2()
    await inserted(server, a, [{"gate": "g1"}])
    await server.probe("gate_reached", sessionId=a, gate="g1")
    second, third = server.prompt_message(a, [{"say": "p2"}]), server.prompt_message(a, [{"say": "p3"}])
    t0 = await server.send(second, third)
    first_idle = await server.idle(a)
    assert stop_of(first_idle) == "cancelled"
    assert server.arrival_time(first_idle) - t0 <= T_ACK
    superseded = await server.response(second["id"])
    assert superseded["error"]["code"] == -32800
    assert position(server, superseded) < position(server, first_idle)  # §20.1: held prompts first, then the idle
    answer = await server.response(third["id"])
    assert position(server, first_idle) < position(server, answer)
    assert stop_of(await server.idle(a, 2)) == "end_turn"
    assert server.texts(a) == ["p3"]
    assert len(server.updates(a, "user_message")) == 2
    assert probes(server, "step_started", prompt=second["id"]) == []


# --- I15 ---


async def test_v2_held_prompts_are_inserted_in_arrival_order_one_work_at_a_time(server_v2: RawClient) -> None:
    """I15 plain FIFO on v2 (hold, the v2 default): P2 and P3 are held while P1 runs (no response, no update); each
    is inserted after the previous work's idle, in arrival order; the next work's first chunk within T_START of the
    idle."""
    server = server_v2
    a = await server.new_session_v2()
    await inserted(server, a, [{"say": "p1"}, {"gate": "g1"}])
    await server.probe("gate_reached", sessionId=a, gate="g1")
    p2 = await server.prompt(a, [{"say": "p2"}])
    p3 = await server.prompt(a, [{"say": "p3"}])
    await server.quiet(0.3, lambda m: m.get("id") in (p2, p3) or (m.get("params", {}).get("prompt") in (p2, p3)))
    await server.release(a, "g1")
    idles = [await server.idle(a, nth) for nth in (1, 2, 3)]
    assert [stop_of(i) for i in idles] == ["end_turn"] * 3
    answers = [await server.response(p) for p in (p2, p3)]
    assert position(server, idles[0]) < position(server, answers[0]) < position(server, idles[1])
    assert position(server, idles[1]) < position(server, answers[1]) < position(server, idles[2])
    p2_chunk = await server.wait_for(chunk("p2"))
    assert server.arrival_time(p2_chunk) - server.arrival_time(idles[0]) <= T_START
    assert server.texts(a) == ["p1", "p2", "p3"]


async def test_v2_a_cancel_in_the_settlement_window_still_claims_every_held_prompt(start_server: StartServer) -> None:
    """I15/I11 on v2: a cancel read while P1 settles (outcome decided) withdraws P2 and P3, held before it (-32800
    within T_ACK, never started, never echoed); P1 keeps its decided `end_turn`; P4, sent later, runs."""
    server = await start_v2(start_server, "--model", "scripted", "--test-mode", "--cleanup-deadline", str(GRACE))
    a = await server.new_session_v2()
    await inserted(server, a, [{"say": "p1"}, {"after_turn_gate": "settle"}])
    await server.probe("gate_reached", sessionId=a, gate="settle")  # the outcome is decided; the work is settling
    held = [server.prompt_message(a, [{"say": "p2"}]), server.prompt_message(a, [{"say": "p3"}])]
    t0 = await server.send(*held, {"method": "session/cancel", "params": {"sessionId": a}})
    for prompt in held:
        claimed = await server.response(prompt["id"])
        assert claimed["error"]["code"] == -32800
        assert server.arrival_time(claimed) - t0 <= T_ACK
    await server.release(a, "settle")
    first_idle = await server.idle(a)
    assert stop_of(first_idle) == "end_turn"  # the decided outcome stands
    for prompt in held:
        assert probes(server, "step_started", prompt=prompt["id"]) == []
    await inserted(server, a, [{"say": "p4"}])
    assert stop_of(await server.idle(a, 2)) == "end_turn"
    assert server.texts(a) == ["p1", "p4"]
    assert len(server.updates(a, "user_message")) == 2


# --- I16 ---


def delegate(task: str, script: list[dict[str, Any]]) -> dict[str, Any]:
    return {"tool": "delegate", "args": {"task": task, "script": script}}


@pytest.mark.at_once
async def test_v2_cancelling_the_parent_cancels_child_and_grandchild_before_the_parent_idle(
    server_v2: RawClient,
) -> None:
    """I16 on v2, cascade down: the grandchild's step exits `cancelled` before the parent's `idle cancelled` (within
    T_ACK); every delegate call ends `cancelled`; nothing for any session after the idle, even once the grandchild's
    gate opens; children never speak under their own ids."""
    server = server_v2
    a = await server.new_session_v2()
    child = [{"say": "c1"}, delegate("deeper", [{"gate": "gg"}]), {"say": "c2"}]
    await inserted(server, a, [delegate("work", child), {"say": "never"}])
    reached = await server.probe("gate_reached", gate="gg")
    grandchild_id = reached["params"]["sessionId"]
    t0 = await server.cancel(a)
    idle = await server.idle(a)
    assert stop_of(idle) == "cancelled"
    assert server.arrival_time(idle) - t0 <= T_ACK
    exited = await server.probe("step_exited", sessionId=grandchild_id, reason="cancelled")
    assert position(server, exited) < position(server, idle)
    calls = {u["toolCallId"] for u in server.updates(a, "tool_call_update")}
    assert calls and all(call_statuses(server, a, call)[-1] == "cancelled" for call in calls)
    await server.release(grandchild_id, "gg")
    await server.quiet(0.4, lambda m: m in after(server, idle) and m.get("method") == "session/update")
    assert "never" not in server.texts(a)
    assert not [m for m in server.received if m.get("method") == "session/update" and not of_session(a)(m)]
    assert (await server.stats())["runningTurns"] == 0


async def test_v2_cancelling_a_child_stops_only_the_child_and_the_parent_work_goes_on(server_v2: RawClient) -> None:
    """I16 reverse on v2: `session/cancel` with the child's id stops the child (and its grandchild); the parent's
    delegate call fails, and the parent's work goes on to `idle end_turn` with one idle, never `cancelled`."""
    server = server_v2
    a = await server.new_session_v2()
    child = [{"say": "c1"}, delegate("deeper", [{"gate": "gg"}]), {"say": "c2"}]
    await inserted(server, a, [delegate("work", child), {"say": "parent continues"}])
    await server.probe("gate_reached", gate="gg")
    first_delegate = server.updates(a, "tool_call_update")[0]["toolCallId"]
    child_id = await server.wait_for(
        lambda m: (
            of_session(a)(m)
            and m["params"]["update"].get("toolCallId") == first_delegate
            and "childSessionId" in m["params"]["update"].get("_meta", {}).get("acpServer", {})
        )
    )
    child_session = child_id["params"]["update"]["_meta"]["acpServer"]["childSessionId"]
    await server.cancel(child_session)
    idle = await server.idle(a)
    assert stop_of(idle) == "end_turn"
    assert server.texts(a) == ["parent continues"]
    # `failed`, as on v1: nobody cancelled the parent's call (that is `tool_call/cancel`, §20.3), its child was
    # stopped under it, and the result says so.
    assert call_statuses(server, a, first_delegate)[-1] == "failed"
    assert [u["state"] for u in server.states(a)] == ["running", "idle"]


async def test_v2_cancelling_one_child_leaves_its_siblings_and_other_sessions_children_running(
    server_v2: RawClient,
) -> None:
    """I16 isolation on v2: the next child of the same parent runs to its end, and another session's child is
    untouched (its parent's work still running, no idle) until its gate opens."""
    server = server_v2
    a, b = await server.new_session_v2(), await server.new_session_v2()
    script_a = [delegate("first", [{"gate": "ga"}]), delegate("second", [{"say": "second done"}]), {"say": "a done"}]
    await inserted(server, a, script_a)
    await inserted(server, b, [delegate("other", [{"gate": "gb"}, {"say": "b child done"}]), {"say": "b done"}])
    first = (await server.probe("gate_reached", gate="ga"))["params"]["sessionId"]
    other = (await server.probe("gate_reached", gate="gb"))["params"]["sessionId"]
    await server.cancel(first)
    assert stop_of(await server.idle(a)) == "end_turn"
    statuses = [u["status"] for u in server.updates(a, "tool_call_update") if u.get("status") in FINAL_V2]
    assert statuses == ["failed", "completed"]  # the stopped child (as in the reverse test), then its sibling
    assert server.texts(a) == ["a done"]
    assert [u["state"] for u in server.states(b)] == ["running"]  # b's child still waits at its gate
    await server.release(other, "gb")
    assert stop_of(await server.idle(b)) == "end_turn"
    final_b = [u for u in server.updates(b, "tool_call_update") if u.get("status") == "completed"]
    assert "b child done" in orjson.dumps(final_b[-1]["content"]).decode()


@pytest.mark.at_once
async def test_v2_closing_the_parent_session_cancels_its_children_before_the_idle_and_the_close_answer(
    server_v2: RawClient,
) -> None:
    """I20 (c) with I16 on v2 (§20.2): the close cascades to the child (its step exits `cancelled`), then the
    parent's `idle cancelled`, then `{}` within T_ACK; nothing for the session after."""
    server = server_v2
    a = await server.new_session_v2()
    await inserted(server, a, [delegate("work", [{"say": "c1"}, {"gate": "cg"}]), {"say": "never"}])
    reached = await server.probe("gate_reached", gate="cg")
    child = reached["params"]["sessionId"]
    t0 = await server.send({"id": "close-1", "method": "session/close", "params": {"sessionId": a}})
    closed = await server.response("close-1")
    assert closed["result"] == {}
    assert server.arrival_time(closed) - t0 <= T_ACK
    idle = await server.idle(a)
    assert stop_of(idle) == "cancelled"
    exited = await server.probe("step_exited", sessionId=child, reason="cancelled")
    assert position(server, exited) < position(server, idle) < position(server, closed)
    await server.quiet(0.3, lambda m: m in after(server, closed) and of_session(a)(m))
    assert (await server.stats())["runningTurns"] == 0


# --- I17 ---


@pytest.mark.timeout(30)
async def test_v2_stdin_eof_cancels_all_work_and_exits_in_time_leaving_no_process(start_server: StartServer) -> None:
    """I17 on v2: EOF with a gated work, a local process, a stubborn tool and an unanswered permission question (and a
    prompt held): exit 0 within T_EXIT, and the local process's group is gone."""
    server = await start_v2(start_server)
    a, b, c, d = [await server.new_session_v2() for _ in range(4)]
    await inserted(server, a, [{"gate": "gA"}])
    await server.prompt(a, [{"say": "held"}])
    await inserted(server, b, [{"tool": "test_local_proc", "args": {"command": "sleep 600"}}])
    await inserted(server, c, [{"tool": "test_stubborn", "args": {"s": 30}}])
    await inserted(server, d, [{"tool": "run_command", "args": {"command": "true"}}])
    await server.probe("gate_reached", sessionId=a)
    pid = (await server.probe("proc_started", sessionId=b))["params"]["pid"]
    await server.probe("tool_started", sessionId=c)
    await server.wait_for(lambda m: m.get("method") == "session/request_permission")
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


# --- I19 ---


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
async def test_v2_every_outcome_ends_with_one_idle_and_leaves_the_session_reusable(
    server_v2: RawClient, script: list[dict[str, Any]], cancel: bool, outcome: str
) -> None:
    """I19 on v2: whatever ends the work, the prompt was answered once ({messageId}), the work ends with exactly one
    idle carrying its stop reason (`error` with the error for a failure), a stale cancel after it is a no-op, and the
    next prompt's first chunk comes within T_START; nothing is left registered."""
    server = server_v2
    a = await server.new_session_v2()
    await inserted(server, a, script)
    if cancel:
        await server.wait_for(lambda m: m.get("params", {}).get("event") in ("gate_reached", "tool_started"))
        await server.cancel(a)
    idle = await server.idle(a, timeout=T_ESC + 1)
    assert stop_of(idle) == outcome
    assert ("error" in idle["params"]["update"]) is (outcome == "error")
    await server.cancel(a)  # a stale-registry probe: must be a no-op
    t0 = await server.send(follow := server.prompt_message(a, [{"say": "ok"}]))
    first_chunk = await server.wait_for(chunk("ok"))
    assert server.arrival_time(first_chunk) - t0 <= T_START
    assert "messageId" in (await server.response(follow["id"]))["result"]
    assert stop_of(await server.idle(a, 2)) == "end_turn"
    assert [u["state"] for u in server.states(a)].count("idle") == 2
    stats = await server.stats()
    assert stats["runningTurns"] == 0
    assert stats["queuedPrompts"] == 0
    assert stats["pendingClientRequests"] == 0


# --- I20 ---


async def test_v2_close_with_a_tool_ignoring_cancel_still_ends_the_work_before_its_answer_within_the_deadline(
    server_v2: RawClient,
) -> None:
    """I20 (c) on v2 (§20.2) with uncooperative work: `idle cancelled` precedes the close's `{}`, which comes within
    T_ESC; nothing for the session after it."""
    server = server_v2
    a = await server.new_session_v2()
    await inserted(server, a, [{"tool": "test_stubborn", "args": {"s": 3}}])
    await server.probe("tool_started", sessionId=a)
    t0 = await server.send({"id": "close-1", "method": "session/close", "params": {"sessionId": a}})
    closed = await server.response("close-1", timeout=T_ESC + 1)
    assert closed["result"] == {}
    idle = await server.idle(a)
    assert stop_of(idle) == "cancelled"
    assert position(server, idle) < position(server, closed)
    assert server.arrival_time(closed) - t0 <= T_ESC
    await server.quiet(0.3, lambda m: m in after(server, closed) and of_session(a)(m))


# --- the v2 twins of two proofs in test_invariant_proofs.py (I6 with a real model loop, I19 with a late finisher) ---


async def test_v2_a_late_tool_result_of_an_abandoned_work_never_reaches_the_next_model_request(
    start_server: StartServer,
) -> None:
    """I6 on v2, seen from the model: the work abandoned at the deadline (idle `cancelled` within T_ESC, the probe
    before it) later gets its tool's result; the next prompt's model request has exactly one result for that call,
    the note the cancel wrote, never the late one."""
    stubborn_seconds = GRACE + 1.0  # returns well after the work was abandoned at the deadline
    with FakeOpenAI() as model:
        # Not a cancellable call (test_stubborn is one: its body runs apart and never gives its late result back):
        # it runs inside the turn, so when it returns the abandoned loop appends its result to its own list.
        late = ("call_late", "test_stubborn_inline", [orjson.dumps({"s": stubborn_seconds}).decode()])
        model.script(tool_call_reply(late))
        model.set_default(text_reply("fresh"))
        server = await start_server(
            "--model", "openai:fake", "--base-url", model.base_url, "--test-mode", "--cleanup-deadline", str(GRACE),
            env={"OPENAI_API_KEY": "sk-test"},
        )  # fmt: skip
        await server.initialize_v2()
        a = await server.new_session_v2()
        # Named first, so no background title request is still talking to the fake model when the test ends.
        title = {"sessionId": a, "prompt": [{"type": "text", "text": "/title Proof"}]}
        assert "messageId" in (await server.call("session/prompt", title))["result"]
        assert stop_of(await server.idle(a)) == "end_turn"
        one = {"sessionId": a, "prompt": [{"type": "text", "text": "one"}]}
        assert "messageId" in (await server.call("session/prompt", one))["result"]
        # Only a wait, never asserted: the first model call loads the HTTP client, seconds on a loaded machine.
        await server.probe("tool_started", sessionId=a, toolCallId="call_late", timeout=4 * T_EXIT)
        t0 = await server.cancel(a)
        cancelled = await server.idle(a, 2, timeout=T_ESC + 1)
        assert stop_of(cancelled) == "cancelled"
        assert server.arrival_time(cancelled) - t0 <= T_ESC
        abandoned = await server.probe("step_exited", sessionId=a, reason="abandoned")
        assert position(server, abandoned) < position(server, cancelled)
        # The zombie's tool returns now, and its loop appends the result to the conversation it was working on.
        await server.probe("tool_exited", sessionId=a, toolCallId="call_late", reason="completed", timeout=T_ESC + 2)
        two = {"sessionId": a, "prompt": [{"type": "text", "text": "two"}]}
        assert "messageId" in (await server.call("session/prompt", two))["result"]
        assert stop_of(await server.idle(a, 3)) == "end_turn"
        [asked] = [
            r.body["messages"]
            for r in model.requests
            if r.body.get("tools") and r.body["messages"][-1] == {"role": "user", "content": "two"}
        ]
    assert not [m for m in asked if "ignored cancellation" in str(m.get("content"))], asked
    results = [m for m in asked if m["role"] == "tool" and m.get("tool_call_id") == "call_late"]
    assert len(results) == 1, asked
    assert "cancelled" in str(results[0]["content"])


async def test_v2_a_replacement_stays_cancellable_after_the_replaced_work_finishes_late(
    start_server: StartServer,
) -> None:
    """I19 on v2 (§7 interrupt): P1's cleanup takes a while (far less than the deadline), P2 and P3 arrive together:
    P2 is withdrawn (-32800), P1 ends `idle cancelled` once its finalizer is done, P3 is inserted and runs alone after
    that idle; P1's late finish left P3's registry entry alone, so a cancel still finds P3 (idle within T_ACK)."""
    server = await start_v2(start_server, *LONG_GRACE_ARGS, "--prompt-policy", "interrupt")
    a = await server.new_session_v2()
    await inserted(server, a, [{"tool": "test_hang_finalizer", "args": {"s": 30, "f": T_ACK}}])
    await server.probe("tool_started", sessionId=a)
    superseded = server.prompt_message(a, [{"say": "never"}])
    successor = server.prompt_message(a, [{"say": "p3"}, {"gate": "g3"}, {"say": "p3-late"}])
    await server.send(superseded, successor)
    assert (await server.response(superseded["id"]))["error"]["code"] == -32800
    old_idle = await server.idle(a)
    assert stop_of(old_idle) == "cancelled"
    finalized = await server.probe("finalizer_exited", sessionId=a)
    assert position(server, finalized) < position(server, old_idle)
    assert "messageId" in (await server.response(successor["id"]))["result"]
    await server.probe("gate_reached", sessionId=a, prompt=successor["id"], gate="g3")
    t0 = await server.cancel(a)  # finds the successor: the old work's late finish left its entry alone
    idle = await server.idle(a, 2)
    assert stop_of(idle) == "cancelled"
    assert server.arrival_time(idle) - t0 <= T_ACK
    started = probes(server, "step_started", prompt=successor["id"])
    assert position(server, old_idle) < position(server, started[0])  # and it ran alone, after P1's idle
    assert server.texts(a) == ["p3"]
    assert not [m for m in server.received if m.get("params", {}).get("reason") == "abandoned"]
    stats = await server.stats()
    assert (stats["runningTurns"], stats["queuedPrompts"]) == (0, 0)


async def test_v2_a_client_answering_our_request_with_request_cancelled_fails_the_call_and_the_work_goes_on(
    server_v2: RawClient,
) -> None:
    """I20 (b) on v2: the client gave up on one of our requests (`-32800`). That is an ordinary error answer, not a
    cancel of the work: the tool call ends `failed` (not `cancelled`: nobody cancelled the work) with the code in its
    content, the model goes on, and the work ends `idle end_turn`, one idle."""
    server = server_v2
    a = await server.new_session_v2()
    await inserted(server, a, [HOLD_V2, {"say": "after"}])
    held = await server.wait_for(lambda m: m.get("method") == "_test/hold")
    await server.send({"id": held["id"], "error": {"code": -32800, "message": "Request cancelled"}})
    assert stop_of(await server.idle(a)) == "end_turn"
    closing = [u for u in server.updates(a, "tool_call_update") if u.get("status") in FINAL_V2]
    assert [u["status"] for u in closing] == ["failed"]
    assert "-32800" in orjson.dumps(closing[0].get("content")).decode()
    assert server.texts(a) == ["after"]
    assert [u["state"] for u in server.states(a)] == ["running", "idle"]
