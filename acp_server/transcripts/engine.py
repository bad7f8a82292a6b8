"""Replaying a transcript's client side against a running agent, and comparing what the agent says back.

The engine is shared by `acp-server replay`, the pytest helper and the project's own transcript tests; what it
drives is a `Peer` (a spawned agent, `replay_peer.ReplayPeer`, the tests' schema-checking raw client), so the pacing and
the comparison are the same code everywhere.

Pacing: the "in" lines are sent in order; consecutive "in" lines with nothing between them go in one write. Before
each write (and before a pause or closing stdin) the engine waits until the agent's output since the previous write
equals, normalised, what the transcript shows there, for at most `timeout` seconds. Then, `strict`, it stops
sending and closes stdin, so the diff shows where the conversations parted (the project's tests); otherwise it goes
on (a replay against another agent, which should show every difference, not only the first).

Ids: a placeholder or a recorded id in an "in" line becomes the id the agent generated in its place this time. An
answer to one of the agent's requests (`fs/*`, `terminal/*`, `session/request_permission`, ...) is matched by
method and order: the answer to the transcript's second `fs/read_text_file` request answers the agent's second
`fs/read_text_file` request, whatever id it chose; it is not sent when the agent never asked.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import anyio
import orjson

from acp_server.errors import PeerGoneError
from acp_server.transcripts.format import Line, Transcript
from acp_server.transcripts.ids import IdMap, Namer, key, map_ids, render
from acp_server.transcripts.normalise import Canonical, Comparison, canonicalise, path_replacer

__all__ = ["Driver", "Outcome", "Peer", "play", "resolver"]

POLL_SECONDS = 0.005


class Peer(Protocol):
    """A running agent as the engine sees it."""

    def events(self) -> list[Line]:
        """Every line so far in wire order ("in" as written, "out" as read, an "in" EOF line once stdin is closed)."""
        ...

    @property
    def finished(self) -> bool:
        """Whether the agent's stdout has ended, so no more output can come."""
        ...

    async def write(self, data: bytes) -> None:
        """Write whole lines to the agent's stdin; raises PeerGoneError when it no longer reads."""
        ...

    async def close(self) -> list[str]:
        """Close stdin and wait for the agent to exit; returns what went wrong (a hang, an exit status)."""
        ...


@dataclass
class Outcome:
    """The result of a replay: both normalised conversations, problems found on the way, and notes for a person."""

    name: str
    expected: list[str]
    actual: list[str]
    problems: list[str]
    seconds: float
    notes: list[str] = field(default_factory=list)

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
            parts += [f"note: {note}" for note in self.notes]
            parts.append(self.diff())
        return "\n".join(parts)


class Driver:
    """Sends lines to a peer and watches what it says."""

    def __init__(self, peer: Peer) -> None:
        self.peer = peer

    def canonical(self) -> Canonical:
        return canonicalise(self.peer.events())

    async def wait_for_segment(self, index: int, want: list[str], timeout: float) -> bool:
        """Until the output after the `index`-th input (0: before any) is `want`, normalised; at most `timeout`."""
        deadline = time.monotonic() + timeout
        seen = -1
        while True:
            count = len(self.peer.events())
            if count != seen:
                seen = count
                segments = self.canonical().segments
                if index < len(segments) and segments[index] == want:
                    return True
            if (self.peer.finished and len(self.peer.events()) == seen) or time.monotonic() >= deadline:
                return False
            await anyio.sleep(POLL_SECONDS)

    async def wait_quiet(self, settle: float, timeout: float) -> None:
        """Until no line has arrived for `settle` seconds (at most `timeout`)."""
        deadline = time.monotonic() + timeout
        seen, since = len(self.peer.events()), time.monotonic()
        while time.monotonic() < deadline and time.monotonic() - since < settle:
            await anyio.sleep(0.01)
            if len(self.peer.events()) != seen:
                seen, since = len(self.peer.events()), time.monotonic()

    async def write(self, lines: Sequence[Line], replace: IdMap) -> None:
        """One write holding all `lines`: raw lines byte for byte, messages with their ids replaced."""
        await self.peer.write(b"".join(_wire(line.msg, line, replace) + b"\n" for line in lines))


def _wire(message: Any, line: Line, replace: IdMap) -> bytes:
    if isinstance(message, dict) and line.raw is None:
        return orjson.dumps(map_ids(message, "in", replace))
    return line.wire_bytes()


def resolver(expected: Namer, bound: Mapping[str, Any]) -> IdMap:
    """For an expected "in" line: an id the transcript's agent generated (a placeholder, or the old id in a
    recording) becomes the id that, normalised the same way, the agent generated this time; anything else, or an
    id not generated yet, is sent as written."""

    def resolve(kind: str, value: Any) -> Any:
        name = expected.known(kind, value)
        return bound.get(name, value) if name is not None else value

    return resolve


