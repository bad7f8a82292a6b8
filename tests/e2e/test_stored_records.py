"""A session store written by the server before the store's records were built from the core's events (commit
15f92d4, schema 3: the records read back out of each v1 update sent, v2's converted from v1's) opens with today's
server unchanged and replays, on v1 (`session/load`) and on v2 (`session/resume` from the start), exactly what that
server replayed: sessions stored from a v1 connection and from a v2 one, each replayed on both versions.

fixtures/stores/schema3 holds the store and what the old server replayed; tests/support/make_records_store.py made
both (its docstring says how to run it against the old code)."""

from __future__ import annotations

import shutil
import sqlite3
from contextlib import closing
from pathlib import Path
from typing import Any

import orjson
import pytest

from tests.conftest import StartServer
from tests.support.harness import RawClient

pytestmark = pytest.mark.timeout(60)

STORED = Path(__file__).resolve().parents[2] / "fixtures" / "stores" / "schema3"
# Announced after the replay from the session's settings and the server's own lists, not from its turns.
SESSION_SCOPED = {"available_commands_update", "session_info_update", "current_mode_update", "config_option_update"}


def replayed(client: RawClient, session: str, start: int) -> list[dict[str, Any]]:
    return [
        m["params"]["update"]
        for m in client.received[start:]
        if m.get("method") == "session/update"
        and m["params"]["sessionId"] == session
        and m["params"]["update"]["sessionUpdate"] not in SESSION_SCOPED
    ]


def expected(version: str) -> dict[str, tuple[str, list[dict[str, Any]]]]:
    """Each stored session (by role) with what the old server replayed of it on `version`."""
    stored = orjson.loads((STORED / "expected.json").read_bytes())
    return {
        role: (session["sessionId"], [u for u in session[version] if u["sessionUpdate"] not in SESSION_SCOPED])
        for role, session in stored.items()
    }


async def open_copy(start_server: StartServer, state: Path, version: int) -> RawClient:
    server = await start_server("--model", "scripted", "--test-mode", env={"ACP_SERVER_STATE_DIR": str(state)})
    if version == 2:
        await server.initialize_v2()
    else:
        await server.initialize()
    return server


@pytest.fixture
def state(tmp_path: Path) -> Path:
    """A copy of the store, its sessions moved to a directory that exists here (a v2 resume names the session's own
    working directory, which must be one); nothing a replay shows depends on it."""
    shutil.copyfile(STORED / "sessions.sqlite3", tmp_path / "sessions.sqlite3")
    with closing(sqlite3.connect(tmp_path / "sessions.sqlite3")) as conn, conn:
        conn.execute("UPDATE sessions SET cwd = ?", (str(tmp_path),))
    return tmp_path


def test_the_fixture_is_a_store_of_todays_schema_with_sessions_from_both_versions() -> None:
    """What the test below proves rests on it: no upgrade runs on this file, and both versions stored sessions."""
    # Immutable: a WAL store opened even read-only leaves -shm and -wal files beside it; the fixture stays as made.
    with closing(sqlite3.connect(f"file:{STORED / 'sessions.sqlite3'}?mode=ro&immutable=1", uri=True)) as conn:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == 3
    roles = set(expected("v1"))
    assert {r for r in roles if r.startswith("v1_")} and {r for r in roles if r.startswith("v2_")}


async def test_sessions_stored_by_the_previous_server_replay_on_v1_as_they_did(
    start_server: StartServer, state: Path
) -> None:
    server = await open_copy(start_server, state, 1)
    for role, (session, old) in expected("v1").items():
        start = len(server.received)
        response = await server.call("session/load", {"sessionId": session, "cwd": str(state), "mcpServers": []})
        assert "result" in response, (role, response)
        assert replayed(server, session, start) == old, role
    # Loaded sessions go on: the model is given their history.
    session, _ = expected("v1")["v1_completed"]
    again = await server.response(await server.prompt(session, [{"say": "going on"}]))
    assert again["result"]["stopReason"] == "end_turn"


async def test_sessions_stored_by_the_previous_server_replay_on_v2_as_they_did(
    start_server: StartServer, state: Path
) -> None:
    server = await open_copy(start_server, state, 2)
    for role, (session, old) in expected("v2").items():
        start = len(server.received)
        params = {"sessionId": session, "cwd": str(state), "replayFrom": {"type": "start"}}
        response = await server.call("session/resume", params)
        assert "result" in response, (role, response)
        assert replayed(server, session, start) == old, role
    session, _ = expected("v2")["v2_terminal"]
    await server.prompt(session, [{"say": "going on"}])
    assert (await server.idle(session))["params"]["update"]["stopReason"] == "end_turn"
