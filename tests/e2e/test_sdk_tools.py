"""The product tools end to end with the official ACP Python SDK's client side as the editor.

`test_file_tools_e2e.py` and `test_command_tools_e2e.py` drive `read_file`, `write_file`, `edit_file` and
`run_command` with a raw-line client; here the same tools talk to the SDK, so what the server sends an editor built
on it (`session/request_permission`, `fs/*_text_file`, `terminal/*`, diffs, terminal content, `plan` updates) is
proven to parse into the SDK's models and to be answered by its dispatcher, and what the SDK answers is accepted.
The client advertises `fs.readTextFile`, `fs.writeTextFile` and `terminal`, so files live in the editor's buffers
(an in-memory dict that differs from the disk on purpose) and commands in `FakeTerminal`s that execute nothing.

The second half is the late and never cases of docs/interrupts.md (I8, I9, I12, I17) and a randomized run of I18 with
product tools: a cancel never waits for the editor, a late answer changes nothing, every terminal is killed and
released exactly once before the cancelled prompt's response. Every test runs through `spawn_sdk_agent`, whose
teardown closes stdin and asserts a clean exit, a schema-valid wire and C1-C4.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import signal
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from acp import PROTOCOL_VERSION, text_block
from acp.schema import (
    AgentMessageChunk,
    AgentPlanUpdate,
    ClientCapabilities,
    ContentToolCallContent,
    FileEditToolCallContent,
    FileSystemCapabilities,
    Implementation,
    PermissionOption,
    PromptResponse,
    TerminalToolCallContent,
    TextContentBlock,
    ToolCallProgress,
    ToolCallStart,
    ToolCallUpdate,
)

from tests.conftest import server_args
from tests.support.harness import (
    DEFAULT_ARGS,
    GRACE,
    T_ACK,
    T_ESC,
    T_EXIT,
    T_WAIT,
    TURN_SCOPED,
    W_QUIET,
    Entry,
    Transport,
)
from tests.support.sdk_client import (
    NEVER,
    FakeTerminal,
    RecordingClient,
    SdkAgent,
    TerminalScript,
    simulate_shell,
    spawn_sdk_agent,
)

StartAgent = Callable[..., Awaitable[SdkAgent]]

# W_quiet of docs/interrupts.md, scaled down: long enough for a late line to show up on an idle loopback pipe.
QUIET = W_QUIET
FINAL = ("completed", "failed")
OPTION_KINDS = {"allow_once", "allow_always", "reject_once", "reject_always"}
TERMINAL_CLEANUP = ["terminal/create", "terminal/wait_for_exit", "terminal/kill", "terminal/release"]


# --- fixtures and helpers ---


@pytest.fixture
async def start_agent(request: pytest.FixtureRequest, transport: type[Transport]) -> AsyncIterator[StartAgent]:
    """Start SDK-driven servers (with LONG_GRACE under `@pytest.mark.at_once`); each one is closed and checked at
    teardown (see `spawn_sdk_agent`)."""
    args = server_args(request) or DEFAULT_ARGS
    async with contextlib.AsyncExitStack() as stack:

        async def start(client: RecordingClient, terminal: bool = True) -> SdkAgent:
            agent = await stack.enter_async_context(spawn_sdk_agent(*args, client=client, transport=transport))
            response = await agent.conn.initialize(
                protocol_version=PROTOCOL_VERSION,
                client_capabilities=ClientCapabilities(
                    fs=FileSystemCapabilities(read_text_file=True, write_text_file=True), terminal=terminal
                ),
                client_info=Implementation(name="sdk-tool-tests", version="1"),
            )
            assert response.protocol_version == 1
            return agent

        yield start


@pytest.fixture
async def editor(start_agent: StartAgent) -> SdkAgent:
    """`--model scripted --test-mode --cleanup-deadline 0.5`; an SDK editor with buffers, terminals and an Allow."""
    return await start_agent(RecordingClient(permission_option="allow_once", terminals=simulate_shell))


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """The session's directory, with symbolic links resolved (the server reports real paths)."""
    return Path(os.path.realpath(tmp_path))


async def open_session(agent: SdkAgent, cwd: Path, mode: str = "default") -> str:
    session_id = (await agent.conn.new_session(cwd=str(cwd), mcp_servers=[])).session_id
    if mode != "default":
        await agent.conn.set_session_mode(session_id=session_id, mode_id=mode)
    return session_id


def prompt(agent: SdkAgent, session_id: str, script: list[dict[str, Any]]) -> Awaitable[PromptResponse]:
    """A `session/prompt` whose `_meta.scripted` is `script` (the SDK puts extra kwargs into `_meta`)."""
    return agent.conn.prompt(session_id=session_id, prompt=[text_block("go")], scripted=script)


def start_prompt(agent: SdkAgent, session_id: str, script: list[dict[str, Any]]) -> asyncio.Task[PromptResponse]:
    async def run() -> PromptResponse:
        return await prompt(agent, session_id, script)

    return asyncio.create_task(run())


async def release(agent: SdkAgent, session_id: str, gate: str) -> None:
    await agent.conn.ext_notification("scripted/release", {"sessionId": session_id, "gate": gate})


def write(path: str, content: str) -> dict[str, Any]:
    return {"tool": "write_file", "args": {"path": path, "content": content}}


def run(command: str) -> dict[str, Any]:
    return {"tool": "run_command", "args": {"command": command}}


async def assert_idle(agent: SdkAgent) -> dict[str, Any]:
    """`_acp_server/stats`: nothing running, queued, waiting on the editor, or left as a child process."""
    stats = await agent.stats()
    assert stats["runningTurns"] == 0, stats
    assert stats["queuedPrompts"] == 0, stats
    assert stats["pendingClientRequests"] == 0, stats
    assert stats["childProcesses"] == 0, stats
    return stats


