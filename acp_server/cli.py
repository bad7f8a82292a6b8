"""Command line: flags with environment fallbacks, logging to stderr, and the event loop.

`acp-server [FLAGS]` serves ACP over stdio (what editors run); `acp-server SUBCOMMAND ...` runs one of the tools in
`SUBCOMMANDS`, each in a module of its own, imported only when asked for, so serving never pays for them.
stdout belongs to the protocol; everything a person should read goes to stderr.
"""

from __future__ import annotations

import argparse
import logging
import math
import os
import sys
from collections.abc import Sequence

from acp_server import __version__
from acp_server.config import DEFAULT_CLEANUP_DEADLINE, Config

__all__ = ["main", "parse_config"]

LOG_LEVELS = ("debug", "info", "warning", "error")
# Kept here rather than imported from editor.py, so `--help` stays instant; a test checks the two agree.
PERMISSION_MODE_IDS = ("default", "accept_edits", "bypass", "read_only")
PROMPT_POLICY_IDS = ("interrupt", "queue", "reject")


def _non_negative_seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if value < 0 or math.isnan(value):
        raise argparse.ArgumentTypeError(f"must be zero or more seconds: {text!r}")
    return value


def _truthy(text: str | None) -> bool:
    return (text or "").strip().lower() in ("1", "true", "yes", "on")


def parse_config(argv: Sequence[str] | None = None) -> Config:
    env = os.environ
    parser = argparse.ArgumentParser(
        prog="acp-server",
        description="An Agent Client Protocol agent. Editors start it and speak JSON-RPC over stdin/stdout.",
    )
    parser.add_argument(
        "--model",
        default=env.get("ACP_SERVER_MODEL", "echo"),
        help="echo (offline, the default), scripted[:PATH], openai:MODEL or anthropic:MODEL (env ACP_SERVER_MODEL)",
    )
    parser.add_argument(
        "--cleanup-deadline",
        type=_non_negative_seconds,
        default=env.get("ACP_SERVER_CLEANUP_DEADLINE", str(DEFAULT_CLEANUP_DEADLINE)),
        metavar="SECONDS",
        help="after a cancel, how long cleanup may take before work is abandoned "
        "(default 2; env ACP_SERVER_CLEANUP_DEADLINE)",
    )
    parser.add_argument(
        "--log-level",
        choices=LOG_LEVELS,
        default=env.get("ACP_SERVER_LOG", "warning").lower(),
        help="stderr log level (default warning; env ACP_SERVER_LOG)",
    )
    parser.add_argument(
        "--base-url",
        default=None,
        metavar="URL",
        help="an OpenAI-compatible endpoint, e.g. http://localhost:11434/v1 for Ollama (env OPENAI_BASE_URL)",
    )
    parser.add_argument(
        "--permission-mode",
        choices=PERMISSION_MODE_IDS,
        default=env.get("ACP_SERVER_PERMISSION_MODE", "default"),
        help="the mode new sessions start in (default: ask before edits and commands; env ACP_SERVER_PERMISSION_MODE)",
    )
    parser.add_argument(
        "--prompt-policy",
        choices=PROMPT_POLICY_IDS,
        default=env.get("ACP_SERVER_PROMPT_POLICY", "interrupt"),
        help="a prompt sent while a turn runs: interrupt it (default), queue behind it, or reject "
        "(env ACP_SERVER_PROMPT_POLICY)",
    )
    parser.add_argument(
        "--max-turn-requests",
        type=int,
        default=int(env.get("ACP_SERVER_MAX_TURN_REQUESTS", "50")),
        metavar="N",
        help="model calls allowed in one turn before it stops with max_turn_requests (default 50)",
    )
    parser.add_argument(
        "--state-dir",
        default=env.get("ACP_SERVER_STATE_DIR") or None,
        metavar="DIR",
        help="where sessions are stored (default: your state directory; env ACP_SERVER_STATE_DIR)",
    )
    parser.add_argument(
        "--no-store",
        action="store_true",
        default=_truthy(env.get("ACP_SERVER_NO_STORE")),
        help="keep sessions in memory only: nothing is written, nothing can be loaded later (env ACP_SERVER_NO_STORE)",
    )
    parser.add_argument(
        "--record",
        default=env.get("ACP_SERVER_RECORD") or None,
        metavar="FILE",
        help="write every line in and out to FILE as a transcript, secrets removed (env ACP_SERVER_RECORD)",
    )
    parser.add_argument(
        "--test-mode",
        action="store_true",
        default=_truthy(env.get("ACP_SERVER_TEST_MODE")),
        help="add the test tools and _scripted/probe notifications (never in production; env ACP_SERVER_TEST_MODE)",
    )
    parser.add_argument("--version", action="version", version=f"acp-server {__version__}")
    args = parser.parse_args(argv)
    if args.log_level not in LOG_LEVELS:
        parser.error(f"ACP_SERVER_LOG must be one of {', '.join(LOG_LEVELS)}")
    if args.permission_mode not in PERMISSION_MODE_IDS:
        parser.error(f"ACP_SERVER_PERMISSION_MODE must be one of {', '.join(PERMISSION_MODE_IDS)}")
    if args.prompt_policy not in PROMPT_POLICY_IDS:
        parser.error(f"ACP_SERVER_PROMPT_POLICY must be one of {', '.join(PROMPT_POLICY_IDS)}")
    if args.max_turn_requests < 1:
        parser.error("--max-turn-requests must be at least 1")
    return Config(
        model=args.model,
        cleanup_deadline=float(args.cleanup_deadline),
        log_level=args.log_level,
        test_mode=args.test_mode,
        permission_mode=args.permission_mode,
        prompt_policy=args.prompt_policy,
        max_turn_requests=args.max_turn_requests,
        base_url=args.base_url,
        state_dir=args.state_dir,
        store=not args.no_store,
        record=args.record,
    )


# Subcommand -> the module whose `main(argv) -> int` runs it.
SUBCOMMANDS: dict[str, str] = {}


def main(argv: Sequence[str] | None = None) -> None:
    args = list(sys.argv[1:] if argv is None else argv)
    if args and args[0] in SUBCOMMANDS:
        import importlib

        sys.exit(importlib.import_module(SUBCOMMANDS[args[0]]).main(args[1:]))
    config = parse_config(args)
    logging.basicConfig(
        stream=sys.stderr,
        level=config.log_level.upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    # Imported here so `--help` and `--version` stay instant.
    import anyio

    from acp_server.runtime.providers import UnknownModelError
    from acp_server.runtime.providers.scripted import ScriptError
    from acp_server.server import serve_stdio

    try:
        anyio.run(serve_stdio, config, backend="asyncio")
    except (UnknownModelError, ScriptError) as exc:
        sys.stderr.write(f"acp-server: {exc}\n")
        sys.exit(2)
    except KeyboardInterrupt:
        sys.exit(130)
