"""`acp-server serve`: one agent serving remote editors over WebSocket and Streamable HTTP (shared/design/REMOTE.md,
decision 1).

The agent is built once, as for stdio (cli/server.py `build_agent`), with every setting the stdio server takes; the
transport room (acp_server/remote/) accepts and authenticates connections and hands each to `_Connections.serve`,
which connects it to the agent (`connect`, with the principal its token stands for) and serves it exactly as stdio's
one connection is served (`Connection.serve`), inside the agent's task group (`Agent.running`). A connection's end
is an EOF for it alone: its turns are cancelled and its sessions detached, still in the store (decision 6).

Only this subcommand imports acp_server.remote and hypercorn (an extra: `pip install 'acp-server[remote]'`); plain
`acp-server` never loads this module (cli/__init__.py imports a subcommand only when it is asked for).
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from acp_server.agent.sessions.owners import Owner
from acp_server.errors import ModelSpecError, ServeSetupError
from acp_server.settings.command_line import load
from acp_server.settings.files import secret_values

if TYPE_CHECKING:
    from acp_server.agent.agent import Agent
    from acp_server.cli.server import Served
    from acp_server.jsonrpc.transport import LineSink, LineSource
    from acp_server.remote.peer import Peer, Principal
    from acp_server.remote.settings import RemoteSettings
    from acp_server.settings.config import Config

__all__ = ["INSTALL_HINT", "main", "workspace_root"]

log = logging.getLogger(__name__)
# The one line per connection's start and end (decision 1), shown at the default log level (warning): a server's
# operator wants to see who connected without turning on every other module's info lines.
connections_log = logging.getLogger("acp_server.serve.connections")

INSTALL_HINT = "acp-server serve needs the remote extra: pip install 'acp-server[remote]'\n"


def _add_flags(parser: argparse.ArgumentParser) -> None:
    from acp_server.remote.settings import add_arguments  # noqa: PLC0415 (only once hypercorn is known to be there)

    add_arguments(parser)
    parser.add_argument(
        "--workspace-root",
        metavar="DIR",
        help="the directory a principal whose token line names no roots may use (default: the directory serve "
        "started in, unless that is / or your home; env ACP_SERVER_WORKSPACE_ROOT; file: [serve] workspace_root)",
    )


def workspace_root(flag: str | None, env: Mapping[str, str], file_raw: Mapping[str, Any], start: str) -> str:
    """The real path of the default root (decision 5): flag > environment > `[serve] workspace_root` > `start` (the
    directory serve started in), which may be neither `/` nor the home directory: too much to hand a token by
    default. ServeSetupError in words."""
    table = file_raw.get("serve", {})
    given = flag or env.get("ACP_SERVER_WORKSPACE_ROOT", "").strip() or None
    if given is None and isinstance(table, dict) and isinstance(table.get("workspace_root"), str):
        given = table["workspace_root"]
    if given is None:
        real = os.path.realpath(start)
        if real == os.sep or real == os.path.realpath(Path.home()):
            raise ServeSetupError(
                f"refusing {real} as the workspace root a token may use: start serve in a project directory, or give "
                "--workspace-root DIR"
            )
        return real
    real = os.path.realpath(os.path.expanduser(given))
    if not os.path.isdir(real):
        raise ServeSetupError(f"--workspace-root: not a directory: {given}")
    return real


def owner_of(principal: Principal, default_root: str) -> Owner:
    """The agent's view of a token's principal: its roots as real paths (its token line's, else the workspace
    root)."""
    roots = tuple(os.path.realpath(os.path.expanduser(root)) for root in principal.roots) or (default_root,)
    return Owner(principal.name, roots)


class _Connections:
    """Serves each remote connection on the one agent (the transport room's `ConnectionHandler`)."""

    def __init__(self, agent: Agent, served: Served, default_root: str) -> None:
        self.agent = agent
        self.served = served
        self.default_root = default_root

    async def serve(self, peer: Peer, lines: LineSource, sink: LineSink) -> None:
        from acp_server.cli.server import connect  # noqa: PLC0415 (loaded already: `_run` built the agent with it)

        rpc, dispatcher = connect(self.agent, self.served, principal=owner_of(peer.principal, self.default_root))
        connections_log.info("connection %s opened", peer.describe())
        try:
            await rpc.serve(dispatcher, lines, sink)
        finally:
            handshake = dispatcher.connection.handshake
            version = f"ACP v{handshake.version}" if handshake.client_capabilities is not None else "not initialized"
            connections_log.info("connection %s ended (%s)", peer.describe(), version)


async def _run(config: Config, settings: RemoteSettings, default_root: str) -> None:
    from acp_server.cli.server import STOP_SIGNALS, build_agent  # noqa: PLC0415 (start-up: after the flags are read)
    from acp_server.remote.server import serve_remote  # noqa: PLC0415 (start-up: after the flags are read)

    agent, served = build_agent(config, owns_process=True)
    async with agent.running():
        await serve_remote(settings, _Connections(agent, served, default_root).serve, stop_signals=STOP_SIGNALS)


def _state_dir(config: Config) -> Path:
    if config.state_dir:
        return Path(config.state_dir).expanduser()
    from acp_server.store.sqlite_file import default_state_dir  # noqa: PLC0415 (only without --state-dir)

    return default_state_dir()


def main(argv: Sequence[str]) -> int:
    try:
        import hypercorn  # noqa: PLC0415, F401 (only `serve` needs it: an extra)
    except ImportError:
        sys.stderr.write(INSTALL_HINT)
        return 2
    loaded = load(argv, prog="acp-server serve", extend=_add_flags)
    config = loaded.config
    from acp_server.settings.logfile import setup_logging  # noqa: PLC0415 (as the stdio server's start-up)

    setup_logging(config, secrets=secret_values(loaded.file.raw, os.environ))
    if connections_log.getEffectiveLevel() > logging.INFO:
        connections_log.setLevel(logging.INFO)
    for problem in loaded.file.problems:
        log.warning("config file: %s", problem)
    import anyio  # noqa: PLC0415 (start-up: after the flags are read)

    from acp_server.remote.settings import remote_settings  # noqa: PLC0415 (start-up: after the flags are read)

    try:
        settings = remote_settings(loaded.args, os.environ, loaded.file.raw, _state_dir(config))
        default_root = workspace_root(loaded.args.workspace_root, os.environ, loaded.file.raw, os.getcwd())
        anyio.run(_run, config, settings, default_root, backend="asyncio")
    except (ServeSetupError, ModelSpecError) as exc:
        log.error("%s", exc)
        return 2
    except KeyboardInterrupt:
        return 130
    return 0
