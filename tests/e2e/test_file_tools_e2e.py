"""The file tools end to end, over real stdio: the editor's `fs/*` methods when the client offers them (and the disk
when it does not), the permission flow for edits in every mode, confinement, and cancels while the editor holds a
permission request or a file read (docs/interrupts.md I8 and its variant d).

The tests play the editor with the raw client: they wait for the server's `session/request_permission` or
`fs/*_text_file` request and answer it (or never do). The fixture validates every line against the ACP schema and
checks the whole wire log at teardown.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.support.harness import DEFAULT_ARGS, LONG_GRACE_ARGS, T_ACK, T_WAIT, W_QUIET, RawClient

StartServer = Callable[..., Awaitable[RawClient]]

FS = {"fs": {"readTextFile": True, "writeTextFile": True}}
OPTION_KINDS = ["allow_once", "allow_always", "reject_once", "reject_always"]


@dataclass
class Editor:
    """The raw client playing an editor in one project directory; answers each server request at most once."""

    client: RawClient
    root: Path
    session_id: str = ""
    answered: set[Any] = field(default_factory=set)

    @property
    def cwd(self) -> Path:
        return self.root / "project"

    @property
    def outside(self) -> Path:
        return self.root / "outside"

    async def next_request(self, method: str, timeout: float = T_WAIT) -> dict[str, Any]:
        """The first request with `method` not answered yet (from the start of the connection)."""
        request = await self.client.wait_for(
            lambda m: m.get("method") == method and "id" in m and m["id"] not in self.answered, timeout
        )
        self.answered.add(request["id"])
        return request

    async def reply(self, request: dict[str, Any], result: Any) -> None:
        await self.client.send({"id": request["id"], "result": result})

    async def choose(self, option_id: str) -> dict[str, Any]:
        request = await self.next_request("session/request_permission")
        await self.reply(request, {"outcome": {"outcome": "selected", "optionId": option_id}})
        return request

    async def set_mode(self, mode: str) -> None:
        response = await self.client.call("session/set_mode", {"sessionId": self.session_id, "modeId": mode})
        assert response.get("result") == {}, response

    async def run(self, script: list[dict[str, Any]]) -> Any:
        return await self.client.prompt(self.session_id, script)

    async def finish(self, prompt: Any, timeout: float = T_WAIT) -> dict[str, Any]:
        response = await self.client.response(prompt, timeout)
        assert "result" in response, response
        result: dict[str, Any] = response["result"]
        return result

    def calls(self) -> list[dict[str, Any]]:
        return self.client.updates(self.session_id, "tool_call")

    def finals(self) -> list[dict[str, Any]]:
        """The closing update of each tool call, in order."""
        return [
            u
            for u in self.client.updates(self.session_id, "tool_call_update")
            if u.get("status") in ("completed", "failed")
        ]

    def requests(self, method: str) -> list[dict[str, Any]]:
        return [m for m in self.client.received if m.get("method") == method]


async def open_editor(
    start_server: StartServer, tmp_path: Path, capabilities: dict[str, Any] | None = None, args: tuple[str, ...] = ()
) -> Editor:
    client = await start_server(*args)
    await client.initialize(capabilities)
    editor = Editor(client, tmp_path)
    for directory in (editor.cwd, editor.outside):
        directory.mkdir()
    (editor.outside / "secret.txt").write_text("TOP SECRET\n")
    editor.session_id = await client.new_session(str(editor.cwd))
    return editor


def text_of(update: dict[str, Any]) -> str:
    [block] = update["content"]
    assert block["type"] == "content", block
    text: str = block["content"]["text"]
    return text


# --- the disk, and the permission flow in the default mode ---


async def test_write_file_asks_with_a_diff_and_writes_the_disk_only_after_allow(
    start_server: StartServer, tmp_path: Path
) -> None:
    editor = await open_editor(start_server, tmp_path)
    target = editor.cwd / "a.txt"
    args = {"path": "a.txt", "content": "hi\n"}
    prompt = await editor.run([{"tool": "write_file", "args": args}, {"say": "done"}])
    asked = await editor.next_request("session/request_permission")
    params = asked["params"]
    assert [o["kind"] for o in params["options"]] == OPTION_KINDS
    diff = {"type": "diff", "path": str(target), "oldText": None, "newText": "hi\n"}
    assert params["toolCall"]["content"] == [diff]
    assert params["toolCall"]["locations"] == [{"path": str(target)}]
    assert not target.exists()  # nothing before the answer
    await editor.reply(asked, {"outcome": {"outcome": "selected", "optionId": "allow_once"}})
    assert await editor.finish(prompt) == {"stopReason": "end_turn"}
    assert target.read_text() == "hi\n"
    [call] = editor.calls()
    assert call["kind"] == "edit"
    assert call["title"] == "Write a.txt"
    assert call["locations"] == [{"path": str(target)}]
    assert call["rawInput"] == args
    assert params["toolCall"]["toolCallId"] == call["toolCallId"]
    [final] = editor.finals()
    assert final["status"] == "completed"
    assert final["content"] == [diff]
    assert editor.client.texts(editor.session_id) == ["done"]


async def test_without_client_fs_the_tools_read_edit_list_and_search_the_disk(
    start_server: StartServer, tmp_path: Path
) -> None:
    editor = await open_editor(start_server, tmp_path)
    await editor.set_mode("accept_edits")
    (editor.cwd / "src").mkdir()
    source = editor.cwd / "src" / "app.py"
    source.write_text("def f():\n    return 1\n")
    (editor.cwd / ".gitignore").write_text("*.log\n")
    (editor.cwd / "debug.log").write_text("return 1\n")
    prompt = await editor.run(
        [
            {"tool": "read_file", "args": {"path": "src/app.py"}},
            {"tool": "edit_file", "args": {"path": "src/app.py", "old_text": "return 1", "new_text": "return 2"}},
            {"tool": "list_files", "args": {}},
            {"tool": "grep", "args": {"pattern": r"return \d"}},
        ]
    )
    assert await editor.finish(prompt) == {"stopReason": "end_turn"}
    assert source.read_text() == "def f():\n    return 2\n"
    assert editor.requests("fs/read_text_file") == []
    assert editor.requests("fs/write_text_file") == []
    assert editor.requests("session/request_permission") == []
    assert [(c["kind"], c["title"], c.get("locations")) for c in editor.calls()] == [
        ("read", "Read src/app.py", [{"path": str(source)}]),
        ("edit", "Edit src/app.py", [{"path": str(source)}]),
        ("search", "List files in .", None),
        ("search", r"Grep `return \d` in .", None),
    ]
    read, edit, listing, grep = editor.finals()
    assert text_of(read) == "def f():\n    return 1\n"
    assert edit["content"] == [
        {
            "type": "diff",
            "path": str(source),
            "oldText": "def f():\n    return 1\n",
            "newText": "def f():\n    return 2\n",
        }
    ]
    assert text_of(listing) == ".gitignore\nsrc/app.py"
    assert text_of(grep) == "src/app.py:2:     return 2"


# --- the editor's file system ---


async def test_with_client_fs_the_tools_use_the_editors_buffers_and_never_the_disk(
    start_server: StartServer, tmp_path: Path
) -> None:
    editor = await open_editor(start_server, tmp_path, FS)
    await editor.set_mode("bypass")
    a = editor.cwd / "a.txt"
    a.write_text("disk text\n")
    b = editor.cwd / "b.txt"
    prompt = await editor.run(
        [
            {"tool": "read_file", "args": {"path": "a.txt"}},
            {"tool": "edit_file", "args": {"path": "a.txt", "old_text": "buffer", "new_text": "edited"}},
            {"tool": "write_file", "args": {"path": "b.txt", "content": "new\n"}},
        ]
    )
    read = await editor.next_request("fs/read_text_file")
    assert read["params"] == {"sessionId": editor.session_id, "path": str(a)}
    await editor.reply(read, {"content": "buffer text\n"})
    await editor.reply(await editor.next_request("fs/read_text_file"), {"content": "buffer text\n"})
    write = await editor.next_request("fs/write_text_file")
    assert write["params"] == {"sessionId": editor.session_id, "path": str(a), "content": "edited text\n"}
    await editor.reply(write, {})
    # b.txt is not on the disk: a new file, so its current text is not asked for.
    write_b = await editor.next_request("fs/write_text_file")
    assert write_b["params"] == {"sessionId": editor.session_id, "path": str(b), "content": "new\n"}
    await editor.reply(write_b, {})
    assert await editor.finish(prompt) == {"stopReason": "end_turn"}
    read_final, edit_final, write_final = editor.finals()
    assert text_of(read_final) == "buffer text\n"
    assert edit_final["content"][0]["oldText"] == "buffer text\n"
    assert write_final["content"] == [{"type": "diff", "path": str(b), "oldText": None, "newText": "new\n"}]
    assert a.read_text() == "disk text\n"
    assert not b.exists()
    assert [r["params"]["path"] for r in editor.requests("fs/read_text_file")] == [str(a), str(a)]


async def test_an_editor_read_error_is_a_failed_tool_call_and_the_turn_goes_on(
    start_server: StartServer, tmp_path: Path
) -> None:
    editor = await open_editor(start_server, tmp_path, FS)
    prompt = await editor.run([{"tool": "read_file", "args": {"path": "gone.txt"}}, {"say": "after"}])
    read = await editor.next_request("fs/read_text_file")
    await editor.client.send({"id": read["id"], "error": {"code": -32002, "message": "Resource not found"}})
    assert await editor.finish(prompt) == {"stopReason": "end_turn"}
    [final] = editor.finals()
    assert final["status"] == "failed"
    assert "the editor could not read it: Resource not found" in text_of(final)
    assert editor.client.texts(editor.session_id) == ["after"]


# --- permission answers and modes ---


async def test_a_rejected_write_fails_and_leaves_the_file_untouched(start_server: StartServer, tmp_path: Path) -> None:
    editor = await open_editor(start_server, tmp_path)
    target = editor.cwd / "keep.txt"
    target.write_text("original\n")
    prompt = await editor.run([{"tool": "write_file", "args": {"path": "keep.txt", "content": "clobbered\n"}}])
    asked = await editor.choose("reject_once")
    assert asked["params"]["toolCall"]["content"][0]["oldText"] == "original\n"
    assert await editor.finish(prompt) == {"stopReason": "end_turn"}
    [final] = editor.finals()
    assert final["status"] == "failed"
    assert text_of(final) == "error: keep.txt was not changed: the user rejected write_file"
    assert target.read_text() == "original\n"


async def test_always_allow_is_remembered_for_the_session(start_server: StartServer, tmp_path: Path) -> None:
    editor = await open_editor(start_server, tmp_path)
    first = await editor.run([{"tool": "write_file", "args": {"path": "one.txt", "content": "1"}}])
    await editor.choose("allow_always")
    assert await editor.finish(first) == {"stopReason": "end_turn"}
    second = await editor.run(
        [
            {"tool": "write_file", "args": {"path": "two.txt", "content": "2"}},
            {"tool": "write_file", "args": {"path": "one.txt", "content": "1 again"}},
        ]
    )
    assert await editor.finish(second) == {"stopReason": "end_turn"}
    assert len(editor.requests("session/request_permission")) == 1
    assert (editor.cwd / "one.txt").read_text() == "1 again"
    assert (editor.cwd / "two.txt").read_text() == "2"
    assert [f["status"] for f in editor.finals()] == ["completed"] * 3


@pytest.mark.parametrize("mode", ["accept_edits", "bypass"])
async def test_permissive_modes_edit_without_asking(start_server: StartServer, tmp_path: Path, mode: str) -> None:
    editor = await open_editor(start_server, tmp_path)
    await editor.set_mode(mode)
    (editor.cwd / "e.txt").write_text("alpha\n")
    prompt = await editor.run(
        [
            {"tool": "write_file", "args": {"path": "w.txt", "content": "w\n"}},
            {"tool": "edit_file", "args": {"path": "e.txt", "old_text": "alpha", "new_text": "beta"}},
        ]
    )
    assert await editor.finish(prompt) == {"stopReason": "end_turn"}
    assert editor.requests("session/request_permission") == []
    assert (editor.cwd / "w.txt").read_text() == "w\n"
    assert (editor.cwd / "e.txt").read_text() == "beta\n"


async def test_read_only_mode_refuses_edits_without_asking_but_still_reads(
    start_server: StartServer, tmp_path: Path
) -> None:
    editor = await open_editor(start_server, tmp_path)
    (editor.cwd / "e.txt").write_text("alpha\n")
    await editor.set_mode("read_only")
    prompt = await editor.run(
        [
            {"tool": "write_file", "args": {"path": "w.txt", "content": "w\n"}},
            {"tool": "edit_file", "args": {"path": "e.txt", "old_text": "alpha", "new_text": "beta"}},
            {"tool": "read_file", "args": {"path": "e.txt"}},
        ]
    )
    assert await editor.finish(prompt) == {"stopReason": "end_turn"}
    assert editor.requests("session/request_permission") == []
    write, edit, read = editor.finals()
    assert (write["status"], edit["status"], read["status"]) == ("failed", "failed", "completed")
    assert "read-only mode: write_file is not allowed" in text_of(write)
    assert "read-only mode: edit_file is not allowed" in text_of(edit)
    assert text_of(read) == "alpha\n"
    assert not (editor.cwd / "w.txt").exists()
    assert (editor.cwd / "e.txt").read_text() == "alpha\n"


# --- confinement ---


@pytest.mark.parametrize("capabilities", [None, FS], ids=["disk", "client-fs"])
async def test_path_escapes_fail_and_nothing_is_read_asked_or_written(
    start_server: StartServer, tmp_path: Path, capabilities: dict[str, Any] | None
) -> None:
    editor = await open_editor(start_server, tmp_path, capabilities)
    (editor.cwd / "link").symlink_to(editor.outside, target_is_directory=True)
    secret = str(editor.outside / "secret.txt")
    prompt = await editor.run(
        [
            {"tool": "read_file", "args": {"path": "../outside/secret.txt"}},
            {"tool": "read_file", "args": {"path": secret}},
            {"tool": "write_file", "args": {"path": "link/secret.txt", "content": "pwned"}},
            {"tool": "edit_file", "args": {"path": "../outside/secret.txt", "old_text": "TOP", "new_text": "NO"}},
            {"tool": "grep", "args": {"pattern": "SECRET", "path": "link"}},
            {"tool": "list_files", "args": {"path": ".."}},
            {"say": "still here"},
        ]
    )
    assert await editor.finish(prompt) == {"stopReason": "end_turn"}
    finals = editor.finals()
    assert [f["status"] for f in finals] == ["failed"] * 6
    for final in finals:
        assert "outside the session's directories" in text_of(final)
        assert "TOP SECRET" not in text_of(final)
    assert all("locations" not in call for call in editor.calls())
    for method in ("fs/read_text_file", "fs/write_text_file", "session/request_permission"):
        assert editor.requests(method) == []
    assert sorted(p.name for p in editor.outside.iterdir()) == ["secret.txt"]
    assert (editor.outside / "secret.txt").read_text() == "TOP SECRET\n"
    assert editor.client.texts(editor.session_id) == ["still here"]


async def test_additional_directories_are_writable_and_announced_with_absolute_locations(
    start_server: StartServer, tmp_path: Path
) -> None:
    client = await start_server()
    await client.initialize()
    editor = Editor(client, tmp_path)
    extra = tmp_path / "extra"
    for directory in (editor.cwd, editor.outside, extra):
        directory.mkdir()
    params = {"cwd": str(editor.cwd), "mcpServers": [], "additionalDirectories": [str(extra)]}
    response = await client.call("session/new", params)
    editor.session_id = response["result"]["sessionId"]
    target = extra / "notes.md"
    prompt = await editor.run([{"tool": "write_file", "args": {"path": str(target), "content": "# notes\n"}}])
    asked = await editor.choose("allow_once")
    assert asked["params"]["toolCall"]["locations"] == [{"path": str(target)}]
    assert await editor.finish(prompt) == {"stopReason": "end_turn"}
    assert target.read_text() == "# notes\n"
    located = [u for u in client.updates(editor.session_id, "tool_call_update") if "locations" in u]
    assert [u["locations"] for u in located] == [[{"path": str(target)}]]


# --- the plan ---


async def test_update_plan_sends_the_complete_plan(start_server: StartServer, tmp_path: Path) -> None:
    editor = await open_editor(start_server, tmp_path)
    entries = [
        {"content": "Read", "priority": "high", "status": "completed"},
        {"content": "Fix", "priority": "medium", "status": "in_progress"},
    ]
    prompt = await editor.run([{"tool": "update_plan", "args": {"entries": entries}}])
    assert await editor.finish(prompt) == {"stopReason": "end_turn"}
    [plan] = editor.client.updates(editor.session_id, "plan")
    assert plan["entries"] == entries
    [call] = editor.calls()
    assert (call["kind"], call["title"]) == ("think", "Update plan")
    [final] = editor.finals()
    assert text_of(final) == "plan updated: 2 steps (1 completed, 1 in progress, 0 pending)"


# --- cancels while the editor holds the turn (docs/interrupts.md I8) ---


def position(client: RawClient, message: dict[str, Any]) -> int:
    return next(e.seq for e in client.log if e.msg is message)


async def assert_cancelled_and_retracted(editor: Editor, prompt: Any, held: dict[str, Any]) -> None:
    client = editor.client
    t0 = await client.cancel(editor.session_id)
    response = await client.response(prompt)
    assert response["result"] == {"stopReason": "cancelled"}
    assert client.arrival_time(response) - t0 <= T_ACK
    [retraction] = editor.requests("$/cancel_request")
    assert retraction["params"] == {"requestId": held["id"]}
    assert position(client, retraction) < position(client, response)
    [final] = editor.finals()
    assert final["status"] == "failed"


async def test_a_cancel_during_the_permission_request_retracts_it_and_a_late_allow_writes_nothing(
    start_server: StartServer, tmp_path: Path
) -> None:
    # LONG_GRACE: an answer within T_ACK then means at once, never the cleanup deadline.
    editor = await open_editor(start_server, tmp_path, FS, args=LONG_GRACE_ARGS)
    target = editor.cwd / "out.txt"
    prompt = await editor.run([{"tool": "write_file", "args": {"path": "out.txt", "content": "x"}}, {"say": "no"}])
    held = await editor.next_request("session/request_permission")
    await assert_cancelled_and_retracted(editor, prompt, held)
    count = len(editor.client.received)
    await editor.reply(held, {"outcome": {"outcome": "selected", "optionId": "allow_once"}})
    await asyncio.sleep(W_QUIET)
    assert [m for m in editor.client.received[count:] if m.get("method") != "_scripted/probe"] == []
    assert editor.requests("fs/write_text_file") == []
    assert not target.exists()
    assert editor.client.texts(editor.session_id) == []


async def test_a_cancel_during_an_editor_file_read_retracts_it_and_a_late_answer_is_ignored(
    start_server: StartServer, tmp_path: Path
) -> None:
    # LONG_GRACE: an answer within T_ACK then means at once, never the cleanup deadline.
    editor = await open_editor(start_server, tmp_path, FS, args=LONG_GRACE_ARGS)
    (editor.cwd / "e.txt").write_text("alpha\n")
    await editor.set_mode("bypass")
    prompt = await editor.run(
        [{"tool": "edit_file", "args": {"path": "e.txt", "old_text": "alpha", "new_text": "beta"}}, {"say": "no"}]
    )
    held = await editor.next_request("fs/read_text_file")
    await assert_cancelled_and_retracted(editor, prompt, held)
    count = len(editor.client.received)
    await editor.reply(held, {"content": "alpha\n"})
    await asyncio.sleep(W_QUIET)
    assert [m for m in editor.client.received[count:] if m.get("method") != "_scripted/probe"] == []
    assert editor.requests("fs/write_text_file") == []
    assert (editor.cwd / "e.txt").read_text() == "alpha\n"
    # The session is ready for the next prompt.
    again = await editor.run([{"say": "ok"}])
    assert await editor.finish(again) == {"stopReason": "end_turn"}


# --- confinement under a race: a symbolic link swapped in between check and use ---

RACE_CALLS = 300
# One model call per tool call, and the turn must not stop short of them.
RACE_SERVER_ARGS = (*DEFAULT_ARGS, "--max-turn-requests", str(RACE_CALLS + 10))
# How long the swapped name stays a file, then a link, in each round.
SWAP_HOLD_S = 0.002


@contextlib.contextmanager
def swapping(target: Path, inside_text: str, outside: Path) -> Iterator[None]:
    """While open, `target` flips between a regular file and a symbolic link to `outside`, each swap an atomic
    rename, in a tight loop in a thread of its own: the attack of a process that shares the workspace."""
    stop = threading.Event()
    spare_file, spare_link = target.with_name(".swap-file"), target.with_name(".swap-link")

    def swap() -> None:
        while not stop.is_set():
            spare_file.write_text(inside_text)
            os.replace(spare_file, target)
            # A moment in each state every round, so that on a loaded machine some calls still meet the plain file
            # whole (each write checks the name more than once) as often as others meet the link.
            time.sleep(SWAP_HOLD_S)
            spare_link.unlink(missing_ok=True)
            spare_link.symlink_to(os.path.relpath(outside, target.parent))
            os.replace(spare_link, target)
            time.sleep(SWAP_HOLD_S)

    spare_file.write_text(inside_text)
    os.replace(spare_file, target)
    thread = threading.Thread(target=swap, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()


async def test_a_symlink_swapped_in_during_reads_never_shows_the_outside_file(
    start_server: StartServer, tmp_path: Path
) -> None:
    editor = await open_editor(start_server, tmp_path, None, args=RACE_SERVER_ARGS)
    secret = editor.outside / "secret.txt"
    with swapping(editor.cwd / "x", "inside\n", secret):
        prompt = await editor.run([{"tool": "read_file", "args": {"path": "x"}}] * RACE_CALLS + [{"say": "done"}])
        assert await editor.finish(prompt, timeout=RACE_CALLS * T_ACK) == {"stopReason": "end_turn"}
    finals = editor.finals()
    assert len(finals) == RACE_CALLS
    for final in finals:
        text = text_of(final)
        assert "TOP SECRET" not in text
        # Each read saw the file, or refused the link: nothing else.
        assert text == "inside\n" or "outside the session's directories" in text, text
    assert any(text_of(final) == "inside\n" for final in finals)
    assert editor.client.texts(editor.session_id) == ["done"]


async def test_a_symlink_swapped_in_during_writes_never_changes_the_outside_file(
    start_server: StartServer, tmp_path: Path
) -> None:
    editor = await open_editor(start_server, tmp_path, None, args=RACE_SERVER_ARGS)
    await editor.set_mode("bypass")
    secret = editor.outside / "secret.txt"
    script = [{"tool": "write_file", "args": {"path": "x", "content": f"write {n}\n"}} for n in range(RACE_CALLS)]
    with swapping(editor.cwd / "x", "inside\n", secret):
        prompt = await editor.run([*script, {"say": "done"}])
        assert await editor.finish(prompt, timeout=RACE_CALLS * T_ACK) == {"stopReason": "end_turn"}
    assert len(editor.finals()) == RACE_CALLS
    assert any(final["status"] == "completed" for final in editor.finals())
    assert secret.read_text() == "TOP SECRET\n"
    assert sorted(p.name for p in editor.outside.iterdir()) == ["secret.txt"]


# --- the editor's file system: what it is sent ---


async def test_writing_a_new_file_with_client_fs_sends_no_read_first(start_server: StartServer, tmp_path: Path) -> None:
    editor = await open_editor(start_server, tmp_path, FS)
    await editor.set_mode("bypass")
    target = editor.cwd / "docs" / "new.md"
    prompt = await editor.run([{"tool": "write_file", "args": {"path": "docs/new.md", "content": "# new\n"}}])
    write = await editor.next_request("fs/write_text_file")
    assert write["params"] == {"sessionId": editor.session_id, "path": str(target), "content": "# new\n"}
    await editor.reply(write, {})
    assert await editor.finish(prompt) == {"stopReason": "end_turn"}
    assert editor.requests("fs/read_text_file") == []
    [final] = editor.finals()
    assert final["status"] == "completed"
    assert final["content"] == [{"type": "diff", "path": str(target), "oldText": None, "newText": "# new\n"}]
    assert not target.exists()  # the editor writes it, not us


async def test_with_client_fs_the_editor_is_sent_the_checked_path_not_the_link(
    start_server: StartServer, tmp_path: Path
) -> None:
    editor = await open_editor(start_server, tmp_path, FS)
    (editor.cwd / "real.txt").write_text("disk\n")
    (editor.cwd / "alias.txt").symlink_to("real.txt")
    prompt = await editor.run([{"tool": "read_file", "args": {"path": "alias.txt"}}])
    read = await editor.next_request("fs/read_text_file")
    # Every component was walked when it was sent, and none of it is a link the editor would follow blindly.
    assert read["params"]["path"] == str(editor.cwd / "real.txt")
    await editor.reply(read, {"content": "buffer\n"})
    assert await editor.finish(prompt) == {"stopReason": "end_turn"}
    [final] = editor.finals()
    assert text_of(final) == "buffer\n"


# --- file names that are not UTF-8 ---


async def test_a_file_name_that_is_not_utf8_is_listed_read_and_grepped_by_its_escaped_name(
    start_server: StartServer, tmp_path: Path
) -> None:
    editor = await open_editor(start_server, tmp_path)
    (editor.cwd / os.fsdecode(b"caf\xe9.txt")).write_bytes(b"bonjour\n")
    shown = "caf\\xe9.txt"  # the byte 0xE9 as the four characters \xe9: valid UTF-8 on the wire
    prompt = await editor.run(
        [
            {"tool": "list_files", "args": {}},
            {"tool": "read_file", "args": {"path": shown}},
            {"tool": "grep", "args": {"pattern": "bonjour"}},
            {"say": "done"},
        ]
    )
    assert await editor.finish(prompt) == {"stopReason": "end_turn"}
    listing, read, grep = editor.finals()
    assert [f["status"] for f in (listing, read, grep)] == ["completed"] * 3
    assert text_of(listing) == shown
    assert text_of(read) == "bonjour\n"
    assert text_of(grep) == f"{shown}:1: bonjour"
    [_, read_call, _] = editor.calls()
    assert read_call["locations"] == [{"path": f"{editor.cwd}/{shown}"}]
    assert editor.client.texts(editor.session_id) == ["done"]
    # The store kept the same text: the session replays with the name as shown.
    start = len(editor.client.received)
    params = {"sessionId": editor.session_id, "cwd": str(editor.cwd), "mcpServers": []}
    assert "result" in await editor.client.call("session/load", params)
    replayed = [
        block["content"]["text"]
        for m in editor.client.received[start:]
        if m.get("method") == "session/update"
        for block in m["params"]["update"].get("content") or []
        if isinstance(block, dict) and block.get("type") == "content"
    ]
    assert shown in replayed
    assert f"{shown}:1: bonjour" in replayed
