"""Recorded-transcript tests: replay a JSONL wire conversation against `acp-server` and diff what comes back.

Why this exists: the cancellation scenarios of INTERRUPTS.md are easiest to review, and hardest to get subtly
wrong, as the literal conversation on the wire. A transcript in `fixtures/transcripts/` is that conversation, one
JSON object a line (`{"dir": "in" | "out", "msg": {...}}`), written by hand from a scenario or recorded from a run.
`replay` sends its "in" lines through `RawClient` (so every server line is schema-checked and the wire checks run)
and compares the server's output with the "out" lines after normalisation:

- generated ids (session ids, tool call ids, message ids, the server's own request ids) become placeholders
  (`$session1`, `$call1`, `$msg1`, `$req1`) numbered in order of first appearance, so a transcript may be written
  with placeholders and the same placeholder must stand for the same real id throughout; ids the client chose
  (first seen in an "in" line) are compared literally;
- consecutive `agent_message_chunk` / `agent_thought_chunk` texts of one session and message are joined, so how a
  reply is split into chunks does not matter; key order does not matter; timestamps are dropped;
- ordering: within one session (its updates, probes, requests to the client and its prompts' responses) the order
  must match exactly; across sessions, and for responses to other requests, only the position relative to the
  surrounding "in" lines matters.

The file format and the record/replay workflow are described in `fixtures/transcripts/README.md`.
"""

from __future__ import annotations

import argparse
import asyncio
import difflib
import sys
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from tests.harness import DEFAULT_ARGS, T_EXIT, Entry, RawClient, check_wire

__all__ = [
    "TRANSCRIPT_DIR",
    "Canonical",
    "Line",
    "ReplayResult",
    "Transcript",
    "TranscriptError",
    "canonicalise",
    "compare",
    "dump_transcript",
    "events_from_log",
    "load_transcript",
    "parse_transcript",
    "record",
    "replay",
    "transcript_from_log",
]

TRANSCRIPT_DIR = Path(__file__).resolve().parent.parent / "fixtures" / "transcripts"
DEFAULT_TIMEOUT = 5.0  # how long replay waits for the output expected before an "in" line
CHUNK_KINDS = frozenset({"agent_message_chunk", "agent_thought_chunk"})
ID_KEYS = {"sessionId": "session", "toolCallId": "call", "messageId": "msg"}  # wherever they occur
EOF_TEXT = "(stdin closed)"

StartServer = Callable[..., Awaitable[RawClient]]
IdMap = Callable[[str, Any], Any]  # (kind, value) -> replacement


class TranscriptError(ValueError):
    """A transcript file that does not follow the format, with the line at fault."""


# --- the format ---


@dataclass(frozen=True)
class Line:
    """One event of a transcript: an input line (a message, raw text, or stdin EOF), an output line, or a pause."""

    dir: str  # "in", "out" or "meta"
    msg: Any = None
    raw: str | None = None
    eof: bool = False
    sleep: float | None = None
    t: float | None = None
    comment: str | None = None

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {"dir": self.dir}
        if self.t is not None:
            data["t"] = self.t
        if self.comment is not None:
            data["comment"] = self.comment
        if self.eof:
            data["eof"] = True
        elif self.sleep is not None:
            data["sleep"] = self.sleep
        elif self.raw is not None:
            data["raw"] = self.raw
        else:
            data["msg"] = self.msg
        return data


@dataclass
class Transcript:
    """A parsed transcript: the server's arguments and the lines, in order. `args` come from a first "meta" line."""

    lines: list[Line]
    args: tuple[str, ...] = DEFAULT_ARGS
    timeout: float = DEFAULT_TIMEOUT
    name: str = "<transcript>"
    comment: str | None = None

    def events(self) -> list[Line]:
        """The wire events ("in" and "out" lines), ending with stdin EOF (implicit when the file has none)."""
        events = [line for line in self.lines if line.dir != "meta"]
        if not any(line.eof for line in events):
            events.append(Line("in", eof=True))
        return events


_KEYS = {
    "in": {"dir", "msg", "raw", "eof", "t", "comment"},
    "out": {"dir", "msg", "raw", "t", "comment"},
    "meta": {"dir", "args", "timeout", "sleep", "comment"},
}


