"""`run_command` end to end over real stdio: local processes for clients without terminals, editor terminals for
clients that offer them, cancellation of both (docs/interrupts.md I9, I12, I17), and the permission rules for commands.

The scripted model calls the tool; `tests/support/editor_client.py` plays the editor. Commands that only a broken
permission gate would run (`rm -rf /`) are only ever offered to a client with terminals, whose terminals are
simulated: nothing is executed on this machine for them.
"""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path
from typing import Any

import pytest

from acp_server.runtime.tools.commands import command_prefix
from tests.conftest import StartServer, server_args
from tests.support.editor_client import NEVER, Editor, always, answer_with
from tests.support.harness import (
    GRACE,
    T_ACK,
    T_ESC,
    T_EXIT,
    T_WAIT,
    TURN_SCOPED,
    W_QUIET,
    RawClient,
    processes,
    scaled,
)

FINAL = ("completed", "failed")
OPTION_KINDS = {"allow_once", "allow_always", "reject_once", "reject_always"}


# --- helpers ---


@pytest.fixture
async def terminal_server(start_server: StartServer, request: pytest.FixtureRequest) -> RawClient:
    """A server whose client advertised `terminal: true`: commands go to editor terminals."""
    client = await start_server(*server_args(request))
    await client.initialize({"terminal": True})
    return client


async def open_session(client: RawClient, cwd: Path, mode: str = "bypass") -> str:
    session_id = await client.new_session(str(cwd))
    if mode != "default":
        response = await client.call("session/set_mode", {"sessionId": session_id, "modeId": mode})
        assert response.get("result") == {}, response
    return session_id


def run(command: str, **args: Any) -> dict[str, Any]:
    return {"tool": "run_command", "args": {"command": command, **args}}


def position(client: RawClient, message: dict[str, Any]) -> int:
    return next(i for i, m in enumerate(client.received) if m is message)


async def nothing_after(client: RawClient, session_id: str, response: dict[str, Any]) -> None:
    """For W_quiet after a prompt's response, nothing of its turn follows: no request to the editor (a terminal
    call among them, I9) and no turn-scoped update of the session (C3, C4, said here as the test's own claim)."""
    earlier = {id(m) for m in client.received[: position(client, response) + 1]}

    def of_the_turn(message: dict[str, Any]) -> bool:
        if id(message) in earlier:
            return False
        if "id" in message and "method" in message:
            return True
        params = message.get("params") or {}
        return (
            message.get("method") == "session/update"
            and params.get("sessionId") == session_id
            and params.get("update", {}).get("sessionUpdate") in TURN_SCOPED
        )

    await client.quiet(W_QUIET, of_the_turn)


def tool_calls(client: RawClient, session_id: str) -> list[dict[str, Any]]:
    return client.updates(session_id, "tool_call")


def final_update(client: RawClient, session_id: str, call_id: str) -> dict[str, Any]:
    finals = [
        u
        for u in client.updates(session_id, "tool_call_update")
        if u["toolCallId"] == call_id and u.get("status") in FINAL
    ]
    assert len(finals) == 1, finals
    return finals[0]


def finals_in_order(client: RawClient, session_id: str) -> list[dict[str, Any]]:
    """The final update of every tool call of the session, in the order the calls were announced."""
    return [final_update(client, session_id, call["toolCallId"]) for call in tool_calls(client, session_id)]


def text_of(update: dict[str, Any]) -> str:
    return "".join(c["content"]["text"] for c in update.get("content", []) if c["type"] == "content")


def live_members(pgid: int) -> list[int]:
    """Processes of a process group that still run (zombies waiting for a reaper do not count)."""
    return [pid for pid, _, group, state, _ in processes() if group == pgid and state != "Z"]


