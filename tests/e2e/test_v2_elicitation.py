"""`ask_user` on ACP v2 (ACP-V2.md §15), end to end over stdio: for a client that advertised
`capabilities.elicitation.form`, the question goes out as a session-scoped form `elicitation/create` tied to the
tool call, the foreground state is `requires_action` while it waits and `running` once answered; a `session/cancel`
withdraws it (`$/cancel_request`) before `idle cancelled`, and a late answer is ignored. A client that advertised
no forms (`{}`) gets the question in the reply, as on v1."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from acp_server.runtime.tools.ask import WAIT_FOR_THE_USER
from tests.conftest import StartServer
from tests.e2e.test_ask_user import LINK_QUESTION, QUESTION, SCHEMA, final, text_of
from tests.e2e.test_interrupts import position
from tests.e2e.test_v2_cancel import is_state
from tests.support.harness import DEFAULT_ARGS, LONG_GRACE_ARGS, T_ACK, T_WAIT, W_QUIET, RawClient

pytestmark = pytest.mark.timeout(40)

FORMS: dict[str, Any] = {"elicitation": {"form": {}}}


async def open_v2(
    start_server: StartServer, capabilities: dict[str, Any] | None, args: tuple[str, ...] = DEFAULT_ARGS
) -> tuple[RawClient, str]:
    client = await start_server(*args)
    await client.initialize_v2(capabilities)
    return client, await client.new_session_v2()


def is_question(message: dict[str, Any]) -> bool:
    return message.get("method") == "elicitation/create" and "id" in message


async def test_ask_user_is_a_v2_form_elicitation_between_requires_action_and_running(
    start_server: StartServer,
) -> None:
    client, session = await open_v2(start_server, FORMS)
    await client.prompt(session, [{"tool": "ask_user", "args": QUESTION}, {"say": "releasing"}])
    asked = await client.wait_for(is_question)
    [call] = client.updates(session, "tool_call_update")[:1]
    assert asked["params"] == {
        "sessionId": session,
        "toolCallId": call["toolCallId"],
        "mode": "form",
        "message": "Which branch should I release from?",
        "requestedSchema": SCHEMA,
    }
    blocked = await client.wait_for(is_state(session, "requires_action"))
    assert position(client, blocked) < position(client, asked)
    await client.send({"id": asked["id"], "result": {"action": "accept", "content": {"branch": "dev", "tag": True}}})
    idle = await client.idle(session, timeout=T_WAIT)
    assert idle["params"]["update"]["stopReason"] == "end_turn"
    resumed = [m for m in client.received if is_state(session, "running")(m)]
    assert position(client, asked) < position(client, resumed[-1]) < position(client, idle)
    assert [u["state"] for u in client.states(session)] == ["running", "requires_action", "running", "idle"]
    closing = final(client, session)
    assert text_of(closing) == 'The user answered: {"branch":"dev","tag":true}'
    assert "releasing" in "".join(client.texts(session))


async def test_a_cancel_withdraws_the_question_before_idle_cancelled_and_a_late_answer_is_ignored(
    start_server: StartServer,
) -> None:
    # LONG_GRACE: an idle within T_ACK then means at once, never the cleanup deadline.
    client, session = await open_v2(start_server, FORMS, LONG_GRACE_ARGS)
    await client.prompt(session, [{"tool": "ask_user", "args": QUESTION}, {"say": "never"}])
    asked = await client.wait_for(is_question)
    sent = await client.cancel(session)
    idle = await client.idle(session)
    assert client.arrival_time(idle) - sent <= T_ACK
    assert idle["params"]["update"]["stopReason"] == "cancelled"
    [withdrawn] = [m for m in client.received if m.get("method") == "$/cancel_request"]
    assert withdrawn["params"] == {"requestId": asked["id"]}
    assert position(client, withdrawn) < position(client, idle)
    assert [u["state"] for u in client.states(session)] == ["running", "requires_action", "idle"]
    count = len(client.received)
    await client.send({"id": asked["id"], "result": {"action": "accept", "content": {"branch": "main"}}})
    await asyncio.sleep(W_QUIET)
    assert [m for m in client.received[count:] if m.get("method") != "_scripted/probe"] == []
    assert "never" not in "".join(client.texts(session))
    # The session is ready for the next prompt.
    await client.prompt(session, [{"say": "ok"}])
    assert (await client.idle(session, 2, timeout=T_WAIT))["params"]["update"]["stopReason"] == "end_turn"


async def test_without_the_form_marker_the_question_is_in_the_reply(start_server: StartServer) -> None:
    client, session = await open_v2(start_server, {"elicitation": {}})  # `{}` advertises no mode
    await client.prompt(session, [{"tool": "ask_user", "args": QUESTION}])
    await client.idle(session, timeout=T_WAIT)
    assert [m for m in client.received if m.get("method") == "elicitation/create"] == []
    assert "Which branch should I release from?" in "".join(client.texts(session))
    assert text_of(final(client, session)) == WAIT_FOR_THE_USER
    assert "requires_action" not in [u["state"] for u in client.states(session)]


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
