"""Files on the local disk, for clients that do not offer `fs/read_text_file` / `fs/write_text_file`.

Every open goes through `runtime.beneath`, so the file read or written is the one that was checked: a symbolic link
swapped in by another process cannot lead outside the session's directories. Blocking file I/O runs in a worker
thread so a large file never stalls the event loop (and with it, cancels).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import anyio.to_thread

from acp_server.runtime import beneath

__all__ = ["LocalFileSystem"]


class LocalFileSystem:
    def __init__(self, roots: Sequence[Path]) -> None:
        """`roots`: the session's directories, beneath which every file opened must lie."""
        self._roots = tuple(roots)

    async def read_text(self, path: Path, line: int | None = None, limit: int | None = None) -> str:
        data = await anyio.to_thread.run_sync(beneath.read_bytes, path, self._roots)
        # Bytes, decoded without newline translation: an edit must not rewrite a file's CRLF line endings.
        text = data.decode("utf-8", errors="replace")
        if line is None and limit is None:
            return text
        lines = text.splitlines(keepends=True)
        start = max((line or 1) - 1, 0)
        end = len(lines) if limit is None else start + max(limit, 0)
        return "".join(lines[start:end])

    async def write_text(self, path: Path, content: str) -> None:
        # Encoded as is, without newline translation, as it was read.
        data = content.encode("utf-8", errors="replace")
        await anyio.to_thread.run_sync(beneath.write_bytes, path, self._roots, data)