def starts(agent: SdkAgent, session_id: str, since: int = 0) -> list[ToolCallStart]:
    return [u for u in agent.client.session_updates(session_id, since) if isinstance(u, ToolCallStart)]


def progress(agent: SdkAgent, session_id: str, call_id: str) -> list[ToolCallProgress]:
    return [
        u
        for u in agent.client.session_updates(session_id)
        if isinstance(u, ToolCallProgress) and u.tool_call_id == call_id
    ]


def final(agent: SdkAgent, session_id: str, call_id: str) -> ToolCallProgress:
    """The one update that closed the tool call (a second one would be a bug)."""
    closing = [u for u in progress(agent, session_id, call_id) if u.status in FINAL]
    assert len(closing) == 1, closing
    return closing[0]


def text_of(update: ToolCallProgress) -> str:
    return "".join(
        c.content.text
        for c in update.content or []
        if isinstance(c, ContentToolCallContent) and isinstance(c.content, TextContentBlock)
    )


def diffs(update: ToolCallProgress | ToolCallUpdate) -> list[FileEditToolCallContent]:
    return [c for c in update.content or [] if isinstance(c, FileEditToolCallContent)]


def method_of(entry: Entry) -> str | None:
    return entry.msg.get("method") if isinstance(entry.msg, dict) else None


def out_entries(agent: SdkAgent, method: str) -> list[Entry]:
    return [e for e in agent.wire.log if e.dir == "out" and method_of(e) == method]


def cancel_entry(agent: SdkAgent, session_id: str, nth: int = 0) -> Entry:
    """The `nth` session/cancel the SDK wrote for the session (its `t` is when the tee wrote it to the server)."""
    cancels = [
        e
        for e in agent.wire.log
        if e.dir == "in" and method_of(e) == "session/cancel" and e.msg["params"]["sessionId"] == session_id
    ]
    return cancels[nth]


def answer_entry(agent: SdkAgent, request: Entry) -> Entry | None:
    """The client's answer to a server request, if it has been written."""
    return next(
        (
            e
            for e in agent.wire.log
            if e.dir == "in"
            and isinstance(e.msg, dict)
            and "method" not in e.msg
            and e.msg.get("id") == request.msg["id"]
        ),
        None,
    )


def retracted(agent: SdkAgent, request: Entry) -> list[Entry]:
    """The `$/cancel_request`s naming a server request."""
    return [e for e in out_entries(agent, "$/cancel_request") if e.msg["params"]["requestId"] == request.msg["id"]]


def only_terminal(agent: SdkAgent) -> FakeTerminal:
    [terminal] = agent.client.terminals.values()
    return terminal


def options_of(call: Any) -> list[PermissionOption]:
    options: list[PermissionOption] = call.params["options"]
    return options


def permission_tool_call(call: Any) -> ToolCallUpdate:
    tool_call: ToolCallUpdate = call.params["toolCall"]
    return tool_call


# --- write_file, edit_file, read_file through the editor's buffers ---


async def test_write_file_allowed_once_asks_with_the_diff_then_writes_the_editor_buffer_not_the_disk(
    editor: SdkAgent, project: Path
) -> None:
    client = editor.client
    session = await open_session(editor, project)
    target = str(project / "notes.txt")
    response = await prompt(editor, session, [write("notes.txt", "hello\n"), {"say": "done"}])
    assert response.stop_reason == "end_turn"

    assert [(c.method, c.session_id) for c in client.calls] == [
        # Not on the disk: a new file, so the editor is not asked for a buffer (some show an error for that).
        ("session/request_permission", session),
        ("fs/write_text_file", session),
    ]
    asked, written = client.calls[0], client.calls[1]
    assert (written.params["path"], written.params["content"]) == (target, "hello\n")
    assert client.files == {target: "hello\n"}
    assert not (project / "notes.txt").exists(), "with fs.writeTextFile the editor writes, never the server"

    [start] = starts(editor, session)
    assert (start.kind, start.status, start.title) == ("edit", "pending", "Write notes.txt")
    tool_call = permission_tool_call(asked)
    assert tool_call.tool_call_id == start.tool_call_id
    assert tool_call.kind == "edit"
    [diff] = diffs(tool_call)
    assert (diff.path, diff.old_text, diff.new_text) == (target, None, "hello\n")
    assert {o.kind for o in options_of(asked)} == OPTION_KINDS

    updates = progress(editor, session, start.tool_call_id)
    assert [u.status for u in updates if u.status] == ["in_progress", "completed"]
    closing = final(editor, session, start.tool_call_id)
    [shown] = diffs(closing)
    assert (shown.path, shown.old_text, shown.new_text) == (target, None, "hello\n")
    assert client.texts(session) == ["done"]

    # Once is once: the next write asks again, and the diff now starts from the buffer's text. (A real editor saves
    # what it was sent; the file on the disk, with other text, is what makes the buffer worth asking for.)
    (project / "notes.txt").write_text("saved earlier\n")
    mark = client.mark()
    assert (await prompt(editor, session, [write("notes.txt", "hello again\n")])).stop_reason == "end_turn"
    [again] = [c for c in client.calls if c.seq >= mark and c.method == "session/request_permission"]
    [diff] = diffs(permission_tool_call(again))
    assert (diff.old_text, diff.new_text) == ("hello\n", "hello again\n")
    assert client.files == {target: "hello again\n"}


