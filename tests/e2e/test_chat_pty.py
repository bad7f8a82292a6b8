"""`acp-server chat` driven through a real pseudo-terminal, the way a person uses it.

The chat runs as the session leader of a fresh pty whose foreground process group it is, so typing `\\x03` makes
the kernel send it SIGINT exactly as a keyboard Ctrl-C would, and `\\x04` at the start of a line is a real EOF.
The agent is the real acp-server (the offline echo model, or the scripted model with a script file), started by
the chat itself. Output is read from the pty master with deadlines; ANSI colours are off (NO_COLOR) except in
the test that checks them.
"""

from __future__ import annotations

import os
import re
import select
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from tests.support.harness import LONG_GRACE, T_ACK, isolated_env, processes, scaled, server_command

pytestmark = pytest.mark.timeout(60)

# The chat must be the session leader with the pty as its controlling terminal, or \x03 signals nobody.
CONTROLLING_TTY_SHIM = (
    "import fcntl, os, sys, termios; fcntl.ioctl(0, termios.TIOCSCTTY, 0); os.execvp(sys.argv[1], sys.argv[1:])"
)
ANSI = re.compile(rb"\x1b\[[0-9;]*m")
CTRL_C = b"\x03"
CTRL_D = b"\x04"
ENTER = b"\r"


class PtyChat:
    """One `acp-server chat` on a pseudo-terminal: what it printed so far, keystrokes in, its exit."""

    def __init__(self, *args: str, cwd: Path, env: dict[str, str] | None = None) -> None:
        master, slave = os.openpty()
        self.master = master
        self.raw = b""  # everything read, colours included
        self.cursor = 0  # `expect` searches the cleaned output from here on
        self.process = subprocess.Popen(
            [sys.executable, "-c", CONTROLLING_TTY_SHIM, *server_command("chat", *args)],
            stdin=slave,
            stdout=slave,
            stderr=slave,
            cwd=cwd,
            env={**os.environ, **isolated_env(), "NO_COLOR": "1", "TERM": "xterm", **(env or {})},
            start_new_session=True,
        )
        os.close(slave)

    @property
    def text(self) -> str:
        return ANSI.sub(b"", self.raw).replace(b"\r", b"").decode(errors="replace")

    def _read(self, timeout: float) -> bool:
        """Read what is available within `timeout`; False at EOF (the chat and everything on the pty are gone)."""
        ready, _, _ = select.select([self.master], [], [], timeout)
        if not ready:
            return True
        try:
            data = os.read(self.master, 65536)
        except OSError:  # EIO: the slave side is closed
            return False
        self.raw += data
        return bool(data)

    def expect(self, needle: str, timeout: float = scaled(10.0)) -> float:
        """Wait until `needle` appears after the cursor; move the cursor past it; return when it was seen."""
        deadline = time.monotonic() + timeout
        while True:
            found = self.text.find(needle, self.cursor)
            if found >= 0:
                self.cursor = found + len(needle)
                return time.monotonic()
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not self._read(min(remaining, 0.05)):
                if (found := self.text.find(needle, self.cursor)) >= 0:
                    self.cursor = found + len(needle)
                    return time.monotonic()
                raise AssertionError(f"{needle!r} did not appear within {timeout} s; after the cursor:\n{self.rest}")

    @property
    def rest(self) -> str:
        return self.text[self.cursor :]

    def send(self, data: bytes) -> float:
        os.write(self.master, data)
        return time.monotonic()

    def type_line(self, line: str) -> None:
        self.send(line.encode() + ENTER)

    def wait(self, timeout: float = scaled(10.0)) -> int:
        deadline = time.monotonic() + timeout
        while self.process.poll() is None:
            assert time.monotonic() < deadline, f"the chat did not exit within {timeout} s:\n{self.rest}"
            self._read(0.05)
        while self._read(0.05):  # what it wrote last
            if not select.select([self.master], [], [], 0)[0]:
                break
        return self.process.returncode

    def agents(self) -> list[int]:
        """Live processes the chat started (its agent)."""
        return [pid for pid, ppid, _, state, _ in processes() if ppid == self.process.pid and state != "Z"]

    def close(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()
        os.close(self.master)


@pytest.fixture
def chat(tmp_path: Path) -> Iterator[Any]:
    started: list[PtyChat] = []

    def start(*args: str, env: dict[str, str] | None = None) -> PtyChat:
        session = PtyChat(*args, cwd=tmp_path, env=env)
        started.append(session)
        return session

    yield start
    for session in started:
        session.close()


def scripted_agent(tmp_path: Path, *turns: list[dict[str, Any]], flags: str = "") -> str:
    """An `--agent` command line: acp-server playing `turns` (the n-th prompt plays turn n; the last repeats)."""
    script = tmp_path.parent / f"{tmp_path.name}-script.json"
    script.write_bytes(orjson.dumps({"turns": list(turns)}))
    return f"{sys.executable} -m acp_server --model scripted:{script} --no-store {flags}".strip()


def gone(pids: list[int], timeout: float = scaled(3.0)) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        alive = [pid for pid, _, _, state, _ in processes() if pid in pids and state != "Z"]
        if not alive:
            return True
        time.sleep(0.05)
    return False


# --- one-shot ---


def test_one_shot_question_prints_the_answer_and_exits_zero(chat: Any) -> None:
    session = chat("hello from the terminal")  # the default agent: acp-server with the offline echo model
    assert session.wait() == 0
    assert "hello from the terminal" in session.text
    assert ">" not in session.text  # no interactive prompt in one-shot use


def piped_chat(tmp_path: Path, *args: str, stdin: bytes) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        server_command("chat", *args),
        input=stdin,
        capture_output=True,
        cwd=tmp_path,
        env={**os.environ, **isolated_env()},
        timeout=scaled(30),
        check=False,
    )


