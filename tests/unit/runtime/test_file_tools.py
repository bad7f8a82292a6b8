"""Unit tests of the built-in file tools and `update_plan`, run against real temporary directories.

Each test builds a `ToolContext` by hand with the local file system (or a recording one standing in for the editor's
buffers) and a fake `Permissions` that records what it is asked and answers as the test says. The end-to-end
behaviour over stdio is in `test_file_tools_e2e.py`; here are the edge cases: confinement (`..`, absolute paths,
symbolic links, NUL bytes), `.gitignore` semantics, caps, and the exact diffs shown to the user.
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import anyio.from_thread
import pytest
from pydantic import ValidationError

from acp_server.agent.sessions.runs import Session
from acp_server.errors import ToolError
from acp_server.protocol.editor import PermissionGate
from acp_server.protocol.v1.permissions import permission_params
from acp_server.runtime.local_commands import LocalCommandRunner
from acp_server.runtime.local_fs import LocalFileSystem
from acp_server.runtime.model import DiffOutput, PlanEntry, PlanUpdated, ToolCallUpdated, TurnEvent
from acp_server.runtime.ports import Decision, PermissionRequest, Permissions
from acp_server.runtime.processes import ProcessTable
from acp_server.runtime.tools import ToolContext, ToolResult
from acp_server.runtime.tools import gitignore as gitignore_module
from acp_server.runtime.tools.files import DEFAULT_READ_LINES, FILE_TOOLS, MAX_GREP_MATCHES, MAX_LISTED_FILES
from acp_server.runtime.tools.gitignore import glob_matcher
from acp_server.runtime.tools.plan import PLAN_TOOLS
from acp_server.settings.choices import PermissionMode

TOOLS = {tool.name: tool for tool in (*FILE_TOOLS, *PLAN_TOOLS)}
ALLOW = Decision(True)


class _NoSubagents:
    """File tools never delegate; a call would be a bug."""

    async def run(self, task: str, meta: dict[str, Any], call_id: str, emit: Any, *, fenced: Any = None) -> str:
        raise AssertionError("a file tool tried to start a subagent")


@dataclass
class FakePermissions:
    """Answers every request with `answer`; `during` runs while the "user" decides."""

    answer: Decision = ALLOW
    requests: list[PermissionRequest] = field(default_factory=list)
    during: Callable[[], None] | None = None

    async def decide(self, request: PermissionRequest) -> Decision:
        self.requests.append(request)
        if self.during is not None:
            self.during()
        return self.answer


class BufferFileSystem(LocalFileSystem):
    """The editor's view: unsaved buffers win over the disk, writes land in buffers; every call is recorded."""

    def __init__(self, buffers: dict[Path, str]) -> None:
        # Like the editor, it reads whatever path it is sent; the tools' own confinement is what is under test.
        super().__init__((Path("/"),))
        self.buffers = buffers
        self.calls: list[tuple[str, Path]] = []

    async def read_text(self, path: Path, line: int | None = None, limit: int | None = None) -> str:
        self.calls.append(("read", path))
        if path in self.buffers:
            return self.buffers[path]
        return await super().read_text(path, line, limit)

    async def write_text(self, path: Path, content: str) -> None:
        self.calls.append(("write", path))
        self.buffers[path] = content


@dataclass
class Env:
    root: Path
    permissions: Permissions = field(default_factory=FakePermissions)
    fs: Any = None
    events: list[TurnEvent] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.fs is None:
            self.fs = LocalFileSystem((self.cwd, self.extra))

    @property
    def cwd(self) -> Path:
        return self.root / "project"

    @property
    def outside(self) -> Path:
        return self.root / "outside"

    @property
    def extra(self) -> Path:
        return self.root / "extra"

    @property
    def asked(self) -> list[PermissionRequest]:
        assert isinstance(self.permissions, FakePermissions)
        return self.permissions.requests

    def context(self, tool_name: str) -> ToolContext:
        async def emit(event: TurnEvent) -> None:
            self.events.append(event)

        async def client_request(method: str, params: dict[str, Any]) -> Any:
            raise AssertionError(f"the file tools sent {method} to the client directly")

        processes = ProcessTable()
        return ToolContext(
            session_id="sess_test",
            tool_call_id="call_1",
            tool_name=tool_name,
            cwd=self.cwd,
            roots=(self.cwd, self.extra),
            fs=self.fs,
            commands=LocalCommandRunner(processes, lambda: anyio.current_time() + 1),
            permissions=self.permissions,
            processes=processes,
            emit=emit,
            probe=lambda event, **fields: None,
            cleanup_deadline=lambda: anyio.current_time() + 1,
            client_request=client_request,
            subagents=_NoSubagents(),
        )

    async def run(self, tool_name: str, **arguments: Any) -> ToolResult:
        tool = TOOLS[tool_name]
        return await tool.run(self.context(tool_name), tool.args_model.model_validate(arguments))

    def write(self, relative: str, text: str, base: Path | None = None) -> Path:
        path = (base or self.cwd) / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        return path


