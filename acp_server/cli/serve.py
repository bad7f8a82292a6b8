"""`acp-server serve`: one agent serving remote editors over WebSocket and Streamable HTTP (shared/design/REMOTE.md,
decision 1).

The agent is built once, as for stdio (cli/server.py `build_agent`), with every setting the stdio server takes; the
transport room (acp_server/remote/) accepts and authenticates connections and hands each to `_Connections.serve`,
which connects it to the agent (`connect`, with the principal its token stands for) and serves it exactly as stdio's
one connection is served (`Connection.serve`), inside the agent's task group (`Agent.running`). A connection's end
is an EOF for it alone: its turns are cancelled and its sessions detached, still in the store (decision 6).

Only this subcommand imports acp_server.remote and hypercorn (an extra: `pip install 'acp-server[remote]'`); plain
`acp-server` never loads this module (cli/__init__.py imports a subcommand only when it is asked for).

`--record DIR` (the stdio server's `--record FILE`, per connection): each connection's lines in and out go to
`DIR/<connection id>.jsonl` in the transcript format stdio writes (transcripts/record.py), so `acp-server replay`
replays it. The file is made new (never through a link, never over another), private (0600), in a directory made
private if `serve` makes it. Provider keys are removed as on stdio, and so are the server's tokens, should a client
ever write one into a message (they travel in headers, which a transcript never holds).
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from acp_server.agent.sessions.owners import Owner
from acp_server.errors import ModelSpecError, ServeSetupError
from acp_server.settings.command_line import load
from acp_server.settings.config import Config, SandboxMode
from acp_server.settings.files import secret_values

if TYPE_CHECKING:
    from acp_server.agent.agent import Agent
    from acp_server.cli.server import Served
    from acp_server.jsonrpc.transport import LineSink, LineSource
    from acp_server.remote.peer import Peer, Principal
    from acp_server.remote.settings import RemoteSettings
    from acp_server.transcripts.record import Recorder

__all__ = ["INSTALL_HINT", "admit_principals", "confine_commands", "main", "sandbox_missing", "workspace_root"]

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


def owner_of(principal: Principal, default_root: str, mcp_hosts: tuple[str, ...] = ()) -> Owner:
    """The agent's view of a token's principal: its roots as real paths (its token line's, else the workspace
    root), and the hosts its MCP servers may name although not global (`--allow-mcp-host`)."""
    roots = tuple(os.path.realpath(os.path.expanduser(root)) for root in principal.roots) or (default_root,)
    return Owner(principal.name, roots, mcp_hosts)


def record_dir(path: str) -> Path:
    """`--record DIR`, made (0700) if it does not exist; ServeSetupError when it cannot be a directory."""
    directory = Path(path).expanduser()
    try:
        directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    except FileExistsError:
        pass  # something that is no directory: said below
    except OSError as exc:
        raise ServeSetupError(f"--record: cannot use {path} as the directory of transcripts: {exc.strerror}") from None
    if not directory.is_dir():
        raise ServeSetupError(f"--record: {path} is not a directory (serve writes one transcript per connection)")
    return directory


class _Transcripts:
    """`--record DIR`: one private transcript per connection, secrets and the server's tokens removed."""

    def __init__(self, directory: Path, token_file: Callable[[], tuple[Path, bool]]) -> None:
        self.directory = directory
        self._token_file = token_file
        self._tokens: tuple[str, ...] | None = None

    def open(self, connection_id: str) -> Recorder | None:
        """The connection's recorder; None (and an error logged) when its file cannot be made: a transcript is
        never worth refusing the connection for."""
        from acp_server.remote.tokens import token_values  # noqa: PLC0415 (loaded already: serve runs)
        from acp_server.transcripts.record import BUFFER_BYTES, Recorder  # noqa: PLC0415 (only with --record)
        from acp_server.transcripts.secrets import Redactor, provider_secrets  # noqa: PLC0415 (only with --record)

        path = self.directory / f"{connection_id}.jsonl"
        try:
            if self._tokens is None:  # read once, at the first connection: the default token file exists by then
                token_file, follow = self._token_file()
                self._tokens = token_values(token_file, follow=follow)
            flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
            file = os.fdopen(os.open(path, flags, 0o600), "wb", buffering=BUFFER_BYTES)
        except (OSError, ServeSetupError) as exc:
            log.error("cannot record connection %s to %s: %s", connection_id, path, exc)
            return None
        return Recorder(file, Redactor([*provider_secrets(os.environ), *self._tokens]), env=os.environ)


