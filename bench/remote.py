"""Remote ACP against stdio, side by side in one run: cancel latency, chunks/s, idle connections, connect time.

Issue 23 item 8. The same client (bench/links.py's `Client`) drives every transport: stdio (the agent's pipes),
WebSocket (`acp-server serve`, one connection per editor) and, with `--http`, Streamable HTTP (skipped with a
message while the server answers `POST /acp` with 404 or 405). Every server runs `--model scripted --test-mode`. The
stdio and remote servers are started together and each phase runs on one transport after the other (the cancels of
one session alternate), so a shared machine's load drifts over both alike. "Busy" is bench.scale's: a scripted turn
streaming `--rate` (20) chunks/s, `{"say": "x", "repeat": N, "every": 0.05}` after a random phase.

- cancel -> `cancelled`, one busy session: the turn has streamed two chunks, the client writes `session/cancel`, the
  clock stops when it reads the prompt's `{"stopReason": "cancelled"}` (over HTTP the clock starts as the `POST`
  starts: its 202 may come after the answer). Goal: p99 within 2 ms of stdio's (the figure's bound is stdio's p99 +
  2 ms, from this run).
- the same with `--busy` (100) busy connections (stdio: 100 busy sessions on its one connection), for `--seconds`
  with cancels at up to 20/s (one per session every 2 s at most), each cancelled session prompted again at once, as
  bench.scale does. Goal: p99 <= 25 ms over the network transports. Beside it, the chunks/s read in that window
  (busy x rate when the server keeps up) and the server's CPU per chunk.
- chunks/s per connection and in total with `--levels` (1, 10, 100) connections each streaming a turn flat out
  (`{"say": "x", "repeat": N}`, `--chunks` in all per level), from the prompts' write to the last response's read;
  server CPU per chunk from /proc/<pid>/stat (utime + stime), and the client's (this process's) beside it, so a
  rate the client held down can be told from one the server did. Goal: WebSocket's one-connection rate >= 70 % of
  stdio's.
- `--idle` (1,000) idle authenticated WebSocket connections (each one `initialize`d) on one `serve
  --max-connections 1100`: 0 errors; RSS per idle connection (VmRSS after minus before, / 1,000) <= 64 KB, measured
  after a warm-up connection has run a prompt (nothing lazy left to load).
- TCP connect -> `initialize` answered over WebSocket (the client's connect, upgrade and `initialize`), p50 of
  `--connects` (50) fresh connections. Goal: <= 5 ms on loopback. Beside it the same over a bare client (the
  upgrade and one frame written by hand): the `websockets` client's own connect costs some milliseconds here, which
  the first figure counts as the server's (seen: 6.3 ms p50 against a hypercorn app that answers at once).

The client is Python too, on the same machine: its own cost is in every wall-clock figure (the same code for every
transport, so the difference is the transports'). WebSocket clients offer permessage-deflate, as `websockets` and
the TypeScript SDK's `ws` client do by default (hypercorn accepts it); `--no-compression` offers none. `--quick`
shrinks every count (tests/e2e/test_bench_smoke.py); a phase is skipped with `--cancels 0` (then only warm-up
cancels run), `--busy 0`, `--levels ""`, `--idle 0`, `--connects 0`.
Run alone: `python -m bench.remote [--quick] [--http] [--no-compression] [--busy 100] [--levels 1,10,100]
[--idle 1000]`.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import os
import random
import resource
import statistics
import struct
import time
import urllib.parse
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from bench.links import Client, HttpNotServedError, Spawned
from bench.report import Figure, format_table
from bench.wire import CLOCK_TICKS, WireError, percentile, process_cpu_ticks

__all__ = ["Busy", "RemoteResult", "Stream", "busy_window", "main", "run"]

CANCEL_WITHIN_STDIO_MS = 2.0  # one busy session: a network transport's p99 at most this far above stdio's
CANCEL_BUSY_P99_MS = 25.0  # with 100 busy connections
RATE_VS_STDIO = 0.7  # one streaming connection: at least this share of stdio's chunks/s
IDLE_KB_PER_CONNECTION = 64.0
CONNECT_P50_MS = 5.0
WARM_UP_CANCELS = 3
CONNECT_CONCURRENCY = 50  # connections opened at once (the server's listen backlog is 128)


@dataclass(frozen=True, slots=True)
class Stream:
    """One flat-out streaming level: `connections` streams, every chunk of each turn read."""

    transport: str
    connections: int
    chunks: int
    seconds: float
    cpu_ticks: int  # the server's
    client_cpu_s: float  # this process's (the client's) over the same turns

    @property
    def total_rate(self) -> float:
        return self.chunks / self.seconds

    @property
    def cpu_us_per_chunk(self) -> float:
        return self.cpu_ticks / CLOCK_TICKS / self.chunks * 1e6

    @property
    def client_us_per_chunk(self) -> float:
        return self.client_cpu_s / self.chunks * 1e6


@dataclass(frozen=True, slots=True)
class Busy:
    """One busy window: its cancels, and whether the server kept up with the paced streams meanwhile."""

    cancel_ms: list[float]
    chunks: int
    seconds: float
    cpu_ticks: int  # the server's (every watched process's together)
    client_cpu_s: float  # this process's (the client's)
    problems: list[str]  # a cancel or prompt that failed (its session is left out from then on)
    # What bench/cluster.py splits by replica: each watched process's CPU by its name, each stream's chunks in the
    # window (by its index), and the stream each timed cancel was of (beside `cancel_ms`).
    cpu_ticks_by: dict[str, int] = field(default_factory=dict)
    chunks_by_stream: list[int] = field(default_factory=list)
    cancel_streams: list[int] = field(default_factory=list)

    @property
    def rate(self) -> float:
        return self.chunks / self.seconds

    @property
    def cpu_us_per_chunk(self) -> float:
        return self.cpu_ticks / CLOCK_TICKS / self.chunks * 1e6 if self.chunks else 0.0

    @property
    def client_us_per_chunk(self) -> float:
        return self.client_cpu_s / self.chunks * 1e6 if self.chunks else 0.0


@dataclass
class RemoteResult:
    transports: list[str]
    busy: int
    one_ms: dict[str, list[float]] = field(default_factory=dict)  # transport -> cancels of one busy session
    busy_levels: dict[str, Busy] = field(default_factory=dict)  # transport -> its window with `busy` busy
    rate: float = 20.0
    streams: list[Stream] = field(default_factory=list)
    idle: int = 0
    idle_errors: int = 0
    idle_kb: float = 0.0  # RSS per idle connection
    connect_ms: dict[str, list[float]] = field(default_factory=dict)
    bare_connect_ms: list[float] = field(default_factory=list)  # websocket, the hand-written client
    skipped: list[str] = field(default_factory=list)  # what was not measured, and why

    def figures(self) -> list[Figure]:
        figures: list[Figure] = []
        stdio_one = percentile(self.one_ms["stdio"], 99) if self.one_ms.get("stdio") else None
        for transport in self.transports:
            samples = self.one_ms.get(transport)
            if samples:
                name = f"remote: cancel -> cancelled, 1 busy session, {transport}"
                bound = None if transport == "stdio" or stdio_one is None else stdio_one + CANCEL_WITHIN_STDIO_MS
                figures += [
                    Figure(f"{name}, p50", statistics.median(samples), "ms"),
                    Figure(f"{name}, p99", percentile(samples, 99), "ms", "<=" if bound else None, bound),
                ]
        for transport in self.transports:
            busy = self.busy_levels.get(transport)
            if busy is not None and busy.cancel_ms:
                what = "sessions" if transport == "stdio" else "connections"
                name = f"remote: cancel -> cancelled, {self.busy} busy {what}, {transport}"
                target = None if transport == "stdio" else CANCEL_BUSY_P99_MS
                samples = busy.cancel_ms
                figures += [
                    Figure(f"{name}, p50", statistics.median(samples), "ms"),
                    Figure(f"{name}, p99", percentile(samples, 99), "ms", "<=" if target else None, target),
                    # Whether the server kept up meanwhile: busy x rate when it did.
                    Figure(
                        f"remote: {self.busy} busy {what}, {transport}, chunks/s (of {self.busy * self.rate:g})",
                        busy.rate,
                        "chunks/s",
                    ),
                    Figure(
                        f"remote: {self.busy} busy {what}, {transport}, server CPU per chunk",
                        busy.cpu_us_per_chunk,
                        "µs",
                    ),
                    Figure(
                        f"remote: {self.busy} busy {what}, {transport}, client CPU per chunk",
                        busy.client_us_per_chunk,
                        "µs",
                    ),
                    Figure(f"{name}, problems", float(len(busy.problems)), "problems", "<=", 0.0),
                ]
        stdio_single = next((s for s in self.streams if s.transport == "stdio" and s.connections == 1), None)
        for stream in self.streams:
            what = "session" if stream.transport == "stdio" else "connection"
            name = f"remote: {stream.connections} streaming {what}{'s' if stream.connections > 1 else ''}"
            name += f", {stream.transport}"
            per = stream.total_rate / stream.connections
            bound = None
            if stream.connections == 1 and stream.transport != "stdio" and stdio_single is not None:
                bound = RATE_VS_STDIO * stdio_single.total_rate
            figures += [
                Figure(f"{name}, chunks/s per {what}", per, "chunks/s", ">=" if bound else None, bound),
                Figure(f"{name}, chunks/s in total", stream.total_rate, "chunks/s"),
                Figure(f"{name}, server CPU per chunk", stream.cpu_us_per_chunk, "µs"),
                Figure(f"{name}, client CPU per chunk", stream.client_us_per_chunk, "µs"),
            ]
        if self.idle:
            name = f"remote: {self.idle:,} idle websocket connections"
            figures += [
                Figure(f"{name}, errors", float(self.idle_errors), "errors", "<=", 0.0),
                Figure(f"{name}, RSS per connection", self.idle_kb, "KB", "<=", IDLE_KB_PER_CONNECTION),
            ]
        for transport, samples in self.connect_ms.items():
            if samples:
                name = f"remote: TCP connect -> initialize answered, {transport}, p50"
                figures.append(Figure(name, statistics.median(samples), "ms", "<=", CONNECT_P50_MS))
        if self.bare_connect_ms:
            name = "remote: TCP connect -> initialize answered, websocket, bare client, p50"
            figures.append(Figure(name, statistics.median(self.bare_connect_ms), "ms", "<=", CONNECT_P50_MS))
        return figures


def _busy_prompt(session: str, rng: random.Random, rate: float) -> dict[str, object]:
    """A turn that streams `rate` chunks/s, after a random phase, for longer than any benchmark waits."""
    script = [{"sleep": rng.uniform(0, 1 / rate)}, {"say": "x", "repeat": 1_000_000, "every": 1 / rate}]
    return {"sessionId": session, "prompt": [{"type": "text", "text": "busy"}], "_meta": {"scripted": script}}


def _flat_prompt(session: str, repeat: int) -> dict[str, object]:
    script = [{"say": "x", "repeat": repeat}]
    return {"sessionId": session, "prompt": [{"type": "text", "text": "stream"}], "_meta": {"scripted": script}}


def _check_cancelled(message: dict[str, object], where: str) -> None:
    if message.get("result") != {"stopReason": "cancelled"}:
        raise WireError(f"{where}: a cancelled prompt was answered {message}")


class Streams:
    """A server's sessions for the benchmark: stdio's all on its one connection, a remote server's one per
    connection (each an editor)."""

    def __init__(self, server: Spawned, pairs: list[tuple[Client, str]]) -> None:
        self.server = server
        self.pairs = pairs

    @classmethod
    async def open(cls, server: Spawned, count: int) -> Streams:
        if server.transport == "stdio":
            client = await server.client()
            sessions = await asyncio.gather(*(client.new_session(server.workspace) for _ in range(count)))
            return cls(server, [(client, session) for session in sessions])
        gate = asyncio.Semaphore(CONNECT_CONCURRENCY)

        async def one() -> tuple[Client, str]:
            async with gate:
                client = await server.client()
                return client, await client.new_session(server.workspace)

        return cls(server, list(await asyncio.gather(*(one() for _ in range(count)))))

    @property
    def clients(self) -> list[Client]:
        return list({id(client): client for client, _ in self.pairs}.values())

    def chunks(self) -> int:
        return sum(client.chunks for client in self.clients)

    async def close(self) -> None:
        await asyncio.gather(*(client.close() for client in self.clients))


async def _cancel_once(client: Client, session: str, rng: random.Random, rate: float) -> float:
    """One busy turn, cancelled once it has streamed two chunks: ms from the cancel's write to the answer's read."""
    base = client.chunks_by_session.get(session, 0)
    prompt, _ = await client.request("session/prompt", _busy_prompt(session, rng, rate))
    await client.streamed(session, base + 2)
    t_cancel = await client.notify("session/cancel", {"sessionId": session})
    message, t_read = await asyncio.wait_for(prompt, 60)
    _check_cancelled(message, f"{client.link.name} one session")
    return (t_read - t_cancel) / 1e6


async def _busy_level(streams: Streams, rng: random.Random, rate: float, seconds: float) -> Busy:
    """bench.scale's level over any transport: every stream busy, cancels at up to 20/s in a `seconds` window."""
    return await busy_window(streams.pairs, {"server": streams.server.pid}, rng, rate, seconds)


