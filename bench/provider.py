"""A real provider's cost: streaming and Stop through the `openai` provider, against a loopback fake endpoint.

`bench.chunks` and `bench.cancel` measure the server with the scripted model, which costs nothing. This benchmark
puts the OpenAI SDK path in between: `acp-server --model openai:fake-model --base-url URL` talks HTTP + SSE to
`tests/support/fake_openai.py`, running in this process's threads, and the light stdio reader of `bench.wire` reads the
other side. Two figures:

- Throughput: a turn whose reply is 10,000 text chunks (one SSE event each), timed from the prompt's write to the
  response's read; chunks/s is the median over the turns, and the server's CPU per chunk (utime + stime from /proc
  over all timed turns) shows what the HTTP transport, the SSE reading and the provider add to the scripted path
  (where those µs go: bench/README.md, "The provider figure").
- Stop: a turn whose stream hangs after two chunks (the model "thinking"); once both chunks have reached the
  client, `session/cancel` is written and the clock stops when the `cancelled` response is read. The fake endpoint
  also notes when it saw the HTTP connection close, so the figure shows the upstream request really ends too.

Run alone: `python -m bench.provider [--chunks N] [--turns T] [--cancels C]`.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from bench.chunks import Variant
from bench.report import Figure, format_table
from bench.wire import CLOCK_TICKS, Server, WireError, percentile
from tests.support.fake_openai import FakeOpenAI, text_reply

__all__ = ["ProviderResult", "main", "run"]

WARM_UP_CANCELS = 3
CANCEL_CHUNKS = ("one", "two")


@dataclass(frozen=True, slots=True)
class ProviderResult:
    stream: Variant
    cancel_ms: list[float]  # session/cancel written -> `cancelled` read
    disconnect_ms: list[float]  # session/cancel written -> the endpoint saw the connection close

    def figures(self) -> list[Figure]:
        stream = self.stream
        figures = [
            Figure(f"provider: openai x{stream.chunks} chunks, median", stream.median_rate, "chunks/s"),
            Figure("provider: server CPU per chunk", stream.cpu_us_per_chunk(stream.server_cpu_s), "µs"),
        ]
        if self.cancel_ms:
            figures += [
                Figure("provider: cancel -> cancelled, median", statistics.median(self.cancel_ms), "ms"),
                Figure("provider: cancel -> cancelled, p99", percentile(self.cancel_ms, 99), "ms"),
                Figure("provider: cancel -> endpoint disconnect, median", statistics.median(self.disconnect_ms), "ms"),
            ]
        return figures


@contextlib.contextmanager
def _environment(**values: str) -> Iterator[None]:
    """Set variables for the server about to be spawned (it inherits this process's environment)."""
    saved = {name: os.environ.get(name) for name in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def _prompt(session_id: str) -> dict[str, object]:
    return {"sessionId": session_id, "prompt": [{"type": "text", "text": "bench"}]}


def _stream_turns(server: Server, session_id: str, chunks: int, turns: int) -> Variant:
    seconds: list[float] = []
    cpu_before = server.cpu_ticks()
    client_before = time.process_time()
    for _ in range(turns):
        request_id, message = server.request_message("session/prompt", _prompt(session_id))
        t_written = server.send(message)
        turn = server.stream_turn(request_id)
        seconds.append((turn.t_response_ns - t_written) / 1e9)
        if turn.response.get("result", {}).get("stopReason") != "end_turn":
            raise WireError(f"turn ended with {turn.response}")
        if turn.chunks != chunks:
            raise WireError(f"received {turn.chunks} chunks, expected {chunks}")
    client_cpu = time.process_time() - client_before
    server_cpu = (server.cpu_ticks() - cpu_before) / CLOCK_TICKS
    return Variant("openai", chunks, seconds, server_cpu, client_cpu)


def _cancels(server: Server, fake: FakeOpenAI, session_id: str, count: int) -> tuple[list[float], list[float]]:
    cancel_ms: list[float] = []
    disconnect_ms: list[float] = []
    cancel = {"method": "session/cancel", "params": {"sessionId": session_id}}
    # The first cancels pay for code paths run the first time; they are not what a user sees all day.
    for index in range(WARM_UP_CANCELS + count):
        fake.reset_disconnected()
        seen = len(fake.disconnects)
        request_id, _ = server.request("session/prompt", _prompt(session_id))
        server.skip_chunks(len(CANCEL_CHUNKS))
        t_cancel = server.send(cancel)
        t_cancel_monotonic = time.monotonic()
        response, t_read = server.response(request_id)
        if response.get("result") != {"stopReason": "cancelled"}:
            raise WireError(f"cancel {index}: expected cancelled, got {response}")
        if not fake.wait_disconnect(5.0):
            raise WireError(f"cancel {index}: the endpoint never saw the connection close")
        if index >= WARM_UP_CANCELS:
            cancel_ms.append((t_read - t_cancel) / 1e6)
            disconnect_ms.append((fake.disconnects[seen] - t_cancel_monotonic) * 1000)
    return cancel_ms, disconnect_ms


def run(chunks: int = 10_000, turns: int = 5, cancels: int = 50) -> ProviderResult:
    with FakeOpenAI() as fake:
        with _environment(OPENAI_API_KEY="test"):
            server = Server.spawn("--model", "openai:fake-model", "--base-url", fake.base_url)
        with server:
            server.initialize()
            session_id = server.new_session()
            # One untimed turn first: the first prompt pays for importing the SDK and building its client.
            fake.script(text_reply("warm", "up"))
            warm = server.stream_turn(server.request("session/prompt", _prompt(session_id))[0])
            if warm.chunks != 2 or warm.response.get("result", {}).get("stopReason") != "end_turn":
                raise WireError(f"warm-up turn: {warm.response}; stderr: {server.stderr_tail()}")
            fake.set_default(text_reply(*["x"] * chunks))
            stream = _stream_turns(server, session_id, chunks, turns)
            fake.set_default(text_reply(*CANCEL_CHUNKS, ending="hang"))
            cancel_ms, disconnect_ms = _cancels(server, fake, session_id, cancels)
    return ProviderResult(stream, cancel_ms, disconnect_ms)


def main(argv: Sequence[str] | None = None) -> ProviderResult:
    parser = argparse.ArgumentParser(prog="python -m bench.provider", description=__doc__)
    parser.add_argument("--chunks", type=int, default=10_000, help="chunks per streamed turn (default 10000)")
    parser.add_argument("--turns", type=int, default=5, help="timed streamed turns (default 5)")
    parser.add_argument("--cancels", type=int, default=50, help="timed cancels mid-stream (default 50; 0 skips)")
    options = parser.parse_args(argv)
    result = run(options.chunks, options.turns, options.cancels)
    print(result.stream.describe())
    if result.cancel_ms:
        slowest = ", ".join(f"{s:.2f}" for s in sorted(result.cancel_ms)[-5:])
        print(f"provider: {len(result.cancel_ms)} cancels with the model stream open; slowest five (ms): {slowest}")
    print(format_table(result.figures()))
    return result


if __name__ == "__main__":
    main()
