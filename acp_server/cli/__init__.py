"""Command line: `acp-server [FLAGS]` serves ACP over stdio (what editors run); `acp-server SUBCOMMAND ...` runs one of
the tools in `SUBCOMMANDS`, each in a module of its own, imported only when asked for, so serving never pays for them.

stdout belongs to the protocol; everything a person should read goes to stderr (and to the log file, since editors
hide or drop stderr). The flags, variables and config file are merged in `settings/command_line.py`.
"""

from __future__ import annotations

import importlib
import logging
import os
import sys
from collections.abc import Sequence

from acp_server.settings.command_line import load
from acp_server.settings.files import secret_values

__all__ = ["SUBCOMMANDS", "TERMINAL_NOTICE", "main"]

# Subcommand -> the module whose `main(argv) -> int` runs it.
SUBCOMMANDS: dict[str, str] = {
    "doctor": "acp_server.cli.doctor",
    "chat": "acp_server.chat.app",
    "replay": "acp_server.transcripts.replay_cli",
    "sessions": "acp_server.cli.stored_sessions",
    "serve": "acp_server.cli.serve",
}

# What a bare `acp-server` says when its stdin is a terminal.
TERMINAL_NOTICE = (
    "acp-server speaks the Agent Client Protocol (JSON-RPC, one message a line) on stdin/stdout: an editor starts it"
    " as its agent.\n"
    "To talk to it in this terminal, run `acp-server chat` instead (`acp-server chat --help`; `acp-server doctor`"
    " checks the set-up).\n"
    "Waiting for JSON-RPC on stdin; Ctrl-D or Ctrl-C leaves.\n"
)


def main(argv: Sequence[str] | None = None) -> None:
    args = list(sys.argv[1:] if argv is None else argv)
    if args and args[0] in SUBCOMMANDS:
        sys.exit(importlib.import_module(SUBCOMMANDS[args[0]]).main(args[1:]))
    loaded = load(args, subcommands=tuple(SUBCOMMANDS))
    config = loaded.config
    if sys.stdin is not None and sys.stdin.isatty():
        # A person ran it by hand: an editor never gives the agent a terminal. stdout stays the protocol's.
        sys.stderr.write(TERMINAL_NOTICE)
        sys.stderr.flush()
    from acp_server.settings.logfile import setup_logging  # noqa: PLC0415 (start-up: `--help`, `--version` and subcommands skip it)

    setup_logging(config, secrets=secret_values(loaded.file.raw, os.environ))
    log = logging.getLogger("acp_server")
    for problem in loaded.file.problems:
        log.warning("config file: %s", problem)
    # Imported here so `--help` and `--version` stay instant.
    import anyio  # noqa: PLC0415 (start-up: `--help`, `--version` and subcommands skip it)

    from acp_server.cli.server import serve_stdio  # noqa: PLC0415 (start-up: `--help`, `--version` and subcommands skip it)
    from acp_server.errors import ModelSpecError  # noqa: PLC0415 (start-up: `--help`, `--version` and subcommands skip it)

    try:
        anyio.run(serve_stdio, config, backend="asyncio")
    except ModelSpecError as exc:  # an unknown model, or a script that cannot be run
        log.error("%s", exc)  # to stderr and the log file: an editor shows neither, but the file stays
        sys.exit(2)
    except KeyboardInterrupt:
        sys.exit(130)
