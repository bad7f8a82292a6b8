"""What a prompt sent while its session is busy does: docs/interrupts.md I14 (`interrupt`, the default), I15 (`queue`)
and `steer` (§6.1), end to end over stdio. `reject` is covered in test_interrupts.py.

The steering tests hold the running turn inside a tool call that waits for a client request the test answers, so
the steering prompt provably arrives before the model-call boundary that follows the tool result."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.conftest import StartServer
from tests.e2e.test_interrupts import after, chunk, position
from tests.support.fake_openai import FakeOpenAI, text_reply, tool_call_reply
from tests.support.harness import GRACE, LONG_GRACE, T_ACK, T_ESC, T_START, RawClient, scaled


async def policy_server(start_server: StartServer, policy: str | None, grace: float = GRACE) -> RawClient:
    """`grace=LONG_GRACE` for a test that tells an answer "at once" (T_ACK) from one at the cleanup deadline."""
    args = ["--model", "scripted", "--test-mode", "--cleanup-deadline", f"{grace:g}"]
    if policy is not None:
        args += ["--prompt-policy", policy]
    server = await start_server(*args)
    await server.initialize()
    return server


def probes_of(server: RawClient, prompt: object, event: str) -> list[dict[str, Any]]:
    return [
        m
        for m in server.received
        if m.get("method") == "_scripted/probe" and m["params"]["prompt"] == prompt and m["params"]["event"] == event
    ]


async def test_interrupt_is_the_default_and_the_new_prompt_takes_over_after_the_cleanup(
    start_server: StartServer,
) -> None:
    """I14: P1 answers `cancelled` after its cleanup; P2's first update follows that response; nothing of P1 after."""
    server = await policy_server(start_server, None, LONG_GRACE)
    a = await server.new_session()
    p1 = await server.prompt(a, [{"say": "p1"}, {"gate": "g1"}, {"say": "p1-late"}])
    await server.probe("gate_reached", sessionId=a, gate="g1")
    t0 = await server.send(second := server.prompt_message(a, [{"say": "p2"}]))
    first = await server.response(p1)
    assert first["result"] == {"stopReason": "cancelled"}
    assert server.arrival_time(first) - t0 <= T_ACK
    p2_chunk = await server.wait_for(chunk("p2"))
    assert position(server, first) < position(server, p2_chunk)
    assert server.arrival_time(p2_chunk) - server.arrival_time(first) <= T_START
    assert (await server.response(second["id"]))["result"] == {"stopReason": "end_turn"}
    exited = [m for m in probes_of(server, p1, "step_exited") if m["params"].get("reason") == "cancelled"]
    assert exited and position(server, exited[0]) < position(server, first)
    await server.release(a, "g1")
    await server.quiet(0.3, lambda m: m in after(server, first) and "p1-late" in repr(m))


async def test_interrupting_a_stubborn_turn_answers_at_the_deadline_and_its_late_result_publishes_nothing(
    start_server: StartServer,
) -> None:
    server = await policy_server(start_server, "interrupt")
    a = await server.new_session()
    # Not a cancellable call (test_stubborn has a fence of its own): after the response only the turn's fence
    # stands between its late result and the client (mutation 12).
    p1 = await server.prompt(a, [{"tool": "test_stubborn_inline", "args": {"s": 2}}, {"say": "late"}])
    started = await server.probe("tool_started", sessionId=a)
    call_id = started["params"]["toolCallId"]
    t0 = await server.send(second := server.prompt_message(a, [{"say": "p2"}]))
    first = await server.response(p1, timeout=T_ESC + 1)
    assert first["result"] == {"stopReason": "cancelled"}
    assert server.arrival_time(first) - t0 <= T_ESC
    assert (await server.response(second["id"]))["result"] == {"stopReason": "end_turn"}
    await server.probe("tool_exited", sessionId=a, toolCallId=call_id, reason="completed", timeout=scaled(4))
    await server.quiet(
        0.3,
        lambda m: (
            m.get("method") == "session/update"
            and m in after(server, first)
            and (call_id in repr(m) or "late" in repr(m))
        ),
    )


async def test_back_to_back_prompts_supersede_each_other_and_only_the_last_runs(start_server: StartServer) -> None:
    """I14: P2 and P3 arrive together while P1 runs: P1 and P2 answer `cancelled`, P3 runs."""
    server = await policy_server(start_server, None)
    a = await server.new_session()
    p1 = await server.prompt(a, [{"gate": "g1"}])
    await server.probe("gate_reached", sessionId=a, gate="g1")
    second, third = server.prompt_message(a, [{"say": "p2"}]), server.prompt_message(a, [{"say": "p3"}])
    await server.send(second, third)
    assert (await server.response(p1))["result"] == {"stopReason": "cancelled"}
    assert (await server.response(second["id"]))["result"] == {"stopReason": "cancelled"}
    assert (await server.response(third["id"]))["result"] == {"stopReason": "end_turn"}
    assert server.texts(a) == ["p3"]