def test_one_shot_reads_the_question_from_stdin_when_it_is_not_a_terminal(tmp_path: Path) -> None:
    result = piped_chat(tmp_path, stdin=b"a question from a pipe\n")
    assert result.returncode == 0, result.stderr
    assert result.stdout.decode().strip() == "a question from a pipe"  # no colours and nothing else on a pipe


def test_a_permission_asked_when_nobody_can_answer_is_rejected(tmp_path: Path) -> None:
    agent = scripted_agent(tmp_path, [{"tool": "write_file", "args": {"path": "f.txt", "content": "x\n"}}])
    result = piped_chat(tmp_path, "--agent", agent, stdin=b"write it\n")
    assert result.returncode == 0, result.stderr
    assert "→ Reject" in result.stdout.decode()
    assert "failed" in result.stdout.decode()
    assert not (tmp_path / "f.txt").exists()


def test_a_one_shot_turn_cancelled_with_ctrl_c_exits_130(chat: Any, tmp_path: Path) -> None:
    session = chat("--agent", scripted_agent(tmp_path, [{"say": "slow"}, {"sleep": 30}]), "go")
    session.expect("slow")
    session.send(CTRL_C)
    session.expect("cancelling…")
    session.expect("cancelled")
    assert session.wait() == 130


def test_one_shot_that_ends_other_than_end_turn_says_so_and_exits_non_zero(chat: Any, tmp_path: Path) -> None:
    session = chat("--agent", scripted_agent(tmp_path, [{"say": "I will not"}, {"stop": "refusal"}]), "do it")
    assert session.wait() == 1
    session.expect("I will not")
    session.expect("stopped: refusal")


# --- interactive ---


def test_interactive_chat_runs_two_turns_and_quits(chat: Any, tmp_path: Path) -> None:
    agent = scripted_agent(tmp_path, [{"say": "first answer"}], [{"say": "second answer"}])
    session = chat("--agent", agent)
    session.expect("> ")
    session.type_line("one")
    session.expect("first answer")
    session.expect("> ")
    session.type_line("two")
    session.expect("second answer")
    session.expect("> ")
    session.type_line("/quit")
    assert session.wait() == 0


