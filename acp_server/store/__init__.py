"""Session persistence: one SQLite file (stdlib `sqlite3`, WAL) so a session survives a crash, a restart and a reload;
or, for replicas that share their sessions, a PostgreSQL database (`--store-url`, postgres.py) with the same records.

A package of small modules, one job each, from the plain values up to the store the server holds:

- `turn_records`: what a turn showed the client, as the project's own records (text, thoughts, tool calls, plans),
  and the row format they are stored in;
- `records`: the frozen records handed out, `TurnStatus`, the model history as JSON;
- `restore`: what a stored session is restored from (load, resume): the records to replay (the protocol edge
  renders them) and the rebuilt model history (docs/interrupts.md decision 6);
- `leases`: which process owns a running turn, and whether it is still there;
- `turn_log`: the in-memory buffer each turn appends to, and the row format a flush writes;
- `sqlite_file`: where the file lives, its schema, opening it without ever damaging it;
- `migration`: upgrading a store an older version wrote (schema 1 kept `session/update` payloads);
- `worker`: every SQL transaction, run on a worker thread;
- `postgres`: the same jobs on PostgreSQL (psycopg 3, async, pooled), imported only when such a store is opened;
- `store`: `SessionStore`, the store as the event loop sees it.

Importing it imports `sqlite3`: the server imports it only when persistence is set up, never at start-up.

May import `runtime` (the model's messages) and `settings` only: it knows no wire shapes.
"""

from __future__ import annotations

from acp_server.store.migration import ReadLegacy
from acp_server.store.records import (
    EMPTY_SESSION_GRACE_S,
    LoadedSession,
    Pruned,
    Retention,
    SessionOverview,
    SessionPage,
    SessionRecord,
    SessionSummary,
    TurnRecord,
    TurnStatus,
    message_from_json,
    message_to_json,
)
from acp_server.store.restore import ReplayEntry, TurnClosed, replay_entries
from acp_server.store.sqlite_file import STORE_FILENAME, default_state_dir
from acp_server.store.store import FLUSH_INTERVAL_S, STALE_AFTER_S, SessionStore
from acp_server.store.turn_log import TurnLog
from acp_server.store.turn_records import (
    AgentText,
    AgentThought,
    ContextUsage,
    PlanSet,
    TerminalEnded,
    ToolCallChanged,
    ToolCallOpened,
    ToolCallTerminal,
    TurnEntry,
    UserChunk,
)

__all__ = [
    "EMPTY_SESSION_GRACE_S",
    "FLUSH_INTERVAL_S",
    "STALE_AFTER_S",
    "STORE_FILENAME",
    "AgentText",
    "AgentThought",
    "ContextUsage",
    "LoadedSession",
    "PlanSet",
    "Pruned",
    "ReadLegacy",
    "ReplayEntry",
    "Retention",
    "SessionOverview",
    "SessionPage",
    "SessionRecord",
    "SessionStore",
    "SessionSummary",
    "TerminalEnded",
    "ToolCallChanged",
    "ToolCallOpened",
    "ToolCallTerminal",
    "TurnClosed",
    "TurnEntry",
    "TurnLog",
    "TurnRecord",
    "TurnStatus",
    "UserChunk",
    "default_state_dir",
    "message_from_json",
    "message_to_json",
    "replay_entries",
]
