"""The agent's session store: opened on first need (never on the `initialize` path), and why not, if it
cannot be. A server without a store still serves sessions, without persistence. Once open, the store is pruned in the
background (the retention settings; sessions that never got a prompt), so start-up never waits for it."""

from __future__ import annotations

import logging
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio

from acp_server.errors import NoStoreError, StoreUnavailable
from acp_server.settings.config import Config

if TYPE_CHECKING:
    from acp_server.store import SessionStore
    from acp_server.store.migration import ReadLegacy

__all__ = ["StoreAccess"]

log = logging.getLogger(__name__)

Spawn = Callable[[Callable[[], Coroutine[Any, Any, Any]]], None]


class StoreAccess:
    """`current` is the store once it is open, else None (`--no-store`, not needed yet, or unavailable)."""

    def __init__(
        self, config: Config, spawn: Spawn, read_legacy: ReadLegacy, on_failure: Callable[[], None] = lambda: None
    ) -> None:
        """`read_legacy`: how a store written before the turn records (schema 1, which kept v1 `session/update`s)
        is read on upgrade: the protocol edge's reading of a v1 update (protocol/v1/legacy.py `entry_of`), handed in by
        the composition root, so this layer knows no wire shape."""
        self._config = config
        # Starts the store's flusher, a task of the agent's (it outlives every connection).
        self._spawn = spawn
        self._read_legacy = read_legacy
        self._on_failure = on_failure  # every failed commit of the store, once open (`SessionStore.on_failure`)
        self.current: SessionStore | None = None
        self.problem: str | None = None if config.store else "sessions are not stored (--no-store)"
        self._tried = not config.store
        self._lock = anyio.Lock()
        self._wait_bound: float | None = None  # set as the connection closes (`bound_waits`)

    def bound_waits(self, seconds: float) -> None:
        """The connection is closing: the store's waits end at `seconds` (`SessionStore.bound_waits`), also for a
        store that is still being opened, which gets the bound once it is."""
        self._wait_bound = seconds
        if self.current is not None:
            self.current.bound_waits(seconds)

    async def open(self) -> SessionStore | None:
        """The session store, opened once (in a worker thread) with its flusher started. A store that cannot be
        opened is reported and left untouched; the server keeps serving sessions without persistence."""
        async with self._lock:
            if not self._tried:
                self._tried = True
                from acp_server.store import STORE_FILENAME, SessionStore, default_state_dir  # noqa: PLC0415 (the store and sqlite3 load only when persistence is on)

                try:
                    opened: SessionStore
                    if self._config.store_url:  # PostgreSQL, shared by replicas (store/postgres.py)
                        # Shielded as the SQLite file's opening thread is: a cancelled caller must not leave the store
                        # half opened for good (`_tried` is set). Bounded by the connect timeout (store/postgres.py).
                        with anyio.CancelScope(shield=True):
                            opened = await SessionStore.connect(self._config.store_url)
                    else:
                        directory = Path(self._config.state_dir) if self._config.state_dir else default_state_dir()
                        path = directory / STORE_FILENAME
                        # A store written before the turn records (schema 1) holds v1 updates: it is upgraded by
                        # reading them as the protocol edge reads the updates it logs.
                        read_legacy = self._read_legacy
                        opened = await anyio.to_thread.run_sync(
                            lambda: SessionStore.open(path, read_legacy=read_legacy)
                        )
                except StoreUnavailable as exc:
                    self.problem = f"the session store is unavailable: {exc}"
                    log.error("%s; sessions will not be saved", self.problem)
                else:
                    self.current = opened
                    opened.on_failure = self._on_failure
                    if self._wait_bound is not None:  # opened as the connection closes
                        opened.bound_waits(self._wait_bound)
                    self._spawn(opened.run_flusher)
                    self._spawn(self._prune)
        return self.current

    async def _prune(self) -> None:
        """Once per process, in the background: remove what the retention settings say goes; a failure costs
        nothing but a log line (the sessions stay)."""
        from acp_server.store import Retention  # noqa: PLC0415 (the store and sqlite3 load only when persistence is on)

        store = self.current
        if store is None:
            return
        retention = Retention(max_age_days=self._config.keep_sessions_days, max_count=self._config.keep_sessions)
        try:
            pruned = await store.prune(retention)
        except StoreUnavailable as exc:
            log.warning("session store: pruning failed: %s", exc)
            return
        if pruned.total:
            log.info(
                "session store: removed %d session(s) that never got a prompt, %d older than %g days, %d past the"
                " newest %d",
                len(pruned.empty),
                len(pruned.expired),
                retention.max_age_days,
                len(pruned.over_count),
                retention.max_count,
            )

    async def save(self, write: Callable[[SessionStore], None]) -> None:
        """A change a request acknowledges, committed before its response (`SessionStore.commit_change`): `write`
        buffers it in the open store. When that commit fails (a full disk, say) it raises `ChangeNotSavedError`, so the
        request is answered -32603 naming the failure, never success, and the change is not saved later either.
        Nothing to do without a store."""
        store = self.current
        if store is None:
            return
        await store.commit_change(lambda: write(store))

    async def require(self) -> SessionStore:
        store = await self.open()
        if store is None:
            raise NoStoreError(self.problem)
        return store
