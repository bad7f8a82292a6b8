"""Regenerate fixtures/stores/schema3/: a session store (schema 3: the store's own turn records) written by the server
of commit 15f92d4, when the records were read back out of each v1 `session/update` sent (v2's converted from v1's),
and what that server replayed from it: each session's v1 `session/load` and v2 `session/resume` (replay from the
start), every `session/update` of the session between the request and the response.

tests/e2e/test_stored_records.py opens a copy with today's server and checks that every session replays exactly what
the old server replayed, on both versions. The store must be written by the OLD code, so run this script in a checkout
of it, with that checkout first on the path (the test client and the spawned server then both import it):

    git worktree add /tmp/acp-records 15f92d4
    cp tests/support/make_records_store.py /tmp/acp-records/tests/support/
    cd /tmp/acp-records && python3 -m venv .venv && .venv/bin/pip install -q -e '.[test]'
    PYTHONPATH=/tmp/acp-records .venv/bin/python -m tests.support.make_records_store /path/to/fixtures/stores/schema3

The server is the real one with the scripted model, over stdio, on both versions: on a v1 connection (no client
files or terminals: the tools run locally) a completed turn (a thought, text, a plan, a file written and read, a
command), a `/compact` (its notice shown as a message on a client without notices), a turn cancelled mid tool call, a
failed turn and a subagent's turn; on a v2 connection a command shown as a display terminal, a subagent's turn (its
content appended) and a command left running by a `kill -9` (the turn marked interrupted when the next server opens
the store, the terminal's end never kept). Ids are random, so a regenerated fixture differs from the committed one
in its ids only.
"""

from __future__ import annotations

import asyncio
import shutil
import sqlite3
import sys
import tempfile
from pathlib import Path
from typing import Any

import orjson

from tests.support.harness import RawClient

STORE = "sessions.sqlite3"
WORK = "/tmp/acp-server-records-fixture"  # the sessions' cwd (the diff shows paths below it)
ARGS = ("--model", "scripted", "--test-mode")


async def _server(state: Path, version: int) -> RawClient:
    server = await RawClient.start(*ARGS, env={"ACP_SERVER_STATE_DIR": str(state)}, cwd=WORK)
    if version == 2:
        await server.initialize_v2()
    else:
        await server.initialize()
    return server


def _shown(message: dict[str, Any], session: str, kind: str) -> bool:
    """Whether `message` is a `session/update` of `kind` for `session`."""
    params = message.get("params", {})
    return bool(params.get("sessionId") == session and params.get("update", {}).get("sessionUpdate") == kind)


def _delegate(task: str, script: list[dict[str, Any]]) -> dict[str, Any]:
    return {"tool": "delegate", "args": {"task": task, "script": script}}


CHILD: list[dict[str, Any]] = [{"say": "c1"}, {"tool": "test_sleep", "args": {"s": 0}}, {"say": "c2"}]
PLAN = {
    "entries": [
        {"content": "Write a.txt", "priority": "high", "status": "completed"},
        {"content": "Read it back", "status": "in_progress"},
    ]
}


async def _v1_sessions(state: Path) -> dict[str, str]:
    server = await _server(state, 1)
    done = await server.new_session(WORK)
    await server.call("session/set_mode", {"sessionId": done, "modeId": "bypass"})
    script: list[dict[str, Any]] = [
        {"think": "Planning "},
        {"think": "the change."},
        {"say": "Writing "},
        {"say": "the file."},
        {"tool": "update_plan", "args": PLAN},
        {"tool": "write_file", "args": {"path": "a.txt", "content": "x\n"}},
        {"tool": "read_file", "args": {"path": "a.txt"}},
        {"tool": "run_command", "args": {"command": "printf 'hi\\n'"}},
        {"say": "Done."},
    ]
    response = await server.response(await server.prompt(done, script))
    assert response["result"]["stopReason"] == "end_turn", response
    compact = server.prompt_message(done, [], text="/compact")
    await server.send(compact)
    assert "result" in await server.response(compact["id"])

    cancelled = await server.new_session(WORK)
    request = await server.prompt(cancelled, [{"say": "partial "}, {"tool": "test_sleep", "args": {"s": 30}}])
    await server.wait_for(lambda m: _shown(m, cancelled, "tool_call"))
    await server.cancel(cancelled)
    assert (await server.response(request))["result"] == {"stopReason": "cancelled"}

    failed = await server.new_session(WORK)
    response = await server.response(await server.prompt(failed, [{"say": "oops "}, {"fail": "the model broke"}]))
    assert "error" in response, response

    delegated = await server.new_session(WORK)
    response = await server.response(await server.prompt(delegated, [_delegate("work", CHILD), {"say": "done"}]))
    assert response["result"]["stopReason"] == "end_turn", response
    code, _ = await server.close()
    assert code == 0, server.stderr_text
    return {"v1_completed": done, "v1_cancelled": cancelled, "v1_failed": failed, "v1_delegated": delegated}


