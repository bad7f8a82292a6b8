"""Who may connect (REMOTE.md decision 2): the token file's principals, the default token made once, and the lookup.

A token file has one `PRINCIPAL TOKEN [ROOT ...]` line per principal (blank lines and `#` comments aside). It must be
a regular file that only its owner can read or write (mode 0600 or 0400), owned by the user the server runs as (or
root): the mode and the owner are read from the descriptor that is then read (fstat after open), so nothing can be
swapped in between. A file named with `--token-file` may be a symbolic link (Kubernetes mounts its secrets that
way); the default file, which the server itself made in its state directory, is never followed through one.

Tokens are base64url or hex (both are safe in a WebSocket subprotocol) and carry at least 128 bits: 22 base64url
characters, or 32 hex ones. Only their SHA-256 digests are kept once the file is read, and a presented token is
compared with every one of them with `hmac.compare_digest`, always all of them, so neither the time taken nor an
early exit says which token came close. No message here ever contains a token.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import hmac
import os
import re
import secrets
import stat
import tempfile
from dataclasses import dataclass
from pathlib import Path

from acp_server.errors import ServeSetupError

__all__ = [
    "DEFAULT_PRINCIPAL",
    "DEFAULT_TOKEN_FILE",
    "RESERVED_PRINCIPALS",
    "Principal",
    "Tokens",
    "default_tokens",
    "parse_tokens",
    "read_token_file",
    "token_problem",
    "token_values",
]

# The file `serve` makes in the state directory when no token file is given, and the principal it names.
DEFAULT_TOKEN_FILE = "serve-token"
DEFAULT_PRINCIPAL = "default"
# Sessions made over stdio belong to `local` (decision 4): no token may map to it.
RESERVED_PRINCIPALS = frozenset({"local"})
# A token file is a handful of lines; anything larger is not one.
MAX_TOKEN_FILE_BYTES = 1 << 20
MIN_BASE64URL_CHARS = 22  # 22 x 6 bits = 132 bits
MIN_HEX_CHARS = 32  # 32 x 4 bits = 128 bits
_PRINCIPAL = re.compile(r"[A-Za-z0-9][A-Za-z0-9._@-]{0,63}")
_BASE64URL = re.compile(r"[A-Za-z0-9_-]+")
_HEX = re.compile(r"[0-9A-Fa-f]+")
_FLAGS = os.O_RDONLY | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NONBLOCK", 0)
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)


@dataclass(frozen=True, slots=True)
class Principal:
    """Whom a token stands for: a name, and the directories its sessions may use (decision 5; empty: the server's
    `--workspace-root`)."""

    name: str
    roots: tuple[str, ...] = ()


class Tokens:
    """The principals and the digests of their tokens; the tokens themselves are not kept."""

    __slots__ = ("_entries",)

    def __init__(self, entries: tuple[tuple[bytes, Principal], ...]) -> None:
        self._entries = entries

    @property
    def principals(self) -> tuple[Principal, ...]:
        return tuple(principal for _, principal in self._entries)

    def principal_for(self, token: str) -> Principal | None:
        """The principal `token` belongs to, or None. Compares the token's digest with every known digest in
        constant time and never stops early: how long this takes says nothing about which token came close."""
        digest = hashlib.sha256(token.encode("utf-8", "surrogateescape")).digest()
        found: Principal | None = None
        for known, principal in self._entries:
            if hmac.compare_digest(digest, known):
                found = principal
        return found

    def __repr__(self) -> str:  # never the digests: nothing about a token reaches a log
        return f"Tokens({', '.join(p.name for p in self.principals)})"


def token_problem(token: str) -> str | None:
    """What is wrong with a token, in words that do not repeat it, or None."""
    if _HEX.fullmatch(token):
        if len(token) < MIN_HEX_CHARS:
            return f"a hex token needs at least {MIN_HEX_CHARS} characters (128 bits)"
        return None
    if not _BASE64URL.fullmatch(token):
        return "a token is base64url (A-Z a-z 0-9 - _) or hex, nothing else"
    if len(token) < MIN_BASE64URL_CHARS:
        return f"a base64url token needs at least {MIN_BASE64URL_CHARS} characters (128 bits)"
    return None


def parse_tokens(text: str, where: str) -> Tokens:
    """The principals of a token file's text; ServeSetupError naming the line at fault (never its token)."""
    entries: list[tuple[bytes, Principal]] = []
    names: set[str] = set()
    digests: set[bytes] = set()
    for number, line in enumerate(text.splitlines(), 1):
        fields = line.split()
        if not fields or fields[0].startswith("#"):
            continue
        at = f"{where}, line {number}"
        if len(fields) < 2:
            raise ServeSetupError(f"{at}: expected `PRINCIPAL TOKEN [ROOT ...]`, found one word")
        name, token, roots = fields[0], fields[1], tuple(fields[2:])
        if not _PRINCIPAL.fullmatch(name):
            raise ServeSetupError(f"{at}: a principal is 1 to 64 of A-Z a-z 0-9 . _ @ -, a letter or digit first")
        if name in RESERVED_PRINCIPALS:
            raise ServeSetupError(f"{at}: the principal {name!r} is reserved (it owns the sessions made over stdio)")
        if name in names:
            raise ServeSetupError(f"{at}: the principal {name!r} has a line already (one line per principal)")
        problem = token_problem(token)
        if problem is not None:
            raise ServeSetupError(f"{at}: {problem}")
        digest = hashlib.sha256(token.encode()).digest()
        if digest in digests:
            raise ServeSetupError(f"{at}: this token is another principal's too (each principal needs its own)")
        for root in roots:
            if not os.path.isabs(root):
                raise ServeSetupError(f"{at}: a root must be an absolute path, found {root!r}")
        names.add(name)
        digests.add(digest)
        entries.append((digest, Principal(name, roots)))
    if not entries:
        raise ServeSetupError(f"{where}: no `PRINCIPAL TOKEN [ROOT ...]` line: nobody could connect")
    return Tokens(tuple(entries))


