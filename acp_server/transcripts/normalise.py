"""The normal form two conversations are compared in, so that only what an agent decides can differ.

Normalisation forgives what a correct agent may do differently from run to run, and nothing else:

- generated ids (session ids, tool call ids, message ids, the agent's own request ids) become placeholders
  (`$session1`, `$call1`, `$msg1`, `$req1`) numbered in order of first appearance (see `ids`); ids the client chose
  (first seen in an "in" line) are compared literally;
- consecutive `agent_message_chunk` / `agent_thought_chunk` texts of one session and message are joined, so how a
  reply is split into chunks does not matter; so are the bytes of consecutive v2 `terminal_output_chunk`s of one
  terminal (each chunk is base64 on its own, so they are joined decoded: how a command's output was read in pieces
  depends on timing); key order does not matter; `t` and timestamp fields are dropped;
- the directories the client named (`cwd`, `additionalDirectories`) become `$cwd1`, `$cwd2`, ... wherever they start
  a path in any string, so a recording made in one checkout compares equal to a replay in another;
- ordering: the output between two "in" lines is split into streams, one per session (its updates, probes,
  requests to the client, `$/cancel_request` and its prompts' responses) and one per other request's response.
  Within a session stream the order must match exactly; streams of one window may interleave freely. Every output
  line must fall between the same two "in" lines.

The normal form is a list of readable lines (`→` client, `←` agent, labelled with the stream), so a mismatch is
shown as a plain unified diff.
"""

from __future__ import annotations

import base64
import binascii
import difflib
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson

from acp_server.transcripts.format import Line
from acp_server.transcripts.ids import Namer, key, map_ids, render

__all__ = ["Canonical", "Comparison", "canonicalise", "compare", "parsed", "path_replacer", "session_roots"]

CHUNK_KINDS = frozenset({"agent_message_chunk", "agent_thought_chunk"})
TERMINAL_CHUNK = "terminal_output_chunk"  # ACP v2: `data` is one piece of a terminal's bytes, base64
TIME_KEYS = frozenset({"updatedAt", "createdAt", "timestamp"})
EOF_TEXT = "(stdin closed)"


def parsed(line: Line) -> Any:
    """The message of a line; a raw line that holds one JSON object counts as that object."""
    if line.raw is None:
        return line.msg
    try:
        return orjson.loads(line.raw)
    except orjson.JSONDecodeError:
        return None


# --- absolute paths and timestamps ---


def session_roots(events: Sequence[Line]) -> list[str]:
    """The directories the client named for its sessions, in order of first appearance ("/" is never a root: it
    would swallow every path)."""
    roots: list[str] = []
    for line in events:
        message = parsed(line) if line.dir == "in" else None
        params = message.get("params") if isinstance(message, dict) else None
        if not isinstance(params, dict):
            continue
        extra = params.get("additionalDirectories")
        for value in [params.get("cwd"), *(extra if isinstance(extra, list) else [])]:
            root = value.rstrip("/") if isinstance(value, str) and value.startswith("/") else ""
            if root and root not in roots:
                roots.append(root)
    return roots


def path_replacer(mapping: Mapping[str, str], times: bool = False) -> Callable[[Any], Any]:
    """A function that copies a JSON value, replacing each directory of `mapping` where it starts a path in a
    string (`/tmp/a` in "/tmp/a/b.txt" and "Read /tmp/a", not in "/tmp/ab" or "/x/tmp/a"); with `times`, the
    values of timestamp fields become "$time"."""
    ordered = sorted(mapping, key=len, reverse=True)  # the longest first: a root inside another root
    pattern = re.compile(r"(?<![\w.~/-])(?:" + "|".join(map(re.escape, ordered)) + r")(?=/|[^\w.~-]|$)")

    def substitute(match: re.Match[str]) -> str:
        return mapping[match.group(0)]

    def replace(value: Any) -> Any:
        if isinstance(value, str):
            return pattern.sub(substitute, value) if ordered and "/" in value else value
        if isinstance(value, dict):
            return {
                name: "$time" if times and name in TIME_KEYS and isinstance(item, str) else replace(item)
                for name, item in value.items()
            }
        if isinstance(value, list):
            return [replace(item) for item in value]
        return value

    return replace


