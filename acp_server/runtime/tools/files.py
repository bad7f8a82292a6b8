"""The built-in file tools: read, write and edit text files; list and search the session's directories.

Every path argument is untrusted model output, so each goes through `resolve_path` (confinement to the session's
directories, `..` and symbolic links included) before anything is read or written, and every open on the local
disk goes through `runtime.beneath`, so what is read or written is what was checked, whatever another process swaps
in meanwhile. Reads and writes go through the session's `FileSystem` port: when the editor offers `fs/*`, the model
reads the user's unsaved buffers and its writes land in them. Edits ask the user through `Permissions` with the diff
they would apply. Listing and search have no ACP method, so they walk the local disk (directory descriptors, never
following a link) in a worker thread that checks for cancellation between entries. Names that are not UTF-8 are
shown in `paths.wire` form, which the tools accept back.
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import anyio.from_thread
import anyio.lowlevel
import anyio.to_thread
from pydantic import BaseModel, ConfigDict, Field

from acp_server.errors import ToolError
from acp_server.runtime import beneath
from acp_server.runtime.model import DiffOutput, ToolCallUpdated
from acp_server.runtime.paths import display, resolve_path, wire
from acp_server.runtime.ports import PermissionRequest
from acp_server.runtime.tools import Tool, ToolContext, ToolResult
from acp_server.runtime.tools.gitignore import glob_matcher, walk_files

__all__ = ["FILE_TOOLS"]

# read_file shows this many lines unless asked for a range, and never more than READ_CHAR_BUDGET characters (below
# ToolResult's cap, so our own note saying how to read on is never the part that gets cut).
DEFAULT_READ_LINES = 2000
READ_CHAR_BUDGET = 40_000
MAX_LINE_CHARS = 2000
MAX_LISTED_FILES = 1000
# Beyond the listed files, how far a listing keeps counting so its note can say how many were left out.
MAX_COUNTED_FILES = 100_000
MAX_GREP_MATCHES = 500
MAX_GREP_LINE_CHARS = 500
MAX_GREP_FILE_BYTES = 10 * 1024 * 1024
# A file whose first block holds a NUL byte is binary, as git and ripgrep decide it.
BINARY_SNIFF_BYTES = 8192
# A directory to list, opened for reading (scandir) and never through a link.
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)


class _Args(BaseModel):
    model_config = ConfigDict(extra="forbid", defer_build=True)  # built on first use, not at start-up


class ReadFileArgs(_Args):
    path: str = Field(description="The file: relative to the working directory, or absolute.")
    offset: int | None = Field(default=None, ge=1, description="The first line to read, 1-based.")
    limit: int | None = Field(default=None, ge=1, description=f"How many lines to read (default {DEFAULT_READ_LINES}).")


class WriteFileArgs(_Args):
    path: str = Field(description="The file to create or replace: relative to the working directory, or absolute.")
    content: str = Field(description="The file's complete new text.")


class EditFileArgs(_Args):
    path: str = Field(description="The file to edit: relative to the working directory, or absolute.")
    old_text: str = Field(min_length=1, description="Text that occurs exactly once in the file, copied exactly.")
    new_text: str = Field(description="What replaces old_text.")


class ListFilesArgs(_Args):
    path: str = Field(default=".", description="The directory to list, recursively (default: the working directory).")
    pattern: str | None = Field(
        default=None, description="A glob filter: `*.py` matches at any depth, `src/**/*.ts` from the directory."
    )


class GrepArgs(_Args):
    pattern: str = Field(description="A Python regular expression, searched line by line.")
    path: str = Field(default=".", description="A directory (searched recursively) or a file.")
    glob: str | None = Field(default=None, description="Only files matching this glob, e.g. `*.py`.")


# --- paths ---


def _resolve(ctx: ToolContext, raw: str) -> Path:
    return resolve_path(raw, ctx.cwd, ctx.roots)


def _location(raw: str, cwd: Path) -> tuple[str, ...]:
    """The absolute path for the client before the call runs. Only the working directory is known here, so a
    path elsewhere (an additional directory) is announced by the tool itself once confinement has passed."""
    try:
        return (wire(str(resolve_path(raw, cwd, (cwd,)))),)
    except (ToolError, OSError, ValueError):
        return ()


async def _announce(ctx: ToolContext, raw: str, path: Path) -> None:
    if not _location(raw, ctx.cwd):
        await ctx.emit(ToolCallUpdated(ctx.tool_call_id, locations=(wire(str(path)),)))


# --- read_file ---


async def _read_file(ctx: ToolContext, args: ReadFileArgs) -> ToolResult:
    path = _resolve(ctx, args.path)
    await _announce(ctx, args.path, path)
    shown = display(path, ctx.cwd)
    # The whole text in one request, so the note can say exactly how much is left.
    text = await ctx.fs.read_text(path)
    if "\0" in text[:BINARY_SNIFF_BYTES]:
        raise ToolError(f"{shown} looks like a binary file; not shown")
    lines = text.splitlines(keepends=True)
    total = len(lines)
    if total == 0:
        return ToolResult(f"[{shown} is empty]")
    start = (args.offset or 1) - 1
    if start >= total:
        raise ToolError(f"offset {args.offset} is past the end of {shown} ({total} lines)")
    end = min(total, start + (args.limit or DEFAULT_READ_LINES))
    shown_lines: list[str] = []
    size = 0
    for index in range(start, end):
        line = lines[index]
        length = len(line.rstrip("\r\n"))
        if length > MAX_LINE_CHARS:
            line = f"{line[:MAX_LINE_CHARS]}… [line cut: {length - MAX_LINE_CHARS} more characters]\n"
        if shown_lines and size + len(line) > READ_CHAR_BUDGET:
            end = index
            break
        shown_lines.append(line)
        size += len(line)
    body = "".join(shown_lines)
    if end < total:
        body += "" if body.endswith("\n") else "\n"
        body += f"[lines {start + 1}-{end} of {total} shown; {total - end} more lines; read on with offset={end + 1}]"
    return ToolResult(body)


# --- write_file / edit_file ---


async def _current_text(ctx: ToolContext, path: Path) -> str | None:
    """The file's text through the session's file system, or None when there is no such file yet.

    A file that is not on the local disk is not asked for: an editor answers a read of a missing file with an
    error, and some show the user that error every time the model creates a file."""
    if not await anyio.to_thread.run_sync(beneath.exists, path, ctx.roots):
        return None
    try:
        return await ctx.fs.read_text(path)
    except ToolError:
        if await anyio.to_thread.run_sync(beneath.exists, path, ctx.roots):
            raise
        return None


async def _ask_and_write(
    ctx: ToolContext, raw: str, path: Path, *, raw_input: Any, title: str, diff: DiffOutput
) -> None:
    request = PermissionRequest(
        tool_call_id=ctx.tool_call_id,
        tool_name=ctx.tool_name,
        kind="edit",
        rule=ctx.tool_name,
        title=title,
        raw_input=raw_input,
        content=(diff,),
        locations=(wire(str(path)),),
    )
    decision = await ctx.permissions.decide(request)
    if not decision.allowed:
        raise ToolError(f"{display(path, ctx.cwd)} was not changed: {decision.reason or 'permission refused'}")
    # A cancel that arrived with the answer wins: nothing is written for a cancelled turn.
    await anyio.lowlevel.checkpoint()
    # Again, just before writing: a symbolic link put in place while the user decided must not redirect the write.
    _resolve(ctx, raw)
    await ctx.fs.write_text(path, diff.new_text)


def _lines(text: str) -> str:
    count = len(text.splitlines())
    return "1 line" if count == 1 else f"{count} lines"


async def _write_file(ctx: ToolContext, args: WriteFileArgs) -> ToolResult:
    path = _resolve(ctx, args.path)
    await _announce(ctx, args.path, path)
    shown = display(path, ctx.cwd)
    old = await _current_text(ctx, path)
    diff = DiffOutput(wire(str(path)), old, args.content)
    if old == args.content:
        return ToolResult(f"{shown} already has this content; nothing written", content=(diff,))
    await _ask_and_write(ctx, args.path, path, raw_input=args.model_dump(), title=f"Write {shown}", diff=diff)
    verb = "created" if old is None else "replaced"
    return ToolResult(f"{verb} {shown} ({_lines(args.content)})", content=(diff,))


async def _edit_file(ctx: ToolContext, args: EditFileArgs) -> ToolResult:
    path = _resolve(ctx, args.path)
    await _announce(ctx, args.path, path)
    shown = display(path, ctx.cwd)
    old = await ctx.fs.read_text(path)
    old_text, new_text = args.old_text, args.new_text
    count = old.count(old_text)
    if count == 0 and "\r\n" in old and "\r\n" not in old_text:
        # The model writes `\n`; a file with Windows line endings keeps them.
        old_text, new_text = old_text.replace("\n", "\r\n"), new_text.replace("\n", "\r\n")
        count = old.count(old_text)
    if count == 0:
        raise ToolError(f"old_text not found in {shown}; read the file and copy the text exactly")
    if count > 1:
        raise ToolError(f"old_text occurs {count} times in {shown}; include more context to make it unique")
    if old_text == new_text:
        raise ToolError("old_text and new_text are the same; nothing to change")
    new = old.replace(old_text, new_text, 1)
    diff = DiffOutput(wire(str(path)), old, new)
    await _ask_and_write(ctx, args.path, path, raw_input=args.model_dump(), title=f"Edit {shown}", diff=diff)
    line = old[: old.index(old_text)].count("\n") + 1
    replaced = f"{_lines(old_text)} with {_lines(new_text)}"
    return ToolResult(f"edited {shown} at line {line}: replaced {replaced}", content=(diff,))


# --- list_files / grep: the local disk, in a worker thread ---


@dataclass(frozen=True, slots=True)
class _Search:
    """Where a listing or search walks, and what it shows; everything the worker thread needs."""

    top: Path
    # The session directory `top` lies in: `.gitignore` files from there down apply.
    root: Path
    roots: tuple[Path, ...]
    real_roots: tuple[str, ...]
    glob: Callable[[str], bool] | None
    cwd: Path

    @classmethod
    def of(cls, ctx: ToolContext, raw_path: str, glob: str | None) -> _Search:
        top = _resolve(ctx, raw_path)
        matcher = None
        if glob is not None:
            matcher = glob_matcher(glob)
            if matcher is None:
                raise ToolError(f"invalid glob pattern {glob!r}")
        root = next((r for r in ctx.roots if top == r or top.is_relative_to(r)), top)
        real_roots = tuple(os.path.realpath(r) for r in ctx.roots)
        return cls(top, root, ctx.roots, real_roots, matcher, ctx.cwd)

    def files(self) -> Iterator[str]:
        """The files searched (blocking: runs in a worker thread, where cancellation is checked per entry)."""
        top = self.top
        missing = ToolError(f"{display(top, self.cwd)}: no such file or directory")
        with beneath.locate(top, self.roots, missing_ok=True) as spot:
            if not spot.complete:
                raise missing
            try:
                if not stat.S_ISDIR(os.stat(spot.name, dir_fd=spot.dir_fd, follow_symlinks=False).st_mode):
                    # A file named explicitly is searched as is, as ripgrep does (opened beneath the roots).
                    return iter([str(top)])
                top_fd = os.open(spot.name, _DIR_FLAGS, dir_fd=spot.dir_fd)
            except FileNotFoundError:
                raise missing from None
            except OSError as exc:
                raise ToolError(f"{display(top, self.cwd)}: cannot list: {exc.strerror or exc}") from None
        files = walk_files(top_fd, top, self.root, self.real_roots, anyio.from_thread.check_cancelled)
        glob = self.glob
        if glob is None:
            return files
        prefix = len(str(top).rstrip(os.sep)) + 1
        return (f for f in files if glob(f[prefix:].replace(os.sep, "/")))


def _list_sync(search: _Search) -> tuple[list[str], int]:
    listed: list[str] = []
    total = 0
    for file in search.files():
        total += 1
        if total <= MAX_LISTED_FILES:
            listed.append(display(Path(file), search.cwd))
        elif total >= MAX_COUNTED_FILES:
            break
    return listed, total


async def _list_files(ctx: ToolContext, args: ListFilesArgs) -> ToolResult:
    search = _Search.of(ctx, args.path, args.pattern)
    listed, total = await anyio.to_thread.run_sync(_list_sync, search)
    where = display(search.top, ctx.cwd)
    if not listed:
        return ToolResult(f"no files under {where}" + (f" match {args.pattern!r}" if args.pattern else ""))
    text = "\n".join(listed)
    if total > len(listed):
        counted = f"at least {total}" if total >= MAX_COUNTED_FILES else str(total)
        text += f"\n[{len(listed)} of {counted} files shown; narrow the listing with path or pattern]"
    return ToolResult(text)


def _grep_file(regex: re.Pattern[str], file: str, search: _Search, found: list[str]) -> bool | None:
    """Append the matching lines of one file; True when the cap is reached, None when the file was too large.

    Opened beneath the session's roots like any read: the walk saw this name, but it may be a link by now."""
    try:
        fd = beneath.open_file(Path(file), search.roots, os.O_RDONLY | os.O_NONBLOCK)
    except ToolError:
        return False
    with open(fd, "rb") as raw:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            return False
        if info.st_size > MAX_GREP_FILE_BYTES:
            return None
        if b"\0" in raw.read(BINARY_SNIFF_BYTES):
            return False  # binary
        raw.seek(0)
        shown = display(Path(file), search.cwd)
        for number, line_bytes in enumerate(raw, 1):
            if number % 10_000 == 0:
                anyio.from_thread.check_cancelled()
            line = line_bytes.decode("utf-8", errors="replace")
            if regex.search(line) is None:
                continue
            text = line.rstrip("\r\n")
            if len(text) > MAX_GREP_LINE_CHARS:
                text = text[:MAX_GREP_LINE_CHARS] + "…"
            found.append(f"{shown}:{number}: {text}")
            if len(found) >= MAX_GREP_MATCHES:
                return True
    return False


