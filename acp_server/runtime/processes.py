"""Local child processes: started in their own process group, tracked, and killed as a group.

The one module that knows about process groups and signals (POSIX). Every local command the agent starts goes
through `ProcessTable.open`, so a cancel can kill the whole group and the process can kill every group it started
before it exits, never its own group (an editor may share it). Each gets the child environment
(runtime/child_env.py): the server's own without the secrets it holds.

A process that leaves its group (`setsid`, a double-forked daemon) is out of reach of `killpg`. When the server owns
its process (`acp-server` itself, not an embedder calling `serve`), the table adopts orphans: on Linux the process
becomes a child subreaper before its first child starts, so such orphans are re-parented to it instead of to init; at
exit `kill_all` finds them as descendants in /proc and kills them too, and orphans that already died are reaped
rather than left as zombies of a long-lived server.

Each group remembers the session whose turn started it (`TURN_SESSION`, set by the turn's own task and inherited by
the tasks of its tool calls), so a connection's statistics count only its own sessions' processes (REMOTE.md
decision 10: `_acp_server/stats` shows a remote connection nothing of another's).
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import signal
import subprocess
import sys
from collections.abc import Collection, Sequence
from contextvars import ContextVar
from pathlib import Path
from typing import Protocol

import anyio
from anyio.abc import Process

from acp_server.runtime.child_env import KEEP_ALL, ChildEnvPolicy, child_environment

__all__ = ["TURN_SESSION", "ProcessTable", "Processes"]

log = logging.getLogger(__name__)

# The session whose turn runs in this task (and the tasks it starts): what `ProcessTable.open` files a group under.
TURN_SESSION: ContextVar[str | None] = ContextVar("TURN_SESSION", default=None)

# How long a group gets to leave after SIGTERM before SIGKILL.
TERM_GRACE = 0.2
# <linux/prctl.h>: orphaned descendants are re-parented to the nearest subreaper ancestor instead of to init.
PR_SET_CHILD_SUBREAPER = 36
# <linux/prctl.h>: whether a process of the same uid may read our memory, environment and files through /proc.
PR_SET_DUMPABLE = 4
# At exit, how many times the descendants are killed and looked for again (one may fork while we kill its parent).
KILL_ROUNDS = 5


class Processes(Protocol):
    """What a tool may do with the table (`ToolContext.processes`): a fenced call's view refuses `open`."""

    async def open(self, argv: Sequence[str], *, cwd: str | None = None) -> Process: ...

    async def terminate(self, process: Process) -> None: ...

    def forget(self, process: Process, *, keep_group_if_alive: bool = False) -> None: ...


