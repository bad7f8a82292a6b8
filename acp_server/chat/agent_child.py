"""The agent as a child process: started in its own process group, its stderr kept, stopped politely.

Its own process group (a new session) keeps the terminal's Ctrl-C away from it: Ctrl-C is the person talking to
the chat client, which turns it into `session/cancel`. ACP's shutdown is "close stdin, then terminate": an agent
gets a moment to finish on EOF, then SIGTERM, then SIGKILL, each to the whole group so its helpers go too.
Its stderr is drained all the time (a full pipe would stall the agent) and the tail is kept to explain a failure.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import signal
import subprocess
from collections.abc import Sequence

import anyio
from anyio.abc import ByteReceiveStream, ByteSendStream, Process

__all__ = ["AgentChild", "AgentStartError"]

STDERR_TAIL_BYTES = 8192
TERM_WAIT = 1.0  # after SIGTERM, before SIGKILL


class AgentStartError(Exception):
    """The agent's command could not be run at all."""


class AgentChild:
    """The agent the chat client runs as its child process (its own process group), and its stderr's tail."""

    def __init__(self, process: Process, command: Sequence[str]) -> None:
        self._process = process
        self.command = tuple(command)
        self._stderr_tail = bytearray()

    @classmethod
    async def start(cls, command: Sequence[str]) -> AgentChild:
        try:
            process = await anyio.open_process(
                list(command),
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                start_new_session=True,
            )
        except OSError as exc:
            reason = exc.strerror or str(exc)
            raise AgentStartError(f"cannot start the agent `{shlex.join(command)}`: {reason}") from None
        return cls(process, command)

    @property
    def pid(self) -> int:
        return self._process.pid

    @property
    def stdin(self) -> ByteSendStream:
        assert self._process.stdin is not None
        return self._process.stdin

    @property
    def stdout(self) -> ByteReceiveStream:
        assert self._process.stdout is not None
        return self._process.stdout

    @property
    def returncode(self) -> int | None:
        return self._process.returncode

    async def drain_stderr(self) -> None:
        assert self._process.stderr is not None
        with contextlib.suppress(anyio.EndOfStream, anyio.BrokenResourceError, anyio.ClosedResourceError):
            async for chunk in self._process.stderr:
                self._stderr_tail += chunk
                del self._stderr_tail[:-STDERR_TAIL_BYTES]

    async def finish_stderr(self, timeout: float) -> None:
        """Read what is left of stderr (the drain task may have been cancelled before the agent's last words)."""
        with anyio.move_on_after(timeout):
            await self.drain_stderr()

    def stderr_tail(self, lines: int = 8) -> str:
        text = self._stderr_tail.decode(errors="replace").strip()
        return "\n".join(text.splitlines()[-lines:])

    async def wait_exit(self, timeout: float) -> int | None:
        with anyio.move_on_after(timeout):
            await self._process.wait()
        return self._process.returncode

    async def stop(self, grace: float) -> None:
        """Close stdin, give the agent `grace` seconds to exit, then terminate its group. Shielded: it runs while
        the chat is being cancelled, and it always ends within grace + TERM_WAIT + a moment."""
        with anyio.CancelScope(shield=True):
            with contextlib.suppress(anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
                await self.stdin.aclose()
            if await self.wait_exit(grace) is None:
                self._signal_group(signal.SIGTERM)
                if await self.wait_exit(TERM_WAIT) is None:
                    self._signal_group(signal.SIGKILL)
                    await self.wait_exit(TERM_WAIT)
            for stream in (self._process.stdout, self._process.stderr):
                if stream is not None:
                    with contextlib.suppress(OSError, anyio.BrokenResourceError):
                        await stream.aclose()

    def _signal_group(self, number: signal.Signals) -> None:
        # The agent leads its own session, so its process group id is its pid (never ours: start_new_session).
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self._process.pid, number)
