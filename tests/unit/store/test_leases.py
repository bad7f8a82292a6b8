"""Leases on the PostgreSQL store (issue 24, item 2, the store's part): one replica at a time runs a session. A lease
is taken by one process and refused to the others while it lives (with who holds it and until when, by the
database's clock), renewed by its holder, released at once, taken over once it expired, with its epoch raised then
(what a turn's commits will be fenced by; it never goes back, not even after a release). Two processes racing for a
free session: exactly one wins. SQLite has no leases: every session is its process's, as today."""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from acp_server.errors import ChangeNotSavedError
from acp_server.runtime.model import Message
from acp_server.store import AgentText, SessionStore
from acp_server.store.postgres import IDLE_IN_TRANSACTION_S
from acp_server.store.records import Lease, LeaseHeld
from tests.support.harness import scaled
from tests.support.postgres import PostgresServer, count_rows_at

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def database(postgres: PostgresServer) -> Iterator[str]:
    url = postgres.database()
    try:
        yield url
    finally:
        postgres.drop(url)


@pytest.fixture
async def replicas(database: str) -> AsyncIterator[tuple[SessionStore, SessionStore]]:
    """Two processes on one database (the same pid here, each its own owner: two replicas)."""
    first = await SessionStore.connect(database)
    second = await SessionStore.connect(database)
    try:
        yield first, second
    finally:
        await first.aclose()
        await second.aclose()


async def test_a_live_lease_is_refused_to_another_replica_renewed_by_its_holder_and_released_at_once(
    replicas: tuple[SessionStore, SessionStore],
) -> None:
    first, second = replicas
    taken = await first.take_lease("s", 30)
    assert isinstance(taken, Lease) and taken.epoch == 1 and not taken.taken_over
    assert abs(taken.expires_at - (time.time() + 30)) < scaled(5)  # the database's clock, near ours on one machine
    refused = await second.take_lease("s", 30)
    assert isinstance(refused, LeaseHeld)
    assert (refused.owner_id, refused.expires_at) == (first.owner_id, taken.expires_at)
    assert 0 < refused.remaining <= 30  # by the database's clock, as the client is told
    again = await first.take_lease("s", 60)  # its holder renews it: same epoch, later expiry
    assert isinstance(again, Lease) and again.epoch == 1 and again.expires_at > taken.expires_at
    renewed = await first.renew_leases(60)
    assert set(renewed) == {"s"} and renewed["s"].epoch == 1
    assert await second.renew_leases(60) == {}
    assert await first.release_lease("s")
    assert not await second.release_lease("s")
    moved = await second.take_lease("s", 30)
    assert isinstance(moved, Lease) and moved.epoch == 2  # another holder: a new epoch
    assert not moved.taken_over  # it was released: no take-over


async def test_an_expired_lease_is_taken_over_with_a_new_epoch_and_its_old_holder_cannot_renew_it(
    replicas: tuple[SessionStore, SessionStore],
) -> None:
    first, second = replicas
    assert isinstance(await first.take_lease("s", 0.2), Lease)
    await anyio.sleep(0.3)  # past its expiry by the database's clock: the holder was paused, or died
    taken = await second.take_lease("s", 30)
    assert isinstance(taken, Lease) and taken.epoch == 2 and taken.taken_over  # what /metrics counts
    assert await first.renew_leases(30) == {}  # lost: its holder must stop running the session
    refused = await first.take_lease("s", 30)
    assert isinstance(refused, LeaseHeld) and refused.owner_id == second.owner_id


async def test_replicas_racing_for_a_free_session_leave_exactly_one_holder(database: str) -> None:
    stores = [await SessionStore.connect(database) for _ in range(5)]
    outcomes: list[Lease | LeaseHeld] = []

    async def take(store: SessionStore) -> None:
        outcomes.append(await store.take_lease("contested", 30))

    try:
        with anyio.fail_after(scaled(20)):
            async with anyio.create_task_group() as tg:
                for store in stores:
                    tg.start_soon(take, store)
        winners = [o for o in outcomes if isinstance(o, Lease)]
        assert len(winners) == 1 and winners[0].epoch == 1
        holder = {o.owner_id for o in outcomes if isinstance(o, LeaseHeld)}
        assert len(holder) == 1 and len(outcomes) == 5
    finally:
        for store in stores:
            await store.aclose()


async def test_a_replica_that_closes_releases_its_leases(database: str) -> None:
    first = await SessionStore.connect(database)
    assert isinstance(await first.take_lease("s", 30), Lease)
    await first.aclose()
    assert count_rows_at(database, "SELECT count(*) FROM leases WHERE expires_at > 0") == 0
    second = await SessionStore.connect(database)
    try:
        taken = await second.take_lease("s", 30)
        assert isinstance(taken, Lease) and taken.epoch == 2  # at once, and the epoch goes on growing
    finally:
        await second.aclose()


