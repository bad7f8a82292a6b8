"""What `serve` is told (REMOTE.md decisions 1, 3, 6, 8): where to listen, who may connect, TLS, and the limits.

Each setting comes from its flag, else its `ACP_SERVER_*` variable (not empty), else the config file's `[serve]`
table, else its default, as every other setting does (settings/command_line.py). `add_arguments` adds the flags to
the server's parser (`load(extend=...)`), `remote_settings` merges the three sources into a frozen `RemoteSettings`,
and `check` refuses what must not start (no TLS off loopback). Self-contained: the `serve` subcommand will call
these once the one Agent serves many connections (issue 22).

The timing knobs that are not flags (keepalive, queue, drain) are fields with defaults, so tests can keep them short.
"""

from __future__ import annotations

import argparse
import ipaddress
import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from acp_server.errors import ServeSetupError

__all__ = [
    "DEFAULT_LISTEN",
    "MAX_MESSAGE_BYTES",
    "REPLICA_NAME",
    "RemoteSettings",
    "add_arguments",
    "check",
    "is_loopback",
    "parse_listen",
    "remote_settings",
]

T = TypeVar("T")

DEFAULT_LISTEN = "127.0.0.1:8765"
DEFAULT_MAX_CONNECTIONS = 256
DEFAULT_INITIALIZE_TIMEOUT = 10.0
# Sessions one connection may have open at once (decision 8): new, load, resume and fork beyond it are refused.
DEFAULT_MAX_SESSIONS_PER_CONNECTION = 64
# The HTTP profile's dead peer (decision 6): a connection with no request and no open stream for this long has ended.
DEFAULT_HTTP_IDLE_TIMEOUT = 600.0
# An SSE stream's comment, so proxies in between keep a quiet stream open (decision 8).
DEFAULT_SSE_KEEPALIVE = 15.0
MAX_SESSION_STREAMS = 64
# The TypeScript SDK's client drops a message over 32 MiB, and a prompt comes back inside a replayed update: what
# comes in stays this far below, leaving room for the envelope it is replayed in (decision 8).
MESSAGE_ENVELOPE_BYTES = 64 * 1024
MAX_MESSAGE_BYTES = 32 * 1024 * 1024 - MESSAGE_ENVELOPE_BYTES
# What a connection may hold for a reader that is not keeping up before it counts as a dead peer (the SDK's own
# server holds `maxBufferedBytes`, 64 MiB, too); beyond one message, so a whole maximal message always fits.
DEFAULT_MAX_QUEUED_BYTES = 64 * 1024 * 1024
# A replica's name goes into a cookie value, a log line and a metric label: kept to characters all three take as is.
REPLICA_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,62}")
_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off")


@dataclass(frozen=True, slots=True)
class RemoteSettings:
    """Everything the transport room needs, frozen. `state_dir` is where the default token file lives."""

    state_dir: Path
    host: str = "127.0.0.1"
    port: int = 8765
    token_file: Path | None = None
    allow_origins: tuple[str, ...] = ()
    allow_hosts: tuple[str, ...] = ()  # beyond the listen address, localhost, 127.0.0.1 and [::1]
    certfile: str | None = None
    keyfile: str | None = None
    insecure_no_tls: bool = False
    max_connections: int = DEFAULT_MAX_CONNECTIONS
    # Whether several principals may be served where commands cannot be kept out of each other's files (decision 5).
    principals_trust_each_other: bool = False
    # Hosts a client's HTTP or SSE MCP server may name although they are (or resolve to) loopback, private or
    # link-local addresses (decision 5): names or addresses, compared case-insensitively.
    allow_mcp_hosts: tuple[str, ...] = ()
    # This replica's name behind a load balancer (`--replica-name`): the affinity cookie `acp_replica=NAME` it sets
    # on every /acp answer, and its log lines and metrics. None: no cookie (a single server needs none).
    replica_name: str | None = None
    initialize_timeout: float = DEFAULT_INITIALIZE_TIMEOUT
    max_sessions_per_connection: int = DEFAULT_MAX_SESSIONS_PER_CONNECTION
    max_message_bytes: int = MAX_MESSAGE_BYTES
    max_queued_bytes: int = DEFAULT_MAX_QUEUED_BYTES
    # A dead peer (decision 6): TCP keepalive probes after `keepalive_idle` s of silence, every
    # `keepalive_interval` s, `keepalive_count` of them; and TCP_USER_TIMEOUT, how long sent data (or a zero window)
    # may stay unacknowledged before the kernel ends the connection. Set on the listening socket, which the accepted
    # ones inherit (Linux).
    keepalive_idle: int = 30
    keepalive_interval: int = 10
    keepalive_count: int = 3
    user_timeout: float = 60.0
    # WebSocket pings every this many seconds (None: none), so proxies in between (nginx closes a silent one after
    # 60 s) keep a quiet connection open, as the SSE profile's comments will. hypercorn sends them; it does not look
    # at the pongs: dead peers are the kernel's to find (keepalive above).
    ping_interval: float | None = 15.0
    # The HTTP profile (http.py): idle expiry, SSE keep-alive comments, session streams read at once per connection.
    http_idle_timeout: float = DEFAULT_HTTP_IDLE_TIMEOUT
    sse_keepalive: float = DEFAULT_SSE_KEEPALIVE
    max_session_streams: int = MAX_SESSION_STREAMS
    # Once a handler has returned (a drain ended its input), how long what it wrote last may take to reach the socket
    # before the close.
    flush_timeout: float = 1.0
    # How long a drain waits for the connections' handlers to end (their turns cancelled as at stdin EOF, bounded by
    # the cleanup deadline) before they are cancelled.
    drain_timeout: float = 5.0

    @property
    def tls(self) -> bool:
        return self.certfile is not None and self.keyfile is not None


