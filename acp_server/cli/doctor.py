"""`acp-server doctor [FLAGS]`: check the set-up the server would run with, and say what is wrong in plain words.

An editor shows little when an agent misbehaves (it hides stderr), so this is the one place a user can ask "why does
it not work?". It takes the server's own flags and reads the same environment and config file, then checks, one
line each with OK, WARN or FAIL: the config file and each problem in it, the model spec, each provider the model
and `models` name (its package, its key — never printed, only where it was found — and its endpoint, with a GET of
the models list), model discovery (how many models the endpoints list besides the configured ones, which it keeps
in the cache new sessions read, or why none), the state and log directories, the sandbox local commands run in
(runtime/sandbox.py: active, through which mechanism, or why not), and the config file's MCP servers (started and
asked for their tools). It exits 0 when nothing FAILs and 1 otherwise. The report goes to stderr, like everything a
person reads from acp-server (stdout is the protocol's).
"""

from __future__ import annotations

import argparse
import functools
import os
import shlex
import socket
import stat
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

import anyio
import orjson

from acp_server.errors import ListingError, McpServerError, ScriptError, SettingsError
from acp_server.mcp_bridge.probe import probe_mcp_server
from acp_server.runtime.providers.anthropic import AnthropicProvider
from acp_server.runtime.providers.catalog import (
    CACHE_FILENAME,
    Listing,
    ListingCache,
    endpoint_key,
    merge_choices,
    model_ids,
)
from acp_server.runtime.providers.openai import OpenAIProvider
from acp_server.runtime.providers.scripted import ScriptedProvider
from acp_server.runtime.sandbox import describe
from acp_server.settings.checks import model_spec_problem
from acp_server.settings.command_line import Loaded, load
from acp_server.settings.config import Config
from acp_server.settings.files import KEY_VARIABLES, Credentials, provider_credentials
from acp_server.settings.logfile import log_file_path
from acp_server.store.sqlite_file import default_state_dir

__all__ = ["Check", "main"]

DEFAULT_TIMEOUT = 5.0
DEFAULT_BASE_URLS = {"openai": "https://api.openai.com/v1", "anthropic": "https://api.anthropic.com"}
ANTHROPIC_VERSION = "2023-06-01"
MAX_LISTED = 8
# Each provider's SDK, by family: imported as the provider imports it (a plain import, runtime/providers/).
SDK_MODULES = {"openai": OpenAIProvider.sdk_module, "anthropic": AnthropicProvider.sdk_module}


@dataclass(frozen=True, slots=True)
class Check:
    status: str  # OK, WARN or FAIL
    subject: str
    words: str

    def line(self) -> str:
        return f"{self.status:<4} {self.subject}: {self.words}"


def _ok(subject: str, words: str) -> Check:
    return Check("OK", subject, words)


def _warn(subject: str, words: str) -> Check:
    return Check("WARN", subject, words)


def _fail(subject: str, words: str) -> Check:
    return Check("FAIL", subject, words)


# --- the config file ---


def check_config_file(loaded: Loaded) -> list[Check]:
    file = loaded.file
    if not file.found:
        return [_ok("config file", f"none at {file.path}; flags, the environment and the defaults apply")]
    if not file.readable:
        return [_fail("config file", str(problem)) for problem in file.problems]
    checks = [_ok("config file", f"{file.path} read")]
    for problem in file.problems:
        subject = f"config {problem.key}" if problem.key else "config file"
        checks.append(Check("FAIL" if problem.severity == "error" else "WARN", subject, problem.message))
    checks += _key_file_permissions(file.path, file.raw)
    return checks


def _key_file_permissions(path: Path, document: Mapping[str, Any]) -> list[Check]:
    providers = document.get("providers")
    holds_key = isinstance(providers, dict) and any(
        isinstance(section, dict) and section.get("api_key") for section in providers.values()
    )
    if not holds_key or os.name != "posix":
        return []
    try:
        mode = path.stat().st_mode
    except OSError:
        return []
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        return [_warn("config file", f"it holds an API key and other users can read it: chmod 600 {path}")]
    return []


# --- the model and its providers ---


