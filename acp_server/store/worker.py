"""Every SQL statement the session store runs, on a worker thread, one at a time under the store's lock.

`SessionStore` (store.py) lives on the event loop and only buffers; it hands this class a `Batch` to commit, or a
read to run, through `anyio.to_thread`, so the event loop never waits for SQLite. Here each job is one transaction:
a flush's batch, the sweep of turns whose owners are gone (the process check of leases.py decides), a load's read
snapshot, a fork's copy, the final write at close.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import sqlite3
import time
import zlib
from collections.abc import Iterable, Iterator, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Literal, cast

import orjson

from acp_server.errors import StoreUnavailable
from acp_server.store.leases import Identity, owner_alive
from acp_server.store.migration import ReadLegacy, upgrade
from acp_server.store.records import (
    PRUNE_CANDIDATES,
    LoadedSession,
    Pruned,
    Retention,
    SessionOverview,
    SessionPage,
    SessionRecord,
    SessionSummary,
    TurnRecord,
    TurnStatus,
    encode_cursor,
    encode_messages,
    owner_in,
    prune_choice,
    utc_now,
    utc_stamp,
)
from acp_server.store.restore import rebuild_history
from acp_server.store.sqlite_file import HOLD, HOLDS_SCHEMA, SCHEMA_VERSION, SESSION_COLUMNS, create_schema, validate
from acp_server.store.turn_log import Batch, decode_row, new_turn_id, update_rows
from acp_server.store.turn_records import TurnEntry, decode_entry

__all__ = ["DeleteOutcome", "StoreWorker", "decode_loaded", "session_record", "session_summary", "tombstone_ops"]

log = logging.getLogger(__name__)

# A flush's rows go in a few statements of many rows each, not one statement per row: each statement the worker
# runs lets go of the GIL for SQLite and must take it back from a busy event loop, which can take the interpreter's
# whole switch interval (5 ms). With a thousand sessions streaming, a flush holds a row for nearly every one of them,
# so one statement per row made each commit (which prompt responses wait for) grow with the number of sessions. Rows
# of a turn that is gone (its session deleted) are still dropped; the ordinal keeps them in the order given. 200 rows
# x 4 parameters stays under the 999 variables of the oldest SQLite builds.
_UPDATES_PER_STATEMENT = 200


@functools.lru_cache(maxsize=8)
def _insert_updates_sql(rows: int) -> str:
    values = ",".join(["(?,?,?,?)"] * rows)
    return (
        "INSERT INTO updates (turn_id, n, data) SELECT v.column2, v.column3, v.column4"
        f" FROM (VALUES {values}) AS v WHERE EXISTS (SELECT 1 FROM turns t WHERE t.turn_id = v.column2)"
        " ORDER BY v.column1"
    )


def _insert_updates(conn: sqlite3.Connection, updates: Sequence[tuple[str, int, bytearray]]) -> None:
    rows = list(update_rows(updates))
    for start in range(0, len(rows), _UPDATES_PER_STATEMENT):
        chunk = rows[start : start + _UPDATES_PER_STATEMENT]
        params: list[Any] = []
        for ordinal, (turn_id, count, data) in enumerate(chunk):
            params += (ordinal, turn_id, count, data)
        conn.execute(_insert_updates_sql(len(chunk)), params)


DeleteOutcome = Literal["deleted", "unknown", "held"]

# What a turn that added nothing to the model's history records (as text in a store an older version wrote), or NULL.
_NO_MESSAGES: tuple[object, ...] = (None, encode_messages(()), encode_messages(()).decode())


def tombstone_ops(session_id: str) -> list[tuple[str, tuple[Any, ...]]]:
    """The statements that delete a session's content and leave a tombstone (pruning removes it later)."""
    return [
        ("UPDATE sessions SET deleted = 1, updated_at = ? WHERE id = ?", (utc_now(), session_id)),
        ("DELETE FROM updates WHERE turn_id IN (SELECT turn_id FROM turns WHERE session_id = ?)", (session_id,)),
        ("DELETE FROM turns WHERE session_id = ?", (session_id,)),
    ]


