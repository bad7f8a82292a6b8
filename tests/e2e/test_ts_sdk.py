"""The editor flows driven by a real third-party client: the official ACP TypeScript SDK (issue 12 item 6).

`tests/ts_client/flows.mjs` spawns acp-server through the SDK's client-side connection over stdio, runs one group of
flows and prints what it saw as JSON. The SDK is `@agentclientprotocol/sdk`, pinned at 2.4.0 by
`tests/ts_client/package-lock.json` and installed by `.ci/run` with `npm ci`; without `node` or that install these
tests skip and say how to install it. One Node process runs a whole group, so the suite pays one server start per
group. Every message the server wrote must pass the SDK's own zod schemas (its connection checks what it handles, the
script checks the responses) and the official JSON schema (tests/support/wire_schema.py, fed the same wire).

Each flow group runs over both transports the SDK has a client for here, the same script with a transport argument:
stdio (the script spawns the server) and WebSocket (`createWebSocketStream` with the pinned `ws`, against an
`acp-server serve` this file starts with a token file, the flows' directory as its workspace root, and stops with
SIGTERM, its drain, which must end it with status 0). Under CI=true a missing `node` or SDK install fails instead.
"""

from __future__ import annotations

import os
import re
import select
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import orjson
import pytest

from tests.support.harness import (
    DEFAULT_ARGS,
    STDERR_RED_FLAGS,
    T_START,
    T_WAIT,
    WEBSOCKET_TOKEN,
    isolated_env,
    scaled,
    server_command,
)
from tests.support.wire_schema import WireValidator

CLIENT_DIR = Path(__file__).resolve().parent.parent / "ts_client"
SDK_PACKAGE = CLIENT_DIR / "node_modules" / "@agentclientprotocol" / "sdk" / "package.json"
# What the SDK logs when a message fails its validation or its dispatch (core/jsonrpc.js).
SDK_COMPLAINTS = ("Invalid message", "Error handling notification", "Got response to unknown request")


def pinned_sdk_version() -> str:
    lock = orjson.loads((CLIENT_DIR / "package-lock.json").read_text())
    version = lock["packages"]["node_modules/@agentclientprotocol/sdk"]["version"]
    assert isinstance(version, str)
    return version


TRANSPORTS = ("stdio", "websocket")


def unavailable(why: str) -> None:
    """A missing Node or SDK install: a skip that says how to install it, a failure under CI (where `.ci/run` has
    installed both, so a missing one is a broken run, not a choice)."""
    if os.environ.get("CI") == "true":
        pytest.fail(f"the TypeScript SDK tests cannot run under CI: {why}")
    pytest.skip(why)


@contextmanager
def serving(cwd: str, env: dict[str, str]) -> Iterator[tuple[str, subprocess.Popen[bytes], list[bytes]]]:
    """`acp-server serve` on 127.0.0.1 (a free port) for the flows in `cwd`: its URL, its process, and its stderr
    (read to the end once it has stopped). Stopped with SIGTERM, its drain; killed only past the bound."""
    tokens = Path(cwd).parent / f"{Path(cwd).name}-tokens"
    tokens.write_text(f"editor {WEBSOCKET_TOKEN}\n")
    tokens.chmod(0o600)
    command = server_command(
        "serve", "--listen", "127.0.0.1:0", "--token-file", str(tokens), "--workspace-root", cwd, *DEFAULT_ARGS
    )
    process = subprocess.Popen(command, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stderr=subprocess.PIPE)
    assert process.stderr is not None
    stderr = [b""]
    try:
        deadline = time.monotonic() + T_START * 8
        while (found := re.search(rb"serving (ws://\S+)", stderr[0])) is None:
            assert time.monotonic() < deadline, f"serve did not listen: {stderr[0].decode(errors='replace')}"
            if select.select([process.stderr], [], [], 0.1)[0]:
                line = process.stderr.readline()
                assert line, f"serve ended before it listened: {stderr[0].decode(errors='replace')}"
                stderr[0] += line
        yield found.group(1).decode(), process, stderr
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
        try:
            stderr[0] += process.communicate(timeout=scaled(10))[1]
        except subprocess.TimeoutExpired:
            process.kill()
            stderr[0] += process.communicate()[1]
        tokens.unlink()


