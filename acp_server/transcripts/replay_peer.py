"""Any ACP agent as a replay peer: a subprocess whose stdin we write and whose stdout we read into lines.

The replay command and the pytest helper must work with agents nobody here wrote, so this assumes only what ACP
does: newline-delimited JSON-RPC on stdin/stdout. The agent runs in its own process group, which is killed if it
has not exited within `exit_timeout` of stdin EOF, so a hung agent (or a child it left behind holding stdout) can
never hang the replay. Its stderr goes wherever ours goes unless told otherwise.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import IO, Any

import anyio
from anyio.abc import Process

from acp_server.errors import PeerGoneError
from acp_server.transcripts.engine import Outcome, play
from acp_server.transcripts.format import Line, Transcript, line_from_bytes

__all__ = ["ReplayPeer", "replay_command", "spawn_agent"]


class ReplayPeer:
    """A spawned agent as the replay's peer: the conversation with it (see `engine.Peer`)."""

    def __init__(self, process: Process, exit_timeout: float) -> None:
        self.process = process
        self.exit_timeout = exit_timeout
        self._events: list[Line] = []
        self._start = time.monotonic()
        self._stdout_done = anyio.Event()
        self._stdin_closed = False

    def events(self) -> list[Line]:
        return self._events

    @property
    def finished(self) -> bool:
        return self._stdout_done.is_set()

    def _stamp(self) -> float:
        return round(time.monotonic() - self._start, 6)

    async def read_stdout(self) -> None:
        assert self.process.stdout is not None
        partial = bytearray()
        try:
            async for chunk in self.process.stdout:
                partial += chunk
                start = 0
                while (newline := partial.find(b"\n", start)) >= 0:
                    self._received(bytes(partial[start:newline]))
                    start = newline + 1
                del partial[:start]
        except (anyio.BrokenResourceError, anyio.ClosedResourceError):
            pass  # killed: what arrived is what there is
        finally:
            if partial.strip():
                self._received(bytes(partial))
            self._stdout_done.set()

    def _received(self, line: bytes) -> None:
        if line.strip():
            self._events.append(line_from_bytes("out", line, self._stamp()))

    async def write(self, data: bytes) -> None:
        assert self.process.stdin is not None
        t = self._stamp()
        self._events += [line_from_bytes("in", line, t) for line in data.split(b"\n") if line]
        try:
            await self.process.stdin.send(data)
        except (OSError, anyio.BrokenResourceError, anyio.ClosedResourceError) as exc:
            raise PeerGoneError(str(exc)) from None

    async def close(self) -> list[str]:
        """Close stdin, wait for the agent to exit and its stdout to end; kill its process group when it will not."""
        if self._stdin_closed:
            return []
        self._stdin_closed = True
        self._events.append(Line("in", eof=True, t=self._stamp()))
        assert self.process.stdin is not None
        with contextlib.suppress(OSError, anyio.BrokenResourceError):
            await self.process.stdin.aclose()
        problems: list[str] = []
        with anyio.move_on_after(self.exit_timeout):
            await self.process.wait()
            await self._stdout_done.wait()
        if self.process.returncode is None:
            problems.append(f"the agent did not exit within {self.exit_timeout} s of stdin EOF")
        elif self.process.returncode != 0:
            problems.append(f"the agent exited with status {self.process.returncode} after stdin EOF")
        await self.kill()
        return problems

    async def kill(self) -> None:
        """Kill the agent's process group if anything of it is left, and wait (briefly) for the pieces."""
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.process.pid, signal.SIGKILL)
        with anyio.move_on_after(5, shield=True):
            await self.process.wait()
            await self._stdout_done.wait()


@contextlib.asynccontextmanager
async def spawn_agent(
    command: Sequence[str],
    *,
    env: Mapping[str, str] | None = None,
    cwd: str | None = None,
    stderr: int | IO[Any] | None = None,
    exit_timeout: float = 5.0,
) -> AsyncIterator[ReplayPeer]:
    """Start `command` and yield its peer; on leaving, whatever is left of it is killed. Raises OSError when the
    command cannot be started."""
    process = await anyio.open_process(
        list(command),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=stderr,
        env=env,
        cwd=cwd,
        start_new_session=True,  # its own group, so a kill reaches every process it started
    )
    agent = ReplayPeer(process, exit_timeout)
    async with process, anyio.create_task_group() as task_group:
        task_group.start_soon(agent.read_stdout)
        try:
            yield agent
        finally:
            await agent.kill()


async def replay_command(
    transcript: Transcript,
    command: Sequence[str],
    *,
    timeout: float | None = None,
    strict: bool = False,
    paths: Mapping[str, str] | None = None,
    env: Mapping[str, str] | None = None,
    cwd: str | None = None,
    stderr: int | IO[Any] | None = None,
) -> tuple[Outcome, int | None]:
    """Replay `transcript` against a fresh `command`; returns the outcome and the agent's exit status."""
    wait = transcript.timeout if timeout is None else timeout
    async with spawn_agent(command, env=env, cwd=cwd, stderr=stderr, exit_timeout=wait) as agent:
        outcome = await play(transcript, agent, timeout=wait, strict=strict, paths=paths)
    return outcome, agent.process.returncode
