"""The store's SQLite file: where it lives, its schema, and opening it without ever damaging somebody else's file.

A store that cannot be opened is never deleted or overwritten: every check here raises `StoreUnavailable` with a
message for stderr and leaves the file exactly as it was, and the server keeps serving new sessions without
persistence. The file is ours only when it says so (`application_id`), and a newer schema is left alone.

Layout: `sessions` (one row per session; `deleted` is a tombstone, content rows are removed), `turns` (status, stop
reason, the prompt as the model saw it, and the messages the turn added to the model history), `updates` (per turn,
JSON arrays of turn records in commit order, zlib-compressed from 4 KiB), `owners` (the leases), `holds` (which owner
has which session open, so pruning leaves it alone). `archived` marks a session `session/archive` hid from the
default `session/list`. Schema 4; a store of schema 1 (which kept `session/update` payloads instead of records), 2 or
3 is upgraded when it is opened (migration.py).
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import time
from pathlib import Path

from acp_server.errors import StateFileError, StoreUnavailable
from acp_server.settings.files import open_state_file

__all__ = [
    "HOLD",
    "HOLDS_SCHEMA",
    "SCHEMA_VERSION",
    "SESSION_COLUMNS",
    "STORE_FILENAME",
    "connect",
    "create_schema",
    "default_state_dir",
    "enter_wal",
    "validate",
]

STORE_FILENAME = "sessions.sqlite3"

_APPLICATION_ID = 0x41435053  # "ACPS": tells our file from somebody else's SQLite database
# 2: turn records (turn_records.py) instead of update objects; 3: the display terminal records, which an
# acp-server of schema 2 cannot read (it refuses the store as newer instead of failing on the sessions that hold one);
# 4: `sessions.archived` (ACP's unstable `session/archive`), which an acp-server of schema 3 would ignore, listing and
# loading archived sessions as if they were not
SCHEMA_VERSION = 4
_BUSY_TIMEOUT_S = 5.0

_SCHEMA = """
CREATE TABLE IF NOT EXISTS sessions (
    id TEXT PRIMARY KEY,
    cwd TEXT NOT NULL,
    additional_directories BLOB NOT NULL,
    mcp_servers BLOB NOT NULL,
    created_at TEXT NOT NULL,
    updated_at TEXT NOT NULL,
    title TEXT,
    mode TEXT NOT NULL,
    config BLOB NOT NULL,
    parent_id TEXT,
    forked_from TEXT,
    deleted INTEGER NOT NULL DEFAULT 0,
    archived INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS sessions_recent ON sessions (updated_at, id) WHERE deleted = 0 AND parent_id IS NULL;
CREATE INDEX IF NOT EXISTS sessions_cwd ON sessions (cwd, updated_at, id) WHERE deleted = 0 AND parent_id IS NULL;
CREATE TABLE IF NOT EXISTS turns (
    seq INTEGER PRIMARY KEY,
    turn_id TEXT NOT NULL UNIQUE,
    session_id TEXT NOT NULL,
    owner_id TEXT NOT NULL,
    status TEXT NOT NULL,
    stop_reason TEXT,
    error TEXT,
    started_at TEXT NOT NULL,
    ended_at TEXT,
    prompt_text TEXT NOT NULL,
    messages BLOB,
    replaces INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS turns_session ON turns (session_id, seq);
CREATE INDEX IF NOT EXISTS turns_running ON turns (owner_id) WHERE status = 'running';
CREATE TABLE IF NOT EXISTS updates (
    seq INTEGER PRIMARY KEY,
    turn_id TEXT NOT NULL,
    n INTEGER NOT NULL,
    data BLOB NOT NULL
);
CREATE INDEX IF NOT EXISTS updates_turn ON updates (turn_id, seq);
CREATE TABLE IF NOT EXISTS owners (
    owner_id TEXT PRIMARY KEY,
    pid INTEGER NOT NULL,
    start_time TEXT,
    host TEXT NOT NULL,
    boot_id TEXT,
    pid_ns TEXT,
    started_at REAL NOT NULL,
    heartbeat REAL NOT NULL
);
"""
# Which live process has a session open (session/new, load, resume, fork; gone at session/close, at the owner's exit
# and when the owner is found gone): pruning never removes one. Added beside schema 2 without changing its number:
# `CREATE TABLE IF NOT EXISTS` at every open, and an older acp-server simply does not write it.
HOLDS_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS holds (session_id TEXT NOT NULL, owner_id TEXT NOT NULL,"
    " PRIMARY KEY (session_id, owner_id)) WITHOUT ROWID"
)
HOLD = "INSERT OR IGNORE INTO holds (session_id, owner_id) VALUES (?, ?)"
SESSION_COLUMNS = (
    "id, cwd, additional_directories, mcp_servers, created_at, updated_at, title, mode, config, parent_id, forked_from"
)


def default_state_dir() -> Path:
    """Where the store lives unless `--state-dir` / `ACP_SERVER_STATE_DIR` say otherwise."""
    import platformdirs  # noqa: PLC0415 (only when persistence is set up)

    return Path(platformdirs.user_state_dir("acp-server", appauthor=False))


def create_schema(conn: sqlite3.Connection) -> None:
    """Inside the write transaction that found the file new: the tables, and the marks that make the file ours."""
    for statement in _SCHEMA.split(";"):
        if statement.strip():
            conn.execute(statement)
    conn.execute(f"PRAGMA application_id = {_APPLICATION_ID}")
    conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")


# --- opening helpers ---


def connect(path: Path) -> sqlite3.Connection:
    """A connection to the store file, creating the file (owner-only: sessions hold code and prompts) if absent."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        with contextlib.suppress(FileExistsError):  # O_EXCL: a link in its place is never followed
            os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
        # Checked on the descriptor that is read (settings.open_state_file): a link, a FIFO (which would block the
        # open) or a directory is refused, with no gap between the check and the read.
        fd = open_state_file(path)
        try:
            header = os.read(fd, 16)
        finally:
            os.close(fd)
    except StateFileError as exc:
        raise StoreUnavailable(
            f"session store {path}: not a regular file ({exc.strerror}); it was left untouched"
        ) from None
    except OSError as exc:
        raise StoreUnavailable(f"session store {path}: cannot be opened ({exc})") from exc
    if header and header != b"SQLite format 3\x00":
        raise StoreUnavailable(f"session store {path}: not an SQLite database (corrupt?); it was left untouched")
    try:
        return sqlite3.connect(path, timeout=_BUSY_TIMEOUT_S, isolation_level=None, check_same_thread=False)
    except sqlite3.Error as exc:
        raise StoreUnavailable(f"session store {path}: cannot be opened ({exc})") from exc


_INSPECT = (
    "SELECT (SELECT application_id FROM pragma_application_id), (SELECT user_version FROM pragma_user_version),"
    " (SELECT count(*) FROM sqlite_master)"
)


def validate(conn: sqlite3.Connection, path: Path, *, check: bool) -> int:
    """The schema version of our store, or 0 for a new, empty file. One statement, so one consistent read: another
    process may be creating (or upgrading) the schema right now. Raises StoreUnavailable for anything else."""
    application_id, version, tables = conn.execute(_INSPECT).fetchone()
    if application_id == 0 and version == 0 and tables == 0:
        return 0
    if application_id != _APPLICATION_ID:
        raise StoreUnavailable(f"session store {path}: an SQLite database, but not an acp-server store; left untouched")
    if version > SCHEMA_VERSION:
        raise StoreUnavailable(
            f"session store {path}: written by a newer acp-server (schema {version} > {SCHEMA_VERSION});"
            " it was left untouched"
        )
    if check:
        problems = [row[0] for row in conn.execute("PRAGMA quick_check(5)")]
        if problems != ["ok"]:
            raise StoreUnavailable(f"session store {path}: corrupt ({'; '.join(problems)}); it was left untouched")
    return int(version)


def enter_wal(conn: sqlite3.Connection) -> None:
    """Switch to WAL. SQLite does not wait on its busy handler here when another process holds a lock (as it may
    while creating the same new store), so retry until the busy timeout."""
    deadline = time.monotonic() + _BUSY_TIMEOUT_S
    while True:
        try:
            conn.execute("PRAGMA journal_mode = WAL")
            return
        except sqlite3.OperationalError as exc:
            if ("locked" not in str(exc) and "busy" not in str(exc)) or time.monotonic() > deadline:
                raise
            time.sleep(0.01)
