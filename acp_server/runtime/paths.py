"""Path confinement: every path a tool touches is resolved against the session's cwd and must stay inside the
session's directories (cwd plus additionalDirectories).

A tool's argument is untrusted model output. `..` segments and symbolic links are resolved on the real file system
before the check, so neither can reach outside; the path handed on (and shown to the client) is absolute. This check
answers early with a clear refusal; the guarantee at the moment of use is `runtime.beneath`, which opens the file
itself without following links out of the roots.

File names that are not UTF-8 are shown and read back through `runtime.names` (`wire`, `unwire`).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from acp_server.errors import OutsideError, ToolError
from acp_server.runtime import beneath
from acp_server.runtime.names import unwire, wire

__all__ = ["display", "resolve_path", "unwire", "wire"]


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
    # while it looks, where this walk resolves what it finds.
    try:
        beneath.checked_path(candidate, roots)
    except OutsideError:
        allowed = ", ".join(wire(str(root)) for root in roots)
        raise ToolError(f"{wire(raw)}: outside the session's directories ({allowed}); access refused") from None
    return candidate


def display(path: Path, cwd: Path) -> str:
    """A short form for titles and tool output: relative to cwd when inside it, in `wire` form."""
    try:
        return wire(str(path.relative_to(cwd))) or "."
    except ValueError:
        return wire(str(path))
