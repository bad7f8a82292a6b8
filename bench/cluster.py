"""Replicas behind a real HAProxy beside one replica alone, in one run: the cluster figures of issue 24 (item 6).

Three setups, one after the other, each on fresh `acp-server serve --replica-name NAME` processes (`--model scripted
--test-mode`, 127.0.0.1 port 0, one token and one workspace root for all, a state directory and SQLite store each):
- `1 replica, direct`: the busy connections go straight to replica `a` (bench.remote's WebSocket figure, again);
- `1 replica behind haproxy`: the same through HAProxy (Debian's package) running docs/deploy.md's configuration
  (read out of the page by tests/support/haproxy.py; TLS off, the addresses replaced, server `b`'s line taken out),
  so the difference from `direct` is what the balancer costs;
- `2 replicas behind haproxy`: the page's configuration whole, replicas `a` and `b`. The clients keep no cookies,
  so `balance leastconn` spreads the connections; the figures say how they split (each connection's replica is read
  from the `acp_replica` cookie its upgrade's answer set).

In each, `--busy` (100) WebSocket connections (one session each, as editors) are kept busy as bench.scale and
bench.remote do (bench.remote's `busy_window`): a scripted turn streaming `--rate` (20) chunks/s after a random
phase; once every session streams and a second has passed, a `--seconds` (5) window with cancels at up to 20/s (one
per session every 2 s at most), each cancelled session prompted again at once. Measured over the window:
- cancel -> `cancelled`, p50 / p99: from the cancel's write to the read of the prompt's answer, all connections;
- chunks/s read (busy x rate when the servers keep up: below it, the cancels wait behind a backlog);
- per replica: its connections, the chunks read from them, its CPU (utime + stime from /proc/<pid>/stat) per chunk
  and per busy turn-second. A busy turn never ends by itself (a cancel ends it and starts the next), so "CPU per
  turn" is given as what keeping one turn streaming costs for a second: the replica's CPU over the window divided
  by (its connections x the window), in ms per second (1,000 would be a whole core). With the rate fixed that is
  CPU per chunk x rate; the turns the cancels started on it in the window are counted beside it;
- HAProxy's own CPU per chunk (all its threads), and the client's (this process's) beside them: the client is
  bench/links.py's (a byte-prefix test per chunk frame, no JSON parse), but it runs on the same cores.

`--rounds N` runs every setup N times, round after round (a shared machine's load drifts over all setups alike),
and pools each setup's windows: its cancels together, CPU and chunks summed before dividing, counts averaged.

On a 2-core machine the two replicas, HAProxy and the client share two cores: the second replica adds overhead (a
second event loop and store) and no capacity, so these figures show what the balancer and a replica cost, not how
the cluster scales. A shared, loaded machine inflates all of them: read the setups against each other.

Two figures of item 6 need the PostgreSQL store: on `--store-url` (a database of its own: the bench writes sessions
in it), or else on a PostgreSQL server started here (tests/support/postgres.py, fsync on, as in production; a database
for each figure), skipped with the reason where neither exists (`NOT MEASURED:`, never a stand-in number):
- a turn's flush commit latency p50 / p99, SQLite against PostgreSQL (`commit_latency_figures`): bench.store_latency's
  in-process measurement, `--store-turns` (300) turns of 50 chunks and a tool call, each turn's flush timed;
- the time from a replica's death to its session running on the other (`failover_figures`, goal: lease TTL + 1 s),
  `--failovers` (3) rounds on fresh processes: replicas `a` and `b` on the store behind docs/deploy.md's HAProxy, a
  client with a busy turn, the replica serving it killed (`kill -9`); from the kill to the first chunk of the next
  prompt, the client having reconnected through HAProxy with its cookies and loaded the session (`session/load`,
  asked again while it is refused). Where `serve` has `--lease-ttl` (leases in the session lifecycle, item 2) the
  replicas get `--lease-ttl` (5 s) and the load is refused until the dead replica's lease expired; before that, the
  session loads elsewhere at once, so the figure is reconnect + load + first chunk (its name says so), against 1 s.

Run alone: `python -m bench.cluster [--quick] [--busy 100] [--seconds 5] [--rounds 1] [--no-compression]
[--store-url URL] [--store-turns 300] [--failovers 3] [--lease-ttl 5]`.
Without HAProxy installed (`apt-get install haproxy`) only the direct setup runs, and the run says so.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import re
import secrets
import shutil
import statistics
import subprocess
import tempfile
import time
import urllib.parse
from collections.abc import Awaitable, Callable, Sequence
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.links import Client, Spawned, WebSocketLink
from bench.remote import CONNECT_CONCURRENCY, Busy, busy_window
from bench.report import Figure, format_table
from bench.wire import CLOCK_TICKS, WireError, percentile
from tests.support.harness import server_command

__all__ = [
    "SETUPS",
    "ClusterResult",
    "NotMeasuredError",
    "Setup",
    "Window",
    "commit_latency_figures",
    "failover_figures",
    "main",
    "run",
]

REPLICA_COOKIE = "acp_replica"


@dataclass(frozen=True, slots=True)
class Setup:
    """Which replicas run, and whether the connections go through HAProxy."""

    name: str
    replicas: tuple[str, ...]
    balanced: bool


SETUPS = (
    Setup("1 replica, direct", ("a",), balanced=False),
    Setup("1 replica behind haproxy", ("a",), balanced=True),
    Setup("2 replicas behind haproxy", ("a", "b"), balanced=True),
)
HAPROXY = "haproxy"  # its CPU's name in a window's `cpu_ticks_by`, beside the replicas'


@dataclass(frozen=True, slots=True)
class Window:
    """One setup's busy window, and which replica served each connection (by the stream's index)."""

    setup: Setup
    busy: Busy
    replica_of: list[str]

    def connections(self, replica: str) -> int:
        return self.replica_of.count(replica)

    def chunks(self, replica: str) -> int:
        return sum(n for n, r in zip(self.busy.chunks_by_stream, self.replica_of, strict=True) if r == replica)

    def turns_started(self, replica: str) -> int:
        """Turns the window's cancels started again on `replica` (one per timed cancel)."""
        return sum(1 for index in self.busy.cancel_streams if self.replica_of[index] == replica)

    def cpu_s(self, name: str) -> float:
        return self.busy.cpu_ticks_by.get(name, 0) / CLOCK_TICKS