async def busy_window(
    pairs: Sequence[tuple[Client, str]], watch: Mapping[str, int], rng: random.Random, rate: float, seconds: float
) -> Busy:
    """Every (client, session) of `pairs` busy, cancels at up to 20/s in a `seconds` window, the CPU of each
    process of `watch` (name -> pid) over the window; the sessions may be spread over several servers (bench.cluster
    puts a balancer in between)."""
    cancels_per_s = min(20.0, len(pairs) / 2)
    prompts: dict[int, asyncio.Future[tuple[dict[str, object], int]]] = {}
    base: dict[int, int] = {}
    cancelling: set[int] = set()
    broken: set[int] = set()
    problems: list[str] = []
    samples: list[tuple[int, float]] = []  # (stream, ms)
    tasks: set[asyncio.Task[None]] = set()

    async def prompt(index: int) -> None:
        client, session = pairs[index]
        base[index] = client.chunks_by_session.get(session, 0)
        prompts[index], _ = await client.request("session/prompt", _busy_prompt(session, rng, rate))

    def streamed(index: int) -> bool:
        client, session = pairs[index]
        return client.chunks_by_session.get(session, 0) > base[index]

    async def cancel(index: int, timed: bool) -> None:
        client, session = pairs[index]
        try:
            t_cancel = await client.notify("session/cancel", {"sessionId": session})
            message, t_read = await asyncio.wait_for(prompts[index], 60)
            _check_cancelled(message, f"{client.link.name} busy")
            if timed:
                samples.append((index, (t_read - t_cancel) / 1e6))
                await prompt(index)
        except Exception as exc:  # a problem of the run, counted, not fatal (a cancellation still ends it)
            problems.append(f"session {index}: {exc!r}")
            broken.add(index)  # left out from here on (it stays in `cancelling`)
            return
        cancelling.discard(index)

    await asyncio.gather(*(prompt(index) for index in range(len(pairs))))
    # Warm-up: until every session streams (and at least a second), as bench.scale.
    warm_until = time.monotonic() + 1.0
    for index in range(len(pairs)):
        client, session = pairs[index]
        await client.streamed(session, base[index] + 1, timeout=120)
    await asyncio.sleep(max(0.0, warm_until - time.monotonic()))

    def by_stream() -> list[int]:
        return [client.chunks_by_session.get(session, 0) for client, session in pairs]

    chunks_at_start = by_stream()
    cpu = {name: process_cpu_ticks(pid) for name, pid in watch.items()}
    client_cpu = time.process_time()
    t_start = time.monotonic()
    t_end = t_start + seconds
    next_cancel = t_start
    while (now := time.monotonic()) < t_end:
        if now < next_cancel:
            await asyncio.sleep(min(next_cancel, t_end) - now)
            continue
        next_cancel += 1 / cancels_per_s
        ready = [i for i in range(len(pairs)) if i not in cancelling and streamed(i)]
        if ready:
            victim = rng.choice(ready)
            cancelling.add(victim)
            task = asyncio.create_task(cancel(victim, True))
            tasks.add(task)
            task.add_done_callback(tasks.discard)
    cpu = {name: process_cpu_ticks(pid) - cpu[name] for name, pid in watch.items()}
    client_cpu = time.process_time() - client_cpu
    chunks_by = [end - start for start, end in zip(chunks_at_start, by_stream(), strict=True)]
    window = time.monotonic() - t_start
    await asyncio.gather(*tasks)
    # The end: every turn cancelled and answered.
    await asyncio.gather(*(cancel(index, False) for index in range(len(pairs)) if index not in broken))
    timed = [index for index, _ in samples]
    return Busy(
        [ms for _, ms in samples],
        sum(chunks_by),
        window,
        sum(cpu.values()),
        client_cpu,
        problems,
        cpu,
        chunks_by,
        timed,
    )


