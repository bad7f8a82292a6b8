"""Checking `config.toml`: every setting the flags have, the provider tables and the MCP servers, in plain words.

Every problem is reported with the file's path, the key and what was expected, and the server still starts, because
an editor shows nothing useful of an agent that exits at once (it hides stderr). What it does instead is the safe
thing (docs/configuration.md, "When the config file is wrong"):
- a key it does not know: ignored (a warning; often a typo, so the nearest known key is suggested);
- a value of the wrong type or out of range: that one setting is ignored, and the environment or the default
  applies; the defaults are the careful choices (ask before edits and commands, interrupt, a 2 s deadline);
- `store` or `log_file` wrong, or the whole file unreadable: sessions are kept in memory only and no log file is
  written until it is fixed, since the file may have asked for exactly that, and a broken file must not make the
  server write to disk what the user told it not to;
- one `[mcp_servers.NAME]` table wrong: that server is left out, the others are kept.
`acp-server doctor` reports the same problems. Values are never echoed back for keys that may hold secrets: a
problem names the type found, not the value.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from acp_server.settings.config import (
    INPUT_KINDS,
    LEASE_TTL_RANGE,
    LOG_LEVELS,
    PERMISSION_MODE_IDS,
    PROMPT_POLICY_IDS,
    PROTOCOL_IDS,
    SANDBOX_MODE_IDS,
)
from acp_server.settings.file_settings import FileSettings, Problem
from acp_server.settings.files import DEFAULT_TIMEOUTS, KEY_VARIABLES, TIMEOUT_KEYS, timeout_value_problem
from acp_server.settings.store_url import check_store_url

__all__ = [
    "FILE_ONLY_FORBIDDEN",
    "MODEL_FAMILIES",
    "FileSettings",
    "Problem",
    "input_kinds",
    "load_settings",
    "model_spec_problem",
]

MODEL_FAMILIES = ("echo", "scripted", "openai", "anthropic")
# Settings a file must not hold, with the reason given to the user.
FILE_ONLY_FORBIDDEN = {
    "test_mode": "test mode is never for everyday use; pass --test-mode for one run instead",
    "record": "a transcript is for one run (every editor window would write the same file); pass --record FILE",
}
# Settings whose fallback, when the file's value is unusable, is the private choice rather than the default.
PRIVATE_FALLBACK = {"store": False, "log_file": False}


class _InvalidError(ValueError):
    """A value failed its check; the message says what was expected."""


def _kind(value: Any) -> str:
    """A value's type in plain words (never the value itself: it may be a key)."""
    if isinstance(value, bool):
        return "true/false"
    if isinstance(value, int):
        return "a whole number"
    if isinstance(value, float):
        return "a number"
    if isinstance(value, str):
        return "text"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "a table"
    return "a date or time"


def _text(value: Any) -> str:
    if not isinstance(value, str) or not value.strip():
        raise _InvalidError(f"expected text, found {'empty text' if isinstance(value, str) else _kind(value)}")
    return value


def _url(value: Any) -> str:
    text = _text(value)
    if not text.startswith(("http://", "https://")):
        raise _InvalidError(f"expected a URL starting with http:// or https://, found {text!r}")
    return text.rstrip("/")


def _store_url(value: Any) -> str:
    try:
        return check_store_url(_text(value))
    except ValueError as exc:
        raise _InvalidError(str(exc)) from None


def _choice(choices: tuple[str, ...]) -> Callable[[Any], str]:
    def check(value: Any) -> str:
        if not isinstance(value, str) or value.lower() not in choices:
            found = repr(value) if isinstance(value, str) else _kind(value)
            raise _InvalidError(f"expected one of {', '.join(choices)}; found {found}")
        return value.lower()

    return check


def _protocol(value: Any) -> str:
    """`protocol = 1` or `2` (a number or its string): the highest ACP version served."""
    text = str(value) if isinstance(value, (int, str)) and not isinstance(value, bool) else None
    if text not in PROTOCOL_IDS:
        raise _InvalidError(f"expected one of {', '.join(PROTOCOL_IDS)}; found {value!r}")
    return text


