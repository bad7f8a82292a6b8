"""The sandbox for local commands: what the kernel offers, and the command line that confines one command.

Why it exists: `run_command` runs what a model wrote, with the user's rights. On Linux, Landlock (through the
`landlockpy` package; see pyproject.toml for why it and not bubblewrap) lets a process give up rights for itself and
everything it starts, with no privileges. The `sandbox` setting (settings/choices.py) says how much:

- `workspace-write`, the default: the whole file system may be read and executed; only the session's roots (its
  `cwd` and additional directories), the temp directory (`$TMPDIR`, `/tmp`) and `/dev/shm` may be written, plus
  the harmless devices (`/dev/null`, `/dev/zero`, `/dev/full`, the terminal). `~/.bashrc`, `/etc`, another
  project: refused (EACCES), for the command and for everything it starts, for ever.
  `sandbox_writable` names more directories (`~/.cache/pip`: tools that insist on their caches).
- `read-only`: nothing may be written but those devices.
- `off`: as before, the user's full rights.

`sandbox_network = false` also refuses TCP connections and listening sockets (Landlock ABI 4, Linux 6.7; UDP from
ABI 10) and, from ABI 6, connecting to abstract Unix sockets outside the sandbox. Where the kernel allows one
(`network_isolation`: `CAP_SYS_ADMIN` as root, a user namespace otherwise), each command also gets a network
namespace of its own with only its loopback: no UDP (DNS included), TCP or abstract Unix socket of the host is
reached, whatever the ABI; else the log and `doctor` say UDP stays open. Nothing confines connecting to a Unix
socket by path before ABI 9 (the D-Bus session bus, a tmux, docker or ssh-agent socket; a path is not a network
name, so the namespace does not either): a service outside the sandbox reached that way acts with its own rights
(`systemd-run --user` starts a process outside it), which `doctor` names. Whatever the network, from ABI 6 a
command may signal only processes of its own domain (Scope.SIGNAL): not the editor, the server or the user's other
processes; the server, outside, can still kill it. Before ABI 3 truncate(2) is not controlled, and `doctor` warns.
Set-user-ID programs (`sudo`) gain nothing inside (no_new_privs). On ABI 1 (Linux 5.13 to 5.18) moving or linking a
file into another directory is refused even inside the roots (EXDEV); ABI 2 allows it.

Landlock does not govern chmod, chown or utime, and a root server's command would keep every capability: the
launcher also puts each command in a mount namespace where all but its writable directories is read-only (when
`mount_isolation` says the kernel allows one here: `CAP_SYS_ADMIN` as root, a user namespace otherwise; else the log
and `doctor` say what stays open; a probe that failed only for now, a timeout or the user-namespace limit, is asked
again before the next command, and meanwhile a sandbox set by name refuses commands rather than run them without
it), and drops every capability but the few a root needs for files it may write. The
server is not dumpable (runtime/processes.py), so no command reads its environment through /proc. docs/sandbox.md
states exactly what is confined and what is not, each with its test.

`serve` also confines what commands read (`Config.sandbox_confine_reads`, shared/design/REMOTE.md decision 5): only
the session's directories, the temp directory and the system's (`SYSTEM_READS`, every `/lib*`), and /dev/urandom,
so a principal's commands read neither a home directory nor another principal's root. The server's own files (state
directory, token file, config file, log, TLS key: `Config.sandbox_hidden`) are hidden even inside those: the
launcher covers each with an empty read-only tmpfs or /dev/null in the command's mount namespace, after checking it
is still the file the server found there (device and inode); without a mount namespace, or once one was moved, no
command runs (fails closed).

The cost: the launcher is a second Python start per command, about 60 ms of CPU (most of it importing landlockpy,
whose libc lookup runs `ldconfig -p`; the namespace and the capabilities add about 5 ms), small beside a model's turn.

Where no sandbox is possible (not Linux, a kernel before 5.13 or without Landlock enabled, the package missing),
it depends on who chose the mode. Set by name (flag, variable, file: `Config.sandbox_explicit`), it fails closed:
every `run_command` is refused with a tool error saying why (`Unconfined(refuse=True)`), and `doctor` FAILs. Left
at the default, commands run as before, `sandbox_for` says so on stderr when the server starts, `doctor` warns, and
each result tells the model the command was not sandboxed.

Each command goes through a small launcher (runtime/sandbox_exec.py) that confines itself, then execs
`/bin/sh -c LINE`: the server itself stays unconfined (each session has its own roots), and no Python code runs in
a forked child of the threaded server (`preexec_fn` is not safe there). The launcher runs isolated (`-I -S`: no
environment variables, no site-packages, no current directory on its path), so nothing a command wrote in a root can
change it. Nothing, that is, unless what it runs before it confines itself lies in a writable directory: the
server's code (an editable install in the project the agent works on; a uvx install in `~/.cache/uv`), landlockpy,
the standard library or the interpreter (by its path and resolved). Then a command could edit the launcher and run
the commands after it unconfined, so such a directory is never writable (fails closed): it is dropped from the
rules, said on stderr once per set of directories (the temp directory's already at start-up), named by `doctor`
when `sandbox_writable` or the temp directory holds it, and named to the model beside a write it refused.
"""