def parse_transcript(text: str | bytes, name: str = "<transcript>") -> Transcript:
    """Parse JSONL text; every mistake is reported with its line number."""
    if isinstance(text, bytes):
        text = text.decode()
    lines: list[Line] = []
    transcript = Transcript(lines, name=name)
    seen_eof = False
    # Split on "\n" only: str.splitlines() would also split at U+2028 and friends, which orjson leaves unescaped.
    numbered = [(n, s.rstrip("\r")) for n, s in enumerate(text.split("\n"), 1) if s.strip()]
    for position, (number, source) in enumerate(numbered):
        where = f"{name}:{number}"
        try:
            data = orjson.loads(source)
        except orjson.JSONDecodeError as exc:
            raise TranscriptError(f"{where}: not JSON: {exc}") from None
        if not isinstance(data, dict) or data.get("dir") not in _KEYS:
            raise TranscriptError(f'{where}: expected an object with "dir": "in", "out" or "meta"')
        direction = data["dir"]
        unknown = set(data) - _KEYS[direction]
        if unknown:
            raise TranscriptError(f"{where}: unexpected key(s) {', '.join(sorted(unknown))} in a {direction!r} line")
        comment = data.get("comment")
        if comment is not None and not isinstance(comment, str):
            raise TranscriptError(f"{where}: comment must be a string")
        t = data.get("t")
        if t is not None and (not isinstance(t, (int, float)) or isinstance(t, bool)):
            raise TranscriptError(f"{where}: t must be a number of seconds")
        if seen_eof and direction == "in":
            raise TranscriptError(f"{where}: nothing can be sent after stdin was closed")
        if direction == "meta":
            _parse_meta(data, where, position, transcript)
            continue
        payload = [key for key in ("msg", "raw", "eof") if key in data]
        if len(payload) != 1:
            allowed = "msg, raw or eof" if direction == "in" else "msg or raw"
            raise TranscriptError(f"{where}: needs exactly one of {allowed}")
        if "raw" in data and (not isinstance(data["raw"], str) or any(c in data["raw"] for c in "\r\n")):
            raise TranscriptError(f"{where}: raw must be a string holding one line")
        if "eof" in data and data["eof"] is not True:
            raise TranscriptError(f"{where}: eof must be true")
        seen_eof = seen_eof or "eof" in data
        lines.append(Line(direction, msg=data.get("msg"), raw=data.get("raw"), eof="eof" in data, t=t, comment=comment))
    return transcript


def _parse_meta(data: dict[str, Any], where: str, position: int, transcript: Transcript) -> None:
    if "args" in data or "timeout" in data:
        if position != 0:
            raise TranscriptError(f"{where}: args and timeout belong on the first line")
        args = data.get("args", list(DEFAULT_ARGS))
        if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
            raise TranscriptError(f"{where}: args must be a list of strings")
        transcript.args = tuple(args)
        timeout = data.get("timeout", DEFAULT_TIMEOUT)
        if not isinstance(timeout, (int, float)) or isinstance(timeout, bool) or timeout <= 0:
            raise TranscriptError(f"{where}: timeout must be a positive number of seconds")
        transcript.timeout = float(timeout)
        transcript.comment = data.get("comment")
    if "sleep" in data:
        sleep = data["sleep"]
        if not isinstance(sleep, (int, float)) or isinstance(sleep, bool) or sleep < 0:
            raise TranscriptError(f"{where}: sleep must be a non-negative number of seconds")
        if "args" in data or "timeout" in data:
            raise TranscriptError(f"{where}: sleep goes on a line of its own")
        transcript.lines.append(Line("meta", sleep=float(sleep), comment=data.get("comment")))


def load_transcript(path: Path) -> Transcript:
    return parse_transcript(path.read_bytes(), name=path.name)


def dump_transcript(transcript: Transcript) -> bytes:
    """JSONL text for a transcript; the first line carries the server arguments."""
    head: dict[str, Any] = {"dir": "meta", "args": list(transcript.args)}
    if transcript.timeout != DEFAULT_TIMEOUT:
        head["timeout"] = transcript.timeout
    if transcript.comment is not None:
        head["comment"] = transcript.comment
    return b"".join(orjson.dumps(item) + b"\n" for item in [head, *(line.to_json() for line in transcript.lines)])


