"""Upgrading a store written by an older acp-server, inside the write transaction that opens it.

Schema 1 stored each turn's `session/update` payloads as the client was sent them; schema 2 stores the project's
own turn records (turn_records.py). The upgrade from 1 rewrites every row of the `updates` table in place, record by
record, and bumps `user_version`, all in the transaction that registers this process: another process opening the
store at the same moment waits for it and then finds it upgraded, and a failure leaves the file as it was.

Schema 3 adds records (the display terminals of ACP v2) and changes none: a schema-2 store is schema 3 as it is, and
its upgrade only bumps `user_version`, so that an acp-server of schema 2 refuses the store instead of failing on a
session that holds a record it does not know.

Schema 4 adds the `sessions.archived` column (0 for every session a schema-3 store holds: none was archived), so
that an acp-server of schema 3, which would list and load an archived session as any other, refuses the store.

Reading a schema-1 item means reading the wire format of that time, which only the protocol edge knows, so the
caller hands in `read_legacy` (protocol/v1/legacy.py's `entry_of`); without it a schema-1 store is refused untouched.
"""

from __future__ import annotations

import logging
import sqlite3
import zlib
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

from acp_server.errors import StoreUnavailable
from acp_server.store.turn_log import decode_row, encode_row
from acp_server.store.turn_records import TurnEntry, encode_entry

__all__ = ["ReadLegacy", "upgrade"]

log = logging.getLogger(__name__)

_PAGE_ROWS = 64

# A schema-1 item (an update object) as a record; None for one that is not kept (live-only notices).
ReadLegacy = Callable[[Mapping[str, Any]], TurnEntry | None]


def upgrade(conn: sqlite3.Connection, path: Path, version: int, read_legacy: ReadLegacy | None) -> None:
    """Bring a store of schema `version` (older than today's) up to date; inside the caller's write transaction."""
    if version == 1:
        if read_legacy is None:
            raise StoreUnavailable(
                f"session store {path}: written by an older acp-server (schema 1) and not upgraded here;"
                " it was left untouched"
            )
        _records_from_updates(conn, path, read_legacy)
        version = 2
    if version == 2:
        version = 3  # new records only: every schema-2 row reads as it is
    if version == 3:
        _add_archived(conn)
        version = 4
    conn.execute(f"PRAGMA user_version = {version}")


def _add_archived(conn: sqlite3.Connection) -> None:
    """The archive flag, every session not archived. Only when the column is missing: a store whose version was set
    back by hand (the upgrade tests do) may have it already, and adding it twice is an error."""
    columns = {row[1] for row in conn.execute("PRAGMA table_info(sessions)")}
    if "archived" not in columns:
        conn.execute("ALTER TABLE sessions ADD COLUMN archived INTEGER NOT NULL DEFAULT 0")


def _update_rows(conn: sqlite3.Connection) -> Iterator[tuple[int, bytes]]:
    """Every row of `updates`, a page at a time: a big store's rows (up to 1 MiB each) need not all be in memory."""
    after = -1
    while page := conn.execute(
        "SELECT seq, data FROM updates WHERE seq > ? ORDER BY seq LIMIT ?", (after, _PAGE_ROWS)
    ).fetchall():
        yield from page
        after = page[-1][0]


def _records_from_updates(conn: sqlite3.Connection, path: Path, read_legacy: ReadLegacy) -> None:
    dropped = rows = 0
    for seq, data in _update_rows(conn):
        try:
            items = decode_row(data)
        except (ValueError, zlib.error) as exc:
            # Left as it is: loading that session reports it unreadable, as it did before the upgrade.
            log.warning("session store %s: update row %d is unreadable and was not upgraded (%s)", path, seq, exc)
            continue
        entries = [read_legacy(item) if isinstance(item, dict) else None for item in items]
        kept = [encode_entry(e) for e in entries if e is not None]
        dropped += len(items) - len(kept)
        rows += 1
        if kept:
            conn.execute("UPDATE updates SET n = ?, data = ? WHERE seq = ?", (len(kept), encode_row(kept), seq))
        else:
            conn.execute("DELETE FROM updates WHERE seq = ?", (seq,))
    log.info(
        "session store %s: upgraded to schema 2 (%d row(s) of updates now records; %d live-only update(s) dropped)",
        path,
        rows,
        dropped,
    )