# --- chunks ---


def _chunk_key(message: Any) -> bytes | None:
    """What two chunks must share to be joined: everything but the text or the bytes (so the same session, kind,
    messageId or terminalId)."""
    if not isinstance(message, dict) or message.get("method") != "session/update":
        return None
    params = message.get("params")
    if not isinstance(params, dict):
        return None
    update = params.get("update")
    if not isinstance(update, dict):
        return None
    if update.get("sessionUpdate") == TERMINAL_CHUNK:
        if _bytes(update.get("data")) is None:
            return None
        return key({**message, "params": {**params, "update": {**update, "data": None}}})
    if update.get("sessionUpdate") not in CHUNK_KINDS:
        return None
    content = update.get("content")
    if not isinstance(content, dict) or content.get("type") != "text" or not isinstance(content.get("text"), str):
        return None
    stripped = {**message, "params": {**params, "update": {**update, "content": {**content, "text": None}}}}
    return key(stripped)


def _bytes(data: Any) -> bytes | None:
    if not isinstance(data, str):
        return None
    try:
        return base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError):
        return None  # not base64: compared as it is, never joined


def _join(into: dict[str, Any], message: dict[str, Any]) -> None:
    update, more = into["params"]["update"], message["params"]["update"]
    if update["sessionUpdate"] == TERMINAL_CHUNK:
        joined = (_bytes(update["data"]) or b"") + (_bytes(more["data"]) or b"")
        update["data"] = base64.b64encode(joined).decode("ascii")
    else:
        update["content"]["text"] += more["content"]["text"]


def _coalesce(messages: Sequence[Any]) -> list[Any]:
    joined: list[Any] = []
    previous_key: bytes | None = None
    for message in messages:
        chunk = _chunk_key(message)
        if chunk is not None and chunk == previous_key:
            # `message` and `joined[-1]` are fresh copies made by `map_ids`, so this mutates nothing shared.
            _join(joined[-1], message)
        else:
            joined.append(message)
        previous_key = chunk
    return joined


# --- streams ---


@dataclass
class _Routing:
    """What is needed to put an output line in its stream: prompt -> session, agent request -> session."""

    prompt_sessions: dict[bytes, str] = field(default_factory=dict)
    request_positions: dict[bytes, int] = field(default_factory=dict)
    agent_request_sessions: dict[bytes, str] = field(default_factory=dict)

    def note_input(self, line: Line, position: int) -> None:
        message = parsed(line)
        if not isinstance(message, dict) or "method" not in message or message.get("id") is None:
            return
        self.request_positions[key(message["id"])] = position
        params = message.get("params")
        if message["method"] == "session/prompt" and isinstance(params, dict):
            session_id = params.get("sessionId")
            if isinstance(session_id, str):
                self.prompt_sessions[key(message["id"])] = session_id
            else:
                self.prompt_sessions.pop(key(message["id"]), None)

    def stream(self, line: Line) -> tuple[Any, ...]:
        """("session", raw id) | ("response", position, id key) | ("null",) | ("raw",) | ("other", method)."""
        message = line.msg if line.raw is None else None
        if not isinstance(message, dict):
            return ("raw",)
        params = message.get("params")
        if "method" in message:
            session_id = params.get("sessionId") if isinstance(params, dict) else None
            if isinstance(session_id, str):
                if message.get("id") is not None:
                    self.agent_request_sessions[key(message["id"])] = session_id
                return ("session", session_id)
            if message.get("method") == "$/cancel_request" and isinstance(params, dict):
                owner = self.agent_request_sessions.get(key(params.get("requestId")))
                if owner is not None:
                    return ("session", owner)
            return ("other", str(message.get("method")))
        request_id = message.get("id")
        if request_id is None:
            return ("null",)
        session_id = self.prompt_sessions.get(key(request_id))
        if session_id is not None:
            return ("session", session_id)
        return ("response", self.request_positions.get(key(request_id), 1 << 62), key(request_id))