def node_with_sdk() -> str:
    """The `node` to run the flow scripts with, the pinned SDK installed beside them (`unavailable` otherwise)."""
    node = shutil.which("node")
    if node is None:
        unavailable("`node` is not on PATH: the TypeScript SDK tests need Node 20 (`.ci/run` has it)")
    if not SDK_PACKAGE.exists():
        unavailable(f"the TypeScript SDK is not installed: run `npm ci --prefix {CLIENT_DIR}` (`.ci/run` does)")
    assert node is not None
    installed = orjson.loads(SDK_PACKAGE.read_text())["version"]
    assert installed == pinned_sdk_version(), f"installed SDK {installed}, lockfile pins {pinned_sdk_version()}"
    return node


def run_stdio_script(
    script: str, group: str, server_args: Sequence[str], env: Mapping[str, str] = {}
) -> tuple[dict[str, Any], str]:
    """Run one group of a flow script of tests/ts_client (`script`) in Node against a fresh stdio server started with
    `server_args`, `env` added to the isolated environment; its JSON report and stderr."""
    node = node_with_sdk()
    full = {**os.environ, **isolated_env(), "TS_FLOW_STEP_TIMEOUT_MS": f"{T_WAIT * 1000:.0f}", **env}
    with tempfile.TemporaryDirectory(prefix="acp-ts-flows-") as scratch:
        command = [node, str(CLIENT_DIR / script), group, "--", *server_command(*server_args)]
        done = run_script(command, os.path.realpath(scratch), full)
    stderr = done.stderr.decode(errors="replace")
    return report_of(done, stderr), stderr


def run_flows(group: str, transport: str = "stdio") -> tuple[dict[str, Any], str]:
    """Run one flow group in Node against a fresh server over `transport`; its JSON report and the combined
    stderr (the script's and, over WebSocket, the server's)."""
    if transport == "stdio":
        return run_stdio_script("flows.mjs", group, DEFAULT_ARGS)
    node = node_with_sdk()
    env = {**os.environ, **isolated_env(), "TS_FLOW_STEP_TIMEOUT_MS": f"{T_WAIT * 1000:.0f}"}
    script = [node, str(CLIENT_DIR / "flows.mjs"), group]
    with tempfile.TemporaryDirectory(prefix="acp-ts-flows-") as scratch:
        cwd = os.path.realpath(scratch)  # the session's directory must lie inside the server's root once resolved
        with serving(cwd, env) as (url, server, server_stderr):
            done = run_script([*script, "--ws", url], cwd, {**env, "ACP_FLOWS_TOKEN": WEBSOCKET_TOKEN})
            report = report_of(done, done.stderr.decode(errors="replace"))
            assert report["exit"] is None
            server.send_signal(signal.SIGTERM)
            server.wait(timeout=scaled(10))
        stderr = done.stderr.decode(errors="replace") + server_stderr[0].decode(errors="replace")
        report["exit"] = {"code": server.returncode, "signal": None}  # the drain ends serve as EOF ends stdio
    return report, stderr


def run_script(command: list[str], cwd: str, env: dict[str, str]) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(command, cwd=cwd, env=env, capture_output=True, timeout=scaled(40), check=False)


def report_of(done: subprocess.CompletedProcess[bytes], stderr: str) -> dict[str, Any]:
    assert done.stdout, f"flows.mjs printed nothing (exit {done.returncode}); stderr:\n{stderr[-3000:]}"
    report = orjson.loads(done.stdout)
    assert isinstance(report, dict)
    assert "fatal" not in report, f"{report['fatal']}\n{report.get('data')}\nstderr:\n{stderr[-3000:]}"
    assert done.returncode == 0, stderr[-3000:]
    return report


def wire_problems(wire: list[dict[str, Any]]) -> list[str]:
    """The official JSON schema over the wire the SDK saw, in order (the same checks as every other e2e test)."""
    validator = WireValidator()
    for entry in wire:
        if entry["dir"] == "client":
            validator.client_sent(entry["message"])
        else:
            validator.server_wrote(orjson.dumps({"jsonrpc": "2.0", **entry["message"]}))
    return validator.violations


