"""Busy sessions, counted up: cancel latency, chunks/s and the server's CPU per chunk against how many sessions stream.

An editor with many chats open, each streaming a reply, is N models streaming into one process at once. For each
level N (default 1, 10, 50, 100, 300, 1000), one server is started (the session store on), N sessions are opened
and each is prompted with a reply that streams at `--rate` chunks/s (20, a fast model) for longer than the window,
each starting at a random phase so that their chunks do not all fall on the same instant. After a warm-up of a
second or more (until every session streams: a process's first prompt pays for importing the provider's SDK),
once every session streams, for `--seconds`:
- chunks/s is every `agent_message_chunk` line read, over the window (N x rate when the server keeps up);
- CPU per chunk is the server's CPU time over the window (all its threads, /proc/<pid>/task/*/schedstat, in ns)
  divided by those chunks; the single-session level is the figure the others are compared with;
- cancel latency: `--cancels` times a second (at most one per session every two seconds), a random streaming
  session is sent `session/cancel`, timed from the write to the read of its `cancelled` response, and the session
  is prompted again at once, so N stay busy.
At the end every session is cancelled, all prompts must be answered, and `_acp_server/stats` must show no running
turn: anything else is a problem.

`--provider openai` puts the OpenAI SDK path in between: the turns stream from tests/support/fake_openai.py on
127.0.0.1 (in this process's threads, one per stream, each paced by `every`), through `--model openai:fake-model`.

The client is bench/wire.py's thin reader (a byte-prefix test per chunk line), so the figures are the server's.
Run alone: `python -m bench.scale [--levels 1,10,100,1000] [--seconds 5] [--rate 20] [--provider scripted|openai]`.

The same busy load over WebSocket connections, on replicas behind HAProxy (issue 24's cluster figures: cancel
latency and CPU per turn per replica with 1 and 2 replicas, and the PostgreSQL figures still to come), is
bench/cluster.py's: `python -m bench.cluster`.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import random
import statistics
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson

from bench.report import Figure, format_table
from bench.wire import MESSAGE_CHUNK, UPDATE_PREFIX, Server, WireError, percentile, process_cpu_ns

__all__ = ["Level", "ScaleResult", "main", "run", "run_level"]

LEVELS = (1, 10, 50, 100, 300, 1000)
WARM_UP_S = 1.0
CANCEL_P99_TARGET_MS = {"scripted": 50.0, "openai": 5.0}  # issue 14: 1,000 scripted sessions; 50 on the SDK path
CPU_RATIO_TARGET = 2.0  # per-chunk CPU at the busiest level against a single session's


@dataclass(frozen=True, slots=True)
class Level:
    provider: str
    sessions: int
    rate: float
    seconds: float
    chunks: int
    cpu_ns: int
    cancel_ms: list[float]
    problems: list[str] = field(default_factory=list)

    @property
    def chunks_per_s(self) -> float:
        return self.chunks / self.seconds

    @property
    def cpu_us_per_chunk(self) -> float:
        return self.cpu_ns / self.chunks / 1000 if self.chunks else 0.0

    @property
    def cancel_p50_ms(self) -> float:
        return statistics.median(self.cancel_ms) if self.cancel_ms else 0.0

    @property
    def cancel_p99_ms(self) -> float:
        return percentile(self.cancel_ms, 99) if self.cancel_ms else 0.0

    def as_dict(self) -> dict[str, Any]:
        return {
            "provider": self.provider,
            "sessions": self.sessions,
            "rate_per_session": self.rate,
            "seconds": self.seconds,
            "chunks": self.chunks,
            "chunks_per_s": self.chunks_per_s,
            "cpu_us_per_chunk": self.cpu_us_per_chunk,
            "cancels": len(self.cancel_ms),
            "cancel_p50_ms": self.cancel_p50_ms,
            "cancel_p99_ms": self.cancel_p99_ms,
            "problems": self.problems,
        }


@dataclass(frozen=True, slots=True)
class ScaleResult:
    levels: list[Level]

    def figures(self) -> list[Figure]:
        figures: list[Figure] = []
        base = self.levels[0] if self.levels else None
        for level in self.levels:
            name = f"scale[{level.provider}]: {level.sessions} sessions x {level.rate:g} chunks/s"
            target = CANCEL_P99_TARGET_MS[level.provider]
            figures += [
                Figure(f"{name}, chunks/s", level.chunks_per_s, "chunks/s"),
                Figure(f"{name}, server CPU per chunk", level.cpu_us_per_chunk, "µs"),
                Figure(f"{name}, cancel p50", level.cancel_p50_ms, "ms"),
                Figure(f"{name}, cancel p99", level.cancel_p99_ms, "ms", "<=", target),
                Figure(f"{name}, problems", float(len(level.problems)), "problems", "<=", 0.0),
            ]
        if base is not None and len(self.levels) > 1 and base.cpu_us_per_chunk:
            top = self.levels[-1]
            figures.append(
                Figure(
                    f"scale[{top.provider}]: CPU per chunk, {top.sessions} sessions / 1 session",
                    top.cpu_us_per_chunk / base.cpu_us_per_chunk,
                    "x",
                    "<=",
                    CPU_RATIO_TARGET,
                )
            )
        return figures


@contextlib.contextmanager
def _provider(provider: str, rate: float, long: int) -> Iterator[tuple[tuple[str, ...], dict[str, Any] | None]]:
    """The server's model arguments, and the prompt `_meta` that makes its reply stream at `rate`."""
    if provider == "scripted":
        yield ("--model", "scripted"), {}
        return
    from tests.support.fake_openai import FakeOpenAI, text_reply

    with FakeOpenAI() as fake:
        fake.set_default(text_reply(*["x"] * long, every=1 / rate))
        saved = os.environ.get("OPENAI_API_KEY")
        os.environ["OPENAI_API_KEY"] = "test"
        try:
            yield ("--model", "openai:fake-model", "--base-url", fake.base_url), None
        finally:
            if saved is None:
                os.environ.pop("OPENAI_API_KEY", None)
            else:
                os.environ["OPENAI_API_KEY"] = saved


