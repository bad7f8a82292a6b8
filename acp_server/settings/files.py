"""Settings that live outside the command line: where `config.toml` is, and the providers' credentials.

Precedence is flags > environment > file > defaults (settings/command_line.py merges them; settings/checks.py checks
the file). The file sits in the user's config directory (`platformdirs`, e.g. `~/.config/acp-server/config.toml`),
or wherever `ACP_SERVER_CONFIG` points. It is read at start-up (a missing file costs one failed `open`) and the
provider tables again by `authenticate`, so a user who adds a key need not restart the editor. A broken file is
reported, never rewritten.

    [providers.openai]
    api_key = "sk-..."              # or api_key_env = "MY_OPENAI_KEY"
    base_url = "http://localhost:11434/v1"
    context_window = 128000
    connect_timeout = 10            # seconds; see EndpointTimeouts for these five
    first_byte_timeout = 120
    chunk_timeout = 120
    total_timeout = 300
    max_attempts = 3

    [providers.anthropic]
    api_key_env = "ANTHROPIC_API_KEY"

    models = ["openai:gpt-4o", "openai:gpt-4o-mini", "anthropic:claude-sonnet-4-5"]   # the `model` option's choices
"""

from __future__ import annotations

import errno
import os
import re
import stat
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from acp_server.errors import SettingsError, StateFileError
from acp_server.settings.store_url import store_url_passwords

__all__ = [
    "DEFAULT_TIMEOUTS",
    "KEY_VARIABLES",
    "TIMEOUT_KEYS",
    "Credentials",
    "EndpointTimeouts",
    "base_url_family",
    "config_file",
    "endpoint_timeouts",
    "held_secrets",
    "looks_secret",
    "open_state_file",
    "provider_credentials",
    "read_config_file",
    "read_state_file",
    "secret_values",
    "secret_variables",
]