def test_ctrl_d_at_the_prompt_exits_and_stops_the_agent(chat: Any) -> None:
    session = chat()
    session.expect("> ")
    session.type_line("echo me")
    session.expect("echo me", timeout=scaled(10))  # the terminal's echo of the typed line
    session.expect("echo me")  # the echo model's answer
    session.expect("> ")
    agents = session.agents()
    assert agents
    session.send(CTRL_D)
    assert session.wait() == 0
    assert gone(agents)


def test_ctrl_c_at_the_idle_prompt_exits(chat: Any) -> None:
    session = chat()
    session.expect("> ")
    agents = session.agents()
    session.send(CTRL_C)
    assert session.wait() == 130
    assert gone(agents)


def test_ctrl_c_during_a_turn_shows_cancelling_at_once_cancels_and_the_next_prompt_works(
    chat: Any, tmp_path: Path
) -> None:
    agent = scripted_agent(
        tmp_path, [{"say": "working on it"}, {"sleep": 30}, {"say": "never shown"}], [{"say": "back again"}]
    )
    session = chat("--agent", agent)
    session.expect("> ")
    session.type_line("long one")
    session.expect("working on it")
    pressed = session.send(CTRL_C)
    shown = session.expect("cancelling…")
    assert shown - pressed < T_ACK  # at once: the turn itself sleeps 30 s
    session.expect("cancelled")
    session.expect("> ")
    assert "never shown" not in session.text
    session.type_line("again")
    session.expect("back again")
    session.expect("> ")
    session.type_line("/quit")
    assert session.wait() == 0


def test_a_second_ctrl_c_while_cancelling_exits_at_once_and_stops_the_agent(chat: Any, tmp_path: Path) -> None:
    # test_stubborn ignores cancellation, so the agent answers `cancelled` only at its 10 s cleanup deadline.
    agent = scripted_agent(
        tmp_path,
        [{"say": "stubborn"}, {"tool": "test_stubborn", "args": {"s": 30}}],
        flags=f"--test-mode --cleanup-deadline {LONG_GRACE:g}",
    )
    session = chat("--agent", agent, "go")
    session.expect("stubborn")
    session.expect("test_stubborn in progress")  # the tool call is running
    agents = session.agents()
    session.send(CTRL_C)
    session.expect("cancelling…")
    pressed = session.send(CTRL_C)
    assert session.wait(timeout=scaled(5)) == 130
    assert time.monotonic() - pressed < scaled(2.5)  # close stdin, 0.2 s, SIGTERM: nowhere near LONG_GRACE
    assert "cancelled" not in session.text.split("cancelling…")[1]
    assert gone(agents)


# --- tool calls, permissions, diffs, plans ---


def test_a_permission_question_is_answered_with_a_key_and_the_command_runs(chat: Any, tmp_path: Path) -> None:
    agent = scripted_agent(tmp_path, [{"tool": "run_command", "args": {"command": "echo ran-it"}}, {"say": "done"}])
    session = chat("--agent", agent, "run it")
    session.expect("Permission: echo ran-it")
    session.expect("1. Allow")
    session.expect("choose 1-4: ")
    session.send(b"1" + ENTER)
    session.expect("ran-it")
    session.expect("completed")
    session.expect("done")
    assert session.wait() == 0


def test_a_rejected_permission_fails_the_tool_call(chat: Any, tmp_path: Path) -> None:
    agent = scripted_agent(tmp_path, [{"tool": "write_file", "args": {"path": "f.txt", "content": "x\n"}}])
    session = chat("--agent", agent, "write it")
    session.expect("choose 1-4: ")
    session.send(b"n" + ENTER)  # the shortcut for "reject once"
    session.expect("→ Reject")
    session.expect("failed")
    assert session.wait() == 0
    assert not (tmp_path / "f.txt").exists()


def test_ctrl_c_while_a_permission_question_is_open_answers_it_cancelled(chat: Any, tmp_path: Path) -> None:
    agent = scripted_agent(tmp_path, [{"tool": "write_file", "args": {"path": "f.txt", "content": "x\n"}}])
    session = chat("--agent", agent)
    session.expect("> ")
    session.type_line("write it")
    session.expect("choose 1-4: ")
    session.send(CTRL_C)
    session.expect("cancelling…")
    session.expect("(question withdrawn)")
    session.expect("cancelled")
    session.expect("> ")
    session.type_line("/quit")
    assert session.wait() == 0
    assert not (tmp_path / "f.txt").exists()


