"""Command line: flags with environment fallbacks, logging to stderr, and the event loop.

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
        help="echo (offline, the default) or scripted[:PATH] (env ACP_SERVER_MODEL)",
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
        "--test-mode",
        action="store_true",
        default=_truthy(env.get("ACP_SERVER_TEST_MODE")),
        help="add the test tools and _scripted/probe notifications (never in production; env ACP_SERVER_TEST_MODE)",
    )
    parser.add_argument("--version", action="version", version=f"acp-server {__version__}")
    args = parser.parse_args(argv)
    if args.log_level not in LOG_LEVELS:
        parser.error(f"ACP_SERVER_LOG must be one of {', '.join(LOG_LEVELS)}")
    return Config(
        model=args.model,
        cleanup_deadline=float(args.cleanup_deadline),
        log_level=args.log_level,
        test_mode=args.test_mode,
    )


def main(argv: Sequence[str] | None = None) -> None:
    config = parse_config(argv)
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