# Environment variables each provider's own SDK reads, in order of preference.
KEY_VARIABLES = {"openai": ("OPENAI_API_KEY",), "anthropic": ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN")}
BASE_URL_VARIABLES = {"openai": "OPENAI_BASE_URL", "anthropic": "ANTHROPIC_BASE_URL"}
# Names of variables and headers whose values are secrets (for redaction).
_SECRET_NAME = re.compile(r"key|token|secret|passw|pwd|credential|auth|cookie|signature", re.IGNORECASE)
# A provider key shorter than this is not searched for: it would match ordinary text, and no real key is that short.
MIN_SECRET_CHARS = 4
# Other values are secret by their names only, which match more loosely (`MAX_TOKENS=4096`): they must be longer.
MIN_NAMED_SECRET_CHARS = 8


def looks_secret(name: str) -> bool:
    """Whether a variable, header or setting with this name holds a secret (`OPENAI_API_KEY`, `Authorization`)."""
    return bool(_SECRET_NAME.search(name))


@dataclass(frozen=True, slots=True)
class Credentials:
    api_key: str | None
    base_url: str | None
    context_window: int | None
    # Where the key was found, in words for `doctor` ("environment variable OPENAI_API_KEY"); never the key itself.
    key_source: str | None = None


@dataclass(frozen=True, slots=True)
class EndpointTimeouts:
    """How long one model call may wait on its endpoint, so a silent or dead endpoint ends the turn with an error
    instead of leaving the prompt unanswered. Seconds, per attempt unless said otherwise:

    - `connect`: to open the TCP (and TLS) connection;
    - `first_byte`: from sending the request to having the response headers (a server that accepts and then says
      nothing);
    - `between_chunks`: the longest silence between two pieces of a streamed reply;
    - `total`: the whole model call, every attempt and the waits between them included;
    - `attempts`: requests made for one call when the endpoint cannot be reached, times out before its headers, or
      answers 408, 409, 429 or 5xx (a reply that has started streaming is never sent again).
    """

    connect: float = 10.0
    first_byte: float = 120.0
    between_chunks: float = 120.0
    total: float = 300.0
    attempts: int = 3


DEFAULT_TIMEOUTS = EndpointTimeouts()
# The `[providers.FAMILY]` keys of the config file, each with its EndpointTimeouts field.
TIMEOUT_KEYS = {
    "connect_timeout": "connect",
    "first_byte_timeout": "first_byte",
    "chunk_timeout": "between_chunks",
    "total_timeout": "total",
    "max_attempts": "attempts",
}
MAX_ATTEMPTS = 10


def timeout_value_problem(key: str, value: Any) -> str | None:
    """What is wrong with a timeout key's value, in words, or None. settings/checks.py reports it; the provider ignores
    the value (its default applies)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        kinds = {bool: "true/false", str: "text", list: "a list", dict: "a table"}
        return f"expected a number, found {kinds.get(type(value), 'a date or time')}"
    if key == "max_attempts":
        if not isinstance(value, int) or not 1 <= value <= MAX_ATTEMPTS:
            return f"expected a whole number from 1 to {MAX_ATTEMPTS}, found {value}"
    elif not (value > 0 and value < float("inf")):  # also refuses NaN
        return f"expected a number of seconds above zero, found {value}"
    return None


def endpoint_timeouts(family: str, file_settings: Mapping[str, Any]) -> EndpointTimeouts:
    """The timeouts of `[providers.FAMILY]`; a value that is missing or unusable keeps its default."""
    section = file_settings.get("providers", {})
    section = section.get(family, {}) if isinstance(section, dict) else {}
    if not isinstance(section, dict):
        return EndpointTimeouts()
    values: dict[str, Any] = {}
    for key, name in TIMEOUT_KEYS.items():
        value = section.get(key)
        if value is not None and timeout_value_problem(key, value) is None:
            values[name] = value if name == "attempts" else float(value)
    return EndpointTimeouts(**values)


def config_file(env: Mapping[str, str] = os.environ) -> Path:
    explicit = env.get("ACP_SERVER_CONFIG")
    if explicit:
        return Path(explicit).expanduser()
    import platformdirs  # noqa: PLC0415 (start-up: only when no config path is given)

    return Path(platformdirs.user_config_dir("acp-server", appauthor=False)) / "config.toml"


def read_config_file(path: Path) -> dict[str, Any]:
    try:
        with path.open("rb") as file:
            data = file.read()
    except FileNotFoundError:
        return {}
    except OSError as exc:
        raise SettingsError(f"cannot read {path}: {exc}") from None
    import tomllib  # noqa: PLC0415 (start-up: tomllib only with a config file)

    try:
        return tomllib.loads(data.decode())
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise SettingsError(f"cannot read {path}: {exc}") from None


# --- what the settings mean ---


def base_url_family(default_model: str) -> str:
    """The provider whose endpoint `--base-url` (`ACP_SERVER_BASE_URL`) and the file's top-level `base_url` set: the
    default model's (`--model`), and no other. A key goes only to its own provider's endpoint: with `--model
    openai:qwen --base-url http://localhost:11434/v1`, an Anthropic model in `models` keeps Anthropic's endpoint."""
    return default_model.partition(":")[0]


def provider_credentials(
    family: str,
    file_settings: Mapping[str, Any],
    env: Mapping[str, str],
    base_url_flag: str | None,
    default_model: str,
) -> Credentials:
    """A provider's key, endpoint and window. The endpoint: for the default model's provider (`base_url_family`),
    flag > provider's variable > `[providers.FAMILY] base_url` > the file's top-level `base_url`; for any other, its
    variable > `[providers.FAMILY] base_url` > its SDK's default. The flag and the top-level `base_url` never reach
    another provider, so no key is sent to an endpoint that is not its provider's."""
    section = file_settings.get("providers", {})
    section = section.get(family, {}) if isinstance(section, dict) else {}
    if not isinstance(section, dict):
        raise SettingsError(f"[providers.{family}] must be a table")
    key, source = None, None
    for name in KEY_VARIABLES.get(family, ()):
        if env.get(name):
            key, source = env[name], f"environment variable {name}"
            break
    named = section.get("api_key_env")
    if key is None and isinstance(named, str) and env.get(named):
        key, source = env[named], f"environment variable {named} (named by api_key_env in the config file)"
    if key is None and isinstance(section.get("api_key"), str) and section["api_key"]:
        key, source = section["api_key"], "the config file (api_key)"
    ours = family == base_url_family(default_model)
    base_url = (
        (base_url_flag if ours else None) or env.get(BASE_URL_VARIABLES.get(family, "")) or section.get("base_url")
    )
    if ours and not (isinstance(base_url, str) and base_url):
        base_url = file_settings.get("base_url")
    window = section.get("context_window")
    return Credentials(
        key,
        base_url if isinstance(base_url, str) and base_url else None,
        window if isinstance(window, int) and not isinstance(window, bool) and window > 0 else None,
        source,
    )


def secret_variables(file_settings: Mapping[str, Any]) -> list[str]:
    """The environment variables that carry a provider's key: the ones the SDKs read, and any `api_key_env`."""
    names = [name for names in KEY_VARIABLES.values() for name in names]
    providers = file_settings.get("providers")
    for section in providers.values() if isinstance(providers, dict) else ():
        named = section.get("api_key_env") if isinstance(section, dict) else None
        if isinstance(named, str) and named and named not in names:
            names.append(named)
    return names


def held_secrets(file_settings: Mapping[str, Any], env: Mapping[str, str], store_url: str | None = None) -> list[str]:
    """The secrets the server itself holds, longest first: the providers' keys (from the environment, the variables
    the file names, and the file), the values of the file's MCP `env` and `headers` entries whose names look
    secret, and the session store's password (in `store_url`, the file's or the environment's URL, PGPASSWORD).
    Unlike `secret_values`, not the other secret-looking variables of the environment (GITHUB_TOKEN,
    AWS_SECRET_ACCESS_KEY): those belong to the user's own tools, which get them (docs/guide.md, "What a command
    sees")."""
    keys: list[Any] = [env.get(name, "") for name in secret_variables(file_settings)]
    providers = file_settings.get("providers")
    for section in providers.values() if isinstance(providers, dict) else ():
        if isinstance(section, dict):
            keys.append(section.get("api_key"))
    named_values: list[Any] = []
    servers = file_settings.get("mcp_servers")
    for server in servers.values() if isinstance(servers, dict) else ():
        for table in (server.get("env"), server.get("headers")) if isinstance(server, dict) else ():
            if isinstance(table, dict):
                named_values += [value for name, value in table.items() if looks_secret(str(name))]
    urls = [store_url, file_settings.get("store_url"), env.get("ACP_SERVER_STORE_URL")]
    keys += [password for url in urls if isinstance(url, str) for password in store_url_passwords(url)]
    keys.append(env.get("PGPASSWORD"))
    found = {v for v in keys if isinstance(v, str) and len(v) >= MIN_SECRET_CHARS}
    found |= {v for v in named_values if _may_be_named_secret(v)}
    return sorted(found, key=len, reverse=True)


def _may_be_named_secret(value: Any) -> bool:
    """A value under a secret-looking name is taken for a secret if it is long enough and not a path."""
    return isinstance(value, str) and len(value) >= MIN_NAMED_SECRET_CHARS and not value.startswith("/")


def secret_values(file_settings: Mapping[str, Any], env: Mapping[str, str]) -> list[str]:
    """Every value that must never reach a log or a transcript, longest first: the secrets the server holds
    (`held_secrets`) and the other secret-looking environment variables (GITHUB_TOKEN, ...), which MCP servers and
    commands inherit. A path is never one: `PWD`, `SSH_AUTH_SOCK` or `XAUTHORITY` name directories and files a log or
    a transcript must keep."""
    found = set(held_secrets(file_settings, env))
    found |= {v for name, v in env.items() if looks_secret(name) and _may_be_named_secret(v)}
    return sorted(found, key=len, reverse=True)


# --- the state directory's files ---

# O_NOFOLLOW and O_NONBLOCK are POSIX; where they are missing (Windows) there are neither links nor FIFOs to fear.
_STATE_FLAGS = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)


