"""Session persistence: one SQLite file (stdlib `sqlite3`, WAL) so a session survives a crash, a restart and a reload.

`SessionStore` is the store as the event loop sees it. Why it is shaped this way:

- **The hot path is an append to a buffer** (turn_log.py). A flush (`SessionStore.flush`, run every 50 ms by
  `run_flusher`, before every prompt response and before the response of every request that changes a session's
  settings) takes the whole buffer and commits it in ONE transaction on a worker thread (worker.py); the event loop
  never waits for SQLite. A kill -9 loses what was appended since the last commit: at most the 50 ms interval plus
  the commit's duration, and only streamed updates (what a request changed is committed before its response).
- **A failed commit is retried, except for an answered change.** A batch whose commit fails (a full disk, an I/O
  error) is kept for the next flush. But a change a request acknowledges (`commit_change`: a new session, a mode, a
  config option, a deletion) is answered an error then, so it is taken out of the kept batch at once: what the client
  was told failed is never committed later, and what it was told succeeded was committed.
- **Plain rows, no schema objects** (store/ in docs/architecture.md): what a turn showed the client is the project's
  own turn records (turn_records.py), which the protocol edge renders on load; the model-visible history is
  `runtime.model.Message` encoded by `message_to_json` (records.py).
- **Several processes share one store** (one server per editor window). Each registers an owner row (a lease,
  leases.py). Turns left `running` by an owner that is gone are marked `interrupted` at open, on load, and every few
  seconds; a live owner's turns never are. On the same machine the process check decides (a laptop that slept for an
  hour has stale heartbeats but live processes); the heartbeat decides only where the process cannot be checked.
- **Two backends, one promise.** The jobs a flush or a read hands over are SQLite's (worker.py, in a worker thread)
  or PostgreSQL's (postgres.py, coroutines on the loop, for replicas sharing a database: `SessionStore.connect`);
  everything above (buffers, the flush queue, a failed commit kept, an acknowledged change answered an error, the
  bounds at shutdown) is the same for both. The buffered statements are SQLite's; postgres.py translates them.
- **A store that cannot be opened is never deleted or overwritten** (sqlite_file.py): `SessionStore.open` raises
  `StoreUnavailable` with a message for stderr, and the server keeps serving new sessions without persistence.
- **Waits are bounded once the connection closes** (`bound_waits`). A wait for the worker thread is shielded (a
  thread cannot be stopped midway) and normally lasts as long as the job: a prompt's response waits for its commit.
  But a commit that another process's write lock holds up lasts up to the busy timeout (5 s), longer than the whole
  exit bound of I17; so at EOF each wait ends after its bound and leaves its thread to finish or fail on its own
  (the exit watchdog ends the process if it still runs). Never two jobs on the connection at once: the next job waits
  (bounded too) for the one left running. What was not committed by exit is lost then, with one warning.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import sqlite3
import threading
import time
import uuid
from collections import deque
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Concatenate, ParamSpec, TypeVar

import anyio
import anyio.to_thread
import orjson

from acp_server.errors import ChangeNotSavedError, StoreUnavailable
from acp_server.runtime.model import Message
from acp_server.store.leases import Identity, own_identity
from acp_server.store.migration import ReadLegacy
from acp_server.store.records import (
    ARCHIVE_FILTERS,
    Lease,
    LeaseHeld,
    LoadedSession,
    Pruned,
    Retention,
    SessionOverview,
    SessionPage,
    SessionSummary,
    TurnStatus,
    decode_cursor,
    encode_messages,
    json_bytes,
    utc_now,
)
from acp_server.store.sqlite_file import HOLD, SESSION_COLUMNS, connect, enter_wal, validate
from acp_server.store.turn_log import Batch, TurnLog, decode_entries, new_turn_id
from acp_server.store.turn_records import TurnEntry, UserChunk
from acp_server.store.worker import DeleteOutcome, StoreWorker, tombstone_ops

if TYPE_CHECKING:
    from acp_server.store.postgres import PgWorker

__all__ = ["FLUSH_INTERVAL_S", "STALE_AFTER_S", "SessionStore"]

log = logging.getLogger(__name__)
_T = TypeVar("_T")

FLUSH_INTERVAL_S = 0.05  # half the 100 ms loss budget, leaving the other half for the commit and scheduling
_HEARTBEAT_INTERVAL_S = 5.0
_SWEEP_INTERVAL_S = 5.0
STALE_AFTER_S = 30.0
# A batch that keeps failing is retried, but not forever and not without bound: past these it is dropped and logged.
_RETRY_WINDOW_S = 60.0
_MAX_RETAINED_UPDATES = 500_000

_TOUCH = "UPDATE sessions SET updated_at = ? WHERE id = ? AND deleted = 0"
# One string for every buffered `create_session`, not a copy each (a burst of `session/new` buffers thousands).
_CREATE_SESSION = f"INSERT OR REPLACE INTO sessions ({SESSION_COLUMNS}, deleted) VALUES (?,?,?,?,?,?,?,?,?,?,NULL,0)"


_P = ParamSpec("_P")


def _of_session(write: Callable[Concatenate[SessionStore, _P], _T]) -> Callable[Concatenate[SessionStore, _P], _T]:
    """A buffered write of one session (its id, or its turn's log, is the first argument): while this process holds
    leases (PostgreSQL), each statement it buffers is tagged with the session, so that a commit fences the statements
    of a session whose lease was lost (postgres.py). Without leases (SQLite) nothing is tagged."""

    def tagged(self: SessionStore, /, *args: _P.args, **kwargs: _P.kwargs) -> _T:
        start = len(self._ops)
        result = write(self, *args, **kwargs)
        if self._fences:
            first = args[0]
            session_id = first.session_id if isinstance(first, TurnLog) else str(first)
            for op in self._ops[start:]:
                self._op_sessions[id(op)] = session_id
        return result

    tagged.__name__, tagged.__qualname__, tagged.__doc__ = write.__name__, write.__qualname__, write.__doc__
    return tagged


def _without(exc: BaseException, url: str) -> str:
    """An error's text without the URL's password, should the driver have repeated it."""
    from acp_server.settings.store_url import store_url_passwords  # noqa: PLC0415

    text = str(exc).strip() or type(exc).__name__
    for password in store_url_passwords(url):
        text = text.replace(password, "***")
    return text


class _AbandonedError(Exception):
    """A job's wait for the worker thread ended at its shutdown bound (`SessionStore.bound_waits`). `started`: the job
    runs on in its thread, so what it was given may yet be committed, or not; else it never started (a job left
    running before it still held the connection)."""

    def __init__(self, started: bool) -> None:
        super().__init__("the connection is closing: the store's wait for its worker thread ended at its bound")
        self.started = started


@dataclass(eq=False, slots=True)
class _FlushWait:
    """One `flush` waiting for the batch it needs to be committed."""

    wanted: int
    event: anyio.Event = field(default_factory=anyio.Event)
    resolved: bool = False
    ok: bool = True


class SessionStore:
    """One SQLite store shared by this process's sessions (and by other server processes).

    Writes (`create_session`, `begin_turn`, `TurnLog.append`, `finish_turn`, `set_*`, `touch`, `delete`) are
    synchronous and only buffer; call them from the event loop thread. `flush` commits the buffer on a worker thread.
    Reads (`load`, `list_sessions`) and `fork` flush first, so they see everything this process wrote.
    """

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
        """The SQLite store (`open`); a PostgreSQL one is made by `connect`."""
        self.path: Path | None = path  # the SQLite file; None for a PostgreSQL store
        self.where = str(path)  # what messages name: the file, or the URL without its password
        self.owner_id = owner_id
        # The worker's connection and identity: held here too so a test can trace statements or forge owners.
        self._sqlite: sqlite3.Connection | None = conn
        self._identity = identity
        self._worker: StoreWorker | PgWorker
        self._worker = StoreWorker(path, conn, identity, owner_id, stale, read_legacy=read_legacy)
        self._async_jobs = False  # the worker's jobs are coroutines (PostgreSQL), not blocking calls for a thread
        self._init_buffers()

    def _init_buffers(self) -> None:
        self._ops: list[tuple[str, tuple[Any, ...]]] = []
        self._dirty: list[TurnLog] = []
        self._failed: Batch | None = None
        # The ids of the buffered statements of changes a request acknowledges (`commit_change`), until a flush takes
        # them: a commit that fails takes them back out of what it keeps for the next flush.
        self._changes: set[int] = set()
        # Leases (PostgreSQL): the epoch of each session this process took, which every commit checks (fencing); the
        # buffered statements of those sessions by id (`_of_session`); the sessions whose lease a commit found lost.
        self._fences: dict[str, int] = {}
        self._op_sessions: dict[int, str] = {}
        self.lost_leases: set[str] = set()
        self._lock: anyio.Lock | None = None
        self._taken = 0  # batches taken so far
        self._committed = 0  # the latest batch known committed
        self._waits: deque[_FlushWait] = deque()  # flushes waiting for a commit, in call order
        self._driver: _FlushWait | None = None  # the one of them committing for all
        now = time.monotonic()
        self._last_heartbeat = now
        self._last_sweep = now
        self._closed = False
        # Whether the final write (`close`, `aclose`) is known committed: False until it is, and for good when it
        # failed or its wait ended at the bound. Every flush still waiting when the store closes, or called after,
        # is answered with it: its batch went into that final write (or, called after, nothing more is committed).
        self._final_ok = False
        self._wait_bound: float | None = None  # set by `bound_waits` at shutdown: no wait for a thread is longer
        self._bounded_waits: set[anyio.CancelScope] = set()  # the waits in progress, to bound them too
        self._job_done: threading.Event | None = None  # set by the thread of the last job started once it ends
        self._loss_told = False  # the one warning that the bound may lose what is not committed
        self._last_error = ""  # why the last commit failed, for the error a change is answered with
        # Told of every commit that failed, a background flush's too (the agent hands it to serve's /metrics).
        self.on_failure: Callable[[], None] = lambda: None

    @property
    def _conn(self) -> sqlite3.Connection:
        """The SQLite connection (for tests that trace statements); a PostgreSQL store has none."""
        if self._sqlite is None:
            raise AttributeError("a PostgreSQL store has no SQLite connection")
        return self._sqlite

    # -- opening and closing --

    @classmethod
    async def connect(cls, url: str, *, stale_after: float = STALE_AFTER_S) -> SessionStore:
        """Open the PostgreSQL store at `url` (postgresql://USER@HOST:PORT/DB): a pool of connections, the schema
        created or upgraded once (whichever replica comes first), this process registered as an owner and turns of
        owners that are gone marked `interrupted`. Raises StoreUnavailable, naming the URL without its password,
        when the server cannot be reached or the database cannot be used; nothing is changed then."""
        from acp_server.settings.store_url import redact_store_url  # noqa: PLC0415 (with the backend only)

        where = redact_store_url(url)
        try:
            from acp_server.store.postgres import PgWorker, open_pool  # noqa: PLC0415 (psycopg only for this store)
        except ImportError as exc:
            raise StoreUnavailable(
                f"session store {where}: PostgreSQL support is not installed ({exc.name} is missing:"
                " pip install 'acp-server[postgres]')"
            ) from None
        import psycopg  # noqa: PLC0415 (loaded by the line above already)

        try:
            pool = await open_pool(url)
        except psycopg.Error as exc:
            raise StoreUnavailable(f"session store {where}: cannot be reached ({_without(exc, url)})") from None
        identity = own_identity()
        worker = PgWorker(where, pool, identity, uuid.uuid4().hex, stale_after)
        store = cls.__new__(cls)
        store._setup(worker, where, identity)
        try:
            with anyio.CancelScope(shield=True):
                swept = await worker.register()
        except StoreUnavailable:
            await worker.close()
            raise
        except psycopg.Error as exc:
            await worker.close()
            raise StoreUnavailable(f"session store {where}: cannot be used ({_without(exc, url)})") from None
        except BaseException:
            await worker.close()
            raise
        if swept:
            log.info("session store: %d turn(s) of processes that are gone marked interrupted", swept)
        return store

    def _setup(self, worker: PgWorker, where: str, identity: Identity) -> None:
        """`__init__`'s state for a PostgreSQL store."""
        self.path = None
        self.where = where
        self.owner_id = worker.owner_id
        self._sqlite = None
        self._identity = identity
        self._worker = worker
        self._async_jobs = True
        self._init_buffers()

    @classmethod
    def open(
        cls,
        path: str | os.PathLike[str],
        *,
        check: bool = True,
        stale_after: float = STALE_AFTER_S,
        read_legacy: ReadLegacy | None = None,
    ) -> SessionStore:
        """Open (creating if absent) the store at `path`, register this process as an owner, and mark turns of
        owners that are gone `interrupted`. Blocking (a quick_check reads the whole file): call it before serving or
        in a worker thread. Raises StoreUnavailable, leaving the file untouched, when it cannot be used.
        `read_legacy` reads the update objects of a store written before schema 2 (migration.py): with it such a
        store is upgraded, without it refused."""
        store_path = Path(path)
        conn = connect(store_path)
        try:
            validate(conn, store_path, check=check)
            enter_wal(conn)
            conn.execute("PRAGMA synchronous = NORMAL")  # WAL + NORMAL: a commit survives a process crash
            conn.execute("PRAGMA journal_size_limit = 67108864")
            identity = own_identity()
            owner_id = uuid.uuid4().hex
            store = cls(store_path, conn, identity, owner_id, stale_after, read_legacy=read_legacy)
            swept = store._worker.register()
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
            if not isinstance(self._worker, StoreWorker):
                raise RuntimeError("a PostgreSQL store is closed with `aclose`")
            self._closed = True
            self._worker.finish(self._take(final=True))
            self._final_ok = True

    async def aclose(self) -> None:
        """`close` from the event loop. Shielded; after `bound_waits`, within its bound (the lock included: a job of
        another task may hold it)."""
        with anyio.CancelScope(shield=True), self._bounded() as bound:
            async with self._async_lock():
                if self._closed:
                    return
                self._closed = True
                batch = self._take(final=True)  # here, on the event loop thread that appends
                try:
                    await self._job(self._worker.finish, batch)
                except _AbandonedError as abandoned:
                    self._last_error = str(abandoned)
                    return  # told once; the connection is the abandoned thread's to close
                except Exception as exc:
                    self._last_error = str(exc)  # for the changes it took, answered with an error
                    raise
                self._final_ok = True  # else (it raised, or its wait ended at the bound) the flushes it took fail
        if bound.cancelled_caught:
            self._tell_loss()

    def bound_waits(self, seconds: float) -> None:
        """The connection is closing (stdin EOF): from now on no wait for the worker thread (a flush's commit, a
        read, the final write of `aclose`) lasts more than `seconds`, counted from now for a wait in progress and
        from its start for a later one. Normally a wait lasts as long as its job, which another process's write lock
        can stretch to the busy timeout, longer than the exit bound. A job whose wait ends runs on in its thread."""
        self._wait_bound = seconds
        deadline = anyio.current_time() + seconds
        for scope in self._bounded_waits:
            scope.deadline = min(scope.deadline, deadline)

    # -- buffered writes (synchronous, cheap) --

    @_of_session
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
        now = utc_now()
        self._ops.append(
            (
                _CREATE_SESSION,
                (
                    session_id,
                    cwd,
                    json_bytes(list(additional_directories)),
                    json_bytes(list(mcp_servers)),
                    now,
                    now,
                    title,
                    mode,
                    json_bytes(dict(config or {})),
                    parent_session_id,
                ),
            )
        )
        self._ops.append((HOLD, (session_id, self.owner_id)))

    @_of_session
    def begin_turn(
        self, session_id: str, prompt: Sequence[Mapping[str, Any]], prompt_text: str, *, message_id: str | None = None
    ) -> TurnLog:
        """Start a `running` turn: its first records are the prompt's blocks (`UserChunk`s of one message).
        `prompt_text` is the user message as the model saw it (used if the turn is interrupted)."""
        turn = TurnLog(session_id, new_turn_id(), self._dirty)
        now = utc_now()
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
            turn.append(UserChunk(user_message, dict(block)))
        return turn

    @_of_session
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
        now = utc_now()
        self._ops.append(
            (
                "UPDATE turns SET status = ?, stop_reason = ?, error = ?, ended_at = ?, messages = ?, replaces = ?"
                " WHERE turn_id = ?",
                (status, stop_reason, error, now, encode_messages(messages), int(replaces_history), turn.turn_id),
            )
        )
        self._ops.append((_TOUCH, (now, turn.session_id)))

    @_of_session
    def set_title(self, session_id: str, title: str | None) -> None:
        self._ops.append(
            (
                "UPDATE sessions SET title = ?, updated_at = ? WHERE id = ? AND deleted = 0",
                (title, utc_now(), session_id),
            )
        )

    @_of_session
    def set_archived(self, session_id: str, archived: bool) -> None:
        """`session/archive` (True) and `session/unarchive` (False): the session leaves (or rejoins) the default
        `session/list`. Its activity time is left as it was, so it keeps its place in the list."""
        self._ops.append(("UPDATE sessions SET archived = ? WHERE id = ? AND deleted = 0", (int(archived), session_id)))

    @_of_session
    def set_mode(self, session_id: str, mode: str) -> None:
        self._ops.append(
            ("UPDATE sessions SET mode = ?, updated_at = ? WHERE id = ? AND deleted = 0", (mode, utc_now(), session_id))
        )

    @_of_session
    def set_config(self, session_id: str, config: Mapping[str, Any]) -> None:
        """Replace the session's stored config option values (e.g. {"model": ..., "thought_level": ...})."""
        self._ops.append(
            (
                "UPDATE sessions SET config = ?, updated_at = ? WHERE id = ? AND deleted = 0",
                (json_bytes(dict(config)), utc_now(), session_id),
            )
        )

    @_of_session
    def touch(self, session_id: str) -> None:
        self._ops.append((_TOUCH, (utc_now(), session_id)))

    @_of_session
    def delete(self, session_id: str) -> None:
        """Remove the session's content and leave a tombstone; it disappears from `list_sessions` and `load`.
        An unknown id is a silent success. Later writes for the session are ignored."""
        self._ops += tombstone_ops(session_id)

    @_of_session
    def release(self, session_id: str) -> None:
        """This process no longer has the session open (session/close): pruning may remove it again."""
        self._ops.append(("DELETE FROM holds WHERE session_id = ? AND owner_id = ?", (session_id, self.owner_id)))

    def pending_entries(self, session_id: str) -> dict[str, list[TurnEntry]]:
        """The session's records not committed yet, by turn id, oldest first: those of a batch whose commit failed
        and is kept for the next flush (taken from the turn logs, so in neither the store nor their buffers), then
        those appended since a flush last took them (see `TurnLog.pending`)."""
        pending: dict[str, list[TurnEntry]] = {}
        failed = self._failed
        if failed is not None:
            for turn_id, _, data in failed.updates:
                if failed.sessions.get(turn_id) == session_id:
                    pending.setdefault(turn_id, []).extend(decode_entries(bytes(data)))
        for turn in self._dirty:
            if turn.session_id == session_id:
                pending.setdefault(turn.turn_id, []).extend(turn.pending())
        return pending

    @property
    def buffered(self) -> int:
        """Records appended and not yet committed (for stats)."""
        pending = sum(turn.buffered for turn in self._dirty)
        return pending + (0 if self._failed is None else self._failed.update_count())

    # -- flushing --

    async def commit_change(self, write: Callable[[], None]) -> None:
        """A change a request acknowledges: buffer it (`write` calls the buffered writes, `set_mode` and the like)
        and commit it, with everything buffered before it, before returning. Raises ChangeNotSavedError when that
        commit failed (a full disk, an I/O error, the store closed): the client is then answered an error, so the
        change is taken back out of what the store keeps for the next flush and is never committed later, while the
        rest of the failed batch (streamed updates, turns) is kept and retried as usual. (One exception, at exit: a
        commit whose wait ended at its `bound_waits` bound goes on in its thread and may yet succeed.)"""
        start = len(self._ops)
        write()
        written = self._ops[start:]
        self._changes.update(id(op) for op in written)
        leased = {self._op_sessions[id(op)] for op in written if id(op) in self._op_sessions}
        if self._closed:
            self._ops[start:] = []  # never committed now: `aclose` took the last batch
            raise ChangeNotSavedError(f"session store {self.where}: closed")
        if not await self.flush():
            raise ChangeNotSavedError(f"session store {self.where}: its commit failed ({self._last_error})")
        fenced = leased & self.lost_leases
        if fenced:
            raise ChangeNotSavedError(f"session store {self.where}: session {fenced.pop()} runs on another replica now")

    async def flush(self) -> bool:
        """Commit everything buffered before this call, in one transaction on a worker thread. Shielded: once
        called it completes (bounded by the busy timeout; once the connection closes, by `bound_waits`). False when
        the commit failed; the batch is kept for the next flush (dropped, and logged, after a minute or half a million
        updates) and the error is logged. False too when its wait ended at the shutdown bound."""
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
        return await self._locked(self._worker.sweep_now)

    # -- leases (PostgreSQL; issue 24, item 2) --

    @property
    def has_leases(self) -> bool:
        """Whether sessions are leased (PostgreSQL, shared by replicas); SQLite's every session is its process's."""
        return not isinstance(self._worker, StoreWorker)

    def lease_lost(self, session_id: str) -> bool:
        """Whether a commit found this process's lease on the session lost: what it wrote of it since is not stored."""
        return session_id in self.lost_leases

    async def take_lease(self, session_id: str, ttl: float) -> Lease | LeaseHeld:
        """Run the session here for `ttl` seconds (renewed by `renew_leases`), unless another live process holds its
        lease (`LeaseHeld`, with when it expires). SQLite has no leases (one machine: its processes share sessions as
        today), so there every session is this process's, at epoch 0, for ever."""
        if isinstance(self._worker, StoreWorker):
            return Lease(session_id, 0, math.inf)
        lease: Lease | LeaseHeld = await self._locked(self._worker.take_lease, session_id, ttl)
        if isinstance(lease, Lease):
            self._fences[session_id] = lease.epoch  # from now on its commits check this epoch
            self.lost_leases.discard(session_id)
        return lease

    async def renew_leases(self, ttl: float) -> dict[str, Lease]:
        """Renew every lease this process holds; those still held, by session (a lease missing was lost)."""
        if isinstance(self._worker, StoreWorker):
            return {}
        return await self._locked(self._worker.renew_leases, ttl)

    async def release_lease(self, session_id: str) -> bool:
        """No connection of this process uses the session any more: another process may take it at once. Whether
        this process held its lease (never on SQLite)."""
        if isinstance(self._worker, StoreWorker):
            return False
        await self.flush()  # what was buffered under the lease is committed (or fenced) before it goes
        self._fences.pop(session_id, None)
        self.lost_leases.discard(session_id)
        released: bool = await self._locked(self._worker.release_lease, session_id)
        return released

    # -- reads --

    async def load(self, session_id: str, *, hold: bool = False) -> LoadedSession | None:
        """Everything needed to replay and continue a session; None for an unknown or deleted one. Like every read,
        raises StoreUnavailable when the store fails underneath (a file damaged while the server runs). `hold`: this
        process opens the session (session/load, resume), so pruning leaves it alone from before the read on."""
        await self.flush()
        return await self._locked(self._worker.load, session_id, hold)

    async def prune(self, retention: Retention) -> Pruned:
        """Remove the sessions `retention` says go (never one a live process has open); what was removed."""
        await self.flush()
        return await self._locked(self._worker.prune, retention)

    async def delete_unless_held(self, session_id: str, *, force: bool = False) -> DeleteOutcome:
        """Delete the session now, unless it is unknown or (without `force`) another live process has it open: the
        check and the deletion are one transaction (StoreWorker.delete). "deleted", "unknown" or "held"."""
        await self.flush()
        return await self._locked(self._worker.delete, session_id, force)

    async def overview(self, cwd: str | None = None, limit: int = 50) -> list[SessionOverview]:
        """The most recently updated sessions for a person (`acp-server sessions list`)."""
        await self.flush()
        return await self._locked(self._worker.overview, cwd, limit)

    async def list_sessions(
        self, cwd: str | None = None, cursor: str | None = None, limit: int = 50, archived: str = "exclude"
    ) -> SessionPage:
        """A page of sessions, most recently updated first (children and deleted sessions left out; archived ones
        as `archived` says, one of `ARCHIVE_FILTERS`). Pass the page's `next_cursor` for the next page; an invalid
        cursor or filter raises ValueError."""
        if limit < 1:
            raise ValueError("limit must be at least 1")
        if archived not in ARCHIVE_FILTERS:
            raise ValueError(f"unknown archive filter {archived!r}")
        after = decode_cursor(cursor) if cursor is not None else None
        await self.flush()
        return await self._locked(self._worker.list_page, cwd, after, limit, archived)

    async def summary(self, session_id: str) -> SessionSummary | None:
        """One session as `session/list` would show it (archived or not); None when the list never would."""
        await self.flush()
        return await self._locked(self._worker.summary, session_id)

    async def fork(
        self,
        session_id: str,
        new_id: str,
        *,
        cwd: str | None = None,
        additional_directories: Sequence[str] | None = None,
        mcp_servers: Sequence[Mapping[str, Any]] | None = None,
    ) -> bool:
        """Copy a session (settings, turns, their records, history) under `new_id`; a turn still running is copied as
        `interrupted`. False when the source is unknown or deleted; ValueError when `new_id` exists."""
        await self.flush()
        overrides = (
            cwd,
            None if additional_directories is None else orjson.dumps(list(additional_directories)),
            None if mcp_servers is None else orjson.dumps(list(mcp_servers)),
        )
        return await self._locked(self._worker.fork, session_id, new_id, overrides)

    # -- internals: event loop side --

    def _async_lock(self) -> anyio.Lock:
        if self._lock is None:
            self._lock = anyio.Lock()
        return self._lock

    async def _locked(self, func: Callable[..., _T | Awaitable[_T]], *args: Any) -> _T:
        """Run one of the worker's jobs, alone on the connection (in a worker thread for SQLite). Shielded: a thread
        cannot be stopped midway, and a cancelled caller must not leave the lock or a transaction half done."""
        result: _T
        failures: tuple[type[Exception], ...] = (*self._worker.errors, _AbandonedError)
        with anyio.CancelScope(shield=True):
            async with self._async_lock():
                try:
                    result = await self._job(func, *args)
                except failures as exc:
                    raise StoreUnavailable(f"session store {self.where}: {exc}") from exc
        return result

    @contextlib.contextmanager
    def _bounded(self) -> Iterator[anyio.CancelScope]:
        """A scope around a wait for the store: unbounded until `bound_waits`, then ended (what it holds
        cancelled, and the cancellation caught by the scope) at the bound."""
        bound = self._wait_bound
        scope = anyio.CancelScope(deadline=math.inf if bound is None else anyio.current_time() + bound)
        self._bounded_waits.add(scope)
        try:
            with scope:
                yield scope
        finally:
            self._bounded_waits.discard(scope)

    async def _job(self, func: Callable[..., Any], *args: Any) -> Any:
        """Run one of the worker's jobs: a blocking call in a thread (SQLite), or a coroutine on the loop
        (PostgreSQL)."""
        if self._async_jobs:
            return await self._in_task(func, *args)
        return await self._in_thread(func, *args)

    async def _in_task(self, func: Callable[..., Awaitable[_T]], *args: Any) -> _T:
        """`_in_thread` for a worker whose jobs are coroutines: awaited here, under the same bound. A job whose wait
        ends at the bound is cancelled midway; whether its transaction committed is not known (`started`)."""
        with self._bounded():
            return await func(*args)
        self._tell_loss()
        raise _AbandonedError(True)

    async def _in_thread(self, func: Callable[..., _T], *args: Any) -> _T:
        """Run a job on the connection in a worker thread and wait for it (under the store's lock, shielded, as
        every caller does). Normally the wait lasts as long as the job; after `bound_waits` it ends at the bound,
        and the job is left to finish or fail in its thread: `_AbandonedError` is raised, and the next job first waits
        (bounded too) for that thread to end, since the connection takes one job at a time."""
        done = threading.Event()
        claim = threading.Lock()  # between the job's thread taking it and the wait giving it up
        ran = False
        given_up = False

        def job() -> _T:
            nonlocal ran
            with claim:
                if given_up:  # the wait ended before a thread took the job: it must never run now
                    raise _AbandonedError(False)
                ran = True
            try:
                return func(*args)
            finally:
                done.set()

        with self._bounded():
            previous = self._job_done
            if previous is not None and not previous.is_set():  # a job abandoned at its bound still runs
                await anyio.to_thread.run_sync(previous.wait, abandon_on_cancel=True)
            self._job_done = done
            # Abandoning is for the bound alone: every caller is shielded from any other cancellation.
            return await anyio.to_thread.run_sync(job, abandon_on_cancel=True)
        with claim:
            given_up = True
            started = ran
        if not started:
            done.set()  # never ran (waiting for a thread, or for the job before it): nothing to wait for
        self._tell_loss()
        raise _AbandonedError(started)

    def _tell_loss(self) -> None:
        if not self._loss_told:
            self._loss_told = True
            log.warning(
                "session store %s: a write waits for the write lock (another process holds it) as the server exits;"
                " it is waited for no longer: what is not committed by then is lost",
                self.where,
            )

    async def _flush(self, wanted: int) -> bool:
        """Commit batch `wanted` (or a later one), answering flushes in the order they were called.

        Flushes wait in one queue; one of them (the driver) commits everything buffered for all of them and resolves
        every flush that commit covered at once, then hands the driving to the first flush still waiting. Passing
        each flush through the lock in turn instead cost one event-loop iteration per flush even when the commit in
        flight already covered it: with a thousand busy sessions (every prompt response flushes) that queue held
        responses for a second or more."""
        if self._committed >= wanted:
            return True
        if self._closed:
            return self._final_ok
        entry = _FlushWait(wanted)
        self._waits.append(entry)
        if self._driver is None:
            self._driver = entry
        try:
            while self._driver is not entry:
                await entry.event.wait()  # resolved, or made the driver
                if entry.resolved:
                    return entry.ok
            while not entry.resolved:
                self._resolve(await self._commit(self._waits[-1].wanted))
        finally:
            if not entry.resolved:
                # Cancelled while waiting or driving, or its commit raised what `_commit` does not turn into False:
                # it leaves the queue, and the driving passes on, or every flush after it would wait for ever.
                if entry in self._waits:
                    self._waits.remove(entry)
                entry.ok, entry.resolved = False, True
            if self._driver is entry:
                self._driver = None
                if self._waits:  # flushes called during the last commit: the first of them drives next
                    self._driver = self._waits[0]
                    self._driver.event.set()
        return entry.ok

    def _resolve(self, ok: bool) -> None:
        """After a commit: every waiting flush it covered (a failed one covered what it took) gets its outcome; once
        the store is closed, every one (as a flush called after closing)."""
        covered = self._committed if ok else self._taken
        while self._waits and (self._closed or self._waits[0].wanted <= covered):
            entry = self._waits.popleft()
            entry.ok, entry.resolved = ok, True
            entry.event.set()

    async def _commit(self, wanted: int) -> bool:
        async with self._async_lock():
            if self._committed >= wanted:
                return True
            if self._closed:
                # Closed while this flush waited for the lock: `aclose` took its batch into the final write, whose
                # outcome is this flush's (a failed or abandoned one is no success for the change it acknowledges).
                return self._final_ok
            batch = self._take()
            if batch.empty:
                # Nothing buffered, none retained: everything taken before is committed (or was dropped).
                self._committed = self._taken
                return True
            try:
                lost = await self._job(self._worker.commit, batch)
            except _AbandonedError as abandoned:
                self._last_error = str(abandoned)
                if not abandoned.started:
                    # Never given to a thread: the final write takes it, if it gets its turn (not the changes answered
                    # with an error).
                    self._failed = batch.without_changes()
                # Else the thread has it, to commit or fail: retrying it could write its rows twice.
                return False
            except Exception as exc:
                self._keep_or_drop(batch, exc)
                return False
            if lost:
                # Fenced: another replica took these sessions over; what this one wrote of them since is not stored.
                new = lost - self.lost_leases
                self.lost_leases |= lost
                if new:
                    log.warning("session store: lost the lease of %s; their writes here were not stored", sorted(new))
            self._committed = self._taken
            return True

    def _take(self, *, final: bool = False) -> Batch:
        now = time.monotonic()
        heartbeat = not final and now - self._last_heartbeat >= _HEARTBEAT_INTERVAL_S
        sweep = not final and now - self._last_sweep >= _SWEEP_INTERVAL_S
        if heartbeat:
            self._last_heartbeat = now
        if sweep:
            self._last_sweep = now
        updates = [(turn.turn_id, count, data) for turn in self._dirty for count, data in turn._take()]
        sessions = {turn.turn_id: turn.session_id for turn in self._dirty}
        self._dirty.clear()
        batch = Batch(self._ops, updates, heartbeat, sweep, sessions=sessions, changes=self._changes)
        if self._fences:
            batch.fences = dict(self._fences)
            batch.op_sessions = self._op_sessions
        if self._op_sessions:  # never kept past its batch: a later statement could reuse an id
            self._op_sessions = {}
        batch = batch.after(self._failed)
        self._ops = []
        self._changes = set()
        self._failed = None
        self._taken += 1
        return batch

    def _keep_or_drop(self, batch: Batch, exc: Exception) -> None:
        self._last_error = str(exc)
        self.on_failure()
        # Here, before anything else can take the kept batch: every flush waiting for it is answered False now, so
        # every change in it is answered with an error and must not be committed by a later flush.
        batch = batch.without_changes()
        count = batch.update_count()
        transient = self._worker.transient(exc)
        if transient and time.monotonic() - batch.first_taken < _RETRY_WINDOW_S and count < _MAX_RETAINED_UPDATES:
            self._failed = batch
            log.warning("session store %s: a flush failed (%s); retrying with the next one", self.where, exc)
            return
        log.error(
            "session store %s: dropped %d buffered statement(s) and %d update(s) after: %s",
            self.where,
            len(batch.ops),
            count,
            exc,
        )
