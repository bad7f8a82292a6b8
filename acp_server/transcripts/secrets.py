"""What a transcript must never hold: API keys, tokens, passwords and auth headers, removed before a line is kept.

A recording is made to be shared (attached to a bug report, committed as a fixture), so it is cleaned as it is
written rather than trusted to be cleaned later. Two kinds of secret are removed:

- by name: the value of every MCP server `env` entry and `headers` entry whose name looks secret (`*KEY*`,
  `*TOKEN*`, `*SECRET*`, `*PASSWORD*`, `Authorization`, `Cookie`, ...), wherever such a list appears in a message;
- by value: every occurrence, in any string of any line in either direction, of the provider keys the server could
  use (`OPENAI_API_KEY`, `ANTHROPIC_API_KEY`, `ANTHROPIC_AUTH_TOKEN`, keys in the config file), of the values of the
  other secret-looking environment variables, and of every value already removed by name (so a tool that prints its
  environment cannot leak it either), of every header value a client sets for its gateway (ACP `providers/set`,
  learnt by transcripts/record.py whatever the header is called), and of the long words of such a value on their own
  (the token of "Bearer TOKEN"). Values shorter than `MIN_SECRET_CHARS` are not searched for: they would match
  ordinary text, and no real key is that short.

What is not caught: a secret split across lines (a model streaming a key token by token in several chunks) or cut
short (a title made of the first characters of a prompt): finding those would mean parsing and joining every
streamed chunk, which the recorder does not do on the hot path.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable, Mapping
from typing import Any

import orjson

from acp_server.errors import SettingsError
from acp_server.settings.files import (
    MIN_NAMED_SECRET_CHARS,
    MIN_SECRET_CHARS,
    config_file,
    looks_secret,
    read_config_file,
    secret_values,
)

__all__ = ["MIN_SECRET_CHARS", "REDACTED", "Redactor", "looks_secret", "provider_secrets"]

log = logging.getLogger(__name__)

REDACTED = "[redacted]"

_NAMED_LISTS = ("env", "headers")
_NAMED_LIST_NEEDLES = tuple(b'"' + name.encode() + b'"' for name in _NAMED_LISTS)
# A `{"name": ..., "value": ...}` pair in text that is not JSON (a malformed line), in either order.
_RAW_PAIRS = (
    re.compile(r'("name"\s*:\s*"(?P<name>(?:[^"\\]|\\.)*)"\s*,\s*"value"\s*:\s*")(?P<value>(?:[^"\\]|\\.)*)(")'),
    re.compile(r'("value"\s*:\s*")(?P<value>(?:[^"\\]|\\.)*)("\s*,\s*"name"\s*:\s*"(?P<name>(?:[^"\\]|\\.)*)")'),
)


def provider_secrets(env: Mapping[str, str]) -> list[str]:
    """The secrets the server knows of (settings.secret_values: the same list the log redacts), reading the config
    file `env` points at."""
    try:
        settings = read_config_file(config_file(env))
    except SettingsError as exc:
        log.warning("%s", exc)
        settings = {}
    return secret_values(settings, env)


class Redactor:
    """Removes secrets from lines on their way into a transcript. Cheap when there is nothing to remove: a line
    that holds no known secret value and no named list is not parsed."""

    def __init__(self, secrets: Iterable[str] = ()) -> None:
        self._secrets: list[str] = []
        # What `holds_secret` looks for: each secret as it appears inside a JSON string (raw and escaped), and the
        # names of the lists whose entries are redacted by name.
        self._needles: list[bytes] = list(_NAMED_LIST_NEEDLES)
        for secret in secrets:
            self.add(secret)

    def add(self, secret: str) -> None:
        """Look for `secret` from now on; for a value like "Bearer TOKEN", for its long words on their own too."""
        if len(secret) < MIN_SECRET_CHARS or secret in self._secrets:
            return
        words = secret.split()
        if len(words) > 1:
            for word in words:
                if len(word) >= MIN_NAMED_SECRET_CHARS:
                    self.add(word)
        self._secrets.append(secret)
        self._secrets.sort(key=len, reverse=True)  # a secret inside a longer one: the longer goes first
        for needle in (secret.encode(), orjson.dumps(secret)[1:-1]):
            if needle not in self._needles:
                self._needles.append(needle)

    def holds_secret(self, data: bytes) -> bool:
        """Whether `data` (JSON text) may hold a secret: a known value, or a list whose entries are named."""
        for needle in self._needles:  # noqa: SIM110 - a plain loop: any() costs a generator per batch written
            if needle in data:
                return True
        return False

    def message(self, message: Any) -> Any:
        """A copy of a parsed message with every secret replaced (see the module docstring)."""
        return self._walk(message, within=None)

    def _walk(self, value: Any, within: str | None) -> Any:
        if isinstance(value, str):
            return self.text(value, raw=False)
        if isinstance(value, list):
            return [self._walk(item, within) for item in value]
        if not isinstance(value, dict):
            return value
        if within is not None:
            value = self._named_entry(value, within)
        return {
            self.text(name, raw=False): self._walk(item, name if name in _NAMED_LISTS else None)
            for name, item in value.items()
        }

    def _named_entry(self, entry: dict[str, Any], within: str) -> dict[str, Any]:
        """An `env` / `headers` entry: `{"name", "value"}` as ACP writes them, or a plain mapping."""
        name, value = entry.get("name"), entry.get("value")
        if isinstance(name, str) and isinstance(value, str):
            if looks_secret(name):
                self.add(value)
                return {**entry, "value": REDACTED}
            return entry
        redacted = dict(entry)
        for name, value in entry.items():
            if isinstance(value, str) and looks_secret(name):
                self.add(value)
                redacted[name] = REDACTED
        return redacted

    def text(self, text: str, raw: bool = True) -> str:
        """`text` with every known secret value replaced; `raw` text (a line that is not JSON) also loses the values
        of `{"name": ..., "value": ...}` pairs whose name looks secret."""
        if raw:
            for pattern in _RAW_PAIRS:
                text = pattern.sub(self._raw_pair, text)
        for secret in self._secrets:
            if secret in text:
                text = text.replace(secret, REDACTED)
        return text

    def _raw_pair(self, match: re.Match[str]) -> str:
        if not looks_secret(match.group("name")):
            return match.group(0)
        start, end = match.span("value")
        whole = match.group(0)
        offset = match.start()
        return whole[: start - offset] + REDACTED + whole[end - offset :]