async def test_allow_always_is_remembered_for_write_file_across_prompts_but_not_for_edit_file(
    editor: SdkAgent, project: Path
) -> None:
    client = editor.client
    client.permission_option = "allow_always"
    session = await open_session(editor, project)
    assert (await prompt(editor, session, [write("a.txt", "one\n")])).stop_reason == "end_turn"
    assert len([c for c in client.calls if c.method == "session/request_permission"]) == 1

    client.permission_option = "reject_once"  # would refuse, if anyone asked
    mark = client.mark()
    script = [write("a.txt", "two\n"), write("b.txt", "bee\n")]
    assert (await prompt(editor, session, script)).stop_reason == "end_turn"
    assert [c.method for c in client.calls if c.seq >= mark] == [
        "fs/write_text_file",  # neither file is on the disk: no read first
        "fs/write_text_file",
    ], "write_file is always allowed now: no question, in a later prompt too"
    assert client.files == {str(project / "a.txt"): "two\n", str(project / "b.txt"): "bee\n"}
    assert [final(editor, session, s.tool_call_id).status for s in starts(editor, session, mark)] == [
        "completed",
        "completed",
    ]

    # "Always" was for write_file: edit_file is another tool and asks (and the rejection holds).
    mark = client.mark()
    edit = {"tool": "edit_file", "args": {"path": "a.txt", "old_text": "two", "new_text": "three"}}
    assert (await prompt(editor, session, [edit])).stop_reason == "end_turn"
    assert [c.method for c in client.calls if c.seq >= mark] == ["fs/read_text_file", "session/request_permission"]
    [call] = starts(editor, session, mark)
    assert final(editor, session, call.tool_call_id).status == "failed"
    assert client.files[str(project / "a.txt")] == "two\n"

    # A new session does not inherit the answer.
    other = await open_session(editor, project)
    mark = client.mark()
    assert (await prompt(editor, other, [write("c.txt", "sea\n")])).stop_reason == "end_turn"
    assert "session/request_permission" in [c.method for c in client.calls if c.seq >= mark]
    assert str(project / "c.txt") not in client.files


async def test_reject_once_writes_nothing_fails_the_call_and_the_turn_goes_on(editor: SdkAgent, project: Path) -> None:
    client = editor.client
    client.permission_option = "reject_once"
    session = await open_session(editor, project)
    response = await prompt(editor, session, [write("x.txt", "x\n"), {"say": "after"}])
    assert response.stop_reason == "end_turn"
    assert [c.method for c in client.calls] == ["session/request_permission"]
    assert client.files == {}
    [start] = starts(editor, session)
    updates = progress(editor, session, start.tool_call_id)
    assert [u.status for u in updates if u.status] == ["failed"], "never in_progress: it was not allowed"
    assert "not changed" in text_of(updates[-1])
    assert client.texts(session) == ["after"], "the model hears of the refusal and goes on"

    # Once is once: the next write asks again.
    client.permission_option = "allow_once"
    mark = client.mark()
    assert (await prompt(editor, session, [write("x.txt", "x\n")])).stop_reason == "end_turn"
    assert "session/request_permission" in [c.method for c in client.calls if c.seq >= mark]
    assert client.files == {str(project / "x.txt"): "x\n"}


async def test_edit_file_diffs_the_unsaved_buffer_and_writes_the_edit_back_to_the_editor(
    start_agent: StartAgent, project: Path
) -> None:
    target = project / "app.py"
    target.write_text("saved on disk\n")
    buffer = "def f():\n    return 1\n\nprint(f())\n"
    agent = await start_agent(
        RecordingClient(files={str(target): buffer}, permission_option="allow_once", terminals=simulate_shell)
    )
    client = agent.client
    session = await open_session(agent, project)
    edit = {"tool": "edit_file", "args": {"path": "app.py", "old_text": "return 1", "new_text": "return 2"}}
    response = await prompt(agent, session, [edit])
    assert response.stop_reason == "end_turn"

    expected = buffer.replace("return 1", "return 2")
    assert [c.method for c in client.calls] == [
        "fs/read_text_file",
        "session/request_permission",
        "fs/write_text_file",
    ]
    [diff] = diffs(permission_tool_call(client.calls[1]))
    assert (diff.path, diff.old_text, diff.new_text) == (str(target), buffer, expected)
    assert client.calls[2].params["content"] == expected
    assert client.files == {str(target): expected}
    assert target.read_text() == "saved on disk\n"

    [start] = starts(agent, session)
    assert (start.kind, start.title) == ("edit", "Edit app.py")
    closing = final(agent, session, start.tool_call_id)
    assert closing.status == "completed"
    [shown] = diffs(closing)
    assert (shown.old_text, shown.new_text) == (buffer, expected)

    # An old_text the buffer does not hold (it is only on disk) fails without asking.
    mark = client.mark()
    missing = {"tool": "edit_file", "args": {"path": "app.py", "old_text": "saved on disk", "new_text": "x"}}
    assert (await prompt(agent, session, [missing])).stop_reason == "end_turn"
    assert [c.method for c in client.calls if c.seq >= mark] == ["fs/read_text_file"]
    [call] = starts(agent, session, mark)
    assert final(agent, session, call.tool_call_id).status == "failed"
    assert "not found" in text_of(final(agent, session, call.tool_call_id))


async def test_read_file_reads_the_editor_buffer_when_it_differs_from_the_disk(
    start_agent: StartAgent, project: Path
) -> None:
    target = project / "todo.md"
    target.write_text("what is saved on disk\n")
    buffer = "unsaved line 1\nunsaved line 2\nunsaved line 3\n"
    agent = await start_agent(RecordingClient(files={str(target): buffer}, terminals=simulate_shell))
    client = agent.client
    session = await open_session(agent, project)
    read_all = {"tool": "read_file", "args": {"path": "todo.md"}}
    read_one = {"tool": "read_file", "args": {"path": "todo.md", "offset": 2, "limit": 1}}
    response = await prompt(agent, session, [read_all, read_one])
    assert response.stop_reason == "end_turn"

    assert [(c.method, c.params["path"]) for c in client.calls] == [("fs/read_text_file", str(target))] * 2
    whole, one = starts(agent, session)
    assert (whole.kind, whole.status, whole.title) == ("read", "pending", "Read todo.md")
    assert [loc.path for loc in whole.locations or []] == [str(target)]
    text = text_of(final(agent, session, whole.tool_call_id))
    assert "unsaved line 1" in text and "unsaved line 3" in text
    assert "on disk" not in text
    only = text_of(final(agent, session, one.tool_call_id))
    assert "unsaved line 2" in only
    assert "unsaved line 1" not in only and "unsaved line 3" not in only
    assert not [c for c in client.calls if c.method == "session/request_permission"], "reading never asks"


