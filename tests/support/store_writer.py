"""A separate process writing to a session store, for tests/unit/store/test_store.py: kill -9 durability and several
processes sharing one store need a real second process, not a second connection in the test's own.

`python -m tests.support.store_writer MODE DB [ARGS]`, with MODE:
- `stream SESSION`: one running turn appended to continuously (each text record's `meta` holds its sequence number
  and the wall-clock time of the append), the flusher running; prints `ready` once the first is committed; never ends.
- `hold SESSION`: one running turn with three records, committed; prints `ready`; then idles with its lease renewed.
- `open`: open the store and close it again (many at once race to create a new store).
- `sessions PREFIX COUNT UPDATES`: COUNT sessions written concurrently by tasks, UPDATES records each, every turn
  finished `completed`; exits 0 when all is committed.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Sequence

import anyio
import anyio.lowlevel

from acp_server.runtime.model import Message
from acp_server.store import AgentText, SessionStore


def chunk(session_id: str, seq: int) -> AgentText:
    return AgentText("msg_1", f"{session_id}:{seq} ", {"seq": seq, "t": time.time()})


async def stream(store: SessionStore, session_id: str) -> None:
    store.create_session(session_id, "/work")
    turn = store.begin_turn(session_id, [{"type": "text", "text": "go"}], "go")
    turn.append(chunk(session_id, 0))
    assert await store.flush()
    print("ready", flush=True)
    seq = 1
    async with anyio.create_task_group() as tg:
        tg.start_soon(store.run_flusher)
        while True:
            for _ in range(100):
                turn.append(chunk(session_id, seq))
                seq += 1
            await anyio.sleep(0.001)


async def hold(store: SessionStore, session_id: str) -> None:
    store.create_session(session_id, "/work")
    turn = store.begin_turn(session_id, [{"type": "text", "text": "hold"}], "hold")
    for seq in range(3):
        turn.append(chunk(session_id, seq))
    assert await store.flush()
    print("ready", flush=True)
    async with anyio.create_task_group() as tg:
        tg.start_soon(store.run_flusher)
        await anyio.sleep_forever()


async def sessions(store: SessionStore, prefix: str, count: int, updates: int) -> None:
    async def write(session_id: str) -> None:
        store.create_session(session_id, f"/work/{prefix}")
        turn = store.begin_turn(session_id, [{"type": "text", "text": session_id}], session_id)
        for seq in range(updates):
            turn.append(chunk(session_id, seq))
            if seq % 50 == 0:
                await anyio.lowlevel.checkpoint()
        store.finish_turn(
            turn,
            "completed",
            stop_reason="end_turn",
            messages=[Message("user", session_id), Message("assistant", "ok")],
        )
        assert await store.flush()

    async with anyio.create_task_group() as flusher:
        flusher.start_soon(store.run_flusher)
        async with anyio.create_task_group() as tg:
            for index in range(count):
                tg.start_soon(write, f"{prefix}-{index}")
        flusher.cancel_scope.cancel()


async def main(argv: Sequence[str]) -> None:
    mode, db, *args = argv
    store = SessionStore.open(db)
    try:
        if mode == "open":
            pass
        elif mode == "stream":
            await stream(store, args[0])
        elif mode == "hold":
            await hold(store, args[0])
        elif mode == "sessions":
            await sessions(store, args[0], int(args[1]), int(args[2]))
        else:
            raise SystemExit(f"unknown mode {mode}")
    finally:
        await store.aclose()


if __name__ == "__main__":
    anyio.run(main, sys.argv[1:], backend="asyncio")