# --- normalisation ---


def _key(value: Any) -> bytes:
    """Identity of a JSON value, keeping types apart (the ids 1 and "1" differ)."""
    return orjson.dumps(value, option=orjson.OPT_SORT_KEYS)


def _render(value: Any) -> str:
    return orjson.dumps(value, option=orjson.OPT_SORT_KEYS).decode()


@dataclass
class Namer:
    """Gives each id the server generated a placeholder, `$<kind><n>`, in order of first appearance.

    An id first seen in an "in" line was chosen by the client (an unknown session, a tool call id in a script's
    arguments): it stays literal wherever it appears, so the server must echo it exactly.
    """

    names: dict[tuple[str, bytes], str] = field(default_factory=dict)
    values: dict[str, Any] = field(default_factory=dict)  # placeholder -> the value it stands for
    ordinals: dict[str, int] = field(default_factory=dict)
    client_chosen: set[tuple[str, bytes]] = field(default_factory=set)
    counts: dict[str, int] = field(default_factory=dict)

    def output(self, kind: str, value: Any) -> Any:
        """An id in a server line: its placeholder (a new one at its first appearance), or itself if client-chosen."""
        key = (kind, _key(value))
        if key in self.client_chosen:
            return value
        name = self.names.get(key)
        if name is None:
            self.counts[kind] = self.counts.get(kind, 0) + 1
            name = f"${kind}{self.counts[kind]}"
            self.names[key] = name
            self.values[name] = value
            self.ordinals[name] = self.counts[kind]
        return name

    def input(self, kind: str, value: Any) -> Any:
        """An id in a client line: the placeholder of a generated id seen before, else the id itself (client-chosen
        from here on)."""
        key = (kind, _key(value))
        name = self.names.get(key)
        if name is None:
            self.client_chosen.add(key)
            return value
        return name

    def known(self, kind: str, value: Any) -> str | None:
        return self.names.get((kind, _key(value)))

    def map(self, direction: str) -> IdMap:
        return self.output if direction == "out" else self.input


def _map_ids(message: Any, direction: str, replace: IdMap) -> Any:
    """A copy of `message` with every generated-id position passed through `replace(kind, value)`."""
    if not isinstance(message, dict):
        return message
    mapped = _map_tree(message, replace)
    request_id = message.get("id")
    if request_id is not None:
        is_server_request = direction == "out" and "method" in message
        is_answer_to_server = (
            direction == "in" and "method" not in message and ("result" in message or "error" in message)
        )
        if is_server_request or is_answer_to_server:
            mapped["id"] = replace("req", request_id)
    params = mapped.get("params")
    retracted = params.get("requestId") if isinstance(params, dict) else None
    if direction == "out" and message.get("method") == "$/cancel_request" and retracted is not None:
        params["requestId"] = replace("req", retracted)
    return mapped


def _map_tree(value: Any, replace: IdMap) -> Any:
    if isinstance(value, dict):
        result: dict[str, Any] = {}
        for key, item in value.items():
            kind = ID_KEYS.get(key)
            result[key] = (
                replace(kind, item) if kind is not None and isinstance(item, str) else _map_tree(item, replace)
            )
        return result
    if isinstance(value, list):
        return [_map_tree(item, replace) for item in value]
    return value


def _chunk_key(message: Any) -> bytes | None:
    """What two chunks must share to be joined: everything but the text (so the same session, kind, messageId)."""
    if not isinstance(message, dict) or message.get("method") != "session/update":
        return None
    params = message.get("params")
    if not isinstance(params, dict):
        return None
    update = params.get("update")
    if not isinstance(update, dict) or update.get("sessionUpdate") not in CHUNK_KINDS:
        return None
    content = update.get("content")
    if not isinstance(content, dict) or content.get("type") != "text" or not isinstance(content.get("text"), str):
        return None
    stripped = {**message, "params": {**params, "update": {**update, "content": {**content, "text": None}}}}
    return _key(stripped)