# --- run_command in editor terminals ---


async def test_run_command_goes_through_create_wait_output_release_and_the_tool_call_shows_the_terminal(
    editor: SdkAgent, project: Path
) -> None:
    client, wire = editor.client, editor.wire
    session = await open_session(editor, project, mode="bypass")
    response = await prompt(editor, session, [run("echo hello world"), {"say": "done"}])
    assert response.stop_reason == "end_turn"

    terminal = only_terminal(editor)
    assert terminal.methods == ["terminal/create", "terminal/wait_for_exit", "terminal/output", "terminal/release"]
    assert [c.method for c in client.calls] == terminal.methods, "bypass: nothing asked, nothing else called"
    assert (terminal.session_id, terminal.command, terminal.args) == (session, "/bin/sh", ["-c", "echo hello world"])
    assert terminal.cwd == str(project)
    assert client.calls[0].params["outputByteLimit"], "the server bounds what the terminal keeps"

    [start] = starts(editor, session)
    assert (start.kind, start.title, start.status) == ("execute", "echo hello world", "pending")
    showing = [
        u
        for u in progress(editor, session, start.tool_call_id)
        if any(isinstance(c, TerminalToolCallContent) for c in u.content or [])
    ]
    assert showing, "the tool call shows the terminal"
    live = showing[0]
    assert live.status is None
    assert live.content == [TerminalToolCallContent(type="terminal", terminal_id=terminal.terminal_id)]
    # Shown while the command runs: after terminal/create's answer, before the wait.
    [shown_at] = [
        e.seq
        for e in out_entries(editor, "session/update")
        if e.msg["params"]["update"].get("content") == [{"type": "terminal", "terminalId": terminal.terminal_id}]
        and "status" not in e.msg["params"]["update"]
    ]
    [wait] = out_entries(editor, "terminal/wait_for_exit")
    [create] = out_entries(editor, "terminal/create")
    created = answer_entry(editor, create)
    assert created is not None and created.seq < shown_at < wait.seq

    closing = final(editor, session, start.tool_call_id)
    assert closing.status == "completed"
    assert closing.content == [TerminalToolCallContent(type="terminal", terminal_id=terminal.terminal_id)]
    assert closing.raw_output == {"exitCode": 0, "signal": None, "timedOut": False, "truncated": False}
    [release_request] = out_entries(editor, "terminal/release")
    closed_at = next(
        e.seq
        for e in out_entries(editor, "session/update")
        if e.msg["params"]["update"].get("toolCallId") == start.tool_call_id
        and e.msg["params"]["update"].get("status") == "completed"
    )
    assert release_request.seq < closed_at < wire.response_entry("session/prompt", session).seq
    assert client.texts(session) == ["done"]


async def test_a_failing_command_fails_the_tool_call_with_its_exit_code_and_the_turn_goes_on(
    editor: SdkAgent, project: Path
) -> None:
    session = await open_session(editor, project, mode="bypass")
    response = await prompt(editor, session, [run("echo oops; exit 3"), {"say": "next"}])
    assert response.stop_reason == "end_turn"
    [start] = starts(editor, session)
    closing = final(editor, session, start.tool_call_id)
    assert closing.status == "failed"
    assert closing.raw_output == {"exitCode": 3, "signal": None, "timedOut": False, "truncated": False}
    assert only_terminal(editor).count("terminal/release") == 1
    assert editor.client.texts(session) == ["next"]


async def test_run_command_in_default_mode_asks_naming_the_command_before_any_terminal(
    editor: SdkAgent, project: Path
) -> None:
    client = editor.client
    session = await open_session(editor, project)
    assert (await prompt(editor, session, [run("echo hi")])).stop_reason == "end_turn"
    assert [c.method for c in client.calls][:2] == ["session/request_permission", "terminal/create"]
    tool_call = permission_tool_call(client.calls[0])
    assert (tool_call.kind, tool_call.title) == ("execute", "echo hi")
    [start] = starts(editor, session)
    assert final(editor, session, start.tool_call_id).status == "completed"

    client.permission_option = "reject_once"
    mark = client.mark()
    assert (await prompt(editor, session, [run("echo no")])).stop_reason == "end_turn"
    assert [c.method for c in client.calls if c.seq >= mark] == ["session/request_permission"]
    assert len(client.terminals) == 1, "a rejected command gets no terminal"
    [call] = starts(editor, session, mark)
    assert "nothing was run" in text_of(final(editor, session, call.tool_call_id))


# --- update_plan ---


async def test_update_plan_sends_the_whole_plan_as_plan_updates(editor: SdkAgent, project: Path) -> None:
    client = editor.client
    session = await open_session(editor, project)
    first = [
        {"content": "read the code", "priority": "high", "status": "in_progress"},
        {"content": "write the fix", "priority": "medium", "status": "pending"},
        {"content": "run the tests", "priority": "low", "status": "pending"},
    ]
    second = [dict(entry, status="completed") for entry in first[:2]] + [first[2]]
    script: list[dict[str, Any]] = [
        {"tool": "update_plan", "args": {"entries": first}},
        {"tool": "update_plan", "args": {"entries": second}},
        {"say": "planned"},
    ]
    assert (await prompt(editor, session, script)).stop_reason == "end_turn"

    plans = [u for u in client.session_updates(session) if isinstance(u, AgentPlanUpdate)]
    assert [[e.model_dump(include={"content", "priority", "status"}) for e in p.entries] for p in plans] == [
        first,
        second,
    ], "each plan update carries the complete list"
    calls = starts(editor, session)
    assert [(c.kind, c.title) for c in calls] == [("think", "Update plan")] * 2
    assert [final(editor, session, c.tool_call_id).status for c in calls] == ["completed", "completed"]
    assert client.calls == [], "a plan needs nothing from the editor"
    # Each plan update is sent while its tool call runs, before the call is closed.
    updates = client.session_updates(session)
    for call, plan in zip(calls, plans, strict=True):
        assert updates.index(call) < updates.index(plan) < updates.index(final(editor, session, call.tool_call_id))
    assert client.texts(session) == ["planned"]


