"""Local commands as agent-owned display terminals on v2, and `terminal/cancel`, end to end over stdio (ACP-V2.md §10,
§20.4, §23 Q8/Q9). Tests named `test_acp_…` hold the acp-tck v2 requirement of that id (src/tck/v2/requirements.py at
1314e0951863b03844fd530e0e14bd88843aabe7)."""

from __future__ import annotations

import asyncio
import base64
import os
import shlex
import signal
from pathlib import Path
from typing import Any
from unittest.mock import ANY

import pytest

from tests.conftest import StartServer
from tests.e2e.test_interrupts import position
from tests.support.harness import DEFAULT_ARGS, LONG_GRACE_ARGS, T_ACK, RawClient

pytestmark = pytest.mark.timeout(40)


async def bypass_session(server: RawClient, cwd: str = "/tmp") -> str:
    session_id = await server.new_session_v2(cwd)
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
    """v1 never had display terminals: a v1 `session/load` of a session recorded on v2 shows the command's output as
    text, never a terminal id its client did not see created (a v2 replay shows the terminal, tested below)."""
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


async def test_terminal_cancel_naming_another_session_s_terminal_is_refused_and_that_command_runs_on(
    start_server: StartServer, tmp_path: Path
) -> None:
    """§20.4: a terminal is found in the session the cancel names, never in another. Both sessions have a turn
    running (A held at a gate, B running a command that waits for a file); `terminal/cancel` naming A and B's
    terminal is -32602; B's command then exits 0 once the file is there, and both turns end `end_turn`."""
    server = await start_server(*LONG_GRACE_ARGS)
    await server.initialize_v2()
    a = await bypass_session(server)
    b = await bypass_session(server)
    await server.prompt(a, [{"gate": "g"}, {"say": "a went on"}])
    await server.probe("gate_reached", sessionId=a, gate="g")
    go = tmp_path / "go"
    command = f"echo started; while [ ! -e {shlex.quote(str(go))} ]; do sleep 0.05; done"
    await server.prompt(b, [{"tool": "run_command", "args": {"command": command}}, {"say": "b went on"}])
    await server.wait_for(lambda m: output_chunk(m) and m["params"]["sessionId"] == b)
    (announced,) = terminal_updates(server, b)
    refused = await server.call("terminal/cancel", {"sessionId": a, "terminalId": announced["terminalId"]})
    assert refused["error"]["code"] == -32602
    go.touch()
    exited = await server.wait_for(
        lambda m: m.get("params", {}).get("sessionId") == b and m["params"].get("update", {}).get("exitStatus")
    )
    assert exited["params"]["update"]["exitStatus"] == {"exitCode": 0}
    assert position(server, refused) < position(server, exited)  # it still ran when the cancel was refused
    assert (await server.idle(b))["params"]["update"]["stopReason"] == "end_turn"
    final = [u for u in server.updates(b, "tool_call_update") if u.get("status") in ("completed", "failed")]
    assert [u["status"] for u in final] == ["completed"]
    assert "b went on" in server.texts(b)
    await server.release(a, "g")
    assert (await server.idle(a))["params"]["update"]["stopReason"] == "end_turn"
    assert terminal_updates(server, a) == []


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


async def test_a_terminal_is_announced_with_its_size_command_cwd_and_controls(server_v2: RawClient) -> None:
    """§10 item 2, §23 Q8: the creating `terminal_update` carries `size` (80 by 24, the VT100 / POSIX default a
    program without a tty assumes), with the command, the absolute cwd and `capabilities.cancel`."""
    server = server_v2
    session_id = await bypass_session(server)
    await server.prompt(session_id, [{"tool": "run_command", "args": {"command": "echo sized"}}])
    await server.idle(session_id)
    announced = terminal_updates(server, session_id)[0]
    assert announced == {
        "sessionUpdate": "terminal_update",
        "terminalId": announced["terminalId"],
        "command": "echo sized",
        "cwd": "/tmp",
        "size": {"cols": 80, "rows": 24},
        "capabilities": {"cancel": {}},
    }


def screen(server: RawClient, session_id: str, terminal_id: str) -> tuple[bytes, list[str], int]:
    """What a client shows of a terminal: each `output` snapshot replaces the bytes, each chunk appends; the order of
    what came (`chunk`, `snapshot`, `exit`); and the most bytes it ever held."""
    shown = b""
    order: list[str] = []
    most = 0
    for update in server.updates(session_id):
        if update.get("terminalId") != terminal_id:
            continue
        if update["sessionUpdate"] == "terminal_output_chunk":
            shown += base64.b64decode(update["data"], validate=True)
            order.append("chunk")
        elif update.get("output") is not None:
            shown = base64.b64decode(update["output"]["data"], validate=True)
            order.append("snapshot")
        if update.get("exitStatus") is not None:
            order.append("exit")
        most = max(most, len(shown))
    return shown, order, most