def assert_clean(report: dict[str, Any], stderr: str) -> None:
    assert report["schemaChecked"] > 0 and any(e["dir"] == "agent" for e in report["wire"]), "nothing was checked"
    assert report["schemaErrors"] == [], report["schemaErrors"]
    assert wire_problems(report["wire"]) == []
    for complaint in (*SDK_COMPLAINTS, *STDERR_RED_FLAGS):
        assert complaint not in stderr, stderr[-3000:]
    assert report["exit"] == {"code": 0, "signal": None}, "closing stdin (or a drain) ends the server with exit 0"


@pytest.mark.timeout(60)
@pytest.mark.parametrize("transport", TRANSPORTS)
def test_the_typescript_sdk_runs_the_v1_flows_and_accepts_every_message(transport: str) -> None:
    report, stderr = run_flows("v1", transport)
    assert_clean(report, stderr)

    init = report["initialize"]
    assert init["protocolVersion"] == 1
    assert init["agentInfo"]["name"] == "acp-server"
    assert init["agentCapabilities"]["loadSession"] is True
    assert {"list", "close"} <= set(init["agentCapabilities"]["sessionCapabilities"])
    session_id = report["newSession"]["sessionId"]
    assert isinstance(session_id, str) and session_id

    # A streamed prompt: one chunk per step, in order, then end_turn.
    assert report["streamed"] == {"stopReason": "end_turn", "texts": ["hello, ", "typescript ", "sdk"]}
    # session/cancel during a gate: cancelled with only what came before the gate; the next prompt is a clean turn.
    assert report["cancel"] == {
        "stopReason": "cancelled",
        "texts": ["before"],
        "nextStopReason": "end_turn",
        "nextTexts": ["ok"],
    }
    # The permission request reached the SDK's handler, and its answer reached the tool.
    permission = report["permission"]
    assert permission["stopReason"] == "end_turn"
    assert permission["requests"] == [{"sessionId": session_id, "optionIds": ["allow-once", "reject-once"]}]
    assert permission["toolResults"] == [{"outcome": {"outcome": "selected", "optionId": "allow-once"}}]
    assert permission["texts"] == ["granted"]

    # list shows the session, close closes it, load brings it back with its history replayed in order.
    assert [s["sessionId"] for s in report["list"]["sessions"]] == [session_id]
    assert report["close"] == {}
    assert "modes" in report["load"]
    assert report["loadReplay"]["userTexts"] == ["stream", "gated", "next", "ask"]
    replayed = report["loadReplay"]["agentTexts"]
    assert replayed[:4] == ["hello, ", "typescript ", "sdk", "before"]
    assert replayed[-2:] == ["ok", "granted"]
    assert "after" not in replayed, "the cancelled turn never got past its gate"
    assert report["afterLoad"] == {"stopReason": "end_turn", "texts": ["again"]}
    assert report["finalClose"] == {}