class ProcessTable:
    """The process groups this server started and that may still be alive. One per server process."""

    def __init__(self, environment: ChildEnvPolicy = KEEP_ALL, *, adopt_orphans: bool = False) -> None:
        """`environment`: what children see (frozen configuration). `adopt_orphans`: this server owns its process,
        so every descendant is its to kill at exit (never for an embedder, whose other children are not ours)."""
        self._environment = environment
        self._adopt_orphans = adopt_orphans
        self._groups: dict[int, Process] = {}
        # Groups whose leader has exited but whose members (background children) may live on.
        self._lingering: set[int] = set()
        # Leaders that have exited while their output pipe is still open (a background child, in the group or out
        # of it, holds it): kept so the pipe can be let go of at exit (see `release`).
        self._open_pipes: dict[int, Process] = {}
        # Killed at exit, their pipes not yet seen closed.
        self._released: list[Process] = []
        # The session whose turn started each group still tracked (TURN_SESSION at `open`; absent: none).
        self._sessions: dict[int, str] = {}

    def __len__(self) -> int:
        """Process groups still alive that this server started."""
        return len(self._alive())

    def started_by(self, session_ids: Collection[str]) -> int:
        """How many of them the turns of these sessions started (a connection's own, for its statistics)."""
        return sum(1 for pgid in self._alive() if self._sessions.get(pgid) in session_ids)

    def _alive(self) -> list[int]:
        self._lingering = {pgid for pgid in self._lingering if _group_alive(pgid)}
        alive = [*self._groups, *self._lingering]
        self._sessions = {pgid: self._sessions[pgid] for pgid in alive if pgid in self._sessions}
        return alive

    async def open(self, argv: Sequence[str], *, cwd: str | None = None) -> Process:
        """Start a process group and track it. Shielded: a cancel that lands while the process is being spawned
        must not leave an untracked group running; the caller's next await delivers the cancel, and its cleanup
        kills the group."""
        self.adopt_orphans()
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
            session_id = TURN_SESSION.get()
            if session_id is None:
                self._sessions.pop(process.pid, None)  # a reused pid: not the old group's session's
            else:
                self._sessions[process.pid] = session_id
        return process

    def forget(self, process: Process, *, keep_group_if_alive: bool = False) -> None:
        self._groups.pop(process.pid, None)
        if keep_group_if_alive and _group_alive(process.pid):
            self._lingering.add(process.pid)
        self._open_pipes = {pid: held for pid, held in self._open_pipes.items() if _output_open(held)}
        if _output_open(process):
            self._open_pipes[process.pid] = process
        if self._adopt_orphans:
            _reap_orphans()

    def adopt_orphans(self) -> None:
        """Call before starting a child: from then on its orphans are re-parented to us, and it cannot read our
        memory or environment (Linux). Not at start-up: ctypes costs milliseconds there, and there are no orphans
        (nor children to read anything) before there are children."""
        if self._adopt_orphans:
            become_subreaper()
            become_undumpable()

    async def terminate(self, process: Process) -> None:
        """Stop a group politely, then by force; the caller shields this and bounds it with its deadline."""
        _signal_group(process.pid, signal.SIGTERM)
        with anyio.move_on_after(TERM_GRACE):
            await process.wait()
        _signal_group(process.pid, signal.SIGKILL)
        await process.wait()
        self.forget(process)

    def kill(self, process: Process) -> None:
        """SIGKILL a group at once, without waiting: for a turn sealed while its command still runs (the bounded
        `terminate` was cut short by the cleanup deadline), so that nothing of the turn keeps running."""
        _signal_group(process.pid, signal.SIGKILL)

    def kill_all(self) -> None:
        """SIGKILL every group still tracked and, when adopting orphans, every descendant process wherever its group
        (stdio MCP servers, `setsid` escapees re-parented to us). Synchronous: it runs on the way out of the process."""
        # The tree first, while it is whole: without a subreaper, a `setsid` child is found only under its shell.
        killed: set[int] = set()
        if self._adopt_orphans:
            killed |= _kill_pids(_descendants())
        for pgid in [*self._groups, *self._lingering]:
            _signal_group(pgid, signal.SIGKILL)
        self._released.extend([*self._groups.values(), *self._open_pipes.values()])
        self._groups.clear()
        self._lingering.clear()
        self._open_pipes.clear()
        for _ in range(KILL_ROUNDS if self._adopt_orphans else 0):
            # Only processes not signalled yet (forked meanwhile, or adopted since): a SIGKILLed one may take a
            # moment to die, and reading /proc again for it would only cost time on the way out.
            snapshot = _all_processes()
            _reap_orphans(snapshot)
            tree = [entry for entry in _descendants(snapshot) if entry[3] != "Z" and entry[0] not in killed]
            if not tree:
                break
            killed |= _kill_pids(tree)

    async def release(self, timeout: float) -> None:
        """After `kill_all`, while the event loop still runs: let go of every killed group's process. asyncio closes
        a child's transport only once it has seen the child's exit and the end of its output pipe; one still open
        when the loop closes is collected later and fails there ("Event loop is closed", a traceback on stderr).
        So read each pipe to its end and wait for each exit, for `timeout` seconds in all (a SIGKILLed group's
        pipe closes at once); then close what is still open: a pipe that a process out of our reach holds (one
        that left its group where no subreaper adopts it) is ours to close, not its to keep."""
        # RuntimeError: an abandoned turn's reader still waits on a pipe; closing the transport ends that too.
        errors = (anyio.EndOfStream, anyio.ClosedResourceError, anyio.BrokenResourceError, RuntimeError)
        with anyio.move_on_after(timeout):
            for process in self._released:
                if process.stdout is not None:
                    with contextlib.suppress(*errors):
                        while True:
                            await process.stdout.receive()
                await process.wait()
        for process in self._released:
            _close_transport(process)
        self._released.clear()


def _output_open(process: Process) -> bool:
    """Whether the process's output pipe may still be open: asyncio's reader under anyio's stream says whether it
    has reached the end (no public way to ask anyio; where the reader cannot be found, assume open)."""
    at_eof = getattr(getattr(process.stdout, "_stream", None), "at_eof", None)
    return process.stdout is not None and not (callable(at_eof) and at_eof())


def _close_transport(process: Process) -> None:
    """Close the asyncio transport under anyio's process (the server runs on the asyncio backend; anyio has no
    public way to do this). Closing it closes our end of its pipes; a transport already closed ignores it."""
    transport = getattr(getattr(process, "_process", None), "_transport", None)
    if transport is not None:
        transport.close()


