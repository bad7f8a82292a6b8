"""`acp-server replay FILE -- AGENT_CMD...`: play a transcript's client side against any ACP agent and diff.

A recording (`--record`) or a hand-written transcript becomes a check anyone can run against a build of this server
or against another agent: the agent's side is compared after normalising ids, timestamps, chunking and the
directories the client named (see `normalise`). The report goes to stderr, like everything a person reads here.
Exit status: 0 when the agent's side matches, 1 when it differs, 2 for a usage error, a transcript that does not
parse, or an agent that cannot be started.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from collections.abc import Sequence
from typing import IO

import anyio

from acp_server.errors import TranscriptError
from acp_server.transcripts.format import load_transcript
from acp_server.transcripts.replay_peer import replay_command

__all__ = ["main"]

AGENT_STDERR_LINES = 20  # how much of the agent's stderr a failed replay shows
USAGE = "acp-server replay FILE [--timeout S] [--path OLD=NEW]... [--strict] -- AGENT_CMD [ARG...]"


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="acp-server replay",
        usage=USAGE,
        description="Replay a transcript's client side against an ACP agent and report how the agent's side "
        "differs, ids, timestamps, chunking and the client's directories normalised. Exit 0 on a match, 1 on a "
        "difference, 2 on a usage error or an agent that cannot start.",
    )
    parser.add_argument("file", help="the transcript (JSONL, as --record writes or fixtures/transcripts/ holds)")
    parser.add_argument(
        "--timeout",
        type=float,
        default=None,
        metavar="S",
        help="how long to wait for the agent's expected output before sending the next line anyway, and for its "
        "exit after stdin EOF (default: the transcript's, else 5)",
    )
    parser.add_argument(
        "--path",
        action="append",
        default=[],
        metavar="OLD=NEW",
        help="use directory NEW wherever the transcript's client named OLD (a recording made in another checkout)",
    )
    parser.add_argument(
        "--strict", action="store_true", help="stop sending at the first output that does not come as expected"
    )
    return parser


def main(argv: Sequence[str]) -> int:
    args = list(argv)
    split = args.index("--") if "--" in args else len(args)
    options_part, command = args[:split], args[split + 1 :]
    parser = _parser()
    try:
        options = parser.parse_args(options_part)
    except SystemExit as exc:  # argparse has written its message; --help exits 0
        return 0 if exc.code == 0 else 2
    if not command:
        sys.stderr.write(f"usage: {USAGE}\nacp-server replay: the agent command goes after --\n")
        return 2
    paths: dict[str, str] = {}
    for item in options.path:
        old, sep, new = item.partition("=")
        if not sep or not old.startswith("/") or not new:
            sys.stderr.write(f"acp-server replay: --path takes OLD=NEW with an absolute OLD, not {item!r}\n")
            return 2
        paths[old.rstrip("/") or "/"] = new.rstrip("/") or "/"
    # Imported once the arguments are known good, so a usage error answers at once.

    try:
        transcript = load_transcript(options.file)
    except (OSError, TranscriptError, UnicodeDecodeError) as exc:
        sys.stderr.write(f"acp-server replay: {exc}\n")
        return 2
    # The agent's own stderr is kept aside and shown only when something went wrong, so it cannot bury the report.
    with tempfile.TemporaryFile() as agent_stderr:
        try:
            outcome, status = anyio.run(
                lambda: replay_command(
                    transcript,
                    command,
                    timeout=options.timeout,
                    strict=options.strict,
                    paths=paths,
                    stderr=agent_stderr,
                ),
                backend="asyncio",
            )
        except OSError as exc:
            sys.stderr.write(f"acp-server replay: cannot start {command[0]!r}: {exc}\n")
            return 2
        started = any(line.startswith("←") for line in outcome.actual)
        if not outcome.ok or not started:
            sys.stderr.write(_tail(agent_stderr))
    if status not in (0, None) and not started:
        sys.stderr.write(f"acp-server replay: the agent exited with status {status} before writing anything\n")
        return 2
    sys.stderr.write(outcome.report() + "\n")
    return 0 if outcome.ok else 1


def _tail(file: IO[bytes], lines: int = AGENT_STDERR_LINES) -> str:
    file.seek(0)
    text = file.read().decode(errors="replace").splitlines()[-lines:]
    return "".join(f"agent stderr: {line}\n" for line in text)