@pytest.mark.timeout(60)
@pytest.mark.parametrize("transport", TRANSPORTS)
def test_the_typescript_sdk_v2_entry_runs_held_prompts_permissions_three_cancels_a_list_and_a_resume(
    transport: str,
) -> None:
    """`@agentclientprotocol/sdk/experimental/v2`, the SDK's v2 draft (ACP-V2.md): `initialize` at version 2, a
    prompt answered with its `messageId` while still held at a gate, its work between `running` and `idle end_turn`,
    `session/cancel` ending a turn `idle cancelled`, `tool_call/cancel` and `terminal/cancel` each stopping one thing
    while the turn goes on, a prompt held while work runs, two permission questions in v2's shape (a tool call
    subject, a command subject) answered by the SDK's handler between `requires_action` and `running`,
    `session/list`, then `session/close` and `session/resume` from the start replaying the history as whole
    messages."""
    report, stderr = run_flows("v2", transport)
    assert_clean(report, stderr)
    assert report["initialize"]["protocolVersion"] == 2
    assert report["initialize"]["info"]["name"] == "acp-server"
    session_id = report["newSession"]["sessionId"]
    assert session_id

    prompt = report["prompt"]
    assert isinstance(prompt["response"]["messageId"], str) and prompt["response"]["messageId"]
    assert prompt["beforeRelease"] == {"states": [{"state": "running"}], "texts": []}, "answered before the work"
    assert prompt["states"] == [{"state": "running"}, {"state": "idle", "stopReason": "end_turn"}]
    assert prompt["texts"] == ["hello ", "v2"]
    kinds = prompt["kinds"]
    assert kinds[:2] == ["user_message", "state_update"], "the echo, then running"
    last_idle = len(kinds) - 1 - kinds[::-1].index("state_update")
    assert kinds.index("agent_message_chunk") < last_idle, "the reply lies between running and idle"

    cancel = report["cancel"]
    assert cancel["response"]["messageId"] not in (None, prompt["response"]["messageId"])
    assert cancel["states"] == [{"state": "running"}, {"state": "idle", "stopReason": "cancelled"}]
    assert cancel["texts"] == ["before"]
    assert report["next"] == {
        "states": [{"state": "running"}, {"state": "idle", "stopReason": "end_turn"}],
        "texts": ["ok"],
    }

    tool_cancel = report["toolCancel"]
    assert tool_cancel["response"] == {}
    assert tool_cancel["statuses"][-1] == "cancelled" and tool_cancel["statuses"].count("cancelled") == 1
    assert tool_cancel["states"] == [{"state": "running"}, {"state": "idle", "stopReason": "end_turn"}]
    assert tool_cancel["texts"] == ["went on"], "the turn went on after the cancelled call"

    held = report["held"]
    assert held["heldAnsweredAfterTheFirstIdle"] is True, "a prompt sent while work runs waits for its idle"
    assert held["distinctMessageIds"] is True
    assert held["states"] == [{"state": "running"}, {"state": "idle", "stopReason": "end_turn"}] * 2
    assert held["texts"] == ["one", "two"]

    permission = report["permission"]
    edit_call, command_call = permission["toolCalls"]
    cwd = report["newSession"]["cwd"]  # the session's directory, where the command runs
    assert permission["requests"] == [
        {
            "sessionId": session_id,
            "title": "Write asked.txt",
            "subject": "tool_call",
            "toolCallId": edit_call,
            "command": None,
            "cwd": None,
            "optionKinds": ["allow_once", "allow_always", "reject_once", "reject_always"],
        },
        {
            "sessionId": session_id,
            "title": "echo allowed",
            "subject": "command",
            "toolCallId": command_call,
            "command": "echo allowed",
            "cwd": cwd,
            "optionKinds": ["allow_once", "allow_always", "reject_once", "reject_always"],
        },
    ]
    assert permission["finalToolStatuses"] == ["completed", "completed"], "each answer reached its tool"
    assert permission["written"] == "granted\n"
    blocked_then_on = [{"state": "requires_action"}, {"state": "running"}]
    assert permission["states"] == [
        {"state": "running"},
        *blocked_then_on,
        *blocked_then_on,
        {"state": "idle", "stopReason": "end_turn"},
    ]
    assert permission["texts"] == ["granted"]

    listed = report["list"]["sessions"]
    assert [s["sessionId"] for s in listed] == [session_id]
    assert listed[0]["cwd"] == cwd

    terminal = report["terminalCancel"]
    assert terminal["response"] == {}
    assert terminal["exitStatuses"] == [{"signal": "SIGTERM"}]
    assert terminal["finalToolStatuses"] == ["failed"], "run_command ends failed with what it printed"
    assert terminal["states"] == [{"state": "running"}, {"state": "idle", "stopReason": "end_turn"}]
    assert terminal["texts"] == ["went on"]

    assert report["close"] == {}
    assert "configOptions" in report["resume"]
    replay = report["resumeReplay"]
    assert replay["userTexts"] == ["first", "second", "third", "fourth", "fifth", "sixth", "asked", "seventh"]
    agent_texts = replay["agentTexts"]
    assert agent_texts[:2] == ["hello v2", "before"]
    assert agent_texts[-6:] == ["ok", "went on", "one", "two", "granted", "went on"]
    assert "after" not in "".join(agent_texts), "the cancelled turn never got past its gate"
    assert "agent_message_chunk" not in replay["kinds"], "a replay sends whole messages"
    assert replay["kinds"].count("state_update") == 1
    assert replay["last"] == {"sessionUpdate": "state_update", "state": "idle", "stopReason": "end_turn"}
