"""The v2 counterparts of the INTERRUPTS.md invariants that test_v2_cancel.py does not hold (ACP-V2.md §20.7), end to
end beside their v1 twins in test_prompt_policies.py, test_subagents.py and test_invariant_proofs.py: those whose v2
scenario differs from v1's (held prompts, `-32800` claims, the `interrupt` policy, child sessions). An invariant both
versions state in the same scenario is one test in test_interrupts.py, run as v1 and as v2.

The reading is §20.7's: where v1 answers the prompt `cancelled`, a v2 prompt has been answered `{messageId}` at
insertion and its work ends with the session's `idle` `state_update` saying `cancelled`, within the same bound as the
v1 twin; where v1 says "nothing after the response", v2 says nothing of the work after its idle; a tool call a cancel
ends is `cancelled` (v2 has the status); a held prompt a cancel claims is answered -32800. Each test's docstring names
its invariant; the teardown applies the common checks (C1-C4 in their v2 reading, schema, C6, exit in time).
"""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from tests.conftest import StartServer
from tests.e2e.test_interrupts import after, chunk, position
from tests.e2e.test_v2_cancel import is_state
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

# The invariants hold on every transport: each test that reaches a server through the fixtures runs over each.
pytestmark = [pytest.mark.timeout(40), pytest.mark.every_transport]


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


async def start_v2(start_server: StartServer, *args: str) -> RawClient:
    server = await start_server(*args)
    await server.initialize_v2()
    return server


async def inserted(server: RawClient, session_id: str, script: list[dict[str, Any]]) -> Any:
    """Send a prompt to an idle session and wait for its insertion ({messageId}); its request id."""
    prompt = await server.prompt(session_id, script)
    assert "messageId" in (await server.response(prompt))["result"]
    return prompt


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


# --- the v2 twin of a proof in test_invariant_proofs.py (I6 with a real model loop; mutation 02 names both) ---


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
