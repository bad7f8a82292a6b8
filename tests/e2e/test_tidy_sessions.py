"""Sessions that stay tidy, end to end over stdio and through `acp-server sessions` on the real SQLite file: a title
from the first prompt when the model gives none (pushed, stored, listed), sessions that never got a prompt pruned
when a later server opens the store, the retention settings applied there, and never a session a live server has
open."""

from __future__ import annotations

import asyncio
import os
import subprocess
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import StartServer
from tests.support.fake_openai import FakeOpenAI, error, text_reply
from tests.support.harness import RawClient, isolated_env, scaled, server_command
from tests.support.stores import StoreAt

STORE = "sessions.sqlite3"


@pytest.fixture
def model() -> Iterator[FakeOpenAI]:
    with FakeOpenAI() as server:
        yield server


def titles(client: RawClient, session: str) -> list[str]:
    return [u["title"] for u in client.updates(session, "session_info_update")]


async def listed(client: RawClient) -> dict[str, str | None]:
    answer = await client.call("session/list", {})
    return {s["sessionId"]: s.get("title") for s in answer["result"]["sessions"]}


def ask(session: str, text: str) -> dict[str, Any]:
    return {"sessionId": session, "prompt": [{"type": "text", "text": text}]}


async def openai_server(start_server: StartServer, model: FakeOpenAI, state: Path) -> RawClient:
    env = {"OPENAI_API_KEY": "sk-test", "ACP_SERVER_STATE_DIR": str(state)}
    client = await start_server("--model", "openai:fake", "--base-url", model.base_url, env=env)
    await client.initialize()
    return client


async def test_a_model_that_gives_no_title_leaves_the_first_prompts_words_pushed_stored_and_listed(
    start_server: StartServer, model: FakeOpenAI, tmp_path: Path
) -> None:
    model.script(text_reply("Sure."), error(400, "titles are not my thing"))
    client = await openai_server(start_server, model, tmp_path)
    session = await client.new_session(str(tmp_path))
    first = "  Rename the\n\tparser module   and fix its imports please, all of them "
    assert (await client.call("session/prompt", ask(session, first), timeout=scaled(30)))["result"]
    await client.wait_for(lambda m: bool(titles(client, session)), timeout=scaled(10))
    assert titles(client, session) == ["Rename the parser module and fix"]  # one line, trimmed, six words
    assert (await listed(client))[session] == "Rename the parser module and fix"


async def test_a_server_that_ends_before_the_models_title_still_leaves_the_first_prompt_as_the_title(
    start_server: StartServer, model: FakeOpenAI, tmp_path: Path
) -> None:
    model.script(text_reply("Done."), text_reply("A title that never", ending="hang"))
    client = await openai_server(start_server, model, tmp_path)
    session = await client.new_session(str(tmp_path))
    assert (await client.call("session/prompt", ask(session, "explain the build"), timeout=scaled(30)))["result"]
    assert await model.wait_requests(2, timeout=scaled(10))  # the title request is open
    code, _ = await client.close()  # a one-shot client leaves right after its answer
    assert code == 0
    later = await start_server("--model", "echo", env={"ACP_SERVER_STATE_DIR": str(tmp_path)})
    await later.initialize()
    assert (await listed(later))[session] == "explain the build"


async def test_a_cancelled_first_turn_still_names_the_session_in_the_list_and_the_next_turn_titles_it(
    start_server: StartServer, tmp_path: Path
) -> None:
    server = await start_server("--model", "scripted", env={"ACP_SERVER_STATE_DIR": str(tmp_path)})
    await server.initialize()
    session = await server.new_session(str(tmp_path))
    request = server.prompt_message(
        session, [{"say": "on it"}, {"gate": "never"}], text="triage the failing nightly job"
    )
    await server.send(request)
    await server.wait_for(lambda m: "".join(server.texts(session)) == "on it")  # the turn has started
    await server.cancel(session)
    assert (await server.response(request["id"]))["result"] == {"stopReason": "cancelled"}
    assert (await listed(server))[session] == "triage the failing nightly job"
    assert titles(server, session) == []  # nothing is pushed after a cancelled turn's response
    second = server.prompt_message(session, [{"say": "ok"}], text="and now something else")
    assert (await server.call("session/prompt", second["params"]))["result"] == {"stopReason": "end_turn"}
    await server.wait_for(lambda m: bool(titles(server, session)))
    assert titles(server, session) == ["triage the failing nightly job"]  # from the first prompt