@dataclass(frozen=True, slots=True)
class Pooled:
    """A setup's windows over `--rounds`, pooled: the cancels together, CPU and chunks summed before dividing, so
    each round weighs by what it measured; counts (connections, turns) are per window, averaged."""

    setup: Setup
    windows: list[Window]

    def _sum(self, value: Callable[[Window], float]) -> float:
        return sum(value(window) for window in self.windows)

    def _mean(self, value: Callable[[Window], float]) -> float:
        return self._sum(value) / len(self.windows)

    @property
    def cancel_ms(self) -> list[float]:
        return [ms for window in self.windows for ms in window.busy.cancel_ms]

    @property
    def rate(self) -> float:
        return self._sum(lambda w: w.busy.chunks) / self._sum(lambda w: w.busy.seconds)

    def connections(self, replica: str) -> float:
        return self._mean(lambda w: w.connections(replica))

    def turns_started(self, replica: str) -> float:
        return self._mean(lambda w: w.turns_started(replica))

    def cpu_us_per_chunk(self, names: Sequence[str], replica: str | None = None) -> float:
        """The CPU of `names` per chunk: per chunk of `replica`'s connections, or of all of them."""
        cpu = self._sum(lambda w: sum(w.cpu_s(name) for name in names))
        chunks = self._sum(lambda w: w.busy.chunks if replica is None else w.chunks(replica))
        return cpu / chunks * 1e6 if chunks else 0.0

    def cpu_ms_per_turn_second(self, replica: str) -> float:
        """What keeping one turn busy costs `replica` a second: its CPU / (its connections x the window), in ms/s."""
        turn_seconds = self._sum(lambda w: w.connections(replica) * w.busy.seconds)
        return self._sum(lambda w: w.cpu_s(replica)) / turn_seconds * 1e3 if turn_seconds else 0.0

    @property
    def client_us_per_chunk(self) -> float:
        chunks = self._sum(lambda w: w.busy.chunks)
        return self._sum(lambda w: w.busy.client_cpu_s) / chunks * 1e6 if chunks else 0.0

    @property
    def problems(self) -> list[str]:
        return [problem for window in self.windows for problem in window.busy.problems]


