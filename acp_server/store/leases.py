"""Who owns a running turn, and whether that owner is still there: the leases of processes sharing one store.

Several servers (one per editor window) share a store. Each registers an owner row identifying its process: the pid,
the process start time from /proc (so a reused pid is not mistaken for it), host, boot id and pid namespace. A turn
left `running` by an owner that is gone is marked `interrupted`; a live owner's turns never are. This module holds
only that judgement (reading /proc, no SQL), so it can be read, and tested, on its own.
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass
from pathlib import Path

__all__ = ["Identity", "own_identity", "owner_alive"]


@dataclass(frozen=True, slots=True)
class Identity:
    pid: int
    start_time: str | None
    host: str
    boot_id: str | None
    pid_ns: str | None


def _proc_stat(pid: int) -> tuple[str, str] | None:
    """(state, start time in clock ticks since boot) of a process, from /proc; None where it cannot be read."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_bytes()
        fields = raw[raw.rindex(b")") + 2 :].split()
        return fields[0].decode(), fields[19].decode()
    except (OSError, ValueError, IndexError):
        return None


def _read_text(path: str) -> str | None:
    try:
        return Path(path).read_text().strip() or None
    except OSError:
        return None


def _pid_namespace() -> str | None:
    try:
        return os.readlink("/proc/self/ns/pid")
    except OSError:
        return None


def own_identity() -> Identity:
    pid = os.getpid()
    stat = _proc_stat(pid)
    return Identity(
        pid=pid,
        start_time=None if stat is None else stat[1],
        host=socket.gethostname(),
        boot_id=_read_text("/proc/sys/kernel/random/boot_id"),
        pid_ns=_pid_namespace(),
    )


def owner_alive(me: Identity, owner: Identity, heartbeat: float, now: float, stale_after: float) -> bool:
    """Is the process behind an owner row still there? Never says no for a process that is alive and checkable."""
    fresh = now - heartbeat < stale_after
    if owner.host != me.host or owner.pid <= 0:
        return fresh  # another machine (a shared home directory): only the heartbeat can tell
    if me.boot_id is not None and owner.boot_id is not None and me.boot_id != owner.boot_id:
        return False  # the machine rebooted since
    if me.pid_ns is None or owner.pid_ns != me.pid_ns:
        return fresh  # another pid namespace (a container): its pids mean nothing here
    try:
        os.kill(owner.pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # exists, belongs to another user
    stat = _proc_stat(owner.pid)
    if stat is None or owner.start_time is None:
        return fresh  # exists, but whether it is the same process cannot be told (no /proc, hidepid)
    state, start_time = stat
    return state not in ("Z", "X") and start_time == owner.start_time
