"""`chat.v2.V2Updates`: ACP v2 updates and permission questions drawn through the chat's one renderer.

The end-to-end chat tests (tests/e2e/test_chat_pty.py) show a v2 conversation on a terminal; these pin down what
acp-server never sends but another v2 agent may: whole-message corrections, content chunks, `null` resets,
terminal snapshots, a diff without a patch, a permission about a command or a tool call not seen before.
"""

from __future__ import annotations

import base64
from typing import Any

from acp_server.chat.render import Renderer
from acp_server.chat.v2 import V2Updates
from tests.unit.chat.fakes import Screen


class Drawn:
    """A canvas that keeps what it was asked to draw."""

    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []

    def text(self, kind: str, text: str) -> None:
        self.calls.append(("text", kind, text))

    def end_stream(self) -> None:
        self.calls.append(("end_stream",))

    def tool_call(self, update: dict[str, Any], created: bool = False) -> None:
        self.calls.append(("tool_call", update, created))

    def plan(self, entries: list[Any]) -> None:
        self.calls.append(("plan", entries))


def connection() -> tuple[V2Updates, Drawn]:
    drawn = Drawn()
    return V2Updates(drawn), drawn


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def text_item(text: str) -> dict[str, Any]:
    return {"type": "content", "content": {"type": "text", "text": text}}


ANCHOR = {
    "sessionUpdate": "tool_call_update",
    "toolCallId": "c1",
    "content": [{"type": "terminal", "terminalId": "t1"}],
}


def test_the_first_report_of_a_tool_call_creates_it_and_later_ones_patch_it_with_nulls_reset() -> None:
    v2, drawn = connection()
    v2.show({"sessionUpdate": "tool_call_update", "toolCallId": "c1", "name": "read_file"})
    v2.show({"sessionUpdate": "tool_call_update", "toolCallId": "c1", "status": None, "kind": None})
    assert drawn.calls == [
        ("tool_call", {"toolCallId": "c1", "name": "read_file", "title": "read_file"}, True),
        ("tool_call", {"toolCallId": "c1", "status": "pending", "kind": "other"}, False),
    ]


def test_a_content_chunk_appends_one_item_and_a_diff_is_drawn_as_its_patch_or_its_changes() -> None:
    v2, drawn = connection()
    patch = {"format": "git_patch", "text": "--- /w/a\n"}
    diff = {"type": "diff", "changes": [{"operation": "modify", "path": "/w/a"}], "patch": patch}
    v2.show({"sessionUpdate": "tool_call_content_chunk", "toolCallId": "c1", "content": diff})
    changes = [{"operation": "add", "path": "/w/b"}, {"operation": "delete", "path": "/w/c"}]
    v2.show(
        {"sessionUpdate": "tool_call_update", "toolCallId": "c1", "content": [{"type": "diff", "changes": changes}]}
    )
    assert drawn.calls == [
        ("tool_call", {"toolCallId": "c1", "content": [{"type": "patch", "text": "--- /w/a\n"}]}, True),
        ("tool_call", {"toolCallId": "c1", "content": [text_item("add /w/b\ndelete /w/c")]}, False),
    ]


def test_a_terminals_bytes_are_drawn_under_its_call_when_it_exits_however_they_were_split() -> None:
    v2, drawn = connection()
    v2.show(ANCHOR)
    assert drawn.calls == [("tool_call", {"toolCallId": "c1", "content": []}, True)]  # an anchor, no text of its own
    v2.show({"sessionUpdate": "terminal_update", "terminalId": "t1", "command": "make", "cwd": "/w"})
    raw = "héllo wörld\n".encode()
    for piece in (raw[:2], raw[2:9], raw[9:]):  # split inside UTF-8 sequences: each piece is base64 on its own
        v2.show({"sessionUpdate": "terminal_output_chunk", "terminalId": "t1", "data": b64(piece)})
    assert len(drawn.calls) == 1  # nothing until it exits
    v2.show({"sessionUpdate": "terminal_update", "terminalId": "t1", "exitStatus": {"exitCode": 2}})
    assert drawn.calls[1:] == [
        ("tool_call", {"toolCallId": "c1", "content": [text_item("héllo wörld\n[exit code 2]")]}, False)
    ]


def test_a_terminal_output_snapshot_replaces_the_bytes_so_far_and_later_chunks_append() -> None:
    v2, drawn = connection()
    v2.show(ANCHOR)
    v2.show({"sessionUpdate": "terminal_output_chunk", "terminalId": "t1", "data": b64(b"old bytes\n")})
    v2.show({"sessionUpdate": "terminal_update", "terminalId": "t1", "output": {"data": b64(b"tail\n")}})
    v2.show({"sessionUpdate": "terminal_output_chunk", "terminalId": "t1", "data": b64(b"more\n")})
    v2.show({"sessionUpdate": "terminal_update", "terminalId": "t1", "exitStatus": {"signal": "SIGTERM"}})
    assert drawn.calls[-1] == (
        "tool_call",
        {"toolCallId": "c1", "content": [text_item("tail\nmore\n[killed by signal SIGTERM]")]},
        False,
    )