_STREAM_RANK = {"response": 0, "null": 1, "raw": 2, "other": 3}


def _label(stream: tuple[Any, ...]) -> str:
    if stream[0] == "response":
        request_id: bytes = stream[2]
        return "response to id " + request_id.decode()
    if stream[0] == "null":
        return "id null"
    if stream[0] == "raw":
        return "not JSON-RPC"
    return f"{stream[1]}"


# --- the normal form ---


@dataclass
class Canonical:
    """The normalised form of a conversation: one segment per "in" line (the segment's first rendered line) holding
    the output that followed it, grouped into streams in a fixed order, every line labelled with its stream."""

    segments: list[list[str]]
    namer: Namer

    def lines(self, segments: int | None = None) -> list[str]:
        return [line for segment in self.segments[:segments] for line in segment]


@dataclass
class _Renderer:
    namer: Namer
    scrub: Callable[[Any], Any]
    routing: _Routing = field(default_factory=_Routing)

    def message(self, message: dict[str, Any], direction: str) -> Any:
        replace = self.namer.output if direction == "out" else self.namer.input
        return self.scrub(map_ids(message, direction, replace))

    def input(self, line: Line) -> str:
        if line.eof:
            return f"→ {EOF_TEXT}"
        if line.truncated is not None:
            return f"→ raw (a line of {line.truncated} bytes)"
        message = parsed(line)
        if isinstance(message, dict):
            return "→ " + render(self.message(message, "in"))
        return "→ raw " + render(line.raw if line.raw is not None else render(line.msg))

    def outputs(self, lines: Sequence[Line]) -> list[str]:
        streams: dict[tuple[Any, ...], list[Line]] = {}
        for line in lines:
            streams.setdefault(self.routing.stream(line), []).append(line)
        rendered: list[str] = []
        others = sorted((k for k in streams if k[0] != "session"), key=lambda k: (_STREAM_RANK[k[0]], k[1:]))
        for stream in others:
            label = _label(stream)
            for line in streams[stream]:
                if line.raw is not None or not isinstance(line.msg, dict):
                    text = "raw " + render(line.raw if line.raw is not None else line.msg)
                else:
                    text = render(self.message(line.msg, "out"))
                rendered.append(f"← [{label}] {text}")
        # Sessions already named (by an "in" line, an earlier segment or a session/new result above) keep their
        # order; a session first seen here is placed by its first line.
        namer = self.namer
        sessions = [k for k in streams if k[0] == "session"]
        sessions.sort(key=lambda k: (0, namer.ordinals[name]) if (name := namer.known("session", k[1])) else (1, 0))
        for stream in sessions:
            label = f"session {namer.output('session', stream[1])}"
            messages = [self.message(line.msg, "out") for line in streams[stream]]
            rendered += [f"← [{label}] {render(message)}" for message in _coalesce(messages)]
        return rendered


def canonicalise(events: Sequence[Line]) -> Canonical:
    """Normalise a sequence of "in"/"out" lines (see the module docstring)."""
    roots = {root: f"$cwd{n}" for n, root in enumerate(session_roots(events), 1)}
    renderer = _Renderer(Namer(), path_replacer(roots, times=True))
    segments: list[list[str]] = [[]]
    pending: list[Line] = []
    inputs = 0
    for line in events:
        if line.dir == "out":
            pending.append(line)
        elif line.dir == "in":
            segments[-1] += renderer.outputs(pending)
            pending = []
            inputs += 1
            renderer.routing.note_input(line, inputs)
            segments.append([renderer.input(line)])
    segments[-1] += renderer.outputs(pending)
    return Canonical(segments, renderer.namer)


@dataclass
class Comparison:
    expected: list[str]
    actual: list[str]

    @property
    def matches(self) -> bool:
        return self.expected == self.actual

    def diff(self) -> str:
        return "\n".join(difflib.unified_diff(self.expected, self.actual, "expected", "actual", lineterm="", n=4))


def compare(expected: Sequence[Line], actual: Sequence[Line]) -> Comparison:
    """Normalise both conversations and compare them."""
    return Comparison(canonicalise(expected).lines(), canonicalise(actual).lines())
