"""Which files a listing or search may show: a directory walk that honours `.gitignore` the way git does.

A model's listing of a project should be the project, not `node_modules/` or build output, so `list_files` and
`grep` skip what git would ignore. The rules (gitignore(5)): a line is a pattern; `#` starts a comment; `!`
re-includes; a trailing `/` matches directories only; a pattern with a `/` anywhere but at its end is anchored to its
`.gitignore`'s directory, otherwise it matches at any depth; `*` and `?` stop at `/`; `**/`, `/**/` and `/**` cross
directories; the last matching pattern wins, and a deeper `.gitignore` overrides a shallower one. A file inside an
ignored directory cannot be re-included, which the walk gets for free by never entering that directory.

Written here rather than taken from a library: the patterns are the small part, and the walk (nested files,
pruning, symlink confinement, cancellation between entries) is ours either way. The same compiler serves the
tools' glob filters (`*.py`, `src/**/*.ts`), which follow the same anchoring rule.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

__all__ = ["GitIgnore", "glob_matcher", "parse_gitignore", "walk_files"]


@dataclass(frozen=True, slots=True)
class _Rule:
    regex: re.Pattern[str]
    negate: bool
    dir_only: bool


@dataclass(frozen=True, slots=True)
class GitIgnore:
    """The rules of one ignore file; `base` is its directory (absolute, with a trailing separator)."""

    base: str
    rules: tuple[_Rule, ...]

    def match(self, path: str, is_dir: bool) -> bool | None:
        """True (ignored), False (re-included by a `!` rule) or None (no rule here matches)."""
        relative = path[len(self.base) :].replace(os.sep, "/")
        verdict: bool | None = None
        for rule in self.rules:
            if (is_dir or not rule.dir_only) and rule.regex.fullmatch(relative):
                verdict = not rule.negate
        return verdict


def parse_gitignore(text: str, base: str) -> GitIgnore:
    rules = (_parse_line(line) for line in text.splitlines())
    return GitIgnore(base if base.endswith(os.sep) else base + os.sep, tuple(r for r in rules if r is not None))


def _parse_line(line: str) -> _Rule | None:
    # Trailing spaces are dropped unless escaped with a backslash.
    while line.endswith(" ") and not line.endswith("\\ "):
        line = line[:-1]
    if not line or line.startswith("#"):
        return None
    negate = line.startswith("!")
    if negate:
        line = line[1:]
    dir_only = line.endswith("/")
    line = line.rstrip("/")
    if not line:
        return None
    regex = _compile(line)
    return None if regex is None else _Rule(regex, negate, dir_only)


def _compile(pattern: str) -> re.Pattern[str] | None:
    """A gitignore-style pattern as a regex over `/`-separated paths relative to the pattern's base."""
    anchored = "/" in pattern
    pattern = pattern.removeprefix("/")
    parts = pattern.split("/")
    regex = "" if anchored else "(?:.*/)?"
    last = len(parts) - 1
    for index, part in enumerate(parts):
        if part == "**":
            # `**/` is zero or more directories; a final `/**` is everything inside.
            regex += ".*" if index == last else "(?:.*/)?"
            continue
        regex += _segment(part)
        if index != last:
            regex += "/"
    try:
        return re.compile(regex, re.DOTALL)
    except re.error:
        return None  # git ignores a pattern it cannot read; so do we


def _segment(part: str) -> str:
    out: list[str] = []
    i = 0
    while i < len(part):
        char = part[i]
        if char == "\\" and i + 1 < len(part):
            out.append(re.escape(part[i + 1]))
            i += 2
            continue
        if char == "*":
            while i + 1 < len(part) and part[i + 1] == "*":
                i += 1
            out.append("[^/]*")
        elif char == "?":
            out.append("[^/]")
        elif char == "[":
            first = i + 1
            if part[first : first + 1] in ("!", "^"):
                first += 1
            close = part.find("]", first + 1)  # a `]` right after `[` (or `[!`) is a literal member
            if close == -1:
                out.append(re.escape(char))
            else:
                body = part[i + 1 : close]
                negate = body[:1] in ("!", "^")
                if negate:
                    body = body[1:]
                members = "".join(c if c == "-" else re.escape(c) for c in body)
                out.append(f"[^/{members}]" if negate else f"(?!/)[{members}]")
                i = close
        else:
            out.append(re.escape(char))
        i += 1
    return "".join(out)


def glob_matcher(pattern: str) -> Callable[[str], bool] | None:
    """A test for `/`-separated paths relative to the search directory, or None if the pattern is unusable.

    `*.py` matches at any depth, `src/**/*.ts` from the search directory; `{a,b}` alternatives are expanded.
    """
    pattern = pattern.strip().removeprefix("./")
    if pattern.endswith("/"):
        pattern += "**"
    regexes = [_compile(p) for p in _expand_braces(pattern) if p]
    if not regexes or any(r is None for r in regexes):
        return None
    compiled = [r for r in regexes if r is not None]
    return lambda path: any(r.fullmatch(path) for r in compiled)


