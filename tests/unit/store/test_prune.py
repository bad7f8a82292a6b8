"""Pruning the session store (SessionStore.prune) on real SQLite files and on PostgreSQL (every test on both):
sessions that never got a prompt go after the grace period, the retention settings remove the old and the surplus,
subagents' sessions go with their parent, and a session a live process has open is never removed, whichever process
prunes."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from acp_server.store import STORE_FILENAME, Retention, SessionStore
from acp_server.store.records import utc_stamp
from tests.conftest import STORE_BACKENDS
from tests.support.postgres import PostgresServer
from tests.support.stores import StoreAt

pytestmark = pytest.mark.timeout(60)


@pytest.fixture(params=STORE_BACKENDS)
def db(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Path | str]:
    """The store's SQLite file, or the URL of a new PostgreSQL database of this test's own."""
    if request.param == "sqlite":
        yield tmp_path / "state" / STORE_FILENAME
        return
    server: PostgresServer = request.getfixturevalue("postgres")
    url = server.database()
    try:
        yield url
    finally:
        server.drop(url)


async def open_at(db: Path | str) -> SessionStore:
    return SessionStore.open(db) if isinstance(db, Path) else await SessionStore.connect(db)


@pytest.fixture
async def store(db: Path | str) -> AsyncIterator[SessionStore]:
    opened = await open_at(db)
    yield opened
    await opened.aclose()


def rows(db: Path | str, sql: str, *params: Any) -> list[tuple[Any, ...]]:
    """What another process sees in the store."""
    return (
        StoreAt(db.parent, None).rows(sql, *params) if isinstance(db, Path) else StoreAt(Path(), db).rows(sql, *params)
    )


def age(db: Path | str, session_id: str, *, days: float = 0, minutes: float = 0) -> None:
    """Make a session look created and last updated that long ago, as another process would see the file."""
    stamp = utc_stamp(datetime.now(UTC) - timedelta(days=days, minutes=minutes))
    rows(db, "UPDATE sessions SET created_at = ?, updated_at = ? WHERE id = ?", stamp, stamp, session_id)


def ids(db: Path | str) -> set[str]:
    return {row[0] for row in rows(db, "SELECT id FROM sessions")}


async def prompted(store: SessionStore, session_id: str, **create: str) -> None:
    store.create_session(session_id, "/w", **create)  # type: ignore[arg-type]
    turn = store.begin_turn(session_id, [{"type": "text", "text": "hi"}], "hi")
    store.finish_turn(turn, "completed", stop_reason="end_turn")
    await store.flush()


async def closed(store: SessionStore, session_id: str) -> None:
    """A session created and closed again by this process: open in nobody's hands."""
    store.create_session(session_id, "/w")
    store.release(session_id)
    await store.flush()


async def test_sessions_that_never_got_a_prompt_go_after_the_grace_period_and_prompted_ones_stay(
    store: SessionStore, db: Path | str
) -> None:
    await closed(store, "old-empty")
    await closed(store, "new-empty")
    await prompted(store, "old-used")
    store.release("old-used")
    age(db, "old-empty", minutes=11)
    age(db, "old-used", minutes=11)
    pruned = await store.prune(Retention())
    assert pruned.empty == ("old-empty",) and pruned.total == 1
    assert ids(db) == {"new-empty", "old-used"}


async def test_a_session_a_live_process_has_open_is_never_pruned_until_it_lets_go(
    store: SessionStore, db: Path | str
) -> None:
    other = await open_at(db)  # another server process on the same file (same pid, its own owner)
    try:
        other.create_session("theirs", "/w")  # session/new there: never prompted, and old
        await other.flush()
        age(db, "theirs", days=400)
        assert (await store.prune(Retention(max_age_days=30, max_count=1, empty_after=0))).total == 0
        assert await other.load("theirs", hold=True) is not None  # session/load holds it too
        other.release("theirs")
        await other.flush()
        assert (await store.prune(Retention())).empty == ("theirs",)
    finally:
        await other.aclose()


async def test_a_process_that_exits_lets_go_of_its_sessions(store: SessionStore, db: Path | str) -> None:
    other = await open_at(db)
    other.create_session("left-open", "/w")
    await other.aclose()  # exits without session/close
    age(db, "left-open", minutes=30)
    assert (await store.prune(Retention())).empty == ("left-open",)


async def test_retention_removes_the_old_and_the_surplus_with_their_subagents(
    store: SessionStore, db: Path | str
) -> None:
    for index in range(4):
        await prompted(store, f"s{index}")
        store.release(f"s{index}")
    await prompted(store, "child", parent_session_id="s0")
    store.release("child")
    await store.flush()
    age(db, "s0", days=40)
    age(db, "s1", days=3)
    age(db, "s2", days=2)
    age(db, "s3", days=1)
    pruned = await store.prune(Retention(max_age_days=30, max_count=2))
    assert (pruned.expired, pruned.over_count) == (("s0",), ("s1",))
    assert ids(db) == {"s2", "s3"}  # the child went with its parent
    assert rows(db, "SELECT count(*) FROM turns WHERE session_id IN ('s0', 's1', 'child')") == [(0,)]
    assert await store.load("s2") is not None


async def test_no_limits_keep_everything_that_was_prompted(store: SessionStore, db: Path | str) -> None:
    await prompted(store, "ancient")
    store.release("ancient")
    await store.flush()
    age(db, "ancient", days=3650)
    assert (await store.prune(Retention(max_age_days=0, max_count=0))).total == 0
    assert ids(db) == {"ancient"}
