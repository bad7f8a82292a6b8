"""Pruning the session store (SessionStore.prune) on real SQLite files: sessions that never got a prompt go after the
grace period, the retention settings remove the old and the surplus, subagents' sessions go with their parent, and
a session a live process has open is never removed, whichever process prunes."""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from acp_server.store import STORE_FILENAME, Retention, SessionStore
from acp_server.store.records import utc_stamp

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "state" / STORE_FILENAME


@pytest.fixture
async def store(db: Path) -> AsyncIterator[SessionStore]:
    opened = SessionStore.open(db)
    yield opened
    await opened.aclose()


def age(db: Path, session_id: str, *, days: float = 0, minutes: float = 0) -> None:
    """Make a session look created and last updated that long ago, as another process would see the file."""
    stamp = utc_stamp(datetime.now(UTC) - timedelta(days=days, minutes=minutes))
    conn = sqlite3.connect(db, isolation_level=None)
    try:
        conn.execute("UPDATE sessions SET created_at = ?, updated_at = ? WHERE id = ?", (stamp, stamp, session_id))
    finally:
        conn.close()


def ids(db: Path) -> set[str]:
    conn = sqlite3.connect(db, isolation_level=None)
    try:
        return {row[0] for row in conn.execute("SELECT id FROM sessions")}
    finally:
        conn.close()


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
    store: SessionStore, db: Path
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
    store: SessionStore, db: Path
) -> None:
    other = SessionStore.open(db)  # another server process on the same file (same pid, its own owner)
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


async def test_a_process_that_exits_lets_go_of_its_sessions(store: SessionStore, db: Path) -> None:
    other = SessionStore.open(db)
    other.create_session("left-open", "/w")
    await other.aclose()  # exits without session/close
    age(db, "left-open", minutes=30)
    assert (await store.prune(Retention())).empty == ("left-open",)


async def test_retention_removes_the_old_and_the_surplus_with_their_subagents(store: SessionStore, db: Path) -> None:
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
    conn = sqlite3.connect(db, isolation_level=None)
    try:
        assert conn.execute("SELECT count(*) FROM turns WHERE session_id IN ('s0', 's1', 'child')").fetchone() == (0,)
    finally:
        conn.close()
    assert await store.load("s2") is not None


async def test_no_limits_keep_everything_that_was_prompted(store: SessionStore, db: Path) -> None:
    await prompted(store, "ancient")
    store.release("ancient")
    await store.flush()
    age(db, "ancient", days=3650)
    assert (await store.prune(Retention(max_age_days=0, max_count=0))).total == 0
    assert ids(db) == {"ancient"}