@pytest.fixture
def env(tmp_path: Path) -> Env:
    environment = Env(tmp_path)
    for directory in (environment.cwd, environment.outside, environment.extra):
        directory.mkdir()
    (environment.outside / "secret.txt").write_text("TOP SECRET\n")
    return environment


def listed(result: ToolResult) -> list[str]:
    return [line for line in result.output.splitlines() if not line.startswith("[")]


# --- read_file ---


async def test_read_file_returns_the_whole_text_of_a_small_file(env: Env) -> None:
    env.write("src/app.py", "import os\nprint(os.name)\n")
    result = await env.run("read_file", path="src/app.py")
    assert result.ok
    assert result.output == "import os\nprint(os.name)\n"


async def test_read_file_title_and_locations_name_the_absolute_path(env: Env) -> None:
    tool = TOOLS["read_file"]
    args = tool.args_model.model_validate({"path": "src/../src/app.py", "offset": 3})
    assert tool.kind == "read"
    assert tool.title(args) == "Read src/../src/app.py (from line 3)"
    assert tool.locations(args, env.cwd) == (str(env.cwd / "src" / "app.py"),)


async def test_read_file_offset_and_limit_select_lines_and_say_how_to_read_on(env: Env) -> None:
    env.write("n.txt", "".join(f"line {i}\n" for i in range(1, 11)))
    result = await env.run("read_file", path="n.txt", offset=3, limit=2)
    assert result.output.splitlines() == [
        "line 3",
        "line 4",
        "[lines 3-4 of 10 shown; 6 more lines; read on with offset=5]",
    ]


async def test_read_file_shows_at_most_the_default_line_count_with_a_note(env: Env) -> None:
    env.write("big.txt", "".join(f"{i}\n" for i in range(1, DEFAULT_READ_LINES + 501)))
    result = await env.run("read_file", path="big.txt")
    lines = result.output.splitlines()
    assert lines[0] == "1"
    assert lines[DEFAULT_READ_LINES - 1] == str(DEFAULT_READ_LINES)
    assert len(lines) == DEFAULT_READ_LINES + 1
    assert lines[-1] == (
        f"[lines 1-{DEFAULT_READ_LINES} of {DEFAULT_READ_LINES + 500} shown; 500 more lines; "
        f"read on with offset={DEFAULT_READ_LINES + 1}]"
    )


async def test_read_file_cuts_huge_lines_and_stops_at_the_character_budget(env: Env) -> None:
    env.write("min.js", "x" * 30_000 + "\n" + ("y" * 1000 + "\n") * 100)
    result = await env.run("read_file", path="min.js")
    first = result.output.splitlines()[0]
    assert first.endswith("… [line cut: 28000 more characters]")
    assert len(result.output) < 50_000
    assert "read on with offset=" in result.output.splitlines()[-1]


async def test_read_file_on_an_empty_file_says_it_is_empty(env: Env) -> None:
    env.write("empty.txt", "")
    assert (await env.run("read_file", path="empty.txt")).output == "[empty.txt is empty]"


async def test_read_file_offset_past_the_end_is_a_clear_error(env: Env) -> None:
    env.write("short.txt", "a\nb\n")
    with pytest.raises(ToolError, match=r"offset 5 is past the end of short.txt \(2 lines\)"):
        await env.run("read_file", path="short.txt", offset=5)


async def test_read_file_of_a_missing_file_or_a_directory_fails(env: Env) -> None:
    (env.cwd / "dir").mkdir()
    with pytest.raises(ToolError, match="no such file"):
        await env.run("read_file", path="nope.txt")
    with pytest.raises(ToolError, match="is a directory"):
        await env.run("read_file", path="dir")


async def test_read_file_refuses_binary_content(env: Env) -> None:
    (env.cwd / "blob.bin").write_bytes(b"\x89PNG\x00\x00\x01")
    with pytest.raises(ToolError, match="binary"):
        await env.run("read_file", path="blob.bin")


async def test_read_file_rejects_a_zero_offset_before_running(env: Env) -> None:
    with pytest.raises(ValidationError):
        TOOLS["read_file"].args_model.model_validate({"path": "a", "offset": 0})


async def test_read_file_reads_through_the_session_file_system_not_the_disk(env: Env) -> None:
    path = env.write("a.txt", "on disk\n")
    env.fs = BufferFileSystem({path: "unsaved buffer\n"})
    assert (await env.run("read_file", path="a.txt")).output == "unsaved buffer\n"
    assert env.fs.calls == [("read", path)]


