"""Regenerate fixtures/stores/v1/: a session store written by the server as it was before the store kept records of
its own (schema 1, commit 04257f4, which stored each turn's `session/update` payloads), and what that server
replayed from it on `session/load`.

tests/e2e/test_persistence.py opens a copy with today's server, which migrates it, and checks that every session
replays exactly what the old server replayed. The store must be written by the OLD code, so run this script in a
checkout of it, with that checkout first on the path (the test client and the spawned server then both import it):

    git worktree add /tmp/acp-old 04257f4
    cp tests/support/make_legacy_store.py /tmp/acp-old/tests/support/
    cd /tmp/acp-old && PYTHONPATH=/tmp/acp-old python -m tests.support.make_legacy_store /path/to/fixtures/stores/v1

The server is the real one with the scripted model, over stdio: a completed turn (a thought, text, a plan, a file
written and read), a `/title` turn, a mode change, a turn cancelled mid tool call, a failed turn, and a turn left
running by a `kill -9` mid tool call (marked interrupted when the next server opens the store). Ids are random, so a
regenerated fixture differs from the committed one in its ids only.
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
WORK = "/tmp/acp-server-legacy-fixture"  # the sessions' cwd (the diff shows paths below it)


async def _server(state: Path) -> RawClient:
    server = await RawClient.start(
        "--model", "scripted", "--test-mode", env={"ACP_SERVER_STATE_DIR": str(state)}, cwd=WORK
    )
    await server.initialize()
    return server


async def _tool_call_started(server: RawClient, session: str) -> None:
    await server.wait_for(
        lambda m: (
            m.get("method") == "session/update"
            and m["params"]["sessionId"] == session
            and m["params"]["update"]["sessionUpdate"] == "tool_call"
        )
    )


async def write_sessions(state: Path) -> dict[str, str]:
    """The sessions, by role; the server is killed at the end, mid turn."""
    server = await _server(state)
    done = await server.new_session(WORK)
    await server.call("session/set_mode", {"sessionId": done, "modeId": "bypass"})
    plan = {
        "entries": [
            {"content": "Write a.txt", "priority": "high", "status": "completed"},
            {"content": "Read it back", "status": "in_progress"},
        ]
    }
    script: list[dict[str, Any]] = [
        {"think": "Planning "},
        {"think": "the change."},
        {"say": "Writing "},
        {"say": "the file."},
        {"tool": "update_plan", "args": plan},
        {"tool": "write_file", "args": {"path": "a.txt", "content": "x\n"}},
        {"tool": "read_file", "args": {"path": "a.txt"}},
        {"say": "Done."},
    ]
    response = await server.response(await server.prompt(done, script))
    assert response["result"]["stopReason"] == "end_turn", response
    titled = server.prompt_message(done, [], text="/title Fixture session")
    await server.send(titled)
    assert "result" in await server.response(titled["id"])

    cancelled = await server.new_session(WORK)
    request = await server.prompt(cancelled, [{"say": "partial "}, {"tool": "test_sleep", "args": {"s": 30}}])
    await _tool_call_started(server, cancelled)
    await server.cancel(cancelled)
    assert (await server.response(request))["result"] == {"stopReason": "cancelled"}

    failed = await server.new_session(WORK)
    response = await server.response(await server.prompt(failed, [{"say": "oops "}, {"fail": "the model broke"}]))
    assert "error" in response, response

    interrupted = await server.new_session(WORK)
    await server.prompt(interrupted, [{"say": "still going "}, {"tool": "test_sleep", "args": {"s": 60}}])
    await _tool_call_started(server, interrupted)
    await asyncio.sleep(0.5)  # several flush intervals: the tool call is committed
    server.kill()
    await server.process.wait()
    return {"completed": done, "cancelled": cancelled, "failed": failed, "interrupted": interrupted}


async def replays(state: Path, sessions: dict[str, str]) -> dict[str, Any]:
    """What a (new, old-code) server sends on `session/load` of each session, and how `session/list` shows them."""
    server = await _server(state)
    expected: dict[str, Any] = {}
    for role, session in sessions.items():
        start = len(server.received)
        response = await server.call("session/load", {"sessionId": session, "cwd": WORK, "mcpServers": []})
        updates = [
            m["params"]["update"]
            for m in server.received[start:]
            if m.get("method") == "session/update" and m["params"]["sessionId"] == session
        ]
        expected[role] = {"sessionId": session, "response": response["result"], "updates": updates}
    listed = await server.call("session/list", {})
    expected["list"] = listed["result"]
    code, _ = await server.close()
    assert code == 0, server.stderr_text
    return expected


def main(out: Path) -> None:
    shutil.rmtree(WORK, ignore_errors=True)
    Path(WORK).mkdir(parents=True)
    with tempfile.TemporaryDirectory(prefix="acp-server-legacy-") as tmp:
        state = Path(tmp)
        sessions = asyncio.run(write_sessions(state))
        expected = asyncio.run(replays(state, sessions))
        conn = sqlite3.connect(state / STORE)
        version = conn.execute("PRAGMA user_version").fetchone()[0]
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        conn.execute("VACUUM")
        conn.close()
        assert version == 1, f"schema {version}: run this with the old code first on the path (see the docstring)"
        out.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(state / STORE, out / STORE)
        (out / "expected.json").write_bytes(orjson.dumps(expected, option=orjson.OPT_INDENT_2) + b"\n")
    shutil.rmtree(WORK, ignore_errors=True)


if __name__ == "__main__":
    main(Path(sys.argv[1]).resolve())
