"""Where an end-to-end test's servers keep their sessions, seen from outside as another process would: the SQLite file
in the state directory, or the PostgreSQL database of `--store-url` (tests/conftest.py's `store_url`, one parameter
for both). The same statements (SQLite's `?` placeholders) read and change either, and `write_lock` holds the
store's tables as another process's (or replica's) long transaction would."""

from __future__ import annotations

import contextlib
import sqlite3
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio

from tests.support.harness import T_WAIT, RawClient, scaled

__all__ = ["LEASE_TTL", "StoreAt", "once_free"]

# The lease a server holds on its sessions in PostgreSQL (--lease-ttl; SQLite has none): a server started after one
# was killed loads that one's sessions once it has expired (docs/postgres.md "Leases"). Longer than the tests ever
# hold the store's tables (`write_lock`), behind which a live server's renewal waits: no live server loses a lease.
LEASE_TTL = max(5.0, scaled(2.0))
SESSION_LEASED = -34001


async def once_free(client: RawClient, method: str, params: dict[str, Any]) -> dict[str, Any]:
    """`session/load` or `session/resume`, asked again while it is answered the lease error (PostgreSQL: another
    server, killed, held the session; its lease expires within LEASE_TTL), then its answer. SQLite answers at once."""
    with anyio.fail_after(LEASE_TTL + T_WAIT):
        while True:
            answer = await client.call(method, params)
            if answer.get("error", {}).get("code") != SESSION_LEASED:
                return answer
            await anyio.sleep(0.1)


@dataclass(frozen=True)
class StoreAt:
    state: Path  # the state directory (the SQLite file's, and the server's other files' in both cases)
    url: str | None  # the PostgreSQL store's URL; None: the SQLite file

    def env(self) -> dict[str, str]:
        """The environment that points a server (or `acp-server sessions`) at this store."""
        env = {"ACP_SERVER_STATE_DIR": str(self.state)}
        if self.url is not None:
            env["ACP_SERVER_STORE_URL"] = self.url
            env["ACP_SERVER_LEASE_TTL"] = f"{LEASE_TTL:g}"
        return env

    def rows(self, sql: str, *params: Any) -> list[tuple[Any, ...]]:
        if self.url is None:
            conn = sqlite3.connect(self.state / "sessions.sqlite3", isolation_level=None)
            try:
                return [tuple(row) for row in conn.execute(sql, params).fetchall()]
            finally:
                conn.close()
        import psycopg

        with psycopg.connect(self.url, autocommit=True, connect_timeout=int(scaled(10))) as pg_conn:
            cursor = pg_conn.execute(sql.replace("?", "%s"), params)
            return [tuple(row) for row in cursor.fetchall()] if cursor.description else []

    def sessions(self) -> set[str]:
        """The ids of the sessions stored (not deleted): where the test's server really kept them."""
        return {row[0] for row in self.rows("SELECT id FROM sessions WHERE deleted = 0")}

    def execute(self, sql: str, *params: Any) -> None:
        self.rows(sql, *params)

    @contextlib.contextmanager
    def write_lock(self) -> Iterator[None]:
        """The store's write lock (SQLite) or its tables (PostgreSQL) held by another connection: every commit of a
        server waits until it is let go (up to its busy or lock timeout, 5 s)."""
        if self.url is None:
            holder = sqlite3.connect(self.state / "sessions.sqlite3", timeout=T_WAIT, isolation_level=None)
            try:
                holder.execute("BEGIN IMMEDIATE")
                yield
            finally:
                holder.rollback()
                holder.close()
            return
        import psycopg

        with psycopg.connect(self.url, connect_timeout=int(scaled(10))) as pg_holder:
            # The tables are locked one after another, and a server's commit that holds one of them and waits for
            # another is a deadlock, which PostgreSQL ends by failing one side, here this one (seen in CI): let the
            # commit go on, then take them again.
            give_up = time.monotonic() + T_WAIT
            while True:
                try:
                    pg_holder.execute("LOCK TABLE sessions, turns, updates IN EXCLUSIVE MODE")
                    break
                except psycopg.errors.DeadlockDetected:
                    pg_holder.rollback()
                    if time.monotonic() > give_up:
                        raise
            try:
                yield
            finally:
                pg_holder.rollback()