class _Connections:
    """Serves each remote connection on the one agent (the transport room's `ConnectionHandler`)."""

    def __init__(
        self,
        agent: Agent,
        served: Served,
        default_root: str,
        *,
        max_sessions: int,
        mcp_hosts: tuple[str, ...] = (),
        transcripts: _Transcripts | None = None,
    ) -> None:
        self.agent = agent
        self.served = served
        self.default_root = default_root
        self.max_sessions = max_sessions  # per connection (decision 8)
        self.mcp_hosts = mcp_hosts  # `--allow-mcp-host`
        self.transcripts = transcripts

    async def serve(self, peer: Peer, lines: LineSource, sink: LineSink) -> None:
        from acp_server.cli.server import connect  # noqa: PLC0415 (loaded already: `_run` built the agent with it)

        rpc, dispatcher = connect(
            self.agent,
            self.served,
            principal=owner_of(peer.principal, self.default_root, self.mcp_hosts),
            max_sessions=self.max_sessions,
        )
        from acp_server.settings.logfile import LOG_CONNECTION  # noqa: PLC0415 (loaded already: logging is set up)

        # This task's lines, and those of every task it starts (the connection's turns), say whose they are.
        LOG_CONNECTION.set((peer.connection_id, peer.principal.name))
        connections_log.info("connection %s opened", peer.describe())
        recorder = self.transcripts.open(peer.connection_id) if self.transcripts is not None else None
        try:
            if recorder is None:
                await rpc.serve(dispatcher, lines, sink)
            else:
                await rpc.serve(dispatcher, recorder.source(lines), recorder.sink(sink))
        finally:
            if recorder is not None:
                recorder.close()
            handshake = dispatcher.connection.handshake
            version = f"ACP v{handshake.version}" if handshake.client_capabilities is not None else "not initialized"
            connections_log.info("connection %s ended (%s)", peer.describe(), version)


async def _run(config: Config, settings: RemoteSettings, default_root: str, records: Path | None) -> None:
    from acp_server.cli.server import STOP_SIGNALS, build_agent  # noqa: PLC0415 (start-up: after the flags are read)
    from acp_server.protocol.shared_methods import warm_up_after_initialize  # noqa: PLC0415 (start-up: after the flags are read)
    from acp_server.remote.metrics import ReplicaMetrics  # noqa: PLC0415 (start-up: after the flags are read)
    from acp_server.remote.server import serve_remote  # noqa: PLC0415 (start-up: after the flags are read)
    from acp_server.remote.tokens import DEFAULT_TOKEN_FILE  # noqa: PLC0415 (start-up: after the flags are read)

    agent, served = build_agent(config, owns_process=True)
    # What `GET /metrics` shows; the agent's turns tell it theirs (set before any session builds the turn services).
    metrics = ReplicaMetrics(
        settings.replica_name,
        sessions_open=lambda: len(agent.sessions),
        turns_running=lambda: agent.runs.running_turns,
    )
    agent.meter = metrics
    transcripts = None
    if records is not None:

        def token_file() -> tuple[Path, bool]:  # the default file is the server's own: never followed through a link
            if settings.token_file is not None:
                return settings.token_file, True
            return settings.state_dir / DEFAULT_TOKEN_FILE, False

        transcripts = _Transcripts(records, token_file)
    connections = _Connections(
        agent,
        served,
        default_root,
        max_sessions=settings.max_sessions_per_connection,
        mcp_hosts=settings.allow_mcp_hosts,
        transcripts=transcripts,
    )
    async with agent.running():
        # A server warms up once, at its start, not with its first editor: the deferred side (what a session and a
        # turn need, about a second of imports here) loads a step at a time while connections are already served,
        # so a replica that takes over a session from a dead one answers its `session/load` at once (bench.cluster's
        # failover figures: 0.9 s of the load was these imports on a replica that had served no session yet).
        agent.spawn(warm_up_after_initialize, agent)
        await serve_remote(
            settings,
            connections.serve,
            stop_signals=STOP_SIGNALS,
            admit=lambda tokens: admit_principals(len(tokens.principals), config, settings),
            metrics=metrics,
        )


# Files under /etc only root may read: hidden from a root server's commands (`confine_commands`).
MACHINE_SECRETS = ("/etc/shadow", "/etc/shadow-", "/etc/gshadow", "/etc/gshadow-", "/etc/ssl/private", "/etc/sudoers")


