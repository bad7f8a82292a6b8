"""The launcher that confines one command, then becomes it: `[--write=DIR]... [--no-network] -- ARGV...`.

Started by the server (runtime/sandbox.py builds its command line) as `python -I -S -c BOOT ARGS`, so it imports only
the standard library, landlockpy and this module. It asks Landlock for a domain in which the whole file system may
be read and executed, only the `--write` directories (and the harmless devices) written, no signal sent to a process
outside the domain (ABI 6), and, with `--no-network`, no TCP connection made or socket bound; enforces it on itself
(no_new_privs included), then execs ARGV. The domain holds for ARGV and everything it starts, and cannot be undone.

Why a launcher rather than the server: Landlock confines the calling thread, and the server serves sessions with
other roots; a `preexec_fn` would run Python in a forked child of a threaded process, which can deadlock.

It fails closed: if the domain cannot be made, the command is not run, a line on stderr says why, and the exit
status is 126 (as a shell's for a command that cannot run).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence

__all__ = ["CANNOT_CONFINE", "main"]

# The exit status when the command could not be confined (and so was not run), or could not be executed.
CANNOT_CONFINE = 126
NOT_FOUND = 127
# Devices every command may write, even in read-only: writing there changes nothing on disk.
WRITABLE_DEVICES = ("/dev/null", "/dev/zero", "/dev/full", "/dev/tty", "/dev/ptmx", "/dev/pts")


def _parse(args: Sequence[str]) -> tuple[list[str], bool, list[str]]:
    writable: list[str] = []
    network = True
    for index, arg in enumerate(args):
        if arg == "--":
            if index + 1 == len(args):
                raise ValueError("no command after --")
            return writable, network, list(args[index + 1 :])
        if arg.startswith("--write="):
            writable.append(arg.removeprefix("--write="))
        elif arg == "--no-network":
            network = False
        else:
            raise ValueError(f"unknown argument {arg!r}")
    raise ValueError("no -- before the command")


def confine(writable: Sequence[str], network: bool) -> None:
    """Enforce the domain on this process (and what it execs). Raises OSError (landlockpy's errors are OSErrors)
    when it cannot."""
    from landlockpy import AccessFS, AccessNet, Ruleset, Scope, abi_version, fs_for_abi, net_for_abi

    abi = abi_version()
    if abi < 1:
        raise OSError("this kernel has no Landlock")
    every_fs = fs_for_abi(abi)
    read = AccessFS.READ_FILE | AccessFS.READ_DIR | AccessFS.EXECUTE | AccessFS.IOCTL_DEV
    if network:
        read |= AccessFS.RESOLVE_UNIX  # a Unix socket by path is a network peer: allowed with the network
    device = AccessFS.READ_FILE | AccessFS.WRITE_FILE | AccessFS.TRUNCATE | AccessFS.IOCTL_DEV
    handled_net = AccessNet.NONE if network else net_for_abi(abi)
    # Signals only within the domain (ABI 6; dropped on older kernels): a command cannot kill or stop the editor,
    # the server or the user's other processes. The server, outside the domain, can still kill the command's group.
    scoped = Scope.SIGNAL if network else Scope.SIGNAL | Scope.ABSTRACT_UNIX_SOCKET
    with Ruleset(handled_fs=every_fs, handled_net=handled_net, scoped=scoped) as ruleset:
        ruleset.allow_path("/", read)
        for path in WRITABLE_DEVICES:
            if os.path.exists(path):
                ruleset.allow_path(path, device)
        for path in writable:
            if os.path.isdir(path):
                ruleset.allow_path(path, every_fs)
        ruleset.restrict()


def main(args: Sequence[str]) -> None:
    try:
        writable, network, argv = _parse(args)
        confine(writable, network)
        if not network:
            # Without the network, no session bus either, as far as an environment can say so (a client may still
            # find $XDG_RUNTIME_DIR/bus: Landlock refuses Unix sockets by path only from ABI 9).
            os.environ.pop("DBUS_SESSION_BUS_ADDRESS", None)
    except (OSError, ValueError, ImportError) as exc:
        _say(f"acp-server sandbox: cannot confine the command, so it was not run: {exc}")
        sys.exit(CANNOT_CONFINE)
    try:
        os.execvp(argv[0], argv)
    except OSError as exc:
        _say(f"acp-server sandbox: cannot run {argv[0]}: {exc.strerror or exc}")
        sys.exit(NOT_FOUND if isinstance(exc, FileNotFoundError) else CANNOT_CONFINE)


def _say(line: str) -> None:
    os.write(2, (line + "\n").encode(errors="replace"))
