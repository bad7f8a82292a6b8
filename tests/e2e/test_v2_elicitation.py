"""`ask_user` on ACP v2 (ACP-V2.md §15), end to end: a link question is a session-scoped URL `elicitation/create`
tied to the tool call, the foreground state `requires_action` while it waits and `running` once answered. The form
question, its cancel and the no-forms fallback hold on v1 and v2 alike: test_ask_user.py runs them as both."""

from __future__ import annotations

from typing import Any

import pytest

from tests.conftest import StartServer
from tests.e2e.test_ask_user import LINK_QUESTION, final, text_of
from tests.e2e.test_interrupts import position
from tests.e2e.test_v2_cancel import is_state
from tests.support.harness import DEFAULT_ARGS, T_WAIT, RawClient

pytestmark = pytest.mark.timeout(40)


async def open_v2(
    start_server: StartServer, capabilities: dict[str, Any] | None, args: tuple[str, ...] = DEFAULT_ARGS
) -> tuple[RawClient, str]:
    client = await start_server(*args)
    await client.initialize_v2(capabilities)
    return client, await client.new_session_v2()


def is_question(message: dict[str, Any]) -> bool:
    return message.get("method") == "elicitation/create" and "id" in message


async def test_a_link_question_is_a_v2_url_elicitation_between_requires_action_and_running(
    start_server: StartServer,
) -> None:
    client, session = await open_v2(start_server, {"elicitation": {"url": {}}})
    await client.prompt(session, [{"tool": "ask_user", "args": LINK_QUESTION}, {"say": "thanks"}])
    asked = await client.wait_for(is_question)
    [call] = client.updates(session, "tool_call_update")[:1]
    assert asked["params"]["mode"] == "url" and asked["params"]["url"] == LINK_QUESTION["url"]
    assert asked["params"]["toolCallId"] == call["toolCallId"] and asked["params"]["elicitationId"]
    blocked = await client.wait_for(is_state(session, "requires_action"))
    assert position(client, blocked) < position(client, asked)
    await client.send({"id": asked["id"], "result": {"action": "decline"}})
    idle = await client.idle(session, timeout=T_WAIT)
    assert idle["params"]["update"]["stopReason"] == "end_turn"
    assert [u["state"] for u in client.states(session)] == ["running", "requires_action", "running", "idle"]
    assert "declined" in text_of(final(client, session))
