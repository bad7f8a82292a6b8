"""Stop latency: from the `session/cancel` write to the read of the prompt's `cancelled` response.

This is what a user feels after pressing Stop, and the server's defining promise. One process and one session are
reused: each iteration prompts with `[{"gate": "g"}]`, waits for the test-mode probe `gate_reached` (so the turn is
really parked inside the model), writes the cancel, and stops the clock when the response line is read. The session
must take the next prompt right after, so a leak or a slow cleanup shows up as errors or a growing tail.
Run alone: `python -m bench.cancel [--iterations N]`.
"""

from __future__ import annotations

import argparse
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from bench.report import Figure, format_table
from bench.wire import Server, WireError, percentile

__all__ = ["CancelResult", "main", "run"]

TARGET_P99_MS = 5.0
WARM_UP = 5
STREAMING_CHUNKS_BEFORE_CANCEL = 5000


def _latencies(samples_ms: Sequence[float]) -> tuple[float, float, float]:
    return statistics.median(samples_ms), percentile(samples_ms, 99), max(samples_ms)


@dataclass(frozen=True, slots=True)
class CancelResult:
    samples_ms: list[float]  # cancels of a turn parked on a gate
    streaming_ms: list[float]  # cancels of a turn in full stream (empty when skipped)
    chunks_after_cancel: list[int]  # per streaming cancel: chunks read between the cancel and the response
    stats_after: dict[str, Any]  # `_acp_server/stats` once every iteration has finished

    @property
    def median_ms(self) -> float:
        return statistics.median(self.samples_ms)

    @property
    def p99_ms(self) -> float:
        return percentile(self.samples_ms, 99)

    def figures(self) -> list[Figure]:
        median, p99, worst = _latencies(self.samples_ms)
        figures = [
            Figure("cancel -> cancelled, median", median, "ms"),
            Figure("cancel -> cancelled, p99", p99, "ms", "<=", TARGET_P99_MS),
            Figure("cancel -> cancelled, max", worst, "ms"),
        ]
        if self.streaming_ms:
            median, _, worst = _latencies(self.streaming_ms)
            figures += [
                Figure("cancel mid-stream -> cancelled, median", median, "ms"),
                Figure("cancel mid-stream -> cancelled, max", worst, "ms"),
                Figure(
                    "cancel mid-stream: chunks still delivered", statistics.median(self.chunks_after_cancel), "chunks"
                ),
            ]
        return figures


def _is_gate_probe(request_id: int) -> Any:
    def matches(message: dict[str, Any]) -> bool:
        if message.get("method") != "_scripted/probe":
            return False
        params = message["params"]
        return bool(params.get("event") == "gate_reached" and params.get("prompt") == request_id)

    return matches


def _prompt(session_id: str, script: list[dict[str, Any]]) -> dict[str, Any]:
    return {"sessionId": session_id, "prompt": [{"type": "text", "text": "bench"}], "_meta": {"scripted": script}}


def _check_cancelled(response: dict[str, Any], index: int) -> None:
    if response.get("result") != {"stopReason": "cancelled"}:
        raise WireError(f"iteration {index}: expected cancelled, got {response}")


def run(iterations: int = 100, streaming: int = 20) -> CancelResult:
    """`iterations` cancels of a turn parked on a gate (the target), then `streaming` cancels of a streaming turn.

    The mid-stream figure is informational: every chunk the turn queued before the cancel is still written ahead of
    the response (the spec wants all of a turn's updates out before its answer), so it measures the server's output
    backlog as much as the cancel, and it grows with a slower client.
    """
    samples: list[float] = []
    streaming_ms: list[float] = []
    chunks_after: list[int] = []
    with Server.spawn("--model", "scripted", "--test-mode") as server:
        server.initialize()
        session_id = server.new_session()
        cancel = {"method": "session/cancel", "params": {"sessionId": session_id}}
        gated = _prompt(session_id, [{"gate": "g"}])
        # The first few cancels pay for code paths run the first time; they are not what a user sees all day.
        for index in range(WARM_UP + iterations):
            request_id, _ = server.request("session/prompt", gated)
            server.wait_for(_is_gate_probe(request_id))
            t_cancel = server.send(cancel)
            response, t_read = server.response(request_id)
            _check_cancelled(response, index)
            if index >= WARM_UP:
                samples.append((t_read - t_cancel) / 1e6)
        # Long enough that no turn can finish on its own before the cancel lands (a few seconds of streaming).
        endless = _prompt(session_id, [{"say": "x", "repeat": 1_000_000}])
        for index in range(streaming):
            request_id, _ = server.request("session/prompt", endless)
            server.skip_chunks(STREAMING_CHUNKS_BEFORE_CANCEL)
            t_cancel = server.send(cancel)
            turn = server.stream_turn(request_id)
            _check_cancelled(turn.response, index)
            streaming_ms.append((turn.t_response_ns - t_cancel) / 1e6)
            chunks_after.append(turn.chunks)
        stats = server.call("_acp_server/stats", {})
    return CancelResult(samples, streaming_ms, chunks_after, stats)


def main(argv: Sequence[str] | None = None) -> CancelResult:
    parser = argparse.ArgumentParser(prog="python -m bench.cancel", description=__doc__)
    parser.add_argument("--iterations", type=int, default=100, help="timed cancels at a gate (default 100)")
    parser.add_argument("--streaming", type=int, default=20, help="timed cancels mid-stream (default 20; 0 skips)")
    options = parser.parse_args(argv)
    result = run(options.iterations, options.streaming)
    ordered = sorted(result.samples_ms)
    print(
        f"cancel: {len(ordered)} cancels; fastest {ordered[0]:.2f} ms; slowest five: "
        + ", ".join(f"{s:.2f}" for s in ordered[-5:])
        + " ms"
    )
    if result.streaming_ms:
        print(
            f"cancel: mid-stream (after {STREAMING_CHUNKS_BEFORE_CANCEL} chunks), ms: "
            + ", ".join(f"{s:.2f}" for s in sorted(result.streaming_ms))
            + f"; chunks delivered between cancel and response: {sorted(set(result.chunks_after_cancel))}"
        )
    print(f"cancel: server stats afterwards: {result.stats_after}")
    print(format_table(result.figures()))
    return result


if __name__ == "__main__":
    main()
