"""Cancellation and busy prompts on v2, end to end over stdio (ACP-V2.md §7, §20; the v2 reading of INTERRUPTS.md's
invariants, §20.7): `session/cancel` ends the work with `idle cancelled` as the last thing sent for it, within T_ACK
when the work cooperates; a prompt sent while work runs is held (`queue`, the v2 default) until `idle`; a cancel
answers the prompts held before it `-32800` and never touches later ones (I10); `$/cancel_request` withdraws a held
prompt; `session/close` ends it all before its answer. A permission wait is `requires_action`. Tests named `test_acp_…`
hold the acp-tck v2 requirement of that id (src/tck/v2/requirements.py at 1314e0951863b03844fd530e0e14bd88843aabe7).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.conftest import StartServer
from tests.e2e.test_interrupts import after, of_session, position
from tests.support.harness import DEFAULT_ARGS, LONG_GRACE_ARGS, T_ACK, T_ESC, T_EXIT, T_WAIT, W_QUIET, RawClient

# The invariants hold on every transport: each test that reaches a server through the fixtures runs over each.
pytestmark = [pytest.mark.timeout(40), pytest.mark.every_transport]


def is_state(session_id: str, state: str) -> Any:
    def matches(message: dict[str, Any]) -> bool:
        if message.get("method") != "session/update" or message["params"]["sessionId"] != session_id:
            return False
        update = message["params"]["update"]
        return bool(update["sessionUpdate"] == "state_update" and update["state"] == state)

    return matches


@pytest.mark.at_once
async def test_acp_cancel_201_202_203_the_cancelled_work_ends_idle_cancelled_and_nothing_of_it_follows(
    server_v2: RawClient,
) -> None:
    """I1/I5/I6 on v2: the announced tool call ends `cancelled` (§23 Q7) before the idle; the idle comes within T_ACK
    (the work cooperates); after it, nothing of the work and no second state_update (ACP-CANCEL-202)."""
    server = server_v2
    session_id = await server.new_session_v2()
    prompt = await server.prompt(session_id, [{"tool": "test_sleep", "args": {"s": 30}}, {"say": "late"}])
    await server.response(prompt)
    await server.probe("tool_started", sessionId=session_id, tool="test_sleep")
    sent = await server.cancel(session_id)
    idle = await server.idle(session_id)
    assert server.arrival_time(idle) - sent <= T_ACK
    assert idle["params"]["update"]["stopReason"] == "cancelled"
    calls = [m for m in server.received[: position(server, idle)] if of_session(session_id)(m)]
    finals = [m["params"]["update"] for m in calls if m["params"]["update"].get("status") == "cancelled"]
    assert len(finals) == 1 and finals[0]["sessionUpdate"] == "tool_call_update"
    await server.quiet(0.3, lambda m: m in after(server, idle) and of_session(session_id)(m))
    assert not [m for m in server.received if "id" in m and m.get("id") is None]  # no answer to the notification


async def test_a_prompt_sent_while_work_runs_is_held_until_idle_then_inserted(server_v2: RawClient) -> None:
    """§7 hold (queue, the v2 default): no response while held; at the idle it is inserted (response, echo, running)
    and runs; one foreground work at a time."""
    server = server_v2
    session_id = await server.new_session_v2()
    first = await server.prompt(session_id, [{"gate": "g"}, {"say": "one"}])
    await server.probe("gate_reached", sessionId=session_id, gate="g")
    second = await server.prompt(session_id, [{"say": "two"}])
    await server.quiet(0.3, lambda m: m.get("id") == second)
    await server.release(session_id, "g")
    first_idle = await server.idle(session_id)
    answer = await server.response(second)
    assert position(server, first_idle) < position(server, answer)
    assert "messageId" in answer["result"] and (await server.response(first))["result"]["messageId"]
    assert (await server.idle(session_id, 2))["params"]["update"]["stopReason"] == "end_turn"
    assert [u["state"] for u in server.states(session_id)] == ["running", "idle", "running", "idle"]


async def test_a_cancel_answers_the_prompts_held_before_it_and_not_the_one_after(server_v2: RawClient) -> None:
    """I10 on v2: held prompts are answered -32800 at once (before the idle), nothing of them is echoed; a prompt
    sent after the cancel is inserted and runs."""
    server = server_v2
    session_id = await server.new_session_v2()
    await server.prompt(session_id, [{"gate": "g"}])
    await server.probe("gate_reached", sessionId=session_id, gate="g")
    held = await server.prompt(session_id, [{"say": "never"}])
    cancel = {"method": "session/cancel", "params": {"sessionId": session_id}}
    later = server.prompt_message(session_id, [{"say": "after"}])
    await server.send(cancel, later)
    withdrawn = await server.response(held)
    assert withdrawn["error"]["code"] == -32800
    idle = await server.idle(session_id)
    assert position(server, withdrawn) < position(server, idle)
    assert idle["params"]["update"]["stopReason"] == "cancelled"
    inserted = await server.response(later["id"])
    assert position(server, idle) < position(server, inserted)
    assert (await server.idle(session_id, 2))["params"]["update"]["stopReason"] == "end_turn"
    echoed = [u["messageId"] for u in server.updates(session_id, "user_message")]
    assert len(echoed) == 2 and inserted["result"]["messageId"] in echoed


async def test_cancel_request_withdraws_a_held_prompt_and_leaves_the_work_alone(server_v2: RawClient) -> None:
    """§20.5: the held prompt is answered -32800; the running work goes on to end_turn. Naming an inserted prompt is
    ignored (§23 Q10)."""
    server = server_v2
    session_id = await server.new_session_v2()
    running = await server.prompt(session_id, [{"gate": "g"}, {"say": "done"}])
    await server.probe("gate_reached", sessionId=session_id, gate="g")
    held = await server.prompt(session_id, [{"say": "never"}])
    await server.notify("$/cancel_request", {"requestId": held})
    await server.notify("$/cancel_request", {"requestId": running})
    assert (await server.response(held))["error"]["code"] == -32800
    await server.release(session_id, "g")
    assert (await server.idle(session_id))["params"]["update"]["stopReason"] == "end_turn"
    assert len(server.updates(session_id, "user_message")) == 1


async def test_cancel_request_right_behind_a_prompt_to_an_idle_session_leaves_its_work_alone(
    server_v2: RawClient,
) -> None:
    """§23 Q10: a prompt to an idle session is inserted at admission, so a `$/cancel_request` naming it, read right
    behind it, finds nothing held: ignored, and the work ends end_turn (not `idle cancelled`)."""
    server = server_v2
    session_id = await server.new_session_v2()
    prompt = server.prompt_message(session_id, [{"say": "done"}])
    await server.send(prompt, {"method": "$/cancel_request", "params": {"requestId": prompt["id"]}})
    assert "messageId" in (await server.response(prompt["id"]))["result"]
    assert (await server.idle(session_id))["params"]["update"]["stopReason"] == "end_turn"
    assert len(server.updates(session_id, "user_message")) == 1


async def test_acp_close_202_cancel_208_close_ends_the_work_and_held_prompts_before_its_answer(
    server_v2: RawClient,
) -> None:
    """§5.4, §20.2: held prompts -32800, the work's idle cancelled, then `{}`; nothing for the session after."""
    server = server_v2
    session_id = await server.new_session_v2()
    await server.prompt(session_id, [{"gate": "g"}])
    await server.probe("gate_reached", sessionId=session_id, gate="g")
    held = await server.prompt(session_id, [{"say": "never"}])
    closed = await server.call("session/close", {"sessionId": session_id})
    assert closed["result"] == {}
    idle = await server.idle(session_id)
    withdrawn = await server.response(held)
    assert withdrawn["error"]["code"] == -32800
    assert idle["params"]["update"]["stopReason"] == "cancelled"
    assert position(server, idle) < position(server, closed)
    await server.quiet(0.3, lambda m: m in after(server, closed) and of_session(session_id)(m))
    again = await server.call("session/prompt", server.prompt_message(session_id, [{"say": "x"}])["params"])
    assert again["error"]["code"] == -32002


