"""Sessions that last: load after restart, kill -9 recovery, shared stores, list paging, delete, corrupt stores.

Every test gives its servers one state directory and restarts or adds processes on it, over real stdio, with real
SQLite files.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import orjson
import pytest

from acp_server.agent.sessions.slash_commands import TITLE_INSTRUCTIONS
from tests.conftest import StartServer
from tests.support.fake_openai import FakeOpenAI, text_reply
from tests.support.harness import RawClient, scaled
from tests.support.stores import StoreAt, once_free

LEGACY_STORE = Path(__file__).resolve().parents[2] / "fixtures" / "stores" / "v1"
SESSION_SCOPED = {"available_commands_update", "session_info_update", "current_mode_update", "config_option_update"}


async def start(start_server: StartServer, state: Path | StoreAt, *args: str) -> RawClient:
    """A scripted server on the state directory `state`, or on the store `state` names (SQLite or PostgreSQL)."""
    env = (state if isinstance(state, StoreAt) else StoreAt(state, None)).env()
    server = await start_server("--model", "scripted", "--test-mode", *args, env=env)
    await server.initialize()
    return server


def seen(client: RawClient, session: str) -> list[dict[str, Any]]:
    """The updates the client saw for a session, session-scoped announcements left out."""
    return [u for u in client.updates(session) if u["sessionUpdate"] not in SESSION_SCOPED]


async def load(client: RawClient, session: str, cwd: str = "/tmp") -> tuple[dict[str, Any], list[dict[str, Any]]]:
    start_index = len(client.received)
    # Once the lease of a server killed before has expired (PostgreSQL); at once on SQLite.
    response = await once_free(client, "session/load", {"sessionId": session, "cwd": cwd, "mcpServers": []})
    replayed = [
        m["params"]["update"]
        for m in client.received[start_index:]
        if m.get("method") == "session/update" and m["params"]["update"]["sessionUpdate"] not in SESSION_SCOPED
    ]
    return response, replayed


def prompt_chunk(text: str) -> dict[str, Any]:
    return {"sessionUpdate": "user_message_chunk", "content": {"type": "text", "text": text}}


def without_ids(updates: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{k: v for k, v in u.items() if k != "messageId"} for u in updates]


async def test_load_after_restart_replays_exactly_what_the_client_saw_and_the_model_goes_on(
    start_server: StartServer, tmp_path: Path, store_url: str | None
) -> None:
    store = StoreAt(tmp_path, store_url)
    first = await start(start_server, store, "--permission-mode", "bypass")
    session = await first.new_session(str(tmp_path))
    script: list[dict[str, Any]] = [
        {"think": "hmm"},
        {"say": "hello "},
        {"tool": "write_file", "args": {"path": "a.txt", "content": "x\n"}},
        {"say": "done"},
    ]
    assert (await first.response(await first.prompt(session, script)))["result"]["stopReason"] == "end_turn"
    saw = seen(first, session)
    assert (await first.close())[0] == 0

    assert store.sessions() == {session}
    second = await start(start_server, store)
    response, replayed = await load(second, session, str(tmp_path))
    assert set(response["result"]) == {"modes", "configOptions"}
    assert response["result"]["modes"]["currentModeId"] == "bypass"
    assert without_ids(replayed) == without_ids([prompt_chunk("go"), *saw])
    assert [u.get("messageId") for u in replayed[1:]] == [u.get("messageId") for u in saw]
    # The conversation continues on the loaded session.
    again = await second.response(await second.prompt(session, [{"say": "more"}]))
    assert again["result"]["stopReason"] == "end_turn"


async def test_a_cancelled_turn_replays_what_it_streamed_then_a_cancelled_note(
    start_server: StartServer, tmp_path: Path
) -> None:
    first = await start(start_server, tmp_path)
    session = await first.new_session()
    prompt = await first.prompt(session, [{"say": "partial"}, {"gate": "g"}])
    await first.probe("gate_reached", sessionId=session)
    await first.cancel(session)
    assert (await first.response(prompt))["result"] == {"stopReason": "cancelled"}
    await first.close()
    second = await start(start_server, tmp_path)
    _, replayed = await load(second, session)
    assert replayed[1]["content"]["text"] == "partial"
    closing = replayed[-1]
    assert closing["sessionUpdate"] == "agent_message_chunk" and closing["content"]["text"] == "[cancelled]"
    assert closing["_meta"] == {"acpServer": {"turnStatus": "cancelled"}}


@pytest.mark.timeout(60)
async def test_kill_9_mid_stream_keeps_what_was_sent_and_marks_the_turn_interrupted(
    start_server: StartServer, tmp_path: Path, store_url: str | None
) -> None:
    store = StoreAt(tmp_path, store_url)
    first = await start(start_server, store)
    session = await first.new_session()
    script = [{"say": f"chunk-{i} ", "repeat": 1} for i in range(50)] + [{"sleep": 0.05}] * 200
    interleaved: list[dict[str, Any]] = []
    for step in script[:50]:
        interleaved += [step, {"sleep": 0.02}]
    await first.prompt(session, [*interleaved, {"gate": "never"}])
    await first.wait_for(lambda m: "chunk-30 " in first.texts(session), timeout=scaled(20))
    await asyncio.sleep(0.3)
    cutoff = time.monotonic() - 0.1
    safe = [
        e.msg["params"]["update"]["content"]["text"]
        for e in first.log
        if e.dir == "out"
        and e.t < cutoff
        and isinstance(e.msg, dict)
        and e.msg.get("params", {}).get("update", {}).get("sessionUpdate") == "agent_message_chunk"
    ]
    os.killpg(first.process.pid, signal.SIGKILL)
    await first.process.wait()
    # What the server wrote before it died, including lines still in the pipe at the kill: the store may hold a
    # chunk written to stdout a moment before the kill and not yet read here, never one that was not written.
    await first.read_to_end()
    sent = first.texts(session)
    first.validator.violations.clear()  # the wire log ends mid-turn by design; the fixture's checks do not apply
    first.log.clear()

    assert store.sessions() == {session}
    second = await start(start_server, store)
    _, replayed = await load(second, session)
    texts = [u["content"]["text"] for u in replayed if u["sessionUpdate"] == "agent_message_chunk"]
    assert texts[-1] == "[interrupted]"
    assert replayed[-1]["_meta"] == {"acpServer": {"turnStatus": "interrupted"}}
    assert texts[: len(safe)] == safe, "everything sent more than 100 ms before the kill is kept"
    assert set(texts[:-1]) <= set(sent), "nothing is kept that was not sent"


async def test_two_processes_share_a_store_without_disturbing_each_other(
    start_server: StartServer, tmp_path: Path
) -> None:
    first = await start(start_server, tmp_path)
    busy = await first.new_session()
    running = await first.prompt(busy, [{"say": "working"}, {"gate": "g"}, {"say": "finished"}])
    await first.probe("gate_reached", sessionId=busy)
    second = await start(start_server, tmp_path)
    other = await second.new_session()
    assert (await second.response(await second.prompt(other, [{"say": "hi"}])))["result"]["stopReason"] == "end_turn"
    listed = (await second.call("session/list", {}))["result"]["sessions"]
    assert {busy, other} <= {entry["sessionId"] for entry in listed}
    # The live owner's running turn is not marked interrupted by the other process.
    _, replayed = await load(second, busy)
    assert not any(u.get("_meta", {}).get("acpServer", {}).get("turnStatus") == "interrupted" for u in replayed)
    await first.release(busy, "g")
    assert (await first.response(running))["result"]["stopReason"] == "end_turn"


@pytest.mark.timeout(60)
async def test_twenty_sessions_writing_at_once_lose_nothing(start_server: StartServer, tmp_path: Path) -> None:
    first = await start(start_server, tmp_path)
    sessions = [await first.new_session() for _ in range(20)]
    prompts = [
        await first.prompt(s, [{"say": f"{i}:", "repeat": 1}, {"say": "x", "repeat": 200}])
        for i, s in enumerate(sessions)
    ]
    for prompt in prompts:
        assert (await first.response(prompt, timeout=scaled(20)))["result"]["stopReason"] == "end_turn"
    await first.close()
    second = await start(start_server, tmp_path)
    for index, session in enumerate(sessions):
        _, replayed = await load(second, session)
        texts = [u["content"]["text"] for u in replayed if u["sessionUpdate"] == "agent_message_chunk"]
        assert texts == [f"{index}:"] + ["x"] * 200


@pytest.mark.timeout(60)
async def test_list_pages_through_250_sessions_once_each_with_a_cwd_filter(
    start_server: StartServer, tmp_path: Path
) -> None:
    server = await start(start_server, tmp_path)
    even, odd = tmp_path / "even", tmp_path / "odd"  # a session's cwd must exist
    even.mkdir()
    odd.mkdir()
    for index in range(250):
        await server.request("session/new", {"cwd": str(even) if index % 2 == 0 else str(odd), "mcpServers": []})
    await server.wait_for(
        lambda m: sum(1 for x in server.received if "sessionId" in x.get("result", {})) == 250, timeout=scaled(30)
    )
    seen_ids: list[str] = []
    cursor: str | None = None
    pages = 0
    while True:
        params: dict[str, Any] = {"cwd": str(even)}
        if cursor is not None:
            params["cursor"] = cursor
        result = (await server.call("session/list", params))["result"]
        seen_ids += [entry["sessionId"] for entry in result["sessions"]]
        assert all(entry["cwd"] == str(even) and entry["updatedAt"] for entry in result["sessions"])
        pages += 1
        cursor = result.get("nextCursor")
        if cursor is None:
            break
    assert len(seen_ids) == len(set(seen_ids)) == 125 and pages > 1
    assert (await server.call("session/list", {"cwd": "/nowhere"}))["result"] == {"sessions": []}
    assert (await server.call("session/list", {"cursor": "garbage"}))["error"]["code"] == -32602


async def test_delete_removes_a_session_from_list_and_load_and_unknown_ids_succeed(
    start_server: StartServer, tmp_path: Path
) -> None:
    server = await start(start_server, tmp_path)
    session = await server.new_session()
    await server.response(await server.prompt(session, [{"say": "x"}]))
    assert (await server.call("session/delete", {"sessionId": session}))["result"] == {}
    assert session not in [s["sessionId"] for s in (await server.call("session/list", {}))["result"]["sessions"]]
    assert (await server.call("session/load", {"sessionId": session, "cwd": "/tmp", "mcpServers": []}))["error"][
        "code"
    ] == -32002
    assert (await server.call("session/delete", {"sessionId": "sess_never_existed"}))["result"] == {}


async def test_resume_continues_without_replaying(start_server: StartServer, tmp_path: Path) -> None:
    first = await start(start_server, tmp_path)
    session = await first.new_session()
    await first.response(await first.prompt(session, [{"say": "earlier"}]))
    await first.close()
    second = await start(start_server, tmp_path)
    start_index = len(second.received)
    response = await second.call("session/resume", {"sessionId": session, "cwd": "/tmp"})
    assert set(response["result"]) == {"modes", "configOptions"}
    assert not [
        m
        for m in second.received[start_index:]
        if m.get("method") == "session/update" and m["params"]["update"]["sessionUpdate"] not in SESSION_SCOPED
    ]
    assert (await second.response(await second.prompt(session, [{"say": "on"}])))["result"]["stopReason"] == (
        "end_turn"
    )


async def test_a_corrupt_store_is_left_untouched_reported_and_new_sessions_still_work(
    start_server: StartServer, tmp_path: Path
) -> None:
    store = tmp_path / "sessions.sqlite3"
    store.write_bytes(b"this is not a database" * 100)
    before = store.read_bytes()
    server = await start(start_server, tmp_path)
    session = await server.new_session()
    assert (await server.response(await server.prompt(session, [{"say": "fine"}])))["result"]["stopReason"] == (
        "end_turn"
    )
    refused = await server.call("session/load", {"sessionId": session, "cwd": "/tmp", "mcpServers": []})
    assert "store" in refused["error"]["message"]
    await server.close()
    assert store.read_bytes() == before
    assert "session store is unavailable" in server.stderr_text


async def test_a_postgresql_store_that_cannot_be_reached_is_reported_without_its_password_and_sessions_still_work(
    start_server: StartServer, tmp_path: Path
) -> None:
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    url = f"postgresql://acp:pw-never-logged-123@127.0.0.1:{port}/acp"
    server = await start(start_server, StoreAt(tmp_path, url))
    session = await server.new_session()
    assert (await server.response(await server.prompt(session, [{"say": "fine"}])))["result"]["stopReason"] == (
        "end_turn"
    )
    refused = await server.call("session/load", {"sessionId": session, "cwd": "/tmp", "mcpServers": []})
    assert "store" in refused["error"]["message"]
    await server.close()
    assert "session store is unavailable" in server.stderr_text
    assert f"@127.0.0.1:{port}/acp: cannot be reached" in server.stderr_text  # the URL, its password replaced
    assert "pw-never-logged-123" not in server.stderr_text
    assert not (tmp_path / "sessions.sqlite3").exists()  # never the SQLite file in its place


async def test_no_store_keeps_sessions_in_memory_and_advertises_no_loading(
    start_server: StartServer, tmp_path: Path
) -> None:
    server = await start_server("--model", "scripted", "--no-store", env={"ACP_SERVER_STATE_DIR": str(tmp_path)})
    capabilities = (await server.initialize())["result"]["agentCapabilities"]
    assert capabilities["loadSession"] is False and "list" not in capabilities["sessionCapabilities"]
    await server.new_session()
    assert not await anyio.Path(tmp_path / "sessions.sqlite3").exists()


@pytest.fixture
def model() -> Iterator[FakeOpenAI]:
    with FakeOpenAI() as server:
        yield server


async def test_the_model_sees_the_loaded_history(start_server: StartServer, model: FakeOpenAI, tmp_path: Path) -> None:
    model.set_default(text_reply("noted"))
    env = {"OPENAI_API_KEY": "sk-test", "ACP_SERVER_STATE_DIR": str(tmp_path)}
    args = ("--model", "openai:fake", "--base-url", model.base_url)
    first = await start_server(*args, env=env)
    await first.initialize()
    session = await first.new_session()
    await first.call("session/prompt", {"sessionId": session, "prompt": [{"type": "text", "text": "my name is Ada"}]})
    await first.close()
    second = await start_server(*args, env=env)
    await second.initialize()
    await load(second, session)
    await second.call("session/prompt", {"sessionId": session, "prompt": [{"type": "text", "text": "who am I?"}]})
    # The turn's request, exactly: a background title request (this server's, or the first server's finishing late)
    # asks about a prompt too, but under the title instructions.
    [asked] = [
        r.body["messages"]
        for r in model.requests
        if r.body["messages"][-1].get("content") == "who am I?"
        and {"role": "system", "content": TITLE_INSTRUCTIONS} not in r.body["messages"]
    ]
    assert {"role": "user", "content": "my name is Ada"} in asked


async def test_fork_copies_the_conversation_into_a_new_session_and_leaves_the_source(
    start_server: StartServer, tmp_path: Path
) -> None:
    server = await start(start_server, tmp_path)
    source = await server.new_session()
    await server.response(await server.prompt(source, [{"say": "shared past"}]))
    forked = await server.call("session/fork", {"sessionId": source, "cwd": "/tmp"})
    fork_id = forked["result"]["sessionId"]
    assert fork_id != source and set(forked["result"]) == {"sessionId", "modes", "configOptions"}
    await server.response(await server.prompt(fork_id, [{"say": "fork only"}]))
    _, replayed_fork = await load(server, fork_id)
    _, replayed_source = await load(server, source)
    fork_texts = [u["content"]["text"] for u in replayed_fork if u["sessionUpdate"] == "agent_message_chunk"]
    source_texts = [u["content"]["text"] for u in replayed_source if u["sessionUpdate"] == "agent_message_chunk"]
    assert fork_texts == ["shared past", "fork only"]
    assert source_texts == ["shared past"]
    unknown = await server.call("session/fork", {"sessionId": "sess_nope", "cwd": "/tmp"})
    assert unknown["error"]["code"] == -32002


async def test_a_store_written_before_the_turn_records_is_upgraded_and_replays_as_before(
    start_server: StartServer, tmp_path: Path
) -> None:
    """fixtures/stores/v1: written by the server of commit 04257f4 (schema 1: stored update payloads), with what that
    server replayed (tests/support/make_legacy_store.py made both). Today's server upgrades it when it opens it."""
    shutil.copyfile(LEGACY_STORE / "sessions.sqlite3", tmp_path / "sessions.sqlite3")
    expected = orjson.loads((LEGACY_STORE / "expected.json").read_bytes())
    server = await start(start_server, tmp_path)
    roles = ("completed", "cancelled", "failed", "interrupted")
    for role in roles:
        old = expected[role]
        response, replayed = await load(server, old["sessionId"], str(tmp_path))
        assert replayed == [u for u in old["updates"] if u["sessionUpdate"] not in SESSION_SCOPED], role
        assert response["result"]["modes"] == old["response"]["modes"], role
    listed = (await server.call("session/list", {}))["result"]["sessions"]
    shown = [(s["sessionId"], s.get("title")) for s in expected["list"]["sessions"]]
    assert [(s["sessionId"], s.get("title")) for s in listed] == shown
    # The upgraded sessions go on: the model is given their history, the interrupted turn's included.
    interrupted = expected["interrupted"]["sessionId"]
    again = await server.response(await server.prompt(interrupted, [{"say": "going on"}]))
    assert again["result"]["stopReason"] == "end_turn"
    await server.close()
    second = await start(start_server, tmp_path)  # upgraded once: the next server reads schema 2 as it is
    _, replayed = await load(second, interrupted, str(tmp_path))
    old_replay = [u for u in expected["interrupted"]["updates"] if u["sessionUpdate"] not in SESSION_SCOPED]
    assert replayed[: len(old_replay)] == old_replay
    assert [u["content"]["text"] for u in replayed[len(old_replay) :] if "content" in u] == ["go", "going on"]


