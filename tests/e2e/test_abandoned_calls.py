"""Abandoned tool calls, end to end over stdio (INTERRUPTS I6 for one call; ACP v2 issue item 3; docs/interrupts.md,
"Abandoned tool calls"): a call that ignores its cancel and is abandoned at the cleanup deadline is fenced for
everything it may still ask for (a permission, a question, a command or terminal, a local process), on v1 and v2,
and so are the tools of an abandoned `delegate` call's child; its body belongs to its session, which caps how many may
linger, waits for them (bounded) at `session/close`, and the connection does not wait for them past its shutdown bound.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from acp_server.runtime.call_bodies import MAX_LINGERING_CALLS
from tests.conftest import StartServer
from tests.e2e.test_interrupts import of_session
from tests.e2e.test_v2_cancel import STUBBORN_SECONDS
from tests.support.harness import DEFAULT_ARGS, T_ESC, T_EXIT, T_WAIT, W_QUIET, RawClient, scaled

pytestmark = pytest.mark.timeout(60)

# What a late action of the abandoned body would send the client, if the fence let it.
LATE_REQUESTS = {"session/request_permission", "elicitation/create", "terminal/create"}
FORMS: dict[str, Any] = {"elicitation": {"form": {}}}


def _late_requests(server: RawClient) -> list[dict[str, Any]]:
    return [m for m in server.received if m.get("method") in LATE_REQUESTS]


def _stubborn(seconds: float, then: str, marker: Path) -> dict[str, Any]:
    return {"tool": "test_stubborn", "args": {"s": seconds, "then": then, "command": f"touch {marker}"}}


async def _cancel_call(server: RawClient, session_id: str, done: tuple[str, ...] = ()) -> str:
    """Cancels the session's first call that advertises `cancel` (but those in `done`), alone; returns its id."""
    advertised = await server.wait_for(
        lambda m: (
            of_session(session_id)(m)
            and m["params"]["update"].get("capabilities") == {"cancel": {}}
            and m["params"]["update"]["toolCallId"] not in done
        )
    )
    call_id: str = advertised["params"]["update"]["toolCallId"]
    answer = await server.call("tool_call/cancel", {"sessionId": session_id, "toolCallId": call_id})
    assert answer["result"] == {}
    return call_id


@pytest.mark.parametrize("then", ["permission", "ask", "command", "proc"])
async def test_v2_an_abandoned_call_can_no_longer_ask_permission_ask_a_question_or_start_a_command(
    start_server: StartServer, tmp_path: Path, then: str
) -> None:
    """The call is abandoned while its turn goes on (held at a gate): once its sleep is over, what it asks for is
    refused in its body; nothing reaches the client and no process starts."""
    server = await start_server()
    await server.initialize_v2(FORMS)
    work = tmp_path / "work"
    work.mkdir()
    marker = work / "started"
    session_id = await server.new_session_v2(cwd=str(work))
    await server.prompt(session_id, [_stubborn(STUBBORN_SECONDS, then, marker), {"gate": "g"}, {"say": "went on"}])
    call_id = await _cancel_call(server, session_id)
    await server.probe("tool_abandoned", sessionId=session_id, toolCallId=call_id, timeout=T_ESC + 1)
    await server.probe("gate_reached", sessionId=session_id, gate="g")
    late = await server.probe(
        "late_action", sessionId=session_id, toolCallId=call_id, timeout=STUBBORN_SECONDS + T_WAIT
    )
    assert late["params"]["outcome"] == "refused"
    await server.probe("tool_exited", sessionId=session_id, toolCallId=call_id, reason="failed")
    await server.quiet(W_QUIET, lambda m: m.get("method") in LATE_REQUESTS)
    assert _late_requests(server) == [] and not marker.exists()
    await server.release(session_id, "g")
    assert (await server.idle(session_id))["params"]["update"]["stopReason"] == "end_turn"


