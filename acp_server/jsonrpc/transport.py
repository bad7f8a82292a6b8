"""Framing only: newline-delimited lines in from stdin, batched writes out to stdout.

stdin and stdout are driven as non-blocking pipes by asyncio's pipe transports (a thread hop per line would cost
more than the server's whole per-chunk budget). At start-up the protocol stream moves to a private duplicate of
stdout and file descriptor 1 is pointed at stderr, so a stray `print` or a C library writing to stdout can never
corrupt the protocol: stdout carries only what `StdioSink.write` writes.

The input also ends, exactly as at stdin EOF, when the client closes our stdout (it is gone: nobody reads what we
would answer) and when the process is asked to stop with one of `stop_signals` (an editor closing its window sends
SIGTERM): everything after that is the one EOF shutdown path, so a signal cancels turns, kills children and
flushes like a closed stdin, and the exit status is 0.

Lines may be up to `max_line_bytes` long; a longer one is skipped without being held in memory and reported as
`Oversized`, so the server can answer it with an error and keep going. Regular files (a redirected transcript) are
read and written through a worker thread, since asyncio's pipe transports refuse them.

Input is bounded: lines read and not yet taken by the connection are held up to `INPUT_HIGH_BYTES`, beyond which the
pipe is not read (the connection stops taking lines while its output queue is over its own bound). A pipe that is
not read cannot show its EOF, so while paused stdin is polled for a hang-up instead, which the kernel reports without
consuming anything; after a hang-up the rest of the input is finite and is read to EOF whatever the bounds say.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import select
import signal
import stat
import sys
from collections import deque
from collections.abc import AsyncIterator, Callable, Coroutine, Sequence
from dataclasses import dataclass
from typing import Any, BinaryIO, Protocol

import anyio
import anyio.lowlevel

__all__ = ["LineSink", "LineSource", "Oversized", "open_stdio", "start_detached"]

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Oversized:
    """A line longer than the limit; its bytes were dropped as they arrived."""

    size: int


LineSource = AsyncIterator["bytes | Oversized"]

# Lines read from stdin and not yet taken: above this many bytes the pipe is not read until they fall below a quarter.
INPUT_HIGH_BYTES = 1 << 20
INPUT_LOW_BYTES = INPUT_HIGH_BYTES // 4
# Lines handed to the connection per event-loop iteration at most (each is classified and admitted synchronously).
LINES_PER_BATCH = 64
# While reading is paused, how often stdin is checked for a hang-up (the client closed its end).
HANGUP_POLL_S = 0.05
# What poll() says when the writing end is gone: POLLHUP for a pipe or a tty, POLLRDHUP for a socket whose peer shut
# down its writing side (Linux). POLLHUP, POLLERR and POLLNVAL are reported even when not asked for.
_POLLRDHUP = getattr(select, "POLLRDHUP", 0)
_HANGUP = select.POLLHUP | select.POLLERR | select.POLLNVAL | _POLLRDHUP


class LineSink(Protocol):
    async def write(self, data: bytes) -> None:
        """Write whole lines; raises BrokenPipeError once the reader is gone."""
        ...


class _InputLines:
    """Lines read from the stdin pipe and not yet taken, bounded in bytes: the pipe's reading pauses while full.

    While paused, stdin is polled every HANGUP_POLL_S for a hang-up. Once the client has closed its end nothing more
    can be written, so what is left is bounded by the pipe's capacity: reading resumes for good (to EOF) and
    `on_hangup` tells the connection to take lines again whatever it has queued. EOF tells it the same.
    """

    def __init__(self, fd: int, on_hangup: Callable[[], None]) -> None:
        self._fd = fd
        self._on_hangup = on_hangup
        self._poller: select.poll | None = None
        self._lines: deque[bytes | Oversized] = deque()
        self._bytes = 0
        self._ready = anyio.Event()
        self._closed = False
        self._transport: asyncio.ReadTransport | None = None
        self._paused = False
        self._hung_up = False
        self._poll: asyncio.TimerHandle | None = None

    def attach(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.ReadTransport)
        self._transport = transport

    def put(self, line: bytes | Oversized) -> None:
        self._lines.append(line)
        self._bytes += len(line) if isinstance(line, bytes) else 0
        self._ready.set()

    def chunk_done(self) -> None:
        """After each read: pause the pipe if the lines not taken are over the bound."""
        if self._bytes <= INPUT_HIGH_BYTES or self._paused or self._hung_up or self._closed:
            return
        if self._transport is not None and not self._transport.is_closing():
            self._transport.pause_reading()
            self._paused = True
            self._poll = asyncio.get_running_loop().call_later(HANGUP_POLL_S, self._check_hangup)

    def close(self) -> None:
        """EOF (or the pipe is gone): the input is complete. The connection may have stopped taking lines with fewer
        than the bound buffered, so the pipe was never paused: it is told too, or it would wait for a reader."""
        if self._closed:
            return
        self._closed = True
        self._ready.set()
        if self._poll is not None:
            self._poll.cancel()
            self._poll = None
        if not self._hung_up:
            self._hung_up = True
            self._on_hangup()

    def _resume(self) -> None:
        if self._poll is not None:
            self._poll.cancel()
            self._poll = None
        if self._paused:
            self._paused = False
            if self._transport is not None and not self._transport.is_closing():
                self._transport.resume_reading()

    def _check_hangup(self) -> None:
        self._poll = None
        if not self._paused or self._closed:
            return
        if self._poller is None:
            self._poller = select.poll()
            self._poller.register(self._fd, _POLLRDHUP)  # only the hang-up conditions, never "readable"
        try:
            hung_up = any(events & _HANGUP for _, events in self._poller.poll(0))
        except OSError:
            hung_up = True
        if not hung_up:
            self._poll = asyncio.get_running_loop().call_later(HANGUP_POLL_S, self._check_hangup)
            return
        self._hung_up = True
        self._resume()
        self._on_hangup()

    async def lines(self) -> AsyncIterator[bytes | Oversized]:
        while True:
            # Between batches the tasks the lines started get to run. Not after every line: one loop iteration per
            # line gave the input one turn among every busy session's, so with a thousand sessions streaming a
            # cancel waited a second behind the prompts written before it. A batch is bounded, so a flood of lines
            # cannot hold the loop either.
            await anyio.lowlevel.checkpoint()
            if self._lines:
                for _ in range(min(len(self._lines), LINES_PER_BATCH)):
                    line = self._lines.popleft()
                    self._bytes -= len(line) if isinstance(line, bytes) else 0
                    if self._paused and self._bytes <= INPUT_LOW_BYTES:
                        self._resume()
                    yield line
            elif self._closed:
                return
            else:
                self._ready = anyio.Event()
                await self._ready.wait()


class _LineSplitter(asyncio.Protocol):
    """Cuts the incoming byte stream at newlines without rescanning what it has already searched."""

    def __init__(self, lines: _InputLines, max_line_bytes: int) -> None:
        self._lines = lines
        self._max = max_line_bytes
        self._partial = bytearray()
        self._skipped = -1  # bytes of an oversized line skipped so far, or -1 when not skipping

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._lines.attach(transport)

    def data_received(self, data: bytes) -> None:
        start = 0
        while (newline := data.find(b"\n", start)) >= 0:
            self._end_line(data[start:newline])
            start = newline + 1
        if start < len(data):
            self._extend(data[start:])
        self._lines.chunk_done()

    def _extend(self, piece: bytes) -> None:
        if self._skipped >= 0:
            self._skipped += len(piece)
            return
        self._partial += piece
        if len(self._partial) > self._max:
            self._skipped = len(self._partial)
            self._partial = bytearray()

    def _end_line(self, piece: bytes) -> None:
        if self._skipped >= 0:
            self._lines.put(Oversized(self._skipped + len(piece)))
            self._skipped = -1
            return
        if self._partial:
            self._partial += piece
            piece, self._partial = bytes(self._partial), bytearray()
        if len(piece) > self._max:
            self._lines.put(Oversized(len(piece)))
        elif piece.strip():
            self._lines.put(piece)

    def eof_received(self) -> bool:
        self._end_line(b"")  # a last line without its newline still counts
        self._lines.close()
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self._lines.close()


class _PipeSink(asyncio.Protocol):
    """Writes to a pipe, waiting for the kernel only when the transport's buffer is over its high-water mark."""

    def __init__(self, on_lost: Callable[[str], None]) -> None:
        self._on_lost = on_lost
        self._transport: asyncio.WriteTransport | None = None
        self._writable = asyncio.Event()
        self._writable.set()
        self._lost = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.WriteTransport)
        self._transport = transport

    def pause_writing(self) -> None:
        self._writable.clear()

    def resume_writing(self) -> None:
        self._writable.set()

    def connection_lost(self, exc: Exception | None) -> None:
        self._lost = True
        self._writable.set()
        # Also when nothing is being written: asyncio watches a pipe's read end closing (a client gone while a turn
        # waits in silence is still gone).
        self._on_lost("the client closed stdout")

    async def write(self, data: bytes) -> None:
        if self._lost or self._transport is None or self._transport.is_closing():
            raise BrokenPipeError("the client closed stdout")
        self._transport.write(data)
        await self._writable.wait()


