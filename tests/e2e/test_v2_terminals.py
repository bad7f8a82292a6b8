"""Local commands as agent-owned display terminals on v2, and `terminal/cancel`, end to end over stdio (ACP-V2.md §10,
§20.4, §23 Q8/Q9). Tests named `test_acp_…` hold the acp-tck v2 requirement of that id (src/tck/v2/requirements.py at
1314e0951863b03844fd530e0e14bd88843aabe7)."""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import StartServer
from tests.e2e.test_interrupts import position
from tests.support.harness import DEFAULT_ARGS, LONG_GRACE_ARGS, T_ACK, RawClient

pytestmark = pytest.mark.timeout(40)


async def bypass_session(server: RawClient) -> str:
    session_id = await server.new_session_v2()
    response = await server.call(
        "session/set_config_option", {"sessionId": session_id, "configId": "mode", "type": "id", "value": "bypass"}
    )
    assert "result" in response
    return session_id


def output_chunk(message: dict[str, Any]) -> bool:
    return bool(message.get("params", {}).get("update", {}).get("sessionUpdate") == "terminal_output_chunk")


def terminal_updates(server: RawClient, session_id: str) -> list[dict[str, Any]]:
    return server.updates(session_id, "terminal_update")


async def test_acp_patch_206_207_a_command_is_a_terminal_with_base64_output_and_its_exit_before_the_idle(
    server_v2: RawClient,
) -> None:
    server = server_v2
    session_id = await bypass_session(server)
    await server.prompt(session_id, [{"tool": "run_command", "args": {"command": "printf 'h\\303\\251llo'"}}])
    idle = await server.idle(session_id)
    announced, exited = terminal_updates(server, session_id)
    terminal_id = announced["terminalId"]
    assert announced["cwd"] == "/tmp" and announced["command"] and announced["capabilities"] == {"cancel": {}}
    assert exited == {
        "sessionUpdate": "terminal_update",
        "terminalId": terminal_id,
        "exitStatus": {"exitCode": 0},
        "capabilities": None,
    }
    chunks = server.updates(session_id, "terminal_output_chunk")
    data = b"".join(base64.b64decode(c["data"], validate=True) for c in chunks)
    assert data.decode() == "héllo"
    anchors = [
        item
        for u in server.updates(session_id, "tool_call_update")
        for item in u.get("content") or []
        if item["type"] == "terminal"
    ]
    assert anchors and all(a["terminalId"] == terminal_id for a in anchors)
    exit_message = next(
        m for m in server.received if m.get("params", {}).get("update", {}).get("exitStatus") is not None
    )
    assert position(server, exit_message) < position(server, idle)


@pytest.mark.at_once
async def test_terminal_cancel_kills_the_command_alone_and_the_turn_goes_on(start_server: StartServer) -> None:
    """§20.4: `{}`, then the group gets SIGTERM and the terminal reports it; run_command finishes failed with what it
    printed; the turn continues to end_turn (no idle until then). A finished terminal is then -32602."""
    server = await start_server(*LONG_GRACE_ARGS)
    await server.initialize_v2()
    session_id = await bypass_session(server)
    command = {"tool": "run_command", "args": {"command": "echo started; sleep 30"}}
    script: list[dict[str, Any]] = [command, {"say": "went on"}]
    await server.prompt(session_id, script)
    await server.wait_for(
        lambda m: m.get("params", {}).get("update", {}).get("sessionUpdate") == "terminal_output_chunk"
    )
    (announced,) = terminal_updates(server, session_id)
    request = await server.request("terminal/cancel", {"sessionId": session_id, "terminalId": announced["terminalId"]})
    answer = await server.response(request)
    assert answer["result"] == {}
    exited = await server.wait_for(lambda m: m.get("params", {}).get("update", {}).get("exitStatus") is not None)
    assert exited["params"]["update"]["exitStatus"] == {"signal": "SIGTERM"}
    assert position(server, answer) < position(server, exited)
    assert server.arrival_time(exited) - server.arrival_time(answer) <= T_ACK
    idle = await server.idle(session_id)
    assert idle["params"]["update"]["stopReason"] == "end_turn"
    final = [u for u in server.updates(session_id, "tool_call_update") if u.get("status") in ("completed", "failed")]
    assert [u["status"] for u in final] == ["failed"]
    assert "went on" in server.texts(session_id)
    again = await server.call("terminal/cancel", {"sessionId": session_id, "terminalId": announced["terminalId"]})
    assert again["error"]["code"] == -32602


@pytest.mark.at_once
async def test_a_session_cancel_reports_the_running_terminals_exit_before_idle_cancelled(
    start_server: StartServer,
) -> None:
    server = await start_server(*LONG_GRACE_ARGS)
    await server.initialize_v2()
    session_id = await bypass_session(server)
    await server.prompt(session_id, [{"tool": "run_command", "args": {"command": "echo started; sleep 30"}}])
    await server.wait_for(
        lambda m: m.get("params", {}).get("update", {}).get("sessionUpdate") == "terminal_output_chunk"
    )
    sent = await server.cancel(session_id)
    idle = await server.idle(session_id)
    assert idle["params"]["update"]["stopReason"] == "cancelled"
    assert server.arrival_time(idle) - sent <= T_ACK
    exited = next(m for m in server.received if m.get("params", {}).get("update", {}).get("exitStatus") is not None)
    assert position(server, exited) < position(server, idle)
    assert "signal" in exited["params"]["update"]["exitStatus"]