def test_ctrl_c_at_an_open_question_starts_cancelling_on_a_line_of_its_own(chat: Any, tmp_path: Path) -> None:
    agent = scripted_agent(tmp_path, [{"tool": "write_file", "args": {"path": "f.txt", "content": "x\n"}}])
    session = chat("--agent", agent)
    session.expect("> ")
    session.type_line("write it")
    session.expect("choose 1-4: ")
    session.send(CTRL_C)  # the terminal echoes ^C on the question's line; the person never pressed Enter
    session.expect("(question withdrawn)")
    session.expect("> ")
    session.type_line("/quit")
    assert session.wait() == 0
    lines = session.text.splitlines()
    [asked] = [line for line in lines if "choose 1-4: " in line]
    assert "cancelling" not in asked, lines
    assert "cancelling…" in lines and "  (question withdrawn)" in lines, lines


def test_an_edit_is_shown_as_a_unified_diff(chat: Any, tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("alpha\nbeta\ngamma\n")
    agent = scripted_agent(
        tmp_path,
        [{"tool": "edit_file", "args": {"path": "notes.txt", "old_text": "beta", "new_text": "BETA"}}],
        flags="--permission-mode bypass",
    )
    session = chat("--agent", agent, "edit it")
    assert session.wait() == 0
    path = str((tmp_path / "notes.txt").resolve())
    for line in (f"--- {path}", f"+++ {path}", "@@ -1,3 +1,3 @@", " alpha", "-beta", "+BETA", " gamma"):
        session.expect(line)
    assert session.text.count("-beta") == 1  # shown once, though the call carries it when pending and completed
    assert (tmp_path / "notes.txt").read_text() == "alpha\nBETA\ngamma\n"


def test_a_plan_is_shown_as_a_checklist_and_thoughts_are_dimmed(chat: Any, tmp_path: Path) -> None:
    entries = [
        {"content": "read the code", "status": "completed", "priority": "high"},
        {"content": "write the fix", "status": "in_progress", "priority": "high"},
        {"content": "run the tests", "status": "pending", "priority": "medium"},
    ]
    agent = scripted_agent(tmp_path, [{"think": "pondering"}, {"tool": "update_plan", "args": {"entries": entries}}])
    session = chat("--agent", agent, "plan it", env={"NO_COLOR": ""})
    assert session.wait() == 0
    session.expect("Plan:")
    session.expect("[x] read the code")
    session.expect("[>] write the fix")
    session.expect("[ ] run the tests")
    assert b"\x1b[2mpondering\x1b[0m" in session.raw  # dim


# --- either protocol version: v2 by default, v1 when the agent answers 1 ---

# The agent's `--protocol`: 2 (acp-server's default, so the chat speaks v2) or 1 (it answers 1, the chat falls back).
PROTOCOLS = [pytest.param(2, id="v2"), pytest.param(1, id="v1-fallback")]


def spoken(recording: Path) -> list[dict[str, Any]]:
    """What the agent wrote, from its `--record` transcript."""
    lines = [orjson.loads(line) for line in recording.read_bytes().splitlines()]
    return [line["msg"] for line in lines if line.get("dir") == "out" and "msg" in line]


def heard(recording: Path) -> list[dict[str, Any]]:
    """What the chat wrote to the agent, from its `--record` transcript."""
    lines = [orjson.loads(line) for line in recording.read_bytes().splitlines()]
    return [line["msg"] for line in lines if line.get("dir") == "in" and "msg" in line]


def negotiated(recording: Path) -> Any:
    [answer] = [m for m in spoken(recording) if m.get("id") == 1 and "result" in m]  # the chat's first request
    return answer["result"]["protocolVersion"]


def idles(recording: Path) -> list[Any]:
    updates = [m["params"]["update"] for m in spoken(recording) if m.get("method") == "session/update"]
    return [u.get("stopReason") for u in updates if u.get("sessionUpdate") == "state_update" and u["state"] == "idle"]


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_chat_streams_a_reply_shows_a_tool_call_and_answers_a_permission_on_either_version(
    chat: Any, tmp_path: Path, protocol: int
) -> None:
    recording = tmp_path.parent / f"{tmp_path.name}-agent.jsonl"
    steps: list[dict[str, Any]] = [
        {"say": "let me check"},
        {"tool": "run_command", "args": {"command": "echo ran-it"}},
        {"say": "all done"},
    ]
    agent = scripted_agent(tmp_path, steps, flags=f"--protocol {protocol} --record {recording}")
    session = chat("--agent", agent, "run it")
    session.expect("let me check")
    session.expect("echo ran-it (execute) pending")
    session.expect("Permission: echo ran-it")
    session.expect("1. Allow")
    session.expect("choose 1-4: ")
    session.send(b"1" + ENTER)
    session.expect("→ Allow")
    session.expect("echo ran-it (execute) in progress")
    session.expect("echo ran-it (execute) completed")
    session.expect("all done")
    assert session.wait() == 0
    # The command's output, indented under its call: v1's completed update carries it, v2's terminal (its bytes,
    # shown when it exits) comes just before the call completes.
    assert "\n    ran-it\n" in session.text.split("→ Allow")[1]
    assert negotiated(recording) == protocol
    assert idles(recording) == (["end_turn"] if protocol == 2 else [])  # v2's end of a turn; v1 has none


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_ctrl_c_cancels_a_streaming_turn_and_the_next_prompt_works_on_either_version(
    chat: Any, tmp_path: Path, protocol: int
) -> None:
    recording = tmp_path.parent / f"{tmp_path.name}-agent.jsonl"
    agent = scripted_agent(
        tmp_path,
        [{"say": "working on it"}, {"sleep": 30}, {"say": "never shown"}],
        [{"say": "back again"}],
        flags=f"--protocol {protocol} --record {recording}",
    )
    session = chat("--agent", agent)
    session.expect("> ")
    session.type_line("long one")
    session.expect("working on it")  # streamed while the turn still runs (it sleeps 30 s next)
    session.send(CTRL_C)
    session.expect("cancelling…")
    session.expect("cancelled")
    session.expect("> ")
    session.type_line("again")
    session.expect("back again")
    session.expect("> ")
    session.type_line("/quit")
    assert session.wait() == 0
    assert "never shown" not in session.text
    assert negotiated(recording) == protocol
    assert idles(recording) == (["cancelled", "end_turn"] if protocol == 2 else [])


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_a_failed_turn_is_reported_as_an_error_on_either_version(chat: Any, tmp_path: Path, protocol: int) -> None:
    # v1 answers the prompt with an error; v2 answered it on insertion and ends the work `idle` with `error`.
    agent = scripted_agent(
        tmp_path, [{"say": "trying"}, {"fail": "the endpoint fell over"}], flags=f"--protocol {protocol}"
    )
    session = chat("--agent", agent, "go")
    assert session.wait() == 1
    session.expect("trying")
    session.expect("error: The model failed: the endpoint fell over")


# The `ask_user` tool's question (tests/e2e/test_ask_user.py): a form on a client that advertised forms.
FORM_QUESTION: dict[str, Any] = {
    "question": "Which branch should I release from?",
    "fields": [
        {"name": "branch", "title": "Branch", "choices": ["main", "dev"]},
        {"name": "tag", "type": "boolean", "description": "also tag it", "required": False},
    ],
}


def test_on_v2_a_form_question_is_answered_a_field_a_line_and_the_answer_reaches_the_agent(
    chat: Any, tmp_path: Path
) -> None:
    recording = tmp_path.parent / f"{tmp_path.name}-agent.jsonl"
    steps: list[dict[str, Any]] = [{"tool": "ask_user", "args": FORM_QUESTION}, {"say": "released"}]
    session = chat("--agent", scripted_agent(tmp_path, steps, flags=f"--record {recording}"), "release it")
    session.expect("? Which branch should I release from?")
    session.expect("Branch [1. main, 2. dev]: ")
    session.send(b"3" + ENTER)  # no such choice: asked again
    session.expect("Branch [1. main, 2. dev]: ")
    session.send(b"2" + ENTER)
    session.expect("tag (also tag it) [y/n; Enter to skip]: ")
    session.send(b"y" + ENTER)
    session.expect('The user answered: {"branch":"dev","tag":true}')  # the tool's result, under its call
    session.expect("released")
    assert session.wait() == 0
    [asked] = [m for m in spoken(recording) if m.get("method") == "elicitation/create"]
    assert asked["params"]["mode"] == "form"


def test_on_v2_ctrl_c_while_a_form_is_open_withdraws_it_and_cancels_the_turn(chat: Any, tmp_path: Path) -> None:
    recording = tmp_path.parent / f"{tmp_path.name}-agent.jsonl"
    steps: list[dict[str, Any]] = [{"tool": "ask_user", "args": FORM_QUESTION}, {"say": "never shown"}]
    session = chat("--agent", scripted_agent(tmp_path, steps, [{"say": "back again"}], flags=f"--record {recording}"))
    session.expect("> ")
    session.type_line("release it")
    session.expect("Branch [1. main, 2. dev]: ")
    session.send(CTRL_C)
    session.expect("cancelling…")
    session.expect("(question withdrawn)")
    session.expect("cancelled")
    session.expect("> ")
    session.type_line("again")
    session.expect("back again")
    session.expect("> ")
    session.type_line("/quit")
    assert session.wait() == 0
    assert "never shown" not in session.text
    [asked] = [m for m in spoken(recording) if m.get("method") == "elicitation/create"]
    [answered] = [m for m in heard(recording) if m.get("id") == asked["id"] and "method" not in m]
    assert answered == {"jsonrpc": "2.0", "id": asked["id"], "result": {"action": "cancel"}}


def test_on_v1_no_forms_are_offered_and_the_question_comes_in_the_reply(chat: Any, tmp_path: Path) -> None:
    recording = tmp_path.parent / f"{tmp_path.name}-agent.jsonl"
    steps: list[dict[str, Any]] = [{"tool": "ask_user", "args": FORM_QUESTION}]
    session = chat("--agent", scripted_agent(tmp_path, steps, flags=f"--protocol 1 --record {recording}"), "release")
    assert session.wait() == 0
    session.expect("\nWhich branch should I release from?\n- Branch (one of: main, dev)")  # the reply's text
    assert "Branch [" not in session.text
    assert not [m for m in spoken(recording) if m.get("method") == "elicitation/create"]


# --- failures ---


def test_an_agent_that_cannot_start_is_reported_plainly(chat: Any) -> None:
    session = chat("--agent", "/nonexistent/agent --flag", "hi")
    assert session.wait() == 2
    session.expect("cannot start the agent `/nonexistent/agent --flag`: No such file or directory")


def test_an_agent_that_exits_at_start_is_reported_with_its_own_words(chat: Any) -> None:
    session = chat("--model", "no-such-model", "hi")
    assert session.wait() == 2
    session.expect("the agent exited before the session started (exit status 2)")
    session.expect("unknown model 'no-such-model'")


def test_an_agent_that_never_answers_is_given_up_on_at_the_startup_timeout(chat: Any) -> None:
    started = time.monotonic()
    session = chat("--agent", "sh -c 'cat >/dev/null'", "--startup-timeout", "0.5", "hi")  # reads, never answers
    assert session.wait() == 2
    session.expect("the agent did not open a session within 0.5 s")
    assert time.monotonic() - started < scaled(5)


def test_an_agent_that_dies_mid_turn_is_reported(chat: Any, tmp_path: Path) -> None:
    agent = scripted_agent(tmp_path, [{"say": "about to go"}, {"sleep": 30}])
    session = chat("--agent", agent, "go")
    session.expect("about to go")
    (agent_pid,) = session.agents()
    os.kill(agent_pid, signal.SIGKILL)
    assert session.wait() == 2
    session.expect("the agent stopped unexpectedly (killed by signal 9)")