from __future__ import annotations

import functools
import logging
import os
import subprocess
import sys
import tempfile
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from acp_server.settings.config import Config, SandboxMode

__all__ = [
    "NETWORK_ABI",
    "Isolation",
    "MountIsolation",
    "Sandbox",
    "Support",
    "Unconfined",
    "describe",
    "landlock_support",
    "mount_isolation",
    "network_isolation",
    "sandbox_for",
    "system_reads",
    "temp_dirs",
]

log = logging.getLogger(__name__)

# The Landlock ABI that can refuse TCP bind and connect.
NETWORK_ABI = 4
# The Landlock ABI that controls truncate(2) (before it, a command may truncate any file it can read).
_TRUNCATE_ABI = 3
# The Landlock ABI that scopes abstract Unix sockets to the domain.
_ABSTRACT_UNIX_ABI = 6
# The Landlock ABI that controls connecting to a Unix socket by path (the D-Bus session bus, systemd's).
_UNIX_SOCKET_ABI = 9
# The Landlock ABI that can refuse UDP (landlockpy's table of each right's first ABI).
_UDP_ABI = 10
# The system call's number, the same on every architecture that has it.
_SYS_LANDLOCK_CREATE_RULESET = 444
# Writable in workspace-write besides the roots and the temp directory: POSIX shared memory and semaphores.
_SHARED_MEMORY = "/dev/shm"
# How long the launcher's probe of mount namespaces may take (a Python start, on a loaded machine).
_PROBE_TIMEOUT = 30.0


@dataclass(frozen=True, slots=True)
class Support:
    """What this machine offers: the Landlock ABI version (0: none), and why none, in words."""

    abi: int
    reason: str = ""
    # Where the landlockpy package lives (the launcher's path), when it is installed.
    package_dir: str = ""


@functools.cache
def landlock_support() -> Support:
    """Asked once per process (a system call, and ctypes): whether Landlock can confine a command here."""
    if sys.platform != "linux":
        return Support(0, f"Landlock is a Linux feature and this is {sys.platform}")
    if not sys.executable:
        return Support(0, "this Python (embedded) names no interpreter to start the sandbox's launcher with")
    try:
        import landlockpy  # noqa: PLC0415 (landlockpy, Linux only: when the sandbox is first asked)
    except ImportError as exc:
        return Support(0, f"the landlockpy package cannot be imported ({exc}): pip install landlockpy")
    abi = _landlock_abi()
    if abi < 1:
        return Support(
            0,
            f"this kernel ({os.uname().release}) has no Landlock: it needs Linux 5.13 or later with Landlock "
            "enabled (CONFIG_SECURITY_LANDLOCK, and `landlock` in the lsm= boot list)",
        )
    return Support(abi, package_dir=str(Path(landlockpy.__file__).resolve().parent.parent))