class _FileSink:
    def __init__(self, file: BinaryIO) -> None:
        self._file = file

    async def write(self, data: bytes) -> None:
        await anyio.to_thread.run_sync(self._write_all, data)

    def _write_all(self, data: bytes) -> None:
        self._file.write(data)
        self._file.flush()


async def _file_lines(
    file: BinaryIO, max_line_bytes: int, ended: Callable[[], bool]
) -> AsyncIterator[bytes | Oversized]:
    while not ended():
        line = await anyio.to_thread.run_sync(file.readline, max_line_bytes + 2)
        if not line:
            return
        if not line.endswith(b"\n") and len(line) > max_line_bytes:
            size = len(line)
            while line and not line.endswith(b"\n"):  # skip the rest of the oversized line
                line = await anyio.to_thread.run_sync(file.readline, 1 << 20)
                size += len(line)
            yield Oversized(size)
        elif line.strip():
            yield line


def _is_regular_file(fd: int) -> bool:
    return stat.S_ISREG(os.fstat(fd).st_mode)


@contextlib.asynccontextmanager
async def open_stdio(
    max_line_bytes: int,
    on_hangup: Callable[[], None] = lambda: None,
    stop_signals: Sequence[signal.Signals] = (),
) -> AsyncIterator[tuple[LineSource, LineSink]]:
    """Take over stdin and stdout for the protocol. Everything else printed to stdout goes to stderr. The lines end
    at stdin EOF, when the client closes stdout, or at one of `stop_signals` (handled only while the block runs).

    `on_hangup` is called once the input is known to be finite: the client closed stdin (seen even while reading is
    paused, see `_InputLines`), or EOF was read, or stdin is a regular file, or the input was ended as above."""
    protocol_fd = os.dup(1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    loop = asyncio.get_running_loop()
    stdin = os.fdopen(os.dup(0), "rb", buffering=0)
    stdout = os.fdopen(protocol_fd, "wb", buffering=0)
    transports: list[asyncio.BaseTransport] = []
    read_transports: list[asyncio.BaseTransport] = []
    ended = False

    def end_input(why: str) -> None:
        """From here on the input is over, as at EOF: lines already read are still handled, no more are read."""
        nonlocal ended
        if ended:
            return
        ended = True
        log.info("%s: shutting down as at stdin EOF", why)
        for transport in read_transports:
            transport.close()  # its protocol's connection_lost closes the line stream

    handled: list[signal.Signals] = []
    try:
        for number in stop_signals:
            loop.add_signal_handler(number, end_input, f"received {number.name}")
            handled.append(number)
        source: LineSource
        if _is_regular_file(stdin.fileno()):
            # Read only as fast as it is taken, so bounded already; and a file is complete: nobody closes it later.
            on_hangup()
            source = _file_lines(stdin, max_line_bytes, lambda: ended)
        else:
            lines = _InputLines(stdin.fileno(), on_hangup)
            read_transport, _ = await loop.connect_read_pipe(
                lambda: _LineSplitter(lines, max_line_bytes),
                stdin,
            )
            transports.append(read_transport)
            read_transports.append(read_transport)
            if ended:  # a stop signal came while the pipe was being connected
                read_transport.close()
            source = lines.lines()
        sink: LineSink
        if _is_regular_file(stdout.fileno()):
            sink = _FileSink(stdout)
        else:
            write_transport, sink = await loop.connect_write_pipe(lambda: _PipeSink(end_input), stdout)
            transports.append(write_transport)
        yield source, sink
    finally:
        ended = True  # our own closing below is no shutdown request
        for number in handled:
            loop.remove_signal_handler(number)
        for transport in transports:
            transport.close()
        for file in (stdin, stdout):
            with contextlib.suppress(OSError):
                file.close()


# The tasks `start_detached` started and that still run: asyncio keeps only weak references to tasks, so one nothing
# else holds could be collected while it runs.
_DETACHED: set[asyncio.Task[None]] = set()


def start_detached(body: Callable[[], Coroutine[Any, Any, None]]) -> None:
    """Run `body()` in a task of the running event loop that is no child of any task group: for work that must never
    hold the connection's `serve()` open (a tool call's body that ignores cancellation, runtime/call_bodies.py, which
    owns, cancels and waits for it within bounds itself)."""
    task = asyncio.get_running_loop().create_task(body())
    _DETACHED.add(task)
    task.add_done_callback(_DETACHED.discard)