# --- write_file ---


async def test_write_file_creates_a_new_file_after_asking_with_a_new_file_diff(env: Env) -> None:
    result = await env.run("write_file", path="pkg/new.py", content="x = 1\n")
    target = env.cwd / "pkg" / "new.py"
    assert target.read_text() == "x = 1\n"
    diff = DiffOutput(str(target), None, "x = 1\n")
    assert result.ok
    assert result.content == (diff,)
    assert result.output == "created pkg/new.py (1 line)"
    [request] = env.asked
    assert (request.kind, request.rule, request.tool_name, request.tool_call_id) == (
        "edit",
        "write_file",
        "write_file",
        "call_1",
    )
    assert request.title == "Write pkg/new.py"
    assert request.content == (diff,)
    assert request.locations == (str(target),)
    assert request.raw_input == {"path": "pkg/new.py", "content": "x = 1\n"}


async def test_write_file_over_an_existing_file_shows_its_old_text(env: Env) -> None:
    target = env.write("a.txt", "old\n")
    result = await env.run("write_file", path="a.txt", content="new\n")
    assert target.read_text() == "new\n"
    assert result.content == (DiffOutput(str(target), "old\n", "new\n"),)
    assert env.asked[0].content == result.content
    assert result.output == "replaced a.txt (1 line)"


async def test_write_file_denied_writes_nothing_and_says_why(env: Env) -> None:
    env.permissions = FakePermissions(Decision(False, "the user rejected write_file"))
    target = env.write("a.txt", "keep\n")
    with pytest.raises(ToolError, match=re.escape("a.txt was not changed: the user rejected write_file")):
        await env.run("write_file", path="a.txt", content="clobber\n")
    with pytest.raises(ToolError, match="not changed"):
        await env.run("write_file", path="fresh.txt", content="x")
    assert target.read_text() == "keep\n"
    assert not (env.cwd / "fresh.txt").exists()


async def test_write_file_in_a_read_only_session_is_refused_without_asking(env: Env) -> None:
    async def never(method: str, params: dict[str, Any]) -> Any:
        raise AssertionError("a read-only session asked the user")

    session = Session("sess_test", env.cwd, (), (), mode=PermissionMode.READ_ONLY)
    env.permissions = PermissionGate(session, never, permission_params)
    with pytest.raises(ToolError, match="read-only mode: write_file is not allowed"):
        await env.run("write_file", path="a.txt", content="x")
    assert not (env.cwd / "a.txt").exists()


async def test_write_file_in_accept_edits_mode_writes_without_asking(env: Env) -> None:
    async def never(method: str, params: dict[str, Any]) -> Any:
        raise AssertionError("accept_edits asked the user about an edit")

    env.permissions = PermissionGate(
        Session("sess_test", env.cwd, (), (), mode=PermissionMode.ACCEPT_EDITS), never, permission_params
    )
    await env.run("write_file", path="a.txt", content="x")
    assert (env.cwd / "a.txt").read_text() == "x"


async def test_write_file_with_unchanged_content_neither_asks_nor_writes(env: Env) -> None:
    target = env.write("a.txt", "same\n")
    before = target.stat().st_mtime_ns
    result = await env.run("write_file", path="a.txt", content="same\n")
    assert result.ok
    assert "nothing written" in result.output
    assert env.asked == []
    assert target.stat().st_mtime_ns == before


async def test_write_file_onto_a_directory_fails_before_asking(env: Env) -> None:
    (env.cwd / "dir").mkdir()
    with pytest.raises(ToolError, match="is a directory"):
        await env.run("write_file", path="dir", content="x")
    assert env.asked == []


async def test_write_file_goes_through_the_session_file_system(env: Env) -> None:
    path = env.write("a.txt", "disk\n")
    env.fs = BufferFileSystem({path: "buffer\n"})
    result = await env.run("write_file", path="a.txt", content="new\n")
    assert result.content == (DiffOutput(str(path), "buffer\n", "new\n"),)
    assert env.fs.calls == [("read", path), ("write", path)]
    assert env.fs.buffers[path] == "new\n"
    assert path.read_text() == "disk\n"


# --- edit_file ---


async def test_edit_file_replaces_the_unique_occurrence_and_shows_the_whole_file_diff(env: Env) -> None:
    target = env.write("app.py", "def f():\n    return 1\n\nprint(f())\n")
    result = await env.run("edit_file", path="app.py", old_text="return 1", new_text="return 2")
    new = "def f():\n    return 2\n\nprint(f())\n"
    assert target.read_text() == new
    diff = DiffOutput(str(target), "def f():\n    return 1\n\nprint(f())\n", new)
    assert result.content == (diff,)
    assert result.output == "edited app.py at line 2: replaced 1 line with 1 line"
    [request] = env.asked
    assert (request.kind, request.rule, request.title, request.content) == ("edit", "edit_file", "Edit app.py", (diff,))


