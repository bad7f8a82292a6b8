"""Where an end-to-end test's servers keep their sessions, seen from outside as another process would: the SQLite file
in the state directory, or the PostgreSQL database of `--store-url` (tests/conftest.py's `store_url`, one parameter
for both). The same statements (SQLite's `?` placeholders) read and change either, and `write_lock` holds the
store's tables as another process's (or replica's) long transaction would."""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.support.harness import T_WAIT, scaled

__all__ = ["StoreAt"]


@dataclass(frozen=True)
class StoreAt:
    state: Path  # the state directory (the SQLite file's, and the server's other files' in both cases)
    url: str | None  # the PostgreSQL store's URL; None: the SQLite file

    def env(self) -> dict[str, str]:
        """The environment that points a server (or `acp-server sessions`) at this store."""
        env = {"ACP_SERVER_STATE_DIR": str(self.state)}
        if self.url is not None:
            env["ACP_SERVER_STORE_URL"] = self.url
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
            pg_holder.execute("LOCK TABLE sessions, turns, updates IN EXCLUSIVE MODE")
            try:
                yield
            finally:
                pg_holder.rollback()