async def test_acp_patch_209_a_permission_wait_is_requires_action_then_running(server_v2: RawClient) -> None:
    """§12: v2 params (title, a tool_call subject); requires_action while the answer is awaited, running after it,
    all inside running..idle."""
    server = server_v2
    session_id = await server.new_session_v2()
    await server.prompt(session_id, [{"tool": "run_command", "args": {"command": "true"}}, {"say": "ok"}])
    asked = await server.wait_for(lambda m: m.get("method") == "session/request_permission")
    params = asked["params"]
    assert params["title"] == "true" and "toolCall" not in params
    assert params["subject"]["type"] == "command"
    assert params["subject"]["command"] == "true" and params["subject"]["cwd"] == "/tmp"
    assert params["subject"]["toolCallId"]
    blocked = await server.wait_for(is_state(session_id, "requires_action"))
    assert position(server, blocked) < position(server, asked)
    await server.send({"id": asked["id"], "result": {"outcome": {"outcome": "selected", "optionId": "allow_once"}}})
    idle = await server.idle(session_id, timeout=T_WAIT)
    resumed = [m for m in server.received if is_state(session_id, "running")(m)]
    assert position(server, asked) < position(server, resumed[-1]) < position(server, idle)
    assert idle["params"]["update"]["stopReason"] == "end_turn"


async def test_a_cancel_during_a_permission_wait_ends_idle_cancelled_without_running_again(
    start_server: StartServer,
) -> None:
    """I8 on v2: the wait stops at once, the question is withdrawn, no `running` follows requires_action."""
    server = await start_server(*LONG_GRACE_ARGS)
    await server.initialize_v2()
    session_id = await server.new_session_v2()
    await server.prompt(session_id, [{"tool": "run_command", "args": {"command": "true"}}])
    asked = await server.wait_for(lambda m: m.get("method") == "session/request_permission")
    sent = await server.cancel(session_id)
    idle = await server.idle(session_id)
    assert server.arrival_time(idle) - sent <= T_ACK
    assert idle["params"]["update"]["stopReason"] == "cancelled"
    # §20.1 step 2: the question is withdrawn before the idle.
    withdrawn = await server.wait_for(
        lambda m: m.get("method") == "$/cancel_request" and m["params"]["requestId"] == asked["id"]
    )
    assert position(server, withdrawn) < position(server, idle)
    states = [u["state"] for u in server.states(session_id)]
    assert states == ["running", "requires_action", "idle"]


