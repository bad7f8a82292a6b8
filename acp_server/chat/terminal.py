"""The person's terminal: the one chat module that touches stdin and stdout.

In the chat client stdout is a terminal (or a pipe to a person's script), not a protocol stream: the protocol runs
over the agent's pipes. Output is written unbuffered, so a streamed chunk or "cancelling…" shows the moment it is
written. Keyboard input is read by one daemon thread, line by line, into a stream the event loop awaits: a blocking
read can never be cancelled, so it lives where nobody has to wait for it, and a line typed while nobody is asking
(type-ahead) waits in the stream for whoever asks next.
"""

from __future__ import annotations

import contextlib
import math
import os
import sys
import threading
from typing import TextIO

import anyio
import anyio.lowlevel
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

__all__ = ["LineInput", "Terminal", "colour_wanted"]

STDIN_FD = 0


def colour_wanted(stream: TextIO) -> bool:
    """ANSI colours only on a terminal, and never when NO_COLOR is set to anything (https://no-color.org)."""
    return stream.isatty() and not os.environ.get("NO_COLOR")


class Terminal:
    """Where everything a person reads goes. Writes are small and go straight to the file descriptor."""

    def __init__(self, stream: TextIO, errors: TextIO, colour: bool) -> None:
        self._stream = stream
        self._errors = errors
        self.colour = colour

    @classmethod
    def stdout(cls) -> Terminal:
        return cls(sys.stdout, sys.stderr, colour_wanted(sys.stdout))

    def write(self, text: str) -> None:
        _write(self._stream, text)

    def write_error(self, text: str) -> None:
        """Errors go to stderr, so `answer=$(acp-server chat "...")` captures only the answer."""
        _write(self._errors, text)


def _write(stream: TextIO, text: str) -> None:
    # Encoded by hand with "replace", so a terminal without UTF-8 shows "?" instead of crashing on "…".
    data = text.encode(getattr(stream, "encoding", None) or "utf-8", errors="replace")
    try:
        stream.buffer.write(data)
        stream.buffer.flush()
    except BrokenPipeError:
        pass  # the reader of a piped chat went away; nothing left to tell it


def stdin_is_a_terminal() -> bool:
    return sys.stdin.isatty()


async def read_all_stdin() -> str:
    """The whole of stdin, for `echo question | acp-server chat`."""

    send, receive = anyio.create_memory_object_stream[bytes](1)
    token = anyio.lowlevel.current_token()

    def read() -> None:
        # A daemon thread, not anyio's worker threads: those are waited for at exit, and a Ctrl-C while a slow pipe
        # is still writing must not wait for the pipe. The descriptor, not sys.stdin.buffer: see `LineInput`.
        chunks = []
        while chunk := os.read(STDIN_FD, 65536):
            chunks.append(chunk)
        with contextlib.suppress(Exception):  # the event loop has finished; nobody is listening any more
            anyio.from_thread.run_sync(send.send_nowait, b"".join(chunks), token=token)

    threading.Thread(target=read, name="chat-stdin", daemon=True).start()
    with receive:
        data = await receive.receive()
    return data.decode(errors="replace")


class LineInput:
    """Lines typed at the keyboard, in order; `None` once stdin has ended (Ctrl-D)."""

    def __init__(self) -> None:
        send, receive = anyio.create_memory_object_stream[str | None](math.inf)
        self._send: MemoryObjectSendStream[str | None] = send
        self._receive: MemoryObjectReceiveStream[str | None] = receive
        self._started = False
        self._ended = False

    async def next_line(self) -> str | None:
        """The next line without its newline, or None at end of input."""
        if self._ended:
            return None
        self._start()
        line = await self._receive.receive()
        if line is None:
            self._ended = True
        return line

    def discard_typed_ahead(self) -> None:
        """Forget lines typed before a question was shown: an answer must be given to the question seen."""
        while True:
            try:
                line = self._receive.receive_nowait()
            except anyio.WouldBlock:
                return
            if line is None:
                self._ended = True
                return

    def _start(self) -> None:
        if self._started:
            return
        self._started = True
        token = anyio.lowlevel.current_token()
        send = self._send

        def read_lines() -> None:
            # os.read on the descriptor, not sys.stdin: a daemon thread blocked inside a buffered reader holds its
            # lock, and the interpreter aborts at exit when it finds that lock taken.
            pending = b""
            while True:
                try:
                    data = os.read(STDIN_FD, 65536)
                except OSError:
                    data = b""
                pending += data
                *lines, pending = pending.split(b"\n")
                if not data and pending:
                    lines.append(pending)  # a last line without its newline
                out: list[str | None] = [raw.decode(errors="replace").rstrip("\r") for raw in lines]
                if not data:
                    out.append(None)
                try:
                    for line in out:
                        anyio.from_thread.run_sync(send.send_nowait, line, token=token)
                except Exception:
                    return  # the event loop has finished; nobody is listening any more
                if not data:
                    return

        threading.Thread(target=read_lines, name="chat-keyboard", daemon=True).start()