async def test_a_first_prompt_cancelled_before_it_started_does_not_become_the_title(
    start_server: StartServer, tmp_path: Path
) -> None:
    env = {"ACP_SERVER_STATE_DIR": str(tmp_path)}
    server = await start_server("--model", "scripted", "--prompt-policy", "queue", env=env)
    await server.initialize()
    session = await server.new_session(str(tmp_path))
    running = server.prompt_message(session, [{"say": "on it"}, {"gate": "never"}], text="triage the nightly job")
    await server.send(running)
    await server.wait_for(lambda m: "".join(server.texts(session)) == "on it")
    queued = server.prompt_message(session, [{"say": "never said"}], text="words of a prompt that never ran")
    await server.send(queued)
    await server.notify("$/cancel_request", {"requestId": queued["id"]})
    assert (await server.response(queued["id"]))["result"] == {"stopReason": "cancelled"}  # answered first
    assert (await listed(server))[session] is None
    await server.cancel(session)
    assert (await server.response(running["id"]))["result"] == {"stopReason": "cancelled"}
    assert (await listed(server))[session] == "triage the nightly job"


async def test_a_refused_first_prompt_does_not_become_the_title(
    start_server: StartServer, model: FakeOpenAI, tmp_path: Path
) -> None:
    model.script(text_reply("Sure."), error(400, "titles are not my thing"))
    client = await openai_server(start_server, model, tmp_path)
    session = await client.new_session(str(tmp_path))
    assert (await client.call("logout", {}))["result"] == {}
    refused = await client.call("session/prompt", ask(session, "refused words"))
    assert refused["error"]["code"] == -32000
    assert (await listed(client))[session] is None
    assert (await client.call("authenticate", {"methodId": "api-key"}))["result"] == {}
    assert (await client.call("session/prompt", ask(session, "explain the build"), timeout=scaled(30)))["result"]
    await client.wait_for(lambda m: bool(titles(client, session)), timeout=scaled(10))
    assert titles(client, session) == ["explain the build"]
    assert (await listed(client))[session] == "explain the build"


# --- pruning ---


