"""Opening files beneath the session's directories in one step, so a symbolic link swapped in between the check
and the use cannot lead a read or a write outside.

Checking a path (`realpath`, then compare) and then opening it by name leaves a gap: another process that shares
the workspace can replace a checked component with a symbolic link to `../outside/secret` in between. Here the check
*is* the open: each root is opened as a directory descriptor, and every component below it is opened relative to the
descriptor of its parent with `O_NOFOLLOW`, so the kernel never follows a link we did not look at. A symbolic link
met on the way is read (`readlink`) and its target resolved the same way, from a root's descriptor again, with a hop
limit; a target outside every root is refused. `..` never reaches the walk: paths are normalised lexically before
it, which is sound because every directory already walked is a real directory (not a link) at the time it was
opened. Writes go to a temporary file created with `O_EXCL | O_NOFOLLOW` in the checked directory and are renamed
over the name through the same directory descriptor: a link swapped in at the last moment is itself replaced,
never followed, and a hard link to an outside file is never written through.

POSIX only (Linux and macOS: `dir_fd`, `O_NOFOLLOW`, `O_DIRECTORY`); `O_PATH` is used where it exists. The roots
themselves are trusted: they are the directories the client named.
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import stat
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from acp_server.errors import OutsideError, ToolError
from acp_server.runtime.names import wire

__all__ = [
    "Spot",
    "checked_path",
    "exists",
    "locate",
    "open_dir",
    "open_file",
    "read_bytes",
    "write_bytes",
]

# As many symbolic links as Linux follows for one path (MAXSYMLINKS).
MAX_HOPS = 40
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
# A directory we only walk through needs no read access (O_PATH, Linux); elsewhere it is opened for reading.
_WALK_FLAGS = getattr(os, "O_PATH", os.O_RDONLY) | os.O_DIRECTORY | os.O_NOFOLLOW | _CLOEXEC
_LINK_ERRNOS = (errno.ELOOP, errno.ENOTDIR, getattr(errno, "EMLINK", errno.ELOOP))


@dataclass(slots=True)
class Spot:
    """A checked place: `name` inside the open directory `dir_fd`, which lies beneath `root` along `parts`.

    `name` is not a symbolic link at the time of the check (or does not exist). With `complete` False an
    intermediate directory was missing: `dir_fd` is the deepest one that exists, and the rest is in `parts`.
    """

    dir_fd: int
    name: str
    root: Path
    parts: tuple[str, ...]
    complete: bool = True

    @property
    def path(self) -> Path:
        """The checked place, spelled from the root as the client named it (no link left on the way)."""
        return self.root.joinpath(*self.parts)

    def close(self) -> None:
        os.close(self.dir_fd)

    def __enter__(self) -> Spot:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _split(path: str, roots: Sequence[tuple[Path, str, str]]) -> tuple[int, list[str]] | None:
    """Which root `path` (absolute, normalised) lies under, by either spelling of the root, and the rest of it."""
    for index, (_, given, real) in enumerate(roots):
        for base in (given, real):
            prefix = base.rstrip(os.sep) + os.sep
            if path == base or path.startswith(prefix):
                rest = path[len(prefix) :] if path != base else ""
                return index, [part for part in rest.split(os.sep) if part]
    return None


def _link_target(name: str, dir_fd: int) -> str | None:
    """The target of `name` if it is a symbolic link now, else None."""
    try:
        return os.readlink(name, dir_fd=dir_fd)
    except OSError:
        return None


def _roots(roots: Sequence[Path]) -> list[tuple[Path, str, str]]:
    return [(root, os.path.normpath(os.path.abspath(root)), os.path.realpath(root)) for root in roots]


def _refuse(path: Path | str, roots: Sequence[tuple[Path, str, str]]) -> OutsideError:
    allowed = ", ".join(wire(str(root)) for root, _, _ in roots)
    return OutsideError(f"{wire(str(path))}: outside the session's directories ({allowed}); access refused")


def locate(
    path: Path, roots: Sequence[Path], *, make_dirs: bool = False, missing_ok: bool = False, follow: bool = True
) -> Spot:
    """Walk `path` (absolute) from the root it lies under, each component opened relative to its parent with
    `O_NOFOLLOW`; symbolic links (the last component's too, when `follow`) are resolved by hand and must stay
    beneath a root. Missing directories are created with `make_dirs`, or left to `parts` with `missing_ok`; else
    a missing directory is a ToolError. The caller closes the Spot."""
    known = _roots(roots)
    current = os.path.normpath(str(path))
    for _hop in range(MAX_HOPS + 1):
        found = _split(current, known)
        if found is None:
            raise _refuse(path, known)
        index, parts = found
        root, _, real_root = known[index]
        try:
            fd = os.open(real_root, _WALK_FLAGS)
        except OSError as exc:
            raise ToolError(f"{root}: cannot open the session directory: {exc.strerror or exc}") from None
        walked: list[str] = []
        redirect: str | None = None
        try:
            for position, part in enumerate(parts):
                last = position == len(parts) - 1
                if last:
                    target = _link_target(part, fd) if follow else None
                    if target is None:
                        return Spot(fd, part, root, (*walked, part))
                else:
                    child = -1
                    try:
                        child = os.open(part, _WALK_FLAGS, dir_fd=fd)
                    except FileNotFoundError:
                        if missing_ok:
                            return Spot(fd, part, root, (*walked, *parts[position:]), complete=False)
                        if not make_dirs:
                            raise ToolError(f"{_wire_path(root, walked, part)}: no such directory") from None
                        # Made meanwhile by someone else: opened (and so checked) below all the same.
                        with contextlib.suppress(FileExistsError):
                            os.mkdir(part, dir_fd=fd)
                        child = os.open(part, _WALK_FLAGS, dir_fd=fd)
                    except OSError as exc:
                        target = _link_target(part, fd) if exc.errno in _LINK_ERRNOS else None
                        if target is None and exc.errno == errno.ELOOP:
                            target = part  # a link when opened, swapped back since: walk it again
                        if target is None:
                            raise ToolError(
                                f"{_wire_path(root, walked, part)}: not a directory: {exc.strerror or exc}"
                            ) from None
                    if child >= 0:
                        os.close(fd)
                        fd = child
                        walked.append(part)
                        continue
                # A symbolic link: its target, relative to the directory that holds it, then the rest of the path.
                assert target is not None
                redirect = os.path.normpath(os.path.join(real_root, *walked, target, *parts[position + 1 :]))
                break
            else:
                return Spot(fd, ".", root, ())  # the root itself
        except OSError as exc:
            os.close(fd)
            raise ToolError(f"{_wire(path)}: cannot open: {exc.strerror or exc}") from None
        except BaseException:
            os.close(fd)
            raise
        os.close(fd)
        assert redirect is not None
        current = redirect
    raise ToolError(f"{_wire(path)}: too many levels of symbolic links")


def _wire(path: Path | str) -> str:
    return wire(str(path))


def _wire_path(root: Path, walked: Sequence[str], part: str) -> str:
    return _wire(root.joinpath(*walked, part))


def open_file(path: Path, roots: Sequence[Path], flags: int) -> int:
    """`path` opened with `flags` (plus O_NOFOLLOW): a link swapped in after the walk is walked again, not followed."""
    for _hop in range(MAX_HOPS + 1):
        with locate(path, roots) as spot:
            try:
                return os.open(spot.name, flags | os.O_NOFOLLOW | _CLOEXEC, dir_fd=spot.dir_fd)
            except FileNotFoundError:
                raise ToolError(f"{_wire(spot.path)}: no such file") from None
            except OSError as exc:
                # A link when opened (ELOOP under O_NOFOLLOW), though not when the walk looked: walk it again,
                # even if it is a file once more by now.
                if exc.errno == errno.ELOOP or (
                    exc.errno in _LINK_ERRNOS and _link_target(spot.name, spot.dir_fd) is not None
                ):
                    continue
                if exc.errno == errno.EISDIR:
                    raise ToolError(f"{_wire(spot.path)}: is a directory") from None
                raise ToolError(f"{_wire(spot.path)}: cannot open: {exc.strerror or exc}") from None
    raise ToolError(f"{_wire(path)}: too many levels of symbolic links")


def read_bytes(path: Path, roots: Sequence[Path], max_bytes: int | None = None) -> bytes:
    """The whole content of the regular file at `path`, read through the descriptor that was checked; with
    `max_bytes`, refused (nothing returned) when the file holds more."""
    # O_NONBLOCK: a FIFO put in place must not hang the worker thread; regular files ignore it.
    fd = open_file(path, roots, os.O_RDONLY | os.O_NONBLOCK)
    try:
        info = os.fstat(fd)
        if stat.S_ISDIR(info.st_mode):
            raise ToolError(f"{_wire(path)}: is a directory")
        if not stat.S_ISREG(info.st_mode):
            raise ToolError(f"{_wire(path)}: not a regular file")
        with os.fdopen(fd, "rb", closefd=False) as handle:
            if max_bytes is None:
                return handle.read()
            data = handle.read(max_bytes + 1)  # the file may have grown since fstat: the read itself decides
        if len(data) > max_bytes:
            raise ToolError(f"{_wire(path)}: larger than {max_bytes} bytes")
        return data
    except OSError as exc:
        raise ToolError(f"{_wire(path)}: cannot read: {exc.strerror or exc}") from None
    finally:
        os.close(fd)


def open_dir(path: Path, roots: Sequence[Path]) -> int:
    """A readable descriptor of the directory at `path` (for `os.scandir`), checked like any open."""
    return open_file(path, roots, os.O_RDONLY | os.O_DIRECTORY)


def write_bytes(path: Path, roots: Sequence[Path], data: bytes) -> None:
    """Create or replace the file at `path` (missing directories are made): a new file in the checked directory,
    created exclusively, then renamed over the name. A replaced file keeps its permission bits."""
    for _hop in range(MAX_HOPS + 1):
        with locate(path, roots, make_dirs=True) as spot:
            d, name = spot.dir_fd, spot.name
            try:
                old = os.stat(name, dir_fd=d, follow_symlinks=False)
            except FileNotFoundError:
                old = None
            except OSError as exc:
                raise ToolError(f"{_wire(spot.path)}: cannot write: {exc.strerror or exc}") from None
            if old is not None and stat.S_ISLNK(old.st_mode):
                continue  # a link since the walk looked: resolve it again, so its target keeps its mode
            _replace(spot, old, data)
            return
    raise ToolError(f"{_wire(path)}: too many levels of symbolic links")


def _replace(spot: Spot, old: os.stat_result | None, data: bytes) -> None:
    """Write `data` to a new file beside `spot.name` and rename it over the name, in the checked directory."""
    d, name = spot.dir_fd, spot.name
    shown = _wire(spot.path)
    if old is not None and stat.S_ISDIR(old.st_mode):
        raise ToolError(f"{shown}: is a directory")
    if old is not None and not os.access(name, os.W_OK, dir_fd=d, follow_symlinks=False):
        # Replacing by rename would succeed where writing the file would not: keep the file's own refusal.
        raise ToolError(f"{shown}: cannot write: Permission denied")
    temporary = f".{name[:200]}.{secrets.token_hex(6)}.acp-tmp"
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | _CLOEXEC
    try:
        # A new file gets the usual 0o666 less the umask; a replacement its old bits, set before any content.
        fd = os.open(temporary, flags, 0o600 if old is not None else 0o666, dir_fd=d)
    except OSError as exc:
        raise ToolError(f"{shown}: cannot write: {exc.strerror or exc}") from None
    try:
        try:
            if old is not None and stat.S_ISREG(old.st_mode):
                os.fchmod(fd, stat.S_IMODE(old.st_mode))
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
        finally:
            os.close(fd)
        os.rename(temporary, name, src_dir_fd=d, dst_dir_fd=d)
    except OSError as exc:
        with contextlib.suppress(OSError):
            os.unlink(temporary, dir_fd=d)
        if exc.errno == errno.EISDIR:
            raise ToolError(f"{shown}: is a directory") from None
        raise ToolError(f"{shown}: cannot write: {exc.strerror or exc}") from None


def exists(path: Path, roots: Sequence[Path]) -> bool:
    """Whether something is at `path` on the local disk (a dangling link counts); refused if it leads outside."""
    with locate(path, roots, missing_ok=True, follow=False) as spot:
        if not spot.complete:
            return False
        try:
            os.stat(spot.name, dir_fd=spot.dir_fd, follow_symlinks=False)
        except FileNotFoundError:
            return False
        except OSError:
            return True  # there, but not for us to look at: reading it will say why
        return True


def checked_path(path: Path, roots: Sequence[Path]) -> Path:
    """`path` with every component checked now, links resolved (and refused if they lead out): the path to hand
    to a client that opens the file itself. What that client then opens is out of our hands."""
    with locate(path, roots, missing_ok=True) as spot:
        return spot.path