def _coalesce(messages: Sequence[Any]) -> list[Any]:
    joined: list[Any] = []
    previous_key: bytes | None = None
    for message in messages:
        key = _chunk_key(message)
        if key is not None and key == previous_key:
            # `message` and `joined[-1]` are fresh copies made by `_map_ids`, so this mutates nothing shared.
            joined[-1]["params"]["update"]["content"]["text"] += message["params"]["update"]["content"]["text"]
        else:
            joined.append(message)
        previous_key = key
    return joined


@dataclass
class _Routing:
    """What is needed to put an output line in its stream: prompt -> session, server request -> session."""

    prompt_sessions: dict[bytes, str] = field(default_factory=dict)
    request_positions: dict[bytes, int] = field(default_factory=dict)
    server_request_sessions: dict[bytes, str] = field(default_factory=dict)

    def note_input(self, line: Line, position: int) -> None:
        message = _parsed(line)
        if not isinstance(message, dict) or "method" not in message or message.get("id") is None:
            return
        self.request_positions[_key(message["id"])] = position
        params = message.get("params")
        if message["method"] == "session/prompt" and isinstance(params, dict):
            session_id = params.get("sessionId")
            if isinstance(session_id, str):
                self.prompt_sessions[_key(message["id"])] = session_id
            else:
                self.prompt_sessions.pop(_key(message["id"]), None)

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
                    self.server_request_sessions[_key(message["id"])] = session_id
                return ("session", session_id)
            if message.get("method") == "$/cancel_request" and isinstance(params, dict):
                owner = self.server_request_sessions.get(_key(params.get("requestId")))
                if owner is not None:
                    return ("session", owner)
            return ("other", str(message.get("method")))
        request_id = message.get("id")
        if request_id is None:
            return ("null",)
        session_id = self.prompt_sessions.get(_key(request_id))
        if session_id is not None:
            return ("session", session_id)
        return ("response", self.request_positions.get(_key(request_id), 1 << 62), _key(request_id))


_STREAM_RANK = {"response": 0, "null": 1, "raw": 2, "other": 3}


def _parsed(line: Line) -> Any:
    """The message of a line; a raw line that holds one JSON object counts as that object."""
    if line.raw is None:
        return line.msg
    try:
        return orjson.loads(line.raw)
    except orjson.JSONDecodeError:
        return None


@dataclass
class Canonical:
    """The normalised form of a conversation: one segment per "in" line (the segment's first rendered line) holding
    the output that followed it, grouped into streams in a fixed order, every line labelled with its stream."""

    segments: list[list[str]]
    namer: Namer

    def lines(self, segments: int | None = None) -> list[str]:
        return [line for segment in self.segments[:segments] for line in segment]


def canonicalise(events: Sequence[Line]) -> Canonical:
    """Normalise a sequence of "in"/"out" lines (see the module docstring)."""
    namer = Namer()
    routing = _Routing()
    segments: list[list[str]] = [[]]
    pending: list[Line] = []
    inputs = 0
    for line in events:
        if line.dir == "out":
            pending.append(line)
        elif line.dir == "in":
            segments[-1] += _render_outputs(pending, namer, routing)
            pending = []
            inputs += 1
            routing.note_input(line, inputs)
            segments.append([_render_input(line, namer)])
    segments[-1] += _render_outputs(pending, namer, routing)
    return Canonical(segments, namer)


def _render_input(line: Line, namer: Namer) -> str:
    if line.eof:
        return f"→ {EOF_TEXT}"
    message = _parsed(line)
    if isinstance(message, dict):
        return "→ " + _render(_map_ids(message, "in", namer.input))
    return "→ raw " + _render(line.raw if line.raw is not None else _render(line.msg))


def _render_outputs(lines: Sequence[Line], namer: Namer, routing: _Routing) -> list[str]:
    streams: dict[tuple[Any, ...], list[Line]] = {}
    for line in lines:
        streams.setdefault(routing.stream(line), []).append(line)
    rendered: list[str] = []
    others = sorted((key for key in streams if key[0] != "session"), key=lambda k: (_STREAM_RANK[k[0]], k[1:]))
    for key in others:
        label = _label(key)
        for line in streams[key]:
            if line.raw is not None or not isinstance(line.msg, dict):
                text = "raw " + _render(line.raw if line.raw is not None else line.msg)
            else:
                text = _render(_map_ids(line.msg, "out", namer.output))
            rendered.append(f"← [{label}] {text}")
    # Sessions already named (by an "in" line, an earlier segment or a session/new result above) keep their order;
    # a session first seen here is placed by its first line.
    sessions = [key for key in streams if key[0] == "session"]
    sessions.sort(key=lambda k: (0, namer.ordinals[name]) if (name := namer.known("session", k[1])) else (1, 0))
    for key in sessions:
        label = f"session {namer.output('session', key[1])}"
        messages = [_map_ids(line.msg, "out", namer.output) for line in streams[key]]
        rendered += [f"← [{label}] {_render(message)}" for message in _coalesce(messages)]
    return rendered