async def test_sqlite_has_no_leases_every_session_is_its_processs(tmp_path: Path) -> None:
    first = SessionStore.open(tmp_path / "sessions.sqlite3")
    second = SessionStore.open(tmp_path / "sessions.sqlite3")
    try:
        for store in (first, second):
            assert await store.take_lease("s", 30) == Lease("s", 0, math.inf)
            assert await store.renew_leases(30) == {}
            assert not await store.release_lease("s")
    finally:
        await first.aclose()
        await second.aclose()


def said(store_loaded: Any) -> list[str]:
    return [e.text for turn in store_loaded.turns for e in turn.entries if isinstance(e, AgentText)]


async def test_a_replica_that_lost_a_sessions_lease_commits_nothing_more_of_it_and_the_rest_as_usual(
    replicas: tuple[SessionStore, SessionStore],
) -> None:
    """Fencing: the paused replica's writes after a take-over (its turn's records and end, a title, a change it would
    acknowledge) never land, checked in the very transaction that would have written them; what it writes of the
    sessions it still holds is committed in that same flush."""
    first, second = replicas
    for session_id in ("taken", "kept"):
        first.create_session(session_id, "/w")
    assert isinstance(await first.take_lease("taken", 0.3), Lease)
    assert isinstance(await first.take_lease("kept", 30), Lease)
    turn = first.begin_turn("taken", [], "")
    turn.append(AgentText("m", "before"))
    assert await first.flush()
    await anyio.sleep(0.4)  # the lease expires: this replica was paused
    assert isinstance(await second.take_lease("taken", 30), Lease)

    turn.append(AgentText("m", "after the lease was lost"))
    first.finish_turn(turn, "completed", stop_reason="end_turn", messages=[Message("user", "")])
    first.set_title("taken", "stale")
    mine = first.begin_turn("kept", [], "")
    mine.append(AgentText("m", "still mine"))
    assert await first.flush()
    assert first.lost_leases == {"taken"}
    with pytest.raises(ChangeNotSavedError, match="another replica"):
        await first.commit_change(lambda: first.set_mode("taken", "bypass"))

    taken = await second.load("taken")
    assert taken is not None
    assert said(taken) == ["before"]
    assert [t.status for t in taken.turns] == ["running"]  # its end was never committed here
    assert (taken.session.title, taken.session.mode) == (None, "default")
    kept = await second.load("kept")
    assert kept is not None and said(kept) == ["still mine"]


async def test_a_replica_paused_in_the_middle_of_a_commit_holds_up_a_take_over_only_until_the_database_ends_it(
    replicas: tuple[SessionStore, SessionStore],
) -> None:
    """A commit checks its leases FOR SHARE (the fencing); a replica paused right after that check leaves its
    transaction open, the lease row locked. The database ends such a transaction after IDLE_IN_TRANSACTION_S (the
    store's connections set it), so another replica's take-over waits that long at most, not until the paused one
    wakes."""
    import psycopg

    first, second = replicas
    assert isinstance(await first.take_lease("s", 0.2), Lease)
    pool = first._worker._pool  # type: ignore[union-attr]  # the paused replica's own connection, as its commit has it
    locked, woken, taken = anyio.Event(), anyio.Event(), anyio.Event()
    outcome: list[Lease | LeaseHeld] = []

    async def paused_mid_commit() -> None:
        with contextlib.suppress(psycopg.Error):  # ended by the database, as a paused replica finds when it wakes
            async with pool.connection() as conn, conn.transaction():
                await conn.execute("SELECT 1 FROM leases WHERE session_id = 's' FOR SHARE")
                locked.set()
                await woken.wait()  # idle in its transaction, the row locked

    async def take_over() -> None:
        outcome.append(await second.take_lease("s", 30))
        taken.set()

    async with anyio.create_task_group() as group:
        group.start_soon(paused_mid_commit)
        await locked.wait()
        await anyio.sleep(0.3)  # the lease has expired meanwhile
        group.start_soon(take_over)
        with anyio.move_on_after(IDLE_IN_TRANSACTION_S + scaled(10)):
            await taken.wait()
        taken_in_time = list(outcome)
        woken.set()  # the paused replica wakes (for the broken case: the take then completes, and the test ends)
    assert len(taken_in_time) == 1 and isinstance(taken_in_time[0], Lease) and taken_in_time[0].epoch == 2