def _expand_braces(pattern: str) -> list[str]:
    match = re.search(r"\{([^{}]*,[^{}]*)\}", pattern)
    if match is None:
        return [pattern]
    head, tail = pattern[: match.start()], pattern[match.end() :]
    return [x for option in match.group(1).split(",") for x in _expand_braces(head + option + tail)]


_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | _CLOEXEC


def _read_beneath(dir_fd: int, parts: Sequence[str]) -> str:
    """The text of `parts` under the directory `dir_fd`, no symbolic link followed on the way (OSError if any)."""
    fd = os.dup(dir_fd)
    try:
        for part in parts[:-1]:
            child = os.open(part, _DIR_FLAGS, dir_fd=fd)
            os.close(fd)
            fd = child
        file = os.open(parts[-1], os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | _CLOEXEC, dir_fd=fd)
    finally:
        os.close(fd)
    with open(file, encoding="utf-8", errors="replace") as handle:
        return handle.read(1 << 20)


def _load(directory: str, has_git_dir: bool, dir_fd: int | None = None) -> list[GitIgnore]:
    """The ignore files a directory contributes: `.git/info/exclude` first (weaker), then `.gitignore`. With
    `dir_fd` (the directory, open) they are read beneath it without following links."""
    found: list[GitIgnore] = []
    candidates: list[tuple[str, ...]] = [(".git", "info", "exclude")] if has_git_dir else []
    candidates.append((".gitignore",))
    for candidate in candidates:
        try:
            if dir_fd is None:
                with open(os.path.join(directory, *candidate), encoding="utf-8", errors="replace") as handle:
                    text = handle.read(1 << 20)
            else:
                text = _read_beneath(dir_fd, candidate)
        except OSError:
            continue
        ignore = parse_gitignore(text, directory)
        if ignore.rules:
            found.append(ignore)
    return found


def _ignored(stack: Sequence[GitIgnore], path: str, is_dir: bool) -> bool:
    verdict = False
    for ignore in stack:
        here = ignore.match(path, is_dir)
        if here is not None:
            verdict = here
    return verdict


def _ancestor_rules(top: str, root: str) -> list[GitIgnore]:
    """Rules from the session root down to (not including) `top`, when `top` lies under `root` as spelled."""
    relative = os.path.relpath(top, root)
    if relative == "." or relative.startswith(".."):
        return []
    rules: list[GitIgnore] = []
    directory = root
    for part in Path(relative).parts:
        rules += _load(directory, os.path.isdir(os.path.join(directory, ".git")))
        directory = os.path.join(directory, part)
    return rules


def walk_files(
    top_fd: int,
    top: Path,
    root: Path,
    real_roots: Sequence[str],
    check: Callable[[], None],
) -> Iterator[str]:
    """Absolute paths of the regular files under `top` (open as `top_fd`, which the walk owns and closes), in sorted
    order, skipping `.git` and what `.gitignore` files (from `root` down) ignore. Each directory is opened relative
    to its parent's descriptor with `O_NOFOLLOW`, so a directory swapped for a link while we walk is skipped, never
    entered. A symbolic link to a file is kept only when its target lies inside `real_roots` (whoever opens it must
    check again: it may change). `check()` runs before every entry (cancellation)."""
    start = str(top)
    stack: list[tuple[Iterator[os.DirEntry[str]], list[GitIgnore], str, int]] = []

    def enter(fd: int, directory: str, inherited: list[GitIgnore]) -> None:
        try:
            with os.scandir(fd) as scan:
                entries = sorted(scan, key=lambda e: e.name)
        except OSError:
            os.close(fd)
            return  # unreadable directories are skipped, as git does
        has_git = any(e.name == ".git" and e.is_dir(follow_symlinks=False) for e in entries)
        rules = inherited + _load(directory, has_git, fd)
        stack.append((iter(entries), rules, directory, fd))

    try:
        enter(top_fd, start, _ancestor_rules(start, str(root)))
        while stack:
            check()
            entries, rules, directory, fd = stack[-1]
            entry = next(entries, None)
            if entry is None:
                stack.pop()
                os.close(fd)
                continue
            if entry.name == ".git":
                continue
            path = os.path.join(directory, entry.name)
            try:
                is_dir = entry.is_dir(follow_symlinks=False)
                if _ignored(rules, path, is_dir):
                    continue
                if is_dir:
                    enter(os.open(entry.name, _DIR_FLAGS, dir_fd=fd), path, rules)
                elif entry.is_symlink():
                    real = os.path.realpath(path)
                    if os.path.isfile(real) and any(real == r or real.startswith(r + os.sep) for r in real_roots):
                        yield path
                elif entry.is_file(follow_symlinks=False):
                    yield path
            except OSError:
                continue  # vanished, unreadable, or swapped for a link while we walked
    finally:
        for _, _, _, fd in stack:
            os.close(fd)
