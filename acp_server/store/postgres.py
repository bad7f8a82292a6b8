"""The session store in PostgreSQL (`--store-url postgresql://...`): the same jobs as worker.py, for replicas.

SQLite (worker.py) is the store of one machine; replicas behind a load balancer share a database they all reach.
`PgWorker` does every job `StoreWorker` does (commit a batch, sweep the turns of owners that are gone, load, list,
fork, delete, prune, the final write), on the same tables and records, and `SessionStore` drives both the same way:
its buffers, its one commit for every flush waiting, and its promise (a response is written only after what it
acknowledges is committed) do not depend on the backend. Why it is shaped this way:

- **psycopg 3, async, pooled** (`psycopg_pool.AsyncConnectionPool`): the jobs run on the event loop, no thread per
  job, and a connection lost (the server restarted) is replaced by the pool: the connection is checked when it is
  taken, and a commit that failed on a broken one is kept and retried by the next flush, as SQLite's failed commit is.
  Imported only when a postgresql store URL is used: stdio start-up never loads it.
- **The buffered statements are SQLite's** (store.py writes them): `pg_sql` turns each into PostgreSQL's once (`?` ->
  `%s`, `INSERT OR REPLACE` and `OR IGNORE` -> `ON CONFLICT`), so SQLite's hot path is exactly what it was.
- **Migrations once** (`register`): a version table (`acp_store_schema`), created or upgraded under
  `pg_advisory_xact_lock` in one transaction, so replicas starting together migrate once and the others find it done;
  a database of a newer schema, or one whose tables are somebody else's, is refused and left untouched.
- **Housekeeping is serialized** by another advisory lock: a load that takes a hold, a prune and a `sessions delete`
  each check and write in one transaction under it, as SQLite's write lock makes them.
- **The URL is never shown whole**: every message names `redact_store_url`'s form (settings/store_url.py).
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Iterable
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
from psycopg_pool import AsyncConnectionPool

from acp_server.errors import StoreUnavailable
from acp_server.store.leases import Identity, owner_alive
from acp_server.store.records import (
    PRUNE_CANDIDATES,
    Lease,
    LeaseHeld,
    LoadedSession,
    Pruned,
    Retention,
    SessionOverview,
    SessionPage,
    SessionSummary,
    encode_cursor,
    prune_choice,
    utc_now,
    utc_stamp,
)
from acp_server.store.sqlite_file import SCHEMA_VERSION, SESSION_COLUMNS
from acp_server.store.turn_log import Batch, new_turn_id, update_rows
from acp_server.store.worker import DeleteOutcome, decode_loaded, session_summary, tombstone_ops

__all__ = ["PgWorker", "open_pool", "pg_sql"]

log = logging.getLogger(__name__)

# pg_advisory_xact_lock keys (any bigint; these spell "acpmigr" and "acphous"): the first around a migration, the
# second around the housekeeping that checks holds and then writes.
_MIGRATION_LOCK = 0x6163706D696772
_HOUSEKEEPING_LOCK = 0x61637068_6F7573
_CONNECT_TIMEOUT_S = 10
# How long a job waits for a connection from the pool (the server down, restarting) before it fails: a commit that
# fails is retried by the next flush, and a change it acknowledges is answered an error rather than waiting longer.
_POOL_WAIT_S = 5.0
# How long a commit waits for a row or table lock another connection holds before it fails (kept for the next flush),
# as SQLite's busy timeout (sqlite_file.py): another replica's long transaction is no reason to leave a response
# waiting without bound.
LOCK_TIMEOUT_MS = 5000
# A transaction left open by a replica paused in the middle of it (SIGSTOP, a frozen VM) keeps its row locks, among
# them the FOR SHARE on the leases its commit checks (the fencing): another replica's take-over of those sessions would
# wait until the paused one woke. The server ends such a connection after this long instead; the paused replica's
# commit then fails when it wakes, and is retried on a new connection, where the fencing leaves it out.
IDLE_IN_TRANSACTION_S = 5


async def _configure(conn: psycopg.AsyncConnection[Any]) -> None:
    await conn.execute(f"SET idle_in_transaction_session_timeout = '{IDLE_IN_TRANSACTION_S}s'")


_TABLES = ("sessions", "turns", "updates", "owners", "holds")

# The schema of SCHEMA_VERSION, as sqlite_file.py's: text columns that order (ids, times, directories) compare bytes
# (COLLATE "C"), as SQLite does, so pages and cursors come out the same whatever the database's locale.
_SCHEMA = f"""
CREATE TABLE acp_store_schema (one INTEGER PRIMARY KEY CHECK (one = 1), version INTEGER NOT NULL);
INSERT INTO acp_store_schema (one, version) VALUES (1, {SCHEMA_VERSION});
CREATE TABLE sessions (
    id TEXT COLLATE "C" PRIMARY KEY,
    cwd TEXT COLLATE "C" NOT NULL,
    additional_directories BYTEA NOT NULL,
    mcp_servers BYTEA NOT NULL,
    created_at TEXT COLLATE "C" NOT NULL,
    updated_at TEXT COLLATE "C" NOT NULL,
    title TEXT,
    mode TEXT NOT NULL,
    config BYTEA NOT NULL,
    parent_id TEXT COLLATE "C",
    forked_from TEXT COLLATE "C",
    deleted INTEGER NOT NULL DEFAULT 0,
    archived INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX sessions_recent ON sessions (updated_at, id) WHERE deleted = 0 AND parent_id IS NULL;
CREATE INDEX sessions_cwd ON sessions (cwd, updated_at, id) WHERE deleted = 0 AND parent_id IS NULL;
CREATE INDEX sessions_parent ON sessions (parent_id) WHERE parent_id IS NOT NULL;
CREATE TABLE turns (
    seq BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    turn_id TEXT COLLATE "C" NOT NULL UNIQUE,
    session_id TEXT COLLATE "C" NOT NULL,
    owner_id TEXT COLLATE "C" NOT NULL,
    status TEXT NOT NULL,
    stop_reason TEXT,
    error TEXT,
    started_at TEXT COLLATE "C" NOT NULL,
    ended_at TEXT COLLATE "C",
    prompt_text TEXT NOT NULL,
    messages BYTEA,
    replaces INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX turns_session ON turns (session_id, seq);
CREATE INDEX turns_running ON turns (owner_id) WHERE status = 'running';
CREATE TABLE updates (
    seq BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    turn_id TEXT COLLATE "C" NOT NULL,
    n INTEGER NOT NULL,
    data BYTEA NOT NULL
);
CREATE INDEX updates_turn ON updates (turn_id, seq);
CREATE TABLE owners (
    owner_id TEXT COLLATE "C" PRIMARY KEY,
    pid INTEGER NOT NULL,
    start_time TEXT,
    host TEXT NOT NULL,
    boot_id TEXT,
    pid_ns TEXT,
    started_at DOUBLE PRECISION NOT NULL,
    heartbeat DOUBLE PRECISION NOT NULL
);
CREATE TABLE holds (
    session_id TEXT COLLATE "C" NOT NULL,
    owner_id TEXT COLLATE "C" NOT NULL,
    PRIMARY KEY (session_id, owner_id)
);
CREATE TABLE leases (
    session_id TEXT COLLATE "C" PRIMARY KEY,
    owner_id TEXT COLLATE "C" NOT NULL,
    epoch BIGINT NOT NULL,
    expires_at DOUBLE PRECISION NOT NULL
);
"""
# Schema N -> N+1, for versions after the first PostgreSQL one (4): statements an older replica can run beside
# (docs/postgres.md, "Upgrades"). None yet.
_UPGRADES: dict[int, tuple[str, ...]] = {}

_SESSION_FIELDS = (*(c.strip() for c in SESSION_COLUMNS.split(",")), "deleted")
_REPLACE_SESSION = " ON CONFLICT (id) DO UPDATE SET " + ", ".join(
    [f"{c} = EXCLUDED.{c}" for c in _SESSION_FIELDS if c != "id"] + ["archived = 0"]  # a new row, as SQLite's REPLACE
)
# The database's clock, in seconds since the epoch: every replica judges a lease's expiry by the same clock.
_NOW = "extract(epoch from clock_timestamp())::float8"
# A lease taken (new), renewed (ours), or taken over (expired: the epoch grows); no row back when another live process
# holds it.
# Also whether it was taken over: from another owner whose lease expired unreleased (a release sets expiry 0). The
# prior row is read by the statement's own snapshot (enough for a counter: a racing change may be missed).
_TAKE_LEASE = (
    "WITH prior AS (SELECT owner_id, expires_at FROM leases WHERE session_id = %(session)s)"
    " INSERT INTO leases AS l (session_id, owner_id, epoch, expires_at)"
    f" VALUES (%(session)s, %(owner)s, 1, {_NOW} + %(ttl)s::float8)"
    " ON CONFLICT (session_id) DO UPDATE SET"
    " epoch = l.epoch + CASE WHEN l.owner_id = EXCLUDED.owner_id THEN 0 ELSE 1 END,"
    " owner_id = EXCLUDED.owner_id, expires_at = EXCLUDED.expires_at"
    f" WHERE l.owner_id = EXCLUDED.owner_id OR l.expires_at <= {_NOW}"
    " RETURNING l.epoch, l.expires_at,"
    " COALESCE((SELECT p.owner_id <> %(owner)s AND p.expires_at > 0 FROM prior p), false)"
)
_INSERT_UPDATE = (
    "INSERT INTO updates (turn_id, n, data) SELECT %s::text, %s::integer, %s::bytea"
    " WHERE EXISTS (SELECT 1 FROM turns WHERE turn_id = %s)"
)


@functools.lru_cache(maxsize=256)
def pg_sql(sql: str) -> str:
    """A statement store.py buffers (SQLite's dialect) in PostgreSQL's: the placeholders, and SQLite's `INSERT OR
    REPLACE` (a session row) and `INSERT OR IGNORE` (a hold) as `ON CONFLICT`. Cached: the statements are a few
    constants, so each is translated once."""
    if sql.startswith("INSERT OR REPLACE INTO sessions"):
        sql = "INSERT INTO sessions" + sql.removeprefix("INSERT OR REPLACE INTO sessions") + _REPLACE_SESSION
    elif sql.startswith("INSERT OR IGNORE INTO"):
        sql = "INSERT INTO" + sql.removeprefix("INSERT OR IGNORE INTO") + " ON CONFLICT DO NOTHING"
    return sql.replace("?", "%s")


async def open_pool(url: str) -> AsyncConnectionPool[psycopg.AsyncConnection[Any]]:
    """A pool of connections to `url`, opened (one connection made, within the connect timeout). Raises
    psycopg.Error (the pool's timeout is one) when the server cannot be reached or refuses."""
    # One connection first, outside the pool: a server that refuses (down, a wrong password) is reported at once,
    # where the pool would retry until its timeout and the first `session/new` would wait for it.
    probe = await psycopg.AsyncConnection.connect(url, connect_timeout=_CONNECT_TIMEOUT_S)
    await probe.close()
    pool: AsyncConnectionPool[psycopg.AsyncConnection[Any]] = AsyncConnectionPool(
        url,
        min_size=1,
        max_size=2,  # one job at a time (SessionStore's lock), and a spare while a broken one is replaced
        open=False,
        # Autocommit: every job opens its own transaction (`conn.transaction()`), nothing is left open between jobs.
        kwargs={"autocommit": True, "connect_timeout": _CONNECT_TIMEOUT_S, "application_name": "acp-server"},
        # Checked when taken: after the server restarted, the next job gets a new connection instead of failing.
        check=AsyncConnectionPool.check_connection,
        configure=_configure,
        timeout=_POOL_WAIT_S,
        name="acp-server-store",
    )
    try:
        await pool.open(wait=True, timeout=_CONNECT_TIMEOUT_S)
    except BaseException:
        await pool.close()
        raise
    return pool


Conn = psycopg.AsyncConnection[Any]


class PgWorker:
    """The store's connection pool and the transactions run on it; `StoreWorker`'s jobs, awaited on the event loop.
    `SessionStore` runs one job at a time (under its lock)."""

    errors: tuple[type[Exception], ...] = (psycopg.Error,)

    def __init__(
        self,
        where: str,
        pool: AsyncConnectionPool[psycopg.AsyncConnection[Any]],
        identity: Identity,
        owner_id: str,
        stale: float,
    ) -> None:
        self.where = where  # the URL without its password
        self.owner_id = owner_id
        self._pool = pool
        self._identity = identity
        self._stale_after = stale
        self.lock_timeout_ms = LOCK_TIMEOUT_MS  # a test may shorten it

    @staticmethod
    def transient(exc: Exception) -> bool:
        """A connection lost, a server restarting, the pool's wait for a connection: the next flush may succeed."""
        return isinstance(exc, psycopg.OperationalError)

    # -- opening and closing --

    async def register(self) -> int:
        """While the store opens: create the schema in a new database (or upgrade an older one) under the migration
        lock, take this process's lease and mark turns of owners that are gone `interrupted`. How many were marked."""
        async with self._pool.connection() as conn:
            async with conn.transaction():
                await conn.execute("SELECT pg_advisory_xact_lock(%s)", (_MIGRATION_LOCK,))
                version = await self._version(conn)
                if version == 0:
                    await conn.execute(_SCHEMA)
                    log.info("session store %s: schema %d created", self.where, SCHEMA_VERSION)
                elif version > SCHEMA_VERSION:
                    raise StoreUnavailable(
                        f"session store {self.where}: written by a newer acp-server (schema {version} >"
                        f" {SCHEMA_VERSION}); it was left untouched"
                    )
                while version < SCHEMA_VERSION and version != 0:
                    for statement in _UPGRADES[version]:
                        await conn.execute(statement)
                    version += 1
                    await conn.execute("UPDATE acp_store_schema SET version = %s", (version,))
            async with conn.transaction():
                await self._heartbeat(conn, time.time())
                return await self._sweep(conn, time.time())

    async def _version(self, conn: Conn) -> int:
        row = await (await conn.execute("SELECT to_regclass('acp_store_schema') IS NOT NULL")).fetchone()
        if row is not None and row[0]:
            found = await (await conn.execute("SELECT version FROM acp_store_schema")).fetchone()
            return 0 if found is None else int(found[0])
        others = await (
            await conn.execute(
                "SELECT string_agg(tablename, ', ') FROM pg_tables"
                " WHERE schemaname = current_schema() AND tablename = ANY(%s)",
                (list(_TABLES),),
            )
        ).fetchone()
        if others is not None and others[0]:
            raise StoreUnavailable(
                f"session store {self.where}: the database already has tables named {others[0]} that are not an"
                " acp-server store's; it was left untouched (use a database or schema of its own)"
            )
        return 0

    async def finish(self, batch: Batch) -> None:
        """The final write: commit what was buffered, mark this process's running turns `interrupted`, release its
        lease and holds; then close the pool. A failure is logged (the server is exiting)."""
        try:
            await self.commit(batch)
            async with self._pool.connection() as conn, conn.transaction():
                await conn.execute(
                    "UPDATE turns SET status = 'interrupted', ended_at = %s WHERE status = 'running' AND owner_id = %s",
                    (utc_now(), self.owner_id),
                )
                await conn.execute("DELETE FROM owners WHERE owner_id = %s", (self.owner_id,))
                await conn.execute("DELETE FROM holds WHERE owner_id = %s", (self.owner_id,))
                await conn.execute("UPDATE leases SET expires_at = 0 WHERE owner_id = %s", (self.owner_id,))
        except psycopg.Error as exc:
            log.error("session store %s: the final write failed: %s", self.where, exc)
        finally:
            await self._pool.close()

    async def close(self) -> None:
        await self._pool.close()

    # -- a flush --

    async def commit(self, batch: Batch) -> set[str]:
        """One flush's batch in one transaction, its statements pipelined (one round trip, not one per row). Fenced:
        the writes of a leased session whose lease this process no longer holds at its epoch (it expired, another
        replica took it over) are left out, in the same transaction that checks it; those sessions are returned."""
        if batch.empty:
            return set()
        lost: set[str] = set()
        async with self._pool.connection() as conn, conn.transaction():
            ops, updates = batch.ops, batch.updates
            if batch.fences:
                lost = await self._fenced(conn, batch.fences)
            if lost:
                ops = [op for op in ops if batch.op_sessions.get(id(op)) not in lost]
                updates = [u for u in updates if batch.sessions.get(u[0]) not in lost]
            async with conn.pipeline(), conn.cursor() as cursor:
                await cursor.execute("SELECT set_config('lock_timeout', %s, true)", (f"{self.lock_timeout_ms}ms",))
                for sql, params in ops:
                    await cursor.execute(pg_sql(sql), params)
                if updates:
                    rows = [(turn_id, n, data, turn_id) for turn_id, n, data in update_rows(updates)]
                    await cursor.executemany(_INSERT_UPDATE, rows)
            wall = time.time()
            if batch.heartbeat:
                await self._heartbeat(conn, wall)
            swept = await self._sweep(conn, wall) if batch.sweep else 0
        if swept:
            log.info("session store: %d turn(s) of processes that are gone marked interrupted", swept)
        return lost

    async def _fenced(self, conn: Conn, fences: dict[str, int]) -> set[str]:
        """Inside the commit's transaction: the leased sessions whose lease this process no longer holds at the epoch
        it took. The live ones are locked (FOR SHARE) until the commit, so no take-over lands between the check and
        the writes."""
        sessions = list(fences)
        cursor = await conn.execute(
            "SELECT l.session_id FROM leases l JOIN unnest(%s::text[], %s::bigint[]) AS f(session_id, epoch)"
            f" ON l.session_id = f.session_id AND l.epoch = f.epoch WHERE l.owner_id = %s AND l.expires_at > {_NOW}"
            " FOR SHARE OF l",
            (sessions, [fences[s] for s in sessions], self.owner_id),
        )
        held = {row[0] for row in await cursor.fetchall()}
        return set(sessions) - held

    async def _heartbeat(self, conn: Conn, wall: float) -> None:
        me = self._identity
        await conn.execute(
            "INSERT INTO owners (owner_id, pid, start_time, host, boot_id, pid_ns, started_at, heartbeat)"
            " VALUES (%s,%s,%s,%s,%s,%s,%s,%s) ON CONFLICT (owner_id) DO UPDATE SET heartbeat = EXCLUDED.heartbeat",
            (self.owner_id, me.pid, me.start_time, me.host, me.boot_id, me.pid_ns, wall, wall),
        )

    async def _sweep(self, conn: Conn, wall: float) -> int:
        """Inside a transaction: interrupt the running turns of owners that are gone, forget those owners (their
        holds too). On another machine only the heartbeat tells (leases.owner_alive)."""
        live = [self.owner_id]
        gone: list[str] = []
        cursor = await conn.execute(
            "SELECT owner_id, pid, start_time, host, boot_id, pid_ns, heartbeat FROM owners WHERE owner_id <> %s",
            (self.owner_id,),
        )
        for owner_id, pid, start_time, host, boot_id, pid_ns, heartbeat in await cursor.fetchall():
            owner = Identity(int(pid), start_time, host, boot_id, pid_ns)
            if owner_alive(self._identity, owner, float(heartbeat), wall, self._stale_after):
                live.append(owner_id)
            else:
                gone.append(owner_id)
        marked = await conn.execute(
            "UPDATE turns SET status = 'interrupted', ended_at = %s"
            " WHERE status = 'running' AND NOT (owner_id = ANY(%s))",
            (utc_now(), live),
        )
        if gone:
            await conn.execute("DELETE FROM owners WHERE owner_id = ANY(%s)", (gone,))
            await conn.execute(
                "DELETE FROM holds WHERE NOT EXISTS (SELECT 1 FROM owners o WHERE o.owner_id = holds.owner_id)"
            )
        return max(marked.rowcount, 0)

    async def sweep_now(self) -> int:
        async with self._pool.connection() as conn, conn.transaction():
            return await self._sweep(conn, time.time())

    # -- leases (issue 24, item 2): which replica runs a session --

    async def take_lease(self, session_id: str, ttl: float) -> Lease | LeaseHeld:
        """Take (or renew) the session's lease for `ttl` seconds, unless another process holds a live one. Taking it
        over from a process whose lease expired raises its epoch. One statement: two replicas racing for it cannot
        both win."""
        async with self._pool.connection() as conn:
            for _attempt in range(3):  # the holder may release it between the two statements: then ask again
                params = {"session": session_id, "owner": self.owner_id, "ttl": ttl}
                taken = await (await conn.execute(_TAKE_LEASE, params)).fetchone()
                if taken is not None:
                    return Lease(session_id, int(taken[0]), float(taken[1]), bool(taken[2]))
                held = await (
                    await conn.execute(
                        f"SELECT owner_id, expires_at, expires_at - {_NOW} FROM leases WHERE session_id = %s",
                        (session_id,),
                    )
                ).fetchone()
                if held is not None and float(held[2]) > 0:  # else it ended meanwhile: ask again
                    return LeaseHeld(session_id, held[0], float(held[1]), float(held[2]))
        raise StoreUnavailable(f"session store {self.where}: the lease of session {session_id} keeps changing hands")

    async def renew_leases(self, ttl: float) -> dict[str, Lease]:
        """Renew every lease this process still holds (not expired) for `ttl` seconds: those renewed, by session.
        A lease missing here was lost (it expired, and may have been taken over)."""
        async with self._pool.connection() as conn:
            rows = await (
                await conn.execute(
                    f"UPDATE leases SET expires_at = {_NOW} + %s::float8 WHERE owner_id = %s AND expires_at > {_NOW}"
                    " RETURNING session_id, epoch, expires_at",
                    (ttl, self.owner_id),
                )
            ).fetchall()
        return {row[0]: Lease(row[0], int(row[1]), float(row[2])) for row in rows}

    async def release_lease(self, session_id: str) -> bool:
        """This process no longer runs the session: another may take it at once. Whether it held the lease. The row
        stays, expired, so that the epoch keeps growing with every holder (a deleted row would start it again)."""
        async with self._pool.connection() as conn:
            cursor = await conn.execute(
                f"UPDATE leases SET expires_at = 0 WHERE session_id = %s AND owner_id = %s AND expires_at > {_NOW}",
                (session_id, self.owner_id),
            )
        return cursor.rowcount > 0

    # -- reads --

    async def load(self, session_id: str, hold: bool = False) -> LoadedSession | None:
        """The session as stored; None for an unknown or deleted one. `hold`: the hold is written in the same
        transaction as the read, under the housekeeping lock (no prune or delete between them); else the reads are
        one snapshot."""
        async with self._pool.connection() as conn:
            running = await (
                await conn.execute(
                    "SELECT 1 FROM turns WHERE session_id = %s AND status = 'running' AND owner_id <> %s LIMIT 1",
                    (session_id, self.owner_id),
                )
            ).fetchone()
            if running:
                async with conn.transaction():
                    await self._sweep(conn, time.time())  # a turn of another process: is it still there?
            async with conn.transaction():
                if hold:
                    await conn.execute("SELECT pg_advisory_xact_lock(%s)", (_HOUSEKEEPING_LOCK,))
                else:
                    await conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
                row = await (
                    await conn.execute(
                        f"SELECT {SESSION_COLUMNS}, archived FROM sessions WHERE id = %s AND deleted = 0",
                        (session_id,),
                    )
                ).fetchone()
                if row is None:
                    return None
                turn_rows = await (
                    await conn.execute(
                        "SELECT turn_id, status, stop_reason, error, started_at, ended_at, prompt_text, messages,"
                        " replaces FROM turns WHERE session_id = %s ORDER BY seq",
                        (session_id,),
                    )
                ).fetchall()
                rows = await (
                    await conn.execute(
                        "SELECT u.turn_id, u.data FROM turns t JOIN updates u ON u.turn_id = t.turn_id"
                        " WHERE t.session_id = %s ORDER BY t.seq, u.seq",
                        (session_id,),
                    )
                ).fetchall()
                loaded = decode_loaded(self.where, None, session_id, row, turn_rows, rows)
                if hold:
                    await conn.execute(
                        "INSERT INTO holds (session_id, owner_id) VALUES (%s, %s) ON CONFLICT DO NOTHING",
                        (session_id, self.owner_id),
                    )
        return loaded

    async def list_page(
        self, cwd: str | None, after: tuple[str, str] | None, limit: int, archived: str = "exclude"
    ) -> SessionPage:
        where = "deleted = 0 AND parent_id IS NULL"
        if archived == "exclude":
            where += " AND archived = 0"
        elif archived == "only":
            where += " AND archived <> 0"
        params: list[Any] = []
        if cwd is not None:
            where += " AND cwd = %s"
            params.append(cwd)
        if after is not None:
            where += " AND (updated_at, id) < (%s, %s)"
            params += after
        async with self._pool.connection() as conn:
            rows = await (
                await conn.execute(
                    "SELECT id, cwd, additional_directories, title, updated_at, config, archived FROM sessions"
                    f" WHERE {where} ORDER BY updated_at DESC, id DESC LIMIT %s",
                    (*params, limit + 1),
                )
            ).fetchall()
        page = [session_summary(r) for r in rows[:limit]]
        more = len(rows) > limit
        return SessionPage(page, encode_cursor(page[-1].updated_at, page[-1].session_id) if more else None)

    async def summary(self, session_id: str) -> SessionSummary | None:
        async with self._pool.connection() as conn:
            row = await (
                await conn.execute(
                    "SELECT id, cwd, additional_directories, title, updated_at, config, archived FROM sessions"
                    " WHERE id = %s AND deleted = 0 AND parent_id IS NULL",
                    (session_id,),
                )
            ).fetchone()
        return None if row is None else session_summary(row)

    async def fork(self, source: str, new_id: str, overrides: tuple[str | None, bytes | None, bytes | None]) -> bool:
        now = utc_now()
        cwd, directories, servers = overrides
        async with self._pool.connection() as conn, conn.transaction():
            await conn.execute("SELECT pg_advisory_xact_lock(%s)", (_HOUSEKEEPING_LOCK,))
            taken = await (
                await conn.execute("SELECT 1 FROM sessions WHERE id = %s AND deleted = 0", (new_id,))
            ).fetchone()
            if taken:
                raise ValueError(f"session {new_id} already exists")
            copied = await conn.execute(
                f"INSERT INTO sessions ({SESSION_COLUMNS}, deleted)"
                " SELECT %s, coalesce(%s, cwd), coalesce(%s::bytea, additional_directories),"
                " coalesce(%s::bytea, mcp_servers), %s, %s, title, mode, config, NULL, id, 0"
                " FROM sessions WHERE id = %s AND deleted = 0" + _REPLACE_SESSION,
                (new_id, cwd, directories, servers, now, now, source),
            )
            if not copied.rowcount:
                return False
            await conn.execute(
                "INSERT INTO holds (session_id, owner_id) VALUES (%s, %s) ON CONFLICT DO NOTHING",
                (new_id, self.owner_id),
            )
            turns = await (
                await conn.execute(
                    "SELECT turn_id, owner_id, status, stop_reason, error, started_at, ended_at, prompt_text,"
                    " messages, replaces FROM turns WHERE session_id = %s ORDER BY seq",
                    (source,),
                )
            ).fetchall()
            for old_id, owner, status, stop, error, started, ended, prompt_text, messages, replaces in turns:
                new_turn = new_turn_id()
                running = status == "running"
                await conn.execute(
                    "INSERT INTO turns (turn_id, session_id, owner_id, status, stop_reason, error, started_at,"
                    " ended_at, prompt_text, messages, replaces) VALUES (%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s)",
                    (
                        new_turn,
                        new_id,
                        owner,
                        "interrupted" if running else status,
                        stop,
                        error,
                        started,
                        now if running else ended,
                        prompt_text,
                        messages,
                        replaces,
                    ),
                )
                await conn.execute(
                    "INSERT INTO updates (turn_id, n, data) SELECT %s, n, data FROM updates WHERE turn_id = %s"
                    " ORDER BY seq",
                    (new_turn, old_id),
                )
        return True

    # -- housekeeping --

    async def prune(self, retention: Retention) -> Pruned:
        """worker.py's `prune`, under the housekeeping lock: never a session a live process holds or runs a turn of."""
        now = datetime.now(UTC)
        empty_before = utc_stamp(now - timedelta(seconds=retention.empty_after))
        async with self._pool.connection() as conn, conn.transaction():
            await conn.execute("SELECT pg_advisory_xact_lock(%s)", (_HOUSEKEEPING_LOCK,))
            await self._sweep(conn, time.time())
            rows = await (await conn.execute(PRUNE_CANDIDATES)).fetchall()
            pruned = prune_choice(rows, retention, empty_before, now)
            await self._remove(conn, [*pruned.empty, *pruned.expired, *pruned.over_count])
            # The leases of sessions that are gone, once long expired (while a session exists its row stays: the epoch).
            await conn.execute(
                f"DELETE FROM leases WHERE expires_at < {_NOW} - 3600"
                " AND NOT EXISTS (SELECT 1 FROM sessions s WHERE s.id = leases.session_id)"
            )
            await conn.execute(
                "DELETE FROM sessions WHERE deleted = 1 AND updated_at < %s"
                " AND NOT EXISTS (SELECT 1 FROM holds h WHERE h.session_id = sessions.id)",
                (empty_before,),
            )
        return pruned

    async def _remove(self, conn: Conn, session_ids: Iterable[str]) -> None:
        for session_id in session_ids:
            cursor = await conn.execute(
                'WITH RECURSIVE tree(id) AS (SELECT %s::text COLLATE "C" UNION SELECT s.id FROM sessions s JOIN tree'
                " ON s.parent_id = tree.id) SELECT id FROM tree",
                (session_id,),
            )
            tree = [row[0] for row in await cursor.fetchall()]
            await conn.execute(
                "DELETE FROM updates WHERE turn_id IN (SELECT turn_id FROM turns WHERE session_id = ANY(%s))", (tree,)
            )
            await conn.execute("DELETE FROM turns WHERE session_id = ANY(%s)", (tree,))
            await conn.execute("DELETE FROM sessions WHERE id = ANY(%s)", (tree,))

    async def delete(self, session_id: str, force: bool = False) -> DeleteOutcome:
        """worker.py's `delete`: the check and the deletion in one transaction, under the housekeeping lock."""
        async with self._pool.connection() as conn, conn.transaction():
            await conn.execute("SELECT pg_advisory_xact_lock(%s)", (_HOUSEKEEPING_LOCK,))
            await self._sweep(conn, time.time())
            there = await (
                await conn.execute("SELECT 1 FROM sessions WHERE id = %s AND deleted = 0", (session_id,))
            ).fetchone()
            if there is None:
                return "unknown"
            if not force:
                held = await (
                    await conn.execute(
                        "SELECT 1 FROM holds WHERE session_id = %s AND owner_id <> %s LIMIT 1",
                        (session_id, self.owner_id),
                    )
                ).fetchone()
                if held:
                    return "held"
            for sql, params in tombstone_ops(session_id):
                await conn.execute(pg_sql(sql), params)
        return "deleted"

    async def overview(self, cwd: str | None, limit: int) -> list[SessionOverview]:
        await self.sweep_now()
        where = "deleted = 0 AND parent_id IS NULL" + ("" if cwd is None else " AND cwd = %s")
        async with self._pool.connection() as conn:
            rows = await (
                await conn.execute(
                    "SELECT s.id, s.cwd, s.title, s.created_at, s.updated_at,"
                    " (SELECT count(*) FROM turns t WHERE t.session_id = s.id),"
                    " EXISTS (SELECT 1 FROM holds h WHERE h.session_id = s.id AND h.owner_id <> %s)"
                    f" FROM sessions s WHERE {where} ORDER BY s.updated_at DESC, s.id DESC LIMIT %s",
                    (self.owner_id, *(() if cwd is None else (cwd,)), limit),
                )
            ).fetchall()
        return [SessionOverview(r[0], r[1], r[2], r[3], r[4], int(r[5]), bool(r[6])) for r in rows]