async def _stream_level(streams: Streams, connections: int, chunks: int) -> Stream:
    """`connections` streams, each one flat-out turn of chunks/connections chunks, all at once."""
    pairs = streams.pairs[:connections]
    repeat = max(1, chunks // connections)
    before = streams.chunks()
    cpu = process_cpu_ticks(streams.server.pid)
    client_cpu = time.process_time()
    t_start = time.perf_counter_ns()
    sent = await asyncio.gather(*(client.request("session/prompt", _flat_prompt(s, repeat)) for client, s in pairs))
    answers = await asyncio.gather(*(asyncio.wait_for(future, 300) for future, _ in sent))
    t_end = max(t_read for _, t_read in answers)
    cpu = process_cpu_ticks(streams.server.pid) - cpu
    client_cpu = time.process_time() - client_cpu
    for message, _ in answers:
        if message.get("result") != {"stopReason": "end_turn"}:
            raise WireError(f"a streaming turn ended {message}")
    got = streams.chunks() - before
    if got != repeat * connections:
        raise WireError(f"{connections} streams: {got} chunks read, {repeat * connections} sent")
    return Stream(streams.server.transport, connections, got, (t_end - t_start) / 1e9, cpu, client_cpu)


async def _connect_times(server: Spawned, count: int) -> list[float]:
    """Fresh connections one after another: ms from the client's connect to its read of the `initialize` answer."""
    samples = []
    for _ in range(count):
        t_start = time.perf_counter_ns()
        client = Client(await server.link())
        future, _ = await client.request("initialize", {"protocolVersion": 1, "clientCapabilities": {}})
        _, t_read = await asyncio.wait_for(future, 60)
        samples.append((t_read - t_start) / 1e6)
        await client.close()
    return samples


async def _bare_connect_times(server: Spawned, count: int) -> list[float]:
    """As `_connect_times`, with the least client there is: the upgrade request and one masked frame written by hand
    on an asyncio stream, no extension offered, frames read until the first text frame (hypercorn pings first).
    The `websockets` client spends some milliseconds of its own on a connect here (its handshake, its tasks), which
    the first figure counts as the server's; this one leaves little but the server's work and the loopback's."""
    url = urllib.parse.urlsplit(server.ws_url)
    host, port = url.hostname or "127.0.0.1", url.port or 80
    body = b'{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":1,"clientCapabilities":{}}}'
    assert len(body) < 126
    mask = os.urandom(4)
    frame = bytes([0x81, 0x80 | len(body)]) + mask  # under 126 bytes: the length fits the header
    frame += bytes(byte ^ mask[index % 4] for index, byte in enumerate(body))
    samples = []
    for _ in range(count):
        key = base64.b64encode(os.urandom(16)).decode()
        upgrade = (
            f"GET {url.path} HTTP/1.1\r\nHost: {url.netloc}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
            f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\nAuthorization: Bearer {server.token}\r\n\r\n"
        ).encode()
        t_start = time.perf_counter_ns()
        reader, writer = await asyncio.open_connection(host, port)
        writer.write(upgrade)
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 60)
        status = head.split(b"\r\n", 1)[0]
        if b" 101 " not in status:
            raise WireError(f"the upgrade was refused: {status!r}")
        writer.write(frame)
        while True:  # a server frame is never masked
            first, length = await asyncio.wait_for(reader.readexactly(2), 60)
            length &= 0x7F
            if length == 126:
                (length,) = struct.unpack("!H", await reader.readexactly(2))
            elif length == 127:
                (length,) = struct.unpack("!Q", await reader.readexactly(8))
            await reader.readexactly(length)
            if first & 0x0F == 0x1:
                break
        samples.append((time.perf_counter_ns() - t_start) / 1e6)
        writer.close()
        await writer.wait_closed()
    return samples