async def test_the_scripted_turn_counter_goes_on_after_a_restart_and_load_and_in_a_fork(
    start_server: StartServer, tmp_path: Path
) -> None:
    # docs/guide.md, "The scripted model": "the n-th prompt of a session plays turn n". Counted from the session's
    # stored turns, so a loaded session and a fork of it go on from where the conversation is, not from turn 1 again.
    script = tmp_path / "turns.json"
    script.write_text(orjson.dumps({"turns": [[{"say": f"turn {n}"}] for n in range(1, 7)]}).decode())
    state = tmp_path / "state"
    state.mkdir()
    model = f"scripted:{script}"

    async def played(client: RawClient, session: str) -> list[str]:
        before = len(client.texts(session))
        response = await client.call(
            "session/prompt", {"sessionId": session, "prompt": [{"type": "text", "text": "go"}]}
        )
        assert response["result"] == {"stopReason": "end_turn"}, response
        return client.texts(session)[before:]

    first = await start_server("--model", model, "--test-mode", env={"ACP_SERVER_STATE_DIR": str(state)})
    await first.initialize()
    session = await first.new_session()
    assert await played(first, session) == ["turn 1"]
    # Not turns of the model: a slash command, and a prompt cancelled while it waited behind another (the turn it
    # waited behind ran, held on a gate, and counts).
    title = await first.call("session/prompt", {"sessionId": session, "prompt": [{"type": "text", "text": "/title T"}]})
    assert title["result"] == {"stopReason": "end_turn"}, title
    compact = {"sessionId": session, "prompt": [{"type": "text", "text": "/compact"}]}  # a history it replaces
    assert (await first.call("session/prompt", compact))["result"] == {"stopReason": "end_turn"}
    queue = {"sessionId": session, "configId": "prompt_policy", "value": "queue"}
    assert "result" in await first.call("session/set_config_option", queue)
    held = await first.prompt(session, [{"say": "holding"}, {"gate": "g"}])
    await first.wait_for(lambda m: m.get("params", {}).get("update", {}).get("content", {}).get("text") == "holding")
    waiting = await first.request("session/prompt", {"sessionId": session, "prompt": [{"type": "text", "text": "go"}]})
    await first.cancel(session)
    for request_id in (held, waiting):
        assert (await first.response(request_id))["result"] == {"stopReason": "cancelled"}
    assert await played(first, session) == ["turn 3"]
    assert (await first.close())[0] == 0

    second = await start_server("--model", model, "--test-mode", env={"ACP_SERVER_STATE_DIR": str(state)})
    await second.initialize()
    loaded, _ = await load(second, session)
    assert "result" in loaded, loaded
    assert await played(second, session) == ["turn 4"]
    forked = await second.call("session/fork", {"sessionId": session, "cwd": "/tmp"})
    fork = forked["result"]["sessionId"]
    assert await played(second, fork) == ["turn 5"], "a fork continues the count of its parent's turns"
    assert await played(second, session) == ["turn 5"], "and the parent goes on by its own"