def _positive_int(value: Any) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        found = str(value) if isinstance(value, int) and not isinstance(value, bool) else _kind(value)
        raise _InvalidError(f"expected a whole number of at least 1, found {found}")
    return value


def _seconds(value: Any) -> float:
    if not isinstance(value, int | float) or isinstance(value, bool) or value < 0 or math.isnan(value):
        found = str(value) if isinstance(value, int | float) and not isinstance(value, bool) else _kind(value)
        raise _InvalidError(f"expected a number of seconds, zero or more, found {found}")
    return float(value)


def _whole_or_zero(value: Any) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        found = str(value) if isinstance(value, int) and not isinstance(value, bool) else _kind(value)
        raise _InvalidError(f"expected a whole number, zero or more (0: no limit), found {found}")
    return value


def _lease_ttl(value: Any) -> float:
    low, high = LEASE_TTL_RANGE
    if not isinstance(value, int | float) or isinstance(value, bool) or not low <= value <= high:
        found = str(value) if isinstance(value, int | float) and not isinstance(value, bool) else _kind(value)
        raise _InvalidError(f"expected a number of seconds from {low:g} to {high:g}, found {found}")
    return float(value)


def _days(value: Any) -> float:
    if not isinstance(value, int | float) or isinstance(value, bool) or value < 0 or math.isnan(value):
        found = str(value) if isinstance(value, int | float) and not isinstance(value, bool) else _kind(value)
        raise _InvalidError(f"expected a number of days, zero or more (0: no limit), found {found}")
    return float(value)


def _bool(value: Any) -> bool:
    if not isinstance(value, bool):
        raise _InvalidError(f"expected true or false, found {_kind(value)}")
    return value


def _texts(value: Any) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise _InvalidError(
            f"expected a list of text, found {_kind(value) if not isinstance(value, list) else 'other items'}"
        )
    return list(value)


def _text_table(value: Any) -> dict[str, str]:
    if not isinstance(value, dict) or not all(isinstance(item, str) for item in value.values()):
        found = _kind(value) if not isinstance(value, dict) else "a table with values that are not text"
        raise _InvalidError(f'expected a table of text values (NAME = "value"), found {found}')
    return dict(value)


def model_spec_problem(spec: str) -> str | None:
    """What is wrong with a `--model` spec, in words, or None. The same rules as runtime.providers.open_provider."""
    family, _, rest = spec.partition(":")
    if family not in MODEL_FAMILIES:
        return f"unknown model {spec!r}: expected echo, scripted[:PATH], openai:MODEL or anthropic:MODEL"
    if family in ("openai", "anthropic") and not rest:
        example = "gpt-4o" if family == "openai" else "claude-sonnet-4-5"
        return f"{spec!r} names no model: write {family}:MODEL, e.g. {family}:{example}"
    return None


def _model(value: Any) -> str:
    text = _text(value)
    problem = model_spec_problem(text)
    if problem:
        raise _InvalidError(problem)
    return text


def input_kinds(value: Any, family: str) -> tuple[str, ...]:
    """An `input` setting: what a model takes in a prompt, a list of "text", "image", "audio". Raises
    `_InvalidError` (a ValueError) saying what is wrong."""
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise _InvalidError(f'expected a list such as ["text", "image"], found {_kind(value)}')
    unknown = [item for item in value if item not in INPUT_KINDS]
    if unknown:
        raise _InvalidError(f"unknown kind {unknown[0]!r}: expected some of {', '.join(INPUT_KINDS)}")
    if family == "anthropic" and "audio" in value:
        raise _InvalidError("the Anthropic Messages API takes no audio; leave audio out")
    return tuple(dict.fromkeys(value))