@pytest.mark.at_once
async def test_tool_call_cancel_stops_that_call_alone_and_the_turn_goes_on(server_v2: RawClient) -> None:
    """§20.3: the running call advertises `capabilities.cancel`; `{}` answers at once and precedes its final
    `tool_call_update` (`cancelled`, capabilities cleared); no idle, no extra running; the model is told and the turn
    ends `end_turn`. Then the finished call is -32602, and an unknown session -32002."""
    server = server_v2
    session_id = await server.new_session_v2()
    await server.prompt(session_id, [{"tool": "test_sleep", "args": {"s": 30}}, {"say": "went on"}])
    await server.probe("tool_started", sessionId=session_id, tool="test_sleep")
    advertised = await server.wait_for(
        lambda m: of_session(session_id)(m) and m["params"]["update"].get("capabilities") == {"cancel": {}}
    )
    call_id = advertised["params"]["update"]["toolCallId"]
    request = await server.request("tool_call/cancel", {"sessionId": session_id, "toolCallId": call_id})
    answer = await server.response(request)
    assert answer["result"] == {}
    final = await server.wait_for(
        lambda m: of_session(session_id)(m) and m["params"]["update"].get("status") == "cancelled"
    )
    assert position(server, answer) < position(server, final)
    assert final["params"]["update"]["capabilities"] is None
    assert server.arrival_time(final) - server.arrival_time(answer) <= T_ACK
    idle = await server.idle(session_id)
    assert idle["params"]["update"]["stopReason"] == "end_turn"
    went_on = [m for m in server.received if of_session(session_id)(m) and "went on" in repr(m)]
    assert went_on and position(server, final) < position(server, went_on[0]) < position(server, idle)
    assert [u["state"] for u in server.states(session_id)] == ["running", "idle"]
    done = await server.call("tool_call/cancel", {"sessionId": session_id, "toolCallId": call_id})
    assert done["error"]["code"] == -32602
    nobody = await server.call("tool_call/cancel", {"sessionId": "sess_none", "toolCallId": call_id})
    assert nobody["error"]["code"] == -32002 and nobody["error"]["data"] == {"sessionId": "sess_none"}


async def test_tool_call_cancel_naming_an_unknown_call_leaves_the_running_call_alone(server_v2: RawClient) -> None:
    """§20.3: while a cancellable call runs, `tool_call/cancel` naming another id ("call_bogus") is -32602; the
    running call is not touched: it ends `completed` after the refusal, and the turn ends `end_turn`."""
    server = server_v2
    session_id = await server.new_session_v2()
    await server.prompt(session_id, [{"tool": "test_sleep", "args": {"s": 2 * T_ACK}}, {"say": "went on"}])
    advertised = await server.wait_for(
        lambda m: of_session(session_id)(m) and m["params"]["update"].get("capabilities") == {"cancel": {}}
    )
    call_id = advertised["params"]["update"]["toolCallId"]
    refused = await server.call("tool_call/cancel", {"sessionId": session_id, "toolCallId": "call_bogus"})
    assert refused["error"]["code"] == -32602
    final = await server.wait_for(
        lambda m: (
            of_session(session_id)(m)
            and m["params"]["update"].get("toolCallId") == call_id
            and m["params"]["update"].get("status") in ("completed", "failed", "cancelled")
        )
    )
    assert final["params"]["update"]["status"] == "completed"
    assert position(server, refused) < position(server, final)  # it was still running when the cancel was refused
    idle = await server.idle(session_id)
    assert idle["params"]["update"]["stopReason"] == "end_turn"
    assert "went on" in server.texts(session_id)
    exited = await server.probe("tool_exited", sessionId=session_id, toolCallId=call_id)
    assert exited["params"]["reason"] == "completed"


# Longer than T_ESC: a call that ends cancelled within T_ESC was abandoned, not waited for.
STUBBORN_SECONDS = T_ESC + 1.0


def is_zombie_output(server: RawClient, since: dict[str, Any], call_id: str) -> Any:
    """Anything but a probe that names the abandoned call after `since`, or shows its late progress ("zombie")."""

    def matches(message: dict[str, Any]) -> bool:
        if message.get("method") == "_scripted/probe":
            return False
        shown = message.get("params", {}).get("update", {}).get("content")
        return (call_id in repr(message) and message in after(server, since)) or "zombie" in repr(shown)

    return matches


async def test_tool_call_cancel_of_a_tool_ignoring_it_abandons_the_call_at_the_deadline_and_the_turn_goes_on(
    server_v2: RawClient,
) -> None:
    """§23 Q6 / INTERRUPTS I6 for one call: the call that ignores `tool_call/cancel` is abandoned at T_grace and ends
    `cancelled` once (capabilities cleared); the model is told and the turn goes on to `end_turn` (no idle
    cancelled, no extra running); nothing of the abandoned call follows, even when it finishes; the session runs the
    next prompt."""
    server = server_v2
    session_id = await server.new_session_v2()
    stubborn = {"tool": "test_stubborn", "args": {"s": STUBBORN_SECONDS, "progress": "zombie"}}
    await server.prompt(session_id, [stubborn, {"say": "went on"}])
    advertised = await server.wait_for(
        lambda m: of_session(session_id)(m) and m["params"]["update"].get("capabilities") == {"cancel": {}}
    )
    call_id = advertised["params"]["update"]["toolCallId"]
    request = {"id": server.next_id(), "method": "tool_call/cancel", "params": {"sessionId": session_id}}
    sent = await server.send({**request, "params": {"sessionId": session_id, "toolCallId": call_id}})
    assert (await server.response(request["id"]))["result"] == {}
    final = await server.wait_for(
        lambda m: of_session(session_id)(m) and m["params"]["update"].get("status") == "cancelled", timeout=T_ESC + 1
    )
    assert server.arrival_time(final) - sent <= T_ESC
    assert final["params"]["update"]["toolCallId"] == call_id and final["params"]["update"]["capabilities"] is None
    abandoned = await server.probe("tool_abandoned", sessionId=session_id, toolCallId=call_id)
    assert position(server, abandoned) < position(server, final)
    idle = await server.idle(session_id, timeout=T_WAIT)
    assert idle["params"]["update"]["stopReason"] == "end_turn"
    went_on = [m for m in server.received if of_session(session_id)(m) and "went on" in repr(m)]
    assert went_on and position(server, final) < position(server, went_on[0]) < position(server, idle)
    assert [u["state"] for u in server.states(session_id)] == ["running", "idle"]
    finals = [u for u in server.updates(session_id, "tool_call_update") if u["toolCallId"] == call_id]
    assert [u.get("status") for u in finals].count("cancelled") == 1
    # The session goes on while the abandoned call still runs.
    await server.response(await server.prompt(session_id, [{"say": "next"}]))
    assert (await server.idle(session_id, 2))["params"]["update"]["stopReason"] == "end_turn"
    # The abandoned call finishes later: a probe may say so, nothing else.
    await server.probe(
        "tool_exited", sessionId=session_id, toolCallId=call_id, reason="completed", timeout=STUBBORN_SECONDS + T_WAIT
    )
    await server.quiet(W_QUIET, is_zombie_output(server, final, call_id))


