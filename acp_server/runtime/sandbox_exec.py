"""The launcher that confines one command, then becomes it:
`[--write=DIR]... [--read=PATH]... [--hide=DEV:INO:PATH]... [--no-network] [--mounts] [--netns] -- ARGV...`.

Started by the server (runtime/sandbox.py builds its command line) as `python -I -S -c BOOT ARGS`, so it imports only
the standard library, landlockpy and this module. In this order, each step needing what the next gives up:

1. `--mounts`: a mount namespace of its own in which every mount is read-only but the `--write` directories, bound
   over themselves as they were (a root server makes it with its CAP_SYS_ADMIN; any other in a user namespace of its
   own, mapping only its own uid and gid). Landlock does not govern chmod, chown or utime (nor setxattr); a read-only
   mount refuses them (EROFS), so a command cannot change the metadata of a file outside the directories it may
   write. Needs the new mount API (`open_tree`, `move_mount`, `mount_setattr`: Linux 5.12); the server asks once
   whether it works here (`--probe-mounts`) and passes `--mounts` only then.
   `--netns` (only with `--no-network`): a network namespace of its own too, in the same unshare (as root with
   CAP_SYS_ADMIN, else in the same user namespace), whose only interface is its own loopback, brought up: no UDP
   (DNS included), TCP or abstract Unix socket of the host is reached from it; Unix sockets by path still are (a
   path is a file, not a network name). Landlock refuses UDP only from ABI 10; this closes it on older kernels. The
   server asks once whether it works here (`--probe-network`) and passes `--netns` only then.
   `--hide` (with `--read`): the server's own files, covered where a rule would let the command read them (`hide`).
2. Landlock: a domain in which the whole file system (with `--read`, only those paths, the `--write` directories
   and the devices) may be read and executed, only the `--write` directories (and the harmless devices) written,
   device nodes never made, no signal sent to a process outside the domain (ABI 6), and, with `--no-network`, no
   TCP connection made or socket bound. A Landlocked process may not mount, so the command cannot undo step 1.
3. Capabilities: what a root server's command could do beyond its files (make devices, trace the server and read its
   memory and environment, load modules, raw sockets, ...) is dropped from every capability set, the bounding set
   included, so no exec can bring it back; `KEPT_CAPABILITIES` stay (the command is still root for the files it may
   write). no_new_privs: set-user-ID programs gain nothing.
4. exec ARGV. All of it holds for ARGV and everything it starts, and cannot be undone.

Why a launcher rather than the server: Landlock and namespaces apply to the calling thread, and the server serves
sessions with other roots; a `preexec_fn` would run Python in a forked child of a threaded process, which can deadlock.

It fails closed: if a step cannot be done, the command is not run, a line on stderr says why, and the exit status is
126 (as a shell's for a command that cannot run).
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import stat
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = ["CANNOT_CONFINE", "KEPT_CAPABILITIES", "hide", "main"]

# The exit status when the command could not be confined (and so was not run), or could not be executed.
CANNOT_CONFINE = 126
NOT_FOUND = 127
# The exit status of a probe the kernel refuses for good (`_REFUSED_FOR_GOOD`: EPERM or EACCES, no user namespaces
# for this user or a security module's policy; ENOSYS or EINVAL, a kernel without them or a container's seccomp
# profile): the server keeps that answer for the process. Any other failure (EAGAIN, ENOSPC at the user-namespace
# limit, ENOMEM, a crash) exits 1, and the server asks again next time. runtime/sandbox.py holds the same number (it
# does not import this module: ctypes at start-up).
PROBE_REFUSED = 3
_REFUSED_FOR_GOOD = (errno.EPERM, errno.EACCES, errno.ENOSYS, errno.EINVAL)
# Devices every command may write, even in read-only: writing there changes nothing on disk.
WRITABLE_DEVICES = ("/dev/null", "/dev/zero", "/dev/full", "/dev/tty", "/dev/ptmx", "/dev/pts")
# Devices every command may read when reads are confined (`--read`): randomness. Never a disk: a root command keeps
# CAP_DAC_OVERRIDE, and a raw disk holds every file.
READABLE_DEVICES = ("/dev/urandom", "/dev/random")

# The capabilities a root server's command keeps (<linux/capability.h> numbers): what root needs to work on files it
# may write that belong to another user, as a project mounted into a container does (CAP_CHOWN, CAP_DAC_OVERRIDE,
# CAP_FOWNER, CAP_FSETID: `tar`, `cp -a`, `chmod`, a checkout), and a port below 1024 for a dev server
# (CAP_NET_BIND_SERVICE). Everything else goes, among them CAP_MKNOD (device nodes), CAP_SYS_PTRACE (the server's
# memory and /proc/PID/environ), CAP_DAC_READ_SEARCH (open_by_handle_at), CAP_SETUID/CAP_SETGID (becoming another
# user, whose processes it could then trace), CAP_KILL, CAP_SYS_ADMIN, CAP_SYS_MODULE, CAP_SYS_RAWIO, CAP_SYS_BOOT,
# CAP_SYS_TIME, CAP_NET_RAW, CAP_NET_ADMIN, CAP_LINUX_IMMUTABLE, CAP_SYS_CHROOT, CAP_SETPCAP, CAP_SETFCAP, CAP_BPF,
# CAP_PERFMON. CAP_DAC_OVERRIDE lets it read files of other users, which the sandbox lets every command read anyway.
KEPT_CAPABILITIES = frozenset({0, 1, 3, 4, 10})
_CAP_SETPCAP = 8

# <linux/prctl.h>, <linux/capability.h>, <linux/sched.h>, <linux/mount.h>, <fcntl.h>.
_PR_CAPBSET_READ = 23
_PR_CAPBSET_DROP = 24
_PR_SET_NO_NEW_PRIVS = 38
_PR_CAP_AMBIENT = 47
_PR_CAP_AMBIENT_CLEAR_ALL = 4
_LINUX_CAPABILITY_VERSION_3 = 0x20080522
_CLONE_NEWNS = 0x00020000
_CLONE_NEWUSER = 0x10000000
_CLONE_NEWNET = 0x40000000
_FLAG_NAMES = ((_CLONE_NEWUSER, "CLONE_NEWUSER"), (_CLONE_NEWNS, "CLONE_NEWNS"), (_CLONE_NEWNET, "CLONE_NEWNET"))
# <linux/sockios.h>, <net/if.h>, <sys/socket.h>: bringing an interface up. struct ifreq is 40 bytes on 64-bit
# (16 for the name, a union of 24), 32 on 32-bit: the larger, zeroed, serves both.
_SIOCGIFFLAGS = 0x8913
_SIOCSIFFLAGS = 0x8914
_IFF_UP = 0x1
_AF_INET = 2
_SOCK_DGRAM = 2
_SOCK_CLOEXEC = os.O_CLOEXEC
_MS_RDONLY = 0x1
_MS_NOSUID = 0x2
_MS_NODEV = 0x4
_MS_NOEXEC = 0x8
_MS_BIND = 0x1000
_MS_REC = 0x4000
_MS_PRIVATE = 1 << 18
_AT_FDCWD = -100
_AT_RECURSIVE = 0x8000
_AT_EMPTY_PATH = 0x1000
# A directory opened as a handle only (no read), never through a link: see `pinned`.
_NO_LINKS = os.O_PATH | os.O_NOFOLLOW | os.O_DIRECTORY | os.O_CLOEXEC
# The last component of a hidden path, which may be a file: never through a link either (see `hide`).
_NO_LINK_LAST = os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC
_OPEN_TREE_CLONE = 1
_OPEN_TREE_CLOEXEC = os.O_CLOEXEC
_MOVE_MOUNT_F_EMPTY_PATH = 0x4
_MOUNT_ATTR_RDONLY = 0x1
# System call numbers of the new mount API: the same on every architecture but alpha (which Python hardly runs on).
_SYS_OPEN_TREE = 428
_SYS_MOVE_MOUNT = 429
_SYS_MOUNT_SETATTR = 442


class _MountAttr(ctypes.Structure):
    _fields_ = (
        ("attr_set", ctypes.c_uint64),
        ("attr_clr", ctypes.c_uint64),
        ("propagation", ctypes.c_uint64),
        ("userns_fd", ctypes.c_uint64),
    )


class _CapHeader(ctypes.Structure):
    _fields_ = (("version", ctypes.c_uint32), ("pid", ctypes.c_int))


class _CapData(ctypes.Structure):
    _fields_ = (("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32))


class _IfReq(ctypes.Structure):
    _fields_ = (("name", ctypes.c_char * 16), ("flags", ctypes.c_short), ("pad", ctypes.c_char * 22))


@dataclass(frozen=True, slots=True)
class _Args:
    writable: list[str]
    network: bool
    mounts: bool
    netns: bool
    argv: list[str]
    # `--read=PATH`: with any, only these (and `writable`, and the devices) may be read, not all of /.
    readable: list[str] = field(default_factory=list)
    # `--hide=DEV:INO:PATH`: the server's own files, hidden from the command (see `hide`).
    hidden: list[tuple[int, int, str]] = field(default_factory=list)


def _parse(args: Sequence[str]) -> _Args:
    writable: list[str] = []
    readable: list[str] = []
    hidden: list[tuple[int, int, str]] = []
    network = True
    mounts = False
    netns = False
    for index, arg in enumerate(args):
        if arg == "--":
            if index + 1 == len(args):
                raise ValueError("no command after --")
            if netns and network:
                raise ValueError("--netns without --no-network")
            if hidden and not readable:
                raise ValueError("--hide without --read")
            return _Args(writable, network, mounts, netns, list(args[index + 1 :]), readable, hidden)
        if arg.startswith("--write="):
            writable.append(arg.removeprefix("--write="))
        elif arg.startswith("--read="):
            readable.append(arg.removeprefix("--read="))
        elif arg.startswith("--hide="):
            dev, ino, path = arg.removeprefix("--hide=").split(":", 2)
            hidden.append((int(dev), int(ino), path))
        elif arg == "--no-network":
            network = False
        elif arg == "--mounts":
            mounts = True
        elif arg == "--netns":
            netns = True
        else:
            raise ValueError(f"unknown argument {arg!r}")
    raise ValueError("no -- before the command")


def _libc() -> ctypes.CDLL:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    return libc


def _check(result: int, what: str) -> int:
    if result < 0:
        number = ctypes.get_errno()
        raise OSError(number, f"{what}: {os.strerror(number)}")
    return result


def beyond_reach(writable: Sequence[str]) -> list[str]:
    """`writable` without each directory whose path passes through another writable one (by name, or as the links on
    the way resolve now): a command could have replaced it, or a directory on its way, with a link to anywhere (`rm -r
    sub; ln -s /etc sub`), and both Landlock's rule and the mount would follow that link. A real directory inside
    another writable one loses nothing (the outer one's rights hold beneath it); one that now leads elsewhere is not
    writable, and the command's output says why (the model reads it)."""
    resolved = {path: os.path.realpath(path) for path in writable}
    kept: list[str] = []
    for path in writable:
        others = [real for real in resolved.values() if real != resolved[path]]
        through = _passes_through(path, others)
        if through is None:
            kept.append(path)
        elif not any(_inside(resolved[path], other) for other in others):
            _say(
                f"acp-server sandbox: {path} is NOT writable: it lies inside {through}, where a command may have "
                f"replaced it with a link (it now leads to {resolved[path]})"
            )
    return kept


def _passes_through(path: str, roots: Sequence[str]) -> str | None:
    """The first of `roots` that one of `path`'s ancestors, resolved, lies in, or None."""
    ancestor = os.path.abspath(path)
    while ancestor != os.path.dirname(ancestor):
        ancestor = os.path.dirname(ancestor)
        real = os.path.realpath(ancestor)
        for root in roots:
            if _inside(real, root):
                return root
    return None


def _inside(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


def pinned(writable: Sequence[str], *, check_code: bool = True) -> list[tuple[str, int]]:
    """Each of `writable` as (path, handle), opened from / one component at a time without following a link in any
    of them, and not exposing the launcher's own code: what the mounts and Landlock's rules then grant, by the
    handle, so nothing swapped in after this (a background command of the same session) changes which directory it
    is. The server passes the session's directories resolved when the session was made (`Session.sandbox_roots`), so
    a link on the way now is one a command made (`mv vendor vendor.old; mkdir vendor; ln -s /etc vendor/shared`):
    that directory is not writable (fails closed), and the command's output says why (the model reads it). One
    that does not exist (now) is skipped, as nothing could be written there. Opened in the mount namespace the
    command will run in (a handle from the one before cannot be cloned in it)."""
    kept: list[tuple[str, int]] = []
    code = _launcher_code() if check_code else []
    try:
        for path in dict.fromkeys(writable):
            try:
                fd = _open_without_links(path)
            except FileNotFoundError:
                continue
            except OSError as exc:
                _say(
                    f"acp-server sandbox: {path} is NOT writable: it cannot be reached without following a link (a "
                    f"command may have replaced it, or a directory on its way, with one): {exc.strerror or exc}"
                )
                continue
            kept.append((path, fd))
            # What the handle is, as the kernel names it: never the launcher's code (the server checked the path it
            # passed; this is what is actually granted, checked on every launch).
            real = os.readlink(f"/proc/self/fd/{fd}")
            held = [(what, where) for what, where in code if _inside(where, real) or _inside(real, where)]
            if held:
                kept.pop()
                os.close(fd)
                names = ", ".join(dict.fromkeys(f"{what} ({where})" for what, where in held))
                _say(f"acp-server sandbox: {path} is NOT writable: it holds or lies inside {names}")
    except BaseException:
        for _, fd in kept:
            os.close(fd)
        raise
    return kept


def _open_without_links(path: str, *, last: int = _NO_LINKS) -> int:
    """A handle on directory `path` (absolute, normalised), reached without following any link: ENOTDIR where a
    component is a link (or not a directory). `last`: how the last component is opened (a file too, with
    `_NO_LINK_LAST`)."""
    parts = path.split("/")
    if not path.startswith("/") or any(part in (".", "..") for part in parts):
        raise OSError(errno.EINVAL, "not an absolute, normalised path")
    fd = os.open("/", _NO_LINKS)
    try:
        names = [part for part in parts if part]
        for index, part in enumerate(names):
            if part:
                following = os.open(part, last if index == len(names) - 1 else _NO_LINKS, dir_fd=fd)
                os.close(fd)
                fd = following
    except BaseException:
        os.close(fd)
        raise
    return fd


def _launcher_code() -> list[tuple[str, str]]:
    """(what, real path) of what this launcher runs before it confines itself, as runtime/sandbox.py's
    `_launcher_code` names them: this package's directory, landlockpy's (both first on the path), the standard
    library and the interpreter."""
    import landlockpy  # noqa: PLC0415 (landlockpy, Linux only: in the confined child)

    here = os.path.dirname(os.path.dirname(os.path.dirname(os.path.realpath(__file__))))
    executable = os.path.abspath(sys.executable)
    found = [
        ("the server's code", here),
        ("the landlockpy package", os.path.dirname(os.path.dirname(os.path.realpath(landlockpy.__file__)))),
        ("the standard library", os.path.realpath(os.path.dirname(os.__file__))),
        ("the interpreter", os.path.join(os.path.realpath(os.path.dirname(executable)), os.path.basename(executable))),
        ("the interpreter", os.path.realpath(executable)),
    ]
    return list(dict.fromkeys(found))


def isolate(writable: Sequence[str], *, mounts: bool, network: bool, check_code: bool = True) -> list[tuple[str, int]]:
    """Step 1: namespaces of this process's own, made in one unshare: with `mounts` a mount namespace where
    everything is read-only but `writable`, with `network` a network namespace with only its own loopback. Returns
    the writable directories `pinned` kept, with their handles. Raises OSError when the kernel refuses (no user
    namespaces for this user, a container's seccomp profile, a kernel before 5.12 for the mounts)."""
    flags = (_CLONE_NEWNS if mounts else 0) | (_CLONE_NEWNET if network else 0)
    if not flags:
        return pinned(writable, check_code=check_code)
    libc = _libc()
    uid, gid = os.geteuid(), os.getegid()
    if uid != 0 or libc.unshare(flags) != 0:
        # Not root, or a root without CAP_SYS_ADMIN: a user namespace gives the right to mount in a mount namespace,
        # and to configure a network namespace, it owns. Only our own uid and gid are mapped, so files and processes
        # keep their owners.
        _check(libc.unshare(_CLONE_NEWUSER | flags), f"unshare({_flag_names(_CLONE_NEWUSER | flags)})")
        for name, line in (("setgroups", "deny"), ("uid_map", f"{uid} {uid} 1"), ("gid_map", f"{gid} {gid} 1")):
            with open(f"/proc/self/{name}", "w") as file:
                file.write(line)
    if network:
        _loopback_up(libc)
    kept = pinned(writable, check_code=check_code)
    if mounts:
        _read_only_but(libc, kept)
    return kept


def _flag_names(flags: int) -> str:
    return "|".join(name for flag, name in _FLAG_NAMES if flags & flag)


def _loopback_up(libc: ctypes.CDLL) -> None:
    """A new network namespace has one interface, `lo`, down: up, so what the command starts talks to itself on
    127.0.0.1 as on any machine (UDP; TCP stays Landlock's to refuse) and nothing else is reachable. Needs
    CAP_NET_ADMIN in the namespace: root has it before step 3, a process in its new user namespace too. A socket and
    two ioctls: no `ip` to exec, no dependency."""
    fd = _check(libc.socket(_AF_INET, _SOCK_DGRAM | _SOCK_CLOEXEC, 0), "socket(AF_INET)")
    try:
        request = _IfReq(name=b"lo")
        _check(libc.ioctl(fd, ctypes.c_ulong(_SIOCGIFFLAGS), ctypes.byref(request)), "SIOCGIFFLAGS(lo)")
        request.flags |= _IFF_UP
        _check(libc.ioctl(fd, ctypes.c_ulong(_SIOCSIFFLAGS), ctypes.byref(request)), "bringing lo up")
    finally:
        os.close(fd)


def _read_only_but(libc: ctypes.CDLL, writable: Sequence[tuple[str, int]]) -> None:
    """Everything read-only in this (new) mount namespace but `writable` ((path, handle) from `pinned`), each the
    directory its handle holds, bound over its path."""
    # First of all, nothing done here may reach the mounts we were copied from (a shared / would propagate it).
    _check(libc.mount(b"none", b"/", None, ctypes.c_ulong(_MS_REC | _MS_PRIVATE), None), "making / private")
    try:
        here: str | None = os.getcwd()
    except OSError:
        here = None  # removed under us: the command starts there all the same, as without the namespace
    # Each writable directory as it is now (with the mounts beneath it), detached, before everything turns read-only:
    # cloned from its handle, so what is bound is the directory `pinned` reached without a link, whatever its path
    # leads to by now. It is laid over its path (outer ones first, so an inner one lands on the outer one's bind): at
    # worst, with a link swapped in meanwhile, over some other directory, which then shows (and writes) this one.
    clones: list[tuple[str, int]] = []
    try:
        for path, handle in sorted(writable, key=lambda pair: len(pair[0])):
            flags = _OPEN_TREE_CLONE | _OPEN_TREE_CLOEXEC | _AT_RECURSIVE | _AT_EMPTY_PATH
            found = libc.syscall(_SYS_OPEN_TREE, handle, b"", ctypes.c_uint(flags))
            clones.append((path, _check(found, f"open_tree({path})")))
        attr = _MountAttr(attr_set=_MOUNT_ATTR_RDONLY)
        read_only = libc.syscall(
            _SYS_MOUNT_SETATTR,
            _AT_FDCWD,
            b"/",
            ctypes.c_uint(_AT_RECURSIVE),
            ctypes.byref(attr),
            ctypes.c_size_t(ctypes.sizeof(attr)),  # a size_t in full: syscall(2) is variadic
        )
        _check(read_only, "mount_setattr(/, read-only)")
        for path, fd in clones:
            moved = libc.syscall(
                _SYS_MOVE_MOUNT, fd, b"", _AT_FDCWD, os.fsencode(path), ctypes.c_uint(_MOVE_MOUNT_F_EMPTY_PATH)
            )
            _check(moved, f"move_mount(onto {path})")
    finally:
        for _, fd in clones:
            os.close(fd)
    # The working directory still names the directory under the writable mount laid over it: name it again.
    if here is not None:
        with contextlib.suppress(OSError):
            os.chdir(here)


def hide(hidden: Sequence[tuple[int, int, str]], allowed: Sequence[str], *, mounts: bool) -> None:
    """Step 1b (with `--read`): the server's own files (its state directory, token file, config file, log, TLS key:
    `--hide=DEV:INO:PATH`, resolved by the server when it started) made unreadable where a rule would let the command
    read them: one inside an allowed directory (a state directory under /tmp, a config file under /etc, a token file
    in a root) is covered, in this mount namespace, by an empty read-only tmpfs (a directory) or /dev/null (a file).
    Landlock cannot refuse beneath a directory it allows, and a Landlocked process may not unmount. One outside every
    allowed directory needs nothing: Landlock refuses it (EACCES).

    Fails closed (OSError: the command is not run): without a mount namespace here, when a hidden path lies inside an
    allowed directory; and when the path no longer leads, without a link, to the file the server found there when it
    started (a command moved it, or a directory on its way, to read it under another name)."""
    real = [os.path.realpath(path) for path in allowed]
    libc = _libc()
    for dev, ino, path in hidden:
        inside = next((root for root in real if _inside(path, root)), None)
        if inside is None:
            continue
        if not mounts:
            raise OSError(
                errno.EPERM,
                f"{path} (the server's own) lies inside {inside}, which the command may read, and without a mount "
                "namespace here it cannot be hidden from it; move it out of there",
            )
        try:
            fd = _open_without_links(path, last=_NO_LINK_LAST)
        except OSError as exc:
            raise OSError(
                exc.errno,
                f"{path} (the server's own) cannot be reached without following a link, or is gone (a command may "
                f"have moved it): {exc.strerror or exc}",
            ) from None
        try:
            found = os.fstat(fd)
            if (found.st_dev, found.st_ino) != (dev, ino):
                raise OSError(errno.EXDEV, f"{path} is no longer the server's own (a command may have replaced it)")
            target = f"/proc/self/fd/{fd}".encode()  # the handle's file, whatever its path leads to by now
            if stat.S_ISDIR(found.st_mode):
                flags = ctypes.c_ulong(_MS_RDONLY | _MS_NOSUID | _MS_NODEV | _MS_NOEXEC)
                _check(libc.mount(b"none", target, b"tmpfs", flags, b"mode=0,size=4k"), f"hiding {path}")
            else:
                _check(libc.mount(b"/dev/null", target, None, ctypes.c_ulong(_MS_BIND), None), f"hiding {path}")
        finally:
            os.close(fd)


def confine(writable: Sequence[tuple[str, int]], network: bool, readable: Sequence[str] | None = None) -> None:
    """Step 2: enforce the Landlock domain on this process (and what it execs), the writable directories granted by
    their handles from `pinned` (through /proc/self/fd: the directory held, not what its path leads to by now).
    With `readable` (`--read`), only those (and the writable directories and the devices) may be read and executed,
    not all of /. Raises OSError (landlockpy's errors are OSErrors) when it cannot."""
    from landlockpy import AccessFS, AccessNet, Ruleset, Scope, abi_version, fs_for_abi, net_for_abi  # noqa: PLC0415 (landlockpy, Linux only: in the confined child)

    abi = abi_version()
    if abi < 1:
        raise OSError("this kernel has no Landlock")
    every_fs = fs_for_abi(abi)
    # Beneath the writable directories, every right but making device nodes: a character or block node reaches
    # kernel objects (memory, the kernel log, a disk), not files. FIFOs and Unix sockets stay (`mkfifo`, a dev
    # server's socket): they reach only what listens on them.
    write = every_fs & ~(AccessFS.MAKE_CHAR | AccessFS.MAKE_BLOCK)
    read = AccessFS.READ_FILE | AccessFS.READ_DIR | AccessFS.EXECUTE | AccessFS.IOCTL_DEV
    if network:
        read |= AccessFS.RESOLVE_UNIX  # a Unix socket by path is a network peer: allowed with the network
    device = AccessFS.READ_FILE | AccessFS.WRITE_FILE | AccessFS.TRUNCATE | AccessFS.IOCTL_DEV
    handled_net = AccessNet.NONE if network else net_for_abi(abi)
    # Signals only within the domain (ABI 6; dropped on older kernels): a command cannot kill or stop the editor,
    # the server or the user's other processes. The server, outside the domain, can still kill the command's group.
    scoped = Scope.SIGNAL if network else Scope.SIGNAL | Scope.ABSTRACT_UNIX_SOCKET
    with Ruleset(handled_fs=every_fs, handled_net=handled_net, scoped=scoped) as ruleset:
        if readable is None:
            ruleset.allow_path("/", read)
        else:
            # A rule on a file takes only the rights a file has (the kernel refuses the others: EINVAL).
            on_file = read & (AccessFS.READ_FILE | AccessFS.EXECUTE | AccessFS.IOCTL_DEV)
            for path in readable:
                _allow_without_links(ruleset, path, read, on_file)
            for path in READABLE_DEVICES:
                if os.path.exists(path):
                    ruleset.allow_path(path, AccessFS.READ_FILE)
        for path in WRITABLE_DEVICES:
            if os.path.exists(path):
                ruleset.allow_path(path, device)
        for _, handle in writable:
            ruleset.allow_path(f"/proc/self/fd/{handle}", write)
        ruleset.restrict()


def _allow_without_links(ruleset: Any, path: str, on_directory: Any, on_file: Any) -> None:
    """A read rule on `path` (resolved by the server), reached without following a link, granted by its handle: a
    root or the temp directory a command could have swapped for a link to a home directory (`mv root old; ln -s
    /root root`) is not readable rather than that home (fails closed, said on stderr). One that does not exist is
    skipped."""
    try:
        fd = _open_without_links(path, last=_NO_LINK_LAST)
    except FileNotFoundError:
        return
    except OSError as exc:
        _say(f"acp-server sandbox: {path} is NOT readable: it cannot be reached without following a link: {exc}")
        return
    try:
        mode = os.fstat(fd).st_mode
        if stat.S_ISLNK(mode):  # the last component itself (O_PATH | O_NOFOLLOW opens the link)
            _say(f"acp-server sandbox: {path} is NOT readable: it is now a link (a command may have made it)")
            return
        ruleset.allow_path(f"/proc/self/fd/{fd}", on_directory if stat.S_ISDIR(mode) else on_file)
    finally:
        os.close(fd)


def drop_capabilities() -> None:
    """Step 3: keep only `KEPT_CAPABILITIES`, in every set, and set no_new_privs. Raises OSError when it cannot.

    With no_new_privs, no exec gives more than the permitted set held before it (capabilities(7), and
    `cap_bprm_creds_from_file`): reducing the permitted set (capset, always allowed) is what holds. The bounding set
    is emptied too where CAP_SETPCAP allows (a root server's, one in a user namespace), so even a later exec of a
    uid-0 program without no_new_privs could not bring a capability back, and /proc/PID/status says so."""
    libc = _libc()
    _check(_prctl(libc, _PR_SET_NO_NEW_PRIVS, 1), "no_new_privs")
    # The ambient set survives exec even for a non-root uid: emptied (EINVAL before Linux 4.3: there is none then).
    _prctl(libc, _PR_CAP_AMBIENT, _PR_CAP_AMBIENT_CLEAR_ALL)
    header = _CapHeader(_LINUX_CAPABILITY_VERSION_3, 0)
    data = (_CapData * 2)()
    _check(libc.capget(ctypes.byref(header), data), "capget")
    permitted = data[0].permitted | data[1].permitted << 32
    if permitted >> _CAP_SETPCAP & 1:  # first, while we hold CAP_SETPCAP, which dropping from it needs
        cap = 0
        while _prctl(libc, _PR_CAPBSET_READ, cap) >= 0:  # EINVAL past the kernel's last capability
            if cap not in KEPT_CAPABILITIES:
                _check(_prctl(libc, _PR_CAPBSET_DROP, cap), f"dropping capability {cap} from the bounding set")
            cap += 1
    kept = permitted & sum(1 << cap for cap in KEPT_CAPABILITIES)
    for index, word in enumerate((kept & 0xFFFFFFFF, kept >> 32)):
        data[index].effective = data[index].permitted = word
        data[index].inheritable = 0
    _check(libc.capset(ctypes.byref(header), data), "capset")


def _prctl(libc: ctypes.CDLL, option: int, argument: int = 0) -> int:
    zero = ctypes.c_ulong(0)
    return int(libc.prctl(option, ctypes.c_ulong(argument), zero, zero, zero))


def probe(what: str) -> None:
    """`--probe-mounts`, `--probe-network`: whether that part of step 1 works here (exit status 0), else why not on
    stderr (`PROBE_REFUSED` when the kernel refuses for good, else 1). Run by the server, which then passes `--mounts`
    or `--netns`, or says why it does not."""
    try:
        if what == "--probe-network":
            isolate([], mounts=False, network=True, check_code=False)
        else:
            # Only whether the kernel allows it, /tmp writable: without `pinned`'s check of the launcher's code, which
            # needs landlockpy (not asked about here).
            isolate([os.path.realpath("/tmp")], mounts=True, network=False, check_code=False)
    except OSError as exc:
        _say(exc.strerror or str(exc))  # "unshare(...): Operation not permitted", without "[Errno 1]"
        sys.exit(PROBE_REFUSED if exc.errno in _REFUSED_FOR_GOOD else 1)
    sys.exit(0)


def main(args: Sequence[str]) -> None:
    if list(args) in (["--probe-mounts"], ["--probe-network"]):
        probe(args[0])
    try:
        parsed = _parse(args)
        network, argv = parsed.network, parsed.argv
        # First: a Landlocked process may not mount, a process without capabilities can neither mount nor bring lo up.
        writable = isolate(beyond_reach(parsed.writable), mounts=parsed.mounts, network=parsed.netns)
        readable = parsed.readable or None
        if readable is not None:
            hide(parsed.hidden, [*readable, *(path for path, _ in writable)], mounts=parsed.mounts)
        confine(writable, network, readable)
        drop_capabilities()
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