def check_model(config: Config) -> list[Check]:
    problem = model_spec_problem(config.model)
    if problem:
        return [_fail("model", problem)]
    family, _, rest = config.model.partition(":")
    if family == "scripted" and rest:
        try:
            ScriptedProvider.from_file(Path(rest))
        except ScriptError as exc:
            return [_fail("model", str(exc))]
    takes = ", ".join(kind for kind in ("text", "image", "audio") if kind in config.accepts(config.model))
    if family == "scripted" and not rest:
        return [_ok("model", f"scripted: the built-in demo script, scripted:PATH plays your own (takes {takes})")]
    return [_ok("model", f"{config.model} (takes {takes}; see docs/configuration.md, Images)")]


def check_package(family: str) -> Check:
    subject = f"{family} package"
    try:
        module = SDK_MODULES[family]()
    except Exception as exc:  # an SDK that fails to import for any reason is "not usable"; this is not async code
        extra = " (pip install 'acp-server[anthropic]')" if family == "anthropic" else ""
        return _fail(subject, f"cannot be imported{extra}: {type(exc).__name__}: {exc}")
    return _ok(subject, f"installed (version {getattr(module, '__version__', 'unknown')})")


def check_key(family: str, credentials: Credentials, config_path: Path) -> Check:
    subject = f"{family} API key"
    if credentials.api_key:
        return _ok(subject, f"found in {credentials.key_source}")
    if family == "openai" and credentials.base_url:
        return _ok(subject, f"none found, and none needed for the local endpoint {credentials.base_url}")
    variable = KEY_VARIABLES[family][0]
    return _fail(
        subject,
        f"none found: set {variable} in the environment your editor starts acp-server with, or add "
        f'api_key = "..." (or api_key_env = "VARIABLE") under [providers.{family}] in {config_path}',
    )


def _models_url(family: str, credentials: Credentials) -> tuple[str, dict[str, str]]:
    base = (credentials.base_url or DEFAULT_BASE_URLS[family]).rstrip("/")
    headers = {"Accept": "application/json", "User-Agent": "acp-server-doctor"}
    if family == "openai":
        if credentials.api_key:
            headers["Authorization"] = f"Bearer {credentials.api_key}"
        return f"{base}/models", headers
    # Anthropic's base URL has no /v1 (the SDK adds it to /messages); an auth token goes as a Bearer header.
    headers["anthropic-version"] = ANTHROPIC_VERSION
    if credentials.api_key and "ANTHROPIC_AUTH_TOKEN" in (credentials.key_source or ""):
        headers["Authorization"] = f"Bearer {credentials.api_key}"
    elif credentials.api_key:
        headers["x-api-key"] = credentials.api_key
    return f"{base}/v1/models", headers


def check_endpoint(family: str, credentials: Credentials, model: str | None, timeout: float) -> Check:
    """GET the models list: any answer means the endpoint is reachable; 401/403 means the key was refused."""
    return _probe_endpoint(family, credentials, model, timeout)[1]


def _probe_endpoint(
    family: str, credentials: Credentials, model: str | None, timeout: float
) -> tuple[object | None, Check]:
    """The models list the endpoint answered (the parsed body) if it answered one, and the endpoint's check."""
    url, headers = _models_url(family, credentials)
    subject = f"{family} endpoint"
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=timeout) as answer:
            body = answer.read(4 * 1024 * 1024)
    except urllib.error.HTTPError as exc:
        exc.close()
        if exc.code in (401, 403):
            if credentials.api_key:
                return None, _fail(subject, f"{url} refused the key (HTTP {exc.code}): check it, or make a new one")
            return None, _fail(subject, f"{url} wants an API key (HTTP {exc.code}) and none was found")
        if exc.code == 404:
            return None, _warn(
                subject,
                f"{url} answered 404: is the base URL right? (OpenAI-compatible servers usually end in /v1)",
            )
        return None, _fail(subject, f"{url} answered HTTP {exc.code} {exc.reason}")
    except urllib.error.URLError as exc:
        return None, _fail(subject, f"cannot reach {url}: {_reason(exc.reason, timeout)}")
    except (TimeoutError, OSError) as exc:
        return None, _fail(subject, f"cannot reach {url}: {_reason(exc, timeout)}")
    try:
        parsed = orjson.loads(body)
        listed = [str(item["id"]) for item in parsed["data"]]
    except (orjson.JSONDecodeError, KeyError, TypeError):
        return None, _warn(subject, f"{url} answered, but not with a models list; is it an {family} endpoint?")
    if model is None:
        return parsed, _ok(subject, f"{url} answered ({len(listed)} models)")
    if any(name in (model, f"{model}:latest") or name.endswith(f"/{model}") for name in listed):
        return parsed, _ok(subject, f"{url} answered, and lists {model}")
    shown = ", ".join(listed[:MAX_LISTED]) + (", ..." if len(listed) > MAX_LISTED else "")
    return parsed, _warn(
        subject, f"{url} answered, but {model} is not among the {len(listed)} models it lists ({shown or 'none'})"
    )


