"""Path confinement: every path a tool touches is resolved against the session's cwd and must stay inside the
session's directories (cwd plus additionalDirectories).

A tool's argument is untrusted model output. `..` segments and symbolic links are resolved on the real file system
before the check, so neither can reach outside; the path handed on (and shown to the client) is absolute.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from acp_server.runtime.ports import ToolError

__all__ = ["display", "resolve_path"]


def resolve_path(raw: str, cwd: Path, roots: Sequence[Path]) -> Path:
    """The absolute path for `raw` (relative paths are relative to `cwd`), or ToolError if it leaves the roots.

    The returned path is normalised but keeps the user's spelling of its directories (no symlink expansion), so the
    client sees the path it knows; the check itself uses the fully resolved real path.
    """
    if not raw or "\0" in raw:
        raise ToolError(f"invalid path {raw!r}")
    candidate = Path(os.path.normpath(cwd / Path(raw)))
    real = Path(os.path.realpath(candidate))
    for root in roots:
        real_root = Path(os.path.realpath(root))
        if real == real_root or real.is_relative_to(real_root):
            return candidate
    allowed = ", ".join(str(root) for root in roots)
    raise ToolError(f"{raw}: outside the session's directories ({allowed}); access refused")


def display(path: Path, cwd: Path) -> str:
    """A short form for titles: relative to cwd when inside it."""
    try:
        return str(path.relative_to(cwd)) or "."
    except ValueError:
        return str(path)