def run_level(
    sessions: int,
    *,
    rate: float = 20.0,
    seconds: float = 5.0,
    cancels: float = 20.0,
    provider: str = "scripted",
    seed: int = 7,
    store: bool = True,
) -> Level:
    rng = random.Random(seed)
    # At most one cancel per session every two seconds: at a few sessions a prompt per chunk would be measured, not
    # the stream (the single-session level is the per-chunk baseline).
    cancels = min(cancels, sessions / 2)
    long = int(rate * (WARM_UP_S + seconds + 60))  # never ends inside the window
    problems: list[str] = []
    with (
        _provider(provider, rate, long) as (args, meta),
        Server.spawn(*args, *(() if store else ("--no-store",))) as server,
    ):
        server.initialize()
        burst = [server.request_message("session/new", {"cwd": "/tmp", "mcpServers": []}) for _ in range(sessions)]
        server.send(*(message for _, message in burst))
        ids = []
        for request_id, _ in burst:
            response, _ = server.response(request_id, timeout=120)
            if "result" not in response:
                raise WireError(f"session/new failed: {response}")
            ids.append(response["result"]["sessionId"])

        def prompt(session: str) -> tuple[int, dict[str, Any]]:
            params: dict[str, Any] = {"sessionId": session, "prompt": [{"type": "text", "text": "stream"}]}
            if meta is not None:  # scripted: a random phase, then the paced reply
                script = [{"sleep": rng.uniform(0, 1 / rate)}, {"say": "x", "repeat": long, "every": 1 / rate}]
                params["_meta"] = {"scripted": script}
            return server.request_message("session/prompt", params)

        active: dict[int, str] = {}  # prompt id -> session
        started: dict[str, float] = {}  # session -> when its current prompt was written
        cancelling: dict[int, int] = {}  # prompt id -> when its cancel was written (perf_counter_ns)
        messages = []
        for session in ids:
            request_id, message = prompt(session)
            active[request_id] = session
            messages.append(message)
        server.send(*messages)
        now = time.monotonic()
        for session in ids:
            started[session] = now

        # Warm-up: until every session has streamed (the first prompt of a process pays for the provider's import)
        # and at least WARM_UP_S.
        streaming: set[str] = set()
        warm_until = time.monotonic() + WARM_UP_S
        give_up = time.monotonic() + 120
        while len(streaming) < sessions or time.monotonic() < warm_until:
            if time.monotonic() > give_up:
                raise WireError(f"only {len(streaming)} of {sessions} sessions streamed within 120 s")
            for line in server.poll_lines(0.05):
                if line.startswith(UPDATE_PREFIX) and MESSAGE_CHUNK in line:
                    streaming.add(orjson.loads(line)["params"]["sessionId"])
        cancel_ms: list[float] = []
        chunks = 0
        t_start = time.monotonic()
        t_end = t_start + seconds
        next_cancel = t_start
        cpu_start: int | None = None
        while True:
            now = time.monotonic()
            if cpu_start is None and now >= t_start:
                cpu_start, chunks = process_cpu_ns(server.pid), 0
            if now >= t_end:
                break
            if cpu_start is not None and now >= next_cancel and cancels > 0:
                next_cancel += 1 / cancels
                busy = [i for i, s in active.items() if i not in cancelling and now - started[s] > 2 / rate]
                if busy:
                    victim = rng.choice(busy)
                    cancelling[victim] = server.notify("session/cancel", {"sessionId": active[victim]})
            timeout = min(t_end, next_cancel if cpu_start is not None else t_start) - time.monotonic()
            for line in server.poll_lines(timeout):
                if line.startswith(UPDATE_PREFIX):
                    if MESSAGE_CHUNK in line:
                        chunks += 1
                    continue
                if not line:
                    continue
                message = orjson.loads(line)
                request_id = message.get("id")
                if "method" in message or request_id not in active:
                    continue
                session = active.pop(request_id)
                t_cancel = cancelling.pop(request_id, None)
                if t_cancel is None or message.get("result") != {"stopReason": "cancelled"}:
                    problems.append(f"{session}: prompt answered {message} without a cancel")
                    continue
                if cpu_start is not None:
                    cancel_ms.append((server.t_read_ns - t_cancel) / 1e6)
                request_id, again = prompt(session)
                active[request_id] = session
                started[session] = time.monotonic()
                server.send(again)
        cpu_ns = process_cpu_ns(server.pid) - (cpu_start or 0)
        # The end: every prompt cancelled and answered, nothing left running.
        server.send(*({"method": "session/cancel", "params": {"sessionId": s}} for s in active.values()))
        deadline = time.monotonic() + 60
        while active and time.monotonic() < deadline:
            for line in server.poll_lines(deadline - time.monotonic()):
                if line and not line.startswith(UPDATE_PREFIX):
                    message = orjson.loads(line)
                    if "method" not in message:
                        active.pop(message.get("id"), None)
        if active:
            problems.append(f"{len(active)} prompts never answered after their cancel")
        stats = server.call("_acp_server/stats", {}, timeout=30)
        if stats.get("runningTurns"):
            problems.append(f"left running: {stats['runningTurns']} turns")
    return Level(provider, sessions, rate, seconds, chunks, cpu_ns, cancel_ms, problems)