async def test_edit_file_with_absent_old_text_fails_clearly(env: Env) -> None:
    target = env.write("app.py", "a = 1\n")
    with pytest.raises(ToolError, match=re.escape("old_text not found in app.py")):
        await env.run("edit_file", path="app.py", old_text="b = 1", new_text="b = 2")
    assert target.read_text() == "a = 1\n"
    assert env.asked == []


async def test_edit_file_with_ambiguous_old_text_asks_for_more_context(env: Env) -> None:
    env.write("app.py", "x = 0\nx = 0\nx = 0\n")
    with pytest.raises(ToolError, match=re.escape("old_text occurs 3 times in app.py; include more context")):
        await env.run("edit_file", path="app.py", old_text="x = 0", new_text="x = 1")
    assert env.asked == []


async def test_edit_file_of_a_missing_file_fails(env: Env) -> None:
    with pytest.raises(ToolError, match="no such file"):
        await env.run("edit_file", path="ghost.py", old_text="a", new_text="b")


async def test_edit_file_with_identical_texts_or_empty_old_text_is_refused(env: Env) -> None:
    env.write("a.txt", "abc\n")
    with pytest.raises(ToolError, match="the same"):
        await env.run("edit_file", path="a.txt", old_text="abc", new_text="abc")
    with pytest.raises(ValidationError):
        TOOLS["edit_file"].args_model.model_validate({"path": "a.txt", "old_text": "", "new_text": "x"})


async def test_edit_file_matches_and_keeps_windows_line_endings(env: Env) -> None:
    path = env.cwd / "win.txt"
    env.fs = BufferFileSystem({path: "one\r\ntwo\r\nthree\r\n"})
    result = await env.run("edit_file", path="win.txt", old_text="one\ntwo", new_text="1\n2")
    assert env.fs.buffers[path] == "1\r\n2\r\nthree\r\n"
    assert result.content == (DiffOutput(str(path), "one\r\ntwo\r\nthree\r\n", "1\r\n2\r\nthree\r\n"),)


async def test_edit_file_on_disk_keeps_the_line_endings_of_untouched_lines(env: Env) -> None:
    target = env.cwd / "win.txt"
    target.write_bytes(b"one\r\ntwo\r\nthree\r\n")
    await env.run("edit_file", path="win.txt", old_text="one", new_text="1")
    assert target.read_bytes() == b"1\r\ntwo\r\nthree\r\n"


async def test_edit_file_denied_leaves_the_file_untouched(env: Env) -> None:
    env.permissions = FakePermissions(Decision(False, "the session is in read-only mode: edit_file is not allowed"))
    target = env.write("a.txt", "abc\n")
    with pytest.raises(ToolError, match=re.escape("a.txt was not changed: the session is in read-only mode")):
        await env.run("edit_file", path="a.txt", old_text="abc", new_text="xyz")
    assert target.read_text() == "abc\n"


async def test_edit_file_edits_the_editor_buffer_not_the_disk(env: Env) -> None:
    path = env.write("a.txt", "disk value\n")
    env.fs = BufferFileSystem({path: "buffer value\n"})
    result = await env.run("edit_file", path="a.txt", old_text="buffer", new_text="edited")
    assert env.fs.buffers[path] == "edited value\n"
    assert result.content == (DiffOutput(str(path), "buffer value\n", "edited value\n"),)
    assert path.read_text() == "disk value\n"


# --- confinement ---

ESCAPES = [
    pytest.param(lambda e: "../outside/secret.txt", id="dotdot"),
    pytest.param(lambda e: "sub/../../outside/secret.txt", id="dotdot-inside"),
    pytest.param(lambda e: str(e.outside / "secret.txt"), id="absolute-outside"),
    pytest.param(lambda e: "link_out/secret.txt", id="symlinked-dir-outside"),
    pytest.param(lambda e: "secret_link.txt", id="symlinked-file-outside"),
    pytest.param(lambda e: "a\0b", id="nul-byte"),
]


ESCAPE_REFUSED = r"outside the session's directories|invalid path"


def make_links(env: Env) -> None:
    (env.cwd / "link_out").symlink_to(env.outside, target_is_directory=True)
    (env.cwd / "secret_link.txt").symlink_to(env.outside / "secret.txt")


@pytest.mark.parametrize("raw", ESCAPES)
async def test_read_file_refuses_paths_that_leave_the_session(env: Env, raw: Callable[[Env], str]) -> None:
    make_links(env)
    with pytest.raises(ToolError, match=ESCAPE_REFUSED):
        await env.run("read_file", path=raw(env))