async def _v2_sessions(state: Path) -> dict[str, str]:
    server = await _server(state, 2)
    sessions: dict[str, str] = {}
    for role in ("v2_terminal", "v2_delegated", "v2_interrupted"):
        session = await server.new_session_v2(WORK)
        mode = {"sessionId": session, "configId": "mode", "type": "id", "value": "bypass"}
        assert "result" in await server.call("session/set_config_option", mode)
        sessions[role] = session
    terminal = sessions["v2_terminal"]
    script: list[dict[str, Any]] = [
        {"think": "Listing."},
        {"tool": "run_command", "args": {"command": "printf 'one\\ntwo\\n'"}},
        {"say": "ok"},
    ]
    await server.prompt(terminal, script)
    assert (await server.idle(terminal))["params"]["update"]["stopReason"] == "end_turn"
    delegated = sessions["v2_delegated"]
    await server.prompt(delegated, [_delegate("work", CHILD), {"say": "parent done"}])
    assert (await server.idle(delegated))["params"]["update"]["stopReason"] == "end_turn"
    interrupted = sessions["v2_interrupted"]
    await server.prompt(
        interrupted, [{"say": "still going "}, {"tool": "run_command", "args": {"command": "sleep 60"}}]
    )
    await server.wait_for(lambda m: _shown(m, interrupted, "terminal_update"))
    await asyncio.sleep(0.5)  # several flush intervals: the tool call and its terminal are committed
    server.kill()
    await server.process.wait()
    return sessions


def _updates(server: RawClient, session: str, start: int) -> list[dict[str, Any]]:
    return [
        m["params"]["update"]
        for m in server.received[start:]
        if m.get("method") == "session/update" and m["params"]["sessionId"] == session
    ]


async def replays(state: Path, sessions: dict[str, str]) -> dict[str, Any]:
    """What a (new, old-code) server sends on v1's `session/load` and v2's `session/resume` of each session."""
    expected: dict[str, Any] = {role: {"sessionId": session} for role, session in sessions.items()}
    v1 = await _server(state, 1)
    for role, session in sessions.items():
        start = len(v1.received)
        response = await v1.call("session/load", {"sessionId": session, "cwd": WORK, "mcpServers": []})
        assert "result" in response, response
        expected[role]["v1"] = _updates(v1, session, start)
    code, _ = await v1.close()
    assert code == 0, v1.stderr_text
    v2 = await _server(state, 2)
    for role, session in sessions.items():
        start = len(v2.received)
        params = {"sessionId": session, "cwd": WORK, "replayFrom": {"type": "start"}}
        response = await v2.call("session/resume", params)
        assert "result" in response, response
        expected[role]["v2"] = _updates(v2, session, start)
    code, _ = await v2.close()
    assert code == 0, v2.stderr_text
    return expected


def main(out: Path) -> None:
    shutil.rmtree(WORK, ignore_errors=True)
    Path(WORK).mkdir(parents=True)
    with tempfile.TemporaryDirectory(prefix="acp-server-records-") as tmp:
        state = Path(tmp)
        sessions = asyncio.run(_v1_sessions(state))
        sessions |= asyncio.run(_v2_sessions(state))
        expected = asyncio.run(replays(state, sessions))
        conn = sqlite3.connect(state / STORE)
        version = conn.execute("PRAGMA user_version").fetchone()[0]
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        conn.execute("VACUUM")
        conn.close()
        assert version == 3, f"schema {version}: run this with the old code first on the path (see the docstring)"
        out.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(state / STORE, out / STORE)
        (out / "expected.json").write_bytes(orjson.dumps(expected, option=orjson.OPT_INDENT_2) + b"\n")
    shutil.rmtree(WORK, ignore_errors=True)


if __name__ == "__main__":
    main(Path(sys.argv[1]).resolve())
