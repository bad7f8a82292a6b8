"""The transcript file format: JSONL lines read into `Line`s, checked with a line number on every mistake.

One format serves the hand-written scenarios in `fixtures/transcripts/`, the recordings `--record` writes and the
replay command, so a recording can become a fixture by moving the file. The format is described in
`fixtures/transcripts/README.md`; in short:

    {"dir": "meta", "args": [...], "timeout": 5}       optional first line: the server's arguments, replay's wait
    {"t": 0.01, "dir": "in", "msg": {...}}             the client wrote this message
    {"dir": "in", "raw": "{not json"}                  the client wrote this text (a malformed line)
    {"dir": "in", "raw": "", "truncated": 70000000}    the client wrote a line too long to keep: its size only
    {"dir": "in", "eof": true}                         the client closed stdin
    {"dir": "out", "msg": {...}}                       the agent wrote this message ("raw" when not JSON)
    {"dir": "meta", "sleep": 0.3}                      a pause before the next input
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from acp_server.errors import TranscriptError

__all__ = [
    "DEFAULT_TIMEOUT",
    "Line",
    "Transcript",
    "dump_transcript",
    "line_from_bytes",
    "load_transcript",
    "parse_transcript",
]

DEFAULT_TIMEOUT = 5.0  # how long replay waits for the output expected before an "in" line


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
    truncated: int | None = None  # an oversized input line: its size in bytes (its text was never kept)

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {}
        if self.t is not None:
            data["t"] = self.t
        data["dir"] = self.dir
        if self.comment is not None:
            data["comment"] = self.comment
        if self.eof:
            data["eof"] = True
        elif self.sleep is not None:
            data["sleep"] = self.sleep
        elif self.raw is not None:
            data["raw"] = self.raw
            if self.truncated is not None:
                data["truncated"] = self.truncated
        else:
            data["msg"] = self.msg
        return data

    def wire_bytes(self) -> bytes:
        """What a client writes for this input line (without the newline)."""
        if self.truncated is not None:
            return b"x" * self.truncated  # only its size was kept; any text that long gets the same answer
        if self.raw is not None:
            return self.raw.encode()
        return orjson.dumps(self.msg)


@dataclass
class Transcript:
    """A parsed transcript: the agent's arguments (from a first "meta" line, if any) and the lines, in order."""

    lines: list[Line]
    args: tuple[str, ...] | None = None
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
    "in": {"dir", "msg", "raw", "eof", "t", "comment", "truncated"},
    "out": {"dir", "msg", "raw", "t", "comment"},
    "meta": {"dir", "args", "timeout", "sleep", "comment"},
}


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


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
        if t is not None and not _is_number(t):
            raise TranscriptError(f"{where}: t must be a number of seconds")
        if seen_eof and direction == "in":
            raise TranscriptError(f"{where}: nothing can be sent after stdin was closed")
        if direction == "meta":
            _parse_meta(data, where, position, transcript)
            continue
        lines.append(_parse_wire_line(data, direction, where, t, comment))
        seen_eof = seen_eof or lines[-1].eof
    return transcript


def _parse_wire_line(data: dict[str, Any], direction: str, where: str, t: Any, comment: str | None) -> Line:
    payload = [key for key in ("msg", "raw", "eof") if key in data]
    if len(payload) != 1:
        allowed = "msg, raw or eof" if direction == "in" else "msg or raw"
        raise TranscriptError(f"{where}: needs exactly one of {allowed}")
    if "raw" in data and (not isinstance(data["raw"], str) or any(c in data["raw"] for c in "\r\n")):
        raise TranscriptError(f"{where}: raw must be a string holding one line")
    if "eof" in data and data["eof"] is not True:
        raise TranscriptError(f"{where}: eof must be true")
    truncated = data.get("truncated")
    if truncated is not None and ("raw" not in data or type(truncated) is not int or truncated < 0):
        raise TranscriptError(f"{where}: truncated is the byte size of a raw line")
    return Line(
        direction,
        msg=data.get("msg"),
        raw=data.get("raw"),
        eof="eof" in data,
        t=float(t) if t is not None else None,
        comment=comment,
        truncated=truncated,
    )


def _parse_meta(data: dict[str, Any], where: str, position: int, transcript: Transcript) -> None:
    if "args" in data or "timeout" in data:
        if position != 0:
            raise TranscriptError(f"{where}: args and timeout belong on the first line")
        if "args" in data:
            args = data["args"]
            if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
                raise TranscriptError(f"{where}: args must be a list of strings")
            transcript.args = tuple(args)
        timeout = data.get("timeout", DEFAULT_TIMEOUT)
        if not _is_number(timeout) or timeout <= 0:
            raise TranscriptError(f"{where}: timeout must be a positive number of seconds")
        transcript.timeout = float(timeout)
        transcript.comment = data.get("comment")
    if "sleep" in data:
        sleep = data["sleep"]
        if not _is_number(sleep) or sleep < 0:
            raise TranscriptError(f"{where}: sleep must be a non-negative number of seconds")
        if "args" in data or "timeout" in data:
            raise TranscriptError(f"{where}: sleep goes on a line of its own")
        transcript.lines.append(Line("meta", sleep=float(sleep), comment=data.get("comment")))


def load_transcript(path: str | Path) -> Transcript:
    path = Path(path)
    return parse_transcript(path.read_bytes(), name=path.name)


def dump_transcript(transcript: Transcript) -> bytes:
    """JSONL text for a transcript; a first "meta" line carries the arguments, timeout and comment when there are."""
    head: dict[str, Any] = {"dir": "meta"}
    if transcript.args is not None:
        head["args"] = list(transcript.args)
    if transcript.timeout != DEFAULT_TIMEOUT:
        head["timeout"] = transcript.timeout
    if transcript.comment is not None:
        head["comment"] = transcript.comment
    items = [head] if len(head) > 1 else []
    items += [line.to_json() for line in transcript.lines]
    return b"".join(orjson.dumps(item) + b"\n" for item in items)


def line_from_bytes(direction: str, data: bytes, t: float | None = None) -> Line:
    """A line seen on the wire. An input becomes "msg" only when writing the message back gives the same bytes
    (else "raw", so a replay writes exactly what was written); an output is "msg" whenever it is a JSON object."""
    data = data.rstrip(b"\r\n")
    try:
        message = orjson.loads(data)
    except orjson.JSONDecodeError:
        message = None
    if isinstance(message, dict) and (direction == "out" or orjson.dumps(message) == data):
        return Line(direction, msg=message, t=t)
    return Line(direction, raw=data.decode(errors="replace"), t=t)
