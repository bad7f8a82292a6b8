"""`chat.permissions.Questions`: the agent's questions one at a time, and what withdrawing one does.

A question waiting its turn behind another on screen is not open yet, so the agent's `$/cancel_request` for it must
be kept until its turn comes, or the question is shown after the agent stopped waiting for it. The e2e tests ask
one question at a time (tests/e2e/test_chat_pty.py); these drive the queue directly.
"""

from __future__ import annotations

from typing import Any, cast

import anyio

from acp_server.chat.permissions import CANCELLED, Questions
from acp_server.chat.render import Renderer
from acp_server.chat.terminal import LineInput
from tests.support.harness import scaled
from tests.unit.chat.fakes import Keyboard, Screen

OPTIONS = [
    {"optionId": "allow", "name": "Allow", "kind": "allow_once"},
    {"optionId": "reject", "name": "Reject", "kind": "reject_once"},
]


def permission(title: str) -> dict[str, Any]:
    return {"sessionId": "s", "toolCall": {"toolCallId": title, "title": title}, "options": OPTIONS}


def selected(option_id: str) -> dict[str, Any]:
    return {"outcome": {"outcome": "selected", "optionId": option_id}}


async def test_a_question_withdrawn_while_it_waits_its_turn_is_never_shown() -> None:
    screen, keyboard = Screen(), Keyboard()
    questions = Questions(Renderer(screen), cast(LineInput, keyboard))
    answers: dict[int, dict[str, Any]] = {}

    async def ask(request_id: int, title: str) -> None:
        answers[request_id] = await questions.ask(permission(title), request_id)

    try:
        with anyio.fail_after(scaled(10)):
            async with anyio.create_task_group() as tasks:
                tasks.start_soon(ask, 1, "first")
                await anyio.wait_all_tasks_blocked()
                tasks.start_soon(ask, 2, "second")  # behind the first, which is on screen
                await anyio.wait_all_tasks_blocked()
                questions.withdraw(2)
                keyboard.type("1")
                await anyio.wait_all_tasks_blocked()
                assert answers == {1: selected("allow"), 2: CANCELLED}
                tasks.cancel_scope.cancel()
    finally:
        keyboard.close()
    assert "first" in screen.out
    assert "second" not in screen.out


async def test_a_question_withdrawn_before_its_request_is_served_is_never_shown() -> None:
    screen, keyboard = Screen(), Keyboard()
    questions = Questions(Renderer(screen), cast(LineInput, keyboard))
    questions.withdraw("q")  # the reader handles it inline, before the request's own task has started
    try:
        with anyio.fail_after(scaled(10)):
            assert await questions.ask(permission("unseen"), "q") == CANCELLED
    finally:
        keyboard.close()
    assert "unseen" not in screen.out


async def test_a_superscript_digit_is_asked_again_not_a_crash() -> None:
    screen, keyboard = Screen(), Keyboard()
    questions = Questions(Renderer(screen), cast(LineInput, keyboard))
    for line in ("²", "2"):  # "²".isdigit() is true, but int("²") raises
        keyboard.type(line)
    try:
        with anyio.fail_after(scaled(10)):
            assert await questions.ask(permission("write"), 7) == selected("reject")
    finally:
        keyboard.close()
    assert screen.out.count("choose 1-2: ") == 2
