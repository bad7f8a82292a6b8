"""Shell commands run as local child processes, for clients that do not offer terminals.

Each command runs as `/bin/sh -c LINE` in its own process group (through `ProcessTable`), so a cancel or a timeout
takes down everything it started. Output is kept up to a limit and drained past it, so a chatty command never
blocks on a full pipe.
"""

from __future__ import annotations

import signal
from collections.abc import Awaitable, Callable
from pathlib import Path

import anyio

from acp_server.runtime.ports import CommandResult
from acp_server.runtime.processes import ProcessTable

__all__ = ["OUTPUT_LIMIT", "LocalCommandRunner"]

OUTPUT_LIMIT = 256 * 1024


class LocalCommandRunner:
    """Per turn: knows the turn's cleanup deadline, so killing a cancelled command is bounded by it."""

    def __init__(self, processes: ProcessTable, cleanup_deadline: Callable[[], float]) -> None:
        self._processes = processes
        self._cleanup_deadline = cleanup_deadline

    async def run(
        self,
        command: str,
        cwd: Path,
        timeout: float | None,
        on_terminal: Callable[[str], Awaitable[None]],
    ) -> CommandResult:
        process = await self._processes.open(["/bin/sh", "-c", command], cwd=str(cwd))
        output = bytearray()
        truncated = False
        try:
            with anyio.move_on_after(float("inf") if timeout is None else timeout) as timer:
                assert process.stdout is not None
                async for piece in process.stdout:
                    room = OUTPUT_LIMIT - len(output)
                    if len(piece) > room:
                        truncated = True
                    output += piece[: max(room, 0)]
                await process.wait()
        finally:
            if process.returncode is None:
                # Timed out or cancelled: the whole group goes, within the cleanup deadline even when cancelled.
                with anyio.CancelScope(shield=True), anyio.move_on_at(self._cleanup_deadline()):
                    await self._processes.terminate(process)
            self._processes.forget(process)
        code = process.returncode
        text = output.decode(errors="replace")
        if code is not None and code < 0:
            return CommandResult(text, None, _signal_name(-code), truncated, timer.cancelled_caught)
        return CommandResult(text, code, None, truncated, timer.cancelled_caught)


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return str(number)