@functools.cache
def become_subreaper() -> bool:
    """Linux: adopt our descendants' orphans (PR_SET_CHILD_SUBREAPER), so a child that left its process group is
    still ours to kill at exit. Once per process; False where the kernel does not offer it."""
    if sys.platform != "linux":
        return False
    import ctypes  # noqa: PLC0415 (start-up: ctypes costs ms; loads with the first child)

    try:
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(
            PR_SET_CHILD_SUBREAPER, ctypes.c_ulong(1), ctypes.c_ulong(0), ctypes.c_ulong(0), ctypes.c_ulong(0)
        ):
            raise OSError(ctypes.get_errno(), os.strerror(ctypes.get_errno()))
    except (OSError, AttributeError) as exc:
        log.info("cannot become a child subreaper (orphans of commands go to init): %s", exc)
        return False
    return True


@functools.cache
def become_undumpable() -> bool:
    """Linux: PR_SET_DUMPABLE 0, so a process of our uid without CAP_SYS_PTRACE cannot read our environment (the
    model's API key), memory or open files through /proc/PID, nor trace us (ptrace_may_access(2) requires a
    dumpable target or that capability): a command of a non-root server, and a root server's, whose CAP_SYS_PTRACE
    the sandbox's launcher drops. It also means no core dump holds the key. Our own /proc/self stays readable to us;
    children are dumpable again from their exec on. Once per process; False where the kernel refuses."""
    if sys.platform != "linux":
        return False
    import ctypes  # noqa: PLC0415 (start-up: ctypes costs ms; loads with the first child)

    try:
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(PR_SET_DUMPABLE, ctypes.c_ulong(0), ctypes.c_ulong(0), ctypes.c_ulong(0), ctypes.c_ulong(0)):
            raise OSError(ctypes.get_errno(), os.strerror(ctypes.get_errno()))
    except (OSError, AttributeError) as exc:
        log.warning("cannot hide this process's environment from its commands (PR_SET_DUMPABLE): %s", exc)
        return False
    return True


# (pid, ppid, pgid, state) of one process, from /proc/PID/stat.
_Stat = tuple[int, int, int, str]


def _all_processes() -> list[_Stat]:
    found: list[_Stat] = []
    try:
        entries = os.listdir("/proc")
    except OSError:
        return found  # no /proc: only the process groups can be reached
    for name in entries:
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as file:
                fields = file.read().rsplit(b")", 1)[1].split()
        except (OSError, IndexError):
            continue
        found.append((int(name), int(fields[1]), int(fields[2]), fields[0].decode()))
    return found


def _descendants(snapshot: Sequence[_Stat] | None = None) -> list[_Stat]:
    """Every process below this one (children, their children, ...), zombies included."""
    children: dict[int, list[_Stat]] = {}
    for entry in _all_processes() if snapshot is None else snapshot:
        children.setdefault(entry[1], []).append(entry)
    found: list[_Stat] = []
    parents = [os.getpid()]
    while parents:
        for entry in children.get(parents.pop(), ()):
            found.append(entry)
            parents.append(entry[0])
    return found


def _kill_pids(entries: Sequence[_Stat]) -> set[int]:
    """SIGKILL each live process listed; returns the pids signalled."""
    own_group = os.getpgrp()
    signalled: set[int] = set()
    for pid, _, pgid, state in entries:
        if state == "Z" or pgid == own_group:  # never anything in our own group (an editor may share it)
            continue
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
            signalled.add(pid)
    return signalled


def _reap_orphans(snapshot: Sequence[_Stat] | None = None) -> None:
    """Collect the exit status of orphans re-parented to us that have died. Only processes that do not lead their
    own session: every child we start ourselves (commands, stdio MCP servers) does, and asyncio waits for those; a
    `setsid` orphan that died stays a zombie until we exit (init then reaps it)."""
    if snapshot is None and not _has_dead_child():
        return  # the common case, told by one system call instead of a walk of /proc
    me = os.getpid()
    for pid, ppid, _, state in _all_processes() if snapshot is None else snapshot:
        if ppid != me or state != "Z" or _leads_session(pid):
            continue
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, os.WNOHANG)


def _has_dead_child() -> bool:
    """Whether any child of ours has exited and waits to be reaped; reaps nothing (WNOWAIT). Linux only: elsewhere
    no orphan is ever ours."""
    if sys.platform != "linux":
        return False
    try:
        return os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
    except ChildProcessError:
        return False  # no children at all


def _leads_session(pid: int) -> bool:
    try:
        return os.getsid(pid) == pid
    except OSError:
        return True  # unknown: leave it to whoever started it


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
