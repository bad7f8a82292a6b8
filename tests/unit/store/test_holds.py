"""Holds (which live process has a session open) on real SQLite files, and the same on PostgreSQL (`on_both_backends`,
where the check and the deletion are one transaction under an advisory lock): a load writes its hold only when it
succeeds, and `acp-server sessions delete` checks the holds and deletes in one write transaction, so a session/load
of another process cannot slip in between and have the session deleted under it."""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from acp_server.errors import StoreUnavailable
from acp_server.store import STORE_FILENAME, SessionStore
from tests.conftest import STORE_BACKENDS
from tests.support.postgres import PostgresServer
from tests.support.stores import StoreAt

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def db(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Path | str]:
    """The SQLite file; with `on_both_backends`, also (`postgres`) the URL of a new PostgreSQL database of its own."""
    if getattr(request, "param", "sqlite") == "sqlite":
        yield tmp_path / "state" / STORE_FILENAME
        return
    server: PostgresServer = request.getfixturevalue("postgres")
    url = server.database()
    try:
        yield url
    finally:
        server.drop(url)


on_both_backends = pytest.mark.parametrize("db", STORE_BACKENDS, indirect=True)


async def open_at(db: Path | str) -> SessionStore:
    return SessionStore.open(db) if isinstance(db, Path) else await SessionStore.connect(db)


@pytest.fixture
async def store(db: Path | str) -> AsyncIterator[SessionStore]:
    opened = await open_at(db)
    yield opened
    await opened.aclose()


@pytest.fixture
async def editor(db: Path | str) -> AsyncIterator[SessionStore]:
    """Another server process on the same store (same pid, its own owner): an editor window."""
    opened = await open_at(db)
    yield opened
    await opened.aclose()


def holds(db: Path | str) -> set[tuple[str, str]]:
    found = StoreAt(db.parent, None) if isinstance(db, Path) else StoreAt(Path(), db)
    return {(row[0], row[1]) for row in found.rows("SELECT session_id, owner_id FROM holds")}


async def stored_closed(store: SessionStore, session_id: str) -> None:
    """A session stored by `store` and closed again: nobody holds it."""
    store.create_session(session_id, "/w")
    turn = store.begin_turn(session_id, [{"type": "text", "text": "hi"}], "hi")
    store.finish_turn(turn, "completed", stop_reason="end_turn")
    store.release(session_id)
    await store.flush()


@on_both_backends
async def test_a_load_of_an_unknown_or_deleted_session_leaves_no_hold(store: SessionStore, db: Path | str) -> None:
    await stored_closed(store, "gone")
    store.delete("gone")
    await store.flush()
    assert await store.load("never-was", hold=True) is None
    assert await store.load("gone", hold=True) is None
    assert holds(db) == set()


async def test_an_unreadable_session_refused_on_load_leaves_no_hold(store: SessionStore, db: Path) -> None:
    await stored_closed(store, "s")
    conn = sqlite3.connect(db, isolation_level=None)
    conn.execute("UPDATE updates SET data = x'00ff00ff'")
    conn.close()
    with pytest.raises(StoreUnavailable, match="session s is unreadable"):
        await store.load("s", hold=True)
    assert holds(db) == set()


@on_both_backends
async def test_a_successful_load_holds_the_session_and_a_plain_read_does_not(
    store: SessionStore, editor: SessionStore, db: Path | str
) -> None:
    await stored_closed(store, "s")
    assert await store.load("s") is not None
    assert holds(db) == set()
    assert await editor.load("s", hold=True) is not None
    assert holds(db) == {("s", editor.owner_id)}


@on_both_backends
async def test_delete_refuses_a_session_another_process_holds_and_force_deletes_it(
    store: SessionStore, editor: SessionStore
) -> None:
    await stored_closed(store, "s")
    assert await editor.load("s", hold=True) is not None
    assert await store.delete_unless_held("s") == "held"
    assert await store.load("s") is not None
    assert await store.delete_unless_held("s", force=True) == "deleted"
    assert await store.load("s") is None
    assert await store.delete_unless_held("s") == "unknown"
    assert await store.delete_unless_held("never-was", force=True) == "unknown"


@on_both_backends
async def test_delete_of_a_session_nobody_holds_removes_it_for_every_process(
    store: SessionStore, editor: SessionStore
) -> None:
    await stored_closed(store, "s")
    assert await store.delete_unless_held("s") == "deleted"
    assert await editor.load("s", hold=True) is None


async def test_a_load_cannot_write_its_hold_between_deletes_check_and_the_deletion(
    store: SessionStore, db: Path
) -> None:
    """The race a reviewer found: an editor's session/load writes its hold right after `sessions delete` looked at the
    holds. Here the "editor" tries exactly then, from its own connection: the delete's transaction has the write lock,
    so the hold cannot be written until the session is gone (the load then finds nothing)."""
    await stored_closed(store, "s")
    attempts: list[str] = []

    def editor_loads_now(statement: str) -> None:
        if "FROM holds WHERE session_id" in statement and not attempts:
            other = sqlite3.connect(db, isolation_level=None, timeout=0)
            try:
                other.execute("INSERT INTO holds (session_id, owner_id) VALUES ('s', 'an-editor')")
                attempts.append("held")
            except sqlite3.OperationalError as exc:
                attempts.append(str(exc))
            finally:
                other.close()

    store._conn.set_trace_callback(editor_loads_now)
    try:
        outcome = await store.delete_unless_held("s")
    finally:
        store._conn.set_trace_callback(None)
    assert attempts == ["database is locked"]
    assert outcome == "deleted"
    assert await store.load("s") is None