def _actions(lines: Sequence[Line]) -> list[list[int]]:
    """The replay's steps, as indices into `lines`: consecutive message/raw "in" lines (nothing between them) go
    out in one write; a pause and the EOF are steps of their own; "out" lines only mark where to wait."""
    actions: list[list[int]] = []
    previous: Line | None = None
    for index, line in enumerate(lines):
        sendable = line.dir == "in" and not line.eof
        if sendable and previous is not None and previous.dir == "in" and not previous.eof:
            actions[-1].append(index)
        elif line.dir != "out":
            actions.append([index])
        previous = line
    return actions


def _answer_targets(lines: Sequence[Line]) -> dict[int, tuple[str, int]]:
    """For each "in" line answering an agent's request: (the request's method, its ordinal among the transcript's
    requests of that method)."""
    requests: dict[bytes, tuple[str, int]] = {}
    counts: dict[str, int] = {}
    targets: dict[int, tuple[str, int]] = {}
    for index, line in enumerate(lines):
        message = line.msg if line.raw is None else None
        if not isinstance(message, dict) or message.get("id") is None:
            continue
        if line.dir == "out" and isinstance(message.get("method"), str):
            method = message["method"]
            counts[method] = counts.get(method, 0) + 1
            requests[key(message["id"])] = (method, counts[method])
        elif line.dir == "in" and "method" not in message and ("result" in message or "error" in message):
            target = requests.get(key(message["id"]))
            if target is not None:
                targets[index] = target
    return targets


def _agent_request_id(events: Sequence[Line], method: str, ordinal: int) -> tuple[bool, Any]:
    seen = 0
    for line in events:
        message = line.msg if line.dir == "out" and line.raw is None else None
        if isinstance(message, dict) and message.get("method") == method and message.get("id") is not None:
            seen += 1
            if seen == ordinal:
                return True, message["id"]
    return False, None


def _describe(line: Line) -> str:
    if line.eof:
        return "closing stdin"
    if line.sleep is not None:
        return f"sleeping {line.sleep} s"
    return "sending " + (line.raw if line.raw is not None else render(line.msg))[:160]


async def play(
    transcript: Transcript,
    peer: Peer,
    *,
    timeout: float | None = None,
    strict: bool = True,
    paths: Mapping[str, str] | None = None,
) -> Outcome:
    """Replay `transcript` against `peer` and compare (see the module docstring). `paths` maps directories of the
    recording to the ones to use now (in every "in" message); `timeout` defaults to the transcript's."""
    started = time.monotonic()
    timeout = transcript.timeout if timeout is None else timeout
    lines = [*transcript.lines, *([] if any(line.eof for line in transcript.lines) else [Line("in", eof=True)])]
    expected = canonicalise(transcript.events())
    targets = _answer_targets(lines)
    move = path_replacer(paths or {})
    driver = Driver(peer)
    problems: list[str] = []
    notes: list[str] = []
    position = 0  # the transcript's "in" events passed so far
    written = 0  # "in" events written so far (an answer to a request the agent never sent is not)
    closed = False
    for action in _actions(lines):
        head = lines[action[0]]
        want = expected.segments[position] if position < len(expected.segments) else []
        if not await driver.wait_for_segment(written, want, timeout):
            what = f"the output expected before {_describe(head)} (input #{position + 1})"
            if strict or peer.finished:
                problems.append(f"gave up after {timeout} s waiting for {what}; nothing more was sent")
                break
            notes.append(f"waited {timeout} s for {what}")
        if head.sleep is not None:
            await anyio.sleep(head.sleep)
            continue
        if head.eof:
            problems += await peer.close()
            closed = True
            position += 1
            written += 1
            continue
        resolve = resolver(expected.namer, driver.canonical().namer.values)
        data = b""
        position += len(action)
        for index in action:
            line = lines[index]
            message = move(line.msg)
            target = targets.get(index)
            if target is not None:
                found, request_id = _agent_request_id(peer.events(), *target)
                if not found:
                    notes.append(
                        f"the agent sent no {target[0]} request #{target[1]}; its recorded answer was not sent"
                    )
                    continue
                answer = map_ids(message, "in", resolve)
                answer["id"] = request_id  # the agent's own id, whatever the transcript's agent chose
                data += orjson.dumps(answer) + b"\n"
                continue
            data += _wire(message, line, resolve) + b"\n"
        if not data:
            continue
        try:
            await peer.write(data)
        except PeerGoneError:
            problems.append(f"the agent stopped reading its stdin before {_describe(head)}")
            break
        written += data.count(b"\n")
    if not closed:
        problems += await peer.close()
    actual = driver.canonical().lines()
    return Outcome(transcript.name, expected.lines(), actual, problems, time.monotonic() - started, notes)