async def test_session_cancel_of_a_tool_ignoring_it_abandons_the_work_at_the_deadline_and_fences_it(
    server_v2: RawClient,
) -> None:
    """INTERRUPTS I6 on v2 (§20.7): the work is abandoned at T_grace; the call ends `cancelled` before `idle
    cancelled`, which comes within T_ESC; nothing of the abandoned work follows, even when its tool finishes; the
    next prompt runs."""
    server = server_v2
    session_id = await server.new_session_v2()
    stubborn = {"tool": "test_stubborn", "args": {"s": STUBBORN_SECONDS, "progress": "zombie"}}
    await server.prompt(session_id, [stubborn, {"say": "late"}])
    started = await server.probe("tool_started", sessionId=session_id, tool="test_stubborn")
    call_id = started["params"]["toolCallId"]
    sent = await server.cancel(session_id)
    idle = await server.idle(session_id, timeout=T_ESC + 1)
    assert server.arrival_time(idle) - sent <= T_ESC
    assert idle["params"]["update"]["stopReason"] == "cancelled"
    abandoned = await server.probe("step_exited", sessionId=session_id, reason="abandoned")
    assert position(server, abandoned) < position(server, idle)
    finals = [u for u in server.updates(session_id, "tool_call_update") if u["toolCallId"] == call_id]
    assert finals[-1]["status"] == "cancelled" and finals[-1]["capabilities"] is None
    await server.response(await server.prompt(session_id, [{"say": "next"}]))
    assert (await server.idle(session_id, 2))["params"]["update"]["stopReason"] == "end_turn"
    await server.probe(
        "tool_exited", sessionId=session_id, toolCallId=call_id, reason="completed", timeout=STUBBORN_SECONDS + T_WAIT
    )
    await server.quiet(W_QUIET, is_zombie_output(server, idle, call_id))
    assert "late" not in server.texts(session_id)


async def test_tool_call_cancel_refuses_a_call_that_does_not_advertise_cancel(
    server_v2: RawClient, tmp_path: Path
) -> None:
    """The quick file tools are not cancellable (§23 Q6): -32602, and the call completes normally."""
    server = server_v2
    # A small folder of our own: a listing of all of /tmp walks whatever the machine keeps there (on CI, other
    # clones and their virtualenvs), which can outlast the wait below.
    (tmp_path / "a.txt").write_text("a\n")
    (tmp_path / "b.txt").write_text("b\n")
    session_id = await server.new_session_v2()
    await server.prompt(session_id, [{"tool": "list_files", "args": {"path": str(tmp_path)}}, {"gate": "g"}])
    await server.probe("gate_reached", sessionId=session_id, gate="g")
    (call_id,) = {u["toolCallId"] for u in server.updates(session_id, "tool_call_update")}
    assert all(u.get("capabilities") in (None,) for u in server.updates(session_id, "tool_call_update"))
    refused = await server.call("tool_call/cancel", {"sessionId": session_id, "toolCallId": call_id})
    assert refused["error"]["code"] == -32602
    await server.release(session_id, "g")
    assert (await server.idle(session_id))["params"]["update"]["stopReason"] == "end_turn"


HOLD_V2 = {"tool": "test_client_request", "args": {"method": "_test/hold", "params": {}}}


def retraction_of(request_id: Any) -> Any:
    return lambda m: m.get("method") == "$/cancel_request" and m["params"]["requestId"] == request_id


async def test_a_cancel_answers_its_held_prompts_first_in_order_then_retracts_then_ends_idle_cancelled(
    server_v2: RawClient,
) -> None:
    """§20.1's order, by construction: 1. each held prompt's -32800, in the order received; 2. `$/cancel_request`
    for the work's pending request to the client; 3. its final updates; 4. `idle cancelled`; a prompt sent after the
    cancel is inserted after that idle."""
    server = server_v2
    session_id = await server.new_session_v2()
    await server.prompt(session_id, [HOLD_V2])
    pending = await server.wait_for(lambda m: m.get("method") == "_test/hold")
    first = await server.prompt(session_id, [{"say": "never-1"}])
    second = await server.prompt(session_id, [{"say": "never-2"}])
    later = server.prompt_message(session_id, [{"say": "after"}])
    await server.send({"method": "session/cancel", "params": {"sessionId": session_id}}, later)
    answers = [await server.response(first), await server.response(second)]
    assert [a["error"]["code"] for a in answers] == [-32800, -32800]
    retraction = await server.wait_for(retraction_of(pending["id"]))
    idle = await server.idle(session_id)
    assert idle["params"]["update"]["stopReason"] == "cancelled"
    final = [m for m in server.received if of_session(session_id)(m) and m["params"]["update"].get("status")][-1]
    assert final["params"]["update"]["status"] == "cancelled"
    order = [position(server, m) for m in (*answers, retraction, final, idle)]
    assert order == sorted(order)
    inserted = await server.response(later["id"])
    assert position(server, idle) < position(server, inserted)
    assert (await server.idle(session_id, 2))["params"]["update"]["stopReason"] == "end_turn"


