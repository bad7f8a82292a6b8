"""Sessions that last, measured: `session/new` latency, `session/load` of a 1,000-message history after a restart,
and streaming throughput with the session store on against off (`--no-store`).

Every update a client is sent is also recorded in the store, so persistence sits on the per-chunk hot path; this
shows what it costs. Run alone: `python -m bench.sessions [--news N] [--messages M] [--chunks C]`.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass

from bench.chunks import run_turns
from bench.report import Figure, format_table
from bench.wire import Server, percentile

__all__ = ["SessionsResult", "main", "run"]


@dataclass(frozen=True, slots=True)
class SessionsResult:
    new_ms: list[float]
    load_ms: list[float]
    replayed: int
    stored_rate: float
    unstored_rate: float

    def figures(self) -> list[Figure]:
        return [
            Figure("sessions: session/new, median", statistics.median(self.new_ms), "ms"),
            Figure("sessions: session/new, p99", percentile(self.new_ms, 99), "ms"),
            Figure(f"sessions: session/load, {self.replayed} updates, median", statistics.median(self.load_ms), "ms"),
            Figure("sessions: chunks/s with the store", self.stored_rate, "chunks/s"),
            Figure("sessions: chunks/s without the store", self.unstored_rate, "chunks/s"),
        ]


def _spawn(state: str, *args: str) -> Server:
    return Server.spawn("--model", "scripted", *args, state_dir=state)


def run(news: int = 200, messages: int = 1000, chunks: int = 10_000) -> SessionsResult:
    with tempfile.TemporaryDirectory(prefix="acp-server-bench-sessions-") as state:
        return _run(state, news, messages, chunks)


def _run(state: str, news: int, messages: int, chunks: int) -> SessionsResult:
    """`run` in the state directory `state`, removed afterwards by the caller."""
    with _spawn(state) as server:
        server.initialize()
        server.new_session()  # warm-up: opens the store
        new_ms = []
        for _ in range(news):
            started = time.perf_counter()
            server.new_session()
            new_ms.append((time.perf_counter() - started) * 1000)
        session = server.new_session()
        # Each turn adds two messages (the prompt and the reply).
        for index in range(messages // 2):
            request_id, _ = server.request("session/prompt", _prompt(session, [{"say": f"reply {index}"}]))
            server.response(request_id)
    load_ms = []
    replayed = 0
    for _ in range(5):
        with _spawn(state) as server:
            server.initialize()
            started = time.perf_counter()
            request_id, _ = server.request("session/load", {"sessionId": session, "cwd": "/tmp", "mcpServers": []})
            server.response(request_id, timeout=60)
            load_ms.append((time.perf_counter() - started) * 1000)
            replayed = messages  # prompts and replies, each one update
    rates = {}
    for label, args in (("stored", ()), ("unstored", ("--no-store",))):
        with tempfile.TemporaryDirectory(prefix="acp-server-bench-sessions-") as other, _spawn(other, *args) as server:
            server.initialize()
            sid = server.new_session()
            script: list[dict[str, object]] = [{"say": "x", "repeat": chunks}]
            run_turns(server, sid, label="warm-up", script=[{"say": "x", "repeat": 100}], expected=100, turns=1)
            variant = run_turns(server, sid, label=label, script=script, expected=chunks, turns=5)
            rates[label] = variant.median_rate
    return SessionsResult(new_ms, load_ms, replayed, rates["stored"], rates["unstored"])


def _prompt(session: str, script: list[dict[str, object]]) -> dict[str, object]:
    return {"sessionId": session, "prompt": [{"type": "text", "text": "go"}], "_meta": {"scripted": script}}


def main(argv: Sequence[str] | None = None) -> SessionsResult:
    parser = argparse.ArgumentParser(prog="python -m bench.sessions", description=__doc__)
    parser.add_argument("--news", type=int, default=200, help="session/new calls timed (default 200)")
    parser.add_argument("--messages", type=int, default=1000, help="history length to load (default 1000)")
    parser.add_argument("--chunks", type=int, default=10_000, help="chunks per turn, store on vs off (default 10000)")
    options = parser.parse_args(argv)
    result = run(options.news, options.messages, options.chunks)
    print(format_table(result.figures()))
    return result


if __name__ == "__main__":
    main()