@dataclass
class ClusterResult:
    busy: int
    rate: float
    windows: list[Window] = field(default_factory=list)  # every round's, setup after setup within a round
    skipped: list[str] = field(default_factory=list)  # setups not run, and why
    not_measured: list[str] = field(default_factory=list)  # item 6's figures still to come, and why
    later: list[Figure] = field(default_factory=list)  # theirs, once commit_latency_ / failover_figures measure

    def pooled(self) -> list[Pooled]:
        by_setup: dict[Setup, list[Window]] = {}
        for window in self.windows:
            by_setup.setdefault(window.setup, []).append(window)
        return [Pooled(setup, windows) for setup, windows in by_setup.items()]

    def figures(self) -> list[Figure]:
        figures: list[Figure] = []
        for setup in self.pooled():
            name = f"cluster: {self.busy} busy connections, {setup.setup.name}"
            samples = setup.cancel_ms
            if samples:
                figures += [
                    Figure(f"{name}, cancel p50", statistics.median(samples), "ms"),
                    Figure(f"{name}, cancel p99", percentile(samples, 99), "ms"),
                ]
            figures.append(Figure(f"{name}, chunks/s (of {self.busy * self.rate:g})", setup.rate, "chunks/s"))
            replicas = setup.setup.replicas
            for replica in replicas:
                each = f"{name}, replica {replica}"
                figures += [
                    Figure(f"{each}, connections", setup.connections(replica), "connections"),
                    Figure(f"{each}, turns started by cancels", setup.turns_started(replica), "turns"),
                    Figure(f"{each}, server CPU per chunk", setup.cpu_us_per_chunk([replica], replica), "µs"),
                    Figure(f"{each}, server CPU per busy turn", setup.cpu_ms_per_turn_second(replica), "ms/s"),
                ]
            if len(replicas) > 1:
                figures.append(
                    Figure(f"{name}, all replicas, server CPU per chunk", setup.cpu_us_per_chunk(replicas), "µs")
                )
            if setup.setup.balanced:
                figures.append(Figure(f"{name}, haproxy CPU per chunk", setup.cpu_us_per_chunk([HAPROXY]), "µs"))
            figures += [
                Figure(f"{name}, client CPU per chunk", setup.client_us_per_chunk, "µs"),
                Figure(f"{name}, problems", float(len(setup.problems)), "problems", "<=", 0.0),
            ]
        return figures + self.later


# --- the two figures that need the PostgreSQL store (issue 24 items 1, 2) ---


class NotMeasuredError(Exception):
    """A figure of item 6 this bench cannot measure here; the message says why."""


def _serve_help() -> str:
    done = subprocess.run([*server_command("serve", "--help")], capture_output=True, text=True, timeout=60, check=False)
    return done.stdout


def server_has_store_url() -> bool:
    """Whether the installed `acp-server serve` takes `--store-url` (the PostgreSQL store, issue 24 item 1)."""
    return "--store-url" in _serve_help()


def server_has_lease_ttl() -> bool:
    """Whether `acp-server serve` takes `--lease-ttl` (leases wired into the session lifecycle, issue 24 item 2): a
    dead replica's sessions can then be loaded elsewhere only once its leases expired."""
    return "--lease-ttl" in _serve_help()


def _why_not(store_url: str | None) -> str | None:
    if not server_has_store_url():
        return "`acp-server serve` has no --store-url (issue 24 item 1: the PostgreSQL store)"
    if store_url is None:
        return "no PostgreSQL: give --store-url, or install postgresql (its server is then started here)"
    return None


