"""The session store's promises on both backends (the SQLite file, PostgreSQL for replicas), and what only PostgreSQL
has to keep: a commit held up by another connection's lock fails, is kept and is committed by the next flush in
order; a change whose commit failed is answered an error and never committed later; replicas that open a new
database together create its schema once; a database that is not ours, or is newer, is left untouched; a server
that cannot be reached is reported without the URL's password; a connection lost is replaced by the pool, and a
server restart fails what it must and no more.
tests/unit/store/test_store.py runs the store's jobs on both (`on_both_backends`)."""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import anyio
import pytest

from acp_server.errors import ChangeNotSavedError, StoreUnavailable
from acp_server.store import AgentText, SessionStore
from acp_server.store.postgres import PgWorker
from tests.support.harness import scaled
from tests.support.postgres import PostgresServer, count_rows_at
from tests.unit.store.test_store import count_rows, location, on_both_backends, open_at

pytestmark = pytest.mark.timeout(60)

__all__ = ["location"]  # the fixture, imported to be used here


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "state" / "sessions.sqlite3"


@pytest.fixture
async def store(location: Path | str) -> AsyncIterator[SessionStore]:
    opened = await open_at(location)
    yield opened
    await opened.aclose()


@contextlib.contextmanager
def write_lock(store: SessionStore, location: Path | str) -> Iterator[None]:
    """The store's tables locked by another connection (another process's or replica's long transaction), with the
    store's wait for a lock cut to 50 ms, so its next commit fails as one held up past its busy or lock timeout."""
    if isinstance(location, Path):
        store._conn.execute("PRAGMA busy_timeout = 50")
        other = sqlite3.connect(location, isolation_level=None)
        try:
            other.execute("BEGIN IMMEDIATE")
            yield
        finally:
            other.execute("ROLLBACK")
            other.close()
        return
    import psycopg

    assert isinstance(store._worker, PgWorker)
    store._worker.lock_timeout_ms = 50
    with psycopg.connect(location) as pg_other:
        pg_other.execute("LOCK TABLE sessions, turns, updates IN EXCLUSIVE MODE")
        yield
        pg_other.rollback()


def text(value: str) -> AgentText:
    return AgentText("msg_a", value)


@on_both_backends
async def test_a_flush_held_up_by_another_connections_lock_keeps_its_batch_and_the_next_commits_it_in_order(
    store: SessionStore, location: Path | str
) -> None:
    store.create_session("s", "/w")
    turn = store.begin_turn("s", [], "")
    turn.append(text("first"))
    with write_lock(store, location):
        assert not await store.flush()
        turn.append(text("second"))
        assert count_rows(location, "SELECT count(*) FROM sessions") == 0  # the failed transaction left nothing
    assert await store.flush()
    loaded = await store.load("s")
    assert loaded is not None
    assert loaded.turns[0].entries == [text("first"), text("second")]


@on_both_backends
async def test_a_change_whose_commit_failed_is_answered_an_error_and_never_committed_while_the_rest_is_kept(
    store: SessionStore, location: Path | str
) -> None:
    store.create_session("s", "/w")
    assert await store.flush()
    turn = store.begin_turn("s", [], "")
    turn.append(text("kept"))
    with write_lock(store, location), pytest.raises(ChangeNotSavedError):
        await store.commit_change(lambda: store.set_mode("s", "bypass"))
    await store.commit_change(lambda: store.set_title("s", "named"))
    loaded = await store.load("s")
    assert loaded is not None
    assert (loaded.session.mode, loaded.session.title) == ("default", "named")
    assert loaded.turns[0].entries == [text("kept")]


# --- PostgreSQL only ---


@pytest.fixture
def database(postgres: PostgresServer) -> Iterator[str]:
    url = postgres.database()
    try:
        yield url
    finally:
        postgres.drop(url)