async def test_output_past_the_limit_resyncs_the_client_with_a_snapshot_of_the_tail_kept(server_v2: RawClient) -> None:
    """§10, §23 Q8: past the output limit (OUTPUT_LIMIT bytes, what the runner keeps and the model reads), a
    `terminal_update.output` snapshot replaces the client's bytes with the tail kept, the moment the limit is passed;
    later chunks append to it, a new snapshot keeps the client's bytes under twice the limit however long the output,
    and the client ends with exactly the tail the model got, before the exit."""
    from acp_server.runtime.local_commands import OUTPUT_LIMIT

    server = server_v2
    session_id = await bypass_session(server)
    command = "head -c 900000 /dev/zero | tr '\\0' x; echo; echo last-line"
    await server.prompt(session_id, [{"tool": "run_command", "args": {"command": command}}])
    await server.idle(session_id)
    terminal_id = terminal_updates(server, session_id)[0]["terminalId"]
    shown, order, most = screen(server, session_id, terminal_id)
    full = b"x" * 900000 + b"\nlast-line\n"
    assert shown == full[-OUTPUT_LIMIT:]
    assert most < 2 * OUTPUT_LIMIT  # a snapshot replaces the bytes before they reach twice the limit
    assert "snapshot" in order and order[-1] == "exit"
    first = order.index("snapshot")
    chunks = server.updates(session_id, "terminal_output_chunk")
    before = b"".join(base64.b64decode(c["data"]) for c in chunks[:first])
    assert len(before) <= OUTPUT_LIMIT  # the snapshot comes as the limit is passed, not after the command ends
    final = [u for u in server.updates(session_id, "tool_call_update") if u.get("status") == "completed"]
    assert final and final[-1]["rawOutput"]["truncated"] is True


async def test_a_stored_command_replays_on_v2_as_one_terminal_upsert_with_its_output_and_exit(
    start_server: StartServer, tmp_path: Path
) -> None:
    """§5.3, §23 Q8/Q11: `replayFrom: start` shows a stored `run_command` as its terminal: the tool call's content
    names the terminal the live client saw, and one `terminal_update` brings its command, cwd, `output` snapshot and
    `exitStatus` (no chunk again), all before the state snapshot and the response. The same session still loads on
    v1 with the command's text output and no terminal."""
    env = {"ACP_SERVER_STATE_DIR": str(tmp_path)}
    live = await start_server(*DEFAULT_ARGS, env=env)
    await live.initialize_v2()
    session_id = await bypass_session(live)
    command = "printf 'replayed\\303\\251\\n'; exit 3"
    await live.prompt(session_id, [{"tool": "run_command", "args": {"command": command}}, {"say": "done"}])
    await live.idle(session_id)
    terminal_id = terminal_updates(live, session_id)[0]["terminalId"]
    await live.close()

    v2 = await start_server(*DEFAULT_ARGS, env=env)
    await v2.initialize_v2()
    response = await v2.call(
        "session/resume", {"sessionId": session_id, "cwd": "/tmp", "replayFrom": {"type": "start"}}
    )
    assert "result" in response
    replayed = [
        m["params"]["update"]
        for m in v2.received[: position(v2, response)]
        if m.get("method") == "session/update" and m["params"]["sessionId"] == session_id
    ]
    terminals = [u for u in replayed if u["sessionUpdate"] == "terminal_update"]
    assert terminals == [
        {
            "sessionUpdate": "terminal_update",
            "terminalId": terminal_id,
            "command": command,
            "cwd": "/tmp",
            "output": {"data": base64.b64encode("replayedé\n".encode()).decode("ascii")},
            "exitStatus": {"exitCode": 3},
        }
    ]
    assert not [u for u in replayed if u["sessionUpdate"] == "terminal_output_chunk"]
    final = [u for u in replayed if u["sessionUpdate"] == "tool_call_update" and u.get("status") == "failed"]
    assert len(final) == 1 and final[0]["content"] == [{"type": "terminal", "terminalId": terminal_id}]
    assert replayed.index(terminals[0]) < replayed.index(final[0])
    assert replayed[-1]["sessionUpdate"] == "state_update"
    assert [u["sessionUpdate"] for u in replayed].count("state_update") == 1
    await v2.close()

    v1 = await start_server(*DEFAULT_ARGS, env=env)
    await v1.initialize()
    loaded = await v1.call("session/load", {"sessionId": session_id, "cwd": "/tmp", "mcpServers": []})
    assert "result" in loaded
    kinds = {u["sessionUpdate"] for u in v1.updates(session_id)}
    assert "terminal_update" not in kinds
    contents = [item for u in v1.updates(session_id, "tool_call_update") for item in u.get("content") or []]
    assert contents and all(item["type"] != "terminal" for item in contents)
    assert any("replayedé" in str(item) for item in contents)