# --- late and never: permission, terminals, file reads ---


@pytest.mark.at_once
async def test_a_permission_answered_allow_only_after_the_cancel_writes_nothing(
    editor: SdkAgent, project: Path
) -> None:
    """I8: the prompt is already `cancelled` when the editor's Allow arrives; the late answer is dropped."""
    client = editor.client
    hold = client.hold("session/request_permission")
    session = await open_session(editor, project)
    turn = start_prompt(editor, session, [write("late.txt", "late\n"), {"say": "never"}])
    await asyncio.wait_for(hold.entered.wait(), T_WAIT)
    await editor.conn.cancel(session_id=session)
    response = await asyncio.wait_for(turn, T_WAIT)
    assert response.stop_reason == "cancelled"
    answered = editor.wire.response_entry("session/prompt", session)
    assert answered.t - cancel_entry(editor, session).t <= T_ACK
    assert hold.answered == 0, "the response did not wait for the editor"

    [asked] = out_entries(editor, "session/request_permission")
    assert [r.seq < answered.seq for r in retracted(editor, asked)] == [True], "retracted once, before the response"
    [start] = starts(editor, session)
    assert [u.status for u in progress(editor, session, start.tool_call_id) if u.status] == ["failed"]

    lines = len(editor.wire.server_messages())
    hold.release()  # the editor's Allow, too late
    await asyncio.sleep(QUIET)
    late = answer_entry(editor, asked)
    assert late is not None and late.msg["result"]["outcome"] == {"outcome": "selected", "optionId": "allow_once"}
    assert editor.wire.server_messages()[lines:] == [], "a late Allow triggers nothing at all"
    assert [c.method for c in client.calls] == ["session/request_permission"]
    assert client.files == {}
    assert "never" not in client.texts(session)

    client.unhold("session/request_permission")
    mark = client.mark()
    assert (await prompt(editor, session, [{"say": "ok"}])).stop_reason == "end_turn"
    assert client.texts(session, since=mark) == ["ok"]
    await assert_idle(editor)


@pytest.mark.at_once
async def test_a_permission_never_answered_then_cancel_answers_cancelled_and_the_next_write_asks_again(
    editor: SdkAgent, project: Path
) -> None:
    client = editor.client
    hold = client.hold("session/request_permission")
    session = await open_session(editor, project)
    turn = start_prompt(editor, session, [write("n.txt", "n\n")])
    await asyncio.wait_for(hold.entered.wait(), T_WAIT)
    await editor.conn.cancel(session_id=session)
    assert (await asyncio.wait_for(turn, T_WAIT)).stop_reason == "cancelled"
    answered = editor.wire.response_entry("session/prompt", session)
    assert answered.t - cancel_entry(editor, session).t <= T_ACK
    [asked] = out_entries(editor, "session/request_permission")
    assert len(retracted(editor, asked)) == 1
    [start] = starts(editor, session)
    assert final(editor, session, start.tool_call_id).status == "failed"
    await assert_idle(editor)

    # The question from the cancelled turn is still open in the editor (the SDK ignores `$/cancel_request`); the
    # next turn asks afresh and its answer counts.
    client.unhold("session/request_permission")
    mark = client.mark()
    assert (await prompt(editor, session, [write("n.txt", "n\n")])).stop_reason == "end_turn"
    assert [c.method for c in client.calls if c.seq >= mark] == [
        "session/request_permission",
        "fs/write_text_file",
    ]
    assert client.files == {str(project / "n.txt"): "n\n"}
    assert hold.answered == 0 and not hold.released


@pytest.mark.parametrize("dies_on_kill", [True, False], ids=["dies-on-kill", "never-exits"])
@pytest.mark.at_once
async def test_cancel_while_wait_for_exit_never_returns_kills_then_releases_once_before_the_response(
    editor: SdkAgent, project: Path, dies_on_kill: bool
) -> None:
    """I9: `terminal/kill` within T_ACK, then one `terminal/release`, both before the response, nothing after."""
    client = editor.client
    client.terminal_scripts = lambda line: TerminalScript(runs_for=NEVER, exits_on_kill=dies_on_kill)
    session = await open_session(editor, project, mode="bypass")
    turn = start_prompt(editor, session, [run("sleep infinity"), {"say": "never"}])
    await client.wait_for_call("terminal/wait_for_exit")
    await editor.conn.cancel(session_id=session)
    assert (await asyncio.wait_for(turn, T_WAIT)).stop_reason == "cancelled"
    await asyncio.sleep(QUIET)

    cancelled_at = cancel_entry(editor, session).t
    answered = editor.wire.response_entry("session/prompt", session)
    assert answered.t - cancelled_at <= T_ACK, "kill and release are answered at once: no reason to wait"
    terminal = only_terminal(editor)
    assert terminal.methods == TERMINAL_CLEANUP
    [kill] = out_entries(editor, "terminal/kill")
    [release_request] = out_entries(editor, "terminal/release")
    assert kill.t - cancelled_at <= T_ACK
    assert kill.seq < release_request.seq < answered.seq
    terminal_requests = [e for e in editor.wire.log if e.dir == "out" and (method_of(e) or "").startswith("terminal/")]
    assert terminal_requests[-1] is release_request, "no terminal/* call for the terminal after its release"

    [start] = starts(editor, session)
    closing = final(editor, session, start.tool_call_id)
    assert closing.status == "failed"
    closed_at = next(
        e.seq
        for e in out_entries(editor, "session/update")
        if e.msg["params"]["update"].get("toolCallId") == start.tool_call_id
        and e.msg["params"]["update"].get("status") == "failed"
    )
    assert closed_at < answered.seq
    assert "never" not in client.texts(session)
    await assert_idle(editor)


