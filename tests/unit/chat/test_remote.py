"""`chat --connect`'s own pieces: the token's sources and the cookie jar kept across reconnects."""

from __future__ import annotations

from pathlib import Path

import pytest

from acp_server.chat.remote import CookieJar, RemoteAgent, read_token

pytestmark = pytest.mark.timeout(10)

TOKEN = "T" * 30


def private(path: Path, text: str, mode: int = 0o600) -> str:
    path.write_text(text)
    path.chmod(mode)
    return str(path)


def test_a_token_file_holds_the_token_alone_or_one_token_file_line(tmp_path: Path) -> None:
    assert read_token(private(tmp_path / "alone", f"{TOKEN}\n"), {}) == TOKEN
    line = f"# mine\n\nalice {TOKEN} /srv/project\n"
    assert read_token(private(tmp_path / "line", line), {}) == TOKEN


def test_a_token_file_with_several_lines_or_open_to_others_is_refused_without_repeating_a_token(
    tmp_path: Path,
) -> None:
    with pytest.raises(ValueError, match="holds 2 lines") as several:
        read_token(private(tmp_path / "two", f"alice {TOKEN}\nbob {'U' * 30}\n"), {})
    with pytest.raises(ValueError, match="chmod 600") as open_to_others:
        read_token(private(tmp_path / "open", f"{TOKEN}\n", 0o644), {})
    assert TOKEN not in str(several.value) + str(open_to_others.value)


def test_without_a_token_file_the_token_comes_from_the_environment_or_nowhere() -> None:
    assert read_token(None, {"ACP_SERVER_TOKEN": f" {TOKEN}\n"}) == TOKEN
    with pytest.raises(ValueError, match="--token-file"):
        read_token(None, {})


def test_cookies_set_by_an_answer_are_sent_back_to_the_same_server_as_a_browser_would() -> None:
    jar = CookieJar()
    url = "ws://127.0.0.1:8765/acp"
    assert jar.header(url) is None
    jar.remember(url, ["acp_replica=r1; Path=/", "lb=abc; Path=/other", "secret=x; Secure"])
    assert jar.header(url) == "acp_replica=r1"  # not another path's cookie, nor a Secure one over ws://
    assert jar.header("wss://127.0.0.1:8765/acp") == "acp_replica=r1; secret=x"
    assert jar.header("ws://example.org/acp") is None, "another host's cookies stay there"
    jar.remember(url, ["acp_replica=r2; Path=/"])
    assert jar.header(url) == "acp_replica=r2", "a new value replaces the old one"
    jar.remember(url, ["acp_replica=gone; Path=/; Max-Age=0"])
    assert jar.header(url) is None, "an expired cookie is forgotten"


def test_the_remote_agents_repr_never_shows_the_token() -> None:
    assert TOKEN not in repr(RemoteAgent("ws://127.0.0.1:1/acp", TOKEN))