async def test_a_cancelled_command_replays_its_terminal_with_the_signal_and_its_call_as_last_shown(
    start_server: StartServer, tmp_path: Path
) -> None:
    """§5.3 after §20.1: a command stopped by `session/cancel` replays as its terminal (what it printed, the signal
    that ended it), and its tool call ends with the content the live client was last shown, not the terminal."""
    env = {"ACP_SERVER_STATE_DIR": str(tmp_path)}
    live = await start_server(*DEFAULT_ARGS, env=env)
    await live.initialize_v2()
    session_id = await bypass_session(live)
    await live.prompt(session_id, [{"tool": "run_command", "args": {"command": "echo started; sleep 30"}}])
    await live.wait_for(output_chunk)
    await live.cancel(session_id)
    assert (await live.idle(session_id))["params"]["update"]["stopReason"] == "cancelled"
    terminal_id = terminal_updates(live, session_id)[0]["terminalId"]
    ended_by = terminal_updates(live, session_id)[-1]["exitStatus"]["signal"]
    last_shown = [u for u in live.updates(session_id, "tool_call_update") if "content" in u][-1]["content"]
    await live.close()

    v2 = await start_server(*DEFAULT_ARGS, env=env)
    await v2.initialize_v2()
    response = await v2.call(
        "session/resume", {"sessionId": session_id, "cwd": "/tmp", "replayFrom": {"type": "start"}}
    )
    replayed = [
        m["params"]["update"]
        for m in v2.received[: position(v2, response)]
        if m.get("method") == "session/update" and m["params"]["sessionId"] == session_id
    ]
    (terminal,) = [u for u in replayed if u["sessionUpdate"] == "terminal_update"]
    assert terminal["terminalId"] == terminal_id
    assert base64.b64decode(terminal["output"]["data"]) == b"started\n"
    assert terminal["exitStatus"] == {"signal": ended_by}
    calls = [u for u in replayed if u["sessionUpdate"] == "tool_call_update" and "content" in u]
    assert calls[0]["content"] == [{"type": "terminal", "terminalId": terminal_id}]  # as the live anchor
    assert calls[-1]["content"] == last_shown
    assert replayed[-1]["sessionUpdate"] == "state_update"


@pytest.mark.timeout(60)
async def test_a_command_the_server_died_in_replays_as_a_terminal_that_exited_how_unknown(
    start_server: StartServer, tmp_path: Path
) -> None:
    """§5.3, §10: kill -9 with a command running leaves its terminal's end unkept; the replay names the terminal as
    the live client saw it, then says it exited (`exitStatus: {}`, how unknown), so no replayed terminal runs for
    ever; the interrupted call then ends failed as on v1."""
    env = {"ACP_SERVER_STATE_DIR": str(tmp_path)}
    live = await start_server(*DEFAULT_ARGS, env=env)
    await live.initialize_v2()
    # The pid file goes in the session's own directory: the sandbox lets commands write there, and not in a /tmp
    # that holds the server's own code (a checkout and its virtualenv under /tmp, as in a fresh-clone CI run).
    work = tmp_path / "work"
    work.mkdir()
    session_id = await bypass_session(live, str(work))
    group = work / "pgid"
    command = f"echo $$ > {group}; echo started; sleep 30"
    await live.prompt(session_id, [{"tool": "run_command", "args": {"command": command}}])

    def started(message: dict[str, Any]) -> bool:
        # The shell's own "started", written after its pid file (a first chunk may be something else, such as a
        # warning printed before the shell runs).
        return output_chunk(message) and b"started" in base64.b64decode(message["params"]["update"]["data"])

    await live.wait_for(started)
    terminal_id = terminal_updates(live, session_id)[0]["terminalId"]
    await asyncio.sleep(0.3)  # past the store's flush interval: the anchor is on disk
    os.killpg(live.process.pid, signal.SIGKILL)
    await live.process.wait()
    os.killpg(int(group.read_text()), signal.SIGKILL)  # the command's own group outlives a server killed so
    live.validator.violations.clear()  # the wire log ends mid-turn by design
    live.log.clear()

    v2 = await start_server(*DEFAULT_ARGS, env=env)
    await v2.initialize_v2()
    response = await v2.call(
        "session/resume", {"sessionId": session_id, "cwd": str(work), "replayFrom": {"type": "start"}}
    )
    replayed = [
        m["params"]["update"]
        for m in v2.received[: position(v2, response)]
        if m.get("method") == "session/update" and m["params"]["sessionId"] == session_id
    ]
    anchor = {
        "sessionUpdate": "tool_call_update",
        "toolCallId": ANY,
        "content": [{"type": "terminal", "terminalId": terminal_id}],
    }
    exited = {"sessionUpdate": "terminal_update", "terminalId": terminal_id, "exitStatus": {}}
    assert [u for u in replayed if u.get("terminalId") == terminal_id] == [exited]
    assert replayed.index(exited) == replayed.index(anchor) + 1
    final = [u for u in replayed if u["sessionUpdate"] == "tool_call_update" and u.get("status") == "failed"]
    assert len(final) == 1 and "interrupted" in str(final[0]["content"])


