"""Settings that live outside the command line: the user's `config.toml` and the providers' credentials.

Precedence is flags > environment > file > defaults. The file sits in the user's config directory
(`platformdirs`, e.g. `~/.config/acp-server/config.toml`), or wherever `ACP_SERVER_CONFIG` points. It is read at
start-up and again by `authenticate`, so a user who adds a key need not restart the editor. A broken file is
reported, never rewritten.

    [providers.openai]
    api_key = "sk-..."              # or api_key_env = "MY_OPENAI_KEY"
    base_url = "http://localhost:11434/v1"
    context_window = 128000

    [providers.anthropic]
    api_key_env = "ANTHROPIC_API_KEY"

    models = ["openai:gpt-4o", "openai:gpt-4o-mini", "anthropic:claude-sonnet-4-5"]   # the `model` option's choices
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = [
    "Credentials",
    "SettingsError",
    "available_models",
    "config_file",
    "provider_credentials",
    "read_config_file",
]

# Environment variables each provider's own SDK reads, in order of preference.
KEY_VARIABLES = {"openai": ("OPENAI_API_KEY",), "anthropic": ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN")}
BASE_URL_VARIABLES = {"openai": "OPENAI_BASE_URL", "anthropic": "ANTHROPIC_BASE_URL"}


class SettingsError(ValueError):
    """The config file exists but cannot be used; the message says where and why."""


@dataclass(frozen=True, slots=True)
class Credentials:
    api_key: str | None
    base_url: str | None
    context_window: int | None


def config_file(env: Mapping[str, str] = os.environ) -> Path:
    explicit = env.get("ACP_SERVER_CONFIG")
    if explicit:
        return Path(explicit)
    import platformdirs  # only when a provider needs it: the echo and scripted models never read the file

    return Path(platformdirs.user_config_dir("acp-server", appauthor=False)) / "config.toml"


def read_config_file(path: Path) -> dict[str, Any]:
    try:
        with path.open("rb") as file:
            return tomllib.load(file)
    except FileNotFoundError:
        return {}
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise SettingsError(f"cannot read {path}: {exc}") from None


def provider_credentials(
    family: str, file_settings: Mapping[str, Any], env: Mapping[str, str], base_url_flag: str | None
) -> Credentials:
    section = file_settings.get("providers", {}).get(family, {})
    if not isinstance(section, dict):
        raise SettingsError(f"[providers.{family}] must be a table")
    key = next((env[name] for name in KEY_VARIABLES.get(family, ()) if env.get(name)), None)
    if key is None and isinstance(section.get("api_key_env"), str):
        key = env.get(section["api_key_env"]) or None
    if key is None and isinstance(section.get("api_key"), str):
        key = section["api_key"] or None
    base_url = base_url_flag or env.get(BASE_URL_VARIABLES.get(family, "")) or section.get("base_url")
    window = section.get("context_window")
    return Credentials(
        key,
        base_url if isinstance(base_url, str) and base_url else None,
        window if isinstance(window, int) and not isinstance(window, bool) and window > 0 else None,
    )


def available_models(default: str, file_settings: Mapping[str, Any]) -> tuple[str, ...]:
    """The `model` config option's choices: the configured default first, then `models = [...]` from the file."""
    listed = file_settings.get("models", [])
    extra = [m for m in listed if isinstance(m, str) and m] if isinstance(listed, list) else []
    return tuple(dict.fromkeys([default, *extra]))