async def commit_latency_figures(store_url: str | None, *, turns: int = 300, chunks: int = 50) -> list[Figure]:
    """A turn's flush commit latency p50 / p99, SQLite against PostgreSQL at `store_url`: the commit each turn's
    answer waits for, measured in-process on each store by bench/store_latency.py (`turns` turns of `chunks` text
    chunks and a tool call each, every turn's flush timed). SQLite: a file in a temporary directory, as the server
    opens it. Raises NotMeasuredError without a PostgreSQL URL; never a stand-in number."""
    if (why := _why_not(store_url)) is not None:
        raise NotMeasuredError(why)
    assert store_url is not None
    from acp_server.store import STORE_FILENAME, SessionStore
    from bench.store_latency import measure as flushes

    with tempfile.TemporaryDirectory(prefix="acp-bench-cluster-store-") as directory:
        sqlite = SessionStore.open(Path(directory) / STORE_FILENAME)
        try:
            on_sqlite = await flushes(sqlite, turns, chunks)
        finally:
            await sqlite.aclose()
    postgres = await SessionStore.connect(store_url)
    try:
        on_postgres = await flushes(postgres, turns, chunks)
    finally:
        await postgres.aclose()
    figures: list[Figure] = []
    for name, took in (("SQLite", on_sqlite), ("PostgreSQL", on_postgres)):
        each = f"store: a turn's flush commit ({chunks} chunks, {turns} turns), {name}"
        figures += [
            Figure(f"{each}, p50", statistics.median(took), "ms"),
            Figure(f"{each}, p99", percentile(took, 99), "ms"),
        ]
    return figures


# A busy turn: it streams until the replica serving it dies.
_BUSY_TURN = {"scripted": [{"say": "busy ", "repeat": 1_000_000, "every": 0.05}]}
_NEXT_TURN = {"scripted": [{"say": "there"}]}


def _never_answered(future: asyncio.Future[Any]) -> None:
    if not future.cancelled():
        future.exception()  # retrieved: the busy turn's connection died with its replica


async def _one_failover(
    store_url: str, lease_ttl: float | None, scratch: Path, *, compress: bool
) -> tuple[float, float, float, int]:
    """Replicas `a` and `b` on `store_url` behind docs/deploy.md's HAProxy; a client (keeping its cookies) with a
    busy turn; the replica serving it killed (`kill -9`). From the kill to the first chunk of a prompt on the other
    replica: the client reconnects through HAProxy with its cookies, `initialize`, `session/load` (asked again every
    50 ms while another replica's lease holds it), `session/prompt`. (seconds to the first reconnect's upgrade, to
    the load's answer, to the first chunk; loads refused meanwhile)."""
    from tests.support.haproxy import free_port, running_haproxy

    token = secrets.token_urlsafe(24)
    workspace = tempfile.mkdtemp(prefix="acp-bench-failover-", dir=scratch)
    extra = ("--store-url", store_url, *(("--lease-ttl", f"{lease_ttl:g}") if lease_ttl is not None else ()))
    async with AsyncExitStack() as stack:
        replicas: dict[str, Spawned] = {}
        for name in ("a", "b"):
            replica = await Spawned.start(
                "websocket", "--replica-name", name, *extra, compress=compress, token=token, workspace=workspace
            )
            stack.push_async_callback(replica.stop)
            replicas[name] = replica
        for replica in replicas.values():  # replicas that have served before (a first load imports its code)
            warm = await replica.client()
            session = await warm.new_session(workspace)
            await warm.call("session/load", {"sessionId": session, "cwd": workspace, "mcpServers": []})
            await warm.call("session/prompt", {"sessionId": session, "prompt": [{"type": "text", "text": "warm"}],
                                               "_meta": _NEXT_TURN})  # fmt: skip
            await warm.close()
        port = free_port()
        config = documented_config(port, {name: _port(r.ws_url) for name, r in replicas.items()})
        health = [r.http_url.removesuffix("/acp") + "/healthz" for r in replicas.values()]
        await stack.enter_async_context(running_haproxy(config, scratch, port, health))
        url = urllib.parse.urlsplit(replicas["a"].ws_url)._replace(netloc=f"127.0.0.1:{port}").geturl()

        link = await WebSocketLink.open(url, token, compress=compress)
        client = Client(link)
        stack.push_async_callback(client.close)
        await client.initialize()
        cookies = link.cookies
        session = await client.new_session(workspace)
        busy, _ = await client.request("session/prompt", {"sessionId": session, "prompt": [{"type": "text",
                                        "text": "busy"}], "_meta": _BUSY_TURN})  # fmt: skip
        busy.add_done_callback(_never_answered)  # the kill ends it without an answer: expected, not an error
        await client.streamed(session, 5)
        dead = replicas[cookies[REPLICA_COOKIE]]
        died = time.perf_counter()
        dead.process.kill()
        await dead.process.wait()
        refused = 0
        reconnected = 0.0
        deadline = died + (lease_ttl or 0.0) + 60.0
        while True:
            if time.perf_counter() > deadline:
                raise WireError(f"no replica loaded the session within {deadline - died:.0f} s of the kill")
            moved = Client(await WebSocketLink.open(url, token, compress=compress, cookies=cookies))
            stack.push_async_callback(moved.close)
            reconnected = reconnected or time.perf_counter()
            await moved.initialize()
            future, _ = await moved.request("session/load", {"sessionId": session, "cwd": workspace, "mcpServers": []})
            answer, _ = await asyncio.wait_for(future, 60.0)
            if "result" in answer:
                break
            refused += 1  # the lease error while the dead replica's lease lives (once leases are wired)
            await asyncio.sleep(0.05)
        loaded = time.perf_counter()
        replayed = moved.chunks_by_session.get(session, 0)
        await moved.request("session/prompt", {"sessionId": session, "prompt": [{"type": "text", "text": "next"}],
                                                "_meta": _NEXT_TURN})  # fmt: skip
        await moved.streamed(session, replayed + 1)
        running = time.perf_counter()
        return reconnected - died, loaded - died, running - died, refused
    raise AssertionError("unreachable")  # mypy: the stack may swallow an exception


