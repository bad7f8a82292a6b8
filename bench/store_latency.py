"""A turn's flush commit latency, SQLite beside PostgreSQL: what a prompt's answer waits for after its turn ends.

Every turn ends with `SessionStore.flush` (its records and its end committed) before its response (v1) or its `idle`
(v2), and a v2 `session/prompt` answer waits for the commit of the user's message. This measures that wait, from the
event loop, on both stores: a session, then `--turns` turns, each opened, streamed (`--chunks` text chunks, a
tool call opened and completed), ended, and flushed; the flush of each turn is timed. SQLite: a file in a temporary
directory (WAL, synchronous NORMAL, as the server opens it). PostgreSQL: `--store-url`, or else a server started here
(tests/support/postgres.py) on 127.0.0.1 with fsync on, as in production. Figures are printed, not asserted.
Run: `python -m bench.store_latency [--turns N] [--chunks N] [--store-url URL]`.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import anyio

from acp_server.runtime.model import Message
from acp_server.store import STORE_FILENAME, SessionStore, ToolCallChanged, ToolCallOpened

__all__ = ["main", "measure"]


def _percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(fraction * (len(ordered) - 1)))]


async def measure(store: SessionStore, turns: int, chunks: int) -> list[float]:
    """Each turn's flush, in milliseconds."""
    store.create_session("bench", "/tmp")
    assert await store.flush()
    took: list[float] = []
    for number in range(turns):
        turn = store.begin_turn("bench", [{"type": "text", "text": f"turn {number}"}], f"turn {number}")
        for index in range(chunks):
            turn.append_text("msg_bench", f"chunk {index} of turn {number} ")
        turn.append(ToolCallOpened(f"call_{number}", "Read a.py", "read", "pending"))
        turn.append(ToolCallChanged(f"call_{number}", "completed", ()))
        messages = [Message("user", f"turn {number}"), Message("assistant", "done")]
        store.finish_turn(turn, "completed", stop_reason="end_turn", messages=messages)
        started = time.perf_counter()
        assert await store.flush()
        took.append((time.perf_counter() - started) * 1000)
    return took


def _line(name: str, took: list[float]) -> str:
    return (
        f"{name:<11} p50 {statistics.median(took):6.2f} ms   p99 {_percentile(took, 0.99):6.2f} ms"
        f"   max {max(took):6.2f} ms   ({len(took)} turns)"
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.store_latency", description=__doc__.split("\n")[0])
    parser.add_argument("--turns", type=int, default=500)
    parser.add_argument("--chunks", type=int, default=50, help="text chunks streamed per turn (default 50)")
    parser.add_argument("--store-url", help="a PostgreSQL database to use (default: a server started here)")
    options = parser.parse_args(argv)

    async def sqlite() -> list[float]:
        with tempfile.TemporaryDirectory(prefix="acp-bench-store-") as directory:
            store = SessionStore.open(Path(directory) / STORE_FILENAME)
            try:
                return await measure(store, options.turns, options.chunks)
            finally:
                await store.aclose()

    async def postgres(url: str) -> list[float]:
        store = await SessionStore.connect(url)
        try:
            return await measure(store, options.turns, options.chunks)
        finally:
            await store.aclose()

    print(_line("sqlite", anyio.run(sqlite)))
    if options.store_url:
        print(_line("postgresql", anyio.run(postgres, options.store_url)))
        return
    from tests.support.postgres import postgres_missing, start_postgres

    missing = postgres_missing()
    if missing is not None:
        print(f"postgresql  skipped: {missing}")
        return
    server = start_postgres(fsync=True)
    try:
        print(_line("postgresql", anyio.run(postgres, server.database())))
    finally:
        server.stop()


if __name__ == "__main__":
    main()