def _label(key: tuple[Any, ...]) -> str:
    if key[0] == "response":
        request_id: bytes = key[2]
        return "response to id " + request_id.decode()
    if key[0] == "null":
        return "id null"
    if key[0] == "raw":
        return "not JSON-RPC"
    return f"{key[1]}"


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


# --- from a RawClient log ---


def _line_from_entry(entry: Entry) -> Line:
    if entry.dir == "in":
        text = entry.raw.decode(errors="replace")
        # "msg" when re-serialising gives back the exact bytes, else "raw" so replay writes them unchanged.
        if isinstance(entry.msg, dict) and orjson.dumps(entry.msg) == entry.raw:
            return Line("in", msg=entry.msg)
        return Line("in", raw=text)
    if isinstance(entry.msg, dict):
        return Line("out", msg=entry.msg)
    return Line("out", raw=entry.raw.decode(errors="replace").rstrip("\r\n"))


def events_from_log(log: Sequence[Entry], eof_index: int | None = None) -> list[Line]:
    """A RawClient log as transcript lines; `eof_index` is `len(log)` at the moment stdin was closed."""
    events: list[Line] = []
    for index, entry in enumerate(log):
        if index == eof_index:
            events.append(Line("in", eof=True))
        events.append(_line_from_entry(entry))
    if eof_index is not None and eof_index >= len(log):
        events.append(Line("in", eof=True))
    return events


def transcript_from_log(
    log: Sequence[Entry],
    args: Sequence[str] = DEFAULT_ARGS,
    eof_index: int | None = None,
    *,
    times: bool = False,
    comment: str | None = None,
    pauses: Sequence[tuple[int, float]] = (),
) -> Transcript:
    """A transcript of what a RawClient saw, in wire order, with every id the server generated replaced by its
    placeholder (so it can be replayed) and client-chosen ids left as they were. `times` keeps each line's `t`
    (seconds since the first line); `pauses` are (log index, seconds) of sleeps to put back before that entry."""
    namer = canonicalise(events_from_log(log, eof_index)).namer

    def rename(kind: str, value: Any) -> Any:
        return namer.known(kind, value) or value

    lines: list[Line] = []
    start = log[0].t if log else 0.0
    sleeps = dict(pauses)
    for index, entry in enumerate([*log, None]):
        if index in sleeps:
            lines.append(Line("meta", sleep=sleeps[index]))
        if index == eof_index:
            lines.append(Line("in", eof=True))
        if entry is None:
            break
        event = _line_from_entry(entry)
        stamp = round(entry.t - start, 3) if times else None
        if event.raw is None:
            lines.append(Line(event.dir, msg=_map_ids(event.msg, event.dir, rename), t=stamp))
        else:
            lines.append(Line(event.dir, raw=event.raw, t=stamp))
    return Transcript(lines, args=tuple(args), comment=comment)


# --- replay and record ---


@dataclass
class ReplayResult:
    """The outcome of a replay: both normalised conversations and any problem found on the way."""

    name: str
    expected: list[str]
    actual: list[str]
    problems: list[str]
    client: RawClient
    seconds: float

    @property
    def matches(self) -> bool:
        return self.expected == self.actual

    @property
    def ok(self) -> bool:
        return self.matches and not self.problems

    def diff(self) -> str:
        return Comparison(self.expected, self.actual).diff()

    def report(self) -> str:
        parts = [f"{self.name}: {'match' if self.matches else 'MISMATCH'} ({self.seconds:.2f} s)"]
        parts += [f"problem: {problem}" for problem in self.problems]
        if not self.matches:
            parts.append(self.diff())
        return "\n".join(parts)