async def _idle(count: int, connects: int, compress: bool) -> tuple[int, float, list[float]]:
    """(errors, RSS KB per idle connection, connect ms) on a `serve --max-connections count + 100`."""
    async with await Spawned.start("websocket", "--max-connections", str(count + 100), compress=compress) as server:
        warm = await server.client()  # runs a prompt first, so nothing lazy is still to load
        session = await warm.new_session(server.workspace)
        await warm.call("session/prompt", _flat_prompt(session, 100))
        await asyncio.sleep(0.5)
        rss_before = server.rss_kb()
        gate = asyncio.Semaphore(CONNECT_CONCURRENCY)
        clients: list[Client] = []
        errors = 0

        async def one() -> None:
            nonlocal errors
            async with gate:
                try:
                    clients.append(await server.client())
                except Exception as exc:  # counted, not fatal: the figure (a cancellation still ends it)
                    errors += 1
                    if errors <= 3:
                        print(f"idle connection failed: {exc!r}")

        await asyncio.gather(*(one() for _ in range(count)))
        await asyncio.sleep(1.0)  # let the server settle (its per-connection tasks have all started)
        # Every connection must still be served: each answers a request (a closed one would raise).
        for client in clients:
            try:
                await client.call("session/list", {}, timeout=60)
            except (WireError, TimeoutError, OSError):
                errors += 1
        rss_after = server.rss_kb()
        await asyncio.gather(*(client.close() for client in clients))
        # Timed after the RSS figures: hypercorn (0.18) keeps a closed WebSocket's connection task, and what it holds,
        # until its next ping is due (`_send_pings` sleeps the whole ping interval, 15 s, before it sees the close), so
        # connections closed before the `before` reading would be freed during the 1,000 and lower their figure.
        connect_ms = await _connect_times(server, connects)
        await warm.close()
    return errors, (rss_after - rss_before) / max(1, count), connect_ms