def is_loopback(host: str) -> bool:
    """Whether a listen host is reachable from this machine only. A name other than `localhost` is not trusted to
    be: it may resolve anywhere."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def parse_listen(text: str) -> tuple[str, int]:
    """`HOST:PORT` (`[::1]:8765` for IPv6) into its parts; ValueError in words."""
    host, colon, port_text = text.rpartition(":")
    if not colon or not host:
        raise ValueError(f"expected HOST:PORT, found {text!r}")
    if host.startswith("["):
        if not host.endswith("]"):
            raise ValueError(f"an IPv6 address goes in brackets, [::1]:8765; found {text!r}")
        host = host[1:-1]
    elif ":" in host:
        raise ValueError(f"an IPv6 address goes in brackets, [::1]:8765; found {text!r}")
    try:
        port = int(port_text)
    except ValueError:
        raise ValueError(f"not a port number: {port_text!r}") from None
    if not 0 <= port <= 65535:
        raise ValueError(f"a port is 0 to 65535, found {port}")
    return host, port


def check(settings: RemoteSettings) -> None:
    """Refuse what must not start: ServeSetupError saying what to change."""
    if (settings.certfile is None) != (settings.keyfile is None):
        raise ServeSetupError("TLS needs both --certfile and --keyfile")
    if not settings.tls and not settings.insecure_no_tls and not is_loopback(settings.host):
        raise ServeSetupError(
            f"refusing to serve on {settings.host} without TLS: tokens would cross the network in clear. Give "
            "--certfile and --keyfile, or --insecure-no-tls when a TLS-terminating proxy in front does it"
        )
    if settings.replica_name is not None and REPLICA_NAME.fullmatch(settings.replica_name) is None:
        raise ServeSetupError(
            f"--replica-name: {settings.replica_name!r} is not a name: 1 to 63 letters, digits, `.`, `_` or `-`, "
            "starting with a letter or digit (it goes into a cookie, the log and the metrics)"
        )
    if settings.max_connections < 1:
        raise ServeSetupError("--max-connections must be at least 1")
    if settings.max_sessions_per_connection < 1:
        raise ServeSetupError("--max-sessions-per-connection must be at least 1")
    timings = (("--http-idle-timeout", settings.http_idle_timeout), ("--sse-keepalive", settings.sse_keepalive))
    for name, value in timings:
        if not value > 0:
            raise ServeSetupError(f"{name} must be above zero")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The `serve` flags, on top of every setting the stdio server takes. Defaults are None, so a flag not given can
    be told from one that was (precedence)."""
    add = parser.add_argument
    add(
        "--listen",
        metavar="HOST:PORT",
        help=f"where to listen (default {DEFAULT_LISTEN}; env ACP_SERVER_LISTEN; file: [serve] listen)",
    )
    add(
        "--token-file",
        metavar="FILE",
        help="`PRINCIPAL TOKEN [ROOT ...]` lines, mode 0600 (default: serve-token in "
        "the state directory, made once; env ACP_SERVER_TOKEN_FILE; file: [serve] token_file)",
    )
    add(
        "--allow-origin",
        action="append",
        metavar="ORIGIN",
        help="a browser Origin allowed to connect, e.g. "
        "https://app.example.com; repeat for more (env ACP_SERVER_ALLOW_ORIGIN, comma-separated; file: [serve] "
        "allow_origin = [...])",
    )
    add(
        "--allow-host",
        action="append",
        metavar="HOST",
        help="a Host header allowed besides the listen address, "
        "localhost, 127.0.0.1 and [::1]; repeat for more (env ACP_SERVER_ALLOW_HOST, comma-separated; file: [serve] "
        "allow_host = [...])",
    )
    add("--certfile", metavar="FILE", help="TLS certificate chain (env ACP_SERVER_CERTFILE; file: [serve] certfile)")
    add("--keyfile", metavar="FILE", help="TLS private key (env ACP_SERVER_KEYFILE; file: [serve] keyfile)")
    add(
        "--insecure-no-tls",
        action="store_true",
        default=None,
        help="serve without TLS off loopback, behind a "
        "TLS-terminating proxy (env ACP_SERVER_INSECURE_NO_TLS=1; file: [serve] insecure_no_tls = true)",
    )
    add(
        "--principals-trust-each-other",
        action="store_true",
        default=None,
        help="serve several principals even where their commands cannot be kept out of each other's files (--sandbox "
        "off, or no Landlock here) (env ACP_SERVER_PRINCIPALS_TRUST_EACH_OTHER=1; file: [serve] "
        "principals_trust_each_other = true)",
    )
    add(
        "--allow-mcp-host",
        action="append",
        metavar="HOST",
        help="a host a client's HTTP or SSE MCP server may name although it is (or resolves to) a loopback, private "
        "or link-local address; repeat for more (env ACP_SERVER_ALLOW_MCP_HOST, comma-separated; file: [serve] "
        "allow_mcp_host = [...])",
    )
    add(
        "--replica-name",
        metavar="NAME",
        help="this replica's name behind a load balancer: every /acp answer sets the cookie acp_replica=NAME, so a "
        "balancer that cannot insert its own routes by it (docs/deploy.md); also in each log line and in /metrics "
        "(default: none, no cookie; env ACP_SERVER_REPLICA_NAME; file: [serve] replica_name)",
    )
    add(
        "--max-connections",
        type=int,
        metavar="N",
        help=f"connections at once; beyond, 503 (default "
        f"{DEFAULT_MAX_CONNECTIONS}; env ACP_SERVER_MAX_CONNECTIONS; file: [serve] max_connections)",
    )
    add(
        "--max-sessions-per-connection",
        type=int,
        metavar="N",
        help="sessions one connection may have open at once; beyond, session/new, load, resume and fork are refused "
        f"(default {DEFAULT_MAX_SESSIONS_PER_CONNECTION}; env ACP_SERVER_MAX_SESSIONS_PER_CONNECTION; file: [serve] "
        "max_sessions_per_connection)",
    )
    add(
        "--initialize-timeout",
        type=float,
        metavar="SECONDS",
        help="how long a new connection has to send "
        f"`initialize` (default {DEFAULT_INITIALIZE_TIMEOUT:g}; env ACP_SERVER_INITIALIZE_TIMEOUT; file: [serve] "
        "initialize_timeout)",
    )
    add(
        "--http-idle-timeout",
        type=float,
        metavar="SECONDS",
        help="a Streamable HTTP connection with no "
        f"request and no open stream for this long is ended (default {DEFAULT_HTTP_IDLE_TIMEOUT:g}; env "
        "ACP_SERVER_HTTP_IDLE_TIMEOUT; file: [serve] http_idle_timeout)",
    )
    add(
        "--sse-keepalive",
        type=float,
        metavar="SECONDS",
        help="how often a quiet SSE stream gets a comment, so "
        f"proxies keep it open (default {DEFAULT_SSE_KEEPALIVE:g}; env ACP_SERVER_SSE_KEEPALIVE; file: [serve] "
        "sse_keepalive)",
    )


