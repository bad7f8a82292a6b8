"""Local child processes: started in their own process group, tracked, and killed as a group.

The one module that knows about process groups and signals (POSIX). Every local command the agent starts goes
through `ProcessTable.open`, so a cancel can kill the whole group and the process can kill every group it started
before it exits, never its own group (an editor may share it). Each gets the child environment
(runtime/child_env.py): the server's own without the secrets it holds.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
from collections.abc import Sequence
from pathlib import Path

import anyio
from anyio.abc import Process

from acp_server.runtime.child_env import KEEP_ALL, ChildEnvPolicy, child_environment

__all__ = ["ProcessTable"]

log = logging.getLogger(__name__)

# How long a group gets to leave after SIGTERM before SIGKILL.
TERM_GRACE = 0.2


class ProcessTable:
    """The process groups this server started and that may still be alive. One per server process."""

    def __init__(self, environment: ChildEnvPolicy = KEEP_ALL) -> None:
        self._environment = environment  # frozen configuration
        self._groups: dict[int, Process] = {}
        # Groups whose leader has exited but whose members (background children) may live on.
        self._lingering: set[int] = set()

    def __len__(self) -> int:
        """Process groups still alive that this server started."""
        self._lingering = {pgid for pgid in self._lingering if _group_alive(pgid)}
        return len(self._groups) + len(self._lingering)

    async def open(self, argv: Sequence[str], *, cwd: str | None = None) -> Process:
        """Start a process group and track it. Shielded: a cancel that lands while the process is being spawned
        must not leave an untracked group running; the caller's next await delivers the cancel, and its cleanup
        kills the group."""
        with anyio.CancelScope(shield=True):
            process = await anyio.open_process(
                list(argv),
                cwd=cwd,
                env=child_environment(self._environment),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
            self._groups[process.pid] = process
        return process

    def forget(self, process: Process, *, keep_group_if_alive: bool = False) -> None:
        self._groups.pop(process.pid, None)
        if keep_group_if_alive and _group_alive(process.pid):
            self._lingering.add(process.pid)

    async def terminate(self, process: Process) -> None:
        """Stop a group politely, then by force; the caller shields this and bounds it with its deadline."""
        _signal_group(process.pid, signal.SIGTERM)
        with anyio.move_on_after(TERM_GRACE):
            await process.wait()
        _signal_group(process.pid, signal.SIGKILL)
        await process.wait()
        self.forget(process)

    def kill_all(self) -> None:
        """SIGKILL every group still tracked. Synchronous: it runs on the way out of the process."""
        for pgid in [*self._groups, *self._lingering]:
            _signal_group(pgid, signal.SIGKILL)
        self._groups.clear()
        self._lingering.clear()


def _signal_group(pgid: int, sig: signal.Signals) -> None:
    if pgid == os.getpgrp():  # never our own group
        return
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:
        pass
    except PermissionError as exc:  # the pid was reused by someone else's process
        log.warning("cannot signal process group %d: %s", pgid, exc)


def _group_alive(pgid: int) -> bool:
    """Whether any member of the group still runs. A group of zombies only (orphans waiting for an init that does not
    reap, as in some containers) is not alive: nothing of it can run again."""
    try:
        os.killpg(pgid, 0)
    except (ProcessLookupError, PermissionError):
        return False
    proc = Path("/proc")
    if not proc.is_dir():
        return True  # no way to tell zombies apart here; err on the side of reporting the group
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":
            return True
    return False
