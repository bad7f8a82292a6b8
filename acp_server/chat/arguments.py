"""The chat client's command line: which agent to run, and whether this is one question or a conversation."""

from __future__ import annotations

import argparse
import shlex
import sys
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["ChatOptions", "parse_options"]


@dataclass(frozen=True, slots=True)
class ChatOptions:
    agent: tuple[str, ...]  # the agent's command line
    question: str | None  # one-shot: ask this, print the answer, exit
    # How long the agent may take to answer `initialize` and `session/new` before the chat gives up on it.
    startup_timeout: float = 30.0
    # --connect: a remote agent's WebSocket URL (then `agent` is unused), the token's file (None: ACP_SERVER_TOKEN),
    # the session's directory on the agent's machine, and how long to keep trying after the connection drops.
    connect: str | None = None
    token_file: str | None = None
    cwd: str | None = None
    reconnect_timeout: float = 60.0


# The server's flags the chat passes on to the built-in agent (flag, metavar, help). Checked by the agent itself, which
# refuses a bad value with exit status 2 and says why (the chat shows the end of its stderr).
SERVER_FLAGS: tuple[tuple[str, str, str], ...] = (
    ("--model", "SPEC", "the model: echo, scripted[:PATH], openai:MODEL, anthropic:MODEL"),
    ("--base-url", "URL", "the endpoint of the model's provider (no other provider's)"),
    ("--permission-mode", "MODE", "default, accept_edits, bypass or read_only"),
    ("--prompt-policy", "POLICY", "interrupt, queue, reject or steer"),
    ("--sandbox", "MODE", "workspace-write, read-only or off: how local commands are confined"),
    ("--max-turn-requests", "N", "model calls per turn"),
    ("--cleanup-deadline", "SECONDS", "how long a cancelled turn's cleanup may take"),
    ("--mcp-start-wait", "SECONDS", "how long a turn waits for a starting MCP server"),
    ("--state-dir", "DIR", "where sessions are stored"),
    ("--log-level", "LEVEL", "debug, info, warning or error"),
    ("--log-file", "PATH", "the agent's log file"),
    ("--protocol", "N", "the highest ACP version the agent serves: 2 (the default) or 1; the chat speaks either"),
)
SERVER_SWITCHES: tuple[tuple[str, str], ...] = (
    ("--no-store", "keep the session in memory only"),
    ("--no-sandbox-network", "sandboxed commands get no network"),
    ("--no-log-file", "no log file"),
)


def _dest(flag: str) -> str:
    return flag.lstrip("-").replace("-", "_")


def parse_options(argv: Sequence[str]) -> ChatOptions:
    parser = argparse.ArgumentParser(
        prog="acp-server chat",
        description="Talk to an ACP agent in the terminal. With a question, ask it once and exit; without one, "
        "chat (a line is a prompt; /quit or Ctrl-D leaves; Ctrl-C cancels a running turn, twice exits). "
        "With no question and stdin not a terminal, the prompt is read from stdin.",
    )
    parser.add_argument("question", nargs="*", help="ask this once, print the answer and exit")
    parser.add_argument(
        "--agent",
        metavar="CMD",
        help="the agent to run, as a shell-like command line (default: this acp-server)",
    )
    remote = parser.add_argument_group(
        "a remote agent", "talk to `acp-server serve` over a WebSocket instead of running an agent here"
    )
    remote.add_argument("--connect", metavar="URL", help="the server's URL, ws://HOST:PORT/acp or wss://...")
    remote.add_argument(
        "--token-file",
        metavar="FILE",
        help="a private file (mode 0600) holding the token alone, or its `PRINCIPAL TOKEN` line "
        "(default: the token in ACP_SERVER_TOKEN; never on the command line, where `ps` shows it)",
    )
    remote.add_argument(
        "--cwd", metavar="DIR", help="the session's directory on the server's machine (default: this directory)"
    )
    remote.add_argument(
        "--reconnect-timeout",
        type=float,
        default=60.0,
        metavar="SECONDS",
        help="after the connection drops, keep trying to reconnect for this long (default 60)",
    )
    server = parser.add_argument_group(
        "the built-in agent's flags", "passed on to `acp-server` as they are (`acp-server --help`); not with --agent"
    )
    for flag, metavar, what in SERVER_FLAGS:
        server.add_argument(flag, metavar=metavar, help=what)
    for flag, what in SERVER_SWITCHES:
        server.add_argument(flag, action="store_true", default=None, help=what)
    parser.add_argument(
        "--startup-timeout",
        type=float,
        default=30.0,
        metavar="SECONDS",
        help="give up on an agent that has not opened a session after this long (default 30)",
    )
    args = parser.parse_args(list(argv))
    forwarded: list[str] = []
    for flag, _, _ in SERVER_FLAGS:
        value = getattr(args, _dest(flag))
        if value is not None:
            forwarded += [flag, value]
    forwarded += [flag for flag, _ in SERVER_SWITCHES if getattr(args, _dest(flag))]
    if args.connect is not None and (args.agent is not None or forwarded):
        parser.error("--connect talks to a running server: --agent and the built-in agent's flags do not apply")
    if args.connect is None:
        for flag in ("token_file", "cwd"):
            if getattr(args, flag) is not None:
                parser.error(f"--{flag.replace('_', '-')} goes with --connect")
    if not args.reconnect_timeout >= 0:
        parser.error("--reconnect-timeout must be 0 seconds or more")
    if args.agent is not None and forwarded:
        parser.error(f"{forwarded[0]} is a flag of the built-in agent; with --agent, put the agent's flags in CMD")
    if args.agent is not None:
        try:
            agent = tuple(shlex.split(args.agent))
        except ValueError as exc:
            parser.error(f"--agent: {exc}")
        if not agent:
            parser.error("--agent needs a command")
    else:
        agent = (sys.executable, "-m", "acp_server", *forwarded)
    question = " ".join(args.question) if args.question else None
    if not args.startup_timeout > 0:
        parser.error("--startup-timeout must be more than 0 seconds")
    return ChatOptions(
        agent=agent,
        question=question,
        startup_timeout=args.startup_timeout,
        connect=args.connect,
        token_file=args.token_file,
        cwd=args.cwd,
        reconnect_timeout=args.reconnect_timeout,
    )