def _landlock_abi() -> int:
    """landlock_create_ruleset(NULL, 0, LANDLOCK_CREATE_RULESET_VERSION): the kernel's Landlock ABI, or 0 (ENOSYS: too
    old; EOPNOTSUPP: disabled at boot). Asked directly rather than through landlockpy, whose libc lookup
    (ctypes.util.find_library) runs `ldconfig -p`: a child process the server's start-up need not pay for."""
    import ctypes  # noqa: PLC0415 (start-up: ctypes costs ms; only for the Landlock ABI probe)

    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.syscall.restype = ctypes.c_long
        answer = int(libc.syscall(_SYS_LANDLOCK_CREATE_RULESET, None, ctypes.c_size_t(0), ctypes.c_uint32(1)))
    except (OSError, AttributeError):
        return 0
    return max(answer, 0)


@dataclass(frozen=True, slots=True)
class Isolation:
    """Whether the launcher can put a command in a namespace of its own (`ok`): a mount namespace where all but its
    writable directories is read-only, or a network namespace with only its loopback; and if not, why, in words."""

    ok: bool
    reason: str = ""
    # Whether the answer holds for the rest of the process: a success, or the kernel's definitive refusal (EPERM,
    # EACCES, ENOSYS, EINVAL: sandbox_exec.PROBE_REFUSED). Not a timeout on a loaded machine or the user-namespace
    # limit reached (EAGAIN, ENOSPC): that probe is asked again before the next command.
    lasting: bool = True


MountIsolation = Isolation  # its first name, before the network namespace

_probing = threading.Lock()
# The launcher's exit status for a definitive refusal: sandbox_exec.PROBE_REFUSED (not imported: ctypes at start-up).
_PROBE_REFUSED = 3


def _probe(package_dir: str, flag: str) -> Isolation:
    """Runs the launcher's probe (a Python start, about 20 ms: never at start-up, but on a worker thread before the
    first command, and by `doctor`)."""
    try:
        done = subprocess.run(
            [sys.executable, "-I", "-S", "-c", _boot(package_dir), flag],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            timeout=_PROBE_TIMEOUT,
            check=False,
        )
    except (OSError, subprocess.SubprocessError) as exc:  # a timeout too: a loaded machine, asked again
        return Isolation(False, f"the probe could not run: {exc}", lasting=False)
    said = done.stderr.decode(errors="replace").strip().splitlines()
    if done.returncode == 0:
        return Isolation(True)
    return Isolation(
        False, said[-1] if said else f"exit status {done.returncode}", lasting=done.returncode == _PROBE_REFUSED
    )


class _Probes:
    """What the kernel answered this process (as `functools.cache` kept it before, but only lasting answers): each
    probe's lasting answer by (flag, package directory), and the probes whose "no" was said on stderr. Machine
    facts shared by every session, not run state; used under `_probing`."""

    def __init__(self) -> None:
        self.kept: dict[tuple[str, str], Isolation] = {}
        self.warned: set[str] = set()

    def ask(self, package_dir: str, flag: str, warning: str) -> Isolation:
        """The probe's answer: kept once it is lasting (a success or a definitive refusal), else asked again next
        time, so a failure for now does not lower the sandbox for good. Says on stderr, once per process, when the
        answer is no."""
        found = self.kept.get((flag, package_dir))
        if found is not None:
            return found
        found = _probe(package_dir, flag)
        if found.lasting:
            self.kept[flag, package_dir] = found
        if not found.ok and flag not in self.warned:
            self.warned.add(flag)
            log.warning(warning, found.reason if found.lasting else f"{found.reason}; asked again for the next command")
        return found


_probes = _Probes()


