"""The config file's settings as the server starts with them (`FileSettings`), and the one case every start-up
checks first: there is no file (what most find).

Reading and checking a file that exists (the TOML parser, every setting's check) is settings/checks.py's, imported
only then, so a start-up without a config file pays for neither.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["FileSettings", "Problem", "settings_without_file"]


@dataclass(frozen=True, slots=True)
class Problem:
    """One thing wrong with the config file. `error` problems cost the setting; `warning` ones cost nothing."""

    path: Path
    key: str  # dotted ("permission_mode", "providers.openai.base_url", "mcp_servers.github.command"); "" = the file
    message: str  # plain words: what was expected, what was found, what the server does about it
    severity: str = "error"

    def __str__(self) -> str:
        return f"{self.path}: {self.key}: {self.message}" if self.key else f"{self.path}: {self.message}"


@dataclass(frozen=True, slots=True)
class FileSettings:
    """The config file, checked: the settings that passed, the MCP servers, and every problem found."""

    path: Path
    found: bool = False
    readable: bool = True  # False when the file exists but cannot be read or is not TOML
    values: Mapping[str, Any] = field(default_factory=dict)  # top-level settings that passed their checks
    mcp_servers: tuple[dict[str, Any], ...] = ()
    # `[tools] env_deny`: variables (names or `PREFIX_*` patterns) no child process gets.
    env_deny: tuple[str, ...] = ()
    problems: tuple[Problem, ...] = ()
    raw: Mapping[str, Any] = field(default_factory=dict)  # the parsed document, for the provider tables


def settings_without_file(path: Path) -> FileSettings | None:
    """The settings when `path` does not exist, else None: a file there (or one that cannot even be looked at) is
    for settings/checks.py `load_settings` to read, check or say why it cannot."""
    try:
        os.stat(path)
    except FileNotFoundError:
        return FileSettings(path)
    except OSError:
        return None
    return None