def _models(value: Any) -> list[str]:
    """`models`: specs, or tables `{ model = "openai:llava", input = ["text", "image"] }` (see `_model_input`)."""
    if not isinstance(value, list):
        raise _InvalidError(f"expected a list of model specs, found {_kind(value)}")
    listed = []
    for item in value:
        spec = item.get("model") if isinstance(item, dict) else item
        if not isinstance(spec, str):
            raise _InvalidError('expected model specs, or tables { model = "openai:NAME", input = ["text", "image"] }')
        problem = model_spec_problem(spec)
        if problem:
            raise _InvalidError(problem)
        if isinstance(item, dict):
            for key in item:
                if key not in ("model", "input"):
                    raise _InvalidError(f"{spec}: unknown key {key!r} (a model's table has model and input)")
            if "input" in item:
                try:
                    input_kinds(item["input"], spec.partition(":")[0])
                except _InvalidError as exc:
                    raise _InvalidError(f"{spec}: input: {exc}") from None
        listed.append(spec)
    return listed


def _model_input(value: list[Any]) -> dict[str, tuple[str, ...]]:
    """The `input` of each `models` table entry (already checked by `_models`), by spec."""
    return {
        item["model"]: input_kinds(item["input"], item["model"].partition(":")[0])
        for item in value
        if isinstance(item, dict) and "input" in item
    }


class _Paths:
    """Paths in the file: `~` is the home directory; a relative path is relative to the file's directory (the
    editor's working directory, which the server inherits, is anyone's guess)."""

    def __init__(self, base: Path) -> None:
        self.base = base

    def path(self, value: Any) -> str:
        return str(self.base / Path(_text(value)).expanduser())

    def paths(self, value: Any) -> list[str]:
        return [self.path(item) for item in _texts(value)]

    def log_file(self, value: Any) -> str | bool:
        if isinstance(value, bool):
            return value
        if not isinstance(value, str):
            raise _InvalidError(f"expected a file path, or false for no log file, found {_kind(value)}")
        return self.path(value)


# `[serve]` is read by `acp-server serve` (remote/settings.py, cli/serve.py).
_TABLES = ("providers", "mcp_servers", "tools", "serve")
_TOOLS_KEYS = ("env_deny",)
# An environment variable's name, or a shell-style pattern of names (`AWS_*`, `*_TOKEN`).
_ENV_PATTERN = re.compile(r"[A-Za-z0-9_*?\[\]!-]+")
_PROVIDER_KEYS = ("api_key", "api_key_env", "base_url", "context_window", "input", *TIMEOUT_KEYS)
_STDIO_KEYS = ("type", "command", "args", "env", "cwd")
_REMOTE_KEYS = ("type", "url", "headers")


