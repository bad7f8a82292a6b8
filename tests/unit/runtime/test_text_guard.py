"""The text guard's streaming parts: a secret or a surrogate pair split anywhere across chunks is caught, and no more
than (longest secret - 1) characters are ever held back. (End to end: test_secrets_e2e.py, test_unicode_e2e.py.)"""

from __future__ import annotations

import pytest

from acp_server.runtime.child_env import ChildEnvPolicy, child_environment
from acp_server.runtime.text_guard import (
    REDACTED,
    SurrogateJoiner,
    redactor_for,
    sanitize_text,
)

pytestmark = pytest.mark.timeout(30)

SECRETS = ("sk-abcdefgh-1234", "sk-abcdefgh-1234-longer", "other-secret-99")
TEXT = "a sk-abcdefgh-1234-longer b sk-abcdefgh-1234 c other-secret-99other-secret-99 sk-abcdefgh-12 d"


def test_the_redactor_replaces_exact_values_longest_first_and_ignores_short_ones() -> None:
    redactor = redactor_for((*SECRETS, "short"))
    assert redactor.redact(TEXT) == f"a {REDACTED} b {REDACTED} c {REDACTED}{REDACTED} sk-abcdefgh-12 d"
    assert redactor.redact("a short word") == "a short word"  # under MIN_REDACTED_CHARS: left alone


@pytest.mark.parametrize("size", [1, 2, 3, 5, 8, 13])
def test_a_stream_split_anywhere_redacts_exactly_as_the_whole_text_and_holds_back_little(size: int) -> None:
    redactor = redactor_for(SECRETS)
    for offset in range(size):
        stream = redactor.stream()
        pieces = [TEXT[:offset], *(TEXT[i : i + size] for i in range(offset, len(TEXT), size))]
        out = ""
        for piece in pieces:
            out += stream.feed(piece)
            assert redactor.redact(TEXT).startswith(out)  # what was given out is final
            assert len(stream._buffer) <= redactor.longest - 1  # what is held back, at most
        out += stream.flush()
        assert out == redactor.redact(TEXT)


def test_ordinary_text_streams_through_and_only_a_possible_start_of_a_secret_waits() -> None:
    stream = redactor_for(SECRETS).stream()
    assert stream.feed("Hello ") == "Hello "
    assert stream.feed("from sk-abc") == "from "  # might be the start of a key: held back
    assert stream.feed("xyz ") == "sk-abcxyz "
    assert stream.feed("other-secret-99") == ""  # whole, yet held: what follows may make it part of a longer one
    assert stream.flush() == REDACTED


def test_surrogates_are_joined_in_pairs_and_lone_ones_replaced() -> None:
    assert sanitize_text("plain") == "plain"
    assert sanitize_text("\ud83d\ude00") == "\U0001f600"
    assert sanitize_text("a\ud800b\udc00") == "a\ufffdb\ufffd"
    joiner = SurrogateJoiner()
    assert joiner.feed("smile \ud83d") == "smile "
    assert joiner.feed("\ude00!") == "\U0001f600!"
    assert joiner.feed("\ud83d") == ""
    assert joiner.feed("x") == "\ufffdx"
    assert joiner.feed("\udbff") == ""
    assert joiner.flush() == "\ufffd"


def test_the_child_environment_drops_the_servers_secrets_and_denied_names_only() -> None:
    policy = ChildEnvPolicy(frozenset({"OPENAI_API_KEY"}), frozenset({"held-secret-value"}), ("AWS_*", "NPM_TOKEN"))
    base = {
        "OPENAI_API_KEY": "x",
        "ELSEWHERE": "held-secret-value",
        "AWS_SECRET_ACCESS_KEY": "a",
        "NPM_TOKEN": "n",
        "NPM_TOKENS": "kept",
        "GITHUB_TOKEN": "g",
        "PATH": "/bin",
    }
    assert child_environment(policy, base) == {"NPM_TOKENS": "kept", "GITHUB_TOKEN": "g", "PATH": "/bin"}
