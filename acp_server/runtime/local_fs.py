"""Files on the local disk, for clients that do not offer `fs/read_text_file` / `fs/write_text_file`.

Blocking file I/O runs in a worker thread so a large file never stalls the event loop (and with it, cancels).
"""

from __future__ import annotations

from pathlib import Path

import anyio

from acp_server.runtime.ports import ToolError

__all__ = ["LocalFileSystem"]


class LocalFileSystem:
    async def read_text(self, path: Path, line: int | None = None, limit: int | None = None) -> str:
        try:
            # Bytes, decoded without newline translation: an edit must not rewrite a file's CRLF line endings.
            text = (await anyio.Path(path).read_bytes()).decode("utf-8", errors="replace")
        except FileNotFoundError:
            raise ToolError(f"{path}: no such file") from None
        except IsADirectoryError:
            raise ToolError(f"{path}: is a directory") from None
        except OSError as exc:
            raise ToolError(f"{path}: cannot read: {exc.strerror or exc}") from None
        if line is None and limit is None:
            return text
        lines = text.splitlines(keepends=True)
        start = max((line or 1) - 1, 0)
        end = len(lines) if limit is None else start + max(limit, 0)
        return "".join(lines[start:end])

    async def write_text(self, path: Path, content: str) -> None:
        try:
            await anyio.Path(path.parent).mkdir(parents=True, exist_ok=True)
            await anyio.Path(path).write_text(content, encoding="utf-8", newline="")
        except IsADirectoryError:
            raise ToolError(f"{path}: is a directory") from None
        except OSError as exc:
            raise ToolError(f"{path}: cannot write: {exc.strerror or exc}") from None