class _Checker:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.problems: list[Problem] = []
        paths = _Paths(path.parent)
        self.top: dict[str, Callable[[Any], Any]] = {
            "model": _model,
            "models": _models,
            "model_discovery": _bool,
            "base_url": _url,
            "permission_mode": _choice(PERMISSION_MODE_IDS),
            "prompt_policy": _choice(PROMPT_POLICY_IDS),
            "protocol": _protocol,
            "cleanup_deadline": _seconds,
            "mcp_start_wait": _seconds,
            "max_turn_requests": _positive_int,
            "state_dir": paths.path,
            "store": _bool,
            "store_url": _store_url,
            "lease_ttl": _lease_ttl,
            "keep_sessions_days": _days,
            "keep_sessions": _whole_or_zero,
            "log_level": _choice(LOG_LEVELS),
            "log_file": paths.log_file,
            "sandbox": _choice(SANDBOX_MODE_IDS),
            "sandbox_network": _bool,
            "sandbox_writable": paths.paths,
            "allow_provider_host": _texts,
        }
        self.paths = paths

    def problem(self, key: str, message: str, severity: str = "error") -> None:
        self.problems.append(Problem(self.path, key, message, severity))

    def unknown(self, key: str, known: tuple[str, ...] | list[str], what: str = "setting") -> None:
        import difflib  # noqa: PLC0415 (only when there is a typo to explain)

        leaf = key.rpartition(".")[2]
        close = difflib.get_close_matches(leaf, known, n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else f"; known: {', '.join(known)}"
        self.problem(key, f"unknown {what}, ignored{hint}", "warning")

    def settings(self, document: Mapping[str, Any]) -> dict[str, Any]:
        values: dict[str, Any] = {}
        for key, value in document.items():
            if key in _TABLES:
                continue
            if key in FILE_ONLY_FORBIDDEN:
                self.problem(key, f"cannot be set in the config file, ignored: {FILE_ONLY_FORBIDDEN[key]}")
            elif key not in self.top:
                self.unknown(key, [*self.top, *_TABLES])
            else:
                try:
                    values[key] = self.top[key](value)
                except _InvalidError as exc:
                    self.problem(key, f"{exc}; {self._consequence(key)}")
                else:
                    if key == "models":
                        values["model_input"] = _model_input(value)
        return values

    @staticmethod
    def _consequence(key: str) -> str:
        if key in ("store", "store_url"):
            return "ignored, and sessions are kept in memory only until it is fixed"
        if key == "log_file":
            return "ignored, and no log file is written until it is fixed"
        return "ignored (the environment or the default applies)"

    def providers(self, table: Any) -> None:
        """Checked for the report only: the providers read their table themselves (it may change before
        `authenticate`), and ignore values of the wrong type there."""
        if not isinstance(table, dict):
            self.problem("providers", f"expected a table ([providers.openai] ...), found {_kind(table)}; ignored")
            return
        checks: dict[str, Callable[[Any], Any]] = {
            "api_key": _text,
            "api_key_env": _text,
            "base_url": _url,
            "context_window": _positive_int,
        }
        for family, section in table.items():
            where = f"providers.{family}"
            if family not in KEY_VARIABLES:
                self.unknown(where, list(KEY_VARIABLES), "provider")
                continue
            if not isinstance(section, dict):
                self.problem(where, f"expected a table, found {_kind(section)}; the whole table is ignored")
                continue
            for key, value in section.items():
                if key in TIMEOUT_KEYS:
                    problem = timeout_value_problem(key, value)
                    if problem:
                        default = getattr(DEFAULT_TIMEOUTS, TIMEOUT_KEYS[key])
                        self.problem(f"{where}.{key}", f"{problem}; ignored (the default, {default:g}, applies)")
                    continue
                if key == "input":
                    try:
                        input_kinds(value, family)
                    except _InvalidError as exc:
                        self.problem(f"{where}.input", f"{exc}; ignored (the default applies)")
                    continue
                if key not in checks:
                    self.unknown(f"{where}.{key}", _PROVIDER_KEYS)
                    continue
                try:
                    checks[key](value)
                except _InvalidError as exc:
                    self.problem(f"{where}.{key}", f"{exc}; ignored")

    def tools(self, table: Any) -> tuple[str, ...]:
        """`[tools]`: `env_deny`, the variables kept from every child process. What is wrong in it is reported and
        what can be read is still denied (a single text counts as one name): a broken list must not hand a command
        the variables the user meant to keep from it."""
        if not isinstance(table, dict):
            self.problem("tools", f"expected a table ([tools]), found {_kind(table)}; ignored")
            return ()
        for key in table:
            if key not in _TOOLS_KEYS:
                self.unknown(f"tools.{key}", _TOOLS_KEYS)
        raw = table.get("env_deny", [])
        if isinstance(raw, str):
            self.problem("tools.env_deny", f"expected a list of names (env_deny = [{raw!r}]); used as that list")
            raw = [raw]
        if not isinstance(raw, list):
            self.problem("tools.env_deny", f"expected a list of variable names, found {_kind(raw)}; ignored")
            return ()
        names = []
        for item in raw:
            if isinstance(item, str) and _ENV_PATTERN.fullmatch(item):
                names.append(item)
            else:
                found = repr(item) if isinstance(item, str) else _kind(item)
                self.problem(
                    "tools.env_deny",
                    f"expected variable names or patterns like AWS_*, found {found}; that entry is ignored",
                )
        return tuple(names)

    def mcp_servers(self, table: Any) -> tuple[dict[str, Any], ...]:
        if not isinstance(table, dict):
            self.problem("mcp_servers", f"expected tables ([mcp_servers.NAME] ...), found {_kind(table)}; ignored")
            return ()
        servers = []
        for name, section in table.items():
            where = f"mcp_servers.{name}"
            try:
                servers.append(self._mcp_server(name, section, where))
            except _InvalidError as exc:
                self.problem(where, f"{exc}; this server is left out")
        return tuple(servers)

    def _mcp_server(self, name: str, section: Any, where: str) -> dict[str, Any]:
        """An ACP `McpServer` object (schema: McpServerStdio / McpServerHttp / McpServerSse)."""
        if not isinstance(section, dict):
            raise _InvalidError(f"expected a table, found {_kind(section)}")
        kind = section.get("type", "stdio")
        if kind not in ("stdio", "http", "sse"):
            raise _InvalidError(f"type: expected stdio, http or sse, found {kind!r}")
        allowed = _STDIO_KEYS if kind == "stdio" else _REMOTE_KEYS
        for key in section:
            if key not in allowed:
                other = "a stdio" if key in _STDIO_KEYS else "an http or sse"
                if key in _STDIO_KEYS or key in _REMOTE_KEYS:
                    raise _InvalidError(f"{key} belongs to {other} server, and this one is {kind}")
                self.unknown(f"{where}.{key}", allowed)

        def checked(key: str, check: Callable[[Any], Any], default: Any = None) -> Any:
            if key not in section:
                if default is None:
                    raise _InvalidError(f"{key} is missing")
                return default
            try:
                return check(section[key])
            except _InvalidError as exc:
                raise _InvalidError(f"{key}: {exc}") from None

        if kind == "stdio":
            server: dict[str, Any] = {
                "name": name,
                "command": checked("command", _text),
                "args": checked("args", _texts, []),
                "env": [{"name": k, "value": v} for k, v in checked("env", _text_table, {}).items()],
            }
            if "cwd" in section:
                # ACP's McpServerStdio has no working directory; _meta is where an extension may carry one.
                server["_meta"] = {"acpServer": {"cwd": checked("cwd", self.paths.path)}}
            return server
        return {
            "type": kind,
            "name": name,
            "url": checked("url", _url),
            "headers": [{"name": k, "value": v} for k, v in checked("headers", _text_table, {}).items()],
        }


def load_settings(path: Path) -> FileSettings:
    """Read and check the config file. Never raises: what is wrong comes back as problems."""
    try:
        with path.open("rb") as file:
            data = file.read()
    except FileNotFoundError:
        return FileSettings(path)
    except OSError as exc:
        reason = exc.strerror or str(exc)
        return _unreadable(path, f"cannot read the file ({reason})")
    import tomllib  # noqa: PLC0415 (start-up: tomllib only with a config file)

    try:
        document = tomllib.loads(data.decode())
    except UnicodeDecodeError:
        return _unreadable(path, "the file is not UTF-8 text")
    except tomllib.TOMLDecodeError as exc:
        return _unreadable(path, f"the file is not valid TOML: {exc}")
    checker = _Checker(path)
    values = checker.settings(document)
    if "providers" in document:
        checker.providers(document["providers"])
    servers = checker.mcp_servers(document["mcp_servers"]) if "mcp_servers" in document else ()
    env_deny = checker.tools(document["tools"]) if "tools" in document else ()
    for key, private in PRIVATE_FALLBACK.items():
        if key in document and key not in values:
            values[key] = private
    if "store_url" in document and "store_url" not in values:
        # Not the SQLite file in its place: sessions meant for a shared database would be written where no other
        # replica sees them.
        values["store"] = False
    return FileSettings(path, True, True, values, servers, env_deny, tuple(checker.problems), document)


def _unreadable(path: Path, reason: str) -> FileSettings:
    message = (
        f"{reason}. The whole file is ignored until it is fixed: sessions are kept in memory only, no log file is "
        "written, and a provider that needs a key from it offers authentication"
    )
    return FileSettings(path, True, False, dict(PRIVATE_FALLBACK), problems=(Problem(path, "", message),))