async def failover_figures(
    store_url: str | None, *, rounds: int = 3, lease_ttl: float = 5.0, compress: bool = True
) -> list[Figure]:
    """Time from a replica's `kill -9` in the middle of a busy turn to its session running on the other replica
    (the client's reconnect through HAProxy with its cookies, `session/load`, the next prompt's first chunk), both
    replicas on `store_url`, fresh processes each round, each replica warmed first (a session loaded and prompted: a
    replica in service has its code loaded); goal: the lease TTL + 1 s. Where `serve` has leases
    (`--lease-ttl`), the replicas run with `lease_ttl` and the load is asked again until the dead replica's lease
    expired; where it has none yet, the session can be loaded elsewhere at once, so this is reconnect + load + first
    chunk, against a goal of 1 s (a TTL of 0), and the figure's name says so. Raises NotMeasuredError without a
    PostgreSQL URL or HAProxy; never a stand-in number."""
    if (why := _why_not(store_url)) is not None:
        raise NotMeasuredError(why)
    if haproxy_binary() is None:
        raise NotMeasuredError("haproxy is not installed (apt-get install haproxy)")
    assert store_url is not None
    ttl = lease_ttl if server_has_lease_ttl() else None
    scratch = Path(tempfile.mkdtemp(prefix="acp-bench-failover-"))
    try:
        samples = [await _one_failover(store_url, ttl, scratch, compress=compress) for _ in range(rounds)]
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    goal = ((ttl or 0.0) + 1.0) * 1000
    leases = f"lease TTL {ttl:g} s" if ttl is not None else "no leases yet: reconnect + load"
    name = f"failover: kill -9 -> session running on the other replica ({leases}, {rounds} rounds)"
    reconnected = [s[0] * 1000 for s in samples]
    loaded = [s[1] * 1000 for s in samples]
    running = [s[2] * 1000 for s in samples]
    return [
        Figure(f"{name}, reconnected through haproxy, median", statistics.median(reconnected), "ms"),
        Figure(f"{name}, loaded, median", statistics.median(loaded), "ms"),
        Figure(f"{name}, first chunk, median", statistics.median(running), "ms", "<=", goal),
        Figure(f"{name}, first chunk, max", max(running), "ms", "<=", goal),
        Figure(f"{name}, loads refused meanwhile", statistics.mean(s[3] for s in samples), "loads"),
    ]


# --- the busy setups ---


def haproxy_binary() -> str | None:
    """Debian puts haproxy in /usr/sbin, which is not on every PATH."""
    return shutil.which("haproxy") or shutil.which("haproxy", path="/usr/sbin:/sbin")


def _port(url: str) -> int:
    port = urllib.parse.urlsplit(url).port
    if port is None:
        raise WireError(f"no port in {url}")
    return port