async def test_queue_runs_prompts_in_arrival_order_without_overlap(start_server: StartServer) -> None:
    """I15, plain FIFO: P2 produces nothing until P1 is answered."""
    server = await policy_server(start_server, "queue")
    a = await server.new_session()
    p1 = await server.prompt(a, [{"say": "p1"}, {"gate": "g1"}])
    await server.probe("gate_reached", sessionId=a, gate="g1")
    p2 = await server.prompt(a, [{"say": "p2"}])
    await server.quiet(0.3, lambda m: bool(m.get("method") == "_scripted/probe" and m["params"]["prompt"] == p2))
    await server.release(a, "g1")
    first = await server.response(p1)
    assert first["result"] == {"stopReason": "end_turn"}
    p2_chunk = await server.wait_for(chunk("p2"))
    assert position(server, first) < position(server, p2_chunk)
    assert server.arrival_time(p2_chunk) - server.arrival_time(first) <= T_START
    assert (await server.response(p2))["result"] == {"stopReason": "end_turn"}
    assert server.texts(a) == ["p1", "p2"]


async def test_queue_cancel_claims_the_running_and_the_queued_prompt_but_not_a_later_one(
    start_server: StartServer,
) -> None:
    """I15: the cancel answers P1 and queued P2 `cancelled` (P2 never starts); P3, sent after the cancel, runs."""
    server = await policy_server(start_server, "queue", LONG_GRACE)
    a = await server.new_session()
    p1 = await server.prompt(a, [{"say": "p1"}, {"gate": "g1"}])
    await server.probe("gate_reached", sessionId=a, gate="g1")
    p2 = await server.prompt(a, [{"say": "p2"}])
    t0 = await server.cancel(a)
    p3 = await server.prompt(a, [{"say": "p3"}])
    first, queued = await server.response(p1), await server.response(p2)
    assert first["result"] == queued["result"] == {"stopReason": "cancelled"}
    assert server.arrival_time(first) - t0 <= T_ACK and server.arrival_time(queued) - t0 <= T_ACK
    assert probes_of(server, p2, "step_started") == []
    assert (await server.response(p3))["result"] == {"stopReason": "end_turn"}
    assert server.texts(a) == ["p1", "p3"]


@pytest.mark.parametrize("policy", ["interrupt", "queue", "reject", "steer"])
async def test_the_policy_is_a_session_config_option(start_server: StartServer, policy: str) -> None:
    server = await policy_server(start_server, None)
    a = await server.new_session()
    answer = await server.call(
        "session/set_config_option", {"sessionId": a, "configId": "prompt_policy", "value": policy}
    )
    chosen = next(o for o in answer["result"]["configOptions"] if o["id"] == "prompt_policy")
    assert chosen["currentValue"] == policy and chosen["category"] == "_prompt_policy"
    p1 = await server.prompt(a, [{"gate": "g1"}, {"say": "one"}])
    await server.probe("gate_reached", sessionId=a, gate="g1")
    p2 = await server.prompt(a, [{"say": "two"}])
    if policy == "reject":
        assert (await server.response(p2))["error"]["code"] == -32600
        await server.release(a, "g1")
        assert (await server.response(p1))["result"] == {"stopReason": "end_turn"}
    elif policy in ("queue", "steer"):  # no model-call boundary before the turn ends: the prompt runs after it
        await server.release(a, "g1")
        assert (await server.response(p1))["result"] == {"stopReason": "end_turn"}
        assert (await server.response(p2))["result"] == {"stopReason": "end_turn"}
    else:
        assert (await server.response(p1))["result"] == {"stopReason": "cancelled"}
        assert (await server.response(p2))["result"] == {"stopReason": "end_turn"}


async def test_initialize_advertises_the_policies_and_the_server_default(start_server: StartServer) -> None:
    server = await start_server("--model", "scripted", "--prompt-policy", "queue")
    meta = (await server.initialize())["result"]["agentCapabilities"]["_meta"]["acpServer"]
    assert meta["promptPolicies"] == ["interrupt", "queue", "reject", "steer"]
    assert meta["defaultPromptPolicy"] == "queue"


# --- steer ---

HOLD = {"tool": "test_client_request", "args": {"method": "fs/read_text_file", "params": {"path": "/held"}}}