def _probe_mounts(package_dir: str) -> Isolation:
    return _probes.ask(
        package_dir,
        "--probe-mounts",
        "sandbox: no read-only mount namespace for commands (%s): they can chmod, chown and touch files outside "
        "the directories they may write",
    )


def mount_isolation(package_dir: str) -> Isolation:
    """Whether commands get a mount namespace where all else is read-only; the probe runs once per process
    (again before each command while it fails only for now)."""
    if sys.platform != "linux":
        return Isolation(False, "mount namespaces are a Linux feature")
    with _probing:  # the first commands of two sessions at once: one probe, one warning
        return _probe_mounts(package_dir)


def _probe_network(package_dir: str) -> Isolation:
    """Asked only when the network is to be off."""
    return _probes.ask(
        package_dir,
        "--probe-network",
        "sandbox: no network namespace for commands (%s): with the network off they still send UDP (DNS "
        "included) anywhere; only TCP is refused (Landlock)",
    )


def network_isolation(package_dir: str) -> Isolation:
    """Whether commands without the network get a network namespace of their own (only their loopback); the probe
    runs once per process (again before each command while it fails only for now)."""
    if sys.platform != "linux":
        return Isolation(False, "network namespaces are a Linux feature")
    with _probing:
        return _probe_network(package_dir)


@dataclass(frozen=True, slots=True)
class Unconfined:
    """A sandbox was asked for and the machine offers none (`reason`). `refuse`: it was asked for by name (flag,
    variable or file), so commands are refused rather than run with the user's rights; else (the default mode)
    they run unconfined and the model is told so with each result."""

    reason: str
    refuse: bool


