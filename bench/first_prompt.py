"""The first prompt against the tenth: time to first chunk on the OpenAI-compatible path, in a fresh process.

A fresh server has not imported the `openai` SDK (about half a second on a quiet machine, seconds under load) nor
built its client, its tool specs or its prompt model. The server warms the session's provider in the background once
a session exists, so a person's first prompt, typed a second later, should not wait for any of it. Each sample
spawns `acp-server --model openai:fake-model --base-url URL` against `tests/support/fake_openai.py` (a real HTTP
server in this process's threads), initializes, opens a session, waits `--pause` seconds (default 1: a person
typing), then times prompt -> first `agent_message_chunk` read for the first prompt and for `--warm` more prompts in
the same session (the warm figure is their median). Figures are medians over the spawns; the gap is the median of
each spawn's first-minus-warm difference.

Run alone: `python -m bench.first_prompt [--spawns N] [--pause S] [--warm W]`.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from bench.report import Figure, format_table
from bench.wire import Server, WireError, percentile
from tests.support.fake_openai import FakeOpenAI, text_reply

__all__ = ["FirstPromptResult", "main", "run"]

TARGET_GAP_MS = 20.0  # the first prompt's first chunk at most this much later than a warm prompt's


@dataclass(frozen=True, slots=True)
class FirstPromptResult:
    first_ms: list[float]  # per spawn: the first prompt's time to first chunk
    warm_ms: list[float]  # per spawn: the median of its warm prompts' times to first chunk
    pause_s: float
    new_session_ms: list[float]  # per spawn: session/new written right after initialize -> its answer read

    @property
    def gaps_ms(self) -> list[float]:
        return [first - warm for first, warm in zip(self.first_ms, self.warm_ms, strict=True)]

    def figures(self) -> list[Figure]:
        return [
            Figure(
                f"first prompt ({self.pause_s:g} s after session/new): time to first chunk, median",
                statistics.median(self.first_ms),
                "ms",
            ),
            Figure("first prompt: time to first chunk, p90", percentile(self.first_ms, 90), "ms"),
            Figure("warm prompt: time to first chunk, median", statistics.median(self.warm_ms), "ms"),
            Figure("first minus warm prompt, median", statistics.median(self.gaps_ms), "ms", "<=", TARGET_GAP_MS),
            # The warm-up runs while this request is served: what it costs the request, if anything.
            Figure("session/new right after initialize, median", statistics.median(self.new_session_ms), "ms"),
        ]


@contextlib.contextmanager
def _environment(**values: str) -> Iterator[None]:
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


def _is_message_chunk(message: dict[str, Any]) -> bool:
    update = message.get("params", {}).get("update", {}) if message.get("method") == "session/update" else {}
    return bool(update.get("sessionUpdate") == "agent_message_chunk")


def _time_to_first_chunk(server: Server, session_id: str) -> float:
    """Milliseconds from the prompt's write to the read of its first agent_message_chunk; the turn is then read to
    its end."""
    prompt = {"sessionId": session_id, "prompt": [{"type": "text", "text": "bench"}]}
    request_id, message = server.request_message("session/prompt", prompt)
    t_written = server.send(message)
    _, t_first = server.wait_for(_is_message_chunk, timeout=60)
    turn = server.stream_turn(request_id)
    if turn.response.get("result", {}).get("stopReason") != "end_turn":
        raise WireError(f"turn ended with {turn.response}; stderr: {server.stderr_tail()}")
    return (t_first - t_written) / 1e6


def run(spawns: int = 5, pause_s: float = 1.0, warm: int = 9) -> FirstPromptResult:
    first_ms: list[float] = []
    warm_ms: list[float] = []
    new_session_ms: list[float] = []
    with FakeOpenAI() as fake:
        fake.set_default(text_reply("hello", "there"))
        for _ in range(spawns):
            with _environment(OPENAI_API_KEY="test"):
                server = Server.spawn("--model", "openai:fake-model", "--base-url", fake.base_url)
            with server:
                server.initialize()
                started = time.perf_counter()
                session_id = server.new_session()
                new_session_ms.append((time.perf_counter() - started) * 1000)
                time.sleep(pause_s)
                first_ms.append(_time_to_first_chunk(server, session_id))
                warm_ms.append(statistics.median(_time_to_first_chunk(server, session_id) for _ in range(warm)))
    return FirstPromptResult(first_ms, warm_ms, pause_s, new_session_ms)


def main(argv: Sequence[str] | None = None) -> FirstPromptResult:
    parser = argparse.ArgumentParser(prog="python -m bench.first_prompt", description=__doc__)
    parser.add_argument("--spawns", type=int, default=5, help="fresh processes (default 5)")
    parser.add_argument("--pause", type=float, default=1.0, help="seconds between session/new and the first prompt")
    parser.add_argument("--warm", type=int, default=9, help="warm prompts per process (default 9)")
    options = parser.parse_args(argv)
    result = run(options.spawns, options.pause, options.warm)
    print(f"first prompt (ms): {', '.join(f'{s:.1f}' for s in result.first_ms)}")
    print(f"warm prompt, median per spawn (ms): {', '.join(f'{s:.1f}' for s in result.warm_ms)}")
    print(format_table(result.figures()))
    return result


if __name__ == "__main__":
    main()