@pytest.mark.parametrize(
    ("kill_delay", "release_delay"),
    [(0.1, 0.1), (5.0, 5.0), (NEVER, NEVER)],
    ids=["within-the-deadline", "slower-than-the-deadline", "never"],
)
async def test_slow_kill_and_release_answers_keep_the_response_within_the_cleanup_deadline(
    editor: SdkAgent, project: Path, kill_delay: float, release_delay: float
) -> None:
    """I9 slow client, and I12: a second cancel during the cleanup changes nothing and restarts no deadline."""
    client = editor.client
    client.terminal_scripts = lambda line: TerminalScript(
        runs_for=NEVER, kill_delay=kill_delay, release_delay=release_delay
    )
    session = await open_session(editor, project, mode="bypass")
    turn = start_prompt(editor, session, [run("sleep infinity")])
    await client.wait_for_call("terminal/wait_for_exit")
    await editor.conn.cancel(session_id=session)
    await client.wait_for_call("terminal/kill")
    await editor.conn.cancel(session_id=session)  # repeated, mid-cleanup
    assert (await asyncio.wait_for(turn, T_ESC + 2)).stop_reason == "cancelled"

    answered = editor.wire.response_entry("session/prompt", session)
    took = answered.t - cancel_entry(editor, session).t
    assert took <= T_ESC, f"cancel -> cancelled took {took:.2f} s"
    terminal = only_terminal(editor)
    assert terminal.methods == TERMINAL_CLEANUP, "one kill and one release for two cancels"
    [kill] = out_entries(editor, "terminal/kill")
    [release_request] = out_entries(editor, "terminal/release")
    assert kill.seq < release_request.seq < answered.seq, "the release is on the wire before the response"
    release_answer = answer_entry(editor, release_request)
    if kill_delay + release_delay < GRACE:
        # Answers that fit in the cleanup deadline are awaited: the response follows the release's answer.
        assert release_answer is not None and release_answer.seq < answered.seq
    else:
        assert release_answer is None or release_answer.seq > answered.seq
        assert took >= GRACE / 2, "the cleanup waited for the slow editor, up to the deadline"
    [start] = starts(editor, session)
    assert final(editor, session, start.tool_call_id).status == "failed"
    await assert_idle(editor)


@pytest.mark.at_once
async def test_a_terminal_created_while_the_cancel_is_in_flight_is_killed_and_released_before_the_response(
    editor: SdkAgent, project: Path
) -> None:
    """I9 with `terminal/create` in flight at the cancel (ACP's cascading-cancellation example): the editor answers
    with the new terminal's id inside the cleanup deadline, so the agent knows it and must kill and release it."""
    client = editor.client
    client.terminal_scripts = lambda line: TerminalScript(runs_for=NEVER, create_delay=0.2)
    session = await open_session(editor, project, mode="bypass")
    turn = start_prompt(editor, session, [run("sleep infinity"), {"say": "never"}])
    await client.wait_for_call("terminal/create")
    await editor.conn.cancel(session_id=session)
    assert (await asyncio.wait_for(turn, T_WAIT)).stop_reason == "cancelled"
    await asyncio.sleep(QUIET)

    answered = editor.wire.response_entry("session/prompt", session)
    assert answered.t - cancel_entry(editor, session).t <= T_ACK + 0.2, "the editor's own 0.2 s, then no waiting"
    [create] = out_entries(editor, "terminal/create")
    created = answer_entry(editor, create)
    assert created is not None and created.seq < answered.seq, "the id arrived before the deadline"
    terminal = only_terminal(editor)
    assert terminal.methods == ["terminal/create", "terminal/kill", "terminal/release"]
    [release_request] = out_entries(editor, "terminal/release")
    assert release_request.seq < answered.seq
    [start] = starts(editor, session)
    assert final(editor, session, start.tool_call_id).status == "failed"
    await assert_idle(editor)


@pytest.mark.at_once
async def test_a_cancel_while_the_release_is_being_answered_sends_no_second_kill_or_release(
    editor: SdkAgent, project: Path
) -> None:
    """I9: exactly one release per terminal, and no terminal/* call for it after its release, even when the cancel
    lands between the release and its answer."""
    client = editor.client
    client.terminal_scripts = lambda line: replace(simulate_shell(line), release_delay=0.2)
    session = await open_session(editor, project, mode="bypass")
    turn = start_prompt(editor, session, [run("echo done"), {"say": "never"}])
    await client.wait_for_call("terminal/release")
    await editor.conn.cancel(session_id=session)
    assert (await asyncio.wait_for(turn, T_WAIT)).stop_reason == "cancelled"
    await asyncio.sleep(QUIET)

    answered = editor.wire.response_entry("session/prompt", session)
    assert answered.t - cancel_entry(editor, session).t <= T_ACK
    terminal = only_terminal(editor)
    assert terminal.methods == ["terminal/create", "terminal/wait_for_exit", "terminal/output", "terminal/release"]
    [release_request] = out_entries(editor, "terminal/release")
    assert release_request.seq < answered.seq
    [start] = starts(editor, session)
    assert final(editor, session, start.tool_call_id).status in FINAL
    await assert_idle(editor)