async def test_v2_an_abandoned_call_s_late_progress_never_reaches_the_client_while_its_turn_goes_on(
    start_server: StartServer,
) -> None:
    """The call is cancelled alone and abandoned while its turn goes on, held at a gate until the body, awake again,
    has reported its progress and ended: the turn's own fence is still down, so only the call's fence stands in the
    way; no `tool_call_update` shows that progress, before or after the turn ends."""
    server = await start_server()
    await server.initialize_v2()
    session_id = await server.new_session_v2()
    stubborn = {"tool": "test_stubborn", "args": {"s": STUBBORN_SECONDS, "progress": "zombie progress"}}
    await server.prompt(session_id, [stubborn, {"gate": "g"}, {"say": "went on"}])
    call_id = await _cancel_call(server, session_id)
    await server.probe("tool_abandoned", sessionId=session_id, toolCallId=call_id, timeout=T_ESC + 1)
    await server.probe("gate_reached", sessionId=session_id, gate="g")
    # The body has reported its progress and returned: it says so once it ends (its result goes nowhere).
    await server.probe(
        "tool_exited", sessionId=session_id, toolCallId=call_id, reason="completed", timeout=STUBBORN_SECONDS + T_WAIT
    )

    def shows_the_late_progress(message: dict[str, Any]) -> bool:
        update = message.get("params", {}).get("update", {})
        return bool(of_session(session_id)(message) and "zombie" in repr(update.get("content")))

    await server.quiet(W_QUIET, shows_the_late_progress)
    await server.release(session_id, "g")
    assert (await server.idle(session_id))["params"]["update"]["stopReason"] == "end_turn"
    assert not [m for m in server.received if shows_the_late_progress(m)]
    finals = [u for u in server.updates(session_id, "tool_call_update") if u["toolCallId"] == call_id]
    assert [u.get("status") for u in finals if u.get("status") in ("completed", "failed", "cancelled")] == ["cancelled"]


@pytest.mark.parametrize("then", ["command", "proc"])
async def test_v1_an_abandoned_call_after_session_cancel_starts_no_command_or_process(
    start_server: StartServer, tmp_path: Path, then: str
) -> None:
    """v1: the turn's cancel abandons the call at the deadline; what the body then starts (a local command: this
    client has no terminals; a local process) is refused: nothing runs. (An editor terminal is a client request,
    which the sealed turn's fence refuses as well.)"""
    server = await start_server()
    await server.initialize()
    work = tmp_path / "work"
    work.mkdir()
    marker = work / "started"
    session_id = await server.new_session(cwd=str(work))
    prompt = await server.prompt(session_id, [_stubborn(STUBBORN_SECONDS, then, marker)])
    started = await server.probe("tool_started", sessionId=session_id, tool="test_stubborn")
    call_id = started["params"]["toolCallId"]
    await server.cancel(session_id)
    assert (await server.response(prompt, timeout=T_ESC + 1))["result"]["stopReason"] == "cancelled"
    late = await server.probe(
        "late_action", sessionId=session_id, toolCallId=call_id, timeout=STUBBORN_SECONDS + T_WAIT
    )
    assert late["params"]["outcome"] == "refused"
    await server.quiet(W_QUIET, lambda m: m.get("method") in LATE_REQUESTS)
    assert _late_requests(server) == [] and not marker.exists()