async def test_replicas_opening_a_new_database_together_create_its_schema_once(database: str) -> None:
    stores: list[SessionStore] = []

    async def open_one() -> None:
        stores.append(await SessionStore.connect(database))

    with anyio.fail_after(scaled(30)):
        async with anyio.create_task_group() as tg:
            for _ in range(6):
                tg.start_soon(open_one)
    try:
        assert len(stores) == 6
        assert count_rows_at(database, "SELECT count(*) FROM acp_store_schema") == 1
        assert count_rows_at(database, "SELECT count(*) FROM owners") == 6
        stores[0].create_session("s", "/w")
        assert await stores[0].flush()
        assert [s.session_id for s in (await stores[5].list_sessions()).sessions] == ["s"]
    finally:
        for opened in stores:
            await opened.aclose()
    assert count_rows_at(database, "SELECT count(*) FROM owners") == 0  # each released its lease at close


def execute_at(url: str, sql: str) -> None:
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(sql)


async def test_a_database_of_a_newer_schema_or_with_tables_of_another_application_is_refused_untouched(
    database: str, postgres: PostgresServer
) -> None:
    opened = await SessionStore.connect(database)
    await opened.aclose()
    execute_at(database, "UPDATE acp_store_schema SET version = version + 1")
    with pytest.raises(StoreUnavailable, match="newer acp-server"):
        await SessionStore.connect(database)
    assert count_rows_at(database, "SELECT count(*) FROM owners") == 0

    other = postgres.database()
    try:
        execute_at(other, "CREATE TABLE sessions (id integer)")
        with pytest.raises(StoreUnavailable, match="not an acp-server store"):
            await SessionStore.connect(other)
        assert count_rows_at(other, "SELECT count(*) FROM pg_tables WHERE schemaname = 'public'") == 1
    finally:
        postgres.drop(other)


async def test_a_server_that_cannot_be_reached_is_reported_without_the_password(unused_port: int) -> None:
    url = f"postgresql://someone:hunter2-secret@127.0.0.1:{unused_port}/db?password=other-secret"
    with anyio.fail_after(scaled(30)), pytest.raises(StoreUnavailable) as raised:
        await SessionStore.connect(url)
    message = str(raised.value)
    assert "cannot be reached" in message and f"127.0.0.1:{unused_port}" in message
    assert "hunter2" not in message and "other-secret" not in message
    assert "someone:***@" in message


@pytest.fixture
def unused_port() -> int:
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
    return port


async def test_a_connection_the_server_ended_is_replaced_and_the_next_flush_commits(database: str) -> None:
    store = await SessionStore.connect(database)
    try:
        store.create_session("s", "/w")
        assert await store.flush()
        execute_at(
            database,
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = 'acp-server'",
        )
        await store.commit_change(lambda: store.set_title("s", "after the server ended our connection"))
        loaded = await store.load("s")
        assert loaded is not None and loaded.session.title == "after the server ended our connection"
    finally:
        await store.aclose()


@pytest.mark.timeout(90)
async def test_the_server_restarting_fails_a_change_with_an_error_and_the_store_recovers_without_reopening(
    database: str, postgres: PostgresServer
) -> None:
    """PostgreSQL restarts under a running store: a change asked for while it is down is answered an error (after
    the pool's bounded wait) and never committed later; the streamed records buffered then are kept; once it is back,
    the pool connects again and the next change commits, with them, without the store being opened again."""
    store = await SessionStore.connect(database)
    try:
        store.create_session("s", "/w")
        turn = store.begin_turn("s", [], "")
        assert await store.flush()
        postgres.stop(remove=False)
        try:
            turn.append(text("while it was down"))
            with anyio.fail_after(scaled(30)), pytest.raises(ChangeNotSavedError):
                await store.commit_change(lambda: store.set_mode("s", "bypass"))
        finally:
            postgres.start()
        with anyio.fail_after(scaled(30)):
            await store.commit_change(lambda: store.set_title("s", "after the restart"))
        loaded = await store.load("s")
        assert loaded is not None
        assert (loaded.session.mode, loaded.session.title) == ("default", "after the restart")
        assert loaded.turns[0].entries == [text("while it was down")]
    finally:
        await store.aclose()
