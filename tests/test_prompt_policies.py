"""What a prompt sent while its session is busy does: INTERRUPTS.md I14 (`interrupt`, the default) and I15
(`queue`), end to end over stdio. `reject` is covered in test_interrupts.py."""

from __future__ import annotations

from typing import Any

import pytest

from tests.conftest import StartServer
from tests.harness import T_ACK, T_ESC, T_START, RawClient
from tests.test_interrupts import after, chunk, position


async def policy_server(start_server: StartServer, policy: str | None) -> RawClient:
    args = ["--model", "scripted", "--test-mode", "--cleanup-deadline", "0.5"]
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
    server = await policy_server(start_server, None)
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
    p1 = await server.prompt(a, [{"tool": "test_stubborn", "args": {"s": 2}}, {"say": "late"}])
    started = await server.probe("tool_started", sessionId=a)
    call_id = started["params"]["toolCallId"]
    t0 = await server.send(second := server.prompt_message(a, [{"say": "p2"}]))
    first = await server.response(p1, timeout=T_ESC + 1)
    assert first["result"] == {"stopReason": "cancelled"}
    assert server.arrival_time(first) - t0 <= T_ESC
    assert (await server.response(second["id"]))["result"] == {"stopReason": "end_turn"}
    await server.probe("tool_exited", sessionId=a, toolCallId=call_id, reason="completed", timeout=4)
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
    server = await policy_server(start_server, "queue")
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


@pytest.mark.parametrize("policy", ["interrupt", "queue", "reject"])
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
    elif policy == "queue":
        await server.release(a, "g1")
        assert (await server.response(p1))["result"] == {"stopReason": "end_turn"}
        assert (await server.response(p2))["result"] == {"stopReason": "end_turn"}
    else:
        assert (await server.response(p1))["result"] == {"stopReason": "cancelled"}
        assert (await server.response(p2))["result"] == {"stopReason": "end_turn"}


async def test_initialize_advertises_the_policies_and_the_server_default(start_server: StartServer) -> None:
    server = await start_server("--model", "scripted", "--prompt-policy", "queue")
    meta = (await server.initialize())["result"]["agentCapabilities"]["_meta"]["acpServer"]
    assert meta["promptPolicies"] == ["interrupt", "queue", "reject"]
    assert meta["defaultPromptPolicy"] == "queue"