@dataclass(frozen=True, slots=True)
class Sandbox:
    """How local commands are confined: the mode (never off here), whether the network stays open, and the kernel's
    Landlock ABI. Frozen: built once from the configuration when the server starts."""

    mode: SandboxMode
    network: bool
    abi: int
    package_dir: str
    # More directories writable in workspace-write (the `sandbox_writable` setting), resolved when the sandbox is
    # made (see `_sandbox`): as the session's directories, never resolved again once a command may have run.
    extra: tuple[str, ...] = ()
    # Asked for by name (`Config.sandbox_explicit`): a command is refused rather than run less confined than this
    # machine allows when a namespace's probe failed for now (`refusal`).
    explicit: bool = False
    # None: commands may read all of /. Else only these system directories (`Config.sandbox_confine_reads`: `serve`),
    # the session's directories and the temp directory.
    reads: tuple[str, ...] | None = None
    # (st_dev, st_ino, real path) of the server's own files, as found when the sandbox was made: hidden from commands
    # where a read rule would reach them (sandbox_exec.py `hide`), the identity so a moved one is noticed.
    hidden: tuple[tuple[int, int, str], ...] = ()

    def refusal(self, mounts: Isolation, net: Isolation | None = None) -> str | None:
        """Why a command must not run, or None: the sandbox was asked for by name and a namespace the kernel may
        well allow could not be had just now (its probe timed out, the user-namespace limit was reached). A lasting
        refusal is what this machine offers (the log and `doctor` say what stays open): commands run without it."""
        if not self.explicit:
            return None
        for found, what in ((mounts, "read-only mount namespace"), (net, "network namespace")):
            if found is not None and not found.ok and not found.lasting:
                return (
                    f"the {self.mode.value} sandbox was asked for, and its {what} could not be had just now "
                    f"({found.reason}); so the command was not run: it may work if tried again"
                )
        return None

    def command(
        self, argv: Sequence[str], roots: Sequence[Path], *, mounts: bool = False, netns: bool = False
    ) -> list[str]:
        """`argv` run by the launcher, confined to write only in `roots` and the temp directory (workspace-write)
        or nowhere (read-only). A directory holding the launcher's own code or interpreter is never writable.
        `mounts`: in a mount namespace where all else is read-only (`mount_isolation()` says whether it can be had);
        `netns`: without the network, in a network namespace of its own too (`network_isolation()`)."""
        writable: tuple[str, ...] = ()
        if self.mode is SandboxMode.WORKSPACE_WRITE:
            writable = _safe_writable(self._asked(roots), self.package_dir)
        args = [f"--write={path}" for path in writable]
        if self.reads is not None:
            readable = dict.fromkeys([*self.reads, *(str(root) for root in roots), *_temp_dirs()])
            args += [f"--read={path}" for path in readable]
            args += [f"--hide={dev}:{ino}:{path}" for dev, ino, path in self.hidden]
        if not self.network:
            args.append("--no-network")
            if netns:
                args.append("--netns")
        if mounts:
            args.append("--mounts")
        return [sys.executable, "-I", "-S", "-c", _boot(self.package_dir), *args, "--", *argv]

    def _asked(self, roots: Sequence[Path]) -> tuple[str, ...]:
        """What workspace-write would make writable for a session with these roots, before the launcher's check."""
        return tuple(dict.fromkeys([*(str(root) for root in roots), *_temp_dirs(), *self.extra]))

    def refused(self, roots: Sequence[Path]) -> tuple[str, ...]:
        """In words, each directory a session with these roots would have writable and does not, because it holds
        (or lies inside) what the launcher runs (`_safe_writable`): for the model, beside a refused write, which
        otherwise reads as a plain EACCES in a directory the rules seem to allow (a checkout under /tmp: all of /tmp
        is refused)."""
        if self.mode is not SandboxMode.WORKSPACE_WRITE:
            return ()
        found: list[str] = []
        for root in self._asked(roots):
            exposed = _exposed(root, self.package_dir)
            if exposed:
                found.append(f"{root} is NOT writable: {_dropped_because(exposed)}")
        return tuple(found)

    def words(self, mounts: Isolation | None = None, net: Isolation | None = None) -> str:
        """What it does, for `doctor`, the start-up log and the model; with `mounts` and `net` (doctor's probes),
        also what the mount and network namespaces and, for root, the capabilities add."""
        if self.mode is SandboxMode.WORKSPACE_WRITE:
            what = "local commands may write only in the session's directories and the temp directory"
            kept = [path for path in self.extra if not _exposed(path, self.package_dir)]
            if kept:
                what += f" (and {', '.join(kept)})"
        else:
            what = "local commands may write nothing"
        if self.reads is not None:
            what += (
                f", and read only the session's directories, the temp directory and {', '.join(self.reads)} (the "
                "server's own files hidden)"
            )
        if self.network:
            network = "network allowed"
        elif net is not None and net.ok:
            network = (
                "network off: UDP (DNS included), TCP and abstract Unix sockets reach nothing outside (a network "
                "namespace with only its own loopback"
                + (", and Landlock refuses TCP connections and listening" if self.abi >= NETWORK_ABI else "")
                + "); Unix sockets by path are still reached"
            )
        elif self.abi >= NETWORK_ABI:
            network = "network off (TCP connections and listening refused)"
        else:
            network = (
                f"network NOT restricted: this kernel's Landlock (ABI {self.abi}) cannot refuse TCP "
                f"(ABI {NETWORK_ABI}, Linux 6.7, can)"
            )
        more = []
        if mounts is not None and mounts.ok:
            more.append("no chmod, chown or touch elsewhere either (a mount namespace where all else is read-only)")
        if os.geteuid() == 0:
            more.append(
                "as this server runs as root, its commands keep only CAP_CHOWN, CAP_DAC_OVERRIDE, CAP_FOWNER, "
                "CAP_FSETID and CAP_NET_BIND_SERVICE"
            )
        return f"{self.mode.value} through Landlock ABI {self.abi}: {what}; {network}" + "".join(
            f"; {part}" for part in [*more, *self.gaps(mounts, net)]
        )

    def gaps(self, mounts: Isolation | None = None, net: Isolation | None = None) -> list[str]:
        """What this kernel's Landlock leaves open that the setting would close, in words (empty: nothing); with
        `mounts`, also whether metadata outside the writable directories is protected; with `net`, whether UDP is."""
        found = []
        if mounts is not None and not mounts.ok:
            found.append(
                "metadata NOT protected outside the writable directories: chmod, chown and touch -d work on any file "
                f"the user owns (Landlock does not govern them, and no read-only mount namespace here: {mounts.reason})"
            )
        if self.abi < _TRUNCATE_ABI:
            found.append(
                f"NOT controlled by this kernel's Landlock (ABI {self.abi}): truncating files (`truncate -s 0 "
                f"~/.bashrc` works anywhere; ABI {_TRUNCATE_ABI}, Linux 6.2, refuses it)"
            )
        if not self.network and net is not None and not net.ok and self.abi < _UDP_ABI:
            found.append(
                f"UDP NOT restricted (DNS included): a command sends datagrams anywhere (no network namespace here: "
                f"{net.reason}; Landlock ABI {_UDP_ABI} can)"
            )
        if not self.network and net is not None and not net.ok and self.abi < _ABSTRACT_UNIX_ABI:
            found.append(
                f"abstract Unix sockets NOT restricted (ABI {_ABSTRACT_UNIX_ABI}, or a network namespace, can): "
                "a command reaches any the host listens on"
            )
        if not self.network and self.abi < _UNIX_SOCKET_ABI:
            found.append(
                f"Unix sockets by path NOT restricted (ABI {_UNIX_SOCKET_ABI} can): a command can reach the D-Bus "
                "session bus or `systemd-run --user` and start processes outside the sandbox"
            )
        return found

    def problems(self) -> list[str]:
        """What the configuration asks for that will not be done, for `doctor` and the start-up log: writable
        directories dropped because they hold the launcher, or missing."""
        found: list[str] = []
        if self.mode is not SandboxMode.WORKSPACE_WRITE:
            return found
        # The temp directory is known from the start, unlike the sessions' roots: one that holds the server's own
        # code (a checkout or venv under /tmp) is refused to every command, and the start-up log says so and why.
        for path in _temp_dirs():
            exposed = _exposed(path, self.package_dir)
            if exposed and path not in self.extra:
                found.append(f"the temp directory {path} NOT writable: {_dropped_because(exposed)}")
        for path in self.extra:
            exposed = _exposed(path, self.package_dir)
            if exposed:
                found.append(f"{path} NOT writable: {_dropped_because(exposed)}")
            elif not os.path.isdir(path):
                found.append(f"sandbox_writable {path} does not exist (nothing will be writable there)")
        return found


