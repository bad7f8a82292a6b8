"""The unstable session lifecycle methods of ACP 2.4.0 at their edges, over real stdio with real SQLite stores, every
message the server writes validated against the official schemas (the unstable ones for these methods' responses):
`session/set_title`, `session/status`, `session/archive`, `session/unarchive` on both versions, `session/fork` on v2,
and another principal's session answered as an unknown one over `serve`.

The happy paths through the TypeScript SDK are tests/e2e/test_ts_sdk_lifecycle.py's. What the schema's descriptions
decide, and these tests hold: a title is stored normalized (whitespace runs one space, trimmed), an empty one is
-32602, and no generated title replaces it; `session/status` is `open` for a session in memory, `saved` for one only
stored (an archived one too), -32002 with the id in `data` otherwise, and changes nothing; archiving hides a session
from the default `session/list` (the `archived` filter shows it, every entry flagged), closes it if it is open, and
repeats silently; an archived session is loaded and resumed only once unarchived (-32602 before); an unknown id is
-32002 for all four.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import StartServer
from tests.e2e.test_serve import ALICE, BOB, editor, new_session, serving
from tests.support.harness import DEFAULT_ARGS, RawClient
from tests.support.versions import VERSIONS, Acp

pytestmark = pytest.mark.timeout(60)

UNKNOWN = "sess_" + "0" * 32


async def start(start_server: StartServer, state: Path, version: str, *args: str) -> Acp:
    client = await start_server(*DEFAULT_ARGS, *args, env={"ACP_SERVER_STATE_DIR": str(state)})
    speaker = VERSIONS[version](client)
    await speaker.initialize()
    return speaker


async def reopen(acp: Acp, params: dict[str, Any]) -> dict[str, Any]:
    """v1 `session/load`, v2 `session/resume` (each version's way back into a stored session)."""
    method = "session/load" if acp.version == "v1" else "session/resume"
    if acp.version == "v1":
        params = {"mcpServers": [], **params}
    return await acp.client.call(method, params)


async def listed(client: RawClient, **params: Any) -> list[tuple[str, Any, Any]]:
    response = await client.call("session/list", params)
    assert "result" in response, response
    return [(entry["sessionId"], entry.get("title"), entry.get("archived")) for entry in response["result"]["sessions"]]


def capabilities(acp: Acp, initialize: dict[str, Any]) -> dict[str, Any]:
    result = initialize["result"]
    found: dict[str, Any] = (
        result["agentCapabilities"]["sessionCapabilities"] if acp.version == "v1" else result["capabilities"]["session"]
    )
    return found


async def test_the_lifecycle_capabilities_are_advertised_only_where_sessions_are_stored(
    start_server: StartServer, tmp_path: Path, version: str
) -> None:
    stored = VERSIONS[version](await start_server(*DEFAULT_ARGS, env={"ACP_SERVER_STATE_DIR": str(tmp_path)}))
    found = capabilities(stored, await stored.initialize())
    assert {"fork": {}, "archive": {}, "status": {}, "title": {}}.items() <= found.items()
    unstored = VERSIONS[version](await start_server(*DEFAULT_ARGS, "--no-store"))
    found = capabilities(unstored, await unstored.initialize())
    assert not {"fork", "archive", "status", "title"} & set(found)


async def test_a_title_is_stored_normalized_listed_kept_over_a_turn_and_replayed_after_a_restart(
    start_server: StartServer, tmp_path: Path, version: str
) -> None:
    first = await start(start_server, tmp_path, version)
    titled = await first.new_session()
    untitled = await first.new_session()
    answer = await first.client.call("session/set_title", {"sessionId": titled, "title": " \t Release \n notes  "})
    assert answer["result"] == {"title": "Release notes"}
    # The open session's connection hears of it, as of a title the agent chose.
    assert first.client.updates(titled, "session_info_update")[-1]["title"] == "Release notes"
    for session in (titled, untitled):
        await first.stopped(await first.prompt(session, [{"say": "hi"}]), "end_turn")
    titles = {session: title for session, title, _ in await listed(first.client)}
    # The turn titled the untitled session from its prompt; the client's title stayed.
    assert titles == {titled: "Release notes", untitled: "go"}
    await first.client.close()

    second = await start(start_server, tmp_path, version)
    assert ("Release notes" in [title for _, title, _ in await listed(second.client)]) is True
    # Retitled while only stored, then brought back: the new title is the session's.
    retitled = await second.client.call("session/set_title", {"sessionId": titled, "title": "Shipped"})
    assert retitled["result"] == {"title": "Shipped"}
    assert "result" in await reopen(second, {"sessionId": titled, "cwd": "/tmp"})
    if version == "v1":  # a load replays the title with the history
        assert second.client.updates(titled, "session_info_update")[-1]["title"] == "Shipped"
    await second.stopped(await second.prompt(titled, [{"say": "again"}]), "end_turn")
    assert (titled, "Shipped", False) in await listed(second.client)


async def test_set_title_refuses_an_empty_title_and_answers_an_unknown_id_as_unknown(
    start_server: StartServer, tmp_path: Path, version: str
) -> None:
    acp = await start(start_server, tmp_path, version)
    session = await acp.new_session()
    empty = await acp.client.call("session/set_title", {"sessionId": session, "title": " \n\t "})
    assert empty["error"]["code"] == -32602 and "title" in empty["error"]["message"]
    missing = await acp.client.call("session/set_title", {"sessionId": session})
    assert missing["error"]["code"] == -32602
    unknown = await acp.client.call("session/set_title", {"sessionId": UNKNOWN, "title": "x"})
    assert unknown["error"]["code"] == -32002
    assert [title for _, title, _ in await listed(acp.client)] == [None]  # nothing was stored
    # Control characters are left out: a title is shown in lists and terminals.
    escaped = await acp.client.call("session/set_title", {"sessionId": session, "title": "\x1b[31mred\x07 \x00"})
    assert escaped["result"] == {"title": "[31mred"}
    assert [title for _, title, _ in await listed(acp.client)] == ["[31mred"]


async def test_status_is_open_in_memory_saved_when_only_stored_unknown_otherwise_and_changes_nothing(
    start_server: StartServer, tmp_path: Path, version: str
) -> None:
    first = await start(start_server, tmp_path, version)
    session = await first.new_session()
    assert (await first.client.call("session/status", {"sessionId": session}))["result"] == {"status": "open"}
    assert "result" in await first.client.call("session/close", {"sessionId": session})
    assert (await first.client.call("session/status", {"sessionId": session}))["result"] == {"status": "saved"}
    unknown = await first.client.call("session/status", {"sessionId": UNKNOWN})
    assert unknown["error"]["code"] == -32002 and unknown["error"]["data"] == {"sessionId": UNKNOWN}
    await first.client.close()

    second = await start(start_server, tmp_path, version)
    for _ in range(2):  # asking loads nothing: still only stored
        assert (await second.client.call("session/status", {"sessionId": session}))["result"] == {"status": "saved"}
    # Nor does it attach this connection: a prompt still needs a load or resume first.
    refused = await second.client.call(
        "session/prompt", {"sessionId": session, "prompt": [{"type": "text", "text": "x"}]}
    )
    assert "error" in refused
    assert "result" in await reopen(second, {"sessionId": session, "cwd": "/tmp"})
    assert (await second.client.call("session/status", {"sessionId": session}))["result"] == {"status": "open"}


async def test_archived_sessions_leave_the_default_list_and_the_filter_shows_them_flagged(
    start_server: StartServer, tmp_path: Path, version: str
) -> None:
    acp = await start(start_server, tmp_path, version)
    kept, archived = await acp.new_session(), await acp.new_session()
    assert (await acp.client.call("session/archive", {"sessionId": archived}))["result"] == {}
    assert (await acp.client.call("session/archive", {"sessionId": archived}))["result"] == {}  # again: fine
    assert await listed(acp.client) == [(kept, None, False)]
    assert await listed(acp.client, archived="exclude") == [(kept, None, False)]
    assert await listed(acp.client, archived="only") == [(archived, None, True)]
    assert sorted(await listed(acp.client, archived="include")) == sorted([(kept, None, False), (archived, None, True)])
    # The filter combines with cwd, and an unknown value is refused rather than read as `exclude`.
    assert await listed(acp.client, cwd="/nowhere", archived="include") == []
    assert (await acp.client.call("session/list", {"archived": "_later"}))["error"]["code"] == -32602
    # Still retitled and status-checked while archived; unknown ids are -32002 for both.
    assert (await acp.client.call("session/set_title", {"sessionId": archived, "title": "old"}))["result"]
    for method in ("session/archive", "session/unarchive"):
        assert (await acp.client.call(method, {"sessionId": UNKNOWN}))["error"]["code"] == -32002
    assert (await acp.client.call("session/unarchive", {"sessionId": archived}))["result"] == {}
    assert (await acp.client.call("session/unarchive", {"sessionId": kept}))["result"] == {}  # not archived: fine
    assert sorted(await listed(acp.client)) == sorted([(kept, None, False), (archived, "old", False)])


async def test_archiving_an_open_session_cancels_its_turn_and_closes_it(
    start_server: StartServer, tmp_path: Path, version: str
) -> None:
    acp = await start(start_server, tmp_path, version)
    session = await acp.new_session()
    turn = await acp.prompt(session, [{"say": "before"}, {"gate": "g"}, {"say": "after"}])
    await acp.client.probe("gate_reached", sessionId=session)
    archive = await acp.client.request("session/archive", {"sessionId": session})
    await acp.stopped(turn, "cancelled")
    assert (await acp.client.response(archive))["result"] == {}
    assert (await acp.client.call("session/status", {"sessionId": session}))["result"] == {"status": "saved"}
    refused = await acp.client.call("session/prompt", {"sessionId": session, "prompt": [{"type": "text", "text": "x"}]})
    assert "error" in refused
    assert acp.client.texts(session) == ["before"]


async def test_an_archived_session_is_loaded_or_resumed_only_once_unarchived(
    start_server: StartServer, tmp_path: Path, version: str
) -> None:
    first = await start(start_server, tmp_path, version)
    session = await first.new_session()
    await first.stopped(await first.prompt(session, [{"say": "kept"}]), "end_turn")
    assert "result" in await first.client.call("session/archive", {"sessionId": session})
    await first.client.close()

    second = await start(start_server, tmp_path, version)
    methods = ["session/resume"] + (["session/load"] if version == "v1" else [])
    for method in methods:
        params: dict[str, Any] = {"sessionId": session, "cwd": "/tmp", "mcpServers": []}
        refused = await second.client.call(method, params)
        assert refused["error"]["code"] == -32602 and "archived" in refused["error"]["message"], method
    assert (await second.client.call("session/status", {"sessionId": session}))["result"] == {"status": "saved"}
    # A fork of it is a new session, not archived (the source stays archived).
    if version == "v2":
        fork = await second.client.call("session/fork", {"sessionId": session, "cwd": "/tmp"})
        assert set(fork["result"]) == {"sessionId", "configOptions", "availableCommands"}
        assert await listed(second.client) == [(fork["result"]["sessionId"], "go", False)]  # its title copied
    assert "result" in await second.client.call("session/unarchive", {"sessionId": session})
    assert "result" in await reopen(second, {"sessionId": session, "cwd": "/tmp"})
    await second.stopped(await second.prompt(session, [{"say": "back"}]), "end_turn")


async def test_v2_fork_copies_the_conversation_and_refuses_an_unknown_source(
    start_server: StartServer, tmp_path: Path
) -> None:
    acp = await start(start_server, tmp_path, "v2")
    source = await acp.new_session()
    await acp.stopped(await acp.prompt(source, [{"say": "shared"}]), "end_turn")
    fork = await acp.client.call("session/fork", {"sessionId": source, "cwd": "/tmp"})
    fork_id = fork["result"]["sessionId"]
    assert fork_id != source
    assert any(option["configId"] == "model" for option in fork["result"]["configOptions"])
    # The fork is open on this connection and goes on from the copied conversation; the source is untouched.
    await acp.stopped(await acp.prompt(fork_id, [{"say": "forked"}]), "end_turn")
    assert (await acp.client.call("session/status", {"sessionId": source}))["result"] == {"status": "open"}
    unknown = await acp.client.call("session/fork", {"sessionId": UNKNOWN, "cwd": "/tmp"})
    assert unknown["error"] == {
        "code": -32002,
        "message": f"unknown session: {UNKNOWN}",
        "data": {"sessionId": UNKNOWN},
    }
    relative = await acp.client.call("session/fork", {"sessionId": source, "cwd": "tmp"})
    assert relative["error"]["code"] == -32602


async def test_a_schema_3_store_opens_with_every_session_unarchived(start_server: StartServer, tmp_path: Path) -> None:
    """The upgrade to schema 4 adds `sessions.archived`: a store written before it lists and loads as it did."""
    first = await start(start_server, tmp_path, "v1")
    session = await first.new_session()
    await first.client.close()
    conn = sqlite3.connect(tmp_path / "sessions.sqlite3")
    try:
        conn.execute("ALTER TABLE sessions DROP COLUMN archived")
        conn.execute("PRAGMA user_version = 3")
        conn.commit()
    finally:
        conn.close()
    second = await start(start_server, tmp_path, "v1")
    assert await listed(second.client) == [(session, None, False)]
    assert (await second.client.call("session/archive", {"sessionId": session}))["result"] == {}
    assert await listed(second.client, archived="only") == [(session, None, True)]
    conn = sqlite3.connect(tmp_path / "sessions.sqlite3")
    try:
        assert conn.execute("PRAGMA user_version").fetchone() == (4,)
    finally:
        conn.close()


@pytest.mark.parametrize("version", [1, 2])
async def test_another_principals_session_is_unknown_to_the_lifecycle_methods_over_serve(
    tmp_path: Path, version: int
) -> None:
    """Over `serve`, bob's answer for alice's session is byte for byte his answer for an id that exists nowhere, and
    alice's session keeps its title, its archive state and its place in her list."""
    async with (
        serving(tmp_path) as server,
        editor(server, ALICE, "alice", version) as alice,
        editor(server, BOB, "bob", version) as bob,
    ):
        session = await new_session(alice, server.workspace)
        cwd = str(server.workspace)
        requests: list[tuple[str, dict[str, Any]]] = [
            ("session/set_title", {"sessionId": session, "title": "bob's"}),
            ("session/status", {"sessionId": session}),
            ("session/archive", {"sessionId": session}),
            ("session/unarchive", {"sessionId": session}),
            ("session/fork", {"sessionId": session, "cwd": cwd, "mcpServers": []}),
        ]
        for number, (method, params) in enumerate(requests):
            foreign_id = 1000 + number
            answer = await bob.call(method, params, request_id=foreign_id)
            assert answer["error"]["code"] == -32002, (method, answer)
            unknown_params = {**params, "sessionId": UNKNOWN}
            await bob.call(method, unknown_params, request_id=foreign_id + 100)
            foreign = bob.raw[foreign_id].replace(session.encode(), UNKNOWN.encode())
            expected = bob.raw[foreign_id + 100].replace(b'"id":%d' % (foreign_id + 100), b'"id":%d' % foreign_id)
            assert foreign == expected, method
        assert (await bob.call("session/list", {"archived": "include"}))["result"]["sessions"] == []
        mine = (await alice.call("session/list", {}))["result"]["sessions"]
        assert [(entry["sessionId"], entry.get("title"), entry["archived"]) for entry in mine] == [
            (session, None, False)
        ]
        assert (await alice.call("session/status", {"sessionId": session}))["result"] == {"status": "open"}
