"""How the server ends, black-box over real stdio: stdin EOF, a client that closed our stdout, and stop signals.

All three are one shutdown (docs/interrupts.md I17): every turn is cancelled and answered, every wait for
the client ends at once, every process the server started is killed (its process groups, and on Linux the orphans
that left them with `setsid`, adopted as a child subreaper), the store, the log and the recording are written, and
the exit status is 0 within the bound. What "started by the server" means here is read from /proc: every descendant
of the server process before it is told to stop.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sqlite3
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import pytest

from tests.conftest import StartServer
from tests.support.harness import (
    GRACE,
    LONG_GRACE,
    T_ACK,
    T_EXIT,
    T_WAIT,
    RawClient,
    isolated_env,
    processes,
    server_command,
)
from tests.support.wire_schema import WireValidator

pytestmark = pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads /proc")

# Sleeps nothing else on the machine runs, so a survivor is recognisably ours.
SLEEP = "sleep 3171"


def run(command: str, timeout_s: float = 60) -> dict[str, Any]:
    return {"tool": "run_command", "args": {"command": command, "timeout_s": timeout_s}}


def descendants(root: int) -> set[int]:
    """Every live process below `root` now (zombies excluded: they can no longer run)."""
    children: dict[int, list[int]] = {}
    for pid, ppid, _, state, _ in processes():
        if state != "Z":
            children.setdefault(ppid, []).append(pid)
    found: set[int] = set()
    parents = [root]
    while parents:
        for pid in children.get(parents.pop(), ()):
            found.add(pid)
            parents.append(pid)
    return found


def alive(pids: set[int]) -> list[tuple[int, str]]:
    return [(pid, name) for pid, _, _, state, name in processes() if pid in pids and state != "Z"]


def written(path: Path) -> str | None:
    text = path.read_text() if path.exists() else ""
    return text if text.endswith("\n") else None


async def wait_file(path: Path, timeout: float = 10.0) -> str:
    """The content of a file a command writes once it has started everything (a line ending in a newline)."""
    deadline = time.monotonic() + timeout
    while (text := written(path)) is None:
        assert time.monotonic() < deadline, f"{path} was never written"
        await asyncio.sleep(0.02)
    return text


async def wait_all_dead(pids: set[int], timeout: float = 2.0) -> None:
    # A SIGKILLed process leaves the table a moment after the server has exited; it never runs again.
    deadline = time.monotonic() + timeout
    while survivors := alive(pids):
        assert time.monotonic() < deadline, f"still alive after the server exited: {survivors}"
        await asyncio.sleep(0.05)


async def exit_status(client: RawClient, since: float, timeout: float = T_EXIT) -> tuple[int, float]:
    """Wait for the server to exit on its own (stdin left open); (status, seconds since `since`)."""
    # Polled: asyncio's wait() also waits for every pipe to the process to close, and stdin is ours to close.
    while client.process.returncode is None:
        if time.monotonic() - since > timeout:
            client.kill()
            raise AssertionError(f"the server did not exit within {timeout} s")
        await asyncio.sleep(0.02)
    code, took = client.process.returncode, time.monotonic() - since
    if client._reader is not None:
        await asyncio.wait_for(client._reader, 5)
    if client._stderr_reader is not None:
        client.stderr_text = (await asyncio.wait_for(client._stderr_reader, 5)).decode(errors="replace")
    return code, took


async def start_doomed_work(server: RawClient, tmp_path: Path) -> tuple[list[Any], int]:
    """Sessions with: a gated turn; a running command that ignores SIGTERM; a finished command whose background
    children live on; a finished command whose child left its session with `setsid`. Returns the prompt ids of the
    turns still running and the pid of the `setsid` child."""
    await server.initialize()
    sessions = [await server.new_session(str(tmp_path)) for _ in range(4)]
    for session in sessions:
        response = await server.call("session/set_mode", {"sessionId": session, "modeId": "bypass"})
        assert response.get("result") == {}, response
    gated, stubborn, background, escaped = sessions
    running = [await server.prompt(gated, [{"gate": "g"}])]
    running.append(await server.prompt(stubborn, [run(f"trap '' TERM; {SLEEP} & echo up > stubborn; wait")]))
    for session, command in (
        (background, f"{SLEEP} & {SLEEP} & echo started"),
        # The pid is written from inside the new session, so the file exists only once `setsid()` has taken effect
        # (`echo $!` from the parent could be read before the child got that far).
        (escaped, f"setsid sh -c 'echo $$ > escaped; exec {SLEEP}' &"),
    ):
        response = await server.response(await server.prompt(session, [run(command)]), timeout=10)
        assert response["result"] == {"stopReason": "end_turn"}, response
    await server.probe("gate_reached", sessionId=gated)
    await wait_file(tmp_path / "stubborn")
    escaped_pid = int(await wait_file(tmp_path / "escaped"))
    assert os.getsid(escaped_pid) == escaped_pid  # it did leave the command's session and group
    return running, escaped_pid


def asks(method: str) -> Callable[[dict[str, Any]], bool]:
    """A predicate: a request of ours to the client, of this method."""
    return lambda message: message.get("method") == method and "id" in message


async def assert_cancelled(server: RawClient, prompt_ids: list[Any]) -> None:
    for prompt_id in prompt_ids:
        response = await server.response(prompt_id)  # the server has exited: there or never
        assert response.get("result") == {"stopReason": "cancelled"}, response


@pytest.mark.timeout(60)
@pytest.mark.parametrize("stop", [signal.SIGTERM, signal.SIGHUP, signal.SIGINT], ids=lambda s: s.name)
async def test_a_stop_signal_shuts_down_as_at_stdin_eof(
    start_server: StartServer, tmp_path: Path, stop: signal.Signals
) -> None:
    """Issue 10 item 3: turns answered `cancelled`, nothing started left alive (the `setsid` child included), the
    recording, the log and the store written, exit status 0 within the cleanup deadline plus 1 s."""
    record, log_file, state = tmp_path / "transcript.jsonl", tmp_path / "server.log", tmp_path / "state"
    work = tmp_path / "work"
    work.mkdir()
    args = ("--model", "scripted", "--test-mode", "--cleanup-deadline", str(GRACE), "--log-level", "info")
    env = {"ACP_SERVER_STATE_DIR": str(state)}
    server = await start_server(*args, "--record", str(record), "--log-file", str(log_file), env=env)
    running, escaped = await start_doomed_work(server, work)
    started = descendants(server.process.pid)
    assert escaped in started  # adopted: a subreaper's orphan is re-parented to it
    sent = time.monotonic()
    server.process.send_signal(stop)
    code, took = await exit_status(server, sent)
    assert code == 0, server.stderr_text
    assert took <= T_EXIT
    assert "Traceback" not in server.stderr_text
    await assert_cancelled(server, running)
    await wait_all_dead(started)
    transcript = record.read_text()
    assert transcript.count('"stopReason":"cancelled"') == len(running), transcript[-2000:]
    assert f"received {stop.name}: shutting down as at stdin EOF" in log_file.read_text()
    # The store survives the shutdown intact: a new server finds every session with its prompt. (Its commits are too
    # quick for this to catch a missing last commit; the drain is the EOF path's, shared.)
    again = await start_server(env=env)
    await again.initialize()
    listed = await again.call("session/list", {})
    assert len(listed["result"]["sessions"]) == 4, listed
    for entry in listed["result"]["sessions"]:
        params = {"sessionId": entry["sessionId"], "cwd": entry["cwd"], "mcpServers": []}
        assert "result" in await again.call("session/load", params)
    replayed = [
        m for m in again.received if m.get("params", {}).get("update", {}).get("sessionUpdate") == "user_message_chunk"
    ]
    assert len(replayed) == 4, replayed  # the prompts of the turns the signal cancelled too


@pytest.mark.timeout(60)
async def test_a_closed_stdout_shuts_down_as_at_stdin_eof(tmp_path: Path) -> None:
    """Issue 15 item 9 (I17): a client that closed our stdout is gone. A write that fails (EPIPE) neither crashes the
    server (no traceback) nor leaves it serving nobody: turns cancelled, children killed, exit status 0 in time.
    Not the `start_server` fixture: its check that every request was answered cannot hold for a client that stopped
    reading the answers."""
    server = await RawClient.start()
    try:
        await _closed_stdout_scenario(server, tmp_path)
    finally:
        server.kill()
    assert not server.validator.violations, server.validator.violations


async def _closed_stdout_scenario(server: RawClient, tmp_path: Path) -> None:
    running, _ = await start_doomed_work(server, tmp_path)
    session = await server.new_session(str(tmp_path))
    writing = [step for _ in range(2000) for step in ({"say": "x" * 100}, {"sleep": 0.005})]
    running.append(await server.prompt(session, writing))  # writes all along, so a write does fail
    await server.wait_for(lambda m: m.get("params", {}).get("sessionId") == session)
    started = descendants(server.process.pid)
    assert server.process.stdout is not None
    closed = time.monotonic()
    server.process._transport.get_pipe_transport(1).close()  # type: ignore[attr-defined]  # our read end of its stdout
    code, took = await exit_status(server, closed)  # stdin stays open: only the closed stdout can end it
    assert code == 0, server.stderr_text
    assert took <= T_EXIT
    assert "Traceback" not in server.stderr_text
    await wait_all_dead(started)


@pytest.mark.timeout(60)
async def test_stdin_eof_leaves_alive_nothing_the_server_started(start_server: StartServer, tmp_path: Path) -> None:
    """Issue 15 item 10 (I17): a command that ignores SIGTERM, commands whose background children outlive them, and
    a child that left its group with `setsid`: after stdin EOF none of them runs."""
    server = await start_server()
    running, escaped = await start_doomed_work(server, tmp_path)
    started = descendants(server.process.pid)
    assert escaped in started
    assert len(started - {escaped}) >= 4  # the stubborn shell and its sleep, and the two background sleeps
    code, took = await server.close()
    assert code == 0
    assert took <= T_EXIT
    await assert_cancelled(server, running)
    await wait_all_dead(started)


@pytest.mark.timeout(60)
async def test_stdin_eof_ends_every_wait_for_the_client_at_once(start_server: StartServer, tmp_path: Path) -> None:
    """Issue 15 item 11 (I17): at EOF a permission request, an `fs/read_text_file` and a `terminal/create` (awaited
    shielded: the terminal's id is needed to release it) are open and never answered. Every wait ends at once, not
    at the cleanup deadline: the prompts answer `cancelled` within the acknowledgement bound and the exit is in
    time. The deadline is far above both bounds, so "at once" and "at the deadline" cannot be confused."""
    deadline = LONG_GRACE
    assert deadline > 3 * T_EXIT
    server = await start_server("--model", "scripted", "--test-mode", "--cleanup-deadline", str(deadline))
    await server.initialize({"fs": {"readTextFile": True}, "terminal": True})
    ask, read, terminal = [await server.new_session(str(tmp_path)) for _ in range(3)]
    response = await server.call("session/set_mode", {"sessionId": terminal, "modeId": "bypass"})
    assert response.get("result") == {}, response
    prompts = [
        await server.prompt(ask, [run("echo asked")]),
        await server.prompt(
            read,
            [{"tool": "test_client_request", "args": {"method": "fs/read_text_file", "params": {"path": "/x"}}}],
        ),
        await server.prompt(terminal, [run("echo in a terminal")]),
    ]
    for method in ("session/request_permission", "fs/read_text_file", "terminal/create"):
        await server.wait_for(asks(method))
    eof = time.monotonic()
    code, took = await server.close()
    assert code == 0
    assert took <= T_EXIT
    for prompt_id in prompts:
        response = await server.response(prompt_id)
        assert response.get("result") == {"stopReason": "cancelled"}, response
        assert server.arrival_time(response) - eof <= T_ACK


def state_of(pid: int) -> tuple[int, str] | None:
    """(parent pid, state) of a process, or None once it is gone (reaped)."""
    for found, ppid, _, state, _ in processes():
        if found == pid:
            return ppid, state
    return None


@pytest.mark.timeout(60)
async def test_an_orphan_of_a_command_is_adopted_and_reaped_once_it_dies(
    start_server: StartServer, tmp_path: Path
) -> None:
    """The subreaper's other half: a background child outliving its shell is re-parented to the server (not init), and
    once it has died it is reaped when a command ends, not left a zombie of a long-lived server."""
    server = await start_server("--model", "scripted", "--test-mode", "--permission-mode", "bypass")
    await server.initialize()
    session = await server.new_session(str(tmp_path))
    response = await server.response(await server.prompt(session, [run("sleep 1 & echo $! > orphan")]), timeout=10)
    assert response["result"] == {"stopReason": "end_turn"}, response
    orphan = int(await wait_file(tmp_path / "orphan"))
    adopted = state_of(orphan)
    assert adopted is not None and adopted[0] == server.process.pid, adopted  # its shell has exited: not init's
    deadline = time.monotonic() + 10
    while state_of(orphan) != (server.process.pid, "Z"):
        assert time.monotonic() < deadline, state_of(orphan)
        await asyncio.sleep(0.05)
    response = await server.response(await server.prompt(session, [run("true")]), timeout=10)
    assert response["result"] == {"stopReason": "end_turn"}, response
    assert state_of(orphan) is None


def mcp_servers_of(root: int) -> set[int]:
    """The stdio MCP servers (tests/support/mcp_servers/stdio_server.py) running below `root`."""
    found = set()
    for pid in descendants(root):
        try:
            command = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        if b"stdio_server.py" in command and not command.startswith(b"/bin/sh"):
            found.add(pid)
    return found


@pytest.mark.timeout(90)
async def test_sigterm_shuts_every_mcp_server_down_even_one_that_ignores_it(
    start_server: StartServer, tmp_path: Path
) -> None:
    """Issue 10 item 3: SIGTERM stops stdio MCP servers as EOF does (tests/e2e/test_mcp_e2e.py), one that ignores its
    closed stdin included: none of them, nor anything they started, outlives the server. Their processes are found
    in /proc, so the test does not depend on their tools being listed yet."""
    from tests.e2e.test_mcp_e2e import T_MCP, open_session, stdio_server

    server = await start_server()
    await server.initialize()
    await open_session(server, tmp_path, [stdio_server("calm"), stdio_server("stubborn", "--stubborn")])
    deadline = time.monotonic() + T_MCP
    while len(mcp_servers_of(server.process.pid)) < 2:
        assert time.monotonic() < deadline, "the MCP servers never started"
        await asyncio.sleep(0.05)
    started = descendants(server.process.pid)
    sent = time.monotonic()
    server.process.send_signal(signal.SIGTERM)
    code, took = await exit_status(server, sent, timeout=GRACE + 5)  # what the EOF test allows MCP shutdowns
    assert code == 0, server.stderr_text
    assert took < GRACE + 5
    await wait_all_dead(started)


def tool_started(session: str) -> Callable[[dict[str, Any]], bool]:
    """A predicate: the session's first tool call has been announced (its tool is running)."""
    return lambda m: (
        m.get("method") == "session/update"
        and m["params"]["sessionId"] == session
        and m["params"]["update"].get("sessionUpdate") == "tool_call"
    )


@pytest.mark.timeout(60)
async def test_stdin_eof_exits_in_time_while_another_process_holds_the_store_write_lock(
    start_server: StartServer, tmp_path: Path
) -> None:
    """I17 with the session store's write lock held by another process (another acp-server's long commit, a
    `sessions prune`): the running turn's last commit and the store's final write would each wait out SQLite's busy
    timeout, shielded, so the drain's bound could not cut them. At EOF they wait no longer than their own bound: the
    prompt is answered `cancelled`, saying its end was not saved (issue 20 item 6), the exit status is 0 within
    T_exit, and one warning says what was lost."""
    state, log_file, work = tmp_path / "state", tmp_path / "server.log", tmp_path / "work"
    work.mkdir()
    args = ("--model", "scripted", "--test-mode", "--cleanup-deadline", str(GRACE), "--log-file", str(log_file))
    server = await start_server(*args, env={"ACP_SERVER_STATE_DIR": str(state)})
    await server.initialize()
    session = await server.new_session(str(work))  # the store is open: its file exists
    # Our own write lock, as another process's long transaction: the server's commits wait on it from now on.
    holder = sqlite3.connect(state / "sessions.sqlite3", timeout=T_WAIT, isolation_level=None)
    try:
        holder.execute("BEGIN IMMEDIATE")
        prompt = await server.prompt(session, [{"tool": "test_sleep", "args": {"s": 10}}])
        await server.wait_for(tool_started(session))
        code, took = await server.close()
        assert code == 0, server.stderr_text
        assert took <= T_EXIT
        response = await server.response(prompt)  # the server has exited: there or never
        assert response.get("result") == {"stopReason": "cancelled", "_meta": {"acpServer": {"saved": False}}}
    finally:
        holder.rollback()
        holder.close()
    assert log_file.read_text().count("not committed by then is lost") == 1, log_file.read_text()[-3000:]


@pytest.mark.timeout(60)
@pytest.mark.parametrize("stdout_kind", ["file", "pipe"])
@pytest.mark.parametrize("count", [1, 2])
def test_requests_written_right_before_stdin_eof_are_answered(tmp_path: Path, stdout_kind: str, count: int) -> None:
    """`printf '<initialize>\\n<session/new>\\n' | acp-server > out.jsonl` (issue 20, "also seen"): requests read
    before EOF are answered before the process leaves, whatever stdout is. A regular file is written from a worker
    thread, and the shutdown cancelled the writer while the last batch waited for that thread: nothing was written."""
    requests = [
        {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": 1}},
        {"jsonrpc": "2.0", "id": 2, "method": "session/new", "params": {"cwd": str(tmp_path), "mcpServers": []}},
    ][:count]
    out_path = tmp_path / "out.jsonl"
    with out_path.open("wb") as out_file:
        process = subprocess.Popen(
            server_command("--model", "echo"),
            stdin=subprocess.PIPE,
            stdout=out_file if stdout_kind == "file" else subprocess.PIPE,
            stderr=subprocess.PIPE,
            env={**os.environ, **isolated_env()},
        )
        written = b"".join(orjson.dumps(request) + b"\n" for request in requests)
        stdout, stderr = process.communicate(written, timeout=T_EXIT + 30)
    assert process.returncode == 0, stderr.decode(errors="replace")
    output = out_path.read_bytes() if stdout_kind == "file" else stdout
    validator = WireValidator()
    for request in requests:
        validator.client_sent(request)
    answers = [validator.server_wrote(line) for line in output.splitlines()]
    assert not validator.violations, validator.violations
    answered = [message["id"] for message in answers if message is not None and "id" in message]
    assert answered == [request["id"] for request in requests], output.decode(errors="replace")
