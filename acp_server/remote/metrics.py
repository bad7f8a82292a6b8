"""`GET /metrics` of `acp-server serve`: what an operator watches on each replica, in the Prometheus text format
(issue 24, item 5).

`prometheus-client` is the maintained exposition library (the text format, histograms, the content type); only
`serve` imports this module, so the stdio agent never loads it. Each `ReplicaMetrics` has a registry of its own (never
the library's global one), so several servers in one process (the tests) never collide.

What is counted where: connections, sessions in memory and turns running are read when the page is asked for (no
work on any hot path); turns started and ended (by stop reason), the latency from a turn's first cancel to its
answer and the store's commit before a response are told by the turn (agent/sessions/turn.py, through the agent's
`TurnMeter` port), a counter or a histogram's observation each; every commit that fails, a background flush's too,
is told by the store (`SessionStore.on_failure`, which the agent hands to `store_failed`); `lease_taken_over` is told
by the agent's leases (agent/sessions/leasing.py) when this replica takes a session over from another's lease that
expired unreleased (PostgreSQL).
"""

from __future__ import annotations

from collections.abc import Callable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, Info
from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest

__all__ = ["CONTENT_TYPE", "ReplicaMetrics"]

CONTENT_TYPE = CONTENT_TYPE_LATEST
# Seconds: a cancel's answer is due within the cleanup deadline (a few seconds at most), a commit within a few ms.
_CANCEL_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
_COMMIT_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)


class ReplicaMetrics:
    """One replica's metrics (a `TurnMeter` for the agent's turns), and the page `/metrics` answers."""

    content_type = CONTENT_TYPE

    def __init__(
        self,
        replica: str | None,
        *,
        sessions_open: Callable[[], int],
        turns_running: Callable[[], int],
    ) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        registry = self.registry
        self._connections: Callable[[], int] = lambda: 0
        Info("acp_server_replica", "This replica (--replica-name; empty when unnamed)", registry=registry).info(
            {"replica": replica or ""}
        )
        Gauge("acp_server_connections", "Remote connections open now", registry=registry).set_function(
            self._count_connections
        )
        Gauge("acp_server_sessions_open", "Sessions in memory on this replica", registry=registry).set_function(
            sessions_open
        )
        Gauge("acp_server_sessions_running", "Sessions with a turn running now", registry=registry).set_function(
            turns_running
        )
        self._started = Counter("acp_server_turns_started", "Turns started", registry=registry)
        self._ended = Counter(
            "acp_server_turns_ended", "Turns ended, by stop reason", ["stop_reason"], registry=registry
        )
        self._cancel = Histogram(
            "acp_server_cancel_to_answer_seconds",
            "From a turn's first cancel to its answer (the store's commit before it included)",
            buckets=_CANCEL_BUCKETS,
            registry=registry,
        )
        self._commit = Histogram(
            "acp_server_store_commit_seconds",
            "The session store's commit before a response",
            buckets=_COMMIT_BUCKETS,
            registry=registry,
        )
        self._store_errors = Counter("acp_server_store_errors", "Store commits that failed", registry=registry)
        self._take_overs = Counter(
            "acp_server_lease_take_overs", "Sessions taken over from another replica's expired lease", registry=registry
        )

    def _count_connections(self) -> int:
        return self._connections()  # looked up at each scrape: `count_connections` may replace it

    def count_connections(self, connections: Callable[[], int]) -> None:
        """Where the number of open connections is read (the server's table, known once it is made)."""
        self._connections = connections

    # --- TurnMeter (agent/sessions/services.py) ---

    def turn_started(self) -> None:
        self._started.inc()

    def turn_ended(self, stop_reason: str, cancel_to_answer: float | None) -> None:
        self._ended.labels(stop_reason=stop_reason).inc()
        if cancel_to_answer is not None:
            self._cancel.observe(cancel_to_answer)

    def store_committed(self, seconds: float) -> None:
        self._commit.observe(seconds)

    def store_failed(self) -> None:
        self._store_errors.inc()

    def lease_taken_over(self) -> None:
        self._take_overs.inc()

    # --- the page ---

    def page(self) -> bytes:
        """The text format, what `GET /metrics` answers."""
        return generate_latest(self.registry)