def sandbox_for(config: Config, support: Support | None = None) -> Sandbox | Unconfined | None:
    """The sandbox the configuration asks for, if the machine offers one; None means commands run unconfined as
    asked (`off`), Unconfined that a sandbox was asked for and cannot be had. Says on stderr (the log) when a sandbox
    was asked for and cannot be had, and what of it will not be done."""
    if config.sandbox is SandboxMode.OFF:
        log.info("sandbox off: local commands run with the user's full rights")
        return None
    found = landlock_support() if support is None else support
    if found.abi < 1:
        if config.sandbox_explicit:
            log.error(
                "no sandbox for commands: %s; the %s sandbox was asked for, so run_command refuses every command "
                "(--sandbox off runs them with the user's full rights)",
                found.reason,
                config.sandbox.value,
            )
            return Unconfined(_refusal(config, found), refuse=True)
        log.warning(
            "no sandbox for commands: %s; local commands run with the user's full rights (--sandbox off hides this)",
            found.reason,
        )
        return Unconfined(found.reason, refuse=False)
    sandbox = _sandbox(config, found)
    for problem in sandbox.problems():
        log.warning("sandbox: %s", problem)
    if sandbox.gaps() or (not config.sandbox_network and found.abi < NETWORK_ABI):
        log.warning("sandbox: %s", sandbox.words())
    else:
        log.info("sandbox: %s", sandbox.words())
    return sandbox