class _Pick:
    """flag > environment > the file's `[serve]` table > default, one setting at a time."""

    def __init__(self, env: Mapping[str, str], table: Mapping[str, Any]) -> None:
        self.env = env
        self.table = table

    def __call__(self, flag: T | None, variable: str, key: str, default: T, parse: Callable[[Any], T]) -> T:
        try:
            if flag is not None:
                return flag
            if self.env.get(variable, "").strip():
                return parse(self.env[variable].strip())
            if key in self.table:
                return parse(self.table[key])
        except (ValueError, TypeError) as exc:
            raise ServeSetupError(f"{variable} / [serve] {key}: {exc}") from None
        return default


def _switch(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in _TRUE or text in _FALSE:
        return text in _TRUE
    raise ValueError(f"expected true or false, found {value!r}")


def _names(value: Any) -> tuple[str, ...]:
    items = value.split(",") if isinstance(value, str) else value
    if not isinstance(items, list | tuple) or not all(isinstance(item, str) for item in items):
        raise ValueError("expected a list of names")
    return tuple(item.strip() for item in items if item.strip())


def _positive(kind: Callable[[Any], T]) -> Callable[[Any], T]:
    def parse(value: Any) -> T:
        if isinstance(value, bool):
            raise ValueError(f"expected a number, found {value!r}")
        number = kind(value)
        if not (isinstance(number, int | float) and number > 0 and not math.isinf(number)):
            raise ValueError(f"expected a number above zero, found {value!r}")
        return number

    return parse


def remote_settings(
    args: argparse.Namespace, env: Mapping[str, str], file_raw: Mapping[str, Any], state_dir: Path
) -> RemoteSettings:
    """The merged settings (checked with `check`); ServeSetupError for a value that cannot be used."""
    table = file_raw.get("serve", {})
    pick = _Pick(env, table if isinstance(table, dict) else {})
    listen = pick(getattr(args, "listen", None), "ACP_SERVER_LISTEN", "listen", DEFAULT_LISTEN, str)
    try:
        host, port = parse_listen(listen)
    except ValueError as exc:
        raise ServeSetupError(f"--listen: {exc}") from None
    token_file = pick(getattr(args, "token_file", None), "ACP_SERVER_TOKEN_FILE", "token_file", None, str)
    origins: Sequence[str] | None = getattr(args, "allow_origin", None)
    hosts: Sequence[str] | None = getattr(args, "allow_host", None)
    mcp_hosts: Sequence[str] | None = getattr(args, "allow_mcp_host", None)
    settings = RemoteSettings(
        state_dir=state_dir,
        host=host,
        port=port,
        token_file=Path(token_file).expanduser() if token_file else None,
        allow_origins=pick(tuple(origins) if origins else None, "ACP_SERVER_ALLOW_ORIGIN", "allow_origin", (), _names),
        allow_hosts=pick(tuple(hosts) if hosts else None, "ACP_SERVER_ALLOW_HOST", "allow_host", (), _names),
        certfile=pick(getattr(args, "certfile", None), "ACP_SERVER_CERTFILE", "certfile", None, str),
        keyfile=pick(getattr(args, "keyfile", None), "ACP_SERVER_KEYFILE", "keyfile", None, str),
        insecure_no_tls=pick(
            getattr(args, "insecure_no_tls", None), "ACP_SERVER_INSECURE_NO_TLS", "insecure_no_tls", False, _switch
        ),
        principals_trust_each_other=pick(
            getattr(args, "principals_trust_each_other", None),
            "ACP_SERVER_PRINCIPALS_TRUST_EACH_OTHER",
            "principals_trust_each_other",
            False,
            _switch,
        ),
        allow_mcp_hosts=tuple(
            name.lower()
            for name in pick(
                tuple(mcp_hosts) if mcp_hosts else None, "ACP_SERVER_ALLOW_MCP_HOST", "allow_mcp_host", (), _names
            )
        ),
        replica_name=pick(getattr(args, "replica_name", None), "ACP_SERVER_REPLICA_NAME", "replica_name", None, str),
        max_connections=pick(
            getattr(args, "max_connections", None),
            "ACP_SERVER_MAX_CONNECTIONS",
            "max_connections",
            DEFAULT_MAX_CONNECTIONS,
            _positive(int),
        ),
        max_sessions_per_connection=pick(
            getattr(args, "max_sessions_per_connection", None),
            "ACP_SERVER_MAX_SESSIONS_PER_CONNECTION",
            "max_sessions_per_connection",
            DEFAULT_MAX_SESSIONS_PER_CONNECTION,
            _positive(int),
        ),
        initialize_timeout=pick(
            getattr(args, "initialize_timeout", None),
            "ACP_SERVER_INITIALIZE_TIMEOUT",
            "initialize_timeout",
            DEFAULT_INITIALIZE_TIMEOUT,
            _positive(float),
        ),
        http_idle_timeout=pick(
            getattr(args, "http_idle_timeout", None),
            "ACP_SERVER_HTTP_IDLE_TIMEOUT",
            "http_idle_timeout",
            DEFAULT_HTTP_IDLE_TIMEOUT,
            _positive(float),
        ),
        sse_keepalive=pick(
            getattr(args, "sse_keepalive", None),
            "ACP_SERVER_SSE_KEEPALIVE",
            "sse_keepalive",
            DEFAULT_SSE_KEEPALIVE,
            _positive(float),
        ),
    )
    check(settings)
    return settings