# Rounds of the one-write scenario below: the order a bug would leave to the scheduler comes out right in some
# rounds, so one round proves little; thirty in one server make a miss of the order near certain (mutation 17).
ONE_WRITE_ROUNDS = 30
HELD_IN_THE_WRITE = 3


async def test_held_prompts_written_with_the_cancel_are_answered_in_order_before_the_retraction_and_the_idle(
    server_v2: RawClient, tmp_path: Path
) -> None:
    """§20.1's order when the held prompts come in the same write as the cancel, while the work waits on a permission
    question the client does not answer: each held prompt's -32800 in admission order, then `$/cancel_request` for
    the question, then the call's final update, then `idle cancelled`; nothing of the held prompts is inserted. The
    cancel answers the held prompts itself, synchronously (protocol/v2/withdrawals.py): if each were answered by its
    own handler task whenever it runs, their order against the retraction and the idle would be the scheduler's.
    One write puts the prompts' admission and the cancel on one read, with no await between them. Repeated
    ONE_WRITE_ROUNDS times in one server and session."""
    server = server_v2
    session_id = (await server.call("session/new", {"cwd": str(tmp_path)}))["result"]["sessionId"]
    asked_before: set[Any] = set()
    for round_ in range(1, ONE_WRITE_ROUNDS + 1):
        await server.prompt(session_id, [{"tool": "write_file", "args": {"path": f"f{round_}.txt", "content": "x\n"}}])
        asked = await server.wait_for(
            lambda m: m.get("method") == "session/request_permission" and m["id"] not in asked_before
        )
        asked_before.add(asked["id"])
        call_id = asked["params"]["subject"]["toolCall"]["toolCallId"]
        held = [server.prompt_message(session_id, [{"say": f"never-{round_}"}]) for _ in range(HELD_IN_THE_WRITE)]
        await server.send(*held, {"method": "session/cancel", "params": {"sessionId": session_id}})
        answers = [await server.response(message["id"]) for message in held]
        assert [a.get("error", {}).get("code") for a in answers] == [-32800] * HELD_IN_THE_WRITE, (round_, answers)
        retraction = await server.wait_for(retraction_of(asked["id"]))
        idle = await server.idle(session_id, round_)
        assert idle["params"]["update"]["stopReason"] == "cancelled", (round_, idle)
        final = [
            m
            for m in server.received
            if of_session(session_id)(m)
            and m["params"]["update"].get("toolCallId") == call_id
            and m["params"]["update"].get("status")
        ][-1]
        assert final["params"]["update"]["status"] == "cancelled", (round_, final)
        order = [position(server, m) for m in (*answers, retraction, final, idle)]
        assert order == sorted(order), (round_, [server.received[i] for i in order])
    assert len(server.updates(session_id, "user_message")) == ONE_WRITE_ROUNDS  # no held prompt was inserted
    assert not [t for t in server.texts(session_id) if t.startswith("never")]
    assert not any((tmp_path / f"f{n}.txt").exists() for n in range(1, ONE_WRITE_ROUNDS + 1))  # no write ran


async def test_a_close_answers_its_held_prompts_first_in_order_then_the_idle_then_its_own_answer(
    server_v2: RawClient,
) -> None:
    """§20.2's order: held prompts -32800 (in the order received), `$/cancel_request`, the idle cancelled, `{}`."""
    server = server_v2
    session_id = await server.new_session_v2()
    await server.prompt(session_id, [HOLD_V2])
    pending = await server.wait_for(lambda m: m.get("method") == "_test/hold")
    first = await server.prompt(session_id, [{"say": "never-1"}])
    second = await server.prompt(session_id, [{"say": "never-2"}])
    closed = await server.call("session/close", {"sessionId": session_id})
    assert closed["result"] == {}
    answers = [await server.response(first), await server.response(second)]
    assert [a["error"]["code"] for a in answers] == [-32800, -32800]
    retraction = await server.wait_for(retraction_of(pending["id"]))
    idle = await server.idle(session_id)
    order = [position(server, m) for m in (*answers, retraction, idle, closed)]
    assert order == sorted(order)


async def test_steer_inserts_the_prompt_at_once_and_the_joined_work_ends_with_one_idle(
    start_server: StartServer,
) -> None:
    """§7 insert now: P2 is answered and echoed while P1's tool waits; the state stays running; at the next model
    call the work goes on for P2; one idle, end_turn, for the whole work."""
    server = await start_server(*LONG_GRACE_ARGS, "--prompt-policy", "steer")
    await server.initialize_v2()
    session_id = await server.new_session_v2()
    await server.prompt(session_id, [{"say": "p1"}, HOLD_V2, {"say": "p1-never"}])
    held = await server.wait_for(lambda m: m.get("method") == "_test/hold")
    p2 = await server.prompt(session_id, [{"say": "steered"}])
    answer = await server.response(p2)
    echoed = await server.wait_for(
        lambda m: of_session(session_id)(m) and m["params"]["update"].get("messageId") == answer["result"]["messageId"]
    )
    assert echoed["params"]["update"]["sessionUpdate"] == "user_message"
    await server.send({"id": held["id"], "result": {}})
    idle = await server.idle(session_id)
    assert idle["params"]["update"]["stopReason"] == "end_turn"
    assert server.texts(session_id) == ["p1", "steered"]
    assert [u["state"] for u in server.states(session_id)].count("idle") == 1
    await server.quiet(0.3, lambda m: is_state(session_id, "idle")(m) and m is not idle)


