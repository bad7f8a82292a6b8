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
    parser.add_argument("--model", metavar="SPEC", help="the model of the built-in agent (acp-server --model SPEC)")
    parser.add_argument(
        "--startup-timeout",
        type=float,
        default=30.0,
        metavar="SECONDS",
        help="give up on an agent that has not opened a session after this long (default 30)",
    )
    args = parser.parse_args(list(argv))
    if args.agent is not None and args.model is not None:
        parser.error("--model sets the built-in agent's model; with --agent, put the agent's flags in CMD")
    if args.agent is not None:
        try:
            agent = tuple(shlex.split(args.agent))
        except ValueError as exc:
            parser.error(f"--agent: {exc}")
        if not agent:
            parser.error("--agent needs a command")
    else:
        agent = (sys.executable, "-m", "acp_server", *(("--model", args.model) if args.model else ()))
    question = " ".join(args.question) if args.question else None
    if not args.startup_timeout > 0:
        parser.error("--startup-timeout must be more than 0 seconds")
    return ChatOptions(agent=agent, question=question, startup_timeout=args.startup_timeout)
