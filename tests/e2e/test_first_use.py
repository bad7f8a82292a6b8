"""What a person meets first, end to end: bare `--model scripted` plays the built-in demo (and `doctor` agrees), a
bare `acp-server` in a terminal says what it is, `chat` takes the server's flags, and the README and `docs/` point
only at files in the repository."""

from __future__ import annotations

import os
import pty
import re
import select
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import StartServer
from tests.e2e.test_doctor import doctor
from tests.support.harness import isolated_env, scaled, server_command

REPO = Path(__file__).resolve().parents[2]


async def test_bare_scripted_model_plays_the_built_in_demo_with_text_a_plan_and_a_tool_call(
    start_server: StartServer, tmp_path: Path
) -> None:
    (tmp_path / "notes.txt").write_text("hello\n")
    server = await start_server("--model", "scripted")
    await server.initialize()
    session = await server.new_session(str(tmp_path))
    prompt = {"sessionId": session, "prompt": [{"type": "text", "text": "show me"}]}
    assert (await server.call("session/prompt", prompt))["result"] == {"stopReason": "end_turn"}
    shown = [
        "list" if u.get("kind") == "search" else u["sessionUpdate"]
        for u in server.updates(session)
        if u["sessionUpdate"] in ("agent_thought_chunk", "agent_message_chunk", "plan")
        or (u["sessionUpdate"] == "tool_call" and u.get("kind") == "search")
    ]
    # A thought, text in several chunks, a plan, the listing, the final plan and the closing text.
    assert shown.index("agent_thought_chunk") < shown.index("agent_message_chunk") < shown.index("plan")
    assert shown.index("plan") < shown.index("list") < len(shown) - 1 - shown[::-1].index("plan")
    assert shown[-1] == "agent_message_chunk" and len(server.texts(session)) >= 3
    listing = [u for u in server.updates(session, "tool_call_update") if u.get("status") == "completed"]
    assert any("notes.txt" in str(u.get("content")) for u in listing), listing
    assert [e["status"] for e in server.updates(session, "plan")[-1]["entries"]] == ["completed"] * 3
    # The second prompt plays the demo's second turn, and so does every later one: the same answer each time.
    again = [dict(prompt), dict(prompt)]
    answers = []
    for request in again:
        before = len(server.texts(session))
        assert (await server.call("session/prompt", request))["result"] == {"stopReason": "end_turn"}
        answers.append("".join(server.texts(session)[before:]))
    assert answers[0] == answers[1] and "built-in demo" in answers[0]


def test_doctor_says_bare_scripted_plays_the_built_in_demo() -> None:
    report = doctor("--model", "scripted")
    assert report.code == 0, report.text
    assert "built-in demo" in report.line("OK   model:")


def test_a_bare_server_in_a_terminal_says_on_stderr_what_it_is_and_how_to_chat() -> None:
    controller, terminal = pty.openpty()
    process = subprocess.Popen(
        server_command(),
        stdin=terminal,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={**os.environ, **isolated_env()},
        start_new_session=True,
    )
    os.close(terminal)
    try:
        assert process.stderr is not None
        said = b""
        deadline = time.monotonic() + scaled(10)
        while b"acp-server chat" not in said and time.monotonic() < deadline:
            ready, _, _ = select.select([process.stderr], [], [], 0.1)
            if ready:
                said += os.read(process.stderr.fileno(), 4096)
        text = said.decode()
        assert "Agent Client Protocol" in text and "stdin/stdout" in text and "acp-server chat" in text, text
        # It still serves whoever types (or pastes) a message; Ctrl-D ends the input.
        os.write(controller, b'{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":1}}\n\x04')
        out, _ = process.communicate(timeout=scaled(20))
        assert process.returncode == 0
        lines = out.splitlines()
        assert len(lines) == 1 and b'"id":1' in lines[0] and b'"result"' in lines[0], "stdout holds the protocol only"
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        os.close(controller)


def test_a_server_whose_stdin_is_not_a_terminal_says_nothing_on_stderr() -> None:
    result = subprocess.run(
        server_command(),
        input=b"",
        capture_output=True,
        env={**os.environ, **isolated_env()},
        timeout=scaled(20),
        check=False,
    )
    assert (result.returncode, result.stdout, result.stderr) == (0, b"", b"")


