"""Which replica runs a session (issue 24, item 2): the agent's side of the PostgreSQL store's leases.

Replicas sharing one store must never run one session at once: two turns of one session on two machines would
interleave their records, and an editor would see a history neither wrote. So the replica that creates or loads a
session takes its lease in the store first (store/postgres.py: by the database's clock, with an epoch that grows at
every take-over), and another replica asked for it is answered `SessionLeasedError` (our own -34001, with the session
and when the lease ends; protocol/wire_errors.py), never the unknown-session answer: the session exists, it is busy
elsewhere. The lease goes as soon as no connection of this process uses the session any more (a close, a deletion,
the connection's end), so a client that moves to another replica loads it there at once.

A replica that dies cannot release anything: its leases run out after `--lease-ttl` and the session loads elsewhere
with everything it committed. One that is only paused (SIGSTOP, a VM frozen, a GC pause) cannot be stopped from
running when it wakes, so it is fenced twice: every commit checks the leases in its own transaction and leaves out the
writes of a session whose lease was lost (store.py), and the heartbeat here, which renews every lease every third of
the TTL, treats a lease it could not renew before its expiry (by this process's monotonic clock, counted from when the
last renewal that held was asked) as lost: the session's turns are cancelled at once (`RunRegistry.interrupt`, the
synchronous cancel path: nothing here sits between a `session/cancel` and its interrupt) and every later request for
it on this replica is answered the lease error until it is loaded again.

SQLite has no leases (one machine: its processes share sessions as before): nothing here does anything then.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import anyio

from acp_server.errors import SessionLeasedError, StoreUnavailable

if TYPE_CHECKING:
    from acp_server.agent.sessions.runs import RunRegistry
    from acp_server.agent.sessions.services import TurnMeter
    from acp_server.agent.sessions.table import SessionTable
    from acp_server.agent.store_access import StoreAccess
    from acp_server.store import SessionStore

__all__ = ["SessionLeases"]

log = logging.getLogger(__name__)

Spawn = Callable[[Callable[[], Coroutine[Any, Any, Any]]], None]


@dataclass(slots=True)
class _Held:
    """A lease this process holds, by its monotonic clock: `asked`, when the take that got it was asked; `deadline`,
    when it ends unless a renewal asked before then succeeds (asked + TTL: the database's expiry is never earlier)."""

    asked: float
    deadline: float


class SessionLeases:
    """The leases this process holds on sessions, their heartbeat, and the sessions whose lease it lost."""

    def __init__(
        self,
        ttl: float,
        store: StoreAccess,
        runs: RunRegistry,
        sessions: SessionTable,
        spawn: Spawn,
        *,
        meter: Callable[[], TurnMeter | None],
        ending: Callable[[], bool],
    ) -> None:
        self.ttl = ttl
        self._store = store
        self._runs = runs
        self._sessions = sessions
        self._spawn = spawn
        self._meter = meter
        self._ending = ending
        self._held: dict[str, _Held] = {}
        self._lost: set[str] = set()  # until the session is loaded again here, or no connection here uses it
        self._keeping = False

    @property
    def held(self) -> frozenset[str]:
        """The sessions whose lease this process holds now (for stats and tests)."""
        return frozenset(self._held)

    async def take(self, store: SessionStore, session_id: str) -> None:
        """Hold the session's lease (taken, or renewed if this process holds it already) before the session is
        answered, or raise `SessionLeasedError` when another live replica holds it. `StoreUnavailable` when the store
        cannot say: the request is answered an error, never run unleased. Nothing on SQLite."""
        if not store.has_leases:
            return
        from acp_server.store.records import LeaseHeld  # noqa: PLC0415 (start-up: the store loads only when persistence is on)

        asked = anyio.current_time()
        lease = await store.take_lease(session_id, self.ttl)
        if isinstance(lease, LeaseHeld):
            raise SessionLeasedError(session_id, lease.expires_at, lease.remaining)
        self._lost.discard(session_id)
        self._held[session_id] = _Held(asked, asked + self.ttl)
        if lease.taken_over:
            log.info("session %s: taken over from a replica whose lease expired (epoch %d)", session_id, lease.epoch)
            meter = self._meter()
            if meter is not None:
                meter.lease_taken_over()
        if not self._keeping:
            self._keeping = True
            self._spawn(self._keep)

    def lost(self, session_id: str) -> bool:
        """Whether this process lost the lease of a session it has open (until it is loaded again, or let go)."""
        return session_id in self._lost

    def check(self, session_id: str) -> None:
        """Raise the lease error for a session open here whose lease this process lost: it is used here no more."""
        if session_id in self._lost:
            raise SessionLeasedError(session_id, lost=True)

    async def release(self, session_id: str) -> None:
        """No connection of this process uses the session any more (closed, deleted, its connection gone, or it was
        never opened after all): its lease goes now, so another replica may load it at once, after what was written
        under it is committed (or fenced). Kept while a connection here still has it open (another connection took
        it over). A failure is logged: the lease then ends on its own within the TTL, since it is no longer renewed."""
        current = self._sessions.get(session_id)
        if current is not None and not current.closed and current.edge is not None:
            return
        held = self._held.pop(session_id, None)
        lost = session_id in self._lost
        self._lost.discard(session_id)
        store = self._store.current
        if store is None or not store.has_leases or (held is None and not lost):
            return
        with anyio.CancelScope(shield=True):  # a connection's end may be cancelled; its sessions' leases still go
            try:
                await store.release_lease(session_id)
                if session_id in self._held:
                    # Another connection here loaded it while the release waited for the store: hold it again (the
                    # release may have ended the lease that load renewed, and dropped its fence).
                    from acp_server.store.records import Lease  # noqa: PLC0415 (loaded with the store)

                    if not isinstance(await store.take_lease(session_id, self.ttl), Lease):
                        self._lose(session_id, "another replica took it while it was being released")
            except StoreUnavailable as exc:
                log.warning(
                    "session %s: its lease could not be released (%s); it ends within %g s", session_id, exc, self.ttl
                )

    # --- the heartbeat ---

    async def _keep(self) -> None:
        """Renew every lease every third of the TTL; meanwhile watch for one whose renewal came too late (a renewal
        may hang on a slow database: the watch does not wait for it). Runs in the agent's task group, until it ends."""
        try:
            async with anyio.create_task_group() as group:
                group.start_soon(self._renewing)
                group.start_soon(self._watching)
        finally:
            self._keeping = False

    async def _renewing(self) -> None:
        while True:
            await anyio.sleep(self.ttl / 3)
            store = self._store.current
            if not self._held or store is None or self._ending():
                continue
            asked = anyio.current_time()
            try:
                renewed = await store.renew_leases(self.ttl)
            except StoreUnavailable as exc:
                log.warning("session leases: renewal failed (%s); a lease not renewed before it expires is lost", exc)
                continue
            for session_id, held in list(self._held.items()):
                if session_id in renewed:
                    held.deadline = max(held.deadline, asked + self.ttl)
                elif held.asked < asked:  # held before this renewal was asked, and not renewed: it had expired
                    self._lose(session_id, "it expired before this replica could renew it")
            self._fenced(store)

    async def _watching(self) -> None:
        while True:
            await anyio.sleep(self.ttl / 9)
            if not self._held or self._ending():
                continue
            now = anyio.current_time()
            for session_id, held in list(self._held.items()):
                if held.deadline <= now:
                    self._lose(session_id, "it was not renewed in time")
            store = self._store.current
            if store is not None:
                self._fenced(store)

    def _fenced(self, store: SessionStore) -> None:
        """The sessions a commit was fenced for: another replica holds them now."""
        for session_id in [s for s in self._held if store.lease_lost(s)]:
            self._lose(session_id, "another replica took it over")

    def _lose(self, session_id: str, why: str) -> None:
        """The lease is gone: the session's turns are cancelled now (each answered as a cancel answers it, its end
        fenced out of the store) and it is used here no more."""
        if self._held.pop(session_id, None) is None:
            return
        self._lost.add(session_id)
        self._runs.interrupt(session_id)
        log.warning("session %s: this replica lost its lease (%s); its turns are cancelled", session_id, why)