def backdate(state: Path | StoreAt, session_id: str, *, days: float = 0, minutes: float = 0) -> None:
    stamp = (datetime.now(UTC) - timedelta(days=days, minutes=minutes)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    store = state if isinstance(state, StoreAt) else StoreAt(state, None)
    store.execute("UPDATE sessions SET created_at = ?, updated_at = ? WHERE id = ?", stamp, stamp, session_id)


def _row_state(store: StoreAt, session_id: str) -> tuple[Any, ...]:
    row = store.rows("SELECT created_at, updated_at, deleted FROM sessions WHERE id = ?", session_id)
    holds = store.rows("SELECT owner_id FROM holds WHERE session_id = ?", session_id)
    turns = store.rows("SELECT status FROM turns WHERE session_id = ?", session_id)
    return row, holds, turns


def stored(state: Path) -> set[str]:
    return StoreAt(state, None).sessions()


async def gone(state: Path, sessions: set[str]) -> None:
    """Wait (up to a safety bound) for a background prune to remove `sessions`; the caller asserts what is left."""
    for _ in range(int(scaled(5) / 0.05)):
        if not sessions & stored(state):
            return
        await asyncio.sleep(0.05)


async def echo_server(start_server: StartServer, state: Path, *args: str) -> RawClient:
    server = await start_server("--model", "echo", *args, env={"ACP_SERVER_STATE_DIR": str(state)})
    await server.initialize()
    return server


async def test_a_server_prunes_old_empty_and_expired_sessions_when_it_opens_the_store_but_never_a_live_ones(
    start_server: StartServer, tmp_path: Path
) -> None:
    first = await echo_server(start_server, tmp_path)
    marker = await first.new_session(str(tmp_path))  # never prompted: the next server's prune removes it
    abandoned = await first.new_session(str(tmp_path))  # never prompted
    recent = await first.new_session(str(tmp_path))  # never prompted, but young
    old = await first.new_session(str(tmp_path))
    assert (await first.call("session/prompt", ask(old, "from long ago")))["result"]
    used = await first.new_session(str(tmp_path))
    assert (await first.call("session/prompt", ask(used, "from last week")))["result"]
    assert (await first.close())[0] == 0
    backdate(tmp_path, marker, minutes=30)
    live = await echo_server(start_server, tmp_path)  # another editor window, still open
    held = await live.new_session(str(tmp_path))
    await gone(tmp_path, {marker})  # this window's own prune has run; what follows is the next server's doing
    assert marker not in stored(tmp_path)
    backdate(tmp_path, abandoned, minutes=30)
    backdate(tmp_path, held, minutes=30)
    backdate(tmp_path, old, days=40)
    backdate(tmp_path, used, days=7)
    later = await echo_server(start_server, tmp_path, "--keep-sessions-days", "30")
    assert stored(tmp_path) >= {abandoned, old}, "nothing is pruned before the store is needed"
    await later.new_session(str(tmp_path))  # opens the store: the prune runs beside it
    await gone(tmp_path, {abandoned, old})
    remaining = stored(tmp_path)
    assert abandoned not in remaining and old not in remaining
    assert {recent, used, held} <= remaining
    # The live window's session still works and is still stored.
    assert (await live.call("session/prompt", ask(held, "still here")))["result"] == {"stopReason": "end_turn"}
    assert held in await listed(later)


# --- acp-server sessions ---


def sessions_cli(state: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """`acp-server sessions ARGS` on the state directory `state` (and whatever store flags ARGS give)."""
    result = subprocess.run(
        server_command("sessions", *args),
        capture_output=True,
        text=True,
        env={**os.environ, **isolated_env(), "ACP_SERVER_STATE_DIR": str(state)},
        timeout=scaled(30),
        check=False,
    )
    assert result.stdout == "", "stdout belongs to the protocol, even in a subcommand"
    return result


async def test_the_sessions_command_lists_shows_deletes_and_prunes_the_servers_store(
    start_server: StartServer, tmp_path: Path, store_url: str | None
) -> None:
    """On the server's SQLite file, and with `--store-url` on its PostgreSQL database (given here as the flag, the
    server's as the variable)."""
    store = StoreAt(tmp_path, store_url)
    server = await start_server("--model", "echo", env=store.env())
    await server.initialize()
    flags = () if store_url is None else ("--store-url", store_url)

    def cli(action: str, *args: str) -> subprocess.CompletedProcess[str]:
        return sessions_cli(tmp_path, action, *flags, *args)

    talked = await server.new_session(str(tmp_path))
    assert (await server.call("session/prompt", ask(talked, "count the lines of main.py")))["result"]
    await server.wait_for(lambda m: bool(titles(server, talked)))
    empty = await server.new_session(str(tmp_path))
    assert store.sessions() == {talked, empty}
    shown = cli("list")
    assert shown.returncode == 0, shown.stderr
    rows = {line.split()[3]: line for line in shown.stderr.splitlines() if "sess_" in line}
    assert set(rows) == {talked, empty}
    assert "count the lines of main.py" in rows[talked] and " 1 " in rows[talked] and "[open]" in rows[talked]
    assert "(untitled)" in rows[empty]
    detail = cli("show", talked)
    assert detail.returncode == 0
    assert "> count the lines of main.py" in detail.stderr and "turn 1 (completed, end_turn)" in detail.stderr
    # A session a running server has open is kept unless forced; an unknown one is an error.
    refused = cli("delete", empty)
    assert refused.returncode == 1 and "open in a running acp-server" in refused.stderr
    assert cli("delete", "sess_nope").returncode == 1
    assert (await server.call("session/close", {"sessionId": empty}))["result"] == {}
    backdate(store, empty, minutes=30)
    pruned = cli("prune")
    assert pruned.returncode == 0 and empty in pruned.stderr and talked not in pruned.stderr, (
        pruned.stderr,
        _row_state(store, empty),  # what kept it, if it was kept
    )
    forced = cli("delete", "--force", talked)
    assert forced.returncode == 0 and f"deleted {talked}" in forced.stderr
    assert store.sessions() == set()
    assert "no sessions" in cli("list").stderr


def test_the_sessions_command_on_a_missing_store_says_so_and_creates_nothing(tmp_path: Path) -> None:
    state = tmp_path / "never"
    result = sessions_cli(state, "list")
    assert result.returncode == 0 and "no session store" in result.stderr
    assert not state.exists()
    assert sessions_cli(state, "show", "sess_x").returncode == 1
    assert sessions_cli(state).returncode == 2
