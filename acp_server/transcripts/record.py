"""`--record FILE`: every line in and out, as a transcript, secrets removed, without slowing the stream.

The recorder wraps the transport's line source and sink (`serve_stdio` does it when `Config.record` is set), so it
sees exactly what the protocol saw, in the order the server handled it. Output is the hot path (tens of thousands of
chunks a second), so an outgoing batch is never parsed: each line is spliced into its transcript line with one
`bytes.replace`, and only a batch that may hold a secret is taken apart (see `secrets.Redactor.holds_secret`).
Lines go to a buffered file. A flusher thread writes out whatever is buffered at most `FLUSH_SECONDS` after it was
recorded (it sleeps while nothing is), and the file is flushed at stdin EOF and at every exit: `close()` at a normal
end (or from shutdown code: it is idempotent and thread-safe), `flush()` from the exit watchdog just before its forced
exit. So a crash, even kill -9, loses at most the last `FLUSH_SECONDS`.

Each line is `{"t": seconds since the first line, "dir": "in" | "out", "msg": {...}}`; an input that is not a JSON
object, or one this process cannot write again (orjson writes at most 254 levels of nesting; a client may send
1024), is kept as `"raw"` text, a line over the size limit as `{"raw": "", "truncated": size}` (its bytes were
never held), and stdin EOF as `{"dir": "in", "eof": true}`.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import AsyncIterator, Callable, Mapping
from typing import BinaryIO

import orjson

from acp_server.jsonrpc.transport import LineSink, LineSource, Oversized
from acp_server.transcripts.secrets import Redactor, provider_secrets

__all__ = ["Recorder"]

log = logging.getLogger(__name__)

FLUSH_SECONDS = 0.2
BUFFER_BYTES = 1 << 20


class Recorder:
    """Writes the transcript of one connection. `source` and `sink` wrap the transport's; `close` ends the file."""

    def __init__(
        self,
        file: BinaryIO,
        redactor: Redactor,
        clock: Callable[[], float] = time.monotonic,
        env: Mapping[str, str] | None = None,
    ) -> None:
        self._file = file
        self._redactor = redactor
        self._env = env  # where keys are looked up again at `authenticate`; None: never
        self._clock = clock
        self._start: float | None = None
        # The flusher thread and the exit watchdog flush from their own threads; the lock keeps a flush from racing
        # a close.
        self._lock = threading.Lock()
        self._closed = False
        # Set by the first line written since the last flush (the hot path only reads a bool after that).
        self._dirty = False
        self._wake = threading.Event()
        self._stop = threading.Event()
        # A daemon: the watchdog's os._exit must not wait for it; `close` stops and joins it.
        self._flusher = threading.Thread(target=self._flush_loop, name="acp-server-record-flush", daemon=True)
        self._flusher.start()

    @classmethod
    def open(cls, path: str, env: Mapping[str, str] = os.environ) -> Recorder:
        """Create (or truncate) the transcript file; raises OSError when it cannot be written."""
        file = open(path, "wb", buffering=BUFFER_BYTES)  # noqa: SIM115 - closed by `close`, which owns it
        return cls(file, Redactor(provider_secrets(env)), env=env)

    # --- the transport's wrappers ---

    async def source(self, source: LineSource) -> AsyncIterator[bytes | Oversized]:
        async for line in source:
            self.record_input(line)
            yield line
        self.record_eof()

    def sink(self, sink: LineSink) -> LineSink:
        return _RecordingSink(self, sink)

    # --- lines ---

    def _stamp(self) -> float:
        now = self._clock()
        if self._start is None:
            self._start = now
        return now - self._start

    def _write(self, data: bytes) -> None:
        if self._closed:
            return
        try:
            self._file.write(data)
        except (OSError, ValueError) as exc:  # a full disk (or a file closed under us) must not take the protocol down
            log.error("cannot write the transcript: %s", exc)
            return
        if not self._dirty:
            self._dirty = True
            self._wake.set()

    def record_input(self, line: bytes | Oversized) -> None:
        t = self._stamp()
        if isinstance(line, Oversized):
            entry: dict[str, object] = {"t": round(t, 6), "dir": "in", "raw": "", "truncated": line.size}
        else:
            line = line.rstrip(b"\r")
            try:
                message = orjson.loads(line)
            except orjson.JSONDecodeError:
                message = None
            if isinstance(message, dict):
                if message.get("method") == "authenticate" and self._env is not None:
                    # The server reads the config file again here, so a key added since start-up is about to be used.
                    for secret in provider_secrets(self._env):
                        self._redactor.add(secret)
                if message.get("method") == "providers/set":
                    # A client's gateway headers (ACP unstable `providers/set`) carry its credentials under any name
                    # a gateway likes: every value is a secret from here on, whatever its header is called.
                    self._learn_headers(message.get("params"))
                try:
                    if self._redactor.holds_secret(line):
                        message = self._redactor.message(message)
                    entry = {"t": round(t, 6), "dir": "in", "msg": message}
                    self._write(orjson.dumps(entry, option=orjson.OPT_APPEND_NEWLINE))
                    return
                except (TypeError, RecursionError):
                    pass  # nested deeper than orjson writes (or Python's stack walks): kept as text below
            entry = {"t": round(t, 6), "dir": "in", "raw": self._redactor.text(line.decode(errors="replace"))}
        self._write(orjson.dumps(entry, option=orjson.OPT_APPEND_NEWLINE))

    def _learn_headers(self, params: object) -> None:
        headers = params.get("headers") if isinstance(params, dict) else None
        for value in headers.values() if isinstance(headers, dict) else ():
            if isinstance(value, str):
                self._redactor.add(value)

    def record_output(self, data: bytes) -> None:
        """`data` is whole lines of compact JSON (the connection's writer), so every b"\\n" ends a line."""
        if not data:
            return
        t = self._stamp()
        if self._redactor.holds_secret(data):
            data = b"".join(self._redacted_output(line) for line in data.rstrip(b"\n").split(b"\n"))
        head = b'{"t":%.6f,"dir":"out","msg":' % t
        self._write(head + data[:-1].replace(b"\n", b"}\n" + head) + b"}\n")

    def _redacted_output(self, line: bytes) -> bytes:
        try:
            message = orjson.loads(line)
        except orjson.JSONDecodeError:  # the writer only writes JSON; keep the format whatever happens
            return orjson.dumps(self._redactor.text(line.decode(errors="replace"))) + b"\n"
        return orjson.dumps(self._redactor.message(message), option=orjson.OPT_APPEND_NEWLINE)

    def record_eof(self) -> None:
        t = self._stamp()
        self._write(b'{"t":%.6f,"dir":"in","eof":true}\n' % t)
        self.flush()

    # --- the file ---

    def _flush_loop(self) -> None:
        """The flusher thread: once a line is buffered, wait `FLUSH_SECONDS` (less if closing) and flush it all."""
        while True:
            self._wake.wait()
            self._stop.wait(FLUSH_SECONDS)
            if self._stop.is_set():
                return  # `close` flushes the rest
            self._wake.clear()
            # Cleared before the flush: a line written meanwhile is either in this flush or wakes the next one.
            self._dirty = False
            self.flush()

    def flush(self) -> None:
        """Write out everything recorded so far. Safe from any thread (the exit watchdog calls it), a no-op after
        `close`."""
        with self._lock:
            if self._closed:
                return
            try:
                self._file.flush()
            except OSError as exc:  # a full disk must not take the protocol down; the transcript says where it ends
                log.error("cannot write the transcript: %s", exc)

    def close(self) -> None:
        """Flush everything, stop the flusher and close the file; later lines are dropped. Idempotent and safe from
        any thread: the normal end of `serve_stdio` calls it, and so may shutdown code (a signal) before that."""
        self._stop.set()
        self._wake.set()
        if self._flusher is not threading.current_thread():
            self._flusher.join(timeout=1.0)  # it only ever waits on events or a flush; bounded in case a disk hangs
        with self._lock:
            if self._closed:
                return
            self._closed = True
            try:
                self._file.close()  # flushes first
            except OSError as exc:
                log.error("cannot write the transcript: %s", exc)


class _RecordingSink:
    def __init__(self, recorder: Recorder, sink: LineSink) -> None:
        self._recorder = recorder
        self._sink = sink

    async def write(self, data: bytes) -> None:
        # Recorded as handed to the transport, before any wait for the client: the order the server decided.
        self._recorder.record_output(data)
        await self._sink.write(data)