@pytest.mark.parametrize("raw", ESCAPES)
async def test_write_and_edit_refuse_escapes_without_asking_or_writing(env: Env, raw: Callable[[Env], str]) -> None:
    make_links(env)
    with pytest.raises(ToolError, match=ESCAPE_REFUSED):
        await env.run("write_file", path=raw(env), content="pwned\n")
    with pytest.raises(ToolError, match=ESCAPE_REFUSED):
        await env.run("edit_file", path=raw(env), old_text="TOP SECRET", new_text="pwned")
    assert env.asked == []
    assert (env.outside / "secret.txt").read_text() == "TOP SECRET\n"
    assert sorted(p.name for p in env.outside.iterdir()) == ["secret.txt"]


@pytest.mark.parametrize("raw", ESCAPES)
async def test_list_and_grep_refuse_escapes(env: Env, raw: Callable[[Env], str]) -> None:
    make_links(env)
    with pytest.raises(ToolError, match=ESCAPE_REFUSED):
        await env.run("list_files", path=raw(env))
    with pytest.raises(ToolError, match=ESCAPE_REFUSED):
        await env.run("grep", pattern="SECRET", path=raw(env))


@pytest.mark.parametrize("raw", ESCAPES)
def test_locations_never_name_a_path_outside_the_session(env: Env, raw: Callable[[Env], str]) -> None:
    make_links(env)
    extra = {"read_file": {}, "write_file": {"content": ""}, "edit_file": {"old_text": "x", "new_text": ""}}
    for name, arguments in extra.items():
        tool = TOOLS[name]
        args = tool.args_model.model_validate({"path": raw(env), **arguments})
        assert tool.locations(args, env.cwd) == ()


async def test_a_dangling_symlink_to_outside_cannot_be_written_through(env: Env) -> None:
    (env.cwd / "dangling").symlink_to(env.outside / "created.txt")
    with pytest.raises(ToolError, match="outside the session's directories"):
        await env.run("write_file", path="dangling", content="x")
    assert not (env.outside / "created.txt").exists()


async def test_a_symlink_swapped_in_while_the_user_decides_does_not_redirect_the_write(env: Env) -> None:
    target = env.write("a.txt", "old\n")

    def swap() -> None:
        target.unlink()
        target.symlink_to(env.outside / "secret.txt")

    env.permissions = FakePermissions(during=swap)
    with pytest.raises(ToolError, match="outside the session's directories"):
        await env.run("write_file", path="a.txt", content="pwned\n")
    assert (env.outside / "secret.txt").read_text() == "TOP SECRET\n"


async def test_symlinks_that_stay_inside_the_session_are_followed(env: Env) -> None:
    env.write("real/data.txt", "inside\n")
    (env.cwd / "alias").symlink_to(env.cwd / "real", target_is_directory=True)
    assert (await env.run("read_file", path="alias/data.txt")).output == "inside\n"
    await env.run("write_file", path="alias/data.txt", content="changed\n")
    assert (env.cwd / "real" / "data.txt").read_text() == "changed\n"


async def test_additional_directories_are_usable_and_announced_with_absolute_locations(env: Env) -> None:
    target = env.write("notes.md", "# notes\nTODO: x\n", base=env.extra)
    tool = TOOLS["read_file"]
    assert tool.locations(tool.args_model.model_validate({"path": str(target)}), env.cwd) == ()
    assert (await env.run("read_file", path=str(target))).output == "# notes\nTODO: x\n"
    assert env.events == [ToolCallUpdated("call_1", locations=(str(target),))]
    await env.run("edit_file", path=str(target), old_text="x", new_text="y")
    assert target.read_text() == "# notes\nTODO: y\n"
    assert env.asked[0].locations == (str(target),)
    assert listed(await env.run("list_files", path=str(env.extra))) == [str(target)]
    grep = await env.run("grep", pattern="TODO", path=str(env.extra))
    assert grep.output == f"{target}:2: TODO: y"


async def test_paths_inside_the_cwd_are_not_announced_twice(env: Env) -> None:
    env.write("a.txt", "a\n")
    await env.run("read_file", path="a.txt")
    assert env.events == []


# --- list_files ---


def tree(env: Env, files: dict[str, str]) -> None:
    for relative, text in files.items():
        env.write(relative, text)


async def test_list_files_lists_recursively_in_sorted_order_relative_to_the_cwd(env: Env) -> None:
    tree(env, {"b.txt": "", "a/z.py": "", "a/b/c.py": "", ".github/ci.yml": "", ".git/HEAD": "ref"})
    (env.cwd / ".git" / "objects").mkdir()
    result = await env.run("list_files")
    assert listed(result) == [".github/ci.yml", "a/b/c.py", "a/z.py", "b.txt"]
    assert listed(await env.run("list_files", path="a")) == ["a/b/c.py", "a/z.py"]


