"""Session persistence: one SQLite file (stdlib `sqlite3`, WAL) so a session survives a crash, a restart and a reload.

Why it is shaped this way:

- **The hot path is an append to a buffer.** The server streams up to ~1M chunks/s and every `session/update` it
  sends is stored, so `TurnLog.append` only encodes the update into an in-memory buffer. A flush
  (`SessionStore.flush`, run every 50 ms by `run_flusher` and before every prompt response) takes the whole buffer
  and commits it in ONE transaction on a worker thread; the event loop never waits for SQLite. A flush writes one
  row per turn (a JSON array of up to 1 MiB of that turn's new updates, zlib-compressed when large), not one row per
  chunk, so its cost barely depends on how finely the model streamed. A kill -9 loses what was appended since the
  last commit: at most the 50 ms interval plus the commit's duration.
- **Plain rows, no schema objects** (layer 2 of ARCHITECTURE.md): updates are the exact `update` objects the client
  was sent; the model-visible history is `runtime.model.Message` encoded by `message_to_json`.
- **Several processes share one store** (one server per editor window). Each registers an owner row (a lease: pid,
  the process start time from /proc so a reused pid is not mistaken for it, host, boot id, pid namespace, heartbeat).
  Turns left `running` by an owner that is gone are marked `interrupted` at open, on load, and every few seconds;
  a live owner's turns never are. On the same machine the process check decides (a laptop that slept for an hour
  has stale heartbeats but live processes); the heartbeat decides only where the process cannot be checked.
- **A store that cannot be opened is never deleted or overwritten**: `SessionStore.open` raises `StoreUnavailable`
  with a message for stderr, and the server keeps serving new sessions without persistence.
- **History keeps what happened** (INTERRUPTS.md §6 decision 6): `replay_updates` closes a cancelled or interrupted
  turn with an `[cancelled]` / `[interrupted]` agent message chunk, and the model history of an interrupted turn is
  rebuilt from what was streamed, ending with the same note.

Layout: `sessions` (one row per session; `deleted` is a tombstone, content rows are removed), `turns` (status, stop
reason, the prompt as the model saw it, and the messages the turn added to the model history), `updates` (per turn,
JSON arrays of update objects in commit order, zlib-compressed from 4 KiB), `owners` (the leases).
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import logging
import os
import socket
import sqlite3
import time
import uuid
import zlib
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal, TypeVar, cast

import anyio
import anyio.to_thread
import orjson

from acp_server.runtime.model import Message, ToolCall

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

log = logging.getLogger(__name__)
_T = TypeVar("_T")

STORE_FILENAME = "sessions.sqlite3"
TurnStatus = Literal["running", "completed", "cancelled", "interrupted", "failed"]

_APPLICATION_ID = 0x41435053  # "ACPS": tells our file from somebody else's SQLite database
_SCHEMA_VERSION = 1
_BUSY_TIMEOUT_S = 5.0
FLUSH_INTERVAL_S = 0.05  # half the 100 ms loss budget, leaving the other half for the commit and scheduling
_HEARTBEAT_INTERVAL_S = 5.0
_SWEEP_INTERVAL_S = 5.0
STALE_AFTER_S = 30.0
# A batch that keeps failing is retried, but not forever and not without bound: past these it is dropped and logged.
_RETRY_WINDOW_S = 60.0
_MAX_RETAINED_UPDATES = 500_000
_ROW_BYTES = 1 << 20  # a row's JSON before compression: bounded, so one is cheap to write and to read back
_COMPRESS_FROM = 4096  # bytes of JSON
_ROLES: Mapping[str, Literal["user", "assistant", "tool"]] = {"user": "user", "assistant": "assistant", "tool": "tool"}
_CLOSING_NOTES: Mapping[str, str] = {"cancelled": "[cancelled]", "interrupted": "[interrupted]", "failed": "[failed]"}

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
    deleted INTEGER NOT NULL DEFAULT 0
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
_SESSION_COLUMNS = (
    "id, cwd, additional_directories, mcp_servers, created_at, updated_at, title, mode, config, parent_id, forked_from"
)
_INSERT_UPDATES = (
    "INSERT INTO updates (turn_id, n, data) SELECT ?, ?, ? WHERE EXISTS (SELECT 1 FROM turns WHERE turn_id = ?)"
)
_TOUCH = "UPDATE sessions SET updated_at = ? WHERE id = ? AND deleted = 0"


class StoreUnavailable(Exception):  # noqa: N818 - the name the server's design uses
    """The store cannot be used (unreadable, corrupt, not ours, newer schema). Its file is left exactly as it was."""


def default_state_dir() -> Path:
    """Where the store lives unless `--state-dir` / `ACP_SERVER_STATE_DIR` say otherwise."""
    import platformdirs  # only when persistence is actually set up

    return Path(platformdirs.user_state_dir("acp-server", appauthor=False))


# --- records handed to the caller ---


@dataclass(frozen=True, slots=True)
class SessionRecord:
    session_id: str
    cwd: str
    additional_directories: tuple[str, ...]
    mcp_servers: tuple[dict[str, Any], ...]
    created_at: str  # ISO 8601, UTC
    updated_at: str
    title: str | None
    mode: str
    config: dict[str, Any]
    parent_session_id: str | None
    forked_from: str | None


@dataclass(frozen=True, slots=True)
class TurnRecord:
    turn_id: str
    status: TurnStatus
    stop_reason: str | None
    error: str | None
    started_at: str
    ended_at: str | None
    prompt_text: str
    # The exact `update` objects the client was sent, in order, starting with the prompt's user_message_chunks.
    updates: list[dict[str, Any]]


@dataclass(frozen=True, slots=True)
class LoadedSession:
    """Everything `session/load` needs: replay `replay_updates(loaded)`, then continue from `history`."""

    session: SessionRecord
    turns: list[TurnRecord]
    # The model-visible conversation to continue from (interrupted turns rebuilt with an `[interrupted]` note;
    # turns still running in another live process left out).
    history: list[Message]


@dataclass(frozen=True, slots=True)
class SessionSummary:
    """One `session/list` entry."""

    session_id: str
    cwd: str
    additional_directories: tuple[str, ...]
    title: str | None
    updated_at: str  # ISO 8601, UTC


@dataclass(frozen=True, slots=True)
class SessionPage:
    sessions: list[SessionSummary]
    next_cursor: str | None


# --- the model history as JSON ---


def message_to_json(message: Message) -> dict[str, Any]:
    data: dict[str, Any] = {"role": message.role, "content": message.content}
    if message.tool_calls:
        data["toolCalls"] = [{"id": c.id, "name": c.name, "arguments": c.arguments} for c in message.tool_calls]
    if message.tool_call_id is not None:
        data["toolCallId"] = message.tool_call_id
    return data


def message_from_json(data: Mapping[str, Any]) -> Message:
    """The inverse of `message_to_json`; raises ValueError on anything it did not write."""
    role = _ROLES.get(data.get("role", ""))
    content = data.get("content")
    if role is None or not isinstance(content, str):
        raise ValueError(f"not a stored message: {data!r:.200}")
    calls = tuple(ToolCall(str(c["id"]), str(c["name"]), dict(c["arguments"])) for c in data.get("toolCalls", ()))
    tool_call_id = data.get("toolCallId")
    return Message(role, content, calls, None if tool_call_id is None else str(tool_call_id))


def _encode_messages(messages: Iterable[Message]) -> bytes:
    return orjson.dumps([message_to_json(m) for m in messages])


def _decode_messages(data: bytes) -> list[Message]:
    return [message_from_json(m) for m in orjson.loads(data)]


# --- replay (INTERRUPTS.md §6 decision 6) ---


def replay_updates(loaded: LoadedSession, *, coalesce: bool = False) -> list[dict[str, Any]]:
    """The `update` objects to send, in order, before answering `session/load`.

    Every stored update as the client first saw it. A finished turn whose tool calls never reached a final status
    (the process died) gets a `failed` tool_call_update for each, and a cancelled, interrupted or failed turn ends
    with an `agent_message_chunk` `[cancelled]` / `[interrupted]` / `[failed]` whose `_meta` is
    `{"acpServer": {"turnStatus": ...}}`. A turn still running in another live process is replayed as far as it
    has been committed, without a closing chunk. `notice` updates are live-only (ACP) and never replayed.
    With `coalesce`, consecutive text chunks of one message are merged into one chunk: the client shows the same
    text, from far fewer notifications.
    """
    out: list[dict[str, Any]] = []
    for turn in loaded.turns:
        updates = [u for u in turn.updates if u.get("sessionUpdate") != "notice"]
        out += _coalesced(updates) if coalesce else updates
        if turn.status == "running":
            continue
        for call_id in _open_tool_calls(turn.updates):
            out.append(
                {
                    "sessionUpdate": "tool_call_update",
                    "toolCallId": call_id,
                    "status": "failed",
                    "content": [{"type": "content", "content": {"type": "text", "text": _ended_call_text(turn)}}],
                }
            )
        note = _CLOSING_NOTES.get(turn.status)
        if note is not None:
            out.append(
                {
                    "sessionUpdate": "agent_message_chunk",
                    "content": {"type": "text", "text": note},
                    "messageId": f"msg_{turn.turn_id}_end",
                    "_meta": {"acpServer": {"turnStatus": turn.status}},
                }
            )
    return out


def _ended_call_text(turn: TurnRecord) -> str:
    return "The tool call was interrupted." if turn.status == "interrupted" else f"The tool call was {turn.status}."


def _open_tool_calls(updates: Sequence[Mapping[str, Any]]) -> list[str]:
    status: dict[str, str] = {}
    for update in updates:
        kind = update.get("sessionUpdate")
        if kind == "tool_call":
            status[str(update.get("toolCallId"))] = str(update.get("status", "pending"))
        elif kind == "tool_call_update" and "status" in update:
            status[str(update.get("toolCallId"))] = str(update["status"])
    return [call_id for call_id, s in status.items() if s not in ("completed", "failed")]


_CHUNK_KINDS = frozenset({"agent_message_chunk", "agent_thought_chunk", "user_message_chunk"})


def _coalesced(updates: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    run: list[str] = []  # the texts of the chunk run that out[-1] starts
    key: tuple[Any, ...] | None = None
    for update in updates:
        text = _text_of(update) if update.get("sessionUpdate") in _CHUNK_KINDS else None
        this = None if text is None else (update.get("sessionUpdate"), update.get("messageId"), update.get("_meta"))
        if this is not None and this == key and update.keys() == out[-1].keys():
            run.append(text or "")
            continue
        if len(run) > 1:
            out[-1] = {**out[-1], "content": {"type": "text", "text": "".join(run)}}
        out.append(update)
        run = [text or ""]
        key = this
    if len(run) > 1:
        out[-1] = {**out[-1], "content": {"type": "text", "text": "".join(run)}}
    return out


def _text_of(update: Mapping[str, Any]) -> str | None:
    """The text of a chunk whose content is exactly a text block (no annotations, no _meta), else None."""
    content = update.get("content")
    if isinstance(content, dict) and len(content) == 2 and content.get("type") == "text":
        text = content.get("text")
        return text if isinstance(text, str) else None
    return None


def _interrupted_messages(turn: TurnRecord) -> list[Message]:
    """What the model is told about a turn the process died in: the prompt, what was streamed, and a note."""
    parts: list[str] = []
    message_id: object = None
    titles: dict[str, str] = {}
    status: dict[str, str] = {}
    for update in turn.updates:
        kind = update.get("sessionUpdate")
        if kind == "agent_message_chunk":
            text = _text_of(update)
            if text is None:
                continue
            if message_id != update.get("messageId") or not parts:
                parts.append("")
                message_id = update.get("messageId")
            parts[-1] += text
        elif kind in ("tool_call", "tool_call_update"):
            call_id = str(update.get("toolCallId"))
            if "title" in update:
                titles[call_id] = str(update["title"])
            if "status" in update or kind == "tool_call":
                status[call_id] = str(update.get("status", "pending"))
            if kind == "tool_call":
                parts.append("")  # the reply after a tool call is a new paragraph
                message_id = None
    lines = [p for p in parts if p]
    lines += [f'[tool call "{titles.get(c, c)}": {s}]' for c, s in status.items()]
    lines.append(_CLOSING_NOTES["interrupted"])
    return [Message("user", turn.prompt_text), Message("assistant", "\n\n".join(lines))]


# --- process identity, for the leases ---


@dataclass(frozen=True, slots=True)
class _Identity:
    pid: int
    start_time: str | None
    host: str
    boot_id: str | None
    pid_ns: str | None


def _proc_stat(pid: int) -> tuple[str, str] | None:
    """(state, start time in clock ticks since boot) of a process, from /proc; None where it cannot be read."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_bytes()
        fields = raw[raw.rindex(b")") + 2 :].split()
        return fields[0].decode(), fields[19].decode()
    except (OSError, ValueError, IndexError):
        return None