def _reason(reason: object, timeout: float) -> str:
    if isinstance(reason, ConnectionRefusedError):
        return "connection refused (nothing is listening there: is the server running?)"
    if isinstance(reason, TimeoutError | socket.timeout):
        return f"no answer within {timeout:g} s"
    if isinstance(reason, socket.gaierror):
        return f"the host name cannot be resolved ({reason.strerror})"
    return str(reason)


def check_providers(config: Config, loaded: Loaded, env: Mapping[str, str], timeout: float) -> list[Check]:
    specs = [config.model, *loaded.file.values.get("models", [])]
    families: dict[str, str] = {}
    for spec in specs:
        family, _, name = spec.partition(":")
        if family in KEY_VARIABLES and name and family not in families:
            families[family] = name
    if not families:
        return [_ok("provider", f"none needed for {config.model}")]
    checks = []
    for family, model in families.items():
        checks.append(check_package(family))
        try:
            credentials = provider_credentials(family, loaded.file.raw, env, config.base_url, config.model)
        except SettingsError as exc:
            checks.append(_fail(f"{family} settings", str(exc)))
            continue
        checks.append(check_key(family, credentials, loaded.file.path))
        listed, endpoint_check = _probe_endpoint(family, credentials, model, timeout)
        checks.append(endpoint_check)
        checks.append(check_discovery(config, family, credentials, [*specs], listed))
    return checks


def check_discovery(
    config: Config, family: str, credentials: Credentials, configured: list[str], listed: object | None
) -> Check:
    """What model discovery adds to the `model` option for this family, kept in the cache new sessions read (so
    `acpx --model NAME` finds a listed model at once), or why it adds nothing."""
    subject = f"{family} model discovery"
    if not config.model_discovery:
        return _ok(subject, "off (model_discovery): only the configured models are offered")

    if listed is None:
        return _warn(subject, "the endpoint gave no models list (see above): only the configured models are offered")
    try:
        names = model_ids(listed)
    except ListingError as exc:
        return _warn(subject, f"{exc}: only the configured models are offered")
    endpoint = endpoint_key(credentials.base_url or DEFAULT_BASE_URLS[family])
    listing = Listing(family, endpoint, names, time.time())
    added = [spec for spec in merge_choices(configured, [listing]) if spec not in configured]
    kept = ""
    if config.store:
        directory = Path(config.state_dir).expanduser() if config.state_dir else _default_state_dir()
        ListingCache(directory / CACHE_FILENAME).update({(family, endpoint): listing})
        kept = "; cached for new sessions"
    return _ok(subject, f"{len(added)} model(s) offered besides the configured ones{kept}")


def _default_state_dir() -> Path:
    return default_state_dir()


# --- directories ---


def _writable(path: Path) -> str | None:
    """Why `path` (a directory, made if missing) cannot be written, or None. Makes nothing: a missing directory is
    judged by its nearest existing parent."""
    existing = path
    while not existing.exists() and existing.parent != existing:
        existing = existing.parent
    if not existing.is_dir():
        return f"{existing} is not a directory"
    if existing != path:
        return (
            None
            if os.access(existing, os.W_OK | os.X_OK)
            else f"{existing} cannot be written, so {path} cannot be made"
        )
    try:
        with tempfile.TemporaryFile(dir=path):
            return None
    except OSError as exc:
        return f"cannot write in {path} ({exc.strerror or exc})"


