"""Streaming throughput: chunks per second of a long scripted turn, and the server's CPU cost per chunk.

A model streams many tiny deltas; if each costs the server tens of microseconds, a fast model backs up behind the
server. A turn of `{"say": "x", "repeat": N}` is timed from the prompt's write to the read of its response, every
`agent_message_chunk` line received is counted, and the median of several turns is reported. CPU is the server's
utime + stime from /proc/<pid>/stat over all the timed turns together: a tick is 10 ms at 100 Hz, longer than one
10,000-chunk turn takes. The variant with N separate `say` steps shows what each script step costs on top.
`--protocol 2` runs the same turns on an ACP v2 connection, where the prompt is answered on acceptance: a turn is
timed from the prompt's write to the read of its work's `idle` state_update instead (figures named `v2 chunks: ...`).
Run alone: `python -m bench.chunks [--chunks N] [--turns T] [--no-steps] [--protocol 2]`.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import orjson

from bench.report import Figure, format_table, versioned
from bench.wire import CLOCK_TICKS, PROTOCOLS, Server, WireError

__all__ = ["ChunksResult", "Variant", "main", "run", "run_turns"]

TARGET_CHUNKS_PER_S = 60_000.0


@dataclass(frozen=True, slots=True)
class Variant:
    """Several timed turns of one script. CPU is taken over the whole span: ticks are too coarse for one turn."""

    label: str
    chunks: int  # per turn
    seconds: list[float]  # prompt write -> response read (v2: idle read), per turn
    server_cpu_s: float  # all turns
    client_cpu_s: float  # all turns

    @property
    def rates(self) -> list[float]:
        return [self.chunks / s for s in self.seconds]

    @property
    def median_rate(self) -> float:
        return statistics.median(self.rates)

    def cpu_us_per_chunk(self, cpu_s: float) -> float:
        return cpu_s / (self.chunks * len(self.seconds)) * 1e6

    def describe(self) -> str:
        rates = ", ".join(f"{r:,.0f}" for r in self.rates)
        return (
            f"chunks ({self.label}): {len(self.seconds)} turns of {self.chunks} chunks, chunks/s per turn: {rates}; "
            f"server CPU {self.server_cpu_s * 1000:.0f} ms, reader CPU {self.client_cpu_s * 1000:.0f} ms in all"
        )


@dataclass(frozen=True, slots=True)
class ChunksResult:
    repeat: Variant
    steps: Variant | None  # None when the variant was skipped
    protocol: int = 1

    def figures(self) -> list[Figure]:
        def name(text: str) -> str:
            return versioned(text, self.protocol)

        repeat = self.repeat
        rate = repeat.median_rate
        figures = [
            Figure(name(f"chunks: say x{repeat.chunks}, median"), rate, "chunks/s", ">=", TARGET_CHUNKS_PER_S),
            Figure(name("chunks: server CPU per chunk"), repeat.cpu_us_per_chunk(repeat.server_cpu_s), "µs"),
            Figure(name("chunks: bench reader CPU per chunk"), repeat.cpu_us_per_chunk(repeat.client_cpu_s), "µs"),
        ]
        if self.steps is not None:
            steps = self.steps
            figures += [
                Figure(name(f"chunks: {steps.chunks} say steps, median"), steps.median_rate, "chunks/s"),
                Figure(name("chunks: steps, server CPU per chunk"), steps.cpu_us_per_chunk(steps.server_cpu_s), "µs"),
            ]
        return figures


def _prompt_params(session_id: str, script: list[dict[str, object]] | None) -> dict[str, object]:
    params: dict[str, object] = {"sessionId": session_id, "prompt": [{"type": "text", "text": "bench"}]}
    if script is not None:  # else the server's script file plays
        params["_meta"] = {"scripted": script}
    return params


def run_turns(
    server: Server, session_id: str, *, label: str, script: list[dict[str, object]] | None, expected: int, turns: int
) -> Variant:
    """Play `script` `turns` times on one session; every turn must end `end_turn` with exactly `expected` chunks.
    A turn ends at its response on v1 and at its work's `idle` on v2 (`Server.play`)."""
    seconds: list[float] = []
    cpu_before = server.cpu_ticks()
    client_before = time.process_time()
    for _ in range(turns):
        request_id, message = server.request_message("session/prompt", _prompt_params(session_id, script))
        t_written = server.send(message)
        turn = server.play(request_id, session_id)
        seconds.append((turn.t_response_ns - t_written) / 1e9)
        if turn.stop_reason != "end_turn":
            raise WireError(f"turn ended with {turn.response}")
        if turn.chunks != expected:
            raise WireError(f"received {turn.chunks} chunks, expected {expected}")
    client_cpu = time.process_time() - client_before
    server_cpu = (server.cpu_ticks() - cpu_before) / CLOCK_TICKS
    return Variant(label, expected, seconds, server_cpu, client_cpu)


def run(chunks: int = 10_000, turns: int = 10, steps: bool = True, protocol: int = 1) -> ChunksResult:
    with Server.spawn("--model", "scripted") as server:
        server.initialize(protocol)
        session_id = server.new_session()
        # One untimed turn first: the first prompt pays for lazy imports and model builds, which is start-up cost.
        run_turns(server, session_id, label="warm-up", script=[{"say": "x", "repeat": 100}], expected=100, turns=1)
        repeat_script: list[dict[str, object]] = [{"say": "x", "repeat": chunks}]
        repeat = run_turns(server, session_id, label="repeat", script=repeat_script, expected=chunks, turns=turns)
    separate = None
    if steps:
        # 10,000 steps are far over the 64 KiB a prompt's `_meta` may carry: they come from a script file instead.
        with tempfile.TemporaryDirectory(prefix="acp-bench-") as folder:
            script_file = Path(folder) / "steps.json"
            script_file.write_bytes(orjson.dumps([{"say": "x"}] * chunks))
            with Server.spawn("--model", f"scripted:{script_file}") as server:
                server.initialize(protocol)
                session_id = server.new_session()
                run_turns(server, session_id, label="warm-up", script=None, expected=chunks, turns=1)
                separate = run_turns(server, session_id, label="steps", script=None, expected=chunks, turns=turns)
    return ChunksResult(repeat, separate, protocol)


def main(argv: Sequence[str] | None = None) -> ChunksResult:
    parser = argparse.ArgumentParser(prog="python -m bench.chunks", description=__doc__)
    parser.add_argument("--chunks", type=int, default=10_000, help="chunks per turn (default 10000)")
    parser.add_argument("--turns", type=int, default=10, help="timed turns per variant (default 10)")
    parser.add_argument("--no-steps", action="store_true", help="skip the variant with one say step per chunk")
    parser.add_argument("--protocol", type=int, choices=PROTOCOLS, default=1, help="ACP version spoken (default 1)")
    options = parser.parse_args(argv)
    result = run(options.chunks, options.turns, not options.no_steps, options.protocol)
    print(result.repeat.describe())
    if result.steps is not None:
        print(result.steps.describe())
    print(format_table(result.figures()))
    return result


if __name__ == "__main__":
    main()