async def test_steer_a_cancel_before_the_hand_over_ends_the_joined_work_with_one_idle_cancelled(
    start_server: StartServer,
) -> None:
    server = await start_server(*LONG_GRACE_ARGS, "--prompt-policy", "steer")
    await server.initialize_v2()
    session_id = await server.new_session_v2()
    await server.prompt(session_id, [{"say": "p1"}, HOLD_V2])
    await server.wait_for(lambda m: m.get("method") == "_test/hold")
    await server.response(await server.prompt(session_id, [{"say": "never"}]))
    sent = await server.cancel(session_id)
    idle = await server.idle(session_id)
    assert server.arrival_time(idle) - sent <= T_ACK
    assert idle["params"]["update"]["stopReason"] == "cancelled"
    await server.quiet(0.3, lambda m: m in after(server, idle) and of_session(session_id)(m))
    assert "never" not in server.texts(session_id)
    # The session is not poisoned (I19): the next prompt runs.
    await server.response(await server.prompt(session_id, [{"say": "next"}]))
    assert (await server.idle(session_id, 2))["params"]["update"]["stopReason"] == "end_turn"


async def test_steer_a_prompt_cancelled_before_the_hand_over_is_kept_in_the_history_and_replayed(
    start_server: StartServer, tmp_path: Path
) -> None:
    """§7 insert now: a steering prompt is answered and echoed at once, so it is the user's words even when a cancel
    ends the joined work before the hand-over: the store keeps it between the work's prompt and the next one, and a
    replay shows it with the id its response returned."""
    args = ("--model", "scripted", "--test-mode", "--cleanup-deadline", "10", "--prompt-policy", "steer")
    env = {"ACP_SERVER_STATE_DIR": str(tmp_path)}
    server = await start_server(*args, env=env)
    await server.initialize_v2()
    session_id = await server.new_session_v2()
    ids = [(await server.response(await server.prompt(session_id, [{"say": "p1"}, HOLD_V2])))["result"]["messageId"]]
    await server.wait_for(lambda m: m.get("method") == "_test/hold")
    steered = await server.response(await server.prompt(session_id, [{"say": "steered-words"}]))
    ids.append(steered["result"]["messageId"])
    await server.cancel(session_id)
    assert (await server.idle(session_id))["params"]["update"]["stopReason"] == "cancelled"
    ids.append((await server.response(await server.prompt(session_id, [{"say": "next"}])))["result"]["messageId"])
    assert (await server.idle(session_id, 2))["params"]["update"]["stopReason"] == "end_turn"
    await server.close()

    again = await start_server(*args, env=env)
    await again.initialize_v2()
    response = await again.call(
        "session/resume", {"sessionId": session_id, "cwd": "/tmp", "replayFrom": {"type": "start"}}
    )
    assert "result" in response
    replayed = [u for u in again.updates(session_id, "user_message")]
    assert [u["messageId"] for u in replayed] == ids
    (echoed,) = [u for u in server.updates(session_id, "user_message") if u["messageId"] == ids[1]]
    assert replayed[1] == echoed


async def test_stdin_eof_with_v2_work_running_and_a_prompt_held_exits_cleanly(start_server: StartServer) -> None:
    """I17 on v2: the work is cancelled with the connection and the process exits in time (exit checked by the
    fixture's close, like every test's)."""
    server = await start_server()
    await server.initialize_v2()
    session_id = await server.new_session_v2()
    await server.prompt(session_id, [{"tool": "test_sleep", "args": {"s": 30}}])
    await server.probe("tool_started", sessionId=session_id, tool="test_sleep")
    await server.prompt(session_id, [{"say": "held"}])
    code, took = await server.close()
    assert code == 0
    assert took <= T_EXIT


async def resume_with_replay(
    start_server: StartServer, args: tuple[str, ...], env: dict[str, str], session_id: str
) -> RawClient:
    """A new server on the same store, the session resumed with its whole replay."""
    again = await start_server(*args, env=env)
    await again.initialize_v2()
    response = await again.call(
        "session/resume", {"sessionId": session_id, "cwd": "/tmp", "replayFrom": {"type": "start"}}
    )
    assert "result" in response
    return again


async def test_stdin_eof_mid_stream_on_v2_stores_the_turn_cancelled_with_its_text(
    start_server: StartServer, tmp_path: Path
) -> None:
    """Nothing a user wrote (or was sent) is lost at EOF: the v2 work, answered at insertion, is no request in
    flight, yet the shutdown lets it end (cancelled) before the store's last commit, so a replay shows what it
    streamed and the `[cancelled]` note, not `[interrupted]`."""
    args = DEFAULT_ARGS
    env = {"ACP_SERVER_STATE_DIR": str(tmp_path)}
    server = await start_server(*args, env=env)
    await server.initialize_v2()
    session_id = await server.new_session_v2()
    await server.response(await server.prompt(session_id, [{"say": "streamed-words"}, HOLD_V2]))
    await server.wait_for(lambda m: m.get("method") == "_test/hold")
    code, _ = await server.close()
    assert code == 0

    again = await resume_with_replay(start_server, args, env, session_id)
    said = [block["text"] for u in again.updates(session_id, "agent_message") for block in u["content"]]
    assert said == ["streamed-words", "[cancelled]"]
    assert again.updates(session_id, "agent_message")[-1]["_meta"] == {"acpServer": {"turnStatus": "cancelled"}}