def _grep_sync(regex: re.Pattern[str], search: _Search) -> tuple[list[str], bool, int]:
    """Matching lines, whether the search stopped at the cap, and how many large files were skipped."""
    found: list[str] = []
    skipped = 0
    for file in search.files():
        try:
            outcome = _grep_file(regex, file, search, found)
        except OSError:
            continue
        if outcome is None:
            skipped += 1
        elif outcome:
            return found, True, skipped
    return found, False, skipped


async def _grep(ctx: ToolContext, args: GrepArgs) -> ToolResult:
    try:
        regex = re.compile(args.pattern)
    except re.error as exc:
        raise ToolError(f"invalid regular expression {args.pattern!r}: {exc}") from None
    search = _Search.of(ctx, args.path, args.glob)
    found, stopped, skipped = await anyio.to_thread.run_sync(_grep_sync, regex, search)
    notes = []
    if stopped:
        notes.append(f"[stopped at {MAX_GREP_MATCHES} matching lines; narrow the search with path or glob]")
    if skipped:
        notes.append(f"[{skipped} files larger than {MAX_GREP_FILE_BYTES // (1024 * 1024)} MiB not searched]")
    if not found:
        return ToolResult("\n".join([f"no matches for {args.pattern!r} in {display(search.top, ctx.cwd)}", *notes]))
    return ToolResult("\n".join([*found, *notes]))