class _Driver:
    """Sends a transcript's inputs through a RawClient and watches its log."""

    def __init__(self, client: RawClient) -> None:
        self.client = client
        self.eof_index: int | None = None

    def canonical(self) -> Canonical:
        return canonicalise(events_from_log(self.client.log, self.eof_index))

    async def wait_for_lines(self, want: list[str], timeout: float) -> bool:
        """Until the normalised conversation so far is `want` (re-checked whenever the log grows), or `timeout`."""
        deadline = time.monotonic() + timeout
        seen = -1
        while True:
            if len(self.client.log) != seen:
                seen = len(self.client.log)
                if self.canonical().lines() == want:
                    return True
            if time.monotonic() >= deadline:
                return False
            await asyncio.sleep(0.005)

    async def wait_quiet(self, settle: float, timeout: float) -> None:
        """Until no line has arrived for `settle` seconds (at most `timeout`)."""
        deadline = time.monotonic() + timeout
        seen, since = len(self.client.log), time.monotonic()
        while time.monotonic() < deadline and time.monotonic() - since < settle:
            await asyncio.sleep(0.01)
            if len(self.client.log) != seen:
                seen, since = len(self.client.log), time.monotonic()

    async def write(self, lines: Sequence[Line], replace: IdMap) -> None:
        """One write() holding all `lines`: raw lines byte for byte, messages with their placeholders replaced."""
        data = b""
        for line in lines:
            if line.raw is not None:
                data += line.raw.encode() + b"\n"
            else:
                data += orjson.dumps(_map_ids(line.msg, "in", replace)) + b"\n"
        await self.client.write_raw(data)

    async def close(self) -> list[str]:
        self.eof_index = len(self.client.log)
        try:
            code, took = await self.client.close()
        except AssertionError as exc:
            return [str(exc)]
        problems = [] if code == 0 else [f"exit status {code} after stdin EOF"]
        if took > T_EXIT:
            problems.append(f"exit took {took:.2f} s > {T_EXIT} s")
        return problems


def _actions(lines: Sequence[Line]) -> list[list[Line]]:
    """The replay's steps: consecutive message/raw "in" lines (nothing between them) go out in one write; a sleep
    and the EOF are steps of their own; "out" lines only mark where to wait and are not steps."""
    actions: list[list[Line]] = []
    previous: Line | None = None
    for line in lines:
        if line.dir == "in" and not line.eof and previous is not None and previous.dir == "in" and not previous.eof:
            actions[-1].append(line)
        elif line.dir != "out":
            actions.append([line])
        previous = line
    return actions


def _resolver(expected: Namer, bound: dict[str, Any]) -> IdMap:
    """For an expected "in" line: a placeholder becomes the real id that the same placeholder (after normalisation)
    stands for in the server's output so far; anything else, or a placeholder not bound yet, is sent as written."""

    def resolve(kind: str, value: Any) -> Any:
        if not (isinstance(value, str) and value.startswith("$")):
            return value
        name = expected.known(kind, value)
        return bound.get(name, value) if name is not None else value

    return resolve


def _describe(action: Sequence[Line]) -> str:
    head = action[0]
    if head.eof:
        return "closing stdin"
    if head.sleep is not None:
        return f"sleeping {head.sleep} s"
    return "sending " + (head.raw if head.raw is not None else _render(head.msg))[:160]


