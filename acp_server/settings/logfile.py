"""Where the server's logs go: stderr, and a rotating file, because editors hide or drop an agent's stderr.

The file is `acp-server.log` in the user's log directory (`platformdirs`, e.g. `~/.local/state/acp-server/log/` on
Linux), or `--log-file PATH` / `ACP_SERVER_LOG_FILE` / `log_file` in the config file; `--no-log-file`,
`ACP_SERVER_LOG_FILE=off` or `log_file = false` turn it off. It is opened (and its directory made) only when the first
record is written, so a quiet run creates nothing and start-up pays neither for the directory lookup nor for
`logging.handlers`. Several acp-server processes (one per editor window) may share it: each line carries the process
id, and rotation (at MAX_BYTES, BACKUPS kept) is best-effort between them.

Secrets are removed from every line, on both outputs, after formatting (so tracebacks are cleaned too): the values of
the keys the server knows (settings.secret_values), `Authorization`/Bearer tokens, `api_key=...`-style pairs, the
credentials in a URL (`http://user:PASS@host`), and strings shaped like provider keys (`sk-...`, `ghp_...`, ...). The
formatters sit on the root logger's handlers, so every record passes through them, the libraries' too (httpx, the
openai and anthropic SDKs, which log each request's URL at debug). A key is never worth a log line.

Under `serve` (many connections, maybe several replicas writing to one log collector) each line also says whose it
is: ` [replica=NAME connection=ID principal=NAME]` after the logger's name (`LogContext`), the connection's part read
from a context variable its task sets (cli/serve.py), so the lines of every task that connection starts carry it too.
"""

from __future__ import annotations

import logging
import re
import sys
from collections.abc import Callable, Iterable
from contextvars import ContextVar
from pathlib import Path
from typing import TYPE_CHECKING

from acp_server.settings.config import Config

if TYPE_CHECKING:
    from logging.handlers import RotatingFileHandler

__all__ = [
    "BACKUPS",
    "LOG_CONNECTION",
    "MAX_BYTES",
    "REDACTED",
    "SERVE_CONTEXT",
    "LazyRotatingFileHandler",
    "LogContext",
    "RedactingFormatter",
    "Redactor",
    "default_log_file",
    "log_file_path",
    "setup_logging",
]

LOG_FILE_NAME = "acp-server.log"
MAX_BYTES = 2 * 1024 * 1024
BACKUPS = 3
REDACTED = "[REDACTED]"
STDERR_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
FILE_FORMAT = "%(asctime)s %(process)d %(levelname)s %(name)s: %(message)s"
# `serve`'s: the same, with whose line it is (`LogContext`) after the logger's name.
SERVE_STDERR_FORMAT = "%(asctime)s %(levelname)s %(name)s%(acp_context)s: %(message)s"
SERVE_FILE_FORMAT = "%(asctime)s %(process)d %(levelname)s %(name)s%(acp_context)s: %(message)s"

# The connection a `serve` task works for: (connection id, principal), set by the task that serves it (cli/serve.py)
# and inherited by every task it starts; None outside any connection (the agent's own background work).
LOG_CONNECTION: ContextVar[tuple[str, str] | None] = ContextVar("acp_server_log_connection", default=None)