def describe(config: Config, support: Support | None = None) -> tuple[str, str]:
    """("ok" | "warn" | "fail", in words) for `doctor`: the same decision as `sandbox_for`, without the log. "warn"
    when commands are unconfined, or part of what was asked for cannot be done here; "fail" when a sandbox was
    asked for by name and none can be had (commands are refused)."""
    if config.sandbox is SandboxMode.OFF:
        return "warn", "off: local commands run with your full rights"
    found = landlock_support() if support is None else support
    if found.abi < 1:
        if config.sandbox_explicit:
            return "fail", f"not possible here: {_refusal(config, found)}"
        return "warn", f"not possible here: {found.reason}; local commands run with your full rights"
    sandbox = _sandbox(config, found)
    problems = sandbox.problems()
    mounts = mount_isolation(found.package_dir)
    net = None if config.sandbox_network else network_isolation(found.package_dir)
    complete = (
        (config.sandbox_network or found.abi >= NETWORK_ABI or (net is not None and net.ok))
        and not sandbox.gaps(mounts, net)
        and not problems
    )
    words = "; ".join([sandbox.words(mounts, net), *problems])
    return (
        "ok" if complete else "warn",
        f"{words} (commands an editor runs in its own terminals are not confined by acp-server)",
    )


def _refusal(config: Config, found: Support) -> str:
    return (
        f"the {config.sandbox.value} sandbox was asked for but cannot be had: {found.reason}; so no command is run "
        '(set sandbox = "off", or --sandbox off, to run commands with the user\'s full rights)'
    )


def _sandbox(config: Config, found: Support) -> Sandbox:
    extra = tuple(os.path.realpath(path) for path in config.sandbox_writable)
    return Sandbox(
        config.sandbox,
        config.sandbox_network,
        found.abi,
        found.package_dir,
        extra,
        explicit=config.sandbox_explicit,
        reads=system_reads() if config.sandbox_confine_reads else None,
        hidden=_identities(config.sandbox_hidden) if config.sandbox_confine_reads else (),
    )


# What commands may read besides their session's directories and the temp directory when reads are confined: the
# system's programs, libraries and configuration, and /proc (ps, /proc/self; the server is not dumpable, so its own
# entries stay closed to them). Not /home, /root, /var, /srv, /run, /sys, /mnt, /media; not the interpreter or venv
# that runs the server (a command that wants Python uses the system's).
SYSTEM_READS = ("/usr", "/bin", "/sbin", "/etc", "/opt", "/proc")


def system_reads() -> tuple[str, ...]:
    """SYSTEM_READS and every `/lib*` (`/lib`, `/lib64`, `/lib32`, `/libx32`) that exists here, resolved."""
    libs = sorted(str(path) for path in Path("/").glob("lib*") if path.is_dir())
    # Resolved (`/bin` is `/usr/bin` on most systems now): the launcher grants each one reached without a link.
    found = (os.path.realpath(path) for path in (*SYSTEM_READS[:3], *libs, *SYSTEM_READS[3:]) if os.path.exists(path))
    return tuple(dict.fromkeys(found))


def _identities(paths: Sequence[str]) -> tuple[tuple[int, int, str], ...]:
    """Each path that exists, resolved, with its device and inode (what the launcher checks it still finds there)."""
    found: list[tuple[int, int, str]] = []
    for path in dict.fromkeys(os.path.realpath(path) for path in paths):
        try:
            info = os.stat(path)
        except OSError:
            continue  # nothing there to hide (a config file that does not exist)
        found.append((info.st_dev, info.st_ino, path))
    return tuple(found)


def temp_dirs() -> list[str]:
    """The temp directories commands may write (resolved, existing): `serve` keeps its own files' folders apart."""
    return _temp_dirs()