async def replay(
    transcript: Transcript, start: StartServer | None = None, timeout: float | None = None
) -> ReplayResult:
    """Run a transcript against a fresh server and compare (see the module docstring).

    Before each step, wait until every "out" line before it in the transcript has arrived (the normalised output so
    far equals the transcript's up to that point), at most `timeout` seconds (default: the transcript's, 5 s). If it
    does not come, stop sending and close stdin, so the diff shows where the conversations parted. `start` is
    `RawClient.start` or the `start_server` fixture (which checks the wire again at teardown).
    """
    started = time.monotonic()
    timeout = transcript.timeout if timeout is None else timeout
    lines = [*transcript.lines, *([] if any(line.eof for line in transcript.lines) else [Line("in", eof=True)])]
    expected = canonicalise(transcript.events())
    client = await (start or RawClient.start)(*transcript.args)
    driver = _Driver(client)
    problems: list[str] = []
    sent = 0  # "in" events sent so far
    try:
        for action in _actions(lines):
            if not await driver.wait_for_lines(expected.lines(sent + 1), timeout):
                problems.append(
                    f"gave up after {timeout} s waiting for the output expected before {_describe(action)} "
                    f"(input #{sent + 1}); nothing more was sent"
                )
                break
            head = action[0]
            if head.sleep is not None:
                await asyncio.sleep(head.sleep)
            elif head.eof:
                problems += await driver.close()
                sent += 1
            else:
                await driver.write(action, _resolver(expected.namer, driver.canonical().namer.values))
                sent += len(action)
        if driver.eof_index is None:
            problems += await driver.close()
    finally:
        client.kill()  # only if it is still running: an exception above, or a hung exit
    problems += check_wire(client)
    actual = driver.canonical().lines()
    return ReplayResult(transcript.name, expected.lines(), actual, problems, client, time.monotonic() - started)


async def record(
    script: Transcript,
    start: StartServer | None = None,
    settle: float = 0.3,
    timeout: float = 10.0,
    times: bool = False,
) -> Transcript:
    """Run a script (a transcript whose "out" lines are ignored) and return the transcript of what happened.

    Each "in" line is sent on its own once the server has been quiet for `settle` seconds (at most `timeout`).
    Placeholders in the script are taken literally: `$session1` is the first session the server created (in the
    normalised order), `$req1` the first request the server sent, and so on. Raises if the run breaks a wire check.
    """
    client = await (start or RawClient.start)(*script.args)
    driver = _Driver(client)
    pauses: list[tuple[int, float]] = []
    pause = 0.0
    try:
        for line in script.lines:
            if line.dir == "out":
                continue
            await driver.wait_quiet(settle, timeout)
            if line.sleep is not None:
                await asyncio.sleep(line.sleep)
                pause += line.sleep
                continue
            if pause:  # written where replay can honour it: just before the next input
                pauses.append((len(client.log), pause))
                pause = 0.0
            if line.eof:
                break
            bound = driver.canonical().namer.values
            await driver.write([line], _resolver(_identity_namer(bound), bound))
        await driver.wait_quiet(settle, timeout)
        if pause:
            pauses.append((len(client.log), pause))
        problems = await driver.close()
    finally:
        client.kill()
    problems += check_wire(client)
    if problems:
        raise AssertionError(f"{script.name}: the recorded run has problems:\n" + "\n".join(problems))
    return transcript_from_log(
        client.log, script.args, driver.eof_index, times=times, comment=script.comment, pauses=pauses
    )


def _identity_namer(bound: dict[str, Any]) -> Namer:
    """A namer under which every placeholder names itself (a script's placeholders are already normalised)."""
    namer = Namer()
    for name in bound:
        kind = name[1:].rstrip("0123456789")
        namer.names[(kind, _key(name))] = name
    return namer


# --- command line ---


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tests.transcripts", description="Record and replay acp-server wire transcripts."
    )
    commands = parser.add_subparsers(dest="command", required=True)
    rec = commands.add_parser("record", help="run a script of in lines and write the transcript of the run")
    rec.add_argument("out", type=Path, help="transcript to write (JSONL)")
    rec.add_argument("script", type=Path, help="script: a transcript file whose out lines are ignored")
    rec.add_argument("--settle", type=float, default=0.3, help="quiet seconds before each in line (default 0.3)")
    rec.add_argument("--times", action="store_true", help='keep each line\'s "t" (seconds since the first line)')
    play = commands.add_parser("replay", help="replay transcripts; print each result and the diff of a mismatch")
    play.add_argument("files", type=Path, nargs="+")
    options = parser.parse_args(argv)
    if options.command == "record":
        script = load_transcript(options.script)
        recorded = asyncio.run(record(script, settle=options.settle, times=options.times))
        options.out.write_bytes(dump_transcript(recorded))
        print(f"wrote {options.out}: {len(recorded.lines)} lines")
        return 0
    failed = 0
    for path in options.files:
        result = asyncio.run(replay(load_transcript(path)))
        print(result.report())
        failed += not result.ok
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
