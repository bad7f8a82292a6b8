"""The log file: written where editors cannot lose it, rotated, opened only when there is something to log, turned
off on request, and never holding a secret (on stderr either).

Unit tests drive the real `logging` machinery and real files; the end-to-end ones start the real server and make it
log text a client chose (an unknown notification's method name, logged at debug), with a key in it.
"""

from __future__ import annotations

import logging
import os
import re
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from acp_server.settings import logfile
from acp_server.settings.logfile import (
    REDACTED,
    LazyRotatingFileHandler,
    RedactingFormatter,
    Redactor,
    setup_logging,
)
from tests.conftest import StartServer

KEY = "sk-proj-Zt8kQ2vX9mLp4RwN7yHc"


# --- redaction ---


@pytest.mark.parametrize(
    ("text", "kept"),
    [
        (f"calling with {KEY} now", "calling with"),
        ("Authorization: Bearer eyJhbGciOiJIUzI1NiJ9.payload.sig", "Authorization: Bearer"),
        ("headers={'authorization': 'Bearer abc.def-ghi_jkl'}", "'authorization': 'Bearer"),
        ('{"api_key": "my-private-value-123"}', '"api_key": "'),
        ("x-api-key=anthropic-secret-value&stream=true", "&stream=true"),
        ("GET /v1?access_token=tok3n-value-12345 HTTP/1.1", "HTTP/1.1"),
        ("password: hunter2hunter2", "password:"),
        ("token ghp_abcdefghijklmnopqrstuvwxyz0123456789 used", "used"),
        ("slack xoxb-1234567890-abcdefghij here", "here"),
        ("google AIzaSyA1234567890abcdefghijklmnopqrstuv key", "google"),
        # Issue 20 item 8: the SDKs log each request's URL, credentials and all.
        (
            "Sending HTTP Request: GET http://me:hunter2x@127.0.0.1:8080/v1/models",
            "http://me:[REDACTED]@127.0.0.1:8080",
        ),
        ("URL('https://:hunter2x@host.example/v1')", "https://:[REDACTED]@host.example/v1"),
        ("HTTP Request: POST https://tok3nAsUser@git.example/x", "https://[REDACTED]@git.example/x"),
    ],
)
def test_secrets_are_removed_and_what_they_were_is_kept(text: str, kept: str) -> None:
    redacted = Redactor()(text)
    assert REDACTED in redacted
    assert kept in redacted
    for secret in (KEY, "eyJhbGci", "abc.def", "my-private", "anthropic-secret", "tok3n", "hunter2", "ghp_", "xoxb-"):
        assert secret not in redacted


def _every_pattern(text: str) -> str:
    for _, pattern, replacement in logfile._PATTERNS:
        text = pattern.sub(replacement, text)
    return text


@pytest.mark.parametrize(
    "text",
    [
        "pa\u017f\u017fword: hunter2hunter2",  # the long s, which `(?i)s` matches
        "AUTHOR\u0130ZATION: Bearer eyJhbGciOiJIUzI1NiJ9",  # the dotted capital I
        "author\u0131zation=Basic dXNlcjpwYXNzd29yZA",  # the dotless i
        "API_\u212aEY=some-private-value",  # the Kelvin sign, which lowers to k
        "ACCESS-TOKEN: abcdefghijkl",
        "HTTPS://ME:HUNTER2X@HOST.EXAMPLE/v1",
        "nothing secret here, a connection opened (principal alice, peer 127.0.0.1:5000)",
    ],
)
def test_the_words_that_gate_each_pattern_never_hide_a_match(text: str) -> None:
    # The gates only save work: whatever the eight patterns would remove, the gated redactor removes too.
    assert Redactor()(text) == _every_pattern(text)


def test_every_character_that_case_insensitive_matching_takes_for_a_letter_is_folded_to_it() -> None:
    # The gates compare lowercased text with lowercase words, the patterns match with `(?i)`: every code point `(?i)`
    # takes for an ASCII letter must fold to that letter, or a gate could miss what its pattern matches.
    letter = re.compile("(?i)[a-z]")
    for code in range(sys.maxunicode + 1):
        char = chr(code)
        if letter.fullmatch(char):
            folded = char.translate(logfile._FOLD).lower()
            assert len(folded) == 1, (hex(code), folded)
            assert re.fullmatch(f"(?i){folded}", char) and folded.isascii(), (hex(code), folded)