async def test_list_files_pattern_without_a_slash_matches_at_any_depth(env: Env) -> None:
    tree(env, {"x.py": "", "src/y.py": "", "src/y.pyc": "", "src/deep/z.py": "", "README.md": ""})
    assert listed(await env.run("list_files", pattern="*.py")) == ["src/deep/z.py", "src/y.py", "x.py"]


async def test_list_files_pattern_with_a_slash_is_anchored_to_the_listed_directory(env: Env) -> None:
    tree(env, {"src/a.ts": "", "src/ui/b.ts": "", "src/ui/b.tsx": "", "lib/src/c.ts": "", "d.ts": ""})
    assert listed(await env.run("list_files", pattern="src/**/*.ts")) == ["src/a.ts", "src/ui/b.ts"]
    assert listed(await env.run("list_files", pattern="**/*.{ts,tsx}", path="src")) == [
        "src/a.ts",
        "src/ui/b.ts",
        "src/ui/b.tsx",
    ]


async def test_list_files_without_matches_says_so(env: Env) -> None:
    env.write("a.txt", "")
    result = await env.run("list_files", pattern="*.rs")
    assert result.ok
    assert result.output == "no files under . match '*.rs'"


async def test_list_files_of_a_missing_directory_fails(env: Env) -> None:
    with pytest.raises(ToolError, match="nowhere: no such file or directory"):
        await env.run("list_files", path="nowhere")


async def test_list_files_of_a_file_lists_that_file(env: Env) -> None:
    env.write("one.txt", "")
    assert listed(await env.run("list_files", path="one.txt")) == ["one.txt"]


async def test_list_files_caps_the_listing_with_a_note(env: Env) -> None:
    for i in range(MAX_LISTED_FILES + 7):
        (env.cwd / f"f{i:05}.txt").touch()
    result = await env.run("list_files")
    assert len(listed(result)) == MAX_LISTED_FILES
    assert result.output.splitlines()[-1] == (
        f"[{MAX_LISTED_FILES} of {MAX_LISTED_FILES + 7} files shown; narrow the listing with path or pattern]"
    )


async def test_list_files_skips_symlinked_directories_and_symlinks_leading_outside(env: Env) -> None:
    make_links(env)
    env.write("real/a.txt", "")
    (env.cwd / "alias_dir").symlink_to(env.cwd / "real", target_is_directory=True)
    (env.cwd / "alias_file.txt").symlink_to(env.cwd / "real" / "a.txt")
    os.mkfifo(env.cwd / "pipe")
    assert listed(await env.run("list_files")) == ["alias_file.txt", "real/a.txt"]


async def test_list_files_invalid_glob_fails_clearly(env: Env) -> None:
    with pytest.raises(ToolError, match="invalid glob pattern"):
        await env.run("list_files", pattern="")


# --- .gitignore ---


async def test_gitignore_basename_patterns_apply_at_every_depth(env: Env) -> None:
    tree(env, {".gitignore": "*.log\n# a comment\n\n", "a.log": "", "x/b.log": "", "x/keep.txt": ""})
    assert listed(await env.run("list_files")) == [".gitignore", "x/keep.txt"]


async def test_gitignore_negation_reincludes_a_file(env: Env) -> None:
    tree(env, {".gitignore": "*.log\n!important.log\n", "a.log": "", "important.log": "", "x/important.log": ""})
    assert listed(await env.run("list_files")) == [".gitignore", "important.log", "x/important.log"]


async def test_gitignore_cannot_reinclude_a_file_inside_an_ignored_directory(env: Env) -> None:
    tree(env, {".gitignore": "build/\n!build/keep.txt\n", "build/keep.txt": "", "build/out.o": ""})
    assert listed(await env.run("list_files")) == [".gitignore"]


async def test_gitignore_directory_patterns_match_only_directories(env: Env) -> None:
    tree(env, {".gitignore": "cache/\n", "cache/x": "", "src/cache/y": "", "src/cache.txt": "", "lib/cache": ""})
    assert listed(await env.run("list_files")) == [".gitignore", "lib/cache", "src/cache.txt"]


async def test_gitignore_anchored_patterns_match_only_beside_their_gitignore(env: Env) -> None:
    tree(
        env,
        {
            ".gitignore": "/top.txt\ndocs/*.html\n",
            "top.txt": "",
            "sub/top.txt": "",
            "docs/a.html": "",
            "docs/deep/b.html": "",
            "other/docs/c.html": "",
        },
    )
    assert listed(await env.run("list_files")) == [
        ".gitignore",
        "docs/deep/b.html",
        "other/docs/c.html",
        "sub/top.txt",
    ]


