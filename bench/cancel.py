"""Stop latency: from the `session/cancel` write to the read of the prompt's `cancelled` response.

This is what a user feels after pressing Stop, and the server's defining promise. One process and one session are
reused: each iteration prompts with `[{"gate": "g"}]`, waits for the test-mode probe `gate_reached` (so the turn is
really parked inside the model), writes the cancel, and stops the clock when the response line is read. The session
must take the next prompt right after, so a leak or a slow cleanup shows up as errors or a growing tail.
`--protocol 2` does the same on an ACP v2 connection, where the prompt was answered on acceptance: the clock stops at
the read of the work's `idle` state_update with stop reason `cancelled` (figures named `v2 cancel -> idle cancelled`).
Run alone: `python -m bench.cancel [--iterations N] [--protocol 2]`.
"""

from __future__ import annotations

import argparse
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from bench.report import Figure, format_table, versioned
from bench.wire import PROTOCOLS, Server, TurnResult, WireError, percentile

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
    protocol: int = 1

    @property
    def median_ms(self) -> float:
        return statistics.median(self.samples_ms)

    @property
    def p99_ms(self) -> float:
        return percentile(self.samples_ms, 99)

    def figures(self) -> list[Figure]:
        ended = "cancelled" if self.protocol == 1 else "idle cancelled"  # what the clock stops at

        def name(text: str) -> str:
            return versioned(text, self.protocol)

        median, p99, worst = _latencies(self.samples_ms)
        figures = [
            Figure(name(f"cancel -> {ended}, median"), median, "ms"),
            Figure(name(f"cancel -> {ended}, p99"), p99, "ms", "<=", TARGET_P99_MS),
            Figure(name(f"cancel -> {ended}, max"), worst, "ms"),
        ]
        if self.streaming_ms:
            median, _, worst = _latencies(self.streaming_ms)
            after = statistics.median(self.chunks_after_cancel)
            figures += [
                Figure(name(f"cancel mid-stream -> {ended}, median"), median, "ms"),
                Figure(name(f"cancel mid-stream -> {ended}, max"), worst, "ms"),
                Figure(name("cancel mid-stream: chunks still delivered"), after, "chunks"),
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


def _check_cancelled(turn: TurnResult, index: int) -> None:
    """v1: the response is exactly `{"stopReason": "cancelled"}`; v2: the idle's stop reason is `cancelled`."""
    cancelled = turn.stop_reason == "cancelled"
    if "method" not in turn.response:
        cancelled = turn.response.get("result") == {"stopReason": "cancelled"}
    if not cancelled:
        raise WireError(f"iteration {index}: expected cancelled, got {turn.response}")


def _is_idle(session_id: str) -> Any:
    def matches(message: dict[str, Any]) -> bool:
        if message.get("method") != "session/update" or message["params"]["sessionId"] != session_id:
            return False
        update = message["params"]["update"]
        return bool(update["sessionUpdate"] == "state_update" and update["state"] == "idle")

    return matches


def _ended(server: Server, request_id: int, session_id: str) -> TurnResult:
    """The end of a gated prompt's work, parsed (the turn has no chunks): v1 its response, v2 its `idle`."""
    if server.protocol == 1:
        message, t_read = server.response(request_id)
    else:
        message, t_read = server.wait_for(_is_idle(session_id))
    return TurnResult(0, 0, message, t_read)


def run(iterations: int = 100, streaming: int = 20, protocol: int = 1) -> CancelResult:
    """`iterations` cancels of a turn parked on a gate (the target), then `streaming` cancels of a streaming turn.

    The mid-stream figure is informational: every chunk the turn queued before the cancel is still written ahead of
    the response (the spec wants all of a turn's updates out before its answer), so it measures the server's output
    backlog as much as the cancel, and it grows with a slower client. On v2 (`protocol=2`) a cancel ends at the
    work's `idle` `cancelled`, the last thing the server sends for the work.
    """
    samples: list[float] = []
    streaming_ms: list[float] = []
    chunks_after: list[int] = []
    with Server.spawn("--model", "scripted", "--test-mode") as server:
        server.initialize(protocol)
        session_id = server.new_session()
        cancel = {"method": "session/cancel", "params": {"sessionId": session_id}}
        gated = _prompt(session_id, [{"gate": "g"}])
        # The first few cancels pay for code paths run the first time; they are not what a user sees all day.
        for index in range(WARM_UP + iterations):
            request_id, _ = server.request("session/prompt", gated)
            server.wait_for(_is_gate_probe(request_id))
            t_cancel = server.send(cancel)
            ended = _ended(server, request_id, session_id)
            _check_cancelled(ended, index)
            if index >= WARM_UP:
                samples.append((ended.t_response_ns - t_cancel) / 1e6)
        # Long enough that no turn can finish on its own before the cancel lands (a few seconds of streaming).
        endless = _prompt(session_id, [{"say": "x", "repeat": 1_000_000}])
        for index in range(streaming):
            request_id, _ = server.request("session/prompt", endless)
            server.skip_chunks(STREAMING_CHUNKS_BEFORE_CANCEL)
            t_cancel = server.send(cancel)
            turn = server.play(request_id, session_id)
            _check_cancelled(turn, index)
            streaming_ms.append((turn.t_response_ns - t_cancel) / 1e6)
            chunks_after.append(turn.chunks)
        stats = server.call("_acp_server/stats", {})
    return CancelResult(samples, streaming_ms, chunks_after, stats, protocol)


def main(argv: Sequence[str] | None = None) -> CancelResult:
    parser = argparse.ArgumentParser(prog="python -m bench.cancel", description=__doc__)
    parser.add_argument("--iterations", type=int, default=100, help="timed cancels at a gate (default 100)")
    parser.add_argument("--streaming", type=int, default=20, help="timed cancels mid-stream (default 20; 0 skips)")
    parser.add_argument("--protocol", type=int, choices=PROTOCOLS, default=1, help="ACP version spoken (default 1)")
    options = parser.parse_args(argv)
    result = run(options.iterations, options.streaming, options.protocol)
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
