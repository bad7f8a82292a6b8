"""How a WebSocket connection hands the frames it received to its handler (acp_server/remote/websocket.py): the
frames already received when the handler asks for more are handed over together, with nothing run between them, as
stdio hands over the lines one read brought; and input stays pulled, bounded in bytes.

"Together" is what lets a prompt supersede another sent with it (docs/interrupts.md I14, docs/remote.md): if a task
the first frame started can run before the second is admitted, an interrupted work can end and the first prompt be
inserted in between. The end-to-end test of that is test_v2_invariants.py's back-to-back prompts over WebSocket, where
the window is a few loop iterations wide; here it is shown at the seam, against hypercorn's own kind of receive queue
(an `asyncio.Queue`, whose `get` returns at once when it holds a message).
"""

from __future__ import annotations

import asyncio
from typing import Any

import anyio
import anyio.lowlevel

from acp_server.jsonrpc.transport import INPUT_HIGH_BYTES, LineSink, LineSource
from acp_server.remote.peer import Peer
from acp_server.remote.tokens import Principal
from acp_server.remote.websocket import WebSocketConnection

INITIALIZE = '{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":1}}'


def connection(received: asyncio.Queue[dict[str, Any]]) -> WebSocketConnection:
    async def send(message: dict[str, Any]) -> None:
        del message  # what the server writes is not looked at here

    return WebSocketConnection(
        Peer("c1", Principal("editor"), None),
        received.get,
        send,
        initialize_timeout=5,
        max_message_bytes=32 << 20,
        max_queued_bytes=1 << 20,
        flush_timeout=0.5,
    )


def frame(text: str) -> dict[str, Any]:
    return {"type": "websocket.receive", "text": text}


async def test_frames_received_together_reach_the_handler_with_nothing_run_between_them() -> None:
    """Three frames queued at once: a task the first one starts runs only after the handler has taken all three."""
    received: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
    for text in (INITIALIZE, "a", "b", "c"):
        received.put_nowait(frame(text))
    events: list[str] = []

    async def handler(peer: Peer, lines: LineSource, sink: LineSink) -> None:
        del peer, sink

        async def started_by_a() -> None:
            events.append("the task `a` started ran")

        async with anyio.create_task_group() as group:
            async for line in lines:
                assert isinstance(line, bytes)
                events.append(line.decode())
                if line == b"a":
                    group.start_soon(started_by_a)
                if line == b"c":
                    received.put_nowait({"type": "websocket.disconnect", "code": 1000})

    with anyio.fail_after(5):
        await connection(received).run(handler)
    assert events == [INITIALIZE, "a", "b", "c", "the task `a` started ran"]


async def test_frames_are_taken_from_the_server_only_while_few_wait_for_the_handler() -> None:
    """Input stays pulled: while the handler takes nothing, at most INPUT_HIGH_BYTES and one frame more are taken
    from the server's queue; once the handler reads, every frame reaches it, in order."""
    size = 256 << 10
    count = 3 * INPUT_HIGH_BYTES // size
    received: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
    received.put_nowait(frame(INITIALIZE))
    for index in range(count):
        received.put_nowait(frame(f"{index:04d}".ljust(size, ".")))
    held_back: list[int] = []
    seen: list[str] = []

    async def handler(peer: Peer, lines: LineSource, sink: LineSink) -> None:
        del peer, sink
        async for line in lines:
            assert isinstance(line, bytes)
            if line.startswith(b"{"):  # the `initialize`: wait while the reader fills what it may hold
                for _ in range(20):
                    await anyio.lowlevel.checkpoint()
                held_back.append(received.qsize())
                continue
            seen.append(line[:4].decode())
            if len(seen) == count:
                received.put_nowait({"type": "websocket.disconnect", "code": 1000})

    with anyio.fail_after(5):
        await connection(received).run(handler)
    taken = count - held_back[0]
    assert 0 < taken <= INPUT_HIGH_BYTES // size + 1
    assert seen == [f"{index:04d}" for index in range(count)]