async def test_gitignore_double_star_forms(env: Env) -> None:
    tree(
        env,
        {
            ".gitignore": "**/gen\na/**/z.txt\nvendor/**\n",
            "gen/1": "",
            "x/y/gen/2": "",
            "a/z.txt": "",
            "a/b/c/z.txt": "",
            "a/keep.txt": "",
            "vendor/lib/v.js": "",
        },
    )
    assert listed(await env.run("list_files")) == [".gitignore", "a/keep.txt"]


async def test_nested_gitignore_applies_below_its_directory_and_overrides_the_parent(env: Env) -> None:
    tree(
        env,
        {
            ".gitignore": "*.tmp\n",
            "pkg/.gitignore": "!keep.tmp\n/local.txt\n",
            "pkg/keep.tmp": "",
            "pkg/drop.tmp": "",
            "pkg/local.txt": "",
            "local.txt": "",
            "other/keep.tmp": "",
        },
    )
    assert listed(await env.run("list_files")) == [".gitignore", "local.txt", "pkg/.gitignore", "pkg/keep.tmp"]


async def test_gitignore_above_the_listed_directory_still_applies(env: Env) -> None:
    tree(env, {".gitignore": "*.o\nsrc/gen/\n", "src/a.c": "", "src/a.o": "", "src/gen/x.c": ""})
    assert listed(await env.run("list_files", path="src")) == ["src/a.c"]


async def test_gitignore_escapes_and_trailing_spaces(env: Env) -> None:
    tree(
        env,
        {".gitignore": "\\#hash\n\\!bang\nspaced   \n", "#hash": "", "!bang": "", "spaced": "", "kept": ""},
    )
    assert listed(await env.run("list_files")) == [".gitignore", "kept"]


async def test_git_info_exclude_is_honoured(env: Env) -> None:
    tree(env, {".git/info/exclude": "secret.env\n", "secret.env": "", "app.py": ""})
    assert listed(await env.run("list_files")) == ["app.py"]


@pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")
async def test_listing_agrees_with_git_on_a_mixed_tree(env: Env) -> None:
    tree(
        env,
        {
            ".gitignore": "*.log\n!keep.log\n/dist\nnode_modules/\n**/tmp/**\n[Bb]uild*/\n*.py[co]\ndoc/**/*.pdf\n",
            "a.log": "",
            "keep.log": "",
            "dist/x.js": "",
            "src/dist/y.js": "",
            "node_modules/m/i.js": "",
            "web/node_modules/n.js": "",
            "tmp/t": "",
            "q/tmp/r/s": "",
            "Build1/b": "",
            "build_x/c": "",
            "builder.txt": "",
            "m.pyc": "",
            "m.py": "",
            "doc/a/b/c.pdf": "",
            "doc/c.pdf": "",
            "doc/c.md": "",
            "lib/.gitignore": "*.txt\n!/keep.txt\nsub/\n",
            "lib/keep.txt": "",
            "lib/drop.txt": "",
            "lib/x/keep.txt": "",
            "lib/sub/f.c": "",
            "lib/x/sub": "",
        },
    )
    await anyio.run_process(["git", "init", "-q", str(env.cwd)])
    git = await anyio.run_process(["git", "-C", str(env.cwd), "ls-files", "--others", "--exclude-standard"])
    assert listed(await env.run("list_files")) == sorted(git.stdout.decode().splitlines())


def test_glob_matcher_anchoring_and_braces() -> None:
    py = glob_matcher("*.py")
    assert py is not None
    assert py("a.py")
    assert py("x/y/a.py")
    assert not py("a.pyc")
    src = glob_matcher("./src/*.{c,h}")
    assert src is not None
    assert src("src/a.c")
    assert src("src/a.h")
    assert not src("src/x/a.c")
    assert not src("lib/src/a.c")
    directory = glob_matcher("tests/")
    assert directory is not None
    assert directory("tests/a/b.py")
    assert not directory("tests")


# --- grep ---


async def test_grep_prints_relative_path_line_number_and_text(env: Env) -> None:
    tree(env, {"src/a.py": "import os\ndef main():\n    os.exit()\n", "b.txt": "nothing\nos here\n"})
    result = await env.run("grep", pattern=r"\bos\b")
    assert result.output.splitlines() == ["b.txt:2: os here", "src/a.py:1: import os", "src/a.py:3:     os.exit()"]


async def test_grep_glob_and_path_narrow_the_search(env: Env) -> None:
    tree(env, {"src/a.py": "hit\n", "src/b.txt": "hit\n", "lib/c.py": "hit\n"})
    assert (await env.run("grep", pattern="hit", glob="*.py")).output.splitlines() == [
        "lib/c.py:1: hit",
        "src/a.py:1: hit",
    ]
    assert (await env.run("grep", pattern="hit", path="src")).output.splitlines() == [
        "src/a.py:1: hit",
        "src/b.txt:1: hit",
    ]
    assert (await env.run("grep", pattern="hit", path="src/b.txt")).output == "src/b.txt:1: hit"


