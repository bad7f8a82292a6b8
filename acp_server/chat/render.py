"""Session updates as a line-oriented terminal transcript.

Text streams as it arrives; anything else (a tool call's status, a diff, a plan, a question, a notice) starts on a
line of its own, so the renderer tracks whether the cursor is at the start of a line. Tool calls are remembered by
id so a status change names the call, and a diff or output already shown (a permission question shows the diff it
asks about; the completed call carries it again) is not shown twice.

The renderer reads ACP v1's update shapes (`update`), and draws through a few methods (`text`, `tool_call`, `plan`)
that a v2 connection's `v2.V2Updates` calls with what it made of each v2 update (v1's tool call fields, plus one
content item of its own, `patch`, for a v2 diff): one renderer for both versions.

Agents are not all this server: every field is read defensively, and an update this client does not know is
skipped rather than failing the conversation.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from acp_server.chat.style import Style
from acp_server.chat.terminal import Terminal

__all__ = ["Renderer"]


@dataclass
class _ToolCall:
    title: str
    kind: str = "other"
    status: str = ""
    shown: set[tuple[str, ...]] = field(default_factory=set)


def _text(value: Any) -> str:
    return value if isinstance(value, str) else ""


def _block_text(block: Any) -> str:
    """A content block as text: text as it is, anything else as a short label."""
    if not isinstance(block, dict):
        return ""
    kind = block.get("type")
    if kind == "text":
        return _text(block.get("text"))
    if kind == "resource_link":
        return f"[{_text(block.get('name')) or 'link'}: {_text(block.get('uri'))}]"
    if kind == "resource":
        resource = block.get("resource")
        return f"[resource {_text(resource.get('uri')) if isinstance(resource, dict) else ''}]"
    return f"[{kind}]" if isinstance(kind, str) else ""


class Renderer:
    def __init__(self, terminal: Terminal) -> None:
        self._out = terminal
        self.style = Style(terminal.colour)
        self._streaming: str | None = None  # "message" or "thought" while text of that kind is flowing
        self._at_line_start = True
        # A question waits for the person's answer on its line ("choose 1-4: "): their Enter ends that line, but what
        # is shown before it (Ctrl-C's "cancelling…", a withdrawal) must start a line of its own.
        self._answer_pending = False
        self._tools: dict[str, _ToolCall] = {}

    # --- writing ---

    def write(self, text: str) -> None:
        if text:
            self._out.write(text)
            self._at_line_start = text.endswith("\n")

    def line(self, text: str) -> None:
        """`text` on a line of its own, after whatever was streaming."""
        self.end_stream()
        self.write(text + "\n")

    def end_stream(self) -> None:
        self._streaming = None
        if self._answer_pending or not self._at_line_start:
            self._answer_pending = False
            self.write("\n")

    def notice(self, text: str) -> None:
        self.line(self.style.paint(text, "yellow"))

    def error(self, text: str) -> None:
        self.end_stream()
        self._out.write_error(self.style.paint(text, "red") + "\n")

    def prompt(self) -> None:
        self.end_stream()
        self.write(self.style.paint("> ", "bold"))
        self._at_line_start = True  # the person's Enter ends the line

    def turn_end(self, stop_reason: str) -> None:
        if stop_reason == "end_turn":
            self.end_stream()
        elif stop_reason == "cancelled":
            self.notice("cancelled")
        else:
            self.notice(f"stopped: {stop_reason.replace('_', ' ')}")

    # --- session updates ---

    def update(self, update: Any) -> None:
        """An ACP v1 session update (a v2 one goes through `v2.V2Updates`, which calls the methods below)."""
        if not isinstance(update, dict):
            return
        kind = update.get("sessionUpdate")
        if kind == "agent_message_chunk":
            self.text("message", _block_text(update.get("content")))
        elif kind == "agent_thought_chunk":
            self.text("thought", _block_text(update.get("content")))
        elif kind in ("tool_call", "tool_call_update"):
            self.tool_call(update, created=kind == "tool_call")
        elif kind == "plan" and isinstance(update.get("entries"), list):
            self.plan(update["entries"])

    def text(self, kind: str, text: str) -> None:
        """Streamed text of a reply ("message") or of the agent's thinking ("thought")."""
        if not text:
            return
        if self._streaming != kind:
            self.end_stream()
            self._streaming = kind
            if kind == "thought":
                self.write(self.style.paint("thinking: ", "dim", "bold"))
        self.write(self.style.paint(text, "dim") if kind == "thought" else text)

    def plan(self, entries: list[Any]) -> None:
        self.end_stream()
        self.write(self.style.plan(entries))

    def tool_call(self, update: dict[str, Any], created: bool = False) -> None:
        """A tool call's fields (v1's `ToolCall` when `created`, else a `ToolCallUpdate`): a line when its status
        changes, and content not shown before."""
        tool_id = _text(update.get("toolCallId"))
        call = self._tools.get(tool_id)
        if call is None:
            call = self._tools[tool_id] = _ToolCall(_text(update.get("title")) or tool_id or "tool call")
            if created:
                call.status = "pending"  # ToolCall's default status
        call.title = _text(update.get("title")) or call.title
        call.kind = _text(update.get("kind")) or call.kind
        status = _text(update.get("status")) or call.status
        if status != call.status or created:
            call.status = status
            self.end_stream()
            self.write(self.style.tool_line(call.title, call.kind, status))
        if isinstance(update.get("content"), list):
            self._tool_content(call, update["content"])

    def _tool_content(self, call: _ToolCall, content: list[Any]) -> None:
        for item in content:
            if not isinstance(item, dict):
                continue
            if item.get("type") == "diff":
                path, old, new = _text(item.get("path")), item.get("oldText"), _text(item.get("newText"))
                key = ("diff", path, _text(old) if old is not None else "\0new", new)
                if key not in call.shown:
                    call.shown.add(key)
                    self.end_stream()
                    self.write(self.style.diff(path, old if isinstance(old, str) else None, new))
            elif item.get("type") == "patch":  # a v2 diff's git patch (see `v2.V2Updates`)
                patch = _text(item.get("text"))
                if patch and ("patch", patch) not in call.shown:
                    call.shown.add(("patch", patch))
                    self.end_stream()
                    self.write(self.style.patch(patch))
            elif item.get("type") == "content":
                text = _block_text(item.get("content"))
                if text and ("text", text) not in call.shown:
                    call.shown.add(("text", text))
                    self.end_stream()
                    self.write(self.style.output(text))
            elif item.get("type") == "terminal":
                self.line(self.style.paint(f"    [terminal {_text(item.get('terminalId'))}]", "dim"))

    # --- questions ---

    def permission_question(self, tool_call: Any, options: list[dict[str, Any]]) -> None:
        tool_call = tool_call if isinstance(tool_call, dict) else {}
        tool_id = _text(tool_call.get("toolCallId"))
        known = self._tools.get(tool_id)
        title = _text(tool_call.get("title")) or (known.title if known else "") or "a tool call"
        self.end_stream()
        self.write(self.style.paint("? ", "yellow", "bold") + self.style.paint(f"Permission: {title}", "bold") + "\n")
        if isinstance(tool_call.get("content"), list):
            self._tool_content(known or self._tools.setdefault(tool_id, _ToolCall(title)), tool_call["content"])
        for number, option in enumerate(options, 1):
            self.write(f"  {number}. {_text(option.get('name')) or _text(option.get('optionId'))}\n")

    def ask(self, count: int) -> None:
        self.write(f"choose 1-{count}: ")
        self._at_line_start = True  # the person's Enter ends the line
        self._answer_pending = True

    def answered(self) -> None:
        """The person's answer to a question was read (their Enter ended its line), or stdin ended."""
        self._answer_pending = False

    def form_question(self, message: str) -> None:
        self.end_stream()
        self.write(
            self.style.paint("? ", "yellow", "bold") + self.style.paint(message or "The agent asks:", "bold") + "\n"
        )

    def ask_field(self, label: str, description: str, hint: str) -> None:
        about = f" ({description})" if description else ""
        how = self.style.paint(f" [{hint}]", "dim") if hint else ""
        self.write(f"  {label}{about}{how}: ")
        self._at_line_start = True  # the person's Enter ends the line
        self._answer_pending = True