@pytest.mark.parametrize(
    "text",
    [
        "max_tokens=4096 temperature=0.2",
        'api_key_env = "MY_OPENAI_KEY"',
        "disk-usage of task-runner is fine",
        "the api_key is missing: set OPENAI_API_KEY",
        "session 3f2a-bb: 12 turns, tokens used 4096",
        "GET http://127.0.0.1:8080/v1/models@latest and mailto:someone@example.com",
    ],
)
def test_ordinary_text_is_left_alone(text: str) -> None:
    assert Redactor()(text) == text


def test_known_secret_values_are_removed_whatever_their_shape() -> None:
    redact = Redactor(["plainpassword99", "short"])
    assert redact("the value plainpassword99 leaked") == f"the value {REDACTED} leaked"


def test_tracebacks_are_redacted_too() -> None:
    formatter = RedactingFormatter("%(message)s", Redactor())
    try:
        raise RuntimeError(f"the provider said no to {KEY}")
    except RuntimeError:
        record = logging.LogRecord("x", logging.ERROR, __file__, 1, "failed", None, sys.exc_info())
    text = formatter.format(record)
    assert "RuntimeError" in text and "the provider said no to" in text and KEY not in text


def test_the_secrets_the_server_knows_are_collected_from_environment_and_file() -> None:
    from acp_server.settings.files import secret_values

    document = {
        "providers": {"openai": {"api_key": "file-openai-key-1"}, "anthropic": {"api_key_env": "MY_CLAUDE"}},
        "mcp_servers": {
            "gh": {"command": "x", "env": {"GITHUB_TOKEN": "gh-token-value-1", "LOG_LEVEL": "debug-verbose"}},
            "web": {"url": "http://x", "headers": {"Authorization": "Bearer web-token-1", "Accept": "text/plain1"}},
        },
    }
    env = {"OPENAI_API_KEY": "env-openai-key-1", "MY_CLAUDE": "named-claude-key-1", "SHORT_KEY": "abc", "HOME": "/h"}
    found = set(secret_values(document, env))
    expected = {"file-openai-key-1", "gh-token-value-1", "Bearer web-token-1", "env-openai-key-1"}
    assert expected | {"named-claude-key-1"} <= found
    assert not found & {"debug-verbose", "text/plain1", "abc", "/h"}


# --- the file handler ---


@pytest.fixture
def logger() -> Iterator[logging.Logger]:
    log = logging.getLogger("acp_server.test_logfile")
    log.propagate = False
    log.setLevel(logging.DEBUG)
    yield log
    for handler in list(log.handlers):
        log.removeHandler(handler)
        handler.close()


def test_the_file_and_its_directory_appear_only_with_the_first_record(tmp_path: Path, logger: logging.Logger) -> None:
    path = tmp_path / "deep" / "logs" / "acp-server.log"
    handler = LazyRotatingFileHandler(lambda: path)
    handler.setFormatter(RedactingFormatter("%(process)d %(message)s", Redactor()))
    logger.addHandler(handler)
    assert not path.parent.exists()
    logger.warning("first with %s", KEY)
    handler.flush()
    assert path.read_text() == f"{os.getpid()} first with {REDACTED}\n"


def test_the_file_rotates_and_keeps_a_few_old_ones(tmp_path: Path, logger: logging.Logger) -> None:
    path = tmp_path / "acp-server.log"
    handler = LazyRotatingFileHandler(lambda: path, max_bytes=1000, backups=2)
    handler.setFormatter(logging.Formatter("%(message)s"))
    logger.addHandler(handler)
    for n in range(100):
        logger.warning("line %03d %s", n, "x" * 80)
    handler.flush()
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == ["acp-server.log", "acp-server.log.1", "acp-server.log.2"]
    assert all(p.stat().st_size <= 1000 for p in tmp_path.iterdir())
    assert "line 099" in path.read_text()


def test_a_log_file_that_cannot_be_written_is_said_once_and_costs_nothing(
    tmp_path: Path, logger: logging.Logger, capsys: pytest.CaptureFixture[str]
) -> None:
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("")
    handler = LazyRotatingFileHandler(lambda: blocker / "acp-server.log")
    logger.addHandler(handler)
    logger.warning("one")
    logger.warning("two")
    err = capsys.readouterr().err
    assert err.count("cannot write the log file") == 1 and str(blocker) in err