async def test_stdin_eof_after_a_steering_prompt_keeps_its_words_for_the_replay(
    start_server: StartServer, tmp_path: Path
) -> None:
    """§7 insert now: a steering prompt answered and echoed is the user's words, even when stdin ends before the
    hand-over: the shutdown waits for it to be recorded before the store's last commit."""
    args = (*DEFAULT_ARGS, "--prompt-policy", "steer")
    env = {"ACP_SERVER_STATE_DIR": str(tmp_path)}
    server = await start_server(*args, env=env)
    await server.initialize_v2()
    session_id = await server.new_session_v2()
    ids = [(await server.response(await server.prompt(session_id, [{"say": "p1"}, HOLD_V2])))["result"]["messageId"]]
    await server.wait_for(lambda m: m.get("method") == "_test/hold")
    steered = await server.response(await server.prompt(session_id, [{"say": "steered-words"}]))
    ids.append(steered["result"]["messageId"])
    await server.wait_for(lambda m: of_session(session_id)(m) and m["params"]["update"].get("messageId") == ids[1])
    code, _ = await server.close()
    assert code == 0

    again = await resume_with_replay(start_server, args, env, session_id)
    replayed = again.updates(session_id, "user_message")
    assert [u["messageId"] for u in replayed] == ids
    (echoed,) = [u for u in server.updates(session_id, "user_message") if u["messageId"] == ids[1]]
    assert replayed[1] == echoed


async def test_a_cancel_of_an_idle_or_unknown_session_sends_nothing(server_v2: RawClient) -> None:
    """I11 on v2 (§23 Q15): no idle, no error, no response."""
    server = server_v2
    session_id = await server.new_session_v2()
    await server.response(await server.prompt(session_id, [{"say": "done"}]))
    idle = await server.idle(session_id)
    await server.cancel(session_id)
    await server.cancel("sess_unknown")
    # (The session's title may follow its first turn: session-scoped, allowed while idle.)
    await server.quiet(
        0.3,
        lambda m: m in after(server, idle) and (is_state(session_id, "idle")(m) or ("id" in m and "method" not in m)),
    )


async def test_the_interrupt_policy_on_v2_ends_the_running_work_cancelled_then_inserts_the_new_prompt(
    start_server: StartServer,
) -> None:
    """I14 on v2 (§7 interrupt): P1's idle cancelled, then P2's response, echo and running, then its idle."""
    server = await start_server(*LONG_GRACE_ARGS, "--prompt-policy", "interrupt")
    await server.initialize_v2()
    session_id = await server.new_session_v2()
    await server.prompt(session_id, [{"gate": "g"}, {"say": "p1-late"}])
    await server.probe("gate_reached", sessionId=session_id, gate="g")
    sent = await server.send(second := server.prompt_message(session_id, [{"say": "p2"}]))
    first_idle = await server.idle(session_id)
    assert first_idle["params"]["update"]["stopReason"] == "cancelled"
    assert server.arrival_time(first_idle) - sent <= T_ACK
    inserted = await server.response(second["id"])
    assert position(server, first_idle) < position(server, inserted)
    assert (await server.idle(session_id, 2))["params"]["update"]["stopReason"] == "end_turn"
    assert server.texts(session_id) == ["p2"]


async def test_the_reject_policy_on_v2_refuses_a_busy_prompt_and_inserts_nothing(start_server: StartServer) -> None:
    """§7 reject: -32600, no echo, the running work untouched."""
    server = await start_server(*LONG_GRACE_ARGS, "--prompt-policy", "reject")
    await server.initialize_v2()
    session_id = await server.new_session_v2()
    await server.prompt(session_id, [{"gate": "g"}, {"say": "p1"}])
    await server.probe("gate_reached", sessionId=session_id, gate="g")
    refused = await server.call("session/prompt", server.prompt_message(session_id, [{"say": "p2"}])["params"])
    assert refused["error"]["code"] == -32600
    await server.release(session_id, "g")
    assert (await server.idle(session_id))["params"]["update"]["stopReason"] == "end_turn"
    assert server.texts(session_id) == ["p1"] and len(server.updates(session_id, "user_message")) == 1


async def test_a_cancel_right_behind_a_prompt_for_an_idle_session_cancels_its_work_not_the_prompt(
    server_v2: RawClient,
) -> None:
    """ACP-CANCEL-203: the prompt was inserted when it was read (the session was idle), so a cancel in the same write
    ends its work `idle cancelled`; the prompt itself is answered {messageId}, never an error."""
    server = server_v2
    session_id = await server.new_session_v2()
    prompt = server.prompt_message(session_id, [{"say": "never"}])
    await server.send(prompt, {"method": "session/cancel", "params": {"sessionId": session_id}})
    assert "messageId" in (await server.response(prompt["id"]))["result"]
    idle = await server.idle(session_id)
    assert idle["params"]["update"]["stopReason"] == "cancelled"
    assert "never" not in server.texts(session_id)