async def held_request(server: RawClient) -> dict[str, Any]:
    """The running turn's tool is waiting for this client request; answering it ends the tool call."""
    return await server.wait_for(lambda m: m.get("method") == "fs/read_text_file" and "id" in m)


async def answer(server: RawClient, request: dict[str, Any]) -> None:
    await server.send({"id": request["id"], "result": {"content": "held content"}})


async def test_steer_hands_over_at_the_next_model_call_and_the_earlier_prompt_answers_end_turn_first(
    start_server: StartServer,
) -> None:
    server = await policy_server(start_server, "steer")
    a = await server.new_session()
    p1 = await server.prompt(a, [{"say": "p1"}, HOLD, {"say": "p1-never"}])
    held = await held_request(server)
    p2 = await server.prompt(a, [{"say": "steered"}])
    await server.quiet(0.2, lambda m: m.get("id") == p1 or chunk("steered")(m))  # nothing moves before the boundary
    await answer(server, held)
    first = await server.response(p1)
    assert first["result"] == {"stopReason": "end_turn"}
    steered = await server.wait_for(chunk("steered"))
    assert position(server, first) < position(server, steered)
    assert server.arrival_time(steered) - server.arrival_time(first) <= T_START
    assert (await server.response(p2))["result"] == {"stopReason": "end_turn"}
    assert server.texts(a) == ["p1", "steered"]  # the rest of P1's script never ran: the turn went on for P2
    [handed] = probes_of(server, p1, "handed_over")
    assert handed["params"]["modelCalls"] == 1
    # P1's tool call finished normally before the hand-over, with its result.
    finished = [u for u in server.updates(a, "tool_call_update") if u.get("status") == "completed"]
    assert len(finished) == 1 and position(server, handed) < position(server, first)


async def test_steer_the_model_sees_the_whole_task_so_far_and_the_new_message(
    start_server: StartServer, tmp_path: Path
) -> None:
    """With a real provider wire: the model call after the hand-over carries P1's prompt, its tool call and result,
    then P2's and P3's text, in order (several steering prompts join in order)."""
    with FakeOpenAI() as model:
        model.script(
            tool_call_reply(("call_1", "test_client_request", [HOLD_ARGS])),
            text_reply("steered ", "answer"),
        )
        env = {"OPENAI_API_KEY": "sk-test", "ACP_SERVER_CONFIG": str(tmp_path / "none.toml")}
        server = await start_server(
            "--model", "openai:fake-model", "--base-url", model.base_url, "--test-mode", "--prompt-policy", "steer",
            env=env,
        )  # fmt: skip
        await server.initialize()
        a = await server.new_session()
        # Named first, so no background title request takes one of the scripted replies.
        assert "result" in await server.call("session/prompt", text_prompt(a, "/title Steering"))
        p1 = await server.request("session/prompt", text_prompt(a, "refactor the parser"))
        held = await held_request(server)
        p2 = await server.request("session/prompt", text_prompt(a, "keep the public API"))
        p3 = await server.request("session/prompt", text_prompt(a, "and add a test"))
        await answer(server, held)
        assert (await server.response(p1, timeout=scaled(10)))["result"] == {"stopReason": "end_turn"}
        assert (await server.response(p2, timeout=scaled(10)))["result"] == {"stopReason": "end_turn"}
        assert (await server.response(p3, timeout=scaled(10)))["result"] == {"stopReason": "end_turn"}
        second = model.requests[1].body["messages"]
        roles = [(m["role"], m.get("content")) for m in second if m["role"] != "system"]
        assert roles[0] == ("user", "refactor the parser")
        assert second[2]["tool_calls"][0]["id"] == "call_1"
        assert roles[2][0] == "tool" and "held content" in roles[2][1]
        assert roles[3:] == [("user", "keep the public API"), ("user", "and add a test")]
        assert server.texts(a)[-2:] == ["steered ", "answer"]
        # P2 joined and handed over at once: it never called the model on its own.
        assert len([r for r in model.requests if r.body.get("tools")]) == 2


async def test_steer_cancel_before_the_hand_over_answers_both_prompts_cancelled(start_server: StartServer) -> None:
    server = await policy_server(start_server, "steer", LONG_GRACE)
    a = await server.new_session()
    p1 = await server.prompt(a, [{"say": "p1"}, HOLD, {"say": "p1-never"}])
    await held_request(server)
    p2 = await server.prompt(a, [{"say": "p2-never"}])
    t0 = await server.cancel(a)
    first, second = await server.response(p1), await server.response(p2)
    assert first["result"] == second["result"] == {"stopReason": "cancelled"}
    assert server.arrival_time(second) - t0 <= T_ACK
    assert probes_of(server, p2, "step_started") == []
    p3 = await server.prompt(a, [{"say": "p3"}])
    assert (await server.response(p3))["result"] == {"stopReason": "end_turn"}
    assert server.texts(a) == ["p1", "p3"]