def _raise_fd_limit(needed: int) -> None:
    """Each idle connection is a socket here and one in the server (which inherits this limit): raise the soft
    limit as far as needed, or say why not."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft >= needed:
        return
    limit = needed if hard == resource.RLIM_INFINITY else min(needed, hard)
    resource.setrlimit(resource.RLIMIT_NOFILE, (limit, hard))
    if limit < needed:
        raise WireError(f"{needed} file descriptors needed, the hard limit is {hard}: raise it (ulimit -Hn)")


async def _http_served(server: Spawned) -> str | None:
    """None when the server serves Streamable HTTP, else why not (for the message)."""
    try:
        client = await server.client("http")
    except HttpNotServedError as exc:
        return str(exc)
    await client.close()
    return None


async def run(
    *,
    http: bool = False,
    cancels: int = 100,
    busy: int = 100,
    seconds: float = 5.0,
    levels: Sequence[int] = (1, 10, 100),
    chunks: int = 20_000,
    idle: int = 1000,
    connects: int = 50,
    rate: float = 20.0,
    seed: int = 7,
    compress: bool = True,
) -> RemoteResult:
    rng = random.Random(seed)
    sessions = max(1, busy, *levels)
    _raise_fd_limit(2 * idle + 4 * sessions + 256)
    transports = ["stdio", "websocket", *(["http"] if http else [])]
    result = RemoteResult(transports, busy, rate=rate)
    servers: dict[str, Spawned] = {}
    opened: dict[str, Streams] = {}
    try:
        for transport in transports:
            servers[transport] = await Spawned.start(transport, compress=compress)
        if http:
            why = await _http_served(servers["http"])
            if why is not None:
                message = f"streamable HTTP skipped: {why}: this server does not serve that profile yet"
                print(message, flush=True)
                result.skipped.append(message)
                transports.remove("http")
                await servers.pop("http").stop()
        for transport in transports:
            opened[transport] = await Streams.open(servers[transport], sessions)
            # A process's first prompt pays for loading the turn's code: not what is measured.
            client, session = opened[transport].pairs[0]
            await client.call("session/prompt", _flat_prompt(session, 100))
        # One busy session: the transports' cancels alternate, so load drifts over all alike.
        for index in range(WARM_UP_CANCELS + cancels):
            for transport in transports:
                client, session = opened[transport].pairs[0]
                ms = await _cancel_once(client, session, rng, rate)
                if index >= WARM_UP_CANCELS:
                    result.one_ms.setdefault(transport, []).append(ms)
        for transport in transports if busy else ():
            result.busy_levels[transport] = await _busy_level(
                Streams(servers[transport], opened[transport].pairs[:busy]), rng, rate, seconds
            )
        for level in levels:
            for transport in transports:
                result.streams.append(await _stream_level(opened[transport], level, chunks))
        for transport in transports:
            if transport != "stdio" and connects:
                result.connect_ms[transport] = await _connect_times(servers[transport], connects)
        if "websocket" in servers and connects:
            result.bare_connect_ms = await _bare_connect_times(servers["websocket"], connects)
    finally:
        for streams in opened.values():
            await streams.close()
        for server in servers.values():
            await server.stop()
    if idle:
        result.idle = idle
        result.idle_errors, result.idle_kb, ws_connect = await _idle(idle, connects, compress)
        result.connect_ms["websocket"] = [*result.connect_ms.get("websocket", []), *ws_connect]
    return result


def main(argv: Sequence[str] | None = None) -> RemoteResult:
    parser = argparse.ArgumentParser(prog="python -m bench.remote", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="small counts (what the smoke test runs)")
    parser.add_argument("--http", action="store_true", help="also Streamable HTTP (skipped if not served)")
    parser.add_argument("--cancels", type=int, default=100, help="timed cancels of one busy session (default 100)")
    parser.add_argument("--busy", type=int, default=100, help="busy connections / sessions (default 100)")
    parser.add_argument("--seconds", type=float, default=5.0, help="busy: measured window (default 5)")
    parser.add_argument("--levels", default="1,10,100", help="streaming connections per level (default 1,10,100)")
    parser.add_argument("--chunks", type=int, default=20_000, help="chunks per streaming level (default 20000)")
    parser.add_argument("--idle", type=int, default=1000, help="idle WebSocket connections (default 1000; 0 skips)")
    parser.add_argument("--connects", type=int, default=50, help="timed fresh connections (default 50)")
    parser.add_argument("--rate", type=float, default=20.0, help="chunks/s of a busy turn (default 20)")
    parser.add_argument(
        "--no-compression",
        action="store_true",
        help="WebSocket clients offer no permessage-deflate (by default they do, as websockets and ws clients do)",
    )
    options = parser.parse_args(argv)
    if options.quick:  # smaller counts, unless given on the command line
        small = {"cancels": 5, "busy": 5, "seconds": 1.0, "levels": "1,3", "chunks": 600, "idle": 20, "connects": 5}
        for name, value in small.items():
            if getattr(options, name) == parser.get_default(name):
                setattr(options, name, value)
    levels = [int(n) for n in options.levels.split(",") if n]
    started = time.monotonic()
    result = asyncio.run(
        run(
            http=options.http,
            cancels=options.cancels,
            busy=options.busy,
            seconds=options.seconds,
            levels=levels,
            chunks=options.chunks,
            idle=options.idle,
            connects=options.connects,
            rate=options.rate,
            compress=not options.no_compression,
        )
    )
    deflate = "offered" if not options.no_compression else "not offered"
    print(f"remote: {', '.join(result.transports)} in {time.monotonic() - started:.1f} s (WebSocket deflate {deflate})")
    print(format_table(result.figures()))
    for transport, busy in result.busy_levels.items():
        for problem in busy.problems[:10]:
            print(f"PROBLEM ({transport}, {result.busy} busy): {problem}")
    return result


if __name__ == "__main__":
    main()
