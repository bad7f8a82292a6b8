"""Backpressure both ways: a client that writes without reading stdout cannot grow the server without bound.

When what is queued for the client is over the bound, the server stops reading stdin (the pipe fills and the client's
writes wait) until the client reads; nothing is dropped. A paused reader still notices the client closing stdin, so
the bounded exit of I17 holds for a client that floods, never reads and hangs up.

These tests drive the server through raw pipes rather than the RawClient: they move hundreds of megabytes, which
the harness's per-line schema validation would take minutes over. Every response is still parsed and counted.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from pathlib import Path

import orjson
import pytest

from tests.support.harness import DEFAULT_ARGS, T_EXIT, isolated_env, scaled, server_command, wait_for_exit_undrained

# Few requests, large ones: the server's cost is per request (~1 ms on a loaded machine), the bound's is per byte.
REQUESTS = 5_000
ID_PADDING = "x" * 32_000  # ids are echoed: each request and its response carry 32 KB, 160 MB each way in all
CHUNK = 50  # requests per write
MEMORY_BOUND = 100 * 1024 * 1024  # generous: the server's own bounds are a few MiB
STALL = 1.0  # no write progress for this long: the server has stopped reading


def request_line(index: int) -> bytes:
    message = {"jsonrpc": "2.0", "id": f"{index}-{ID_PADDING}", "method": "_flood/unknown"}
    return orjson.dumps(message) + b"\n"


def memory(pid: int, field: str) -> int:
    """VmRSS (now) or VmHWM (the peak so far) of a process, in bytes."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    raise AssertionError(f"no {field} for {pid}")


async def start() -> asyncio.subprocess.Process:
    import os

    process = await asyncio.create_subprocess_exec(
        *server_command(*DEFAULT_ARGS),
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.DEVNULL,
        env={**os.environ, **isolated_env()},
        limit=1 << 20,
    )
    assert process.stdin is not None and process.stdout is not None
    process.stdin.write(b'{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":1}}\n')
    await process.stdin.drain()
    assert b'"result"' in await asyncio.wait_for(process.stdout.readline(), 10)
    return process


class Flood:
    """Writes REQUESTS requests in chunks, never reading; tracks when the last write went through."""

    def __init__(self, process: asyncio.subprocess.Process) -> None:
        self.process = process
        self.written = 0
        self.progress_at = time.monotonic()
        self.task = asyncio.create_task(self._write())

    async def _write(self) -> None:
        stdin = self.process.stdin
        assert stdin is not None
        for start in range(1, REQUESTS + 1, CHUNK):
            stdin.write(b"".join(request_line(i) for i in range(start, min(start + CHUNK, REQUESTS + 1))))
            await stdin.drain()
            self.written = min(start + CHUNK, REQUESTS + 1) - 1
            self.progress_at = time.monotonic()

    async def done_or_stalled(self, timeout: float = 60) -> None:
        deadline = time.monotonic() + scaled(timeout)
        while not self.task.done() and time.monotonic() - self.progress_at < STALL:
            assert time.monotonic() < deadline, "the flood neither finished nor stalled"
            await asyncio.sleep(0.05)


@pytest.mark.timeout(120)
async def test_a_client_that_floods_without_reading_keeps_the_server_bounded_and_then_gets_every_answer() -> None:
    process = await start()
    base = memory(process.pid, "VmRSS")
    flood = Flood(process)
    await flood.done_or_stalled()
    assert process.stdout is not None
    assert process.returncode is None
    # Now read: the server resumes, and every request gets exactly one response, in order.
    answered: list[int] = []
    deadline = time.monotonic() + scaled(90)
    while len(answered) < REQUESTS:
        line = await asyncio.wait_for(process.stdout.readline(), max(0.1, deadline - time.monotonic()))
        assert line, f"stdout closed after {len(answered)} responses"
        message = orjson.loads(line)
        assert message["error"]["code"] == -32601, message
        answered.append(int(message["id"].split("-", 1)[0]))
    await flood.task
    peak = memory(process.pid, "VmHWM")
    assert answered == list(range(1, REQUESTS + 1))
    assert peak - base < MEMORY_BOUND, f"the server grew by {(peak - base) >> 20} MiB"
    process.stdin.close()  # type: ignore[union-attr]
    assert await asyncio.wait_for(process.wait(), T_EXIT) == 0


@pytest.mark.timeout(120)
async def test_a_client_that_floods_never_reads_and_closes_stdin_gets_the_bounded_exit() -> None:
    """I17 with a paused reader: the hang-up is seen although stdin is no longer being read."""
    process = await start()
    base = memory(process.pid, "VmRSS")
    flood = Flood(process)
    await flood.done_or_stalled()
    peak = memory(process.pid, "VmHWM")
    flood.task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await flood.task
    assert process.stdin is not None and process.stdout is not None
    started = time.monotonic()
    process.stdin.transport.abort()  # close at once: what asyncio still buffers cannot be written anyway
    took = await wait_for_exit_undrained(process, started, T_EXIT)
    with contextlib.suppress(OSError):
        await process.stdout.read()  # what the server managed to write before it left; closes our end
    assert process.returncode == 0
    assert took <= T_EXIT
    assert peak - base < MEMORY_BOUND, f"the server grew by {(peak - base) >> 20} MiB"


@pytest.mark.timeout(60)
async def test_a_reader_paused_by_turn_output_still_ends_at_eof_with_little_input_left() -> None:
    """I17 again, the other way in: the turn's output fills the queue, one more small request pauses the reader,
    and stdin's EOF is read normally (the pipe itself was never paused); the server must still exit in time."""
    process = await start()
    assert process.stdin is not None and process.stdout is not None
    process.stdin.write(b'{"jsonrpc":"2.0","id":1,"method":"session/new","params":{"cwd":"/tmp","mcpServers":[]}}\n')
    await process.stdin.drain()
    session = orjson.loads(await asyncio.wait_for(process.stdout.readline(), 10))["result"]["sessionId"]
    flood = {
        "sessionId": session,
        "prompt": [{"type": "text", "text": "x"}],
        "_meta": {"scripted": [{"say": "y" * 100_000, "repeat": 10_000}]},  # far more than the queue's bound
    }
    process.stdin.write(orjson.dumps({"jsonrpc": "2.0", "id": 2, "method": "session/prompt", "params": flood}) + b"\n")
    await process.stdin.drain()
    await asyncio.sleep(1.0)  # the turn fills the pipe to us and then the server's queue; nobody reads
    process.stdin.write(b'{"jsonrpc":"2.0","id":3,"method":"_flood/unknown"}\n')
    await process.stdin.drain()
    await asyncio.sleep(0.5)  # read and answered into the full queue: the reader pauses
    started = time.monotonic()
    process.stdin.close()
    took = await wait_for_exit_undrained(process, started, T_EXIT)
    with contextlib.suppress(OSError):
        await process.stdout.read()
    assert process.returncode == 0
    assert took <= T_EXIT