# Secrets by shape. Each keeps what says what the secret was (the header or key name, the scheme) and drops the value.
# Each pattern comes with the words one of which every text it matches holds, lowercased: a line holding none of them
# (most lines: a connection opened, a turn ended) is never scanned by that pattern. The scans are what a log line
# costs: about 50 us a line for all eight, on each of the two outputs, which made logging most of the server's CPU
# for a remote connection that only initialized (bench/remote.py, connect -> initialize).
_PATTERNS: tuple[tuple[tuple[str, ...], re.Pattern[str], str], ...] = (
    # `Authorization: Bearer x`, `"api_key": "x"`, `x-api-key=x`, `password: x` (header, JSON, repr, query string).
    (
        ("authorization", "api", "token", "secret", "password"),
        re.compile(
            r"(?i)(\b(?:proxy-)?authorization|\bx-api-key|\bapi[_-]?key|\baccess[_-]?token|\bauth[_-]?token"
            r"|\brefresh[_-]?token|\bclient[_-]?secret|\bpassword)"
            r"([\"']?\s*[:=]\s*[\"']?)((?:bearer|basic|token)\s+)?(?!\[REDACTED\])[^\s\"',;}&)\]]+"
        ),
        rf"\1\2\3{REDACTED}",
    ),
    (
        ("bearer", "basic"),
        re.compile(r"(?i)\b(bearer|basic)\s+(?!\[REDACTED\])[A-Za-z0-9._~+/=\-]{6,}"),
        rf"\1 {REDACTED}",
    ),
    # Credentials in a URL's authority, as the SDKs and httpx log every request's URL at debug: the password of
    # `http://user:PASS@host` (the user stays, to tell which), and a lone user part (`https://TOKEN@host`) whole.
    (
        ("://",),
        re.compile(r"(?i)\b([a-z][a-z0-9+.\-]*://)([^:/?#@\s]*):(?!\[REDACTED\]@)[^/?#@\s]+@"),
        rf"\1\2:{REDACTED}@",
    ),
    (("://",), re.compile(r"(?i)\b([a-z][a-z0-9+.\-]*://)(?!\[REDACTED\]@)[^:/?#@\s]+@"), rf"\1{REDACTED}@"),
    # Provider and service key shapes: OpenAI/Anthropic (sk-, sk-ant-, rk-, pk-), GitHub, Slack, Google.
    (("sk-", "rk-", "pk-"), re.compile(r"\b(?:sk|rk|pk)-[A-Za-z0-9][A-Za-z0-9_\-]{7,}"), REDACTED),
    (("ghp_", "gho_", "ghu_", "ghs_", "ghr_"), re.compile(r"\bgh[pousr]_[A-Za-z0-9]{20,}"), REDACTED),
    (("xox",), re.compile(r"\bxox[abprs]-[A-Za-z0-9\-]{10,}"), REDACTED),
    (("aiza",), re.compile(r"\bAIza[0-9A-Za-z_\-]{30,}"), REDACTED),
)
# `(?i)` makes `i` match the Turkish dotted and dotless i and `s` the long s, which `str.lower` keeps apart: folded
# first, so a word the patterns would match is never missed by its gate (tests/unit/settings/test_logfile.py).
_FOLD = str.maketrans({"\u0130": "i", "\u0131": "i", "\u017f": "s"})
# Any of those words: one scan that lets most lines skip the eight (a few microseconds on a line of 150 characters).
_ANY_WORD = re.compile("|".join(re.escape(word) for words, _, _ in _PATTERNS for word in words))


class Redactor:
    """Removes known secret values, then anything shaped like a secret, from a piece of text."""

    def __init__(self, secrets: Iterable[str] = ()) -> None:
        # Longest first, so a key that contains another is removed whole.
        self._secrets = sorted({s for s in secrets if s}, key=len, reverse=True)

    def __call__(self, text: str) -> str:
        for secret in self._secrets:
            if secret in text:
                text = text.replace(secret, REDACTED)
        lowered = text.lower() if text.isascii() else text.translate(_FOLD).lower()
        if _ANY_WORD.search(lowered) is None:
            return text
        for words, pattern, replacement in _PATTERNS:
            if any(word in lowered for word in words):
                text = pattern.sub(replacement, text)
        return text


class LogContext(logging.Filter):
    """Adds `acp_context` to every record a handler formats: the replica's name (once `serve` knows it), the
    connection and its principal (`LOG_CONNECTION`); empty when there is nothing to say."""

    def __init__(self) -> None:
        super().__init__()
        self.replica: str | None = None

    def filter(self, record: logging.LogRecord) -> bool:
        parts = [f"replica={self.replica}"] if self.replica else []
        connection = LOG_CONNECTION.get()
        if connection is not None:
            parts += [f"connection={connection[0]}", f"principal={connection[1]}"]
        record.acp_context = f" [{' '.join(parts)}]" if parts else ""
        return True