async def test_a_v2_command_replays_as_its_text_output_never_as_a_terminal_the_client_never_had(
    start_server: StartServer, tmp_path: Path
) -> None:
    """Display terminals are live only: the store keeps the command's output as text, so a v1 `session/load` (and a
    v2 replay) never names a terminal id the client did not see created."""
    env = {"ACP_SERVER_STATE_DIR": str(tmp_path)}
    v2 = await start_server(*DEFAULT_ARGS, env=env)
    await v2.initialize_v2()
    session_id = await bypass_session(v2)
    await v2.prompt(session_id, [{"tool": "run_command", "args": {"command": "echo stored-output"}}])
    await v2.idle(session_id)
    await v2.close()
    v1 = await start_server(*DEFAULT_ARGS, env=env)
    await v1.initialize()
    loaded = await v1.call("session/load", {"sessionId": session_id, "cwd": "/tmp", "mcpServers": []})
    assert "result" in loaded
    contents = [item for u in v1.updates(session_id, "tool_call_update") for item in u.get("content") or []]
    assert contents and all(item["type"] != "terminal" for item in contents)
    assert any("stored-output" in str(item) for item in contents)


@pytest.mark.at_once
async def test_terminal_cancel_sent_the_moment_the_terminal_is_announced_stops_its_command(
    start_server: StartServer,
) -> None:
    """§20.4: the terminal advertises `capabilities.cancel` from its announcement, which may come before its process
    runs; a `terminal/cancel` accepted then is kept and stops the process the moment it starts, never lost."""
    server = await start_server(*LONG_GRACE_ARGS)
    await server.initialize_v2()
    session_id = await bypass_session(server)
    await server.prompt(session_id, [{"tool": "run_command", "args": {"command": "sleep 30"}}, {"say": "went on"}])
    announced = await server.wait_for(
        lambda m: (
            m.get("params", {}).get("update", {}).get("capabilities") == {"cancel": {}}
            and m["params"]["update"]["sessionUpdate"] == "terminal_update"
        )
    )
    terminal_id = announced["params"]["update"]["terminalId"]
    answer = await server.call("terminal/cancel", {"sessionId": session_id, "terminalId": terminal_id})
    assert answer["result"] == {}
    exited = await server.wait_for(lambda m: m.get("params", {}).get("update", {}).get("exitStatus") is not None)
    assert exited["params"]["update"]["exitStatus"] == {"signal": "SIGTERM"}
    assert server.arrival_time(exited) - server.arrival_time(answer) <= T_ACK
    idle = await server.idle(session_id)
    assert idle["params"]["update"]["stopReason"] == "end_turn"
    assert "went on" in server.texts(session_id)


def exits(server: RawClient, session_id: str) -> list[dict[str, Any]]:
    return [u for u in terminal_updates(server, session_id) if u.get("exitStatus") is not None]


async def test_a_session_close_reports_the_running_terminals_exit_before_the_idle_and_its_answer(
    server_v2: RawClient,
) -> None:
    """§5.4 / §20.2: the terminal still running when the session closes ends with its `exitStatus` (the signal that
    stopped it), controls cleared, before `idle cancelled` and before `{}`; nothing after."""
    server = server_v2
    session_id = await bypass_session(server)
    await server.prompt(session_id, [{"tool": "run_command", "args": {"command": "echo started; sleep 30"}}])
    await server.wait_for(output_chunk)
    closed = await server.call("session/close", {"sessionId": session_id})
    assert closed["result"] == {}
    idle = await server.idle(session_id)
    (exited,) = exits(server, session_id)
    assert exited["exitStatus"].get("signal") in ("SIGTERM", "SIGKILL") and exited["capabilities"] is None
    exit_message = next(m for m in server.received if m.get("params", {}).get("update") is exited)
    assert position(server, exit_message) < position(server, idle) < position(server, closed)


@pytest.mark.parametrize("grace", ["0.5", "0.05"])
async def test_a_terminal_whose_command_ignores_sigterm_still_reports_its_exit_before_idle_cancelled(
    start_server: StartServer, grace: str
) -> None:
    """§20.1 step 3: the command ignores SIGTERM, so its group is killed; its terminal's one final update carries
    `exitStatus` before the idle, even when the cleanup deadline (0.05 s) comes before the kill (then the turn is
    sealed with the terminal still open: `_seal` ends it)."""
    server = await start_server("--model", "scripted", "--test-mode", "--cleanup-deadline", grace)
    await server.initialize_v2()
    session_id = await bypass_session(server)
    command = "trap '' TERM; echo started; sleep 30"
    await server.prompt(session_id, [{"tool": "run_command", "args": {"command": command}}])
    await server.wait_for(output_chunk)
    await server.cancel(session_id)
    idle = await server.idle(session_id)
    assert idle["params"]["update"]["stopReason"] == "cancelled"
    (exited,) = exits(server, session_id)
    assert exited["exitStatus"] == {"signal": "SIGKILL"} and exited["capabilities"] is None
    exit_message = next(m for m in server.received if m.get("params", {}).get("update") is exited)
    assert position(server, exit_message) < position(server, idle)
