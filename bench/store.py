"""Session store cost: what persisting each streamed update costs, and how long a `session/load` read takes.

The server streams up to ~1M chunks/s and stores every one, so the per-update cost decides whether persistence is
affordable. Three views of it, on a real SQLite file in a temporary directory:
- append: recording a streamed text chunk in the turn log alone, as the event loop pays it (`TurnLog.append_text`,
  what either version's sink calls per chunk: its row encoded into a buffer, no record built), in bursts of 50,000;
- flush: the flush of each burst divided by its size (the worker thread's share: orjson encode + SQLite);
- streaming: a loop building and appending updates while `run_flusher` commits every 50 ms, as in the server,
  minus the same loop without the store: the process CPU (all threads) and wall time persistence adds per chunk.
Then a session of 1,000 model messages (100 turns of ~260 updates each, committed in 100 ms-sized batches) is read
back: `load` alone, `load` + v1's `replay_updates` (what session/load does before it answers), and the same coalesced;
plus `SessionStore.open` of that file (the integrity check reads it all) and `session/new` (create + flush).
Figures are printed, not asserted. Run alone: `python -m bench.store [--updates N] [--loads N]`.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import anyio.lowlevel

from acp_server.protocol.v1.replay import replay_updates
from acp_server.runtime.model import Message, TextOutput, ToolCall
from acp_server.store import STORE_FILENAME, SessionStore, ToolCallChanged, ToolCallOpened
from bench.report import Figure, format_table

__all__ = ["StoreResult", "main", "run"]

TURNS = 100
REPLIES_PER_TURN = 5  # 4 with a tool call, then the final answer: 10 messages per turn
CHUNKS_PER_REPLY = 50


def _chunk(text: str, message_id: str) -> dict[str, Any]:
    return {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": text}, "messageId": message_id}


@dataclass(frozen=True, slots=True)
class StoreResult:
    updates: int
    append_us: float
    flush_us: float
    streaming_cpu_us: float
    streaming_wall_us: float
    history_messages: int
    history_updates: int
    file_mb: float
    load_ms: list[float]
    replay_ms: list[float]
    coalesced_ms: list[float]
    coalesced_updates: int
    open_ms: list[float]
    new_session_ms: list[float]

    def figures(self) -> list[Figure]:
        m = statistics.median
        n = self.history_messages
        return [
            Figure("store: append per update (event loop)", self.append_us, "µs"),
            Figure("store: flush per update (worker thread, amortised)", self.flush_us, "µs"),
            Figure("store: streaming, CPU added per update (all threads)", self.streaming_cpu_us, "µs"),
            Figure("store: streaming, wall time added per update", self.streaming_wall_us, "µs"),
            Figure(f"store: load, {n} messages / {self.history_updates} updates, median", m(self.load_ms), "ms"),
            Figure("store: load + replay_updates, median", m(self.replay_ms), "ms"),
            Figure(f"store: load + coalesced replay ({self.coalesced_updates} updates)", m(self.coalesced_ms), "ms"),
            Figure(f"store: open with integrity check ({self.file_mb:.1f} MB)", m(self.open_ms), "ms"),
            Figure("store: session/new (create + flush), median", m(self.new_session_ms), "ms"),
        ]


async def _append_and_flush(store: SessionStore, updates: int) -> tuple[float, float]:
    """Appends and flushes timed apart, in bursts of what a 50 ms interval holds at 1M chunks/s."""
    store.create_session("append", "/bench")
    turn = store.begin_turn("append", [{"type": "text", "text": "go"}], "go")
    assert await store.flush()
    burst = 50_000
    bursts = max(1, updates // burst)
    message_id = "msg_0123456789abcdef0123456789abcdef"
    appending = flushing = 0.0
    for _ in range(bursts):
        started = time.perf_counter()
        for _ in range(burst):
            turn.append_text(message_id, "x")
        appended = time.perf_counter()
        assert await store.flush()
        appending += appended - started
        flushing += time.perf_counter() - appended
    store.finish_turn(turn, "completed")
    return appending / (bursts * burst) * 1e6, flushing / (bursts * burst) * 1e6


async def _streaming(store: SessionStore, updates: int, persist: bool) -> tuple[float, float]:
    """A turn appending continuously, the flusher committing every 50 ms; with `persist` off, the same loop without
    the store, so the difference is what persistence costs."""
    store.create_session(f"stream-{persist}", "/bench")
    turn = store.begin_turn(f"stream-{persist}", [{"type": "text", "text": "go"}], "go")
    sink: list[dict[str, Any]] = []
    message_id = "msg_0123456789abcdef0123456789abcdef"
    cpu, wall = time.process_time(), time.perf_counter()
    async with anyio.create_task_group() as tg:
        tg.start_soon(store.run_flusher)
        for index in range(updates):
            sink.append(_chunk("x", message_id))  # the update sent, then (persisting) its row, as the sink does
            if persist:
                turn.append_text(message_id, "x")
            if index % 1000 == 0:
                sink.clear()
                await anyio.lowlevel.checkpoint()  # the server yields between writes to stdout
        store.finish_turn(turn, "completed")
        assert await store.flush()
        tg.cancel_scope.cancel()
    return (time.process_time() - cpu) / updates * 1e6, (time.perf_counter() - wall) / updates * 1e6


async def _long_session(store: SessionStore) -> tuple[int, int]:
    """A session of TURNS turns, 10 messages each, streamed and committed the way the server does."""
    store.create_session("long", "/bench/project", title="A long session")
    messages = updates = 0
    for t in range(TURNS):
        prompt = f"turn {t}: please look at the parser and fix the failing test"
        turn = store.begin_turn("long", [{"type": "text", "text": prompt}], prompt)
        added = [Message("user", prompt)]
        for r in range(REPLIES_PER_TURN):
            message_id = f"msg_{t:04}_{r:02}"
            for c in range(CHUNKS_PER_REPLY):
                turn.append_text(message_id, f"word{c} ")
            text = "".join(f"word{c} " for c in range(CHUNKS_PER_REPLY))
            if r < REPLIES_PER_TURN - 1:
                call = ToolCall(f"call_{t}_{r}", "read_file", {"path": f"src/module_{r}.py"})
                turn.append(ToolCallOpened(call.id, "Read file", "read"))
                output = f"contents of module {r}\n" * 20
                turn.append(ToolCallChanged(call.id, "completed", (TextOutput(output),)))
                added += [Message("assistant", text, (call,)), Message("tool", output, tool_call_id=call.id)]
            else:
                added.append(Message("assistant", text))
            assert await store.flush()  # roughly one 100 ms batch per reply
        store.finish_turn(turn, "completed", stop_reason="end_turn", messages=added)
        assert await store.flush()  # before the prompt's response
        messages += len(added)
        updates += 1 + REPLIES_PER_TURN * CHUNKS_PER_REPLY + 2 * (REPLIES_PER_TURN - 1)
    return messages, updates


async def _timed(samples: int, action: Any) -> list[float]:
    out: list[float] = []
    for _ in range(samples):
        started = time.perf_counter()
        await action()
        out.append((time.perf_counter() - started) * 1000)
    return out


async def _run(directory: Path, updates: int, loads: int) -> StoreResult:
    db = directory / STORE_FILENAME
    store = SessionStore.open(db)
    try:
        append_us, flush_us = await _append_and_flush(store, updates)
        base_cpu_us, base_wall_us = await _streaming(store, updates, persist=False)
        streaming_cpu_us, streaming_wall_us = await _streaming(store, updates, persist=True)
        streaming_cpu_us -= base_cpu_us
        streaming_wall_us -= base_wall_us
        history_messages, history_updates = await _long_session(store)

        async def load() -> None:
            assert await store.load("long") is not None

        async def load_and_replay(coalesce: bool = False) -> int:
            loaded = await store.load("long")
            assert loaded is not None and len(loaded.history) == history_messages
            return len(replay_updates(loaded, coalesce=coalesce))

        async def load_and_coalesce() -> None:
            await load_and_replay(coalesce=True)

        async def new_session() -> None:
            store.create_session(f"new-{time.perf_counter_ns()}", "/bench")
            assert await store.flush()

        load_ms = await _timed(loads, load)
        replay_ms = await _timed(loads, load_and_replay)
        coalesced_ms = await _timed(loads, load_and_coalesce)
        coalesced_updates = await load_and_replay(coalesce=True)
        new_session_ms = await _timed(loads, new_session)
    finally:
        await store.aclose()
    file_mb = db.stat().st_size / 1e6

    async def reopen() -> None:
        await anyio.to_thread.run_sync(lambda: SessionStore.open(db).close())

    open_ms = await _timed(max(3, loads // 4), reopen)
    return StoreResult(
        updates=updates,
        append_us=append_us,
        flush_us=flush_us,
        streaming_cpu_us=streaming_cpu_us,
        streaming_wall_us=streaming_wall_us,
        history_messages=history_messages,
        history_updates=history_updates,
        file_mb=file_mb,
        load_ms=load_ms,
        replay_ms=replay_ms,
        coalesced_ms=coalesced_ms,
        coalesced_updates=coalesced_updates,
        open_ms=open_ms,
        new_session_ms=new_session_ms,
    )


def run(updates: int = 1_000_000, loads: int = 20) -> StoreResult:
    with tempfile.TemporaryDirectory(prefix="acp-store-bench-") as directory:
        return anyio.run(_run, Path(directory), updates, loads, backend="asyncio")


def main(argv: Sequence[str] | None = None) -> StoreResult:
    parser = argparse.ArgumentParser(prog="python -m bench.store", description=__doc__)
    parser.add_argument("--updates", type=int, default=1_000_000, help="updates appended per cost run (1000000)")
    parser.add_argument("--loads", type=int, default=20, help="timed loads of the 1,000-message session (20)")
    options = parser.parse_args(argv)
    result = run(options.updates, options.loads)
    print(format_table(result.figures()))
    return result


if __name__ == "__main__":
    main()
