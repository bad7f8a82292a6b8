"""A deliberately thin stdio client for the benchmarks, so the figures measure the server and not the client.

The official ACP SDK client (and the test harness, which validates every line against the schema) costs more per
message than the server is meant to spend, so at tens of thousands of chunks per second it would be the bottleneck.
This client is plain `subprocess` + pipes: unbuffered `os.write` (a write has been flushed when it returns), large
`os.read` blocks split at newlines, and `orjson` for parsing. Streaming chunk lines are recognised by a byte-prefix
test instead of being parsed, which keeps the reader at well under a microsecond per chunk.

It speaks either protocol version: `initialize(protocol=2)` opens an ACP v2 connection, on which a prompt is answered
the moment it is accepted and its work ends with the session's `idle` `state_update` (`stream_work`); `play` reads
one prompt's turn the way the connection's version ends it, so a benchmark can time both versions alike.

It also reads the server's own counters from /proc (CPU ticks, VmRSS), which is why it needs Linux.
"""

from __future__ import annotations

import contextlib
import itertools
import math
import os
import selectors
import subprocess
import tempfile
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import IO, Any

import orjson

from tests.support.harness import isolated_env, server_command

__all__ = [
    "CLOCK_TICKS",
    "IDLE_UPDATE",
    "MESSAGE_CHUNK",
    "PROTOCOLS",
    "UPDATE_PREFIX",
    "Server",
    "TurnResult",
    "WireError",
    "initialize_params",
    "percentile",
    "process_cpu_ns",
    "process_cpu_ticks",
    "server_command",
]

# orjson writes keys in insertion order and the server builds notifications as {"jsonrpc", "method", "params"}, so
# every session/update line starts with these exact bytes; matching the prefix avoids parsing 10,000 chunks a turn.
UPDATE_PREFIX = b'{"jsonrpc":"2.0","method":"session/update"'
MESSAGE_CHUNK = b'"sessionUpdate":"agent_message_chunk"'
# A v2 work's end: its session's `idle` `state_update` (the server writes these keys in this order).
IDLE_UPDATE = b'"sessionUpdate":"state_update","state":"idle"'
PROTOCOLS = (1, 2)
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
READ_BLOCK = 1 << 20

Message = dict[str, Any]


class WireError(RuntimeError):
    """The server did something the benchmark cannot continue from (exit, timeout, unexpected answer)."""


def process_cpu_ticks(pid: int) -> int:
    """utime + stime of a process (all its threads), in clock ticks (1 / CLOCK_TICKS s), from /proc."""
    stat = Path(f"/proc/{pid}/stat").read_bytes()
    # The command name (field 2) may hold spaces, so count fields from after its closing parenthesis.
    fields = stat[stat.rfind(b")") + 2 :].split()
    return int(fields[11]) + int(fields[12])


def process_cpu_ns(pid: int) -> int:
    """CPU time of a process's live threads in nanoseconds (/proc/<pid>/task/*/schedstat): finer than clock ticks,
    for windows in which the server spends only milliseconds (a thread that exited in the window is missed)."""
    total = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(OSError):
            total += int((task / "schedstat").read_bytes().split()[0])
    return total


def percentile(samples: Sequence[float], p: float) -> float:
    """Nearest-rank percentile: always one of the measured values, never an interpolation between two."""
    if not samples:
        raise ValueError("no samples")
    ordered = sorted(samples)
    rank = max(1, math.ceil(p / 100 * len(ordered)))
    return ordered[rank - 1]


def initialize_params(protocol: int) -> Message:
    """`initialize` as a v1 client (clientCapabilities) or a v2 one (info and object capability markers) sends it."""
    if protocol == 1:
        return {"protocolVersion": 1, "clientCapabilities": {}}
    if protocol == 2:
        return {"protocolVersion": 2, "info": {"name": "acp-server-bench", "version": "0"}, "capabilities": {}}
    raise ValueError(f"no such protocol version: {protocol}")


@dataclass(slots=True)
class TurnResult:
    """One streamed prompt turn as the client saw it."""

    chunks: int
    other_lines: int
    response: Message  # v1: the prompt's response; v2: the work's `idle` state_update notification
    t_response_ns: int  # perf_counter_ns when the block holding the response (v2: the idle) was read

    @property
    def stop_reason(self) -> str | None:
        """How the turn ended: the v1 response's `stopReason`, or the v2 idle's."""
        if "method" in self.response:
            reason = self.response["params"]["update"].get("stopReason")
        else:
            reason = self.response.get("result", {}).get("stopReason")
        return reason if isinstance(reason, str) else None


