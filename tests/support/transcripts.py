"""The project's transcript tests: replay `fixtures/transcripts/` through the schema-checking `RawClient`, and
record new transcripts from scripts.

Why this exists: the cancellation scenarios of docs/interrupts.md are easiest to review, and hardest to get subtly
wrong, as the literal conversation on the wire. Loading, normalising, pacing and diffing are the package's
(`acp_server.transcripts`, shared with `acp-server replay` and `assert_replays`); what is added here is what only a
test has: every server line is validated against the ACP schema and the wire checks (C1-C4, C6, exit within
`T_EXIT` of EOF) run on every replay, which stops at the first output that does not come (`strict`). And a
recorder that plays a script of "in" lines and writes the transcript with generated ids replaced by placeholders.

The file format and the record/replay workflow are described in `fixtures/transcripts/README.md`.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from acp_server.errors import PeerGoneError
from acp_server.transcripts.engine import Driver, Outcome, play, resolver
from acp_server.transcripts.format import Line, Transcript, dump_transcript, line_from_bytes, load_transcript
from acp_server.transcripts.ids import Namer, key, map_ids
from acp_server.transcripts.normalise import canonicalise
from tests.support.harness import (
    DEFAULT_ARGS,
    T_EXIT,
    Entry,
    RawClient,
    check_wire,
    isolated_env,
    scaled,
    server_command,
)

__all__ = [
    "TRANSCRIPT_DIR",
    "RawPeer",
    "ReplayResult",
    "StartServer",
    "events_from_log",
    "main",
    "record",
    "replay",
    "run_replay_command",
    "server_args",
    "transcript_from_log",
]

TRANSCRIPT_DIR = Path(__file__).resolve().parents[2] / "fixtures" / "transcripts"

StartServer = Callable[..., Awaitable[RawClient]]


def server_args(transcript: Transcript) -> tuple[str, ...]:
    """The arguments a transcript's server runs with: its own, else the tests' scripted test-mode server."""
    return DEFAULT_ARGS if transcript.args is None else transcript.args


def run_replay_command(*args: str, timeout: float = scaled(60)) -> subprocess.CompletedProcess[str]:
    """`acp-server replay ARGS...` as a user runs it, with an isolated state directory and config."""
    return subprocess.run(
        [*server_command("replay"), *args],
        capture_output=True,
        text=True,
        env={**os.environ, **isolated_env()},
        timeout=timeout,
        check=False,
    )


# --- a RawClient as the engine's peer ---


def events_from_log(log: Sequence[Entry], eof_index: int | None = None) -> list[Line]:
    """A RawClient log as transcript lines; `eof_index` is `len(log)` at the moment stdin was closed."""
    events = [line_from_bytes(entry.dir, entry.raw) for entry in log]
    if eof_index is not None:
        events.insert(eof_index, Line("in", eof=True))
    return events


class RawPeer:
    """A RawClient seen as an `engine.Peer`; its log is converted once per entry, however often it is read."""

    def __init__(self, client: RawClient) -> None:
        self.client = client
        self.eof_index: int | None = None
        self._lines: list[Line] = []  # the log's entries, converted

    def events(self) -> list[Line]:
        log = self.client.log
        self._lines += [line_from_bytes(entry.dir, entry.raw) for entry in log[len(self._lines) :]]
        if self.eof_index is None:
            return self._lines
        return [*self._lines[: self.eof_index], Line("in", eof=True), *self._lines[self.eof_index :]]

    @property
    def finished(self) -> bool:
        return self.client.at_eof

    async def write(self, data: bytes) -> None:
        try:
            await self.client.write_raw(data)
        except (BrokenPipeError, ConnectionResetError) as exc:
            raise PeerGoneError(str(exc)) from None

    async def close(self) -> list[str]:
        if self.eof_index is not None:
            return []
        self.eof_index = len(self.client.log)
        try:
            code, took = await self.client.close()
        except AssertionError as exc:
            return [str(exc)]
        problems = [] if code == 0 else [f"exit status {code} after stdin EOF"]
        if took > T_EXIT:
            problems.append(f"exit took {took:.2f} s > {T_EXIT} s")
        return problems


# --- replay and record ---


@dataclass
class ReplayResult(Outcome):
    """An outcome, plus the client whose log holds the whole conversation."""

    client: RawClient = field(kw_only=True)


async def replay(
    transcript: Transcript, start: StartServer | None = None, timeout: float | None = None
) -> ReplayResult:
    """Run a transcript against a fresh server and compare, strictly (see `acp_server.transcripts.engine`), with
    every wire check applied. `start` is `RawClient.start` or the `start_server` fixture (which checks the wire
    again at teardown)."""
    client = await (start or RawClient.start)(*server_args(transcript))
    try:
        # A transcript's own wait is a bound like any other: scaled for a loaded machine.
        wait = scaled(transcript.timeout) if timeout is None else timeout
        outcome = await play(transcript, RawPeer(client), timeout=wait, strict=True)
    finally:
        client.kill()  # only if it is still running: an exception above, or a hung exit
    problems = outcome.problems + check_wire(client)
    return ReplayResult(**{**vars(outcome), "problems": problems}, client=client)


async def record(
    script: Transcript,
    start: StartServer | None = None,
    settle: float = 0.3,
    timeout: float = scaled(10.0),
    times: bool = False,
) -> Transcript:
    """Run a script (a transcript whose "out" lines are ignored) and return the transcript of what happened.

    Each "in" line is sent on its own once the server has been quiet for `settle` seconds (at most `timeout`).
    Placeholders in the script are taken literally: `$session1` is the first session the server created (in the
    normalised order), `$req1` the first request the server sent, and so on. Raises if the run breaks a wire check.
    """
    args = server_args(script)
    client = await (start or RawClient.start)(*args)
    peer = RawPeer(client)
    driver = Driver(peer)
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
            bound = await _bound_for(line, driver, timeout)
            await driver.write([line], resolver(_identity_namer(bound), bound))
        await driver.wait_quiet(settle, timeout)
        if pause:
            pauses.append((len(client.log), pause))
        problems = await peer.close()
    finally:
        client.kill()
    problems += check_wire(client)
    if problems:
        raise AssertionError(f"{script.name}: the recorded run has problems:\n" + "\n".join(problems))
    return transcript_from_log(client.log, args, peer.eof_index, times=times, comment=script.comment, pauses=pauses)


async def _bound_for(line: Line, driver: Driver, timeout: float) -> dict[str, Any]:
    """The ids generated so far, once every placeholder `line` names is among them (at most `timeout`): on a slow
    machine the quiet window can end before the request a script line answers has been sent."""
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        bound = driver.canonical().namer.values
        missing: list[str] = []

        def note(kind: str, value: Any, bound: dict[str, Any] = bound, missing: list[str] = missing) -> Any:
            if isinstance(value, str) and value.startswith("$") and value not in bound:
                missing.append(value)
            return value

        map_ids(line.msg, "in", note)
        if not missing or asyncio.get_running_loop().time() >= deadline:
            return bound
        await asyncio.sleep(0.01)


def _identity_namer(bound: dict[str, Any]) -> Namer:
    """A namer under which every placeholder names itself (a script's placeholders are already normalised)."""
    namer = Namer()
    for name in bound:
        kind = name[1:].rstrip("0123456789")
        namer.names[(kind, key(name))] = name
    return namer


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
        event = line_from_bytes(entry.dir, entry.raw)
        stamp = round(entry.t - start, 3) if times else None
        if event.raw is None:
            lines.append(Line(event.dir, msg=map_ids(event.msg, event.dir, rename), t=stamp))
        else:
            lines.append(Line(event.dir, raw=event.raw, t=stamp))
    return Transcript(lines, args=tuple(args), comment=comment)


# --- command line ---


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tests.support.transcripts", description="Record and replay acp-server wire transcripts."
    )
    commands = parser.add_subparsers(dest="command", required=True)
    rec = commands.add_parser("record", help="run a script of in lines and write the transcript of the run")
    rec.add_argument("out", type=Path, help="transcript to write (JSONL)")
    rec.add_argument("script", type=Path, help="script: a transcript file whose out lines are ignored")
    rec.add_argument("--settle", type=float, default=0.3, help="quiet seconds before each in line (default 0.3)")
    rec.add_argument("--times", action="store_true", help='keep each line\'s "t" (seconds since the first line)')
    play_command = commands.add_parser(
        "replay", help="replay transcripts; print each result and the diff of a mismatch"
    )
    play_command.add_argument("files", type=Path, nargs="+")
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
