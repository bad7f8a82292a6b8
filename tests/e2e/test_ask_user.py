"""`ask_user` end to end: a structured question through `elicitation/create` (form mode) for a client that
advertises `elicitation.form`, the plain-text fallback for one that does not, the user's answer, decline or dismissal
reaching the model as such, and a cancel retracting an open question exactly as it retracts a permission request
(docs/interrupts.md I8): `$/cancel_request` before the work ends `cancelled`, a late answer ignored. The tests that
hold on v1 and v2 alike take `version` (ids v1/v2; v2 adds the `requires_action` state, ACP-V2.md §15); what only
v2 has is in test_v2_elicitation.py.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from acp_server.runtime.tools.ask import NO_SECRETS_IN_FORMS, WAIT_FOR_THE_USER
from tests.conftest import StartServer
from tests.e2e.test_interrupts import position
from tests.e2e.test_v2_cancel import is_state
from tests.support.fake_openai import FakeOpenAI, text_reply, tool_call_reply
from tests.support.harness import DEFAULT_ARGS, LONG_GRACE_ARGS, T_ACK, T_WAIT, W_QUIET, RawClient, scaled
from tests.support.versions import VERSIONS, Acp, AcpV2

FORMS: dict[str, Any] = {"elicitation": {"form": {}}}
# A client that advertised no forms, by version: v1 says nothing of elicitation, v2 advertises it with no mode (`{}`).
NO_FORMS: dict[str, dict[str, Any] | None] = {"v1": None, "v2": {"elicitation": {}}}
QUESTION = {
    "question": "Which branch should I release from?",
    "fields": [
        {"name": "branch", "title": "Branch", "choices": ["main", "dev"]},
        {"name": "tag", "type": "boolean", "description": "also tag it", "required": False},
    ],
}
SCHEMA = {
    "type": "object",
    "properties": {
        "branch": {"type": "string", "title": "Branch", "enum": ["main", "dev"]},
        "tag": {"type": "boolean", "description": "also tag it"},
    },
    "required": ["branch"],
}


async def open_acp(
    start_server: StartServer,
    capabilities: dict[str, Any] | None,
    args: tuple[str, ...] = DEFAULT_ARGS,
    *,
    version: str = "v1",
) -> tuple[Acp, str]:
    """A server initialized in `version` with these client capabilities, and a new session."""
    acp = VERSIONS[version](await start_server(*args))
    await acp.initialize(capabilities)
    return acp, await acp.new_session()


async def open_client(
    start_server: StartServer, capabilities: dict[str, Any] | None, args: tuple[str, ...] = DEFAULT_ARGS
) -> tuple[RawClient, str]:
    acp, session = await open_acp(start_server, capabilities, args)
    return acp.client, session


async def next_question(client: RawClient) -> dict[str, Any]:
    return await client.wait_for(lambda m: m.get("method") == "elicitation/create" and "id" in m)


def final(client: RawClient, session: str) -> dict[str, Any]:
    [closing] = [
        u
        for u in client.updates(session, "tool_call_update")
        if u.get("status") in ("completed", "failed", "cancelled")
    ]
    return closing


def text_of(update: dict[str, Any]) -> str:
    [block] = update["content"]
    text: str = block["content"]["text"]
    return text


async def test_ask_user_sends_a_form_elicitation_and_the_answer_is_the_tool_result(
    start_server: StartServer, version: str
) -> None:
    """For a client that advertised `elicitation.form`, the question is a form `elicitation/create` tied to the tool
    call; the answer is the tool's result and the turn goes on (on v2 the state is `requires_action` from before the
    question until the answer, then `running`, ACP-V2.md §15)."""
    acp, session = await open_acp(start_server, FORMS, version=version)
    client = acp.client
    turn = await acp.prompt(session, [{"tool": "ask_user", "args": QUESTION}, {"say": "releasing"}])
    asked = await next_question(client)
    [call] = acp.calls_started(session)
    assert asked["params"] == {
        "sessionId": session,
        "toolCallId": call["toolCallId"],
        "mode": "form",
        "message": "Which branch should I release from?",
        "requestedSchema": SCHEMA,
    }
    assert call["title"] == "Ask: Which branch should I release from?"
    if isinstance(acp, AcpV2):
        blocked = await client.wait_for(is_state(session, "requires_action"))
        assert position(client, blocked) < position(client, asked)
    await client.send({"id": asked["id"], "result": {"action": "accept", "content": {"branch": "dev", "tag": True}}})
    end = await acp.stopped(turn, "end_turn", timeout=T_WAIT)
    if isinstance(acp, AcpV2):
        resumed = [m for m in client.received if is_state(session, "running")(m)]
        assert position(client, asked) < position(client, resumed[-1]) < position(client, end)
        assert acp.states(session) == ["running", "requires_action", "running", "idle"]
    closing = final(client, session)
    assert closing["status"] == "completed"
    assert text_of(closing) == 'The user answered: {"branch":"dev","tag":true}'
    assert closing["rawOutput"] == {"action": "accept", "content": {"branch": "dev", "tag": True}}
    assert client.texts(session) == ["releasing"]


@pytest.mark.parametrize(("action", "words"), [("decline", "declined"), ("cancel", "dismissed")])
async def test_a_declined_or_dismissed_question_reaches_the_model_as_such(
    start_server: StartServer, action: str, words: str
) -> None:
    client, session = await open_client(start_server, FORMS)
    prompt = await client.prompt(session, [{"tool": "ask_user", "args": {"question": "Name?"}}, {"say": "ok"}])
    asked = await next_question(client)
    assert asked["params"]["requestedSchema"] == {
        "type": "object",
        "properties": {"answer": {"type": "string", "title": "Answer"}},
        "required": ["answer"],
    }
    await client.send({"id": asked["id"], "result": {"action": action}})
    assert (await client.response(prompt))["result"] == {"stopReason": "end_turn"}
    closing = final(client, session)
    assert words in text_of(closing)
    assert closing["rawOutput"] == {"action": action}


async def test_without_forms_the_question_is_in_the_reply_and_the_model_is_told_to_wait(
    start_server: StartServer, version: str
) -> None:
    """A client that advertised no forms (v1: no `elicitation`; v2: `elicitation: {}`, no mode) is asked nothing:
    the question is in the reply, the model is told to wait for the user (on v2 the work never `requires_action`)."""
    acp, session = await open_acp(start_server, NO_FORMS[version], version=version)
    client = acp.client
    await acp.stopped(await acp.prompt(session, [{"tool": "ask_user", "args": QUESTION}]), "end_turn", timeout=T_WAIT)
    assert [m for m in client.received if m.get("method") == "elicitation/create"] == []
    shown = "".join(client.texts(session))
    assert "Which branch should I release from?" in shown
    assert "- Branch (one of: main, dev)" in shown and "- tag: also tag it" in shown
    assert text_of(final(client, session)) == WAIT_FOR_THE_USER
    if isinstance(acp, AcpV2):
        assert "requires_action" not in acp.states(session)


async def test_a_cancel_retracts_an_open_question_and_a_late_answer_is_ignored(
    start_server: StartServer, version: str
) -> None:
    """docs/interrupts.md I8 for a question: the cancel withdraws it (`$/cancel_request`) before the work ends
    `cancelled` within T_ACK (on v2 `requires_action` → `idle`, never `running` again); a late answer writes
    nothing; the session takes the next prompt."""
    # LONG_GRACE: an answer within T_ACK then means at once, never the cleanup deadline.
    acp, session = await open_acp(start_server, FORMS, LONG_GRACE_ARGS, version=version)
    client = acp.client
    turn = await acp.prompt(session, [{"tool": "ask_user", "args": QUESTION}, {"say": "never"}])
    asked = await next_question(client)
    t0 = await client.cancel(session)
    end = await acp.stopped(turn, "cancelled")
    assert client.arrival_time(end) - t0 <= T_ACK
    [retraction] = [m for m in client.received if m.get("method") == "$/cancel_request"]
    assert retraction["params"] == {"requestId": asked["id"]}
    assert client.received.index(retraction) < client.received.index(end)
    assert final(client, session)["status"] == acp.cancelled_call_status
    if isinstance(acp, AcpV2):
        assert acp.states(session) == ["running", "requires_action", "idle"]
    count = len(client.received)
    await client.send({"id": asked["id"], "result": {"action": "accept", "content": {"branch": "main"}}})
    await asyncio.sleep(W_QUIET)
    assert [m for m in client.received[count:] if m.get("method") != "_scripted/probe"] == []
    assert client.texts(session) == []
    # The session is ready for the next prompt.
    await acp.stopped(await acp.prompt(session, [{"say": "ok"}]), "end_turn", timeout=T_WAIT)


@pytest.fixture
def model() -> Iterator[FakeOpenAI]:
    with FakeOpenAI() as server:
        yield server


async def test_a_real_model_reads_the_users_answer_in_its_next_call(
    start_server: StartServer, model: FakeOpenAI, tmp_path: Path
) -> None:
    model.script(
        tool_call_reply(("call_q", "ask_user", ['{"question": "Which colour?"}'])),
        text_reply("Blue it is."),
    )
    env = {"OPENAI_API_KEY": "sk-test", "ACP_SERVER_CONFIG": str(tmp_path / "none.toml")}
    client = await start_server("--model", "openai:fake", "--base-url", model.base_url, env=env)
    await client.initialize(FORMS)
    session = await client.new_session(str(tmp_path))
    prompt = await client.request("session/prompt", {"sessionId": session, "prompt": [{"type": "text", "text": "go"}]})
    asked = await next_question(client)
    assert asked["params"]["toolCallId"] == "call_q"
    await client.send({"id": asked["id"], "result": {"action": "accept", "content": {"answer": "blue"}}})
    assert (await client.response(prompt, scaled(30)))["result"] == {"stopReason": "end_turn"}
    offered = {tool["function"]["name"] for tool in model.requests[0].body["tools"]}
    assert "ask_user" in offered
    second = model.requests[1].body["messages"]
    assert second[-1]["role"] == "tool" and second[-1]["tool_call_id"] == "call_q"
    assert second[-1]["content"] == 'The user answered: {"answer":"blue"}'


async def test_a_subagents_question_names_the_delegate_call_the_client_sees(start_server: StartServer) -> None:
    client, session = await open_client(start_server, FORMS)
    child_script = [{"tool": "ask_user", "args": {"question": "Which file?"}}, {"say": "child done"}]
    prompt = await client.prompt(
        session, [{"tool": "delegate", "args": {"task": "find it", "script": child_script}}, {"say": "parent done"}]
    )
    asked = await next_question(client)
    [delegate] = client.updates(session, "tool_call")
    assert asked["params"]["sessionId"] == session
    assert asked["params"]["toolCallId"] == delegate["toolCallId"]
    await client.send({"id": asked["id"], "result": {"action": "accept", "content": {"answer": "a.txt"}}})
    assert (await client.response(prompt))["result"] == {"stopReason": "end_turn"}


LINKS: dict[str, Any] = {"elicitation": {"url": {}}}
LINK_QUESTION = {
    "question": "Sign in to GitHub to let me open the pull request",
    "url": "https://github.com/login/device",
}


async def test_a_link_question_is_a_url_elicitation_and_accepting_it_is_not_taken_as_done(
    start_server: StartServer,
) -> None:
    """URL mode (ACP `elicitation/create`, `mode: url`) for a client that advertised `elicitation.url`: the link and
    an `elicitationId` of its own; an `accept` tells the model the user agreed to go, not that they finished."""
    client, session = await open_client(start_server, LINKS)
    prompt = await client.prompt(session, [{"tool": "ask_user", "args": LINK_QUESTION}, {"say": "thanks"}])
    asked = await next_question(client)
    [call] = client.updates(session, "tool_call")
    params = asked["params"]
    elicitation_id = params.pop("elicitationId")
    assert isinstance(elicitation_id, str) and elicitation_id.startswith("elic_")
    assert params == {
        "sessionId": session,
        "toolCallId": call["toolCallId"],
        "mode": "url",
        "message": LINK_QUESTION["question"],
        "url": LINK_QUESTION["url"],
    }
    await client.send({"id": asked["id"], "result": {"action": "accept"}})
    assert (await client.response(prompt))["result"] == {"stopReason": "end_turn"}
    closing = final(client, session)
    assert closing["status"] == "completed" and closing["rawOutput"] == {"action": "accept"}
    assert "agreed to open https://github.com/login/device" in text_of(closing)
    assert "does not mean they finished" in text_of(closing)


@pytest.mark.parametrize(
    ("capabilities", "args"),
    [(FORMS, LINK_QUESTION), (LINKS, QUESTION), (None, LINK_QUESTION)],
    ids=["link-to-a-forms-only-client", "form-to-a-links-only-client", "link-to-a-client-without-either"],
)
async def test_a_question_in_a_mode_the_client_did_not_advertise_is_asked_in_the_reply(
    start_server: StartServer, capabilities: dict[str, Any] | None, args: dict[str, Any]
) -> None:
    client, session = await open_client(start_server, capabilities)
    prompt = await client.prompt(session, [{"tool": "ask_user", "args": args}])
    assert (await client.response(prompt))["result"] == {"stopReason": "end_turn"}
    assert [m for m in client.received if m.get("method") == "elicitation/create"] == []
    shown = "".join(client.texts(session))
    assert str(args["question"]) in shown
    if "url" in args:
        assert str(args["url"]) in shown
    assert text_of(final(client, session)) == WAIT_FOR_THE_USER


@pytest.mark.parametrize(
    "field",
    [
        {"name": "api_key"},
        {"name": "githubToken"},
        {"name": "db", "title": "Database password"},
        {"name": "api_keys"},
        {"name": "value", "description": "your AWS secret key"},
    ],
    ids=["api_key", "camel-case-token", "password-in-the-title", "plural", "secret-in-the-description"],
)
async def test_a_form_field_that_asks_for_a_secret_is_refused_and_nothing_is_asked(
    start_server: StartServer, field: dict[str, Any]
) -> None:
    """ACP: form mode is never for secrets; without a link to send the user to, the tool fails safely."""
    client, session = await open_client(start_server, FORMS)
    args = {"question": "I need your credentials", "fields": [field]}
    prompt = await client.prompt(session, [{"tool": "ask_user", "args": args}, {"say": "ok"}])
    assert (await client.response(prompt))["result"] == {"stopReason": "end_turn"}
    assert [m for m in client.received if m.get("method") == "elicitation/create"] == []
    closing = final(client, session)
    assert closing["status"] == "failed" and text_of(closing) == f"error: {NO_SECRETS_IN_FORMS}"


@pytest.mark.parametrize(
    "url",
    [
        "javascript:alert(1)",
        "file:///etc/passwd",
        "https://user:pw@example.com/",
        "https://example.com/a b",
        "https://",
        "http://example.com/login",
    ],
)
async def test_a_link_that_is_not_a_plain_https_link_is_refused_and_nothing_is_asked(
    start_server: StartServer, url: str
) -> None:
    client, session = await open_client(start_server, LINKS)
    prompt = await client.prompt(session, [{"tool": "ask_user", "args": {"question": "Go", "url": url}}, {"say": "ok"}])
    assert (await client.response(prompt))["result"] == {"stopReason": "end_turn"}
    assert [m for m in client.received if m.get("method") == "elicitation/create"] == []
    assert final(client, session)["status"] == "failed"


@pytest.mark.parametrize("field", [{"name": "max_tokens", "type": "integer"}, {"name": "branch"}])
async def test_a_field_that_only_looks_like_a_secret_word_is_asked(
    start_server: StartServer, field: dict[str, Any]
) -> None:
    client, session = await open_client(start_server, FORMS)
    prompt = await client.prompt(session, [{"tool": "ask_user", "args": {"question": "How many?", "fields": [field]}}])
    asked = await next_question(client)
    await client.send({"id": asked["id"], "result": {"action": "decline"}})
    assert (await client.response(prompt))["result"] == {"stopReason": "end_turn"}
