"""ACP v2's session updates and permission questions drawn by the chat's one renderer (ACP-V2.md §8-§13, §21).

The renderer draws v1's shapes: streamed text, a tool call's fields, a plan. On a v2 connection every update goes
through `V2Updates`, which keeps what v2 keys by id and v1 did not need, and calls the renderer with v1's fields:

- messages: chunks carry a `messageId`; a whole-message upsert (`agent_message`, `agent_thought`) replaces what the
  message holds. A terminal cannot take back printed text, so an upsert that extends what was shown prints the rest,
  and one that changes it prints the new text on a line of its own. Chunks of different messages may interleave
  (§8): text of another message than the one drawn last breaks the stream first, so two messages never run
  together on one line;
- tool calls: `tool_call` is gone and the first `tool_call_update` of an unseen id creates the call (v1's
  `tool_call`); `tool_call_content_chunk` appends one item; `null` resets `kind` and `status`; a diff is
  `{changes, patch}` and is shown as its git patch;
- terminals are the agent's own and display-only: the tool call's content only anchors one, and its bytes arrive as
  base64 `terminal_output_chunk`s (or an `output` snapshot that replaces them). They are kept until the terminal
  exits and then shown as the anchoring call's text output, as v1 shows a command's result;
- a plan is `plan_update {plan: {type: "items", planId, entries}}`;
- a permission question has its own `title` and a `subject` (a tool call, applied like a `tool_call_update`, or a
  command line and where it runs) instead of v1's bare `toolCall`.

The foreground state (`state_update`) is the conversation's business (`session`), not drawn. Unknown updates, and
what a person need not see (the echo of their own prompt), become nothing.
"""

from __future__ import annotations

import base64
import binascii
from typing import Any, Protocol

__all__ = ["Canvas", "V2Updates"]


class Canvas(Protocol):
    """What `V2Updates` draws on: `render.Renderer`'s drawing methods."""

    def text(self, kind: str, text: str) -> None: ...

    def end_stream(self) -> None: ...

    def tool_call(self, update: dict[str, Any], created: bool = False) -> None: ...

    def plan(self, entries: list[Any]) -> None: ...


def _text(value: Any) -> str:
    return value if isinstance(value, str) else ""


def _text_item(text: str) -> dict[str, Any]:
    return {"type": "content", "content": {"type": "text", "text": text}}


def _block_text(content: Any) -> str:
    blocks = content if isinstance(content, list) else []
    return "".join(_text(b.get("text")) for b in blocks if isinstance(b, dict) and b.get("type") == "text")


def _decoded(data: Any) -> bytes:
    try:
        return base64.b64decode(_text(data), validate=True)
    except (binascii.Error, ValueError):
        return b""  # a malformed chunk is not worth ending the conversation over


def _exit_note(status: dict[str, Any]) -> str:
    signal, code = status.get("signal"), status.get("exitCode")
    # Worded as the command's result reads on v1 (runtime/tools/commands.py), so both versions look alike.
    if isinstance(signal, str) and signal:
        return f"[killed by signal {signal}]"
    if isinstance(code, int) and code != 0:
        return f"[exit code {code}]"
    return ""