@pytest.mark.at_once
async def test_cancel_while_the_editor_never_answers_a_file_read_answers_cancelled_at_once(
    editor: SdkAgent, project: Path
) -> None:
    """I8 variant d, with read_file: the read is retracted before the response and the session goes on."""
    client = editor.client
    client.files[str(project / "big.txt")] = "contents"
    hold = client.hold("fs/read_text_file")
    session = await open_session(editor, project)
    turn = start_prompt(editor, session, [{"tool": "read_file", "args": {"path": "big.txt"}}, {"say": "never"}])
    await asyncio.wait_for(hold.entered.wait(), T_WAIT)
    await editor.conn.cancel(session_id=session)
    assert (await asyncio.wait_for(turn, T_WAIT)).stop_reason == "cancelled"
    answered = editor.wire.response_entry("session/prompt", session)
    assert answered.t - cancel_entry(editor, session).t <= T_ACK
    [read] = out_entries(editor, "fs/read_text_file")
    assert [r.seq < answered.seq for r in retracted(editor, read)] == [True]
    [start] = starts(editor, session)
    assert [u.status for u in progress(editor, session, start.tool_call_id) if u.status] == ["in_progress", "failed"]
    assert hold.answered == 0 and "never" not in client.texts(session)

    client.unhold("fs/read_text_file")
    mark = client.mark()
    assert (await prompt(editor, session, [{"tool": "read_file", "args": {"path": "big.txt"}}])).stop_reason == (
        "end_turn"
    )
    [call] = starts(editor, session, mark)
    assert "contents" in text_of(final(editor, session, call.tool_call_id))
    await assert_idle(editor)


