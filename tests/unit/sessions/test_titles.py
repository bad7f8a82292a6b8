"""Titles made from a prompt's first words (sessions/slash_commands.py `prompt_title`): one short line, trimmed."""

from __future__ import annotations

import pytest

from acp_server.agent.sessions.slash_commands import MAX_TITLE_CHARS, prompt_title


@pytest.mark.parametrize(
    ("text", "title"),
    [
        ("please fix the flaky login test today", "please fix the flaky login test"),
        ("  Fix\n\n the   parser\tplease  ", "Fix the parser please"),
        ("hi", "hi"),
        ("", None),
        (" \n\t ", None),
    ],
)
def test_a_title_is_the_first_six_words_on_one_trimmed_line(text: str, title: str | None) -> None:
    assert prompt_title(text) == title


def test_a_title_of_long_words_is_cut_at_a_space_with_an_ellipsis() -> None:
    title = prompt_title("refactor " + "x" * 50 + " and " + "y" * 50)
    assert title is not None and len(title) <= MAX_TITLE_CHARS
    assert title == "refactor " + "x" * 50 + " and…"


def test_a_single_word_longer_than_a_title_is_cut_with_an_ellipsis() -> None:
    title = prompt_title("z" * 500)
    assert title == "z" * (MAX_TITLE_CHARS - 1) + "…"