async def test_grep_skips_ignored_git_binary_and_special_files(env: Env) -> None:
    tree(env, {".gitignore": "out/\n", "out/gen.py": "needle\n", ".git/config": "needle\n", "ok.py": "needle\n"})
    (env.cwd / "image.bin").write_bytes(b"needle\x00\x01")
    os.mkfifo(env.cwd / "fifo")  # opening it would block forever
    assert (await env.run("grep", pattern="needle")).output == "ok.py:1: needle"


async def test_grep_does_not_follow_symlinks_outside_the_session(env: Env) -> None:
    make_links(env)
    env.write("public.txt", "no secret here\n")
    result = await env.run("grep", pattern="SECRET")
    assert result.ok
    assert "TOP SECRET" not in result.output
    assert result.output == "no matches for 'SECRET' in ."


async def test_grep_with_an_invalid_regex_fails_clearly(env: Env) -> None:
    with pytest.raises(ToolError, match=r"invalid regular expression '\(unclosed': missing \)"):
        await env.run("grep", pattern="(unclosed")


async def test_grep_caps_matches_and_cuts_long_lines(env: Env) -> None:
    env.write("many.txt", "match\n" * (MAX_GREP_MATCHES + 50))
    env.write("long.txt", "match" + "x" * 2000 + "\n")
    result = await env.run("grep", pattern="match")
    lines = result.output.splitlines()
    assert len(lines) == MAX_GREP_MATCHES + 1
    assert lines[0].startswith("long.txt:1: matchxxx")
    assert lines[0].endswith("…")
    assert len(lines[0]) < 600
    assert lines[-1] == f"[stopped at {MAX_GREP_MATCHES} matching lines; narrow the search with path or glob]"


async def test_grep_reports_missing_paths(env: Env) -> None:
    with pytest.raises(ToolError, match="missing: no such file or directory"):
        await env.run("grep", pattern="x", path="missing")


# --- cancellation of the disk walk ---


@pytest.mark.parametrize(("tool", "arguments"), [("list_files", {}), ("grep", {"pattern": "zzz"})])
async def test_a_cancel_stops_the_walk_between_entries(
    env: Env, monkeypatch: pytest.MonkeyPatch, tool: str, arguments: dict[str, Any]
) -> None:
    for i in range(300):
        (env.cwd / f"f{i:03}.txt").write_text("a\n")
    real_ignored = gitignore_module._ignored
    seen: list[int] = []
    with anyio.CancelScope() as scope:

        def ignored(stack: Any, path: str, is_dir: bool) -> bool:
            seen.append(1)
            if len(seen) == 20:
                anyio.from_thread.run_sync(scope.cancel)  # the user pressed Stop mid-walk
            return real_ignored(stack, path, is_dir)

        monkeypatch.setattr(gitignore_module, "_ignored", ignored)
        await env.run(tool, **arguments)
    assert scope.cancelled_caught
    assert len(seen) <= 21  # the entry being looked at finishes; the next one sees the cancel


# --- update_plan ---


async def test_update_plan_emits_the_complete_plan_and_confirms(env: Env) -> None:
    entries = [
        {"content": "Read the code", "priority": "high", "status": "completed"},
        {"content": "Fix the bug", "priority": "high", "status": "in_progress"},
        {"content": "Write a test", "priority": "low", "status": "pending"},
    ]
    result = await env.run("update_plan", entries=entries)
    assert env.events == [
        PlanUpdated(
            (
                PlanEntry("Read the code", "high", "completed"),
                PlanEntry("Fix the bug", "high", "in_progress"),
                PlanEntry("Write a test", "low", "pending"),
            )
        )
    ]
    assert result.output == "plan updated: 3 steps (1 completed, 1 in progress, 1 pending)"
    assert TOOLS["update_plan"].kind == "think"


async def test_update_plan_rejects_an_unknown_status(env: Env) -> None:
    with pytest.raises(ValidationError, match="status"):
        TOOLS["update_plan"].args_model.model_validate({"entries": [{"content": "x", "status": "done"}]})


def test_file_tools_have_the_agreed_names_kinds_and_arguments() -> None:
    shape = {t.name: (t.kind, sorted(t.args_model.model_fields)) for t in (*FILE_TOOLS, *PLAN_TOOLS)}
    assert shape == {
        "read_file": ("read", ["limit", "offset", "path"]),
        "write_file": ("edit", ["content", "path"]),
        "edit_file": ("edit", ["new_text", "old_text", "path"]),
        "list_files": ("search", ["path", "pattern"]),
        "grep": ("search", ["glob", "path", "pattern"]),
        "update_plan": ("think", ["entries"]),
    }