@pytest.mark.parametrize("grace", ["0.5", "0.05"])
async def test_a_terminal_killed_past_sigterm_replays_with_the_exit_its_client_was_sent(
    start_server: StartServer, tmp_path: Path, grace: str
) -> None:
    """§5.3 with §20.1 step 3: what is kept is the terminal's one final update as sent, from the command's end or
    from `_seal` (the 0.05 s deadline comes first), so the replay's `exitStatus` is the live one (SIGKILL)."""
    env = {"ACP_SERVER_STATE_DIR": str(tmp_path)}
    live = await start_server("--model", "scripted", "--test-mode", "--cleanup-deadline", grace, env=env)
    await live.initialize_v2()
    session_id = await bypass_session(live)
    command = "trap '' TERM; echo started; sleep 30"
    await live.prompt(session_id, [{"tool": "run_command", "args": {"command": command}}])
    await live.wait_for(output_chunk)
    await live.cancel(session_id)
    await live.idle(session_id)
    (sent,) = exits(live, session_id)
    await live.close()

    v2 = await start_server(*DEFAULT_ARGS, env=env)
    await v2.initialize_v2()
    response = await v2.call(
        "session/resume", {"sessionId": session_id, "cwd": "/tmp", "replayFrom": {"type": "start"}}
    )
    replayed = [
        m["params"]["update"]
        for m in v2.received[: position(v2, response)]
        if m.get("method") == "session/update" and m["params"]["sessionId"] == session_id
    ]
    (terminal,) = [u for u in replayed if u["sessionUpdate"] == "terminal_update"]
    assert terminal["terminalId"] == sent["terminalId"]
    assert terminal["exitStatus"] == sent["exitStatus"] == {"signal": "SIGKILL"}
    assert base64.b64decode(terminal["output"]["data"]) == b"started\n"


async def test_a_replay_while_the_command_runs_names_its_terminal_without_an_exit_and_it_streams_on(
    server_v2: RawClient,
) -> None:
    """§23 Q12 with §5.3: resumed with replay while its command runs on this connection, the replay names the
    terminal (the anchor it has shown) but never an end it has not had; the live exit follows after the answer."""
    server = server_v2
    session_id = await bypass_session(server)
    command = "echo started; sleep 30"  # runs until cancelled
    await server.prompt(session_id, [{"tool": "run_command", "args": {"command": command}}])
    await server.wait_for(output_chunk)
    terminal_id = terminal_updates(server, session_id)[0]["terminalId"]
    since = len(server.received)
    response = await server.call(
        "session/resume", {"sessionId": session_id, "cwd": "/tmp", "replayFrom": {"type": "start"}}
    )
    replayed = [
        m["params"]["update"]
        for m in server.received[since : position(server, response)]
        if m.get("method") == "session/update" and m["params"]["sessionId"] == session_id
    ]
    assert {"type": "terminal", "terminalId": terminal_id} in [
        item for u in replayed if u["sessionUpdate"] == "tool_call_update" for item in u.get("content") or []
    ]
    assert not [u for u in replayed if u.get("exitStatus") is not None]
    assert replayed[-1] == {"sessionUpdate": "state_update", "state": "running"}
    await server.cancel(session_id)
    await server.idle(session_id)
    live_exits = [u for u in terminal_updates(server, session_id) if u.get("exitStatus") is not None]
    assert len(live_exits) == 1