def open_state_file(path: Path) -> int:
    """A read-only descriptor of the regular file at `path`, for a file the server keeps in its state directory (the
    session store, the model lists' cache). The last component is never followed when it is a link, a FIFO put there
    opens at once instead of blocking the thread until a writer comes (`initialize` waited for it forever), and the
    type is checked on the descriptor itself (fstat after open), so nothing can be swapped in between the check and
    the use. FileNotFoundError when there is nothing; StateFileError (an OSError) for anything but a regular file."""
    try:
        fd = os.open(path, _STATE_FLAGS)
    except OSError as exc:
        if exc.errno == errno.ELOOP:  # O_NOFOLLOW met a link
            raise StateFileError(errno.ELOOP, "a symbolic link, not followed", str(path)) from None
        raise
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            kind = "a FIFO" if stat.S_ISFIFO(mode) else "a directory" if stat.S_ISDIR(mode) else "not a regular file"
            raise StateFileError(errno.EINVAL, kind, str(path))
    except BaseException:
        os.close(fd)
        raise
    return fd


def read_state_file(path: Path, max_bytes: int) -> bytes:
    """The whole content of a state file opened by `open_state_file`, refused (StateFileError) when it holds more
    than `max_bytes`: a file that grew without bound is not read into memory."""
    fd = open_state_file(path)
    try:
        with os.fdopen(fd, "rb", closefd=False) as file:
            data = file.read(max_bytes + 1)  # the read decides, not an fstat the file may outgrow meanwhile
    finally:
        os.close(fd)
    if len(data) > max_bytes:
        raise StateFileError(errno.EFBIG, f"larger than {max_bytes} bytes", str(path))
    return data