async def test_steer_cancel_after_the_hand_over_answers_only_the_new_prompt(start_server: StartServer) -> None:
    server = await policy_server(start_server, "steer", LONG_GRACE)
    a = await server.new_session()
    p1 = await server.prompt(a, [{"say": "p1"}, HOLD])
    held = await held_request(server)
    p2 = await server.prompt(a, [{"say": "p2"}, {"gate": "g2"}, {"say": "p2-never"}])
    await answer(server, held)
    assert (await server.response(p1))["result"] == {"stopReason": "end_turn"}
    await server.probe("gate_reached", sessionId=a, gate="g2")
    t0 = await server.cancel(a)
    second = await server.response(p2)
    assert second["result"] == {"stopReason": "cancelled"}
    assert server.arrival_time(second) - t0 <= T_ACK
    assert server.texts(a) == ["p1", "p2"]


async def test_steer_when_the_turn_ends_without_another_model_call_the_prompt_runs_at_once(
    start_server: StartServer,
) -> None:
    server = await policy_server(start_server, "steer")
    a = await server.new_session()
    p1 = await server.prompt(a, [{"say": "p1"}, {"gate": "g1"}, {"say": "p1-end"}])
    await server.probe("gate_reached", sessionId=a, gate="g1")
    p2 = await server.prompt(a, [{"say": "p2"}])
    await server.release(a, "g1")
    first = await server.response(p1)
    assert first["result"] == {"stopReason": "end_turn"}
    p2_chunk = await server.wait_for(chunk("p2"))
    assert server.arrival_time(p2_chunk) - server.arrival_time(first) <= T_START
    assert (await server.response(p2))["result"] == {"stopReason": "end_turn"}
    assert server.texts(a) == ["p1", "p1-end", "p2"]
    assert probes_of(server, p1, "handed_over") == []


async def test_steer_a_prompt_sent_while_the_turn_is_stopping_waits_for_the_cleanup_and_runs_on_its_own(
    start_server: StartServer,
) -> None:
    server = await policy_server(start_server, "steer")
    a = await server.new_session()
    p1 = await server.prompt(a, [{"tool": "test_stubborn", "args": {"s": 0.3}}, {"say": "p1-never"}])
    await server.probe("tool_started", sessionId=a)
    await server.cancel(a)
    p2 = await server.prompt(a, [{"say": "p2"}])
    first = await server.response(p1)
    assert first["result"] == {"stopReason": "cancelled"}
    assert (await server.response(p2))["result"] == {"stopReason": "end_turn"}
    assert position(server, first) < position(server, await server.wait_for(chunk("p2")))
    assert server.texts(a) == ["p2"]


async def test_steer_each_prompt_keeps_its_own_record_in_the_session_history(
    start_server: StartServer, tmp_path: Path
) -> None:
    """After a hand-over, `session/load` in a new process replays P1 with its tool call, then P2 with its reply."""
    state = tmp_path / "state"
    args = ["--model", "scripted", "--test-mode", "--prompt-policy", "steer", "--state-dir", str(state)]
    server = await start_server(*args)
    await server.initialize()
    a = await server.new_session()
    p1 = await server.prompt(a, [{"say": "p1"}, HOLD, {"say": "p1-never"}])
    held = await held_request(server)
    p2 = server.prompt_message(a, [{"say": "steered"}], text="change of plan")
    await server.send(p2)
    await answer(server, held)
    assert (await server.response(p2["id"]))["result"] == {"stopReason": "end_turn"}
    assert (await server.response(p1))["result"] == {"stopReason": "end_turn"}
    await server.close()

    again = await start_server(*args)
    await again.initialize()
    loaded = await again.call("session/load", {"sessionId": a, "cwd": "/tmp", "mcpServers": []})
    assert "result" in loaded, loaded
    kinds = [
        (u["sessionUpdate"], u.get("content", {}).get("text"))
        for u in again.updates(a)
        if u["sessionUpdate"] in ("user_message_chunk", "agent_message_chunk", "tool_call")
    ]
    assert kinds == [
        ("user_message_chunk", "go"),
        ("agent_message_chunk", "p1"),
        ("tool_call", None),
        ("user_message_chunk", "change of plan"),
        ("agent_message_chunk", "steered"),
    ]


HOLD_ARGS = '{"method": "fs/read_text_file", "params": {"path": "/held"}}'


def text_prompt(session_id: str, text: str) -> dict[str, Any]:
    return {"sessionId": session_id, "prompt": [{"type": "text", "text": text}]}