def _read_private(path: Path, *, follow: bool) -> str:
    """The text of a file only its owner may read or write, checked on the descriptor that is read."""
    try:
        fd = os.open(path, _FLAGS | (0 if follow else _NOFOLLOW))
    except OSError as exc:
        if exc.errno == errno.ELOOP and not follow:
            raise ServeSetupError(f"{path} is a symbolic link; it is not followed") from None
        raise ServeSetupError(f"cannot open the token file {path}: {exc.strerror}") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise ServeSetupError(f"the token file {path} is not a regular file")
        if info.st_uid not in (os.geteuid(), 0):
            raise ServeSetupError(f"the token file {path} belongs to another user (uid {info.st_uid})")
        if info.st_mode & 0o077:
            mode = stat.S_IMODE(info.st_mode)
            raise ServeSetupError(
                f"the token file {path} may be read or changed by others (mode {mode:04o}); "
                f"only its owner may: chmod 600 {path}"
            )
        data = os.read(fd, MAX_TOKEN_FILE_BYTES + 1)
        while len(data) <= MAX_TOKEN_FILE_BYTES and (more := os.read(fd, MAX_TOKEN_FILE_BYTES + 1 - len(data))):
            data += more
    finally:
        os.close(fd)
    if len(data) > MAX_TOKEN_FILE_BYTES:
        raise ServeSetupError(f"the token file {path} is larger than {MAX_TOKEN_FILE_BYTES} bytes: not a token file")
    try:
        return data.decode()
    except UnicodeDecodeError:
        raise ServeSetupError(f"the token file {path} is not UTF-8 text") from None


def read_token_file(path: Path) -> Tokens:
    """The principals of `--token-file` (which may be a symbolic link: the user named it)."""
    return parse_tokens(_read_private(path, follow=True), str(path))


def token_values(path: Path, *, follow: bool) -> tuple[str, ...]:
    """The tokens themselves, for what must never hold them (a transcript's redactor: `serve --record`); read with the
    same checks as for serving. Nothing else keeps them: `Tokens` holds digests only."""
    text = _read_private(path, follow=follow)
    return tuple(fields[1] for fields in (line.split() for line in text.splitlines()) if len(fields) >= 2)


def default_tokens(state_dir: Path) -> tuple[Path, Tokens, bool]:
    """`serve-token` in the state directory, made once (0600, principal `default`) if it does not exist: its path,
    its principals, and whether it was made now. Two servers starting at once make one file: it is written whole
    under a temporary name and linked into place, which fails when another got there first."""
    path = state_dir / DEFAULT_TOKEN_FILE
    made = False
    if not os.path.lexists(path):
        state_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        fd, temporary = tempfile.mkstemp(dir=state_dir, prefix=f".{DEFAULT_TOKEN_FILE}-")  # made 0600
        try:
            with os.fdopen(fd, "w") as file:
                file.write(f"{DEFAULT_PRINCIPAL} {secrets.token_urlsafe(32)}\n")
                file.flush()
                os.fsync(file.fileno())
            try:
                os.link(temporary, path)
                made = True
            except FileExistsError:
                pass  # another server made it first: its token is the one
        finally:
            with contextlib.suppress(OSError):
                os.unlink(temporary)
    return path, parse_tokens(_read_private(path, follow=False), str(path)), made
