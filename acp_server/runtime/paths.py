"""Path confinement: every path a tool touches is resolved against the session's cwd and must stay inside the
session's directories (cwd plus additionalDirectories).

A tool's argument is untrusted model output. `..` segments and symbolic links are resolved on the real file system
before the check, so neither can reach outside; the path handed on (and shown to the client) is absolute. This check
answers early with a clear refusal; the guarantee at the moment of use is `runtime.beneath`, which opens the file
itself without following links out of the roots.

File names are bytes on POSIX. Python hands names that are not UTF-8 to us with surrogate escapes, which JSON cannot
carry, so `wire` shows each such byte as `\\xNN` (and a backslash that would read as one as `\\x5c`), and `unwire`
turns a path the model sends back into the same name: the model can open a file it was shown.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from pathlib import Path

from acp_server.runtime.ports import ToolError

__all__ = ["display", "resolve_path", "unwire", "wire"]

# A backslash the reader would take for the start of an escape, and the escapes `wire` writes.
_AMBIGUOUS = re.compile(r"\\(?=x[0-9a-fA-F]{2})|[\udc80-\udcff]")
_ESCAPE = re.compile(r"\\x([0-9a-fA-F]{2})")


def wire(name: str) -> str:
    """`name` as valid UTF-8 text: each byte that was not UTF-8 (a surrogate escape) as `\\xNN`, reversibly."""
    return _AMBIGUOUS.sub(lambda m: "\\x5c" if m.group() == "\\" else f"\\x{ord(m.group()) - 0xDC00:02x}", name)


def unwire(text: str) -> str:
    """The name `wire` showed as `text`: `\\xNN` back to the byte it stands for (`\\x5c` a backslash, `\\x80` to
    `\\xff` a byte that is not UTF-8); any other backslash is kept as typed."""

    def byte(match: re.Match[str]) -> str:
        value = int(match.group(1), 16)
        if value == 0x5C:
            return "\\"
        return chr(0xDC00 + value) if value >= 0x80 else match.group()

    return _ESCAPE.sub(byte, text) if "\\" in text else text


def resolve_path(raw: str, cwd: Path, roots: Sequence[Path]) -> Path:
    """The absolute path for `raw` (relative paths are relative to `cwd`), or ToolError if it leaves the roots.

    The returned path is normalised but keeps the user's spelling of its directories (no symlink expansion), so the
    client sees the path it knows; the check itself resolves every link.
    """
    if not raw or "\0" in raw:
        raise ToolError(f"invalid path {raw!r}")
    raw = unwire(raw)
    candidate = Path(os.path.normpath(cwd / Path(raw)))
    # Walked the way the file tools open it: `realpath` fails outright (EINVAL) when a link is swapped for a file
    # while it looks, where this walk resolves what it finds. Imported here: `beneath` uses this module's `wire`.
    from acp_server.runtime import beneath

    try:
        beneath.checked_path(candidate, roots)
    except beneath.OutsideError:
        allowed = ", ".join(wire(str(root)) for root in roots)
        raise ToolError(f"{wire(raw)}: outside the session's directories ({allowed}); access refused") from None
    return candidate


def display(path: Path, cwd: Path) -> str:
    """A short form for titles and tool output: relative to cwd when inside it, in `wire` form."""
    try:
        return wire(str(path.relative_to(cwd))) or "."
    except ValueError:
        return wire(str(path))
