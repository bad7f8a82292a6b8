"""Shell commands run as local child processes, for clients that do not offer terminals.

Each command runs as `/bin/sh -c LINE` in its own process group (through `ProcessTable`), so a cancel or a timeout
takes down everything it started. Output is kept up to a limit and drained past it, so a chatty command never
blocks on a full pipe. With a sandbox (runtime/sandbox.py), the line runs under its launcher, confined to the
session's roots.

Past the limit the runner keeps the output's tail, not its head, as a client terminal's byte limit does (errors are
at the end): `OutputTail` holds it, and a display terminal (protocol/v2/terminals.py) may share it to resync its
client with what the model reads.
"""

from __future__ import annotations

import signal
from collections.abc import Awaitable, Callable
from pathlib import Path

import anyio
from anyio.abc import Process

from acp_server.errors import ToolError
from acp_server.runtime.ports import CommandResult
from acp_server.runtime.processes import ProcessTable
from acp_server.runtime.sandbox import Sandbox, Unconfined, mount_isolation, network_isolation

__all__ = ["OUTPUT_LIMIT", "LocalCommandRunner", "OutputTail"]

OUTPUT_LIMIT = 256 * 1024
# After the shell exits, how long output still in the pipe is read before the command counts as done.
BACKGROUND_DRAIN = 0.05


class OutputTail:
    """The last `OUTPUT_LIMIT` bytes of a command's output, and how many bytes before them were dropped."""

    __slots__ = ("data", "dropped")

    def __init__(self) -> None:
        self.data = bytearray()
        self.dropped = 0

    def add(self, piece: bytes) -> None:
        data = self.data
        data += piece
        over = len(data) - OUTPUT_LIMIT
        if over > 0:
            del data[:over]
            self.dropped += over


class LocalCommandRunner:
    """Per turn: knows the turn's cleanup deadline, so killing a cancelled command is bounded by it."""

    def __init__(
        self,
        processes: ProcessTable,
        cleanup_deadline: Callable[[], float],
        sandbox: Sandbox | Unconfined | None = None,
        roots: tuple[Path, ...] = (),
        *,
        on_output: Callable[[bytes], Awaitable[None]] | None = None,
        on_started: Callable[[Process], None] | None = None,
        output: OutputTail | None = None,
    ) -> None:
        """`sandbox`: None runs commands with the user's rights; Unconfined too, saying so to the model, or refuses
        them when the sandbox was asked for by name; else they may write only in `roots` (the session's
        directories) and the temp directory, or nowhere, as the sandbox says. `on_output`: each piece of output as
        it is read (for a display terminal); `on_started`: the process, once it runs (so it can be stopped on its
        own); `output`: where the output is kept (so its owner can read the tail as it grows), a new one per command
        by default."""
        self._processes = processes
        self._cleanup_deadline = cleanup_deadline
        self._sandbox = sandbox
        self._roots = roots
        self._on_output = on_output
        self._on_started = on_started
        self._output = output

    async def run(
        self,
        command: str,
        cwd: Path,
        timeout: float | None,
        on_terminal: Callable[[str], Awaitable[None]],
    ) -> CommandResult:
        argv = ["/bin/sh", "-c", command]
        unconfined: str | None = None
        if isinstance(self._sandbox, Unconfined):
            if self._sandbox.refuse:
                raise ToolError(self._sandbox.reason)
            unconfined = self._sandbox.reason
        elif self._sandbox is not None:
            # Asked once per process (until the answer is lasting), off the event loop (it starts the launcher's
            # probe): see runtime/sandbox.py. A cancel does not wait for the probe (bounded by its timeout), which
            # finishes and, lasting, is kept for the next.
            mounts = await anyio.to_thread.run_sync(mount_isolation, self._sandbox.package_dir, abandon_on_cancel=True)
            net = None
            if not self._sandbox.network:  # the network namespace's probe only where it is used
                net = await anyio.to_thread.run_sync(
                    network_isolation, self._sandbox.package_dir, abandon_on_cancel=True
                )
            refusal = self._sandbox.refusal(mounts, net)
            if refusal is not None:  # asked for by name: not run less confined than the machine allows
                raise ToolError(refusal)
            argv = self._sandbox.command(argv, self._roots, mounts=mounts.ok, netns=net is not None and net.ok)
        process = await self._processes.open(argv, cwd=str(cwd))
        if self._on_started is not None:
            self._on_started(process)
        on_output = self._on_output
        output = self._output if self._output is not None else OutputTail()

        output_ended = anyio.Event()

        async def read_output() -> None:
            assert process.stdout is not None
            try:
                async for piece in process.stdout:
                    output.add(piece)  # first: what is shown of this piece may be the tail it leaves
                    if on_output is not None:
                        await on_output(piece)
            finally:
                output_ended.set()

        try:
            with anyio.move_on_after(float("inf") if timeout is None else timeout) as timer:
                async with anyio.create_task_group() as readers:
                    readers.start_soon(read_output)
                    await process.wait()
                    # The shell is done; a child it left in the background (`server &`) may keep the pipe open
                    # for ever. Take what is already there, then stop reading.
                    with anyio.move_on_after(BACKGROUND_DRAIN):
                        await output_ended.wait()
                    readers.cancel_scope.cancel()
        finally:
            if process.returncode is None:
                # Timed out or cancelled: the whole group goes, within the cleanup deadline even when cancelled.
                with anyio.CancelScope(shield=True), anyio.move_on_at(self._cleanup_deadline()):
                    await self._processes.terminate(process)
            # Background children of a finished shell stay tracked, so they are killed when the server exits.
            self._processes.forget(process, keep_group_if_alive=True)
        code = process.returncode
        text = output.data.decode(errors="replace")
        truncated = output.dropped > 0
        sandbox = self._sandbox.mode.value if isinstance(self._sandbox, Sandbox) else None
        refused = self._sandbox.refused(self._roots) if isinstance(self._sandbox, Sandbox) else ()
        if code is not None and code < 0:
            return CommandResult(
                text, None, _signal_name(-code), truncated, timer.cancelled_caught, sandbox, unconfined, refused
            )
        return CommandResult(text, code, None, truncated, timer.cancelled_caught, sandbox, unconfined, refused)


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return str(number)