def _temp_dirs() -> list[str]:
    """The temp directory the command will see ($TMPDIR, else /tmp), /tmp itself, and /dev/shm, where they exist,
    resolved once, before any command ran (as the session's directories: see `Session.sandbox_roots`)."""
    return [path for path in _resolved_temp_dirs() if os.path.isdir(path)]


@functools.cache
def _resolved_temp_dirs() -> tuple[str, ...]:
    return tuple(dict.fromkeys(os.path.realpath(path) for path in (tempfile.gettempdir(), "/tmp", _SHARED_MEMORY)))


def _here() -> str:
    """The directory the launcher imports acp_server from (site-packages, or the checkout of an editable install)."""
    return str(Path(__file__).resolve().parents[2])


@functools.cache
def _boot(package_dir: str) -> str:
    """The launcher's `-c` program: the path to this package and to landlockpy, set by hand since `-S` skips
    site-packages, then the launcher's main."""
    path = [entry for entry in dict.fromkeys([_here(), package_dir]) if entry]  # never "": the current directory
    return f"import sys;sys.path[:0]={path!r};from acp_server.runtime.sandbox_exec import main;main(sys.argv[1:])"


@functools.cache
def _launcher_code(package_dir: str) -> tuple[tuple[str, str], ...]:
    """(what, path) of everything the launcher runs before it confines itself: the directories it imports from
    (this package's, landlockpy's: put first on its path, so anything written there shadows even the standard
    library), the standard library, and the interpreter, both the path it is started by (a venv's `bin/python`
    link, its directory resolved) and the file that path resolves to."""
    executable = os.path.abspath(sys.executable)
    found = [
        ("the server's code", _here()),
        ("the landlockpy package", package_dir),
        ("the standard library", os.path.dirname(os.__file__)),
        ("the interpreter", executable),
        ("the interpreter", os.path.join(os.path.realpath(os.path.dirname(executable)), os.path.basename(executable))),
        ("the interpreter", os.path.realpath(executable)),
    ]
    return tuple(dict.fromkeys((what, path) for what, path in found if path))


def _exposed(root: str, package_dir: str) -> list[tuple[str, str]]:
    """What of the launcher's code a command could change if `root` were writable: code inside the root, or the
    root inside the code's directories. Both the path as given and as resolved count (fail closed)."""
    forms = {os.path.abspath(root), os.path.realpath(root)}
    return [
        (what, code)
        for what, code in _launcher_code(package_dir)
        if any(_beneath(code, form) or _beneath(form, code) for form in forms)
    ]


def _dropped_because(exposed: list[tuple[str, str]]) -> str:
    held = ", ".join(dict.fromkeys(f"{what} ({path})" for what, path in exposed))
    return (
        f"it holds or lies inside {held}, which the sandbox's launcher runs before it confines a command: a command "
        "that changed it would run the commands after it unconfined"
    )


# Cached, so said once per set of directories: the paths are the ones resolved before any command ran, and the
# launcher repeats the check on every launch on what it actually grants (sandbox_exec.py `pinned`: each directory
# reached without a link, and not holding its code), so a command that swapped a link in since gains nothing by it.
@functools.cache
def _safe_writable(writable: tuple[str, ...], package_dir: str) -> tuple[str, ...]:
    """`writable` without the directories that expose the launcher's code (fails closed: such a directory is not
    writable at all, rather than a sandbox a command can undo); says so on stderr once per set of directories."""
    kept = []
    for root in writable:
        exposed = _exposed(root, package_dir)
        if exposed:
            log.warning("sandbox: commands may NOT write in %s: %s", root, _dropped_because(exposed))
        else:
            kept.append(root)
    return tuple(kept)


def _beneath(path: str, root: str) -> bool:
    """Whether `path` is `root` or inside it, by name (both are already absolute; resolve them first if needed)."""
    return Path(path).is_relative_to(root)