def run(
    levels: Sequence[int] = LEVELS,
    rate: float = 20.0,
    seconds: float = 5.0,
    cancels: float = 20.0,
    provider: str = "scripted",
) -> ScaleResult:
    return ScaleResult([run_level(n, rate=rate, seconds=seconds, cancels=cancels, provider=provider) for n in levels])


def main(argv: Sequence[str] | None = None) -> ScaleResult:
    parser = argparse.ArgumentParser(prog="python -m bench.scale", description=__doc__)
    parser.add_argument("--levels", default=",".join(map(str, LEVELS)), help="session counts, comma-separated")
    parser.add_argument("--rate", type=float, default=20.0, help="chunks/s each session streams (default 20)")
    parser.add_argument("--seconds", type=float, default=5.0, help="measured window per level (default 5)")
    parser.add_argument("--cancels", type=float, default=20.0, help="cancels per second (default 20)")
    parser.add_argument("--provider", choices=("scripted", "openai"), default="scripted")
    options = parser.parse_args(argv)
    levels = [int(n) for n in options.levels.split(",") if n]
    result = run(levels, options.rate, options.seconds, options.cancels, options.provider)
    print(format_table(result.figures()))
    for level in result.levels:
        for problem in level.problems[:10]:
            print(f"PROBLEM ({level.sessions} sessions):", problem)
    return result


if __name__ == "__main__":
    main()