# The one `serve` installs (setup_logging(serving=True)); it is told the replica's name once the settings are read.
SERVE_CONTEXT = LogContext()


class RedactingFormatter(logging.Formatter):
    """A formatter whose every output (message, arguments, traceback) has passed through a Redactor."""

    def __init__(self, fmt: str, redact: Callable[[str], str]) -> None:
        super().__init__(fmt)
        self._redact = redact

    def format(self, record: logging.LogRecord) -> str:
        return self._redact(super().format(record))


class LazyRotatingFileHandler(logging.Handler):
    """A RotatingFileHandler made at the first record it is given. If the file cannot be opened, that is said once
    on stderr and the handler goes quiet: losing the log file must not cost the server."""

    def __init__(self, path: Callable[[], Path], max_bytes: int = MAX_BYTES, backups: int = BACKUPS) -> None:
        super().__init__()
        self._path = path
        self._max_bytes = max_bytes
        self._backups = backups
        self._target: RotatingFileHandler | None = None
        self._failed = False

    def _open(self) -> RotatingFileHandler | None:
        from logging.handlers import RotatingFileHandler  # noqa: PLC0415 (start-up: logging.handlers loads at the first record)

        path: Path | None = None
        try:
            path = self._path()
            path.parent.mkdir(parents=True, exist_ok=True)
            target = RotatingFileHandler(path, maxBytes=self._max_bytes, backupCount=self._backups, encoding="utf-8")
        except OSError as exc:
            self._failed = True
            where = path or "(no path)"
            sys.stderr.write(f"acp-server: cannot write the log file {where}: {exc}; logging to stderr only\n")
            return None
        target.setFormatter(self.formatter)
        return target

    def emit(self, record: logging.LogRecord) -> None:
        # Handler.handle holds self.lock around emit, so the file is opened once even with threads logging.
        if self._target is None:
            if self._failed:
                return
            self._target = self._open()
            if self._target is None:
                return
        self._target.emit(record)

    def setFormatter(self, fmt: logging.Formatter | None) -> None:  # noqa: N802 (logging's own name)
        super().setFormatter(fmt)
        if self._target is not None:
            self._target.setFormatter(fmt)

    def close(self) -> None:
        self.acquire()
        try:
            if self._target is not None:
                self._target.close()
        finally:
            self.release()
        super().close()


def default_log_file() -> Path:
    import platformdirs  # noqa: PLC0415 (start-up: resolved at the first record)

    return Path(platformdirs.user_log_dir("acp-server", appauthor=False)) / LOG_FILE_NAME


def log_file_path(config: Config) -> Path | None:
    """The log file this configuration writes, or None when it writes none."""
    if not config.log_to_file:
        return None
    return Path(config.log_file).expanduser() if config.log_file else default_log_file()


def setup_logging(
    config: Config, secrets: Iterable[str] = (), *, serving: bool = False
) -> LazyRotatingFileHandler | None:
    """Route the root logger to stderr and (unless turned off) the log file, both redacted, at the configured
    level. Returns the file handler, if any. `serving`: `serve`'s lines, which say whose they are (`SERVE_CONTEXT`)."""
    redact = Redactor(secrets)
    root = logging.getLogger()
    root.setLevel(config.log_level.upper())
    stderr = logging.StreamHandler(sys.stderr)
    stderr.setFormatter(RedactingFormatter(SERVE_STDERR_FORMAT if serving else STDERR_FORMAT, redact))
    if serving:
        stderr.addFilter(SERVE_CONTEXT)
    root.addHandler(stderr)
    if not config.log_to_file:
        return None

    def where() -> Path:
        path = log_file_path(config)
        assert path is not None  # log_to_file is set
        return path

    handler = LazyRotatingFileHandler(where)
    handler.setFormatter(RedactingFormatter(SERVE_FILE_FORMAT if serving else FILE_FORMAT, redact))
    if serving:
        handler.addFilter(SERVE_CONTEXT)
    root.addHandler(handler)
    return handler