def test_a_whole_message_draws_only_what_was_not_shown_and_a_correction_on_a_line_of_its_own() -> None:
    v2, drawn = connection()

    def whole(kind: str, text: str) -> None:
        v2.show({"sessionUpdate": kind, "messageId": "m1", "content": [{"type": "text", "text": text}]})

    v2.show({"sessionUpdate": "agent_message_chunk", "messageId": "m1", "content": {"type": "text", "text": "Hel"}})
    whole("agent_message", "Hello")
    whole("agent_message", "Hello")
    whole("agent_message", "Goodbye")
    v2.show({"sessionUpdate": "agent_message", "messageId": "m1", "_meta": {}})  # content omitted: unchanged
    whole("agent_thought", "hm")  # its own id space: m1 the thought is not m1 the message
    texts = [call[1:] for call in drawn.calls]
    assert texts == [
        ("message", "Hel"),
        ("message", "lo"),
        ("message", ""),
        ("message", "\nGoodbye"),
        ("thought", "hm"),
    ]


def test_interleaved_chunks_of_two_messages_of_one_kind_are_drawn_as_two_streams() -> None:
    v2, drawn = connection()

    def chunk(kind: str, message_id: str, text: str) -> None:
        v2.show({"sessionUpdate": kind, "messageId": message_id, "content": {"type": "text", "text": text}})

    chunk("agent_message_chunk", "a", "Hello ")
    chunk("agent_message_chunk", "a", "there ")
    chunk("agent_message_chunk", "b", "Other ")
    chunk("agent_message_chunk", "a", "world")
    chunk("agent_thought_chunk", "a", "hm")  # another kind: the renderer breaks the stream itself
    chunk("agent_thought_chunk", "t2", "ok")
    assert drawn.calls == [
        ("text", "message", "Hello "),
        ("text", "message", "there "),
        ("end_stream",),
        ("text", "message", "Other "),
        ("end_stream",),
        ("text", "message", "world"),
        ("text", "thought", "hm"),
        ("end_stream",),
        ("text", "thought", "ok"),
    ]


def test_on_screen_interleaved_messages_are_on_lines_of_their_own() -> None:
    screen = Screen()
    v2 = V2Updates(Renderer(screen))
    for message_id, text in (("a", "Hello "), ("b", "Other "), ("a", "world")):
        v2.show(
            {"sessionUpdate": "agent_message_chunk", "messageId": message_id, "content": {"type": "text", "text": text}}
        )
    assert screen.out == "Hello \nOther \nworld"


def test_a_plan_update_is_drawn_as_a_plan_and_the_prompt_echo_states_and_unknown_kinds_are_not() -> None:
    v2, drawn = connection()
    entries = [{"content": "a", "status": "cancelled", "priority": "low"}]
    v2.show({"sessionUpdate": "plan_update", "plan": {"type": "items", "planId": "p", "entries": entries}})
    v2.show({"sessionUpdate": "plan_update", "plan": {"type": "markdown", "planId": "p", "content": "x"}})
    v2.show({"sessionUpdate": "user_message", "messageId": "u", "content": [{"type": "text", "text": "hi"}]})
    v2.show({"sessionUpdate": "state_update", "state": "running"})
    v2.show({"sessionUpdate": "_vendor_thing"})
    assert drawn.calls == [("plan", entries)]


def test_a_permission_about_a_command_asks_with_its_own_title_and_says_what_runs_where() -> None:
    v2, drawn = connection()
    options = [{"optionId": "y", "name": "Yes", "kind": "allow_once"}]
    asked = v2.permission(
        {
            "sessionId": "s",
            "title": "Run make?",
            "description": "It builds the project.",
            "subject": {"type": "command", "command": "make all", "cwd": "/w", "toolCallId": "c1"},
            "options": options,
        }
    )
    content = [text_item("It builds the project."), text_item("$ make all  in /w")]
    assert asked == {
        "sessionId": "s",
        "toolCall": {"toolCallId": "c1", "title": "Run make?", "content": content},
        "options": options,
    }
    assert drawn.calls == []


def test_a_permission_about_an_unseen_tool_call_applies_the_call_first() -> None:
    v2, drawn = connection()
    patch = {"format": "git_patch", "text": "+x\n"}
    call = {"toolCallId": "c9", "title": "Write f", "content": [{"type": "diff", "changes": [], "patch": patch}]}
    subject = {"type": "tool_call", "toolCall": call}
    asked = v2.permission({"sessionId": "s", "title": "Allow the write?", "subject": subject, "options": []})
    shown = [{"type": "patch", "text": "+x\n"}]
    assert asked["toolCall"] == {"toolCallId": "c9", "title": "Allow the write?", "content": shown}
    assert drawn.calls == [("tool_call", {"toolCallId": "c9", "title": "Write f", "content": shown}, True)]
    v2.show({"sessionUpdate": "tool_call_update", "toolCallId": "c9", "status": "in_progress"})
    assert drawn.calls[-1][2] is False  # the question created it: its next report patches it
