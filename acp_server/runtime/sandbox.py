"""The sandbox for local commands: what the kernel offers, and the command line that confines one command.

Why it exists: `run_command` runs what a model wrote, with the user's rights. On Linux, Landlock (through the
`landlockpy` package; see pyproject.toml for why it and not bubblewrap) lets a process give up rights for itself and
everything it starts, with no privileges and no namespaces. The `sandbox` setting (settings/choices.py) says how much:

- `workspace-write`, the default: the whole file system may be read and executed; only the session's roots (its
  `cwd` and additional directories), the temp directory (`$TMPDIR`, `/tmp`) and `/dev/shm` may be written, plus
  the harmless devices (`/dev/null`, `/dev/zero`, `/dev/full`, the terminal). `~/.bashrc`, `/etc`, another
  project: refused (EACCES), for the command and for everything it starts, for ever.
  `sandbox_writable` names more directories (`~/.cache`, `~/.cargo`: tools that insist on their caches).
- `read-only`: nothing may be written but those devices.
- `off`: as before, the user's full rights.

`sandbox_network = false` also refuses TCP connections and listening sockets (Landlock ABI 4, Linux 6.7; UDP from
ABI 10) and, from ABI 6, connecting to abstract Unix sockets outside the sandbox. Landlock does not confine
connecting to a Unix socket by path before ABI 9 (the D-Bus session bus, a tmux, docker or ssh-agent socket):
a service outside the sandbox reached that way acts with its own rights. Set-user-ID programs (`sudo`) gain nothing
inside (no_new_privs). On ABI 1 (Linux 5.13 to 5.18) moving or linking a file into another directory is refused even
inside the roots (EXDEV); ABI 2 allows it.

The cost: the launcher is a second Python start per command, about 70 ms of CPU (most of it importing landlockpy,
whose libc lookup runs `ldconfig -p`), small beside a model's turn.

Where no sandbox is possible (not Linux, a kernel before 5.13 or without Landlock enabled, the package missing),
commands run as before; `sandbox_for` says so on stderr when the server starts, and `doctor` reports it.

Each command goes through a small launcher (runtime/sandbox_exec.py) that confines itself, then execs
`/bin/sh -c LINE`: the server itself stays unconfined (each session has its own roots), and no Python code runs in
a forked child of the threaded server (`preexec_fn` is not safe there). The launcher runs isolated (`-I -S`: no
environment variables, no site-packages, no current directory on its path), so nothing a command wrote in a root can
change it. Nothing, that is, unless the server's own code lives in a root (an editable install of a project the
agent works on): then a command could edit the launcher, and that is logged once per set of roots.
"""

from __future__ import annotations

import functools
import logging
import os
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from acp_server.settings.config import Config, SandboxMode

__all__ = ["NETWORK_ABI", "Sandbox", "Support", "describe", "landlock_support", "sandbox_for"]

log = logging.getLogger(__name__)

# The Landlock ABI that can refuse TCP bind and connect.
NETWORK_ABI = 4
# The system call's number, the same on every architecture that has it.
_SYS_LANDLOCK_CREATE_RULESET = 444
# Writable in workspace-write besides the roots and the temp directory: POSIX shared memory and semaphores.
_SHARED_MEMORY = "/dev/shm"


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
        import landlockpy
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
    import ctypes

    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.syscall.restype = ctypes.c_long
        answer = int(libc.syscall(_SYS_LANDLOCK_CREATE_RULESET, None, ctypes.c_size_t(0), ctypes.c_uint32(1)))
    except (OSError, AttributeError):
        return 0
    return max(answer, 0)