def check_state_dir(config: Config) -> Check:
    if not config.store:
        return _ok("state directory", "not used: sessions are kept in memory only (store off)")
    path = Path(config.state_dir).expanduser() if config.state_dir else default_state_dir()
    problem = _writable(path)
    if problem:
        return _fail("state directory", f"{problem}; sessions cannot be saved (choose one with --state-dir)")
    return _ok("state directory", f"{path} is writable")


def check_log_file(config: Config) -> Check:
    path = log_file_path(config)
    if path is None:
        return _ok("log file", "off: logs go to stderr only")
    problem = _writable(path.parent)
    if problem is None and path.exists() and not os.access(path, os.W_OK):
        problem = f"{path} exists and cannot be written"
    if problem:
        return _warn("log file", f"{problem}; the server will log to stderr only (choose one with --log-file)")
    return _ok("log file", f"{path} (written when there is something to log)")


# --- the sandbox ---


def check_sandbox(config: Config) -> Check:
    """OK when local commands are confined as asked; WARN when they run with the user's rights (asked for, or no
    choice), or part of what was asked for cannot be done here (the network, a writable directory); FAIL when a
    sandbox was asked for by name and none can be had, so commands are refused."""
    level, words = describe(config)
    return {"ok": _ok, "warn": _warn, "fail": _fail}[level]("sandbox", words)


# --- MCP servers ---


def check_mcp_servers(config: Config, timeout: float) -> list[Check]:
    if not config.mcp_servers:
        return []

    checks = []
    for spec in config.mcp_servers:
        subject = f"MCP server {spec['name']}"
        try:
            names = anyio.run(functools.partial(probe_mcp_server, spec, timeout=timeout), backend="asyncio")
        except McpServerError as exc:
            checks.append(_fail(subject, str(exc)))
            continue
        except Exception as exc:  # a probe that breaks is a failed check, not a crashed doctor; not async code
            checks.append(_fail(subject, f"{type(exc).__name__}: {exc}"))
            continue
        shown = ", ".join(names[:MAX_LISTED]) + (", ..." if len(names) > MAX_LISTED else "")
        checks.append(_ok(subject, f"started; {len(names)} tool(s){f': {shown}' if shown else ''}"))
    return checks


# --- the report ---


def run_checks(loaded: Loaded, env: Mapping[str, str], timeout: float) -> list[Check]:
    config = loaded.config
    return [
        *check_config_file(loaded),
        *check_model(config),
        *check_providers(config, loaded, env, timeout),
        check_state_dir(config),
        check_log_file(config),
        check_sandbox(config),
        *check_mcp_servers(config, timeout),
    ]


def _add_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--timeout",
        type=float,
        default=DEFAULT_TIMEOUT,
        metavar="SECONDS",
        help=f"how long each endpoint and MCP server may take to answer (default {DEFAULT_TIMEOUT:g})",
    )


def _server_flags(argv: Sequence[str]) -> list[str]:
    """The flags as the server would get them: without doctor's own `--timeout`."""
    kept, skip = [], False
    for arg in argv:
        if skip:
            skip = False
        elif arg == "--timeout":
            skip = True
        elif not arg.startswith("--timeout="):
            kept.append(arg)
    return kept


def main(argv: Sequence[str], out: TextIO | None = None) -> int:
    stream = out if out is not None else sys.stderr
    loaded = load(argv, prog="acp-server doctor", extend=_add_flags)
    command = shlex.join(["acp-server", *_server_flags(argv)])
    stream.write(f"acp-server doctor: checking what `{command}` would use\n")
    checks = run_checks(loaded, os.environ, loaded.args.timeout)
    for check in checks:
        stream.write(check.line() + "\n")
    failed = sum(check.status == "FAIL" for check in checks)
    warned = sum(check.status == "WARN" for check in checks)
    if failed:
        stream.write(f"{failed} check(s) failed, {warned} warning(s): fix the FAIL lines above.\n")
    else:
        stream.write(f"Nothing failed ({warned} warning(s)).\n")
    stream.flush()
    return 1 if failed else 0
