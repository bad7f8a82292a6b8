"""MCP servers end to end: `acp-server` over real stdio, MCP servers from `tests/support/mcp_servers/` over real
pipes (stdio) and sockets on 127.0.0.1 (streamable HTTP, SSE), the scripted model calling their tools as
`mcp__<server>__<tool>`.

What is checked: servers connect in the background (`session/new` answers at once); their tools show as ACP tool
calls with their results; the permission modes; the ACP `env` list; a cancel that reaches the MCP server; a server
that fails to start or dies, told inside the next turn and never outside one (the wire checks of conftest catch
output outside a turn, C3); and shutdown with the session and at EOF, leaving no process behind.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import StartServer
from tests.support.editor_client import Editor, always
from tests.support.harness import GRACE, T_ACK, T_ESC, T_WAIT, W_QUIET, RawClient, processes, scaled

SERVERS = Path(__file__).resolve().parents[1] / "support" / "mcp_servers"
# Starting an MCP server costs its interpreter and the SDK's imports, on both sides, on a loaded 2-core machine.
T_MCP = scaled(20.0)
FINAL = ("completed", "failed")


def stdio_server(name: str = "srv", *extra: str, env: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "name": name,
        "command": sys.executable,
        "args": [str(SERVERS / "stdio_server.py"), name, *extra],
        "env": [{"name": k, "value": v} for k, v in (env or {}).items()],
    }


def legacy_server(name: str = "old") -> dict[str, Any]:
    """A hand-written server of the 2025 protocol (see mcp_servers/legacy_server.py)."""
    return {"name": name, "command": sys.executable, "args": [str(SERVERS / "legacy_server.py")], "env": []}


def call(tool: str, **args: Any) -> dict[str, Any]:
    return {"tool": tool, "args": args}


async def open_session(
    client: RawClient, cwd: Path, servers: list[dict[str, Any]], mode: str = "default"
) -> tuple[str, float]:
    """A session with these MCP servers; returns its id and how long `session/new` took to answer."""
    started = time.monotonic()
    response = await client.call("session/new", {"cwd": str(cwd), "mcpServers": servers})
    took = time.monotonic() - started
    assert "result" in response, response
    session_id: str = response["result"]["sessionId"]
    if mode != "default":
        answer = await client.call("session/set_mode", {"sessionId": session_id, "modeId": mode})
        assert answer.get("result") == {}, answer
    return session_id, took


async def prompt(client: RawClient, session_id: str, script: list[dict[str, Any]], timeout: float = T_MCP) -> str:
    """Run one turn and return its stop reason."""
    message = client.prompt_message(session_id, script)
    await client.send(message)
    response = await client.response(message["id"], timeout)
    assert "result" in response, response
    reason: str = response["result"]["stopReason"]
    return reason


def tool_calls(client: RawClient, session_id: str) -> list[dict[str, Any]]:
    return client.updates(session_id, "tool_call")


def final(client: RawClient, session_id: str, call_id: str) -> dict[str, Any]:
    (update,) = [
        u
        for u in client.updates(session_id, "tool_call_update")
        if u["toolCallId"] == call_id and u.get("status") in FINAL
    ]
    return update


def texts_of(update: dict[str, Any]) -> list[str]:
    return [c["content"]["text"] for c in update.get("content", []) if c["type"] == "content"]


def last_call(client: RawClient, session_id: str) -> tuple[dict[str, Any], dict[str, Any]]:
    announced = tool_calls(client, session_id)[-1]
    return announced, final(client, session_id, announced["toolCallId"])


def alive(pid: int) -> bool:
    return any(p == pid and state != "Z" for p, _, _, state, _ in processes())


async def wait_gone(pid: int, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while alive(pid):
        assert time.monotonic() < deadline, f"process {pid} still runs"
        await asyncio.sleep(0.05)


async def server_pid(client: RawClient, session_id: str, server: str = "srv") -> int:
    assert await prompt(client, session_id, [call(f"mcp__{server}__pid")]) == "end_turn"
    _, update = last_call(client, session_id)
    assert update["status"] == "completed", update
    return int(texts_of(update)[0])


@pytest.fixture
async def http_server(request: pytest.FixtureRequest) -> AsyncIterator[tuple[str, asyncio.subprocess.Process]]:
    """An MCP server over HTTP (`http` or `sse`, the test's parameter) on 127.0.0.1, its port chosen by the OS: its
    URL and its process."""
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        str(SERVERS / "http_server.py"),
        request.param,
        stdout=asyncio.subprocess.PIPE,
        start_new_session=True,
    )
    assert process.stdout is not None
    try:
        line = await asyncio.wait_for(process.stdout.readline(), T_MCP)
        yield line.decode().strip(), process
    finally:
        if process.returncode is None:
            process.kill()
        # Read the pipe to its end: asyncio closes the transport only then, and one still open when this test's
        # event loop closes is collected in a later test, which fails on its ResourceWarning.
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(process.stdout.read(), T_MCP)
        await process.wait()


# --- connecting ---


async def test_initialize_advertises_http_sse_and_acp_mcp_servers(start_server: StartServer) -> None:
    client = await start_server()
    response = await client.initialize()
    assert response["result"]["agentCapabilities"]["mcpCapabilities"] == {"http": True, "sse": True, "acp": True}


async def test_session_new_answers_while_its_mcp_server_is_still_starting(server: RawClient, tmp_path: Path) -> None:
    # A server that takes 3 s to start: session/new must not wait for it; the first turn does, and gets its tools.
    slow = {
        "name": "srv",
        "command": "/bin/sh",
        "args": ["-c", 'sleep 3; exec "$0" "$@"', sys.executable, str(SERVERS / "stdio_server.py")],
        "env": [],
    }
    session_id, took = await open_session(server, tmp_path, [slow])
    assert took < T_ACK
    assert await prompt(server, session_id, [call("mcp__srv__echo", text="hi"), {"say": "done"}]) == "end_turn"
    _, update = last_call(server, session_id)
    assert update["status"] == "completed", update
    assert server.texts(session_id) == ["done"]  # nothing to tell: the server was ready within the wait


async def test_a_slash_command_never_waits_for_a_server_still_starting(server: RawClient, tmp_path: Path) -> None:
    slow = {
        "name": "srv",
        "command": "/bin/sh",
        "args": ["-c", 'sleep 3; exec "$0" "$@"', sys.executable, str(SERVERS / "stdio_server.py")],
        "env": [],
    }
    session_id, _ = await open_session(server, tmp_path, [slow])
    started = time.monotonic()
    titled = await server.call(
        "session/prompt", {"sessionId": session_id, "prompt": [{"type": "text", "text": "/title Slow"}]}
    )
    assert titled["result"] == {"stopReason": "end_turn"}
    assert time.monotonic() - started < T_ACK


# --- tool calls ---


async def test_a_read_only_mcp_tool_runs_as_an_acp_tool_call_without_asking(server: RawClient, tmp_path: Path) -> None:
    session_id, _ = await open_session(server, tmp_path, [stdio_server()])
    assert await prompt(server, session_id, [call("mcp__srv__echo", text="hi"), {"say": "done"}]) == "end_turn"
    announced, update = last_call(server, session_id)
    assert announced["title"] == "mcp: srv/echo"
    assert announced["kind"] == "read"
    assert announced["rawInput"] == {"text": "hi"}
    assert update["status"] == "completed"
    assert texts_of(update) == ["echo: hi"]
    assert update["rawOutput"] == {"result": "echo: hi"}  # the tool's structured content
    assert not [m for m in server.received if m.get("method") == "session/request_permission"]
    assert server.texts(session_id) == ["done"]


async def test_a_subagent_can_call_the_sessions_mcp_tools(server: RawClient, tmp_path: Path) -> None:
    """A child session gets the parent turn's tools, MCP ones included; its call shows in the delegate call."""
    session_id, _ = await open_session(server, tmp_path, [stdio_server()])
    child = [call("mcp__srv__echo", text="from the child"), {"say": "child saw it"}]
    delegate = {"tool": "delegate", "args": {"task": "echo something", "script": child}}
    assert await prompt(server, session_id, [delegate, {"say": "done"}]) == "end_turn"
    announced, update = last_call(server, session_id)
    assert announced["title"].startswith("Delegate") and update["status"] == "completed"
    assert texts_of(update) == ["child saw it"]
    progress = [
        "\n".join(texts_of(u))
        for u in server.updates(session_id, "tool_call_update")
        if u["toolCallId"] == announced["toolCallId"]
    ]
    assert any("→ mcp: srv/echo\n  done" in shown for shown in progress), progress
    assert server.texts(session_id) == ["done"]


async def test_a_tool_the_server_adds_is_offered_from_the_next_turn(server: RawClient, tmp_path: Path) -> None:
    """`notifications/tools/list_changed`: the list is read again before the next turn, never mid-turn."""
    session_id, _ = await open_session(server, tmp_path, [stdio_server()], mode="bypass")
    same_turn = [call("mcp__srv__grow", name="fresh"), call("mcp__srv__fresh", text="too early")]
    assert await prompt(server, session_id, same_turn) == "end_turn"
    _, update = last_call(server, session_id)
    assert update["status"] == "failed" and "no tool named" in texts_of(update)[0]
    assert await prompt(server, session_id, [call("mcp__srv__fresh", text="hi")]) == "end_turn"
    announced, update = last_call(server, session_id)
    assert announced["kind"] == "read" and update["status"] == "completed"
    assert texts_of(update) == ["grown: hi"]


async def test_a_2025_server_asking_for_roots_gets_the_sessions_directories(server: RawClient, tmp_path: Path) -> None:
    """`roots/list` is a request of the 2025 protocol (the handshake era most servers in use still speak)."""
    extra = tmp_path / "extra"
    extra.mkdir()
    params = {"cwd": str(tmp_path), "additionalDirectories": [str(extra)], "mcpServers": [legacy_server()]}
    response = await server.call("session/new", params)
    session_id = response["result"]["sessionId"]
    assert await prompt(server, session_id, [call("mcp__old__roots")]) == "end_turn"
    _, update = last_call(server, session_id)
    assert update["status"] == "completed", update
    assert texts_of(update) == [f"{tmp_path.as_uri()} {extra.as_uri()}"]


async def test_a_2025_server_adding_a_tool_is_read_again_before_the_next_turn(
    server: RawClient, tmp_path: Path
) -> None:
    """`notifications/tools/list_changed`, the 2025 protocol's way of saying it."""
    session_id, _ = await open_session(server, tmp_path, [legacy_server()], mode="bypass")
    assert await prompt(server, session_id, [call("mcp__old__grow", name="fresh")]) == "end_turn"
    assert await prompt(server, session_id, [call("mcp__old__fresh", text="hi")]) == "end_turn"
    announced, update = last_call(server, session_id)
    assert announced["kind"] == "read" and update["status"] == "completed"
    assert texts_of(update) == ["grown: hi"]


async def test_mcp_results_map_to_acp_content_and_an_error_result_fails_the_call(
    server: RawClient, tmp_path: Path
) -> None:
    session_id, _ = await open_session(server, tmp_path, [stdio_server()])
    script = [call("mcp__srv__mixed"), call("mcp__srv__weather", city="Oslo"), call("mcp__srv__fail", message="no")]
    assert await prompt(server, session_id, script) == "end_turn"
    mixed, weather, failing = (final(server, session_id, c["toolCallId"]) for c in tool_calls(server, session_id))
    assert mixed["status"] == "completed"
    assert texts_of(mixed) == [
        "a picture follows",
        "[image: image/png, about 9 bytes, not shown]",
        "[resource link: report.txt <file:///tmp/report.txt>]",
    ]
    assert weather["rawOutput"] == {"city": "Oslo", "celsius": 21}
    assert failing["status"] == "failed"
    assert "Error executing tool fail" in texts_of(failing)[0]


async def test_the_acp_env_list_reaches_a_stdio_server_and_the_agents_own_environment_does_not(
    start_server: StartServer, tmp_path: Path
) -> None:
    client = await start_server(env={"ACP_TEST_AGENT_SECRET": "do-not-pass"})
    await client.initialize()
    session_id, _ = await open_session(client, tmp_path, [stdio_server(env={"ACP_TEST_GIVEN": "from-the-editor"})])
    script = [call("mcp__srv__env", name="ACP_TEST_GIVEN"), call("mcp__srv__env", name="ACP_TEST_AGENT_SECRET")]
    assert await prompt(client, session_id, script) == "end_turn"
    given, secret = (final(client, session_id, c["toolCallId"]) for c in tool_calls(client, session_id))
    assert texts_of(given) == ["from-the-editor"]
    assert texts_of(secret) == ["(unset)"]


@pytest.mark.parametrize("http_server", ["http", "sse"], indirect=True)
async def test_http_and_sse_servers_offer_their_tools(
    server: RawClient, tmp_path: Path, http_server: tuple[str, asyncio.subprocess.Process]
) -> None:
    url, _ = http_server
    kind = "sse" if url.endswith("/sse") else "http"
    remote = {"type": kind, "name": "web", "url": url, "headers": [{"name": "X-Test", "value": "1"}]}
    session_id, _ = await open_session(server, tmp_path, [remote])
    assert await prompt(server, session_id, [call("mcp__web__echo", text="over http")]) == "end_turn"
    announced, update = last_call(server, session_id)
    assert announced["title"] == "mcp: web/echo"
    assert texts_of(update) == ["echo: over http"]


# --- permissions ---


@pytest.mark.parametrize(
    ("mode", "asks", "writes"),
    [("default", True, True), ("accept_edits", True, True), ("bypass", False, True), ("read_only", False, False)],
)
async def test_a_writing_mcp_tool_follows_the_permission_mode(
    server: RawClient, tmp_path: Path, mode: str, asks: bool, writes: bool
) -> None:
    session_id, _ = await open_session(server, tmp_path, [stdio_server()], mode)
    async with Editor(server, permission=always("allow_once")) as editor:
        script = [call("mcp__srv__write_note", name="note.txt", text="hello"), call("mcp__srv__echo", text="read")]
        assert await prompt(server, session_id, script) == "end_turn"
    asked = editor.calls("session/request_permission")
    assert len(asked) == (1 if asks else 0)
    if asks:
        assert asked[0]["params"]["toolCall"]["title"] == "mcp: srv/write_note"
        names = [option["name"] for option in asked[0]["params"]["options"]]
        assert "Always allow mcp__srv__write_note" in names
    write, echo = (final(server, session_id, c["toolCallId"]) for c in tool_calls(server, session_id))
    assert (tmp_path / "note.txt").exists() == writes
    assert write["status"] == ("completed" if writes else "failed")
    if not writes:
        assert "read-only" in texts_of(write)[0]
    assert echo["status"] == "completed"  # a read-only tool runs in every mode


async def test_always_allowing_an_mcp_tool_is_remembered_for_that_tool_only(server: RawClient, tmp_path: Path) -> None:
    session_id, _ = await open_session(server, tmp_path, [stdio_server()])
    async with Editor(server, permission=always("allow_always")) as editor:
        first = [call("mcp__srv__write_note", name="a.txt", text="1")]
        assert await prompt(server, session_id, first) == "end_turn"
        again = [call("mcp__srv__write_note", name="b.txt", text="2"), call("mcp__srv__die_soon", seconds=60)]
        assert await prompt(server, session_id, again) == "end_turn"
    titles = [r["params"]["toolCall"]["title"] for r in editor.calls("session/request_permission")]
    assert titles == ["mcp: srv/write_note", "mcp: srv/die_soon"]
    assert (tmp_path / "b.txt").read_text() == "2"


# --- cancellation ---


async def test_a_cancel_reaches_the_mcp_server_and_the_session_stays_usable(server: RawClient, tmp_path: Path) -> None:
    session_id, _ = await open_session(server, tmp_path, [stdio_server()])
    marker = tmp_path / "marker"
    message = server.prompt_message(session_id, [call("mcp__srv__slow", seconds=60, marker=str(marker))])
    await server.send(message)
    deadline = time.monotonic() + T_MCP
    while not (marker.exists() and marker.read_text() == "started"):
        assert time.monotonic() < deadline, "the slow tool never started"
        await asyncio.sleep(0.02)
    sent = await server.cancel(session_id)
    response = await server.response(message["id"], T_ESC)
    assert response["result"] == {"stopReason": "cancelled"}
    assert server.arrival_time(response) - sent < T_ESC
    deadline = time.monotonic() + T_WAIT
    while marker.read_text() != "cancelled":  # the server saw the call cancelled (notifications/cancelled)
        assert time.monotonic() < deadline, f"the server never saw the cancel: {marker.read_text()!r}"
        await asyncio.sleep(0.02)
    _, update = last_call(server, session_id)
    assert update["status"] == "failed"
    assert await prompt(server, session_id, [call("mcp__srv__echo", text="after")]) == "end_turn"
    _, after = last_call(server, session_id)
    assert texts_of(after) == ["echo: after"]


# --- failures ---


async def test_a_server_that_cannot_start_is_told_at_the_start_of_the_next_turn(
    server: RawClient, tmp_path: Path
) -> None:
    broken = {"name": "gone", "command": "acp-test-no-such-command", "args": [], "env": []}
    session_id, _ = await open_session(server, tmp_path, [broken, stdio_server()])
    await asyncio.sleep(W_QUIET)  # whatever happens meanwhile must stay off the wire (conftest's C3)
    assert await prompt(server, session_id, [call("mcp__gone__anything"), {"say": "done"}]) == "end_turn"
    notice, said = server.texts(session_id)
    assert "'gone'" in notice
    assert "command not found: acp-test-no-such-command" in notice
    assert said == "done"
    _, update = last_call(server, session_id)
    assert update["status"] == "failed"  # the model called a tool that is not there
    assert await prompt(server, session_id, [{"say": "again"}]) == "end_turn"
    assert server.texts(session_id)[-1] == "again"  # told once


async def test_a_server_dying_mid_call_fails_the_call_and_is_told_in_the_next_turn(
    server: RawClient, tmp_path: Path
) -> None:
    session_id, _ = await open_session(server, tmp_path, [stdio_server()], "bypass")
    assert await prompt(server, session_id, [call("mcp__srv__die"), {"say": "went on"}]) == "end_turn"
    _, died = last_call(server, session_id)
    assert died["status"] == "failed"
    assert "'srv' stopped" in texts_of(died)[0]
    assert server.texts(session_id) == ["went on"]
    assert await prompt(server, session_id, [call("mcp__srv__echo", text="x"), {"say": "done"}]) == "end_turn"
    notice, said = server.texts(session_id)[1:]
    assert notice.startswith("The MCP server 'srv' stopped")
    assert said == "done"
    _, echo = last_call(server, session_id)
    assert echo["status"] == "failed"  # its tools are gone with it


async def test_a_server_dying_between_turns_is_told_inside_the_next_turn_only(
    server: RawClient, tmp_path: Path
) -> None:
    session_id, _ = await open_session(server, tmp_path, [stdio_server()], "bypass")
    pid = await server_pid(server, session_id)
    assert await prompt(server, session_id, [call("mcp__srv__die_soon", seconds=0.2)]) == "end_turn"
    await wait_gone(pid, 5)
    await asyncio.sleep(W_QUIET)  # the agent has noticed by now; it must say nothing until a turn starts
    assert await prompt(server, session_id, [{"say": "hello"}]) == "end_turn"
    assert server.texts(session_id)[-2:] == ["The MCP server 'srv' stopped; its tools are not available.", "hello"]


@pytest.mark.parametrize("http_server", ["http"], indirect=True)
async def test_an_http_server_that_goes_away_fails_the_next_call_and_is_told_in_the_turn_after(
    server: RawClient, tmp_path: Path, http_server: tuple[str, asyncio.subprocess.Process]
) -> None:
    url, process = http_server
    session_id, _ = await open_session(server, tmp_path, [{"type": "http", "name": "web", "url": url, "headers": []}])
    assert await prompt(server, session_id, [call("mcp__web__echo", text="1")]) == "end_turn"
    process.kill()
    await process.wait()
    assert await prompt(server, session_id, [call("mcp__web__echo", text="2"), {"say": "went on"}]) == "end_turn"
    _, failed = last_call(server, session_id)
    assert failed["status"] == "failed"
    assert "'web' stopped" in texts_of(failed)[0]
    assert await prompt(server, session_id, [{"say": "next"}]) == "end_turn"
    assert server.texts(session_id) == [
        "went on",
        "The MCP server 'web' stopped; its tools are not available.",
        "next",
    ]


# --- shutting down ---


async def test_closing_a_session_stops_its_mcp_servers_and_leaves_no_task_behind(
    server: RawClient, tmp_path: Path
) -> None:
    await open_session(server, tmp_path, [])  # the session store's own task starts with the first session
    before = await settled_stats(server)
    session_id, _ = await open_session(server, tmp_path, [stdio_server()])
    pid = await server_pid(server, session_id)
    assert (await server.stats())["mcpSessions"] == 1
    response = await server.call("session/close", {"sessionId": session_id}, timeout=GRACE + 5)
    assert response["result"] == {}
    await wait_gone(pid, 2)
    assert (await server.stats())["mcpSessions"] == 0
    deadline = time.monotonic() + T_WAIT
    while (after := await server.stats())["tasks"] != before["tasks"]:  # the title task may still be finishing
        assert time.monotonic() < deadline, (before, after)
        await asyncio.sleep(0.05)


async def settled_stats(server: RawClient) -> dict[str, Any]:
    """The counts once the model's warm-up (a task that ends on its own, started by `initialize` and
    `session/new`) is over: counted as running in a "before", it would be missed in every "after"."""
    deadline = time.monotonic() + T_WAIT
    while (stats := await server.stats())["warmUps"]:
        assert time.monotonic() < deadline, stats
        await asyncio.sleep(0.05)
    return stats


async def test_eof_shuts_every_mcp_server_down_even_one_that_ignores_it(
    start_server: StartServer, tmp_path: Path
) -> None:
    client = await start_server()
    await client.initialize()
    servers = [stdio_server("calm"), stdio_server("stubborn", "--stubborn")]
    session_id, _ = await open_session(client, tmp_path, servers)
    pids = [await server_pid(client, session_id, "calm"), await server_pid(client, session_id, "stubborn")]
    marker = tmp_path / "marker"
    # EOF with a call in flight.
    await client.send(client.prompt_message(session_id, [call("mcp__calm__slow", seconds=60, marker=str(marker))]))
    deadline = time.monotonic() + T_MCP
    while not marker.exists():
        assert time.monotonic() < deadline
        await asyncio.sleep(0.02)
    code, took = await client.close(timeout=GRACE + 5)
    assert code == 0
    assert took < GRACE + 5
    for pid in pids:
        await wait_gone(pid, 1)
    assert not [p for p in processes() if p[1] in pids]  # nor anything they started


async def test_resume_starts_the_sessions_mcp_servers_again(server: RawClient, tmp_path: Path) -> None:
    session_id, _ = await open_session(server, tmp_path, [stdio_server()])
    first = await server_pid(server, session_id)
    response = await server.call(
        "session/resume", {"sessionId": session_id, "cwd": str(tmp_path), "mcpServers": [stdio_server()]}
    )
    assert "result" in response, response
    await wait_gone(first, 5)  # the servers of the replaced session are stopped
    second = await server_pid(server, session_id)
    assert second != first


async def test_config_file_servers_join_every_session_and_the_editors_win_by_name(
    start_server: StartServer, tmp_path: Path
) -> None:
    config = tmp_path / "config.toml"
    script = str(SERVERS / "stdio_server.py")
    config.write_text(
        f"[mcp_servers.shared]\ncommand = {sys.executable!r}\nargs = [{script!r}, 'shared']\n"
        f"[mcp_servers.srv]\ncommand = {sys.executable!r}\nargs = [{script!r}, 'srv']\nenv = {{ WHO = 'config' }}\n"
    )
    client = await start_server(env={"ACP_SERVER_CONFIG": str(config)})
    await client.initialize()
    session_id, _ = await open_session(client, tmp_path, [stdio_server(env={"WHO": "editor"})])
    script_steps = [call("mcp__shared__echo", text="from config"), call("mcp__srv__env", name="WHO")]
    assert await prompt(client, session_id, script_steps) == "end_turn"
    shared, who = (final(client, session_id, c["toolCallId"]) for c in tool_calls(client, session_id))
    assert texts_of(shared) == ["echo: from config"]
    assert texts_of(who) == ["editor"]
