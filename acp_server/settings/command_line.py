"""The server's flags, their environment fallbacks and the config file, merged into one frozen Config.

Every setting is decided the same way: the flag if given, else its `ACP_SERVER_*` variable if set and not empty,
else the config file's key (settings/checks.py), else the default. A bad flag or variable stops the server with exit
status 2 (someone typed it for this run and is watching); a bad file value is reported and ignored (the file is read
by every editor window, which would otherwise just fail to start an agent without saying why). `cli` serves with
the result; `doctor` reads the same flags through `load(extend=...)`.
"""

from __future__ import annotations

import argparse
import math
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from acp_server import __version__
from acp_server.settings.choices import PermissionMode, PromptPolicy, SandboxMode
from acp_server.settings.config import (
    DEFAULT_CLEANUP_DEADLINE,
    DEFAULT_KEEP_SESSIONS,
    DEFAULT_KEEP_SESSIONS_DAYS,
    DEFAULT_LEASE_TTL,
    DEFAULT_MAX_TURN_REQUESTS,
    DEFAULT_MCP_START_WAIT,
    LEASE_TTL_RANGE,
    LOG_LEVELS,
    PERMISSION_MODE_IDS,
    PROMPT_POLICY_IDS,
    PROTOCOL_IDS,
    SANDBOX_MODE_IDS,
    Config,
)
from acp_server.settings.file_settings import FileSettings, settings_without_file
from acp_server.settings.files import config_file, held_secrets, secret_variables
from acp_server.settings.store_url import STORE_URL_VARIABLES, check_store_url

__all__ = ["LOG_LEVELS", "PERMISSION_MODE_IDS", "PROMPT_POLICY_IDS", "Loaded", "load"]

T = TypeVar("T")

_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off")
# ACP_SERVER_LOG_FILE values that mean "no log file" rather than a path.
_NO_LOG_FILE = (*_FALSE, "none")


@dataclass(frozen=True, slots=True)
class Loaded:
    """The merged configuration, and the config file it read (with its problems, for logging and `doctor`)."""

    config: Config
    file: FileSettings
    args: argparse.Namespace  # the flags as parsed, including any a subcommand added (see `load`'s `extend`)


def _non_negative_seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if value < 0 or math.isnan(value):
        raise argparse.ArgumentTypeError(f"must be zero or more seconds: {text!r}")
    return value


