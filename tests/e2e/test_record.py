"""`--record FILE`: what a real server writes into its transcript, what it must never write, and that the file can
be replayed.

The server is driven over real stdio by `RawClient`, which keeps its own log of every line in both directions; the
recording must say the same, in the transcript format, with secrets gone. The round trip replays a recording
against a fresh server with `acp-server replay`, in another directory, and must match.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import pytest

from acp_server.errors import TranscriptError
from acp_server.jsonrpc.transport import Oversized
from acp_server.transcripts.format import Line, load_transcript
from acp_server.transcripts.record import FLUSH_SECONDS, Recorder
from acp_server.transcripts.secrets import REDACTED, Redactor, provider_secrets
from tests.conftest import StartServer
from tests.support.harness import DEFAULT_ARGS, T_ACK, RawClient, is_response, isolated_env, scaled, server_command
from tests.support.transcripts import run_replay_command


def _wire(client: RawClient, direction: str) -> list[Any]:
    """What the client saw go one way: messages, or the text of a line that is not a JSON object."""
    return [e.msg if isinstance(e.msg, dict) else e.raw.decode() for e in client.log if e.dir == direction]


def _recorded(lines: list[Line], direction: str) -> list[Any]:
    return [line.msg if line.raw is None else line.raw for line in lines if line.dir == direction and not line.eof]


async def test_record_writes_every_line_in_and_out_as_a_transcript(start_server: StartServer, tmp_path: Path) -> None:
    path = tmp_path / "session.jsonl"
    client = await start_server("--model", "echo", "--record", str(path))
    await client.initialize()
    session = await client.new_session(str(tmp_path))
    await client.write_raw(b"{not json\n")
    await client.wait_for(lambda m: m.get("error", {}).get("code") == -32700)
    reply = await client.call("session/prompt", {"sessionId": session, "prompt": [{"type": "text", "text": "hi"}]})
    assert reply["result"]["stopReason"] == "end_turn"
    code, _ = await client.close()
    assert code == 0

    transcript = load_transcript(path)
    lines = transcript.lines
    assert transcript.args is None, "a recording is lines only: the command comes from whoever replays it"
    assert _recorded(lines, "in") == _wire(client, "in")
    assert _recorded(lines, "out") == _wire(client, "out")
    assert Line("in", raw="{not json", t=next(line.t for line in lines if line.raw)) in lines
    assert lines[-1].dir == "out" or lines[-1].eof
    assert [line for line in lines if line.eof] == [line for line in lines if line.dir == "in"][-1:]
    stamps = [line.t for line in lines if line.t is not None]
    assert len(stamps) == len(lines), "every line has its t"
    assert stamps[0] == 0.0
    assert stamps == sorted(stamps), "t is seconds since the first line, in file order"


SECRETS = {
    "OPENAI_API_KEY": "sk-openai-0123456789abcdef",
    "ANTHROPIC_API_KEY": "sk-ant-0123456789abcdef",
    "ANTHROPIC_AUTH_TOKEN": "ant-token-0123456789",
    "GITHUB_TOKEN": "ghp_fromtheenvironment0123",
}
FILE_KEY = "sk-from-the-config-file-42"
MCP_TOKEN = "mcp-env-secret-value-7"
BEARER = "Bearer header-secret-value-9"


async def test_record_never_holds_api_keys_or_auth_headers(start_server: StartServer, tmp_path: Path) -> None:
    config = tmp_path / "config.toml"
    config.write_text(f'[providers.openai]\napi_key = "{FILE_KEY}"\n')
    path = tmp_path / "secret.jsonl"
    client = await start_server(*DEFAULT_ARGS, "--record", str(path), env={**SECRETS, "ACP_SERVER_CONFIG": str(config)})
    await client.initialize()
    mcp_servers = [
        {
            "name": "tools",
            "command": "/nonexistent/mcp-server",
            "args": [],
            "env": [{"name": "SERVICE_TOKEN", "value": MCP_TOKEN}, {"name": "LOG_LEVEL", "value": "verbose-logging"}],
        },
        {
            "type": "http",
            "name": "remote",
            "url": "http://127.0.0.1:9/mcp",
            "headers": [{"name": "Authorization", "value": BEARER}, {"name": "Accept", "value": "text/event-stream"}],
        },
    ]
    await client.call("session/new", {"cwd": str(tmp_path), "mcpServers": mcp_servers})
    session = await client.new_session(str(tmp_path))
    # Every secret goes out in the prompt and comes back whole in one chunk. (The first six words make the session's
    # title: filler, since a title cuts a secret short, which no redaction by value can recognise.)
    leaked = " ".join([*SECRETS.values(), FILE_KEY, MCP_TOKEN, BEARER])
    params = {
        "sessionId": session,
        "prompt": [{"type": "text", "text": f"one two three four five six {leaked}"}],
        "_meta": {"scripted": [{"say": leaked}]},
    }
    reply = await client.call("session/prompt", params)
    assert reply["result"]["stopReason"] == "end_turn"
    said = "".join(client.texts(session))
    # The keys the server itself holds never reach the wire at all (runtime/text_guard.py); the others come back
    # whole, so the recording's own redaction is exercised on outgoing lines too.
    held = [SECRETS["OPENAI_API_KEY"], SECRETS["ANTHROPIC_API_KEY"], SECRETS["ANTHROPIC_AUTH_TOKEN"], FILE_KEY]
    assert not [secret for secret in held if secret in said], "a key the server holds reached the wire"
    assert all(secret in said for secret in (SECRETS["GITHUB_TOKEN"], MCP_TOKEN, BEARER)), "the secrets came back"
    await client.write_raw(
        f'{{"broken": "{SECRETS["OPENAI_API_KEY"]}", "name": "API_KEY", "value": "rawvalue1"\n'.encode()
    )
    await client.wait_for(lambda m: m.get("error", {}).get("code") == -32700)
    await client.close()

    text = path.read_text()
    for secret in [*SECRETS.values(), FILE_KEY, MCP_TOKEN, BEARER, "header-secret-value-9", "rawvalue1"]:
        assert secret not in text, f"{secret} is in the recording"
    assert text.count(REDACTED) >= 10
    assert "verbose-logging" in text and "text/event-stream" in text, "values of harmless names are kept"
    load_transcript(path)  # still a valid transcript


def test_redactor_removes_secret_values_inside_any_string_without_breaking_json() -> None:
    redactor = Redactor(["s3cr3t-value", 'quo"ted-secret'])
    line = orjson.dumps({"a": ["x s3cr3t-value y", {"s3cr3t-value": 'has quo"ted-secret'}], "n": 12345})
    assert redactor.holds_secret(line)
    cleaned = orjson.dumps(redactor.message(orjson.loads(line))).decode()
    assert "s3cr3t" not in cleaned and "quo" not in cleaned
    assert orjson.loads(cleaned)["n"] == 12345
    assert not redactor.holds_secret(b'{"jsonrpc":"2.0","method":"session/update","params":{}}')
    assert Redactor(["abc"]).message("abc abc") == "abc abc", "too short to look for: it would match ordinary text"


def test_recorder_learns_a_key_added_to_the_config_file_before_authenticate(tmp_path: Path) -> None:
    config, path = tmp_path / "config.toml", tmp_path / "auth.jsonl"
    env = {"ACP_SERVER_CONFIG": str(config)}
    recorder = Recorder(path.open("wb"), Redactor(provider_secrets(env)), env=env)
    config.write_text('[providers.anthropic]\napi_key = "sk-ant-added-later-0001"\n')
    recorder.record_input(b'{"jsonrpc":"2.0","id":3,"method":"authenticate","params":{"methodId":"anthropic"}}')
    recorder.record_output(b'{"jsonrpc":"2.0","id":3,"result":{"_meta":{"echo":"sk-ant-added-later-0001"}}}\n')
    recorder.close()
    text = path.read_text()
    assert "added-later" not in text and REDACTED in text


def test_recorder_keeps_only_the_size_of_an_oversized_line(tmp_path: Path) -> None:
    path = tmp_path / "big.jsonl"
    ticks = iter([10.0, 10.5, 11.25])
    recorder = Recorder(path.open("wb"), Redactor(), clock=lambda: next(ticks))
    recorder.record_input(Oversized(70_000_000))
    recorder.record_output(b'{"jsonrpc":"2.0","id":null,"error":{"code":-32600,"message":"too long"}}\n')
    recorder.record_eof()
    recorder.close()
    assert path.stat().st_size < 300
    lines = load_transcript(path).lines
    assert lines[0] == Line("in", raw="", truncated=70_000_000, t=0.0)
    assert lines[0].wire_bytes() == b"x" * 70_000_000, "a replay sends a line just as long"
    assert lines[1].msg["error"]["code"] == -32600 and lines[1].t == 0.5
    assert lines[2] == Line("in", eof=True, t=1.25)


@pytest.mark.timeout(30)
async def test_record_is_complete_when_the_exit_watchdog_ends_the_process(
    start_server: StartServer, tmp_path: Path
) -> None:
    """Stdin EOF while a tool is stuck in a blocking call (a worker thread that no cancel stops, so the process
    cannot unwind): the server leaves through `os._exit` (no `finally` runs), and the transcript must still end
    with what the server wrote last."""
    path = tmp_path / "stubborn.jsonl"
    client = await start_server(*DEFAULT_ARGS, "--record", str(path))
    await client.initialize()
    session = await client.new_session()
    prompt = await client.prompt(session, [{"tool": "test_stubborn", "args": {"s": 10, "blocking": True}}])
    await client.probe("tool_started", sessionId=session)
    code, took = await client.close()
    assert code == 0 and took < 5
    assert "abandoned work still running at exit" in client.stderr_text, "the watchdog path was taken"
    lines = load_transcript(path).lines
    answer = next(line.msg for line in lines if line.dir == "out" and line.msg.get("id") == prompt)
    assert answer["result"]["stopReason"] == "cancelled"
    assert _recorded(lines, "out") == _wire(client, "out")


def _holds(path: Path, client: RawClient) -> bool:
    """Whether the file already holds, in order, every line the client has seen cross stdio so far."""
    expected = {direction: _wire(client, direction) for direction in ("in", "out")}
    try:
        lines = load_transcript(path).lines
    except TranscriptError:  # a line half-written by a flush in progress: look again
        return False
    return all(_recorded(lines, d)[: len(wanted)] == wanted for d, wanted in expected.items())


async def test_record_holds_every_line_within_the_flush_interval_while_the_server_runs(
    start_server: StartServer, tmp_path: Path
) -> None:
    """Durable while serving: nothing is waiting for the exit. The server is then killed with SIGKILL (no exit code
    runs at all), and the file still holds everything it held."""
    path = tmp_path / "live.jsonl"
    client = await start_server(*DEFAULT_ARGS, "--record", str(path))
    await client.initialize()
    session = await client.new_session(str(tmp_path))
    reply = await client.response(await client.prompt(session, [{"say": "durable"}]))
    assert reply["result"]["stopReason"] == "end_turn"
    deadline = time.monotonic() + FLUSH_SECONDS + T_ACK
    while not _holds(path, client):
        assert time.monotonic() < deadline, f"not in the file {FLUSH_SECONDS + T_ACK} s later: {path.read_bytes()!r}"
        await asyncio.sleep(0.02)
    assert client.process.returncode is None, "and the server is still serving"
    seen = {direction: _wire(client, direction) for direction in ("in", "out")}
    client.kill()
    await client.process.wait()
    lines = load_transcript(path).lines
    for direction, wanted in seen.items():
        assert _recorded(lines, direction)[: len(wanted)] == wanted


def test_recorder_flushes_a_lone_line_within_the_flush_interval(tmp_path: Path) -> None:
    """One line and then silence (an editor waiting for its user): the flusher writes it without another line or
    an exit to prompt it."""
    path = tmp_path / "lone.jsonl"
    recorder = Recorder(path.open("wb"), Redactor())
    try:
        recorder.record_input(b'{"jsonrpc":"2.0","id":1,"method":"initialize","params":{}}')
        deadline = time.monotonic() + FLUSH_SECONDS + T_ACK
        while path.stat().st_size == 0:
            assert time.monotonic() < deadline, "the line stayed in the buffer"
            time.sleep(0.01)
        assert load_transcript(path).lines[0].msg["method"] == "initialize"
    finally:
        recorder.close()


def test_recorder_close_flushes_everything_and_may_be_called_again_from_any_thread(tmp_path: Path) -> None:
    """`close` is what shutdown code calls (a signal handler's thread, or the normal end of serve_stdio, or both):
    everything recorded is in the file once it returns, a second close is harmless, later lines are dropped."""
    path = tmp_path / "closed.jsonl"
    recorder = Recorder(path.open("wb"), Redactor())
    for index in range(1000):
        recorder.record_output(b'{"jsonrpc":"2.0","method":"session/update","params":{"n":%d}}\n' % index)
    closer = threading.Thread(target=recorder.close)
    closer.start()
    closer.join(timeout=T_ACK)
    assert not closer.is_alive()
    lines = load_transcript(path).lines
    assert [line.msg["params"]["n"] for line in lines] == list(range(1000))
    recorder.close()
    recorder.flush()
    recorder.record_input(b'{"jsonrpc":"2.0","id":2,"method":"late","params":{}}')
    recorder.record_eof()
    assert len(load_transcript(path).lines) == 1000, "nothing is written after close"


def test_record_to_an_unwritable_path_fails_at_start(tmp_path: Path) -> None:
    result = subprocess.run(
        server_command("--record", str(tmp_path / "missing" / "dir" / "t.jsonl")),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        env={**os.environ, **isolated_env()},
        timeout=scaled(20),
        check=False,
    )
    assert result.returncode == 2
    assert result.stdout == b""
    assert b"cannot record to" in result.stderr


# --- the round trip: record a real session, replay it against a fresh server elsewhere ---


SCRIPT: list[dict[str, Any]] = [
    {"say": "reading"},
    {"tool": "read_file", "args": {"path": "notes.txt"}},
    {"tool": "write_file", "args": {"path": "out.txt", "content": "done"}},
    {"say": "written"},
]


async def _record_a_session(start_server: StartServer, workdir: Path, path: Path) -> None:
    client = await start_server(*DEFAULT_ARGS, "--record", str(path))
    await client.initialize({"fs": {"readTextFile": True, "writeTextFile": True}})
    session = await client.new_session(str(workdir))
    prompt = await client.prompt(session, SCRIPT)
    answers: dict[str, Callable[[dict[str, Any]], dict[str, Any]]] = {
        "fs/read_text_file": lambda params: {"content": "hello" if params["path"].endswith("notes.txt") else ""},
        "session/request_permission": lambda _: {"outcome": {"outcome": "selected", "optionId": "allow_once"}},
        "fs/write_text_file": lambda _: {},
    }
    asked: list[str] = []
    seen = 0
    deadline = time.monotonic() + scaled(10)
    while not any(is_response(m, prompt) for m in client.received[seen:]):  # answer the editor's side as it comes
        assert time.monotonic() < deadline, f"the turn did not end; asked so far: {asked}"
        arrived = client.received[seen:]
        seen += len(arrived)
        for message in arrived:
            if "method" in message and "id" in message:
                asked.append(message["method"])
                await client.send({"id": message["id"], "result": answers[message["method"]](message["params"])})
        await asyncio.sleep(0.01)
    assert {"fs/read_text_file", "session/request_permission", "fs/write_text_file"} <= set(asked)
    assert (await client.response(prompt))["result"]["stopReason"] == "end_turn"
    # The title comes after the first turn, in the background: let it arrive before the next line, as replay will.
    await client.wait_for(lambda m: m.get("params", {}).get("update", {}).get("sessionUpdate") == "session_info_update")
    await client.call("session/list", {})
    code, _ = await client.close()
    assert code == 0


@pytest.mark.timeout(60)
async def test_a_recorded_session_replays_against_a_fresh_server_in_another_directory(
    start_server: StartServer, tmp_path: Path
) -> None:
    recorded_dir, replay_dir = tmp_path / "recorded", tmp_path / "elsewhere"
    recorded_dir.mkdir()
    path = tmp_path / "session.jsonl"
    await _record_a_session(start_server, recorded_dir, path)
    text = path.read_text()
    assert str(recorded_dir / "notes.txt") in text and '"updatedAt"' in text
    shutil.rmtree(recorded_dir)  # the replay must not need it
    replay_dir.mkdir()

    result = run_replay_command(
        str(path), "--path", f"{recorded_dir}={replay_dir}", "--", *server_command(*DEFAULT_ARGS)
    )
    assert result.returncode == 0, result.stderr
    assert "match" in result.stderr and result.stdout == ""


V2_SCRIPT: list[dict[str, Any]] = [
    {"say": "running it"},
    # Two pieces of output a moment apart: the terminal's bytes come in chunks, split as the pipe was read.
    {"tool": "run_command", "args": {"command": "printf 'one\\n'; sleep 0.2; printf 'two\\n'"}},
    {"tool": "write_file", "args": {"path": "out.txt", "content": "done\n"}},
    {"tool": "ask_user", "args": {"question": "Tag it?", "fields": [{"name": "tag", "type": "boolean"}]}},
    {"say": "written"},
]


async def _record_a_v2_session(start_server: StartServer, workdir: Path, path: Path) -> None:
    """ACP v2: prompts answered on insertion, the v2 permission questions (a command subject, a tool call subject)
    and a form answered as they come, a terminal's output in base64 chunks, then a second turn cancelled at a
    gate."""
    client = await start_server(*DEFAULT_ARGS, "--record", str(path))
    await client.initialize_v2({"elicitation": {"form": {}}})
    session = await client.new_session_v2(str(workdir))
    await client.prompt(session, V2_SCRIPT)
    subjects: list[str] = []
    seen = 0
    deadline = time.monotonic() + scaled(10)
    while not client.states(session) or client.states(session)[-1]["state"] != "idle":
        assert time.monotonic() < deadline, f"the turn did not end; asked so far: {subjects}"
        arrived = client.received[seen:]
        seen += len(arrived)
        for message in arrived:
            if message.get("method") == "session/request_permission":
                subjects.append(message["params"]["subject"]["type"])
                allow = {"outcome": {"outcome": "selected", "optionId": "allow_once"}}
                await client.send({"id": message["id"], "result": allow})
            elif message.get("method") == "elicitation/create":
                subjects.append("form")
                await client.send({"id": message["id"], "result": {"action": "accept", "content": {"tag": True}}})
        await asyncio.sleep(0.01)
    assert subjects == ["command", "tool_call", "form"]
    assert client.states(session)[-1].get("stopReason") == "end_turn"
    assert (workdir / "out.txt").read_text() == "done\n"
    await client.wait_for(lambda m: m.get("params", {}).get("update", {}).get("sessionUpdate") == "session_info_update")
    await client.prompt(session, [{"say": "waiting"}, {"gate": "g"}])
    await client.probe("gate_reached", sessionId=session)
    await client.cancel(session)
    idle = await client.idle(session, nth=2)
    assert idle["params"]["update"]["stopReason"] == "cancelled"
    code, _ = await client.close()
    assert code == 0


@pytest.mark.timeout(60)
async def test_a_recorded_v2_session_with_questions_terminals_and_a_cancel_replays_in_another_directory(
    start_server: StartServer, tmp_path: Path
) -> None:
    recorded_dir, replay_dir = tmp_path / "recorded", tmp_path / "elsewhere"
    recorded_dir.mkdir()
    path = tmp_path / "v2.jsonl"
    await _record_a_v2_session(start_server, recorded_dir, path)
    kinds = [
        line.msg["params"]["update"]["sessionUpdate"]
        for line in load_transcript(path).lines
        if line.dir == "out" and line.msg and line.msg.get("method") == "session/update"
    ]
    assert {"user_message", "state_update", "terminal_update", "terminal_output_chunk", "tool_call_update"} <= set(
        kinds
    )
    shutil.rmtree(recorded_dir)
    replay_dir.mkdir()

    result = run_replay_command(
        str(path), "--path", f"{recorded_dir}={replay_dir}", "--", *server_command(*DEFAULT_ARGS)
    )
    assert result.returncode == 0, result.stderr
    assert "match" in result.stderr
    assert (replay_dir / "out.txt").read_text() == "done\n"


def test_python_module_entry_point_runs_the_replay_subcommand() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "acp_server", "replay", "--help"],
        capture_output=True,
        text=True,
        timeout=scaled(20),
        check=False,
    )
    assert result.returncode == 0
    assert "AGENT_CMD" in result.stdout
