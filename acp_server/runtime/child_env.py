"""The environment every child process gets: the server's own, minus the secrets the server holds and `env_deny`.

Why it exists: a `run_command` of `printenv` must not put the server's provider key on stdout, in the store and in
the model's context. One policy, applied by every spawn (local commands and test processes through
`ProcessTable.open`; MCP stdio servers through the bridge, which applies it to the MCP SDK's small default
environment, HOME, PATH, SHELL, TERM, USER, under the `env` the server's entry gives it), removes:

- the variables that carry a provider's key (`OPENAI_API_KEY`, `ANTHROPIC_API_KEY`, `ANTHROPIC_AUTH_TOKEN`, any
  variable a `[providers.*] api_key_env` names), whatever their value;
- any variable whose value is one of the secrets the server holds (`Config.held_secrets`: the providers' keys, the
  keys and MCP secrets of config.toml), so the same key under another name does not slip through; values shorter
  than text_guard.MIN_REDACTED_CHARS are not compared (a short value matches unrelated variables);
- the variables `[tools] env_deny` names: an exact name, or a shell-style pattern (`AWS_*`), case-sensitive like
  POSIX variable names.

Everything else passes: `GITHUB_TOKEN`, `AWS_*` and the other credentials the user's own tools need are the user's,
not the server's, unless denied. The policy is frozen configuration; the environment is read at each spawn.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from fnmatch import fnmatchcase

from acp_server.runtime.text_guard import MIN_REDACTED_CHARS
from acp_server.settings.config import Config

__all__ = ["KEEP_ALL", "ChildEnvPolicy", "child_environment"]


@dataclass(frozen=True, slots=True)
class ChildEnvPolicy:
    """What is kept from child processes. The default keeps nothing back (embedders and tests without a Config)."""

    names: frozenset[str] = frozenset()
    values: frozenset[str] = frozenset()
    deny: tuple[str, ...] = ()

    @classmethod
    def from_config(cls, config: Config) -> ChildEnvPolicy:
        return cls(
            frozenset(config.secret_variables),
            frozenset(v for v in config.held_secrets if len(v) >= MIN_REDACTED_CHARS),
            config.env_deny,
        )

    def allows(self, name: str, value: str) -> bool:
        if name in self.names or value in self.values:
            return False
        return not any(fnmatchcase(name, pattern) for pattern in self.deny)


# Keeps nothing back: for embedders and tests that build parts without a Config.
KEEP_ALL = ChildEnvPolicy()


def child_environment(policy: ChildEnvPolicy, base: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment for a child process: `base` (the server's own, by default) as the policy allows it."""
    source = os.environ if base is None else base
    return {name: value for name, value in source.items() if policy.allows(name, value)}