def documented_config(listen_port: int, replicas: dict[str, int]) -> str:
    """docs/deploy.md's HAProxy configuration for these replicas (name -> port): the tests' own extraction, with the
    lines of the page's servers that are not running taken out (so `1 replica behind haproxy` is the same balancer
    with one server, not one with a dead server it keeps checking)."""
    from tests.support.haproxy import deploy_block, haproxy_config  # pytest and httpx: the balanced setups only

    page = set(re.findall(r"(?m)^\s*server (\S+) ", deploy_block("# /etc/haproxy/haproxy.cfg")))
    if missing := set(replicas) - page:
        raise WireError(f"docs/deploy.md's HAProxy configuration names no server {sorted(missing)}")
    placeholder = 1  # never connected to: the line of a server not running is taken out below
    config = haproxy_config(listen_port, {name: replicas.get(name, placeholder) for name in page})
    for name in page - set(replicas):
        config, removed = re.subn(rf"(?m)^\s*server {re.escape(name)} .*\n", "", config)
        if removed != 1:
            raise WireError(f"docs/deploy.md's HAProxy server {name!r}: {removed} lines")
    return config


async def _open(
    url: str, token: str, workspace: str, count: int, *, compress: bool, opened: list[tuple[Client, str, str]]
) -> None:
    """`count` initialized connections to `url`, a session each, into `opened` as each is made (so the caller closes
    every one made, whatever failed): (client, session, the replica serving it, from its upgrade's cookie)."""
    gate = asyncio.Semaphore(CONNECT_CONCURRENCY)

    async def one() -> None:
        async with gate:
            link = await WebSocketLink.open(url, token, compress=compress)
            client = Client(link)
            try:
                await client.initialize()
                session = await client.new_session(workspace)
            except BaseException:
                await client.close()
                raise
            opened.append((client, session, link.cookies.get(REPLICA_COOKIE, "?")))

    await asyncio.gather(*(one() for _ in range(count)))


async def measure(
    setup: Setup, *, busy: int, seconds: float, rate: float, rng: random.Random, compress: bool, scratch: Path
) -> Window:
    """One setup on fresh processes, stopped on the way out (HAProxy first)."""
    token = secrets.token_urlsafe(24)
    workspace = tempfile.mkdtemp(prefix="acp-bench-cluster-", dir=scratch)
    async with AsyncExitStack() as stack:
        replicas: dict[str, Spawned] = {}
        for name in setup.replicas:
            replica = await Spawned.start(
                "websocket", "--replica-name", name, compress=compress, token=token, workspace=workspace
            )
            stack.push_async_callback(replica.stop)
            replicas[name] = replica
        for replica in replicas.values():  # a process's first prompt loads the turn's code: not what is measured
            warm = await replica.client()
            script = {"scripted": [{"say": "x", "repeat": 100}]}
            session = await warm.new_session(workspace)
            await warm.call(
                "session/prompt", {"sessionId": session, "prompt": [{"type": "text", "text": "warm"}], "_meta": script}
            )
            await warm.close()
        watch = {name: replica.pid for name, replica in replicas.items()}
        url = replicas[setup.replicas[0]].ws_url
        if setup.balanced:
            from tests.support.haproxy import free_port, running_haproxy

            port = free_port()
            config = documented_config(port, {name: _port(r.ws_url) for name, r in replicas.items()})
            health = [r.http_url.removesuffix("/acp") + "/healthz" for r in replicas.values()]
            proxy = await stack.enter_async_context(running_haproxy(config, scratch, port, health))
            watch[HAPROXY] = proxy.process.pid
            url = urllib.parse.urlsplit(url)._replace(netloc=f"127.0.0.1:{port}").geturl()
        opened: list[tuple[Client, str, str]] = []
        stack.push_async_callback(_close, opened)
        await _open(url, token, workspace, busy, compress=compress, opened=opened)
        pairs = [(client, session) for client, session, _ in opened]
        window = await busy_window(pairs, watch, rng, rate, seconds)
        return Window(setup, window, [replica for _, _, replica in opened])
    raise AssertionError("unreachable")  # mypy: the stack may swallow an exception


async def _close(opened: Sequence[tuple[Client, str, str]]) -> None:
    await asyncio.gather(*(client.close() for client, _, _ in opened))