async def test_a_session_with_too_many_abandoned_calls_refuses_a_new_cancellable_call_before_it_starts(
    start_server: StartServer, tmp_path: Path
) -> None:
    """At most MAX_LINGERING_CALLS abandoned calls may still run per session: the next cancellable call ends
    `failed`, its body never started (the model reads why), and the turn goes on; another session is not held."""
    server = await start_server()
    await server.initialize_v2()
    work = tmp_path / "work"
    work.mkdir()
    seconds = STUBBORN_SECONDS + MAX_LINGERING_CALLS * T_ESC  # every abandoned body still runs at the last call
    stubborn = {"tool": "test_stubborn", "args": {"s": seconds}}
    session_id = await server.new_session_v2(cwd=str(work))
    await server.prompt(session_id, [stubborn] * (MAX_LINGERING_CALLS + 1) + [{"say": "went on"}])
    abandoned: list[str] = []
    for _ in range(MAX_LINGERING_CALLS):
        call_id = await _cancel_call(server, session_id, tuple(abandoned))
        await server.probe("tool_abandoned", sessionId=session_id, toolCallId=call_id, timeout=T_ESC + 1)
        abandoned.append(call_id)
    refused = await server.probe("tool_exited", sessionId=session_id, reason="refused")
    refused_id = refused["params"]["toolCallId"]
    assert refused_id not in abandoned
    idle = await server.idle(session_id)
    assert idle["params"]["update"]["stopReason"] == "end_turn"
    finals = [u for u in server.updates(session_id, "tool_call_update") if u["toolCallId"] == refused_id]
    assert finals[-1]["status"] == "failed" and "not started" in repr(finals[-1])
    assert not [u for u in finals if u.get("capabilities") == {"cancel": {}}]  # never `in_progress`, never ran
    # The cap is per session: another session's call runs.
    other = await server.new_session_v2(cwd=str(work))
    await server.prompt(other, [{"tool": "test_sleep", "args": {"s": 0}}])
    assert (await server.idle(other))["params"]["update"]["stopReason"] == "end_turn"
    assert not [u for u in server.updates(other, "tool_call_update") if u.get("status") == "failed"]


async def test_session_close_waits_for_its_abandoned_calls_within_the_cleanup_deadline(
    start_server: StartServer, tmp_path: Path
) -> None:
    """`session/close` cancels the session's abandoned calls and waits for them, shielded, at most the cleanup
    deadline: one that ends within it has ended before the close is answered; one that does not is left behind
    and the close is still answered within the bound."""
    grace = scaled(1.0)
    server = await start_server(*DEFAULT_ARGS[:-1], f"{grace:g}")
    await server.initialize_v2()
    work = tmp_path / "work"
    work.mkdir()
    session_id = await server.new_session_v2(cwd=str(work))
    # Abandoned at its cancel + grace; ends half a grace later, within the close's wait.
    await server.prompt(session_id, [{"tool": "test_stubborn", "args": {"s": grace * 1.5}}])
    call_id = await _cancel_call(server, session_id)
    await server.probe("tool_abandoned", sessionId=session_id, toolCallId=call_id, timeout=grace + T_ESC)
    await server.idle(session_id)
    closed = await server.call("session/close", {"sessionId": session_id}, timeout=grace + T_WAIT)
    assert closed["result"] == {}
    exited = [
        m
        for m in server.received
        if m.get("method") == "_scripted/probe"
        and m["params"].get("event") == "tool_exited"
        and m["params"].get("toolCallId") == call_id
    ]
    assert exited and server.received.index(exited[0]) < server.received.index(closed)
    # One that outlasts the wait: the close is answered at the bound, not at the body's end.
    other = await server.new_session_v2(cwd=str(work))
    await server.prompt(other, [{"tool": "test_stubborn", "args": {"s": 30}}])
    other_call = await _cancel_call(server, other)
    await server.probe("tool_abandoned", sessionId=other, toolCallId=other_call, timeout=grace + T_ESC)
    await server.idle(other)
    sent = await server.send(
        {"id": (request := server.next_id()), "method": "session/close", "params": {"sessionId": other}}
    )
    answer = await server.response(request, timeout=grace + T_ESC)
    assert answer["result"] == {} and server.arrival_time(answer) - sent <= grace + T_ESC