def _running_commands(argv: bytes) -> list[int]:
    """Live processes whose command line is exactly `argv` (NUL-separated, as in /proc/PID/cmdline)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes()
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if cmdline == argv and state != "Z":
            found.append(int(entry.name))
    return found


SPAWN_RACE_TRIES = 30


async def test_a_cancel_while_a_local_command_is_being_spawned_leaves_no_process_running(
    start_agent: StartAgent, project: Path
) -> None:
    """`run_command` without editor terminals: the cancel is sent the moment the call is `in_progress`, which the
    server reports just before it spawns the command, so it lands before, during or after the spawn. Whatever the
    moment, nothing of the command may outlive the cancelled turn. Tried several times, as the window is narrow.
    The command is a `sleep` with a duration unique to this test, so what is left over is found (and killed) exactly.
    """
    agent = await start_agent(RecordingClient(), terminal=False)  # the server runs commands itself
    client = agent.client
    seconds = f"30.{os.getpid()}{random.randrange(10**6)}"
    session = await open_session(agent, project, mode="bypass")
    try:
        for _ in range(SPAWN_RACE_TRIES):
            mark = client.mark()
            turn = start_prompt(agent, session, [run(f"sleep {seconds}")])
            while not any(
                isinstance(u, ToolCallProgress) and u.status == "in_progress"
                for u in client.session_updates(session, mark)
            ):
                assert not turn.done(), turn
                await asyncio.sleep(0)
            await agent.conn.cancel(session_id=session)
            assert (await asyncio.wait_for(turn, T_WAIT)).stop_reason == "cancelled"
            [call] = starts(agent, session, mark)
            assert final(agent, session, call.tool_call_id).status == "failed"
        await asyncio.sleep(0.2)
        left = _running_commands(f"sleep\0{seconds}\0".encode())
    finally:
        for pid in _running_commands(f"sleep\0{seconds}\0".encode()):  # only this test's own commands
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
    assert left == [], f"{len(left)} of {SPAWN_RACE_TRIES} commands outlived their cancelled turns"


async def test_closing_stdin_with_an_editor_terminal_running_answers_cancelled_and_exits_in_time(
    project: Path,
) -> None:
    """I17 with a terminal: the prompt is answered `cancelled`, the terminal is released, the exit is in time."""
    client = RecordingClient(terminals=lambda line: TerminalScript(runs_for=NEVER))
    async with spawn_sdk_agent(*DEFAULT_ARGS, client=client) as agent:
        await agent.conn.initialize(
            protocol_version=1, client_capabilities=ClientCapabilities(terminal=True), client_info=None
        )
        session = await open_session(agent, project, mode="bypass")
        turn = start_prompt(agent, session, [run("sleep infinity")])
        await client.wait_for_call("terminal/wait_for_exit")
        started = time.monotonic()
        problems = await agent.close()
        took = time.monotonic() - started
        assert problems == []
        assert took <= T_EXIT
        assert turn.done() and turn.result().stop_reason == "cancelled"
        released = out_entries(agent, "terminal/release")
        assert len(released) == 1, "ACP: the agent MUST release every terminal it created"
        assert released[0].seq < agent.wire.response_entry("session/prompt", session).seq


# --- I18 with product tools, randomized ---

RANDOM_RUNS = 30


def random_script(rng: random.Random, tag: str, kinds: tuple[str, ...]) -> tuple[list[dict[str, Any]], list[str]]:
    """1-6 steps drawn from `kinds` (say/think/write_file/update_plan/run_command(sleep)/gate); returns the script
    and its gate names."""
    steps: list[dict[str, Any]] = []
    gates: list[str] = []
    for index in range(rng.randint(1, 6)):
        kind = rng.choice(kinds)
        if kind == "say":
            steps.append({"say": f"{tag}-{index}"})
        elif kind == "think":
            steps.append({"think": f"{tag}-{index}"})
        elif kind == "write_file":
            steps.append(write(f"{tag}-{rng.randint(0, 2)}.txt", f"{tag} {index}\n"))
        elif kind == "update_plan":
            steps.append({"tool": "update_plan", "args": {"entries": [{"content": f"{tag}-{index}"}]}})
        elif kind == "run_command":
            steps.append(run(f"echo {tag}; sleep {rng.choice([0, 0.02, 0.1, 0.25])}"))
        else:
            gate = f"{tag}-g{index}"
            gates.append(gate)
            steps.append({"gate": gate, "timeout": rng.choice([0.02, 0.1, 0.3])})
    return steps, gates


def ordering_problems(agent: SdkAgent, prompt_ids: dict[Any, str]) -> list[str]:
    """I18 over the wire log: one response per prompt; every tool call a prompt announced is closed before the
    response; no turn-scoped update for a session outside an unanswered prompt of that session."""
    problems: list[str] = []
    open_prompt: dict[str, Any] = {}
    announced: dict[Any, set[str]] = {}
    closed: dict[Any, set[str]] = {}
    responses: dict[Any, int] = dict.fromkeys(prompt_ids, 0)
    for entry in agent.wire.log:
        message = entry.msg
        if not isinstance(message, dict):
            continue
        if entry.dir == "in":
            if message.get("method") == "session/prompt" and message.get("id") in prompt_ids:
                open_prompt[prompt_ids[message["id"]]] = message["id"]
                announced[message["id"]], closed[message["id"]] = set(), set()
            continue
        if "method" not in message and message.get("id") in prompt_ids:
            request_id = message["id"]
            responses[request_id] += 1
            session = prompt_ids[request_id]
            if open_prompt.get(session) == request_id:
                del open_prompt[session]
            if unclosed := announced[request_id] - closed[request_id]:
                problems.append(f"prompt {request_id}: tool calls {sorted(unclosed)} not closed before its response")
            continue
        if message.get("method") != "session/update":
            continue
        session = message["params"]["sessionId"]
        update = message["params"]["update"]
        if update["sessionUpdate"] not in TURN_SCOPED or session not in prompt_ids.values():
            continue
        current = open_prompt.get(session)
        if current is None:
            problems.append(f"update after the response on {session}: {entry.raw[:160]!r}")
            continue
        if update["sessionUpdate"] == "tool_call":
            announced[current].add(update["toolCallId"])
        elif update["sessionUpdate"] == "tool_call_update" and update.get("status") in FINAL:
            closed[current].add(update["toolCallId"])
    problems += [f"prompt {rid}: {count} responses" for rid, count in responses.items() if count != 1]
    return problems


FILE_STEPS = ("say", "think", "write_file", "update_plan", "gate")


@pytest.mark.parametrize(
    "kinds",
    [
        pytest.param(
            (*FILE_STEPS, "run_command"),
            id="with-terminals",
        ),
        pytest.param(FILE_STEPS, id="files-and-plans"),
    ],
)
@pytest.mark.timeout(90)
async def test_randomized_cancels_with_product_tools_keep_ordering_answers_and_leave_nothing_behind(
    editor: SdkAgent, project: Path, kinds: tuple[str, ...]
) -> None:
    """I18 with product tools: random scripts on two bypass sessions and a cancel at a random moment, 30 times.

    Two variants, so the ordering checks keep running on the tools that have no known bug: with editor terminals
    (`run_command`, simulated) and without them.
    """
    client = editor.client
    seed = int(os.environ.get("ACP_TEST_RANDOM_SEED", "18"))
    # An editor takes a moment to start a shell: some terminals answer terminal/create a little late.
    delays = random.Random(seed)
    client.terminal_scripts = lambda line: replace(simulate_shell(line), create_delay=delays.choice([0, 0, 0.01, 0.03]))
    sessions = [await open_session(editor, project, mode="bypass") for _ in range(2)]
    prompt_ids: dict[Any, str] = {}
    for run_index in range(RANDOM_RUNS):
        rng = random.Random(f"{seed}-{run_index}")
        scripts = {s: random_script(rng, f"r{run_index}s{n}", kinds) for n, s in enumerate(sessions)}
        turns = {s: start_prompt(editor, s, scripts[s][0]) for s in sessions}
        await asyncio.sleep(rng.uniform(0, 0.25))
        for session in sessions:
            for gate in scripts[session][1]:
                if rng.random() < 0.5:
                    await release(editor, session, gate)
        targets = rng.choice([sessions[:1], sessions[1:], sessions])
        for session in targets:
            await editor.conn.cancel(session_id=session)
        responses = dict(zip(sessions, await asyncio.wait_for(asyncio.gather(*turns.values()), 10), strict=True))

        context = f"run {run_index} (seed {seed}): scripts {scripts}, cancelled {targets}"
        for session in sessions:
            request = [m for m in editor.wire.client_messages("session/prompt") if m["params"]["sessionId"] == session][
                -1
            ]
            prompt_ids[request["id"]] = session
            answered = editor.wire.response_entry("session/prompt", session)
            stop = responses[session].stop_reason
            if session not in targets:
                assert stop == "end_turn", context
                continue
            cancelled = cancel_entry(editor, session, nth=-1)
            if answered.seq < cancelled.seq:
                assert stop == "end_turn", context  # the turn was over before the cancel was sent
            else:
                assert stop in ("cancelled", "end_turn"), context  # end_turn: it ended before reading the cancel
                assert answered.t - cancelled.t <= T_ACK, f"{context}: cancel -> response {answered.t - cancelled.t}"
        problems = ordering_problems(editor, prompt_ids)
        assert not problems, f"{context}: {problems}"

    stats = await assert_idle(editor)
    assert stats["sessions"] == 2
    assert bool(client.terminals) == ("run_command" in kinds)
    for terminal in client.terminals.values():
        assert terminal.count("terminal/release") == 1, (terminal.terminal_id, terminal.methods, terminal.command_line)
        assert terminal.methods[-1] == "terminal/release", (terminal.terminal_id, terminal.methods)
    assert len(prompt_ids) == 2 * RANDOM_RUNS
    # Some runs cut turns short and some ran to the end, so both paths were exercised.
    stops = [
        e.msg["result"]["stopReason"]
        for e in editor.wire.log
        if e.dir == "out" and isinstance(e.msg, dict) and "method" not in e.msg and e.msg.get("id") in prompt_ids
    ]
    assert {"cancelled", "end_turn"} <= set(stops)
    assert any(isinstance(u, AgentMessageChunk) for u in client.session_updates())