def _read_text(path: str) -> str | None:
    try:
        return Path(path).read_text().strip() or None
    except OSError:
        return None


def _pid_namespace() -> str | None:
    try:
        return os.readlink("/proc/self/ns/pid")
    except OSError:
        return None


def _own_identity() -> _Identity:
    pid = os.getpid()
    stat = _proc_stat(pid)
    return _Identity(
        pid=pid,
        start_time=None if stat is None else stat[1],
        host=socket.gethostname(),
        boot_id=_read_text("/proc/sys/kernel/random/boot_id"),
        pid_ns=_pid_namespace(),
    )


def _owner_alive(me: _Identity, owner: _Identity, heartbeat: float, now: float, stale_after: float) -> bool:
    """Is the process behind an owner row still there? Never says no for a process that is alive and checkable."""
    fresh = now - heartbeat < stale_after
    if owner.host != me.host or owner.pid <= 0:
        return fresh  # another machine (a shared home directory): only the heartbeat can tell
    if me.boot_id is not None and owner.boot_id is not None and me.boot_id != owner.boot_id:
        return False  # the machine rebooted since
    if me.pid_ns is None or owner.pid_ns != me.pid_ns:
        return fresh  # another pid namespace (a container): its pids mean nothing here
    try:
        os.kill(owner.pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # exists, belongs to another user
    stat = _proc_stat(owner.pid)
    if stat is None or owner.start_time is None:
        return fresh  # exists, but whether it is the same process cannot be told (no /proc, hidepid)
    state, start_time = stat
    return state not in ("Z", "X") and start_time == owner.start_time


# --- the write buffer ---


class TurnLog:
    """One turn's stream of updates into the store: `append` each update exactly as it is sent to the client.

    Cheap and synchronous: the update is encoded at once (so the caller may reuse or drop it) straight into a
    growing JSON array for the next flush. A bytearray, not a list of objects: keeping tens of thousands of small
    dicts or bytes alive until the flush costs several times more per chunk (allocator and garbage collector).
    Appends after `SessionStore.finish_turn` are ignored, like the run's fence.
    """

    __slots__ = ("_buf", "_count", "_dirty", "_done", "_queued", "_rows", "session_id", "turn_id")

    def __init__(self, session_id: str, turn_id: str, dirty: list[TurnLog]) -> None:
        self.session_id = session_id
        self.turn_id = turn_id
        self._dirty = dirty
        self._buf = bytearray(b"[")
        self._count = 0
        self._rows: list[tuple[int, bytearray]] = []  # full JSON arrays waiting for the flush
        self._queued = False
        self._done = False

    def append(self, update: Mapping[str, Any]) -> None:
        if self._done:
            return
        try:
            data = orjson.dumps(update)
        except TypeError:
            log.warning("session %s: an update that is not JSON was not stored: %.200r", self.session_id, update)
            return
        if not self._queued:
            self._queued = True
            self._dirty.append(self)
        buf = self._buf
        buf += data
        buf += b","
        self._count += 1
        if len(buf) >= _ROW_BYTES:
            self._seal()

    @property
    def finished(self) -> bool:
        return self._done

    @property
    def buffered(self) -> int:
        return self._count + sum(count for count, _ in self._rows)

    def _seal(self) -> None:
        buf = self._buf
        buf[-1:] = b"]"
        self._rows.append((self._count, buf))
        self._buf = bytearray(b"[")
        self._count = 0

    def _take(self) -> list[tuple[int, bytearray]]:
        if self._count:
            self._seal()
        rows, self._rows = self._rows, []
        self._queued = False
        return rows


@dataclass(slots=True)
class _Batch:
    """What one flush commits, in one transaction: statements in call order, then each turn's new updates."""

    ops: list[tuple[str, tuple[Any, ...]]]
    updates: list[tuple[str, int, bytearray]]  # turn id, how many updates, their JSON array
    heartbeat: bool
    sweep: bool
    first_taken: float = field(default_factory=time.monotonic)

    def after(self, earlier: _Batch | None) -> _Batch:
        if earlier is None:
            return self
        return _Batch(
            earlier.ops + self.ops,
            earlier.updates + self.updates,
            earlier.heartbeat or self.heartbeat,
            earlier.sweep or self.sweep,
            earlier.first_taken,
        )

    @property
    def empty(self) -> bool:
        return not (self.ops or self.updates or self.heartbeat or self.sweep)

    def update_count(self) -> int:
        return sum(count for _, count, _ in self.updates)


def _update_rows(updates: Sequence[tuple[str, int, bytearray]]) -> Iterator[tuple[str, int, bytes, str]]:
    for turn_id, count, data in updates:
        # Streamed chunks repeat themselves (kind, message id): zlib at level 1 shrinks them ~100x for less CPU than
        # SQLite spends writing them uncompressed, and it runs without the GIL.
        yield turn_id, count, zlib.compress(data, 1) if len(data) >= _COMPRESS_FROM else bytes(data), turn_id


def _decode_updates(data: bytes) -> list[dict[str, Any]]:
    """A stored row: a JSON array, or (from _COMPRESS_FROM bytes on) the same zlib-compressed."""
    decoded = orjson.loads(data if data[:1] == b"[" else zlib.decompress(data))
    if not isinstance(decoded, list):
        raise ValueError("a stored update row is not a list")
    return decoded


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _new_turn_id() -> str:
    return uuid.uuid4().hex


# --- the store ---


class SessionStore:
    """One SQLite store shared by this process's sessions (and by other server processes).

    Writes (`create_session`, `begin_turn`, `TurnLog.append`, `finish_turn`, `set_*`, `touch`, `delete`) are
    synchronous and only buffer; call them from the event loop thread. `flush` commits the buffer on a worker thread.
    Reads (`load`, `list_sessions`) and `fork` flush first, so they see everything this process wrote.
    """

    def __init__(self, path: Path, conn: sqlite3.Connection, identity: _Identity, owner_id: str, stale: float) -> None:
        self.path = path
        self.owner_id = owner_id
        self._conn = conn
        self._identity = identity
        self._stale_after = stale
        self._ops: list[tuple[str, tuple[Any, ...]]] = []
        self._dirty: list[TurnLog] = []
        self._failed: _Batch | None = None
        self._lock: anyio.Lock | None = None
        self._taken = 0  # batches taken so far
        self._committed = 0  # the latest batch known committed
        now = time.monotonic()
        self._last_heartbeat = now
        self._last_sweep = now
        self._closed = False

    # -- opening and closing --

    @classmethod
    def open(
        cls, path: str | os.PathLike[str], *, check: bool = True, stale_after: float = STALE_AFTER_S
    ) -> SessionStore:
        """Open (creating if absent) the store at `path`, register this process as an owner, and mark turns of
        owners that are gone `interrupted`. Blocking (a quick_check reads the whole file): call it before serving or
        in a worker thread. Raises StoreUnavailable, leaving the file untouched, when it cannot be used."""
        store_path = Path(path)
        conn = _connect(store_path)
        try:
            _validate(conn, store_path, check=check)
            _enter_wal(conn)
            conn.execute("PRAGMA synchronous = NORMAL")  # WAL + NORMAL: a commit survives a process crash
            conn.execute("PRAGMA journal_size_limit = 67108864")
            identity = _own_identity()
            owner_id = uuid.uuid4().hex
            store = cls(store_path, conn, identity, owner_id, stale_after)
            conn.execute("BEGIN IMMEDIATE")
            try:
                if not _validate(conn, store_path, check=False):  # again, under the write lock: still new?
                    for statement in _SCHEMA.split(";"):
                        if statement.strip():
                            conn.execute(statement)
                    conn.execute(f"PRAGMA application_id = {_APPLICATION_ID}")
                    conn.execute(f"PRAGMA user_version = {_SCHEMA_VERSION}")
                store._heartbeat(time.time())
                swept = store._sweep(time.time())
                conn.execute("COMMIT")
            except BaseException:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise
        except sqlite3.Error as exc:
            conn.close()
            raise StoreUnavailable(
                f"session store {store_path}: cannot be used ({exc}); it was left untouched"
            ) from exc
        except BaseException:
            conn.close()
            raise
        if swept:
            log.info("session store: %d turn(s) of processes that are gone marked interrupted", swept)
        return store

    def close(self) -> None:
        """Commit what is buffered, mark this process's still-running turns `interrupted`, release the lease and
        close the connection. Blocking; while the event loop runs use `aclose`."""
        if not self._closed:
            self._closed = True
            self._finish(self._take(final=True))

    async def aclose(self) -> None:
        with anyio.CancelScope(shield=True):
            async with self._async_lock():
                if self._closed:
                    return
                self._closed = True
                batch = self._take(final=True)  # here, on the event loop thread that appends
                await anyio.to_thread.run_sync(self._finish, batch)

    def _finish(self, batch: _Batch) -> None:
        conn = self._conn
        try:
            self._commit(batch)
            conn.execute("BEGIN IMMEDIATE")
            conn.execute(
                "UPDATE turns SET status = 'interrupted', ended_at = ? WHERE status = 'running' AND owner_id = ?",
                (_now(), self.owner_id),
            )
            conn.execute("DELETE FROM owners WHERE owner_id = ?", (self.owner_id,))
            conn.execute("COMMIT")
        except sqlite3.Error as exc:
            log.error("session store %s: the final write failed: %s", self.path, exc)
            if conn.in_transaction:
                conn.execute("ROLLBACK")
        finally:
            conn.close()

    # -- buffered writes (synchronous, cheap) --

    def create_session(
        self,
        session_id: str,
        cwd: str,
        *,
        additional_directories: Sequence[str] = (),
        mcp_servers: Sequence[Mapping[str, Any]] = (),
        mode: str = "default",
        title: str | None = None,
        config: Mapping[str, Any] | None = None,
        parent_session_id: str | None = None,
    ) -> None:
        now = _now()
        self._ops.append(
            (
                f"INSERT OR REPLACE INTO sessions ({_SESSION_COLUMNS}, deleted) VALUES (?,?,?,?,?,?,?,?,?,?,NULL,0)",
                (
                    session_id,
                    cwd,
                    orjson.dumps(list(additional_directories)),
                    orjson.dumps(list(mcp_servers)),
                    now,
                    now,
                    title,
                    mode,
                    orjson.dumps(dict(config or {})),
                    parent_session_id,
                ),
            )
        )

    def begin_turn(
        self, session_id: str, prompt: Sequence[Mapping[str, Any]], prompt_text: str, *, message_id: str | None = None
    ) -> TurnLog:
        """Start a `running` turn: its first updates are the prompt's blocks as `user_message_chunk`s (one message).
        `prompt_text` is the user message as the model saw it (used if the turn is interrupted)."""
        turn = TurnLog(session_id, _new_turn_id(), self._dirty)
        now = _now()
        self._ops.append(
            (
                "INSERT INTO turns (turn_id, session_id, owner_id, status, started_at, prompt_text)"
                " SELECT ?, ?, ?, 'running', ?, ? WHERE EXISTS (SELECT 1 FROM sessions WHERE id = ? AND deleted = 0)",
                (turn.turn_id, session_id, self.owner_id, now, prompt_text, session_id),
            )
        )
        self._ops.append((_TOUCH, (now, session_id)))
        user_message = message_id or f"msg_{uuid.uuid4().hex}"
        for block in prompt:
            turn.append({"sessionUpdate": "user_message_chunk", "content": block, "messageId": user_message})
        return turn

    def finish_turn(
        self,
        turn: TurnLog,
        status: TurnStatus,
        *,
        stop_reason: str | None = None,
        error: str | None = None,
        messages: Sequence[Message] = (),
        replaces_history: bool = False,
    ) -> None:
        """Record how the turn ended and what it added to the model history: `messages` are the messages the turn
        appended (starting with its user message), or with `replaces_history` the complete history after it (after
        /clear or a compaction). Then `await flush()` before sending the prompt's response."""
        if turn.finished:
            return
        turn._done = True
        now = _now()
        self._ops.append(
            (
                "UPDATE turns SET status = ?, stop_reason = ?, error = ?, ended_at = ?, messages = ?, replaces = ?"
                " WHERE turn_id = ?",
                (status, stop_reason, error, now, _encode_messages(messages), int(replaces_history), turn.turn_id),
            )
        )
        self._ops.append((_TOUCH, (now, turn.session_id)))

    def set_title(self, session_id: str, title: str | None) -> None:
        self._ops.append(
            ("UPDATE sessions SET title = ?, updated_at = ? WHERE id = ? AND deleted = 0", (title, _now(), session_id))
        )

    def set_mode(self, session_id: str, mode: str) -> None:
        self._ops.append(
            ("UPDATE sessions SET mode = ?, updated_at = ? WHERE id = ? AND deleted = 0", (mode, _now(), session_id))
        )

    def set_config(self, session_id: str, config: Mapping[str, Any]) -> None:
        """Replace the session's stored config option values (e.g. {"model": ..., "thought_level": ...})."""
        self._ops.append(
            (
                "UPDATE sessions SET config = ?, updated_at = ? WHERE id = ? AND deleted = 0",
                (orjson.dumps(dict(config)), _now(), session_id),
            )
        )

    def touch(self, session_id: str) -> None:
        self._ops.append((_TOUCH, (_now(), session_id)))

    def delete(self, session_id: str) -> None:
        """Remove the session's content and leave a tombstone; it disappears from `list_sessions` and `load`.
        An unknown id is a silent success. Later writes for the session are ignored."""
        self._ops += [
            ("UPDATE sessions SET deleted = 1, updated_at = ? WHERE id = ?", (_now(), session_id)),
            (
                "DELETE FROM updates WHERE turn_id IN (SELECT turn_id FROM turns WHERE session_id = ?)",
                (session_id,),
            ),
            ("DELETE FROM turns WHERE session_id = ?", (session_id,)),
        ]

    @property
    def buffered(self) -> int:
        """Updates appended and not yet committed (for stats)."""
        pending = sum(turn.buffered for turn in self._dirty)
        return pending + (0 if self._failed is None else self._failed.update_count())

    # -- flushing --

    async def flush(self) -> bool:
        """Commit everything buffered before this call, in one transaction on a worker thread. Shielded: once
        called it completes (bounded by the busy timeout). False when the commit failed; the batch is kept for the
        next flush (dropped, and logged, after a minute or half a million updates) and the error is logged."""
        with anyio.CancelScope(shield=True):
            committed = await self._flush(self._taken + 1)
        return committed

    async def run_flusher(self, interval: float = FLUSH_INTERVAL_S) -> None:
        """Flush every `interval` seconds, measured from the start of the previous flush, until cancelled. Also
        renews this process's lease and marks turns of gone owners `interrupted` every few seconds."""
        next_at = anyio.current_time()
        while not self._closed:
            next_at += interval
            now = anyio.current_time()
            next_at = max(next_at, now)  # fell behind (a slow commit): no burst of catch-up flushes
            await anyio.sleep(next_at - now)
            await self.flush()

    async def sweep(self) -> int:
        """Mark the running turns of owners that are gone `interrupted` now; how many were marked."""
        return await self._locked(self._sweep_now)

    # -- reads --

    async def load(self, session_id: str) -> LoadedSession | None:
        """Everything needed to replay and continue a session; None for an unknown or deleted one. Like every read,
        raises StoreUnavailable when the store fails underneath (a file damaged while the server runs)."""
        await self.flush()
        return await self._locked(self._load, session_id)

    async def list_sessions(self, cwd: str | None = None, cursor: str | None = None, limit: int = 50) -> SessionPage:
        """A page of sessions, most recently updated first (children and deleted sessions left out). Pass the
        page's `next_cursor` for the next page; an invalid cursor raises ValueError."""
        if limit < 1:
            raise ValueError("limit must be at least 1")
        after = _decode_cursor(cursor) if cursor is not None else None
        await self.flush()
        return await self._locked(self._list, cwd, after, limit)

    async def fork(
        self,
        session_id: str,
        new_id: str,
        *,
        cwd: str | None = None,
        additional_directories: Sequence[str] | None = None,
        mcp_servers: Sequence[Mapping[str, Any]] | None = None,
    ) -> bool:
        """Copy a session (settings, turns, updates, history) under `new_id`; a turn still running is copied as
        `interrupted`. False when the source is unknown or deleted; ValueError when `new_id` exists."""
        await self.flush()
        overrides = (
            cwd,
            None if additional_directories is None else orjson.dumps(list(additional_directories)),
            None if mcp_servers is None else orjson.dumps(list(mcp_servers)),
        )
        return await self._locked(self._fork, session_id, new_id, overrides)

    # -- internals: event loop side --

    def _async_lock(self) -> anyio.Lock:
        if self._lock is None:
            self._lock = anyio.Lock()
        return self._lock

    async def _locked(self, func: Callable[..., _T], *args: Any) -> _T:
        """Run `func` on a worker thread, alone on the connection. Shielded: a thread cannot be stopped midway, and
        a cancelled caller must not leave the lock or a transaction half done."""
        result: _T
        with anyio.CancelScope(shield=True):
            async with self._async_lock():
                try:
                    result = await anyio.to_thread.run_sync(func, *args)
                except sqlite3.Error as exc:
                    raise StoreUnavailable(f"session store {self.path}: {exc}") from exc
        return result

    async def _flush(self, wanted: int) -> bool:
        async with self._async_lock():
            if self._committed >= wanted or self._closed:
                return True  # a flush that started after the call already committed everything
            batch = self._take()
            if batch.empty:
                return True
            try:
                await anyio.to_thread.run_sync(self._commit, batch)
            except Exception as exc:
                self._keep_or_drop(batch, exc)
                return False
            self._committed = self._taken
            return True

    def _take(self, *, final: bool = False) -> _Batch:
        now = time.monotonic()
        heartbeat = not final and now - self._last_heartbeat >= _HEARTBEAT_INTERVAL_S
        sweep = not final and now - self._last_sweep >= _SWEEP_INTERVAL_S
        if heartbeat:
            self._last_heartbeat = now
        if sweep:
            self._last_sweep = now
        updates = [(turn.turn_id, count, data) for turn in self._dirty for count, data in turn._take()]
        self._dirty.clear()
        batch = _Batch(self._ops, updates, heartbeat, sweep).after(self._failed)
        self._ops = []
        self._failed = None
        self._taken += 1
        return batch

    def _keep_or_drop(self, batch: _Batch, exc: Exception) -> None:
        count = batch.update_count()
        transient = isinstance(exc, sqlite3.OperationalError)
        if transient and time.monotonic() - batch.first_taken < _RETRY_WINDOW_S and count < _MAX_RETAINED_UPDATES:
            self._failed = batch
            log.warning("session store %s: a flush failed (%s); retrying with the next one", self.path, exc)
            return
        log.error(
            "session store %s: dropped %d buffered statement(s) and %d update(s) after: %s",
            self.path,
            len(batch.ops),
            count,
            exc,
        )

    # -- internals: worker thread side (one at a time, under the lock) --

    def _commit(self, batch: _Batch) -> None:
        if batch.empty:
            return
        conn = self._conn
        conn.execute("BEGIN IMMEDIATE")
        try:
            for sql, params in batch.ops:
                conn.execute(sql, params)
            if batch.updates:
                conn.executemany(_INSERT_UPDATES, _update_rows(batch.updates))
            wall = time.time()
            if batch.heartbeat:
                self._heartbeat(wall)
            swept = self._sweep(wall) if batch.sweep else 0
            conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise
        if swept:
            log.info("session store: %d turn(s) of processes that are gone marked interrupted", swept)

    def _heartbeat(self, wall: float) -> None:
        me = self._identity
        self._conn.execute(
            "INSERT INTO owners (owner_id, pid, start_time, host, boot_id, pid_ns, started_at, heartbeat)"
            " VALUES (?,?,?,?,?,?,?,?) ON CONFLICT (owner_id) DO UPDATE SET heartbeat = excluded.heartbeat",
            (self.owner_id, me.pid, me.start_time, me.host, me.boot_id, me.pid_ns, wall, wall),
        )

    def _sweep(self, wall: float) -> int:
        """Inside a write transaction: interrupt the running turns of owners that are gone, forget those owners."""
        conn = self._conn
        live = {self.owner_id}
        gone: list[str] = []
        for owner_id, pid, start_time, host, boot_id, pid_ns, heartbeat in conn.execute(
            "SELECT owner_id, pid, start_time, host, boot_id, pid_ns, heartbeat FROM owners"
        ):
            if owner_id == self.owner_id:
                continue
            owner = _Identity(int(pid), start_time, host, boot_id, pid_ns)
            if _owner_alive(self._identity, owner, float(heartbeat), wall, self._stale_after):
                live.add(owner_id)
            else:
                gone.append(owner_id)
        marks = ",".join("?" * len(live))
        cursor = conn.execute(
            "UPDATE turns SET status = 'interrupted', ended_at = ?"
            f" WHERE status = 'running' AND owner_id NOT IN ({marks})",
            (_now(), *live),
        )
        conn.executemany("DELETE FROM owners WHERE owner_id = ?", [(o,) for o in gone])
        return cursor.rowcount

    def _sweep_now(self) -> int:
        conn = self._conn
        conn.execute("BEGIN IMMEDIATE")
        try:
            swept = self._sweep(time.time())
            conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise
        return swept

    def _load(self, session_id: str) -> LoadedSession | None:
        conn = self._conn
        if conn.execute(
            "SELECT 1 FROM turns WHERE session_id = ? AND status = 'running' AND owner_id != ? LIMIT 1",
            (session_id, self.owner_id),
        ).fetchone():
            self._sweep_now()  # a turn of another process: find out whether that process is still there
        conn.execute("BEGIN")  # one read snapshot for the session, its turns and their updates
        try:
            row = conn.execute(
                f"SELECT {_SESSION_COLUMNS} FROM sessions WHERE id = ? AND deleted = 0", (session_id,)
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
        finally:
            conn.execute("COMMIT")
        updates: dict[str, list[dict[str, Any]]] = {}
        try:
            for turn_id, data in update_rows:
                updates.setdefault(turn_id, []).extend(_decode_updates(data))
        except (ValueError, zlib.error) as exc:
            raise StoreUnavailable(f"session store {self.path}: session {session_id} is unreadable ({exc})") from exc
        turns = [
            TurnRecord(
                turn_id=r[0],
                status=cast(TurnStatus, r[1]),
                stop_reason=r[2],
                error=r[3],
                started_at=r[4],
                ended_at=r[5],
                prompt_text=r[6],
                updates=updates.get(r[0], []),
            )
            for r in turn_rows
        ]
        try:
            return LoadedSession(_session_record(row), turns, _history(turns, turn_rows))
        except (ValueError, KeyError, TypeError) as exc:
            raise StoreUnavailable(f"session store {self.path}: session {session_id} is unreadable ({exc})") from exc

    def _list(self, cwd: str | None, after: tuple[str, str] | None, limit: int) -> SessionPage:
        where = "deleted = 0 AND parent_id IS NULL"
        params: list[Any] = []
        if cwd is not None:
            where += " AND cwd = ?"
            params.append(cwd)
        if after is not None:
            where += " AND (updated_at, id) < (?, ?)"
            params += after
        rows = self._conn.execute(
            f"SELECT id, cwd, additional_directories, title, updated_at FROM sessions WHERE {where}"
            " ORDER BY updated_at DESC, id DESC LIMIT ?",
            (*params, limit + 1),
        ).fetchall()
        page = [SessionSummary(r[0], r[1], tuple(orjson.loads(r[2])), r[3], r[4]) for r in rows[:limit]]
        more = len(rows) > limit
        return SessionPage(page, _encode_cursor(page[-1].updated_at, page[-1].session_id) if more else None)

    def _fork(self, source: str, new_id: str, overrides: tuple[str | None, bytes | None, bytes | None]) -> bool:
        conn = self._conn
        now = _now()
        conn.execute("BEGIN IMMEDIATE")
        try:
            if conn.execute("SELECT 1 FROM sessions WHERE id = ? AND deleted = 0", (new_id,)).fetchone():
                raise ValueError(f"session {new_id} already exists")
            cwd, directories, servers = overrides
            copied = conn.execute(
                f"INSERT OR REPLACE INTO sessions ({_SESSION_COLUMNS}, deleted)"
                " SELECT ?, coalesce(?, cwd), coalesce(?, additional_directories), coalesce(?, mcp_servers), ?, ?,"
                " title, mode, config, NULL, id, 0 FROM sessions WHERE id = ? AND deleted = 0",
                (new_id, cwd, directories, servers, now, now, source),
            ).rowcount
            if not copied:
                conn.execute("ROLLBACK")
                return False
            turns = conn.execute(
                "SELECT turn_id, owner_id, status, stop_reason, error, started_at, ended_at, prompt_text, messages,"
                " replaces FROM turns WHERE session_id = ? ORDER BY seq",
                (source,),
            ).fetchall()
            for old_id, owner, status, stop, error, started, ended, prompt_text, messages, replaces in turns:
                new_turn = _new_turn_id()
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
            conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise
        return True


# --- opening helpers ---


def _connect(path: Path) -> sqlite3.Connection:
    """A connection to the store file, creating the file (owner-only: sessions hold code and prompts) if absent."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        if path.exists() and not path.is_file():
            raise StoreUnavailable(f"session store {path}: not a regular file; it was left untouched")
        with contextlib.suppress(FileExistsError):
            os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
        with path.open("rb") as f:
            header = f.read(16)
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


def _validate(conn: sqlite3.Connection, path: Path, *, check: bool) -> bool:
    """Is this our store (True), or a new, empty file (False)? One statement, so one consistent read: another
    process may be creating the schema right now. Raises StoreUnavailable for anything else."""
    application_id, version, tables = conn.execute(_INSPECT).fetchone()
    if application_id == 0 and version == 0 and tables == 0:
        return False
    if application_id != _APPLICATION_ID:
        raise StoreUnavailable(f"session store {path}: an SQLite database, but not an acp-server store; left untouched")
    if version > _SCHEMA_VERSION:
        raise StoreUnavailable(
            f"session store {path}: written by a newer acp-server (schema {version} > {_SCHEMA_VERSION});"
            " it was left untouched"
        )
    if check:
        problems = [row[0] for row in conn.execute("PRAGMA quick_check(5)")]
        if problems != ["ok"]:
            raise StoreUnavailable(f"session store {path}: corrupt ({'; '.join(problems)}); it was left untouched")
    return True


def _enter_wal(conn: sqlite3.Connection) -> None:
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


def _session_record(row: Sequence[Any]) -> SessionRecord:
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
    )


def _history(turns: Sequence[TurnRecord], rows: Sequence[Sequence[Any]]) -> list[Message]:
    """The model history: from the last turn that replaced it, each turn's messages in order."""
    start = 0
    for index in range(len(rows) - 1, -1, -1):
        if rows[index][8] and rows[index][7] is not None:
            start = index
            break
    history: list[Message] = []
    for turn, row in zip(turns[start:], rows[start:], strict=True):
        messages = row[7]
        if messages is not None:
            decoded = _decode_messages(messages)
            if row[8]:
                history = decoded
            else:
                history.extend(decoded)
        elif turn.status == "interrupted":
            history.extend(_interrupted_messages(turn))
        # else: still running in another live process; not part of the history yet
    return history


def _encode_cursor(updated_at: str, session_id: str) -> str:
    return base64.urlsafe_b64encode(orjson.dumps([updated_at, session_id])).decode()


def _decode_cursor(cursor: str) -> tuple[str, str]:
    try:
        value = orjson.loads(base64.urlsafe_b64decode(cursor.encode()))
    except (ValueError, binascii.Error, orjson.JSONDecodeError) as exc:
        raise ValueError("invalid cursor") from exc
    if not (isinstance(value, list) and len(value) == 2 and all(isinstance(v, str) for v in value)):
        raise ValueError("invalid cursor")
    return value[0], value[1]