def chat(tmp_path: Path, *args: str, stdin: bytes = b"") -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        server_command("chat", *args),
        input=stdin,
        capture_output=True,
        cwd=tmp_path,
        env={**os.environ, **isolated_env(), "NO_COLOR": "1"},
        timeout=scaled(30),
        check=False,
    )


def test_chat_passes_the_server_flags_it_takes_to_the_built_in_agent(tmp_path: Path) -> None:
    script = tmp_path / "write.json"
    script.write_text('[{"tool": "write_file", "args": {"path": "f.txt", "content": "x"}}, {"say": "tried"}]')
    state = tmp_path / "state"
    # read_only refuses the edit without asking; the sessions go to the directory given.
    result = chat(
        tmp_path,
        "--model",
        f"scripted:{script}",
        "--permission-mode",
        "read_only",
        "--state-dir",
        str(state),
        "write it",
    )
    assert result.returncode == 0, result.stderr
    shown = result.stdout.decode()
    assert "failed" in shown and "tried" in shown and "Reject" not in shown, shown
    assert not (tmp_path / "f.txt").exists()
    assert (state / "sessions.sqlite3").is_file()
    # The same prompt in the default mode asks (and, with nobody to answer, is rejected): the flag made the difference.
    asked = chat(tmp_path, "--model", f"scripted:{script}", "--no-store", "write it")
    assert asked.returncode == 0 and "→ Reject" in asked.stdout.decode(), asked.stdout


def test_chat_refuses_a_bad_server_flag_value_saying_why_and_a_server_flag_with_another_agent(tmp_path: Path) -> None:
    bad = chat(tmp_path, "--prompt-policy", "whenever", "hello")
    assert bad.returncode == 2
    assert "--prompt-policy" in bad.stderr.decode() and "whenever" in bad.stderr.decode()
    other = chat(tmp_path, "--agent", f"{sys.executable} -m acp_server", "--permission-mode", "bypass", "hello")
    assert other.returncode == 2 and "--permission-mode" in other.stderr.decode()


def test_the_user_guide_names_the_instruction_files_the_server_reads() -> None:
    from acp_server.runtime.system_prompt import INSTRUCTION_FILES, MAX_INSTRUCTION_CHARS

    guide = (REPO / "docs" / "guide.md").read_text()  # moved there from the README (issue 22, item 7)
    for name in INSTRUCTION_FILES:
        assert f"`{name}`" in guide
    assert f"{MAX_INSTRUCTION_CHARS:,}" in guide


@pytest.mark.parametrize(
    "document", ["README.md", *sorted(path.relative_to(REPO).as_posix() for path in (REPO / "docs").glob("*.md"))]
)
def test_the_documents_point_only_at_files_inside_the_repository(document: str) -> None:
    path = REPO / document
    text = path.read_text()
    targets = re.findall(r"\]\(([^)#\s]+)", text) + re.findall(r"`(\.\.?/[^`\s]+)`", text)
    assert "../shared" not in text and "/work/" not in text
    for target in targets:
        if re.match(r"[a-z]+:", target):
            continue  # a web address
        resolved = (path.parent / target).resolve()
        assert resolved.is_relative_to(REPO) and resolved.exists(), f"{document} points at {target}"


def test_every_flag_chat_passes_on_is_one_the_server_takes(tmp_path: Path) -> None:
    from acp_server.chat.arguments import SERVER_FLAGS, SERVER_SWITCHES
    from acp_server.settings.command_line import load

    samples = {"--model": "echo", "--base-url": "http://localhost:1/v1", "--permission-mode": "read_only"}
    samples |= {"--prompt-policy": "queue", "--sandbox": "off", "--log-level": "info", "--state-dir": str(tmp_path)}
    samples |= {"--log-file": str(tmp_path / "log"), "--max-turn-requests": "3"}
    samples |= {"--cleanup-deadline": "1", "--mcp-start-wait": "1", "--protocol": "1"}
    assert set(samples) == {flag for flag, _, _ in SERVER_FLAGS}
    argv = [part for flag, value in samples.items() for part in (flag, value)]
    argv += [flag for flag, _ in SERVER_SWITCHES]
    config = load(argv, env={"ACP_SERVER_CONFIG": str(tmp_path / "absent.toml")}).config  # a flag it lacks exits
    assert (config.permission_mode, config.prompt_policy, config.store) == ("read_only", "queue", False)
    assert config.protocol == 1