@dataclass
class Server:
    """One spawned `acp-server` process and the client end of its stdio."""

    process: subprocess.Popen[bytes]
    t_spawn_ns: int
    stderr_file: IO[bytes]
    protocol: int = 1  # the version `initialize` agreed on
    _ids: itertools.count[int] = field(default_factory=lambda: itertools.count(1))
    _lines: deque[bytes] = field(default_factory=deque)
    _lines_t_ns: int = 0  # when the lines in _lines were read
    _partial: bytes = b""
    _selector: selectors.BaseSelector = field(default_factory=selectors.DefaultSelector)

    @classmethod
    def spawn(cls, *args: str, state_dir: str | None = None) -> Server:
        # stderr goes to a file rather than a pipe nobody drains, so a chatty server can never block on it. The
        # Server owns the file and closes it in close().
        stderr_file = tempfile.TemporaryFile()  # noqa: SIM115
        t_spawn_ns = time.perf_counter_ns()
        # The tests' isolation: no user config file is read, and a benchmark's sessions and log lines never land in
        # the user's own store or log file (a scratch state directory unless the benchmark names one).
        env = {**os.environ, **isolated_env()}
        if state_dir is not None:
            env["ACP_SERVER_STATE_DIR"] = state_dir
        process = subprocess.Popen(
            server_command(*args),
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=stderr_file,
            bufsize=0,
            start_new_session=True,
        )
        server = cls(process, t_spawn_ns, stderr_file)
        assert process.stdout is not None
        server._selector.register(process.stdout.fileno(), selectors.EVENT_READ)
        return server

    @property
    def pid(self) -> int:
        return self.process.pid

    # --- writing ---

    def write_raw(self, data: bytes) -> int:
        """Write every byte; returns perf_counter_ns once the kernel has them (the pipe is unbuffered)."""
        assert self.process.stdin is not None
        fd = self.process.stdin.fileno()
        view = memoryview(data)
        while view:
            written = os.write(fd, view)
            view = view[written:]
        return time.perf_counter_ns()

    def send(self, *messages: Message) -> int:
        """Send messages in one write, so they arrive together (pipelining)."""
        return self.write_raw(b"".join(orjson.dumps({"jsonrpc": "2.0", **m}) + b"\n" for m in messages))

    def next_id(self) -> int:
        return next(self._ids)

    def request_message(self, method: str, params: Any) -> tuple[int, Message]:
        request_id = self.next_id()
        return request_id, {"id": request_id, "method": method, "params": params}

    def request(self, method: str, params: Any) -> tuple[int, int]:
        """Send one request; returns its id and the time it was written."""
        request_id, message = self.request_message(method, params)
        return request_id, self.send(message)

    def notify(self, method: str, params: Any) -> int:
        return self.send({"method": method, "params": params})

    # --- reading ---

    def _fill(self, deadline: float) -> None:
        """Read one block (whatever the pipe holds, up to 1 MiB) and queue its complete lines."""
        assert self.process.stdout is not None
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise WireError(f"timed out waiting for the server; stderr: {self.stderr_tail()}")
            if self._selector.select(remaining):
                break
        block = os.read(self.process.stdout.fileno(), READ_BLOCK)
        self._lines_t_ns = time.perf_counter_ns()
        if not block:
            raise WireError(f"the server closed stdout (exit {self.process.poll()}); stderr: {self.stderr_tail()}")
        cut = block.rfind(b"\n")
        if cut < 0:
            self._partial += block
            return
        head = self._partial + block[:cut] if self._partial else block[:cut]
        self._partial = block[cut + 1 :]
        self._lines.extend(head.split(b"\n"))

    def poll_lines(self, timeout: float) -> list[bytes]:
        """The complete lines queued or read within `timeout` (none if the server wrote nothing); `t_read_ns` is
        when they were read."""
        if not self._lines and self._selector.select(max(0.0, timeout)):
            self._fill(time.monotonic() + 10.0)
        lines = list(self._lines)
        self._lines.clear()
        return lines

    @property
    def t_read_ns(self) -> int:
        return self._lines_t_ns

    def next_line(self, deadline: float) -> bytes:
        while not self._lines:
            self._fill(deadline)
        return self._lines.popleft()

    def wait_for(self, predicate: Callable[[Message], bool], timeout: float = 10.0) -> tuple[Message, int]:
        """The next message matching `predicate` (earlier ones are dropped) and when it was read."""
        deadline = time.monotonic() + timeout
        while True:
            line = self.next_line(deadline)
            if not line:
                continue
            message = orjson.loads(line)
            if predicate(message):
                return message, self._lines_t_ns

    def response(self, request_id: int, timeout: float = 10.0) -> tuple[Message, int]:
        def is_response(message: Message) -> bool:
            return message.get("id") == request_id and "method" not in message

        return self.wait_for(is_response, timeout)

    def call(self, method: str, params: Any, timeout: float = 10.0) -> Message:
        """Request and return the result; an error answer is a WireError."""
        request_id, _ = self.request(method, params)
        message, _ = self.response(request_id, timeout)
        if "result" not in message:
            raise WireError(f"{method} failed: {message.get('error')}")
        result: Message = message["result"]
        return result

    def stream_turn(self, request_id: int, timeout: float = 60.0) -> TurnResult:
        """Read a prompt's turn up to its response, counting agent_message_chunk lines without parsing them."""
        deadline = time.monotonic() + timeout
        chunks = 0
        other = 0
        lines = self._lines
        while True:
            while not lines:
                self._fill(deadline)
            # Drain the whole queued block in a tight loop; only non-update lines are parsed.
            while lines:
                line = lines.popleft()
                if line.startswith(UPDATE_PREFIX) and MESSAGE_CHUNK in line:
                    chunks += 1
                    continue
                if not line:
                    continue
                other += 1
                if line.startswith(UPDATE_PREFIX):
                    continue
                message = orjson.loads(line)
                if message.get("id") == request_id and "method" not in message:
                    return TurnResult(chunks, other, message, self._lines_t_ns)

    def stream_work(self, request_id: int, session_id: str, timeout: float = 60.0) -> TurnResult:
        """v2: read a prompt's work up to its session's `idle` state_update, counting agent_message_chunk lines
        without parsing them; the prompt's acceptance passes by on the way (a refusal is a WireError)."""
        deadline = time.monotonic() + timeout
        chunks = 0
        other = 0
        lines = self._lines
        while True:
            while not lines:
                self._fill(deadline)
            while lines:
                line = lines.popleft()
                if line.startswith(UPDATE_PREFIX) and MESSAGE_CHUNK in line:
                    chunks += 1
                    continue
                if not line:
                    continue
                other += 1
                if line.startswith(UPDATE_PREFIX):
                    if IDLE_UPDATE in line:
                        message = orjson.loads(line)
                        if message["params"]["sessionId"] == session_id:
                            return TurnResult(chunks, other, message, self._lines_t_ns)
                    continue
                message = orjson.loads(line)
                if message.get("id") == request_id and "error" in message:
                    raise WireError(f"the prompt was refused: {message['error']}")

    def play(self, request_id: int, session_id: str, timeout: float = 60.0) -> TurnResult:
        """One prompt's turn as this connection's version ends it: v1 its response, v2 its session's `idle`."""
        if self.protocol == 2:
            return self.stream_work(request_id, session_id, timeout)
        return self.stream_turn(request_id, timeout)

    def skip_chunks(self, count: int, timeout: float = 10.0) -> None:
        """Consume lines until `count` agent_message_chunk lines have gone by (other lines are dropped too)."""
        deadline = time.monotonic() + timeout
        while count > 0:
            line = self.next_line(deadline)
            if line.startswith(UPDATE_PREFIX) and MESSAGE_CHUNK in line:
                count -= 1

    # --- the server's own counters ---

    def cpu_ticks(self) -> int:
        """utime + stime of the server process, in clock ticks (1 / CLOCK_TICKS s)."""
        return process_cpu_ticks(self.pid)

    def rss_kb(self) -> int:
        for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
        raise WireError("no VmRSS in /proc/<pid>/status")

    # --- lifecycle ---

    def initialize(self, protocol: int = 1) -> tuple[Message, int]:
        """Open the connection in `protocol` (1 or 2); the server must agree on it."""
        request_id, _ = self.request("initialize", initialize_params(protocol))
        response, t_read = self.response(request_id)
        agreed = response.get("result", {}).get("protocolVersion")
        if agreed != protocol:
            raise WireError(f"asked for protocol {protocol}, got {response}")
        self.protocol = protocol
        return response, t_read

    def new_session(self, cwd: str = "/tmp") -> str:
        params: Message = {"cwd": cwd, "mcpServers": []} if self.protocol == 1 else {"cwd": cwd}
        session_id: str = self.call("session/new", params)["sessionId"]
        return session_id

    def stderr_tail(self, limit: int = 2000) -> str:
        try:
            self.stderr_file.seek(0)
            text: str = self.stderr_file.read().decode(errors="replace")
        except (OSError, ValueError):
            return "<unavailable>"
        return text[-limit:]

    def close(self, timeout: float = 5.0) -> int:
        """Close stdin (the editor going away) and wait for the exit; kill only on a hang."""
        if self.process.stdin is not None and not self.process.stdin.closed:
            self.process.stdin.close()
        try:
            code = self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            code = self.process.wait()
        if self.process.stdout is not None:
            self.process.stdout.close()
        self._selector.close()
        self.stderr_file.close()
        return code

    def __enter__(self) -> Server:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()