class StoreWorker:
    """The store's connection and the transactions run on it. Not thread-safe: `SessionStore` runs one job at a time
    (under its lock, or before serving and after the last flush)."""

    def __init__(
        self,
        path: Path,
        conn: sqlite3.Connection,
        identity: Identity,
        owner_id: str,
        stale: float,
        *,
        read_legacy: ReadLegacy | None = None,
    ) -> None:
        self.path = path
        self.owner_id = owner_id
        self._conn = conn
        self._identity = identity
        self._stale_after = stale
        self._read_legacy = read_legacy

    # What a job raises when the store fails underneath (read as StoreUnavailable), and which of it a retry may mend.
    errors: tuple[type[Exception], ...] = (sqlite3.Error,)

    @staticmethod
    def transient(exc: Exception) -> bool:
        """A commit that failed this way may succeed later (a lock held too long, a full disk): its batch is kept."""
        return isinstance(exc, sqlite3.OperationalError)

    @contextlib.contextmanager
    def _transaction(self, begin: str = "BEGIN IMMEDIATE") -> Iterator[sqlite3.Connection]:
        """One transaction on the connection: committed when the block ends, rolled back when it raises (anything,
        a cancellation included). IMMEDIATE takes the write lock at once, so a writer never fails half way for a
        lock another process holds; a plain BEGIN is a read snapshot."""
        conn = self._conn
        conn.execute(begin)
        try:
            yield conn
            conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise

    def register(self) -> int:
        """While the store opens: create the schema if the file is new (or upgrade an older one), take this
        process's lease and mark turns of owners that are gone `interrupted`, in one write transaction. How many
        turns were marked."""
        with self._transaction() as conn:
            version = validate(conn, self.path, check=False)  # again, under the write lock: still new? still old?
            if version == 0:
                create_schema(conn)
            elif version < SCHEMA_VERSION:
                upgrade(conn, self.path, version, self._read_legacy)
            conn.execute(HOLDS_SCHEMA)
            self.heartbeat(time.time())
            return self.sweep(time.time())

    def finish(self, batch: Batch) -> None:
        try:
            self.commit(batch)
            with self._transaction() as conn:
                conn.execute(
                    "UPDATE turns SET status = 'interrupted', ended_at = ? WHERE status = 'running' AND owner_id = ?",
                    (utc_now(), self.owner_id),
                )
                conn.execute("DELETE FROM owners WHERE owner_id = ?", (self.owner_id,))
                conn.execute("DELETE FROM holds WHERE owner_id = ?", (self.owner_id,))
        except sqlite3.Error as exc:
            log.error("session store %s: the final write failed: %s", self.path, exc)
        finally:
            self._conn.close()

    def commit(self, batch: Batch) -> None:
        if batch.empty:
            return
        with self._transaction() as conn:
            for sql, params in batch.ops:
                conn.execute(sql, params)
            if batch.updates:
                _insert_updates(conn, batch.updates)
            wall = time.time()
            if batch.heartbeat:
                self.heartbeat(wall)
            swept = self.sweep(wall) if batch.sweep else 0
        if swept:
            log.info("session store: %d turn(s) of processes that are gone marked interrupted", swept)

    def heartbeat(self, wall: float) -> None:
        me = self._identity
        self._conn.execute(
            "INSERT INTO owners (owner_id, pid, start_time, host, boot_id, pid_ns, started_at, heartbeat)"
            " VALUES (?,?,?,?,?,?,?,?) ON CONFLICT (owner_id) DO UPDATE SET heartbeat = excluded.heartbeat",
            (self.owner_id, me.pid, me.start_time, me.host, me.boot_id, me.pid_ns, wall, wall),
        )

    def sweep(self, wall: float) -> int:
        """Inside a write transaction: interrupt the running turns of owners that are gone, forget those owners."""
        conn = self._conn
        live = {self.owner_id}
        gone: list[str] = []
        for owner_id, pid, start_time, host, boot_id, pid_ns, heartbeat in conn.execute(
            "SELECT owner_id, pid, start_time, host, boot_id, pid_ns, heartbeat FROM owners"
        ):
            if owner_id == self.owner_id:
                continue
            owner = Identity(int(pid), start_time, host, boot_id, pid_ns)
            if owner_alive(self._identity, owner, float(heartbeat), wall, self._stale_after):
                live.add(owner_id)
            else:
                gone.append(owner_id)
        marks = ",".join("?" * len(live))
        cursor = conn.execute(
            "UPDATE turns SET status = 'interrupted', ended_at = ?"
            f" WHERE status = 'running' AND owner_id NOT IN ({marks})",
            (utc_now(), *live),
        )
        conn.executemany("DELETE FROM owners WHERE owner_id = ?", [(o,) for o in gone])
        if gone:
            conn.execute("DELETE FROM holds WHERE owner_id NOT IN (SELECT owner_id FROM owners)")
        return cursor.rowcount

    def sweep_now(self) -> int:
        with self._transaction():
            return self.sweep(time.time())

    def load(self, session_id: str, hold: bool = False) -> LoadedSession | None:
        """The session as stored; None for an unknown or deleted one. `hold`: this process opens it, and the hold is
        written in the same write transaction as the read, only when the session is there and readable (a refused
        load leaves none behind), so a prune or a `sessions delete` that comes after sees it is open."""
        conn = self._conn
        if conn.execute(
            "SELECT 1 FROM turns WHERE session_id = ? AND status = 'running' AND owner_id != ? LIMIT 1",
            (session_id, self.owner_id),
        ).fetchone():
            self.sweep_now()  # a turn of another process: find out whether that process is still there
        # A write transaction when it holds (no prune or delete between the read and the hold), else a read snapshot.
        with self._transaction("BEGIN IMMEDIATE" if hold else "BEGIN"):
            row = conn.execute(
                f"SELECT {SESSION_COLUMNS}, archived FROM sessions WHERE id = ? AND deleted = 0", (session_id,)
            ).fetchone()
            if row is None:
                return None
            turn_rows = conn.execute(
                "SELECT turn_id, status, stop_reason, error, started_at, ended_at, prompt_text, messages, replaces"
                " FROM turns WHERE session_id = ? ORDER BY seq",
                (session_id,),
            ).fetchall()
            update_rows = conn.execute(
                "SELECT u.turn_id, u.data FROM turns t JOIN updates u ON u.turn_id = t.turn_id"
                " WHERE t.session_id = ? ORDER BY t.seq, u.seq",
                (session_id,),
            ).fetchall()
            loaded = self._decode(session_id, row, turn_rows, update_rows)  # raises (rolling back) when unreadable
            if hold:
                conn.execute(HOLD, (session_id, self.owner_id))
        return loaded

    def _decode(
        self, session_id: str, row: Sequence[Any], turn_rows: Sequence[Sequence[Any]], update_rows: Sequence[Any]
    ) -> LoadedSession:
        return decode_loaded(str(self.path), self._read_legacy, session_id, row, turn_rows, update_rows)

    def list_page(
        self, cwd: str | None, after: tuple[str, str] | None, limit: int, archived: str = "exclude"
    ) -> SessionPage:
        where = "deleted = 0 AND parent_id IS NULL"
        # The archive filter applies before the page is cut (ACP: "applies before pagination").
        if archived == "exclude":
            where += " AND archived = 0"
        elif archived == "only":
            where += " AND archived != 0"
        params: list[Any] = []
        if cwd is not None:
            where += " AND cwd = ?"
            params.append(cwd)
        if after is not None:
            where += " AND (updated_at, id) < (?, ?)"
            params += after
        rows = self._conn.execute(
            f"SELECT id, cwd, additional_directories, title, updated_at, config, archived FROM sessions WHERE {where}"
            " ORDER BY updated_at DESC, id DESC LIMIT ?",
            (*params, limit + 1),
        ).fetchall()
        page = [session_summary(r) for r in rows[:limit]]
        more = len(rows) > limit
        return SessionPage(page, encode_cursor(page[-1].updated_at, page[-1].session_id) if more else None)

    def summary(self, session_id: str) -> SessionSummary | None:
        """The `session/list` entry of one session, whether archived or not; None for one the list never shows
        (unknown, deleted, a subagent's)."""
        row = self._conn.execute(
            "SELECT id, cwd, additional_directories, title, updated_at, config, archived FROM sessions"
            " WHERE id = ? AND deleted = 0 AND parent_id IS NULL",
            (session_id,),
        ).fetchone()
        return None if row is None else session_summary(row)

    def fork(self, source: str, new_id: str, overrides: tuple[str | None, bytes | None, bytes | None]) -> bool:
        now = utc_now()
        with self._transaction() as conn:
            if conn.execute("SELECT 1 FROM sessions WHERE id = ? AND deleted = 0", (new_id,)).fetchone():
                raise ValueError(f"session {new_id} already exists")
            cwd, directories, servers = overrides
            copied = conn.execute(
                f"INSERT OR REPLACE INTO sessions ({SESSION_COLUMNS}, deleted)"
                " SELECT ?, coalesce(?, cwd), coalesce(?, additional_directories), coalesce(?, mcp_servers), ?, ?,"
                " title, mode, config, NULL, id, 0 FROM sessions WHERE id = ? AND deleted = 0",
                (new_id, cwd, directories, servers, now, now, source),
            ).rowcount
            if not copied:
                return False  # nothing was written: committing the empty transaction is its rollback
            conn.execute(HOLD, (new_id, self.owner_id))
            turns = conn.execute(
                "SELECT turn_id, owner_id, status, stop_reason, error, started_at, ended_at, prompt_text, messages,"
                " replaces FROM turns WHERE session_id = ? ORDER BY seq",
                (source,),
            ).fetchall()
            for old_id, owner, status, stop, error, started, ended, prompt_text, messages, replaces in turns:
                new_turn = new_turn_id()
                running = status == "running"
                conn.execute(
                    "INSERT INTO turns (turn_id, session_id, owner_id, status, stop_reason, error, started_at,"
                    " ended_at, prompt_text, messages, replaces) VALUES (?,?,?,?,?,?,?,?,?,?,?)",
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
                conn.execute(
                    "INSERT INTO updates (turn_id, n, data) SELECT ?, n, data FROM updates WHERE turn_id = ?"
                    " ORDER BY seq",
                    (new_turn, old_id),
                )
        return True

    # -- housekeeping: pruning, and what `acp-server sessions` shows --

    def prune(self, retention: Retention) -> Pruned:
        """Remove, in one transaction, the sessions `retention` says go (records.Retention), with their subagents'
        sessions, turns and updates, and the tombstones `delete` left. Never a session a live process has open or one
        with a turn running: the sweep runs first, so only the holds of live owners count."""
        now = datetime.now(UTC)
        empty_before = utc_stamp(now - timedelta(seconds=retention.empty_after))
        with self._transaction() as conn:
            self.sweep(time.time())
            rows = conn.execute(PRUNE_CANDIDATES).fetchall()
            pruned = prune_choice(rows, retention, empty_before, now)
            self._remove(conn, [*pruned.empty, *pruned.expired, *pruned.over_count])
            conn.execute(
                "DELETE FROM sessions WHERE deleted = 1 AND updated_at < ?"
                " AND NOT EXISTS (SELECT 1 FROM holds h WHERE h.session_id = sessions.id)",
                (empty_before,),
            )
        return pruned

    def _remove(self, conn: sqlite3.Connection, session_ids: Iterable[str]) -> None:
        """Inside a write transaction: the sessions and their subagents' sessions, every row of them."""
        for session_id in session_ids:
            tree = [
                row[0]
                for row in conn.execute(
                    "WITH RECURSIVE tree(id) AS (SELECT ? UNION SELECT s.id FROM sessions s JOIN tree"
                    " ON s.parent_id = tree.id) SELECT id FROM tree",
                    (session_id,),
                )
            ]
            for member in tree:
                conn.execute(
                    "DELETE FROM updates WHERE turn_id IN (SELECT turn_id FROM turns WHERE session_id = ?)", (member,)
                )
                conn.execute("DELETE FROM turns WHERE session_id = ?", (member,))
                conn.execute("DELETE FROM sessions WHERE id = ?", (member,))

    def delete(self, session_id: str, force: bool = False) -> DeleteOutcome:
        """`acp-server sessions delete`: in ONE write transaction, sweep, then check the session is there and that no
        other live process has it open (unless `force`), then delete it (a tombstone, as `SessionStore.delete`). A
        `session/load` of another process cannot write its hold between the check and the deletion: it waits for the
        write lock and then finds the session gone."""
        with self._transaction() as conn:
            self.sweep(time.time())
            if conn.execute("SELECT 1 FROM sessions WHERE id = ? AND deleted = 0", (session_id,)).fetchone() is None:
                return "unknown"
            if (
                not force
                and conn.execute(
                    "SELECT 1 FROM holds WHERE session_id = ? AND owner_id != ? LIMIT 1", (session_id, self.owner_id)
                ).fetchone()
            ):
                return "held"
            for sql, params in tombstone_ops(session_id):
                conn.execute(sql, params)
        return "deleted"

    def overview(self, cwd: str | None, limit: int) -> list[SessionOverview]:
        """The most recently updated top-level sessions, with their turn counts and whether another live process has
        them open (the sweep runs first)."""
        self.sweep_now()
        where = "deleted = 0 AND parent_id IS NULL" + ("" if cwd is None else " AND cwd = ?")
        rows = self._conn.execute(
            "SELECT s.id, s.cwd, s.title, s.created_at, s.updated_at,"
            " (SELECT count(*) FROM turns t WHERE t.session_id = s.id),"
            " EXISTS (SELECT 1 FROM holds h WHERE h.session_id = s.id AND h.owner_id != ?)"
            f" FROM sessions s WHERE {where} ORDER BY s.updated_at DESC, s.id DESC LIMIT ?",
            (self.owner_id, *(() if cwd is None else (cwd,)), limit),
        ).fetchall()
        return [SessionOverview(r[0], r[1], r[2], r[3], r[4], int(r[5]), bool(r[6])) for r in rows]


def decode_loaded(  # noqa: PLR0917 (the rows of one read, as the worker has them)
    where: str,
    read_legacy: ReadLegacy | None,
    session_id: str,
    row: Sequence[Any],
    turn_rows: Sequence[Sequence[Any]],
    update_rows: Sequence[Any],
) -> LoadedSession:
    """A session read back from its rows (the same for every backend); StoreUnavailable when they are unreadable."""
    entries: dict[str, list[TurnEntry]] = {}
    try:
        for turn_id, data in update_rows:
            entries.setdefault(turn_id, []).extend(_entries(decode_row(data), read_legacy))
    except (ValueError, zlib.error) as exc:
        raise StoreUnavailable(f"session store {where}: session {session_id} is unreadable ({exc})") from exc
    turns = [
        TurnRecord(
            turn_id=r[0],
            status=cast(TurnStatus, r[1]),
            stop_reason=r[2],
            error=r[3],
            started_at=r[4],
            ended_at=r[5],
            prompt_text=r[6],
            entries=entries.get(r[0], []),
            ran=r[1] == "interrupted" or r[7] not in _NO_MESSAGES,
        )
        for r in turn_rows
    ]
    try:
        return LoadedSession(session_record(row), turns, rebuild_history(turns, turn_rows))
    except (ValueError, KeyError, TypeError) as exc:
        raise StoreUnavailable(f"session store {where}: session {session_id} is unreadable ({exc})") from exc


def _entries(items: Sequence[Any], read_legacy: ReadLegacy | None) -> Iterator[TurnEntry]:
    for item in items:
        if isinstance(item, dict) and read_legacy is not None:
            # An update object: written after the upgrade by a process of the old version that had the store
            # open already (a new process refuses a store of a newer schema, an old one does not look again).
            entry = read_legacy(item)
            if entry is not None:
                yield entry
        else:
            yield decode_entry(item)


def session_summary(row: Sequence[Any]) -> SessionSummary:
    """A `sessions` row read as id, cwd, additional_directories, title, updated_at, config, archived."""
    return SessionSummary(
        row[0], row[1], tuple(orjson.loads(row[2])), row[3], row[4], owner_in(orjson.loads(row[5])), bool(row[6])
    )


def session_record(row: Sequence[Any]) -> SessionRecord:
    return SessionRecord(
        session_id=row[0],
        cwd=row[1],
        additional_directories=tuple(orjson.loads(row[2])),
        mcp_servers=tuple(orjson.loads(row[3])),
        created_at=row[4],
        updated_at=row[5],
        title=row[6],
        mode=row[7],
        config=orjson.loads(row[8]),
        parent_session_id=row[9],
        forked_from=row[10],
        archived=bool(row[11]),
    )