async def test_shutdown_does_not_wait_for_an_abandoned_call_past_its_bound(start_server: StartServer) -> None:
    """stdin EOF while an abandoned call still runs (it ignores every cancel for 30 s): the server exits within
    T_EXIT on its own, the call left behind and logged, without the exit watchdog having to cut it short."""
    server = await start_server()
    await server.initialize_v2()
    session_id = await server.new_session_v2()
    await server.prompt(session_id, [{"tool": "test_stubborn", "args": {"s": 30}}])
    call_id = await _cancel_call(server, session_id)
    await server.probe("tool_abandoned", sessionId=session_id, toolCallId=call_id, timeout=T_ESC + 1)
    await server.idle(session_id)
    code, took = await server.close()
    assert code == 0 and took <= T_EXIT
    assert "ignoring cancellation still running at exit; left behind" in server.stderr_text
    assert "abandoned work still running at exit" not in server.stderr_text


@pytest.mark.parametrize("then", ["permission", "ask", "command", "proc"])
async def test_v2_an_abandoned_delegate_call_fences_its_childs_tools_too(
    start_server: StartServer, tmp_path: Path, then: str
) -> None:
    """The `delegate` call is cancelled alone while its child's tool ignores the cancel; the call is abandoned and
    the parent's turn goes on (held at a gate). What the child's tool then asks for is refused as in the call's own
    body: the child's work is the call's work, and the parent's turn is not fenced."""
    work = tmp_path / "work"
    work.mkdir()
    marker = work / "started"
    child = [_stubborn(STUBBORN_SECONDS, then, marker), {"say": "child done"}]
    server, session_id = await _abandon_a_delegate_call_whose_script_is_stubborn(start_server, work, child)
    assert not marker.exists()
    assert server.texts(session_id)[-1:] == ["went on"]


async def _abandon_a_delegate_call_whose_script_is_stubborn(
    start_server: StartServer, work: Path, child: list[dict[str, Any]]
) -> tuple[RawClient, str]:
    """A v2 turn runs a `delegate` call whose `child` script reaches a stubborn tool, then a gate: the call is
    cancelled alone once that tool runs (a cancel before would stop the child first), it is abandoned, the turn goes
    on to the gate, the tool's late action is refused and nothing of it reaches the client; then the turn ends."""
    server = await start_server()
    await server.initialize_v2(FORMS)
    session_id = await server.new_session_v2(cwd=str(work))
    delegate = {"tool": "delegate", "args": {"task": "stubborn work", "script": child}}
    await server.prompt(session_id, [delegate, {"gate": "g"}, {"say": "went on"}])
    stubborn_tool = await server.probe("tool_started", tool="test_stubborn")
    call_id = await _cancel_call(server, session_id)
    await server.probe("tool_abandoned", sessionId=session_id, toolCallId=call_id, timeout=T_ESC + 1)
    await server.probe("gate_reached", sessionId=session_id, gate="g")
    late = await server.probe(
        "late_action",
        sessionId=session_id,
        toolCallId=stubborn_tool["params"]["toolCallId"],
        timeout=STUBBORN_SECONDS + T_WAIT,
    )
    assert late["params"]["outcome"] == "refused"
    await server.quiet(W_QUIET, lambda m: m.get("method") in LATE_REQUESTS)
    assert _late_requests(server) == []
    await server.release(session_id, "g")
    assert (await server.idle(session_id))["params"]["update"]["stopReason"] == "end_turn"
    return server, session_id


async def test_v2_an_abandoned_delegate_call_fences_its_grandchilds_tools_too(
    start_server: StartServer, tmp_path: Path
) -> None:
    """The fence goes all the way down: the child's own `delegate` hands it on, so a grandchild's stubborn tool
    cannot ask permission once the top-level `delegate` call is abandoned."""
    work = tmp_path / "work"
    work.mkdir()
    grandchild = [_stubborn(STUBBORN_SECONDS, "permission", work / "started"), {"say": "grandchild done"}]
    child: list[dict[str, Any]] = [
        {"tool": "delegate", "args": {"task": "deeper", "script": grandchild}},
        {"say": "child done"},
    ]
    await _abandon_a_delegate_call_whose_script_is_stubborn(start_server, work, child)