class V2Updates:
    """One v2 connection's updates, drawn; the state they need: seen tool calls, terminal anchors and bytes, and
    the text shown of each message."""

    def __init__(self, canvas: Canvas) -> None:
        self._canvas = canvas
        self._tools: set[str] = set()
        self._anchors: dict[str, str] = {}  # terminalId -> the tool call whose content showed it
        self._output: dict[str, bytearray] = {}  # terminalId -> its bytes so far
        self._messages: dict[tuple[str, str], str] = {}  # (kind, messageId) -> the text shown for it
        self._drawn: tuple[str, str] | None = None  # the (kind, messageId) whose text was drawn last

    def show(self, update: Any) -> None:
        if not isinstance(update, dict):
            return
        kind = update.get("sessionUpdate")
        if kind in _TEXT_KINDS:
            content = update.get("content")
            text = _text(content.get("text")) if isinstance(content, dict) else ""
            self._message_text(_TEXT_KINDS[kind], _text(update.get("messageId")), text)
        elif kind in _WHOLE_KINDS:
            self._whole_message(_WHOLE_KINDS[kind], update)
        elif kind == "tool_call_update":
            self._tool_call(update)
        elif kind == "tool_call_content_chunk":
            self._tool_call({"toolCallId": _text(update.get("toolCallId")), "content": [update.get("content")]})
        elif kind == "plan_update":
            plan = update.get("plan")
            if isinstance(plan, dict) and isinstance(plan.get("entries"), list):
                self._canvas.plan(plan["entries"])  # other plan kinds (markdown, file) are unstable: not drawn
        elif kind == "terminal_output_chunk":
            self._output.setdefault(_text(update.get("terminalId")), bytearray()).extend(_decoded(update.get("data")))
        elif kind == "terminal_update":
            self._terminal(update)
        # Anything else is not drawn: the echo of the person's own prompt, session-scoped updates, unknown kinds.

    def permission(self, params: Any) -> dict[str, Any]:
        """v2 `session/request_permission` params as v1's: the question's own title, the subject as `toolCall`."""
        params = params if isinstance(params, dict) else {}
        subject = params.get("subject")
        subject = subject if isinstance(subject, dict) else {}
        tool_call: dict[str, Any] = {}
        content: list[Any] = []
        if subject.get("type") == "tool_call" and isinstance(subject.get("toolCall"), dict):
            self._tool_call(subject["toolCall"])  # applied like a tool_call_update, a first-seen id included
            tool_call = self._fields(subject["toolCall"])
            content = tool_call.get("content") or []
        elif subject.get("type") == "command":
            tool_call = {"toolCallId": _text(subject.get("toolCallId"))}
            command, cwd = _text(subject.get("command")), _text(subject.get("cwd"))
            shown = f"$ {command}" if command and command != _text(params.get("title")) else ""
            where = f"in {cwd}" if cwd else ""
            if shown or where:
                content = [_text_item("  ".join(part for part in (shown, where) if part))]
        description = _text(params.get("description"))
        if description:
            content = [_text_item(description), *content]
        tool_call["title"] = _text(params.get("title")) or _text(tool_call.get("title"))
        tool_call["content"] = content
        return {"sessionId": params.get("sessionId"), "toolCall": tool_call, "options": params.get("options", [])}

    # --- messages ---

    def _message_text(self, kind: str, message_id: str, text: str) -> None:
        self._messages[(kind, message_id)] = self._messages.get((kind, message_id), "") + text
        self._draw((kind, message_id), text)

    def _whole_message(self, kind: str, update: dict[str, Any]) -> None:
        if "content" not in update:
            return  # an omitted content leaves the message as it is (a `_meta` patch)
        key = (kind, _text(update.get("messageId")))
        text, shown = _block_text(update.get("content")), self._messages.get(key, "")
        self._messages[key] = text
        # A correction cannot take printed text back: the new version follows on a line of its own.
        rest = text[len(shown) :] if text.startswith(shown) else "\n" + text
        self._draw(key, rest)

    def _draw(self, key: tuple[str, str], text: str) -> None:
        """A message's text, after a break when another message of its kind was drawn last (the renderer breaks
        between kinds itself, and knows nothing of ids)."""
        if text and self._drawn is not None and self._drawn != key and self._drawn[0] == key[0]:
            self._canvas.end_stream()
        if text:
            self._drawn = key
        self._canvas.text(key[0], text)

    # --- tool calls ---

    def _tool_call(self, update: dict[str, Any]) -> None:
        call = self._fields(update)
        call_id = _text(call.get("toolCallId"))
        created = call_id not in self._tools  # the first report of an id creates the call
        self._tools.add(call_id)
        if created and not _text(call.get("title")) and _text(call.get("name")):
            call["title"] = call["name"]  # untitled: its programmatic name says more than its id
        self._canvas.tool_call(call, created=created)

    def _fields(self, update: dict[str, Any]) -> dict[str, Any]:
        """A v2 tool call's fields as v1's: `null` resets to the defaults, content items as the renderer draws."""
        call = {k: v for k, v in update.items() if k != "sessionUpdate"}
        if "kind" in call and call["kind"] is None:
            call["kind"] = "other"
        if "status" in call and call["status"] is None:
            call["status"] = "pending"
        if "content" in call:
            call["content"] = self._content(_text(call.get("toolCallId")), call["content"])
        return call

    def _content(self, call_id: str, content: Any) -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = []
        for item in content if isinstance(content, list) else []:
            if not isinstance(item, dict):
                continue
            kind = item.get("type")
            if kind == "terminal":
                # An anchor only: the terminal's output is shown when it exits (no client terminals in v2).
                self._anchors[_text(item.get("terminalId"))] = call_id
            elif kind == "diff":
                items.append(_diff(item))
            else:
                items.append(item)
        return items

    # --- terminals ---

    def _terminal(self, update: dict[str, Any]) -> None:
        terminal_id = _text(update.get("terminalId"))
        output = update.get("output")
        if isinstance(output, dict):
            self._output[terminal_id] = bytearray(_decoded(output.get("data")))  # a snapshot replaces the bytes
        status = update.get("exitStatus")
        if not isinstance(status, dict):
            return
        data = self._output.pop(terminal_id, bytearray())
        call_id = self._anchors.pop(terminal_id, None)
        text = data.decode(errors="replace")
        note = _exit_note(status)
        if note:
            text = f"{text.rstrip()}\n{note}" if text.strip() else note
        if call_id is not None and text.strip():  # else no tool call to show it under, or nothing to show
            self._canvas.tool_call({"toolCallId": call_id, "content": [_text_item(text)]})


_TEXT_KINDS = {"agent_message_chunk": "message", "agent_thought_chunk": "thought"}
_WHOLE_KINDS = {"agent_message": "message", "agent_thought": "thought"}


def _diff(item: dict[str, Any]) -> dict[str, Any]:
    """v2's `Diff`: its git patch when there is one, else the list of changes in words."""
    patch = item.get("patch")
    if isinstance(patch, dict) and _text(patch.get("text")):
        return {"type": "patch", "text": _text(patch.get("text"))}
    lines = []
    changes = item.get("changes")
    for change in changes if isinstance(changes, list) else []:
        if isinstance(change, dict):
            lines.append(f"{_text(change.get('operation')) or 'change'} {_text(change.get('path'))}")
    return _text_item("\n".join(lines))
