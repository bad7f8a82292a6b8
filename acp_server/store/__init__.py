"""Session persistence: one SQLite file (stdlib `sqlite3`, WAL) so a session survives a crash, a restart and a reload.

A package of small modules, one job each, from the plain values up to the store the server holds:

- `records`: the frozen records handed out, `TurnStatus`, `StoreUnavailable`, the model history as JSON;
- `replay`: the updates replayed on `session/load` and the rebuilt model history (INTERRUPTS.md §6 decision 6);
- `leases`: which process owns a running turn, and whether it is still there;
- `turn_log`: the in-memory buffer each turn appends to, and the row format a flush writes;
- `sqlite_file`: where the file lives, its schema, opening it without ever damaging it;
- `worker`: every SQL transaction, run on a worker thread;
- `store`: `SessionStore`, the store as the event loop sees it.

Importing it imports `sqlite3`: the server imports it only when persistence is set up, never at start-up.
"""

from __future__ import annotations

from acp_server.store.records import (
    LoadedSession,
    SessionPage,
    SessionRecord,
    SessionSummary,
    StoreUnavailable,
    TurnRecord,
    TurnStatus,
    message_from_json,
    message_to_json,
)
from acp_server.store.replay import replay_updates
from acp_server.store.sqlite_file import STORE_FILENAME, default_state_dir
from acp_server.store.store import FLUSH_INTERVAL_S, STALE_AFTER_S, SessionStore
from acp_server.store.turn_log import TurnLog

__all__ = [
    "FLUSH_INTERVAL_S",
    "STALE_AFTER_S",
    "STORE_FILENAME",
    "LoadedSession",
    "SessionPage",
    "SessionRecord",
    "SessionStore",
    "SessionSummary",
    "StoreUnavailable",
    "TurnLog",
    "TurnRecord",
    "TurnStatus",
    "default_state_dir",
    "message_from_json",
    "message_to_json",
    "replay_updates",
]