def running(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


async def wait_gone(pgid: int, pids: tuple[int, ...] = (), timeout: float = scaled(2.0)) -> None:
    deadline = time.monotonic() + timeout
    while live_members(pgid) or any(running(pid) for pid in pids):
        assert time.monotonic() < deadline, f"process group {pgid} still has {live_members(pgid)}"
        await asyncio.sleep(0.05)


def written_pid(path: Path) -> int | None:
    text = path.read_text() if path.exists() else ""
    return int(text) if text.endswith("\n") else None


def real(path: Path) -> str:
    return os.path.realpath(path)


async def read_pid(path: Path, timeout: float = T_WAIT) -> int:
    deadline = time.monotonic() + timeout
    while (pid := written_pid(path)) is None:
        assert time.monotonic() < deadline, f"{path} was never written"
        await asyncio.sleep(0.02)
    return pid


# A command that records its process group (the shell is the group leader) and a background grandchild, then
# waits for it: killing only the shell would leave the grandchild running.
GROUP_COMMAND = "echo $$ > pgid; sleep 600 & echo $! > child; echo started; wait"


# --- local commands (the client offers no terminal) ---


async def test_local_command_output_and_exit_code_reach_the_tool_result(server: RawClient, tmp_path: Path) -> None:
    session = await open_session(server, tmp_path)
    command = "echo hi; echo err >&2"
    response = await server.call(
        "session/prompt",
        server.prompt_message(session, [run(command), {"say": "done"}])["params"],
    )
    assert response["result"] == {"stopReason": "end_turn"}
    (call,) = tool_calls(server, session)
    assert call["kind"] == "execute"
    assert call["title"] == command
    final = final_update(server, session, call["toolCallId"])
    assert final["status"] == "completed"
    assert final["rawOutput"] == {"exitCode": 0, "signal": None, "timedOut": False, "truncated": False}
    text = text_of(final)
    assert "hi\n" in text
    assert "err\n" in text
    assert text.endswith("[exit code 0]")
    assert server.texts(session) == ["done"]
    assert not [m for m in server.received if "id" in m and "method" in m]  # nothing asked of the client


async def test_local_failing_command_fails_the_tool_call_and_the_turn_goes_on(
    server: RawClient, tmp_path: Path
) -> None:
    session = await open_session(server, tmp_path)
    prompt = server.prompt_message(session, [run("echo oops; exit 3"), {"say": "next"}])
    response = await server.call("session/prompt", prompt["params"])
    assert response["result"] == {"stopReason": "end_turn"}
    (final,) = finals_in_order(server, session)
    assert final["status"] == "failed"
    assert final["rawOutput"]["exitCode"] == 3
    assert "oops" in text_of(final)
    assert "[exit code 3]" in text_of(final)
    assert server.texts(session) == ["next"]


async def test_local_command_runs_in_the_requested_directory_and_never_outside_the_session(
    server: RawClient, tmp_path: Path
) -> None:
    (tmp_path / "sub").mkdir()
    outside = tmp_path.parent
    session = await open_session(server, tmp_path)
    script = [
        run("pwd", cwd="sub"),
        run("pwd"),
        run("touch escaped", cwd=".."),
        run("touch escaped", cwd=str(outside)),
        run("touch missing", cwd="no-such-dir"),
    ]
    response = await server.call("session/prompt", server.prompt_message(session, script)["params"])
    assert response["result"] == {"stopReason": "end_turn"}
    in_sub, in_cwd, dotdot, absolute, missing = finals_in_order(server, session)
    assert in_sub["status"] == "completed"
    assert text_of(in_sub).startswith(f"{real(tmp_path / 'sub')}\n")
    assert in_cwd["status"] == "completed"
    assert text_of(in_cwd).startswith(f"{real(tmp_path)}\n")
    for refused in (dotdot, absolute):
        assert refused["status"] == "failed"
        assert "outside the session's directories" in text_of(refused)
    assert missing["status"] == "failed"
    assert "not a directory" in text_of(missing)
    assert not (outside / "escaped").exists()
    assert not (tmp_path / "no-such-dir").exists()


async def test_local_timeout_kills_the_whole_process_group(server: RawClient, tmp_path: Path) -> None:
    session = await open_session(server, tmp_path)
    started = time.monotonic()
    prompt = server.prompt_message(session, [run(GROUP_COMMAND, timeout_s=1), {"say": "after"}])
    response = await server.call("session/prompt", prompt["params"], timeout=scaled(10))
    took = time.monotonic() - started
    assert response["result"] == {"stopReason": "end_turn"}
    assert 1 <= took <= 1 + GRACE + scaled(2)  # the timeout, then SIGTERM; never the sleep's 600 s
    (final,) = finals_in_order(server, session)
    assert final["status"] == "failed"
    assert final["rawOutput"]["timedOut"] is True
    assert final["rawOutput"]["exitCode"] is None
    assert "started" in text_of(final)
    assert "timed out after 1 s" in text_of(final)
    await wait_gone(await read_pid(tmp_path / "pgid"), (await read_pid(tmp_path / "child"),))
    assert server.texts(session) == ["after"]


async def test_local_output_beyond_the_limit_is_cut_and_the_cut_is_noted(server: RawClient, tmp_path: Path) -> None:
    session = await open_session(server, tmp_path)
    command = "head -c 400000 /dev/zero | tr '\\0' x; echo; echo last-line"
    response = await server.call("session/prompt", server.prompt_message(session, [run(command)])["params"])
    assert response["result"] == {"stopReason": "end_turn"}
    (final,) = finals_in_order(server, session)
    assert final["status"] == "completed"
    assert final["rawOutput"] == {"exitCode": 0, "signal": None, "timedOut": False, "truncated": True}
    text = text_of(final)
    assert len(text) < 32_000
    assert "part of it is missing" in text
    assert "characters cut from the middle" in text
    assert text.endswith("]")
    assert "[exit code 0" in text


async def test_local_output_beyond_the_limit_keeps_its_end_for_the_model(server: RawClient, tmp_path: Path) -> None:
    """The runner keeps the tail of a long output (where errors are), as a client terminal's byte limit does: the
    model reads the command's last line, and the note says the beginning is what is missing."""
    session = await open_session(server, tmp_path)
    command = "echo first-line; head -c 400000 /dev/zero | tr '\\0' x; echo; echo last-line"
    response = await server.call("session/prompt", server.prompt_message(session, [run(command)])["params"])
    assert response["result"] == {"stopReason": "end_turn"}
    (final,) = finals_in_order(server, session)
    text = text_of(final)
    assert "last-line\n[exit code 0" in text
    assert "first-line" not in text
    assert "part of it is missing: its beginning" in text


async def test_stdin_eof_with_a_local_command_running_exits_in_time_and_kills_its_group(
    start_server: StartServer, tmp_path: Path
) -> None:
    """I17 with run_command: a local `sleep 600` (and its background grandchild) do not outlive the server."""
    server = await start_server()
    await server.initialize()
    session = await open_session(server, tmp_path)
    prompt = await server.prompt(session, [run(GROUP_COMMAND)])
    pgid = await read_pid(tmp_path / "pgid")
    child = await read_pid(tmp_path / "child")
    assert live_members(pgid)
    code, took = await server.close()
    assert code == 0
    assert took <= T_EXIT
    await wait_gone(pgid, (child,))
    # I17: EOF cancels the turn, which is answered `cancelled` (once) before the process exits.
    answer = [m for m in server.received if m.get("id") == prompt and "method" not in m]
    assert [m.get("result") for m in answer] == [{"stopReason": "cancelled"}]


# --- editor terminals (the client advertised `terminal: true`) ---


async def test_editor_terminal_is_created_shown_awaited_read_and_released_once(
    terminal_server: RawClient, tmp_path: Path
) -> None:
    server = terminal_server
    session = await open_session(server, tmp_path)
    async with Editor(server, output="hi\n") as editor:
        prompt = server.prompt_message(session, [run("echo hi"), {"say": "done"}])
        response = await server.call("session/prompt", prompt["params"])
    assert response["result"] == {"stopReason": "end_turn"}
    create, wait, output, release = editor.requests
    assert [r["method"] for r in editor.requests] == [
        "terminal/create",
        "terminal/wait_for_exit",
        "terminal/output",
        "terminal/release",
    ]
    params = create["params"]
    assert params["sessionId"] == session
    assert params["command"] == "/bin/sh"
    assert params["args"] == ["-c", "echo hi"]
    assert params["cwd"] == str(tmp_path)
    terminal_id = wait["params"]["terminalId"]
    assert editor.terminal_methods(terminal_id) == [r["method"] for r in editor.requests]
    (call,) = tool_calls(server, session)
    shown = [
        m
        for m in server.received
        if m.get("method") == "session/update"
        and m["params"]["update"].get("content") == [{"type": "terminal", "terminalId": terminal_id}]
        and "status" not in m["params"]["update"]
    ]
    assert len(shown) == 1
    assert shown[0]["params"]["update"]["toolCallId"] == call["toolCallId"]
    assert position(server, create) < position(server, shown[0]) < position(server, wait)
    final = final_update(server, session, call["toolCallId"])
    assert final["status"] == "completed"
    assert final["content"] == [{"type": "terminal", "terminalId": terminal_id}]
    assert final["rawOutput"] == {"exitCode": 0, "signal": None, "timedOut": False, "truncated": False}
    assert (
        position(server, output)
        < position(server, release)
        < position(server, final_message(server, call["toolCallId"]))
    )
    assert server.texts(session) == ["done"]


async def test_editor_terminal_exit_code_and_relative_cwd_are_honoured(
    terminal_server: RawClient, tmp_path: Path
) -> None:
    server = terminal_server
    (tmp_path / "sub").mkdir()
    session = await open_session(server, tmp_path)
    async with Editor(server, exit_status={"exitCode": 2, "signal": None}, output="boom\n", truncated=True) as editor:
        prompt = server.prompt_message(session, [run("make", cwd="sub")])
        response = await server.call("session/prompt", prompt["params"])
    assert response["result"] == {"stopReason": "end_turn"}
    (create,) = editor.calls("terminal/create")
    assert create["params"]["cwd"] == str(tmp_path / "sub")
    assert len(editor.calls("terminal/release")) == 1
    (final,) = finals_in_order(server, session)
    assert final["status"] == "failed"
    assert final["rawOutput"] == {"exitCode": 2, "signal": None, "timedOut": False, "truncated": True}


async def test_editor_terminal_timeout_kills_reads_and_releases(terminal_server: RawClient, tmp_path: Path) -> None:
    server = terminal_server
    session = await open_session(server, tmp_path)
    async with Editor(server, exit_status=None, output="partial\n") as editor:
        prompt = server.prompt_message(session, [run("sleep 600", timeout_s=0.5), {"say": "after"}])
        response = await server.call("session/prompt", prompt["params"])
    assert response["result"] == {"stopReason": "end_turn"}
    terminal_id = editor.calls("terminal/wait_for_exit")[0]["params"]["terminalId"]
    assert editor.terminal_methods(terminal_id) == [
        "terminal/create",
        "terminal/wait_for_exit",
        "terminal/kill",
        "terminal/output",
        "terminal/release",
    ]
    (final,) = finals_in_order(server, session)
    assert final["status"] == "failed"
    assert final["rawOutput"]["timedOut"] is True
    assert server.texts(session) == ["after"]


@pytest.mark.at_once
async def test_cancel_during_wait_for_exit_kills_then_releases_before_the_response(
    terminal_server: RawClient, tmp_path: Path
) -> None:
    """I9: kill within T_ACK, then exactly one release, both before the response; nothing for the terminal after."""
    server = terminal_server
    session = await open_session(server, tmp_path)
    async with Editor(server, exit_status=None) as editor:
        prompt = await server.prompt(session, [run("sleep 600"), {"say": "never"}])
        wait = await editor.wait_request("terminal/wait_for_exit")
        terminal_id = wait["params"]["terminalId"]
        t0 = await server.cancel(session)
        response = await server.response(prompt)
        kill = await editor.wait_request("terminal/kill")
        await nothing_after(server, session, response)
    assert response["result"] == {"stopReason": "cancelled"}
    assert server.arrival_time(kill) - t0 <= T_ACK
    assert server.arrival_time(response) - t0 <= T_ACK  # the client answers kill and release at once
    (release,) = editor.calls("terminal/release")
    assert position(server, kill) < position(server, release) < position(server, response)
    assert editor.terminal_methods(terminal_id) == [
        "terminal/create",
        "terminal/wait_for_exit",
        "terminal/kill",
        "terminal/release",
    ]
    (call,) = tool_calls(server, session)
    final = final_update(server, session, call["toolCallId"])
    assert final["status"] == "failed"
    assert position(server, final_message(server, call["toolCallId"])) < position(server, response)
    assert server.texts(session) == []


async def test_cancel_with_a_client_that_never_answers_kill_or_release_still_answers_in_time(
    terminal_server: RawClient, tmp_path: Path
) -> None:
    """I9, slow client: the response waits for no answer past the deadline, and the release is on the wire first."""
    server = terminal_server
    session = await open_session(server, tmp_path)
    async with Editor(server, exit_status=None, kill_delay=NEVER, release_delay=NEVER) as editor:
        prompt = await server.prompt(session, [run("sleep 600")])
        wait = await editor.wait_request("terminal/wait_for_exit")
        t0 = await server.cancel(session)
        response = await server.response(prompt, timeout=T_ESC + 1)
        await nothing_after(server, session, response)
    assert response["result"] == {"stopReason": "cancelled"}
    assert server.arrival_time(response) - t0 <= T_ESC
    terminal_id = wait["params"]["terminalId"]
    assert editor.terminal_methods(terminal_id) == [
        "terminal/create",
        "terminal/wait_for_exit",
        "terminal/kill",
        "terminal/release",
    ]
    (release,) = editor.calls("terminal/release")
    assert position(server, release) < position(server, response)


async def test_repeated_cancels_with_a_terminal_kill_and_release_once(
    terminal_server: RawClient, tmp_path: Path
) -> None:
    """I12: two cancels in one write and a third during the cleanup act as one."""
    server = terminal_server
    session = await open_session(server, tmp_path)
    async with Editor(server, exit_status=None, kill_delay=0.3) as editor:
        prompt = await server.prompt(session, [run("sleep 600")])
        wait = await editor.wait_request("terminal/wait_for_exit")
        cancel = {"method": "session/cancel", "params": {"sessionId": session}}
        t0 = await server.send(cancel, cancel)
        await asyncio.sleep(0.2)
        await server.send(cancel)
        response = await server.response(prompt, timeout=T_ESC + 1)
        await nothing_after(server, session, response)
    assert response["result"] == {"stopReason": "cancelled"}
    assert server.arrival_time(response) - t0 <= T_ESC
    terminal_id = wait["params"]["terminalId"]
    assert editor.terminal_methods(terminal_id) == [
        "terminal/create",
        "terminal/wait_for_exit",
        "terminal/kill",
        "terminal/release",
    ]
    (call,) = tool_calls(server, session)
    failed = [
        u
        for u in server.updates(session, "tool_call_update")
        if u["toolCallId"] == call["toolCallId"] and "status" in u
    ]
    assert [u["status"] for u in failed] == ["in_progress", "failed"]
    assert len([m for m in server.received if m.get("id") == prompt and "method" not in m]) == 1


def final_message(client: RawClient, call_id: str) -> dict[str, Any]:
    return next(
        m
        for m in client.received
        if m.get("method") == "session/update"
        and m["params"]["update"].get("toolCallId") == call_id
        and m["params"]["update"].get("status") in FINAL
    )


# --- permissions for commands ---


@pytest.mark.parametrize(
    ("command", "rule"),
    [
        ("git status", "git status"),
        ("  git   status  --short ", "git status"),
        ("npm test -- --watch", "npm test"),
        ("ls", "ls"),
        ("echo 'a;b' c", "echo 'a;b'"),  # a quoted operator is an argument; the rule keeps it quoted
        ("git status && rm -rf /", "git status && rm -rf /"),
        ("git status; rm -rf /", "git status; rm -rf /"),
        ("git status | sh", "git status | sh"),
        ("git status > /etc/passwd", "git status > /etc/passwd"),
        ("git status $(rm -rf /)", "git status $(rm -rf /)"),
        ("git status `rm -rf /`", "git status `rm -rf /`"),
        ("git status\nrm -rf /", "git status\nrm -rf /"),
        ("sleep 600 &", "sleep 600 &"),
        ('echo "unbalanced', 'echo "unbalanced'),
    ],
)
def test_command_prefix_is_two_words_for_a_simple_command_and_the_whole_line_otherwise(command: str, rule: str) -> None:
    """What an "always" answer remembers: a chained, piped, redirected or substituted line never shares a rule
    with the simple command it starts with (the gate is checked end to end below)."""
    assert command_prefix(command) == rule


async def test_default_mode_asks_before_running_naming_the_command(terminal_server: RawClient, tmp_path: Path) -> None:
    server = terminal_server
    session = await open_session(server, tmp_path, mode="default")
    async with Editor(server, permission=always("allow_once")) as editor:
        prompt = server.prompt_message(session, [run("ls -la")])
        response = await server.call("session/prompt", prompt["params"])
    assert response["result"] == {"stopReason": "end_turn"}
    asked, create = editor.requests[:2]
    assert asked["method"] == "session/request_permission"
    assert create["method"] == "terminal/create"
    (call,) = tool_calls(server, session)
    tool_call = asked["params"]["toolCall"]
    assert tool_call["toolCallId"] == call["toolCallId"]
    assert tool_call["kind"] == "execute"
    assert tool_call["title"] == "ls -la"
    assert {option["kind"] for option in asked["params"]["options"]} == OPTION_KINDS
    assert final_update(server, session, call["toolCallId"])["status"] == "completed"


async def test_always_allow_covers_the_command_and_its_prefix_but_nothing_else(
    terminal_server: RawClient, tmp_path: Path
) -> None:
    server = terminal_server
    session = await open_session(server, tmp_path, mode="default")
    commands = ["git status", "git push", "rm -rf /", "git status && rm -rf /", "git status --short"]
    async with Editor(server, permission=answer_with({"git status": "allow_always"})) as editor:
        prompt = server.prompt_message(session, [run(command) for command in commands])
        response = await server.call("session/prompt", prompt["params"])
    assert response["result"] == {"stopReason": "end_turn"}
    asked = [r["params"]["toolCall"]["title"] for r in editor.calls("session/request_permission")]
    assert asked == ["git status", "git push", "rm -rf /", "git status && rm -rf /"]
    ran = [r["params"]["args"][1] for r in editor.calls("terminal/create")]
    assert ran == ["git status", "git status --short"]
    finals = finals_in_order(server, session)
    assert [f["status"] for f in finals] == ["completed", "failed", "failed", "failed", "completed"]
    for refused in finals[1:4]:
        assert "rejected" in text_of(refused)
        assert "nothing was run" in text_of(refused)


async def test_always_reject_is_remembered_for_the_command_prefix(terminal_server: RawClient, tmp_path: Path) -> None:
    server = terminal_server
    session = await open_session(server, tmp_path, mode="default")
    async with Editor(server, permission=answer_with({"git push": "reject_always"}, default="allow_once")) as editor:
        script = [run("git push"), run("git push --force"), run("git log")]
        response = await server.call("session/prompt", server.prompt_message(session, script)["params"])
    assert response["result"] == {"stopReason": "end_turn"}
    asked = [r["params"]["toolCall"]["title"] for r in editor.calls("session/request_permission")]
    assert asked == ["git push", "git log"]
    assert [r["params"]["args"][1] for r in editor.calls("terminal/create")] == ["git log"]
    first, second, third = finals_in_order(server, session)
    assert (first["status"], second["status"], third["status"]) == ("failed", "failed", "completed")
    assert "always rejects" in text_of(second)


async def test_accept_edits_mode_still_asks_before_commands(terminal_server: RawClient, tmp_path: Path) -> None:
    server = terminal_server
    session = await open_session(server, tmp_path, mode="accept_edits")
    async with Editor(server, permission=always("reject_once")) as editor:
        response = await server.call("session/prompt", server.prompt_message(session, [run("make")])["params"])
    assert response["result"] == {"stopReason": "end_turn"}
    assert [r["method"] for r in editor.requests] == ["session/request_permission"]
    (final,) = finals_in_order(server, session)
    assert final["status"] == "failed"


async def test_bypass_mode_runs_commands_without_asking(terminal_server: RawClient, tmp_path: Path) -> None:
    server = terminal_server
    session = await open_session(server, tmp_path, mode="bypass")
    async with Editor(server, permission=always("reject_once")) as editor:
        response = await server.call("session/prompt", server.prompt_message(session, [run("make")])["params"])
    assert response["result"] == {"stopReason": "end_turn"}
    assert not editor.calls("session/request_permission")
    assert len(editor.calls("terminal/create")) == 1
    assert finals_in_order(server, session)[0]["status"] == "completed"


async def test_read_only_mode_refuses_commands_without_asking(terminal_server: RawClient, tmp_path: Path) -> None:
    server = terminal_server
    session = await open_session(server, tmp_path, mode="read_only")
    async with Editor(server, permission=always("allow_once")) as editor:
        response = await server.call("session/prompt", server.prompt_message(session, [run("make")])["params"])
    assert response["result"] == {"stopReason": "end_turn"}
    assert editor.requests == []
    (final,) = finals_in_order(server, session)
    assert final["status"] == "failed"
    assert "read-only" in text_of(final)


@pytest.mark.at_once
async def test_cancel_while_asking_retracts_the_request_and_a_late_allow_runs_nothing(
    terminal_server: RawClient, tmp_path: Path
) -> None:
    """I8 for commands: the pending permission request is retracted before the response; a late allow is ignored."""
    server = terminal_server
    session = await open_session(server, tmp_path, mode="default")
    async with Editor(server, permission=always(None)) as editor:
        prompt = await server.prompt(session, [run("touch marker"), {"say": "never"}])
        asked = await editor.wait_request("session/request_permission")
        t0 = await server.cancel(session)
        response = await server.response(prompt)
        assert response["result"] == {"stopReason": "cancelled"}
        assert server.arrival_time(response) - t0 <= T_ACK
        retracted = [
            m
            for m in server.received
            if m.get("method") == "$/cancel_request" and m["params"]["requestId"] == asked["id"]
        ]
        assert len(retracted) == 1
        assert position(server, retracted[0]) < position(server, response)
        (call,) = tool_calls(server, session)
        assert final_update(server, session, call["toolCallId"])["status"] == "failed"
        count = len(server.received)
        await server.send({"id": asked["id"], "result": {"outcome": {"outcome": "selected", "optionId": "allow_once"}}})
        await server.quiet(W_QUIET, lambda m: m in server.received[count:])
    assert editor.calls("terminal/create") == []
    assert not (tmp_path / "marker").exists()
    assert server.texts(session) == []


async def test_a_command_that_leaves_a_background_child_returns_when_the_shell_exits(
    start_server: StartServer, tmp_path: Path
) -> None:
    """`server &` must not hold the tool call until the timeout; the child is still killed when the server exits."""
    server = await start_server("--model", "scripted", "--test-mode", "--permission-mode", "bypass")
    await server.initialize()
    session = await server.new_session(str(tmp_path))
    started = time.monotonic()
    script = [{"tool": "run_command", "args": {"command": "sleep 600 & echo started $!", "timeout_s": scaled(20)}}]
    response = await server.response(await server.prompt(session, script), timeout=scaled(10))
    assert response["result"] == {"stopReason": "end_turn"}
    assert time.monotonic() - started < scaled(5)  # not the command's timeout
    final = server.updates(session, "tool_call_update")[-1]
    assert final["status"] == "completed", final
    child = int(text_of(final).split("started ", 1)[1].split()[0])
    assert running(child)
    assert (await server.stats())["childProcesses"] == 1  # the background sleep, still tracked
    code, _ = await server.close()
    assert code == 0
    deadline = time.monotonic() + 2  # a SIGKILLed process leaves the table a moment after the server has exited
    while running(child):
        assert time.monotonic() < deadline, f"the background child {child} outlived the server"
        await asyncio.sleep(0.05)