@dataclass(frozen=True, slots=True)
class Sandbox:
    """How local commands are confined: the mode (never off here), whether the network stays open, and the kernel's
    Landlock ABI. Frozen: built once from the configuration when the server starts."""

    mode: SandboxMode
    network: bool
    abi: int
    package_dir: str
    # More directories writable in workspace-write (the `sandbox_writable` setting).
    extra: tuple[str, ...] = ()

    def command(self, argv: Sequence[str], roots: Sequence[Path]) -> list[str]:
        """`argv` run by the launcher, confined to write only in `roots` and the temp directory (workspace-write)
        or nowhere (read-only)."""
        writable: list[str] = []
        if self.mode is SandboxMode.WORKSPACE_WRITE:
            writable = [*dict.fromkeys([*(str(root) for root in roots), *_temp_dirs(), *self.extra])]
            _warn_if_launcher_writable(tuple(writable), self.package_dir)
        args = [f"--write={path}" for path in writable]
        if not self.network:
            args.append("--no-network")
        return [sys.executable, "-I", "-S", "-c", _boot(self.package_dir), *args, "--", *argv]

    def words(self) -> str:
        """What it does, for `doctor`, the start-up log and the model."""
        if self.mode is SandboxMode.WORKSPACE_WRITE:
            what = "local commands may write only in the session's directories and the temp directory"
            if self.extra:
                what += f" (and {', '.join(self.extra)})"
        else:
            what = "local commands may write nothing"
        if self.network:
            network = "network allowed"
        elif self.abi >= NETWORK_ABI:
            network = "network off (TCP connections and listening refused)"
        else:
            network = (
                f"network NOT restricted: this kernel's Landlock (ABI {self.abi}) cannot refuse TCP "
                f"(ABI {NETWORK_ABI}, Linux 6.7, can)"
            )
        return f"{self.mode.value} through Landlock ABI {self.abi}: {what}; {network}"


def sandbox_for(config: Config, support: Support | None = None) -> Sandbox | None:
    """The sandbox the configuration asks for, if the machine offers one; None means commands run unconfined.
    Says on stderr (the log) when a sandbox was asked for and cannot be had."""
    if config.sandbox is SandboxMode.OFF:
        log.info("sandbox off: local commands run with the user's full rights")
        return None
    found = landlock_support() if support is None else support
    if found.abi < 1:
        log.warning(
            "no sandbox for commands: %s; local commands run with the user's full rights (--sandbox off hides this)",
            found.reason,
        )
        return None
    sandbox = _sandbox(config, found)
    if not config.sandbox_network and found.abi < NETWORK_ABI:
        log.warning("sandbox: %s", sandbox.words())
    else:
        log.info("sandbox: %s", sandbox.words())
    return sandbox


def describe(config: Config, support: Support | None = None) -> tuple[bool, str]:
    """(all that was asked for in force?, in words) for `doctor`: the same decision as `sandbox_for`, without the
    log. False when commands are unconfined, or when the network was to be closed and the kernel cannot."""
    if config.sandbox is SandboxMode.OFF:
        return False, "off: local commands run with your full rights"
    found = landlock_support() if support is None else support
    if found.abi < 1:
        return False, f"not possible here: {found.reason}; local commands run with your full rights"
    words = _sandbox(config, found).words()
    complete = config.sandbox_network or found.abi >= NETWORK_ABI
    return complete, f"{words} (commands an editor runs in its own terminals are not confined by acp-server)"


def _sandbox(config: Config, found: Support) -> Sandbox:
    return Sandbox(config.sandbox, config.sandbox_network, found.abi, found.package_dir, config.sandbox_writable)


def _temp_dirs() -> list[str]:
    """The temp directory the command will see ($TMPDIR, else /tmp), /tmp itself, and /dev/shm, where they exist."""
    found = [tempfile.gettempdir(), "/tmp", _SHARED_MEMORY]
    return [path for path in found if os.path.isdir(path)]


@functools.cache
def _boot(package_dir: str) -> str:
    """The launcher's `-c` program: the path to this package and to landlockpy, set by hand since `-S` skips
    site-packages, then the launcher's main."""
    here = str(Path(__file__).resolve().parents[2])
    path = [entry for entry in dict.fromkeys([here, package_dir]) if entry]  # never "": the current directory
    return f"import sys;sys.path[:0]={path!r};from acp_server.runtime.sandbox_exec import main;main(sys.argv[1:])"


@functools.cache
def _warn_if_launcher_writable(writable: tuple[str, ...], package_dir: str) -> None:
    """Once per set of writable directories: a launcher a command can edit is no sandbox for the next command."""
    launcher = [str(Path(__file__).resolve().parents[2]), package_dir]
    exposed = [code for code in launcher if any(_beneath(code, root) for root in writable)]
    if exposed:
        log.warning(
            "sandbox: the server's own code (%s) is inside a directory commands may write (%s); a command could "
            "change the sandbox of the commands after it",
            ", ".join(exposed),
            ", ".join(writable),
        )


def _beneath(path: str, root: str) -> bool:
    try:
        return Path(path).resolve().is_relative_to(Path(root).resolve())
    except OSError:
        return False