async def run(
    *,
    busy: int = 100,
    seconds: float = 5.0,
    rate: float = 20.0,
    seed: int = 7,
    compress: bool = True,
    rounds: int = 1,
    setups: Sequence[Setup] = SETUPS,
    store_url: str | None = None,
    store_turns: int = 300,
    failovers: int = 3,
    lease_ttl: float = 5.0,
) -> ClusterResult:
    result = ClusterResult(busy, rate)
    rng = random.Random(seed)
    have_haproxy = haproxy_binary() is not None
    scratch = Path(tempfile.mkdtemp(prefix="acp-bench-cluster-"))
    if not have_haproxy:
        for setup in setups:
            if setup.balanced:
                result.skipped.append(f"{setup.name}: haproxy is not installed (apt-get install haproxy)")
        setups = [setup for setup in setups if not setup.balanced]
    try:
        # Round after round of every setup, so a shared machine's load drifts over all of them alike.
        for setup in [setup for _ in range(rounds) for setup in setups]:
            result.windows.append(
                await measure(setup, busy=busy, seconds=seconds, rate=rate, rng=rng, compress=compress, scratch=scratch)
            )
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    # The PostgreSQL figures: on `store_url`, or on a server started here (fsync on, as in production), a database
    # of its own for each figure.
    server = None
    if store_url is None and server_has_store_url():
        from tests.support.postgres import postgres_missing, start_postgres

        if postgres_missing() is None:
            server = await asyncio.to_thread(start_postgres, fsync=True)
    try:
        measures: tuple[tuple[str, Callable[[str | None], Awaitable[list[Figure]]]], ...] = (
            (
                "flush commit latency, SQLite vs PostgreSQL",
                lambda url: commit_latency_figures(url, turns=store_turns),
            ),
            (
                "replica death -> session running on another",
                lambda url: failover_figures(url, rounds=failovers, lease_ttl=lease_ttl, compress=compress),
            ),
        )
        for what, figures in measures:
            url = store_url if server is None else await asyncio.to_thread(server.database)
            try:
                result.later += await figures(url)
            except NotMeasuredError as why:
                result.not_measured.append(f"{what}: {why}")
    finally:
        if server is not None:
            await asyncio.to_thread(server.stop)
    return result


def main(argv: Sequence[str] | None = None) -> ClusterResult:
    parser = argparse.ArgumentParser(prog="python -m bench.cluster", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="small counts (what the smoke test runs)")
    parser.add_argument("--busy", type=int, default=100, help="busy connections per setup (default 100)")
    parser.add_argument("--seconds", type=float, default=5.0, help="measured window per setup (default 5)")
    parser.add_argument("--rate", type=float, default=20.0, help="chunks/s of a busy turn (default 20)")
    parser.add_argument("--rounds", type=int, default=1, help="every setup this many times, interleaved (default 1)")
    parser.add_argument("--no-compression", action="store_true", help="WebSocket clients offer no permessage-deflate")
    parser.add_argument(
        "--store-url", default=None, help="a PostgreSQL database of its own for the store figures (default: a server"
        " started here, when postgresql is installed)"
    )  # fmt: skip
    parser.add_argument("--store-turns", type=int, default=300, help="turns whose flush is timed per store (300)")
    parser.add_argument("--failovers", type=int, default=3, help="replica deaths timed, fresh processes each (3)")
    parser.add_argument("--lease-ttl", type=float, default=5.0, help="the replicas' --lease-ttl, where serve has it")
    options = parser.parse_args(argv)
    if options.quick:  # smaller counts, unless given on the command line
        for name, value in {"busy": 6, "seconds": 1.0, "store_turns": 30, "failovers": 1}.items():
            if getattr(options, name) == parser.get_default(name):
                setattr(options, name, value)
    started = time.monotonic()
    result = asyncio.run(
        run(
            busy=options.busy,
            seconds=options.seconds,
            rate=options.rate,
            rounds=options.rounds,
            compress=not options.no_compression,
            store_url=options.store_url,
            store_turns=options.store_turns,
            failovers=options.failovers,
            lease_ttl=options.lease_ttl,
        )
    )
    deflate = "not offered" if options.no_compression else "offered"
    took = time.monotonic() - started
    print(
        f"cluster: {len(result.windows)} windows ({options.rounds} rounds) in {took:.1f} s, WebSocket deflate {deflate}"
    )
    print(format_table(result.figures()))
    for line in result.skipped:
        print(f"SKIPPED: {line}")
    for line in result.not_measured:
        print(f"NOT MEASURED: {line}")
    for window in result.windows:
        for problem in window.busy.problems[:10]:
            print(f"PROBLEM ({window.setup.name}): {problem}")
    return result


if __name__ == "__main__":
    main()