FILE_TOOLS: tuple[Tool[Any], ...] = (
    Tool(
        "read_file",
        f"Read a text file. Shows up to {DEFAULT_READ_LINES} lines; use offset and limit for other parts.",
        ReadFileArgs,
        "read",
        _read_file,
        lambda a: f"Read {a.path}" + (f" (from line {a.offset})" if a.offset else ""),
        lambda a, cwd: _location(a.path, cwd),
    ),
    Tool(
        "write_file",
        "Create a file, or replace a file's whole content. Prefer edit_file for changes to an existing file.",
        WriteFileArgs,
        "edit",
        _write_file,
        lambda a: f"Write {a.path}",
        lambda a, cwd: _location(a.path, cwd),
        asks_permission=True,
    ),
    Tool(
        "edit_file",
        "Replace one exact occurrence of old_text in a file with new_text. old_text must occur exactly once.",
        EditFileArgs,
        "edit",
        _edit_file,
        lambda a: f"Edit {a.path}",
        lambda a, cwd: _location(a.path, cwd),
        asks_permission=True,
    ),
    Tool(
        "list_files",
        f"List files under a directory recursively, skipping what .gitignore ignores (at most {MAX_LISTED_FILES}).",
        ListFilesArgs,
        "search",
        _list_files,
        lambda a: f"List {a.pattern or 'files'} in {a.path}",
    ),
    Tool(
        "grep",
        "Search files for a regular expression; prints `path:line: text` for each matching line.",
        GrepArgs,
        "search",
        _grep,
        lambda a: f"Grep `{a.pattern}` in {a.path}" + (f" ({a.glob})" if a.glob else ""),
    ),
)