async def test_an_edit_asks_with_a_tool_call_subject_in_v2_shape(server_v2: RawClient, tmp_path: Path) -> None:
    """§12: an edit's question carries the tool call (v2 content: a `{changes, patch}` diff) as its subject."""
    server = server_v2
    session_id = (await server.call("session/new", {"cwd": str(tmp_path)}))["result"]["sessionId"]
    await server.prompt(session_id, [{"tool": "write_file", "args": {"path": "a.txt", "content": "x\n"}}])
    asked = await server.wait_for(lambda m: m.get("method") == "session/request_permission")
    subject = asked["params"]["subject"]
    assert subject["type"] == "tool_call" and subject["toolCall"]["toolCallId"]
    diffs = [c for c in subject["toolCall"].get("content", []) if c["type"] == "diff"]
    assert diffs and diffs[0]["changes"] == [{"operation": "add", "path": str(tmp_path / "a.txt")}]
    await server.send({"id": asked["id"], "result": {"outcome": {"outcome": "selected", "optionId": "reject_once"}}})
    assert (await server.idle(session_id))["params"]["update"]["stopReason"] == "end_turn"
    assert not (tmp_path / "a.txt").exists()


async def test_tool_call_cancel_refuses_a_call_still_waiting_for_permission_and_the_answer_then_runs_it(
    server_v2: RawClient,
) -> None:
    """§20.3: a cancellable call advertises `capabilities.cancel` only with its `in_progress` (after approval), so
    while its question is open it is not cancellable: -32602, the question stays, and the approved call runs."""
    server = server_v2
    session_id = await server.new_session_v2()
    await server.prompt(session_id, [{"tool": "run_command", "args": {"command": "true"}}, {"say": "ok"}])
    asked = await server.wait_for(lambda m: m.get("method") == "session/request_permission")
    call_id = asked["params"]["subject"]["toolCallId"]
    assert not [u for u in server.updates(session_id, "tool_call_update") if u.get("capabilities")]
    refused = await server.call("tool_call/cancel", {"sessionId": session_id, "toolCallId": call_id})
    assert refused["error"]["code"] == -32602
    await server.send({"id": asked["id"], "result": {"outcome": {"outcome": "selected", "optionId": "allow_once"}}})
    idle = await server.idle(session_id, timeout=T_WAIT)
    assert idle["params"]["update"]["stopReason"] == "end_turn"
    statuses = [u.get("status") for u in server.updates(session_id, "tool_call_update") if u["toolCallId"] == call_id]
    assert "cancelled" not in statuses and statuses[-1] == "completed"
    assert not [m for m in server.received if m.get("method") == "$/cancel_request"]
    assert [u["state"] for u in server.states(session_id)] == ["running", "requires_action", "running", "idle"]


async def test_a_permission_wait_ended_by_tool_call_cancel_of_its_delegate_goes_back_to_running(
    server_v2: RawClient,
) -> None:
    """§6.2: a subagent's question blocks the parent (`requires_action`); stopping the delegate call alone ends the
    wait without a session cancel, so the foreground is `running` again (the question withdrawn) and the turn goes
    on to `end_turn`."""
    server = server_v2
    session_id = await server.new_session_v2()
    child = [{"tool": "run_command", "args": {"command": "true"}}]
    delegate = {"tool": "delegate", "args": {"task": "work", "script": child}}
    await server.prompt(session_id, [delegate, {"say": "went on"}])
    asked = await server.wait_for(lambda m: m.get("method") == "session/request_permission")
    await server.wait_for(is_state(session_id, "requires_action"))
    advertised = [u for u in server.updates(session_id, "tool_call_update") if u.get("capabilities") == {"cancel": {}}]
    (delegate_id,) = {u["toolCallId"] for u in advertised}
    answer = await server.call("tool_call/cancel", {"sessionId": session_id, "toolCallId": delegate_id})
    assert answer["result"] == {}
    withdrawn = await server.wait_for(
        lambda m: m.get("method") == "$/cancel_request" and m["params"]["requestId"] == asked["id"]
    )
    idle = await server.idle(session_id, timeout=T_WAIT)
    assert idle["params"]["update"]["stopReason"] == "end_turn"
    assert [u["state"] for u in server.states(session_id)] == ["running", "requires_action", "running", "idle"]
    resumed = [m for m in server.received if is_state(session_id, "running")(m)][-1]
    went_on = [m for m in server.received if of_session(session_id)(m) and "went on" in repr(m)]
    assert position(server, withdrawn) < position(server, idle)
    assert went_on and position(server, answer) < position(server, resumed) < position(server, went_on[0])


async def test_a_withdrawn_prompt_s_id_taken_by_the_next_prompt_leaves_that_prompt_answered_and_run(
    server_v2: RawClient,
) -> None:
    """The client chooses request ids: a prompt sent right behind the `$/cancel_request` that withdraws a held
    prompt, with that prompt's id (a client that frees an id once it cancels it), is answered and runs; the
    withdrawn one is answered -32800 once. The withdrawal is the held run's own, not its id's: keyed by the id, the
    new prompt's answer was dropped (it never ran) and the withdrawn prompt was answered twice."""
    server = server_v2
    busy = await server.new_session_v2()
    idle_session = await server.new_session_v2()
    await server.prompt(busy, [{"gate": "g"}])
    await server.probe("gate_reached", sessionId=busy, gate="g")
    held = await server.prompt(busy, [{"say": "never"}])
    await server.quiet(W_QUIET, lambda m: m.get("id") == held)  # held: its handler waits for the session
    reused = server.prompt_message(idle_session, [{"say": "ran"}], request_id=held)
    await server.send({"method": "$/cancel_request", "params": {"requestId": held}}, reused)
    assert (await server.idle(idle_session))["params"]["update"]["stopReason"] == "end_turn"
    await server.release(busy, "g")
    await server.idle(busy)
    answers = [m for m in server.received if m.get("id") == held and "method" not in m]
    assert sorted("error" in m for m in answers) == [False, True], answers
    assert [m["error"]["code"] for m in answers if "error" in m] == [-32800]
    assert len(server.updates(idle_session, "user_message")) == 1