def _lease_seconds(text: str) -> float:
    """`--lease-ttl`: a number of seconds within LEASE_TTL_RANGE (a renewal every third of it must be possible, and a
    dead replica's sessions must come back within the hour)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    low, high = LEASE_TTL_RANGE
    if not low <= value <= high:  # NaN too
        raise argparse.ArgumentTypeError(f"must be {low:g} to {high:g} seconds: {text!r}")
    return value


def _at_least_one(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1: {text!r}")
    return value


def _non_negative_days(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of days: {text!r}") from None
    if value < 0 or math.isnan(value):
        raise argparse.ArgumentTypeError(f"must be zero or more days: {text!r}")
    return value


def _zero_or_more(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be zero or more: {text!r}")
    return value


def _parser(
    prog: str, extend: Callable[[argparse.ArgumentParser], None] | None, subcommands: Sequence[str]
) -> argparse.ArgumentParser:
    # Defaults are None so a flag that was not given can be told from one that was: precedence needs to know.
    epilog = None
    if subcommands:
        names = ", ".join(sorted(subcommands))
        epilog = f"subcommands: {names} (`acp-server doctor` checks the set-up and says what is wrong)"
    parser = argparse.ArgumentParser(
        prog=prog,
        description="An Agent Client Protocol agent. Editors start it and speak JSON-RPC over stdin/stdout. Each "
        "setting comes from its flag, else its environment variable, else the config file (ACP_SERVER_CONFIG; "
        "by default config.toml in your config directory), else its default.",
        epilog=epilog,
    )
    add = parser.add_argument
    add(
        "--model",
        help="echo (offline, the default), scripted[:PATH], openai:MODEL or anthropic:MODEL "
        "(env ACP_SERVER_MODEL; file: model)",
    )
    add(
        "--base-url",
        metavar="URL",
        help="the endpoint of the default model's provider (--model's) and no other's, e.g. "
        "http://localhost:11434/v1 for Ollama (env ACP_SERVER_BASE_URL, then the provider's OPENAI_BASE_URL or "
        "ANTHROPIC_BASE_URL; file: [providers.NAME] base_url, then base_url)",
    )
    add(
        "--permission-mode",
        choices=PERMISSION_MODE_IDS,
        help="the mode new sessions start in (default: ask before edits and commands; "
        "env ACP_SERVER_PERMISSION_MODE; file: permission_mode)",
    )
    add(
        "--prompt-policy",
        choices=PROMPT_POLICY_IDS,
        help="a prompt sent while a turn runs: interrupt it (default), queue behind it, reject it, or steer it "
        "(env ACP_SERVER_PROMPT_POLICY; file: prompt_policy)",
    )
    add(
        "--protocol",
        choices=PROTOCOL_IDS,
        help="the highest ACP protocol version served: 2 (the v2 draft, the default; clients asking for 1 get v1) "
        "or 1 (v1 only, exactly as before v2) (env ACP_SERVER_PROTOCOL; file: protocol)",
    )
    add(
        "--sandbox",
        choices=SANDBOX_MODE_IDS,
        help="how local commands are confined: workspace-write (the default where the kernel can: writes only in "
        "the session's directories and the temp directory), read-only, or off (your full rights) "
        "(env ACP_SERVER_SANDBOX; file: sandbox)",
    )
    add(
        "--sandbox-network",
        action=argparse.BooleanOptionalAction,
        help="--no-sandbox-network also refuses sandboxed commands TCP connections and listening sockets "
        "(env ACP_SERVER_SANDBOX_NETWORK=0; file: sandbox_network = false)",
    )
    add(
        "--sandbox-writable",
        action="append",
        metavar="DIR",
        help="one more directory sandboxed commands may write in workspace-write, absolute or ~/..., e.g. "
        "~/.cache/pip; never one holding acp-server, landlockpy or the interpreter; repeat for more "
        f"(env ACP_SERVER_SANDBOX_WRITABLE, separated by {os.pathsep!r}; file: sandbox_writable = [...])",
    )
    add(
        "--allow-provider-host",
        action="append",
        metavar="HOST",
        help="a host a client may route model traffic to over plain http (ACP providers/set); any other baseUrl "
        "must be https (on stdio, http to a loopback address is allowed too); repeat for more "
        "(env ACP_SERVER_ALLOW_PROVIDER_HOST, comma-separated; file: allow_provider_host = [...])",
    )
    add(
        "--cleanup-deadline",
        type=_non_negative_seconds,
        metavar="SECONDS",
        help="after a cancel, how long cleanup may take before work is abandoned "
        "(default 2; env ACP_SERVER_CLEANUP_DEADLINE; file: cleanup_deadline)",
    )
    add(
        "--mcp-start-wait",
        type=_non_negative_seconds,
        metavar="SECONDS",
        help="how long a turn waits for an MCP server that is still starting, counted from its start, before going "
        "on without its tools (default 10; env ACP_SERVER_MCP_START_WAIT; file: mcp_start_wait)",
    )
    add(
        "--max-turn-requests",
        type=_at_least_one,
        metavar="N",
        help="model calls allowed in one turn before it stops with max_turn_requests "
        "(default 50; env ACP_SERVER_MAX_TURN_REQUESTS; file: max_turn_requests)",
    )
    add(
        "--state-dir",
        metavar="DIR",
        help="where sessions are stored (default: your state directory; env ACP_SERVER_STATE_DIR; file: state_dir)",
    )
    add(
        "--store-url",
        metavar="URL",
        help="keep sessions in PostgreSQL instead of the SQLite file in the state directory, for replicas that share "
        "them: postgresql://USER@HOST:PORT/DB (a password is better in PGPASSWORD or ~/.pgpass than here, where "
        "other users' `ps` sees it; env ACP_SERVER_STORE_URL; file: store_url)",
    )
    add(
        "--lease-ttl",
        type=_lease_seconds,
        metavar="SECONDS",
        help="with --store-url: how long a replica's lease on a session lasts unless renewed, the time before a dead "
        "replica's sessions load elsewhere (1 to 3600; default 15; env ACP_SERVER_LEASE_TTL; file: lease_ttl)",
    )
    add(
        "--store",
        action=argparse.BooleanOptionalAction,
        help="--no-store keeps sessions in memory only: nothing is written, nothing can be loaded later "
        "(env ACP_SERVER_NO_STORE=1; file: store = false)",
    )
    add(
        "--model-discovery",
        action=argparse.BooleanOptionalAction,
        help="offer the models the configured endpoints list besides the configured ones (default on; "
        "--no-model-discovery asks no endpoint; env ACP_SERVER_MODEL_DISCOVERY=0; file: model_discovery = false)",
    )
    add(
        "--keep-sessions-days",
        type=_non_negative_days,
        metavar="DAYS",
        help="remove stored sessions not updated for this many days, 0 for never (default "
        f"{DEFAULT_KEEP_SESSIONS_DAYS:g}; env ACP_SERVER_KEEP_SESSIONS_DAYS; file: keep_sessions_days)",
    )
    add(
        "--keep-sessions",
        type=_zero_or_more,
        metavar="N",
        help="keep at most this many stored sessions, the most recently updated, 0 for no limit (default "
        f"{DEFAULT_KEEP_SESSIONS}; env ACP_SERVER_KEEP_SESSIONS; file: keep_sessions)",
    )
    add(
        "--log-level",
        choices=LOG_LEVELS,
        help="for stderr and the log file (default warning; env ACP_SERVER_LOG; file: log_level)",
    )
    add(
        "--log-file",
        metavar="PATH",
        help="the rotating log file (default: acp-server.log in your log directory; env ACP_SERVER_LOG_FILE, "
        "'off' for none; file: log_file)",
    )
    add("--no-log-file", dest="log_file", action="store_const", const=False, help="log to stderr only")
    add(
        "--record",
        metavar="PATH",
        help="write every line in and out as a transcript, secrets removed: to the file PATH, or in serve to "
        "PATH/CONNECTION-ID.jsonl, one per connection (env ACP_SERVER_RECORD)",
    )
    add(
        "--test-mode",
        action="store_true",
        default=None,
        help="add the test tools and _scripted/probe notifications (never in production; env ACP_SERVER_TEST_MODE)",
    )
    add("--version", action="version", version=f"acp-server {__version__}")
    if extend is not None:
        extend(parser)
    return parser


class _Merge:
    """flag > environment > file > default, one setting at a time; a bad variable is a usage error."""

    def __init__(self, parser: argparse.ArgumentParser, env: Mapping[str, str], file: FileSettings) -> None:
        self.parser, self.env, self.file = parser, env, file

    def __call__(self, flag: T | None, variable: str, key: str | None, default: T, parse: Callable[[str], T]) -> T:
        if flag is not None:
            return flag
        text = self.env.get(variable, "").strip()
        if text:
            try:
                return parse(text)
            except (argparse.ArgumentTypeError, ValueError) as exc:
                self.parser.error(f"{variable}={text!r}: {exc}")
        if key is not None and key in self.file.values:
            value: T = self.file.values[key]
            return value
        return default

    def choice(self, choices: tuple[str, ...]) -> Callable[[str], str]:
        def parse(text: str) -> str:
            if text.lower() not in choices:
                raise ValueError(f"must be one of {', '.join(choices)}")
            return text.lower()

        return parse

    @staticmethod
    def switch(text: str) -> bool:
        if text.lower() in _TRUE:
            return True
        if text.lower() in _FALSE:
            return False
        raise ValueError(f"must be one of {', '.join((*_TRUE, *_FALSE))}")


def _hosts(text: str) -> list[str]:
    """A list of host names in one variable, separated by commas."""
    return [part for part in text.split(",") if part.strip()]


def _paths(text: str) -> list[str]:
    """A list of directories in one variable, separated like PATH."""
    return [part for part in text.split(os.pathsep) if part.strip()]


def _writable_dirs(parser: argparse.ArgumentParser, flag: list[str] | None, pick: _Merge) -> tuple[str, ...]:
    """`sandbox_writable`, absolute with `~` expanded. A relative path from a flag or variable is a usage error: it
    would be relative to the editor's working directory, anyone's guess (the file's are relative to the file)."""
    found = pick(flag, "ACP_SERVER_SANDBOX_WRITABLE", "sandbox_writable", [], _paths)
    source = "--sandbox-writable" if flag is not None else "ACP_SERVER_SANDBOX_WRITABLE"
    expanded = [os.path.expanduser(path) for path in found]
    if flag is not None or pick.env.get("ACP_SERVER_SANDBOX_WRITABLE", "").strip():
        for path in expanded:
            if not os.path.isabs(path):
                parser.error(f"{source} {path!r}: must be an absolute path (or start with ~)")
    return tuple(os.path.abspath(path) for path in expanded)


def _log_file(flag: Any, env: Mapping[str, str], file: FileSettings) -> tuple[bool, str | None]:
    """(log to a file?, which one; None = the default place). flag > ACP_SERVER_LOG_FILE > file > on, default."""
    if flag is False:
        return False, None
    if isinstance(flag, str):
        return True, flag
    text = env.get("ACP_SERVER_LOG_FILE", "").strip()
    if text:
        return (False, None) if text.lower() in _NO_LOG_FILE else (True, text)
    value = file.values.get("log_file", True)
    return (True, None) if value is True else (False, None) if value is False else (True, str(value))


def _store(flag: bool | None, pick: _Merge) -> bool:
    """`--store`/`--no-store` > ACP_SERVER_NO_STORE (a negative, so inverted) > the file's `store` > on."""
    if flag is None and pick.env.get("ACP_SERVER_NO_STORE", "").strip():
        return not pick(None, "ACP_SERVER_NO_STORE", None, False, _Merge.switch)
    return pick(flag, "", "store", True, _Merge.switch)  # no variable of its own: the one above is the negative


def _store_url(parser: argparse.ArgumentParser, flag: str | None, pick: _Merge) -> str | None:
    """`--store-url` > ACP_SERVER_STORE_URL > the file's `store_url` > none (SQLite). A bad flag or variable is a
    usage error whose message never repeats the value (it may hold a password)."""
    for source, text in (("--store-url", flag), ("ACP_SERVER_STORE_URL", pick.env.get("ACP_SERVER_STORE_URL"))):
        if text is not None and text.strip():
            try:
                return check_store_url(text)
            except ValueError as exc:
                parser.error(f"{source}: {exc}")
    found = pick.file.values.get("store_url")
    return found if isinstance(found, str) else None


def load(
    argv: Sequence[str] | None = None,
    env: Mapping[str, str] = os.environ,
    prog: str = "acp-server",
    extend: Callable[[argparse.ArgumentParser], None] | None = None,
    subcommands: Sequence[str] = (),
) -> Loaded:
    """Parse the flags, read the config file, and merge them with the environment into one Config. `extend` adds
    a subcommand's own flags (`doctor --timeout`) to the server's, so it reads the same flags the server would."""
    parser = _parser(prog, extend, subcommands)
    args = parser.parse_args(argv)
    path = config_file(env)
    file = settings_without_file(path)
    if file is None:
        from acp_server.settings.checks import load_settings  # noqa: PLC0415 (start-up: the checks and tomllib only with a config file)

        file = load_settings(path)
    pick = _Merge(parser, env, file)
    store_url = _store_url(parser, args.store_url, pick)
    log_to_file, log_file = _log_file(args.log_file, env, file)
    config = Config(
        model=pick(args.model, "ACP_SERVER_MODEL", "model", "echo", str),
        cleanup_deadline=pick(
            args.cleanup_deadline,
            "ACP_SERVER_CLEANUP_DEADLINE",
            "cleanup_deadline",
            DEFAULT_CLEANUP_DEADLINE,
            _non_negative_seconds,
        ),
        log_level=pick(args.log_level, "ACP_SERVER_LOG", "log_level", "warning", pick.choice(LOG_LEVELS)),
        test_mode=pick(args.test_mode, "ACP_SERVER_TEST_MODE", None, False, _Merge.switch),
        permission_mode=PermissionMode(
            pick(
                args.permission_mode,
                "ACP_SERVER_PERMISSION_MODE",
                "permission_mode",
                PermissionMode.DEFAULT,
                pick.choice(PERMISSION_MODE_IDS),
            )
        ),
        prompt_policy_chosen=args.prompt_policy is not None
        or bool(env.get("ACP_SERVER_PROMPT_POLICY", "").strip())
        or "prompt_policy" in file.values,
        protocol=int(pick(args.protocol, "ACP_SERVER_PROTOCOL", "protocol", "2", pick.choice(PROTOCOL_IDS))),
        prompt_policy=PromptPolicy(
            pick(
                args.prompt_policy,
                "ACP_SERVER_PROMPT_POLICY",
                "prompt_policy",
                PromptPolicy.INTERRUPT,
                pick.choice(PROMPT_POLICY_IDS),
            )
        ),
        sandbox=SandboxMode(
            pick(
                args.sandbox,
                "ACP_SERVER_SANDBOX",
                "sandbox",
                SandboxMode.WORKSPACE_WRITE,
                pick.choice(SANDBOX_MODE_IDS),
            )
        ),
        sandbox_explicit=args.sandbox is not None
        or bool(env.get("ACP_SERVER_SANDBOX", "").strip())
        or "sandbox" in file.values,
        sandbox_writable=_writable_dirs(parser, args.sandbox_writable, pick),
        allow_provider_hosts=tuple(
            host.strip().lower()
            for host in pick(
                args.allow_provider_host, "ACP_SERVER_ALLOW_PROVIDER_HOST", "allow_provider_host", [], _hosts
            )
            if host.strip()
        ),
        sandbox_network=pick(
            args.sandbox_network, "ACP_SERVER_SANDBOX_NETWORK", "sandbox_network", True, _Merge.switch
        ),
        max_turn_requests=pick(
            args.max_turn_requests,
            "ACP_SERVER_MAX_TURN_REQUESTS",
            "max_turn_requests",
            DEFAULT_MAX_TURN_REQUESTS,
            _at_least_one,
        ),
        # The file's own base_url ranks below OPENAI_BASE_URL, so it is applied by settings.provider_credentials.
        base_url=pick(args.base_url, "ACP_SERVER_BASE_URL", None, None, str),
        state_dir=pick(args.state_dir, "ACP_SERVER_STATE_DIR", "state_dir", None, str),
        store=_store(args.store, pick),
        store_url=store_url,
        lease_ttl=pick(args.lease_ttl, "ACP_SERVER_LEASE_TTL", "lease_ttl", DEFAULT_LEASE_TTL, _lease_seconds),
        keep_sessions_days=pick(
            args.keep_sessions_days,
            "ACP_SERVER_KEEP_SESSIONS_DAYS",
            "keep_sessions_days",
            DEFAULT_KEEP_SESSIONS_DAYS,
            _non_negative_days,
        ),
        keep_sessions=pick(
            args.keep_sessions, "ACP_SERVER_KEEP_SESSIONS", "keep_sessions", DEFAULT_KEEP_SESSIONS, _zero_or_more
        ),
        record=pick(args.record, "ACP_SERVER_RECORD", None, None, str),
        log_to_file=log_to_file,
        log_file=log_file,
        mcp_servers=file.mcp_servers,
        mcp_start_wait=pick(
            args.mcp_start_wait,
            "ACP_SERVER_MCP_START_WAIT",
            "mcp_start_wait",
            DEFAULT_MCP_START_WAIT,
            _non_negative_seconds,
        ),
        models=tuple(file.values.get("models", ())),
        model_discovery=pick(
            args.model_discovery, "ACP_SERVER_MODEL_DISCOVERY", "model_discovery", True, _Merge.switch
        ),
        model_input=tuple(file.values.get("model_input", {}).items()),
        family_input=_family_input(file.raw),
        held_secrets=tuple(held_secrets(file.raw, env, store_url)),
        # The store's URL and libpq's password variables too: a command's `printenv` must not show them.
        secret_variables=(*secret_variables(file.raw), *STORE_URL_VARIABLES),
        env_deny=file.env_deny,
    )
    return Loaded(config, file, args)


def _family_input(document: Mapping[str, Any]) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """`input` of each `[providers.FAMILY]` table, where it is usable (settings/checks.py reports the rest)."""
    providers = document.get("providers")
    if not isinstance(providers, dict):
        return ()
    from acp_server.settings.checks import input_kinds  # noqa: PLC0415 (start-up: the checks load only with a config file)

    found = []
    for family, section in providers.items():
        if isinstance(section, dict) and "input" in section:
            try:
                found.append((str(family), input_kinds(section["input"], str(family))))
            except ValueError:
                continue
    return tuple(found)