def test_setup_logging_sends_records_to_stderr_and_the_file_both_redacted(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from acp_server.settings.config import Config

    root = logging.getLogger()
    before = list(root.handlers), root.level
    path = tmp_path / "x.log"
    handler = setup_logging(Config(log_level="info", log_file=str(path)), secrets=["custom-secret-value"])
    try:
        logging.getLogger("acp_server.somewhere").info("key %s and custom-secret-value", KEY)
        assert handler is not None
        handler.flush()
    finally:
        for added in [h for h in root.handlers if h not in before[0]]:
            root.removeHandler(added)
            added.close()
        root.setLevel(before[1])
    for text in (path.read_text(), capsys.readouterr().err):
        assert f"acp_server.somewhere: key {REDACTED} and {REDACTED}" in text
        assert KEY not in text and "custom-secret-value" not in text


# --- end to end ---


def log_files(root: Path) -> list[Path]:
    return sorted(root.rglob("*.log*"))


async def leak_through_a_debug_log(
    start_server: StartServer, *args: str, env: dict[str, str], secret: str = KEY
) -> str:
    """Start a server logging at debug, send a notification whose method names a secret (the server logs ignored
    notifications' methods at debug), close it, and return its stderr."""
    server = await start_server("--model", "echo", "--log-level", "debug", *args, env=env)
    await server.initialize()
    await server.notify(f"_unknown/{secret}")
    await server.call("session/new", {"cwd": "/tmp", "mcpServers": []})
    await server.close()
    return server.stderr_text


async def test_the_server_logs_to_the_file_with_secrets_removed(start_server: StartServer, tmp_path: Path) -> None:
    path = tmp_path / "logs" / "acp-server.log"
    config = tmp_path / "config.toml"
    config.write_text('[providers.anthropic]\napi_key = "plain-file-key-4711"\n')
    env = {
        "ACP_SERVER_LOG_FILE": str(path),
        "ACP_SERVER_CONFIG": str(config),
        "OPENAI_API_KEY": "plain-env-key-0815",
        "GITHUB_TOKEN": "plain-github-token-42",
    }
    stderr = await leak_through_a_debug_log(
        start_server, env=env, secret=f"{KEY}/plain-env-key-0815/plain-file-key-4711/plain-github-token-42"
    )
    text = path.read_text()
    assert f"ignored notification _unknown/{REDACTED}/{REDACTED}/{REDACTED}/{REDACTED}" in text
    # Each line names its process: several editor windows may share the file.
    assert re.search(r"^\S+ \S+ \d+ DEBUG acp_server\.", text, re.MULTILINE), text[:300]
    for output in (text, stderr):
        for secret in (KEY, "plain-env-key", "plain-file-key", "plain-github-token"):
            assert secret not in output


async def test_without_a_path_the_file_goes_to_the_users_log_directory(
    start_server: StartServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import platformdirs

    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    expected = Path(platformdirs.user_log_dir("acp-server", appauthor=False)) / "acp-server.log"
    assert expected.is_relative_to(tmp_path)
    # An empty ACP_SERVER_LOG_FILE counts as unset (it overrides the harness's temporary path).
    await leak_through_a_debug_log(
        start_server, env={"ACP_SERVER_LOG_FILE": "", "XDG_STATE_HOME": str(tmp_path / "state")}
    )
    assert f"ignored notification _unknown/{REDACTED}" in expected.read_text()
    assert log_files(tmp_path) == [expected]


@pytest.mark.parametrize(
    ("args", "env", "config"),
    [
        (("--no-log-file",), {}, ""),
        ((), {"ACP_SERVER_LOG_FILE": "off"}, ""),
        ((), {"ACP_SERVER_LOG_FILE": ""}, "log_file = false\n"),
    ],
    ids=["flag", "environment", "config-file"],
)
async def test_the_log_file_can_be_turned_off(
    start_server: StartServer, tmp_path: Path, args: tuple[str, ...], env: dict[str, str], config: str
) -> None:
    (tmp_path / "config.toml").write_text(config)
    full_env = {"XDG_STATE_HOME": str(tmp_path / "state"), "ACP_SERVER_CONFIG": str(tmp_path / "config.toml"), **env}
    stderr = await leak_through_a_debug_log(start_server, *args, env=full_env)
    assert "ignored notification" in stderr  # it did log, to stderr only
    assert log_files(tmp_path) == []