def confine_commands(config: Config, settings: RemoteSettings, config_path: Path, workspace: str) -> Config:
    """`config` with commands kept to reading the session's directories, the temp directory and the system's, and
    the server's own files hidden even there (decision 5): the state directory (session store, `serve-token`; made
    now, so it can be told apart from anything a command makes later), the token file, the config file, the log
    file (its directory, unless that is one commands may use), the TLS key and certificate, the transcripts."""
    from acp_server.runtime.sandbox import temp_dirs  # noqa: PLC0415 (start-up: after the flags are read)
    from acp_server.settings.logfile import log_file_path  # noqa: PLC0415 (start-up: after the flags are read)

    try:
        settings.state_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    except OSError as exc:
        raise ServeSetupError(f"cannot make the state directory {settings.state_dir}: {exc.strerror or exc}") from None
    hidden = [str(settings.state_dir), str(config_path)]
    if settings.token_file is not None:
        hidden.append(str(settings.token_file))
    hidden += [path for path in (settings.certfile, settings.keyfile) if path]
    if config.record is not None:  # `--record DIR`, made already: every connection's conversation
        hidden.append(config.record)
    log_file = log_file_path(config)
    if log_file is not None:
        folder = os.path.realpath(log_file.parent)
        if folder in {os.sep, workspace, *temp_dirs()}:
            # Its own file could be hidden, but rotation makes a new one there (another inode, which the launcher
            # would take for a moved file and refuse every command): said, not hidden.
            log.warning(
                "the log file %s lies in %s, where commands may read it: give --log-file a directory of its own",
                log_file,
                folder,
            )
        else:
            # The folder, with the rotated files (`.1`, `.2`) beside it; made now (the log makes it at its first
            # record), so it is there to hide from the first command.
            with contextlib.suppress(OSError):  # the log says so itself when it cannot write there
                os.makedirs(folder, mode=0o700, exist_ok=True)
            hidden.append(folder)
    if os.geteuid() == 0:
        # A root server's commands keep CAP_DAC_OVERRIDE (runtime/sandbox_exec.py): the machine's own secrets under
        # /etc, which other users' commands could never read, are hidden from them too.
        hidden += [*MACHINE_SECRETS, *(str(key) for key in Path("/etc/ssh").glob("ssh_host_*_key"))]
    return replace(
        config,
        sandbox_confine_reads=True,
        sandbox_hidden=tuple(os.path.realpath(os.path.expanduser(path)) for path in hidden),
    )


def sandbox_missing(config: Config) -> str | None:
    """Why commands here cannot be kept out of the server's and each other's files (decision 5), or None."""
    if config.sandbox is SandboxMode.OFF:
        return "the sandbox is off (--sandbox off)"
    from acp_server.runtime.sandbox import landlock_support  # noqa: PLC0415 (start-up: only when serve starts)

    support = landlock_support()
    return None if support.abi >= 1 else f"no sandbox can be had here: {support.reason}"


def admit_principals(count: int, config: Config, settings: RemoteSettings) -> None:
    """Refuse to serve several principals whose commands could read each other's roots, the token file and the
    session store, unless the operator says they trust each other: ServeSetupError saying why and what to do."""
    if count < 2 or settings.principals_trust_each_other:
        return
    missing = sandbox_missing(config)
    if missing is not None:
        raise ServeSetupError(
            f"refusing to serve {count} principals: {missing}, so each one's commands could read the others' "
            "files, the token file and the session store. Run serve where Landlock is (Linux 5.13 or later) with "
            "the sandbox on, or one serve per principal, or give --principals-trust-each-other if they may"
        )


def _state_dir(config: Config) -> Path:
    if config.state_dir:
        return Path(config.state_dir).expanduser()
    from acp_server.store.sqlite_file import default_state_dir  # noqa: PLC0415 (only without --state-dir)

    return default_state_dir()


def main(argv: Sequence[str]) -> int:
    try:
        import hypercorn  # noqa: PLC0415, F401 (only `serve` needs it: an extra)
        import prometheus_client  # noqa: PLC0415, F401 (`/metrics`: the same extra)
    except ImportError:
        sys.stderr.write(INSTALL_HINT)
        return 2
    loaded = load(argv, prog="acp-server serve", extend=_add_flags)
    config = loaded.config
    from acp_server.settings.logfile import SERVE_CONTEXT, setup_logging  # noqa: PLC0415 (as the stdio server's start-up)

    setup_logging(config, secrets=secret_values(loaded.file.raw, os.environ), serving=True)
    if connections_log.getEffectiveLevel() > logging.INFO:
        connections_log.setLevel(logging.INFO)
    for problem in loaded.file.problems:
        log.warning("config file: %s", problem)
    import anyio  # noqa: PLC0415 (start-up: after the flags are read)

    from acp_server.remote.settings import remote_settings  # noqa: PLC0415 (start-up: after the flags are read)

    try:
        settings = remote_settings(loaded.args, os.environ, loaded.file.raw, _state_dir(config))
        SERVE_CONTEXT.replica = settings.replica_name  # every line from here on names the replica
        default_root = workspace_root(loaded.args.workspace_root, os.environ, loaded.file.raw, os.getcwd())
        records = record_dir(config.record) if config.record is not None else None
        config = confine_commands(config, settings, loaded.file.path, default_root)
        anyio.run(_run, config, settings, default_root, records, backend="asyncio")
    except (ServeSetupError, ModelSpecError) as exc:
        log.error("%s", exc)
        return 2
    except BaseExceptionGroup as group:
        # A refusal raised once the agent's task group runs (`admit_principals`, when the token file is read)
        # arrives wrapped: the same words and exit status as one raised before.
        refused, rest = group.split(ServeSetupError)
        if refused is None or rest is not None:
            raise
        leaf: BaseException = refused
        while isinstance(leaf, BaseExceptionGroup):
            leaf = leaf.exceptions[0]
        log.error("%s", leaf)
        return 2
    except KeyboardInterrupt:
        return 130
    return 0
