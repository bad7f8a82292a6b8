"""The provider warm-up end to end: once `initialize` is answered the server imports the model's SDK and builds its
client in the background (protocol/warmup.py). It must never be in anybody's way: a prompt sent while it runs
streams as usual, a cancel during it is answered, and stdin EOF during it ends the server as always."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.conftest import StartServer
from tests.support.fake_openai import FakeOpenAI, text_reply
from tests.support.harness import T_EXIT, RawClient, scaled


@pytest.fixture
def model() -> Iterator[FakeOpenAI]:
    with FakeOpenAI() as server:
        yield server


async def openai_server(start_server: StartServer, model: FakeOpenAI) -> RawClient:
    env = {"OPENAI_API_KEY": "sk-test-key", "ACP_SERVER_CONFIG": "/nonexistent/acp-server-test/config.toml"}
    return await start_server("--model", "openai:fake-model", "--base-url", model.base_url, env=env)


def prompt(session_id: str, text: str) -> dict[str, Any]:
    return {"sessionId": session_id, "prompt": [{"type": "text", "text": text}]}


async def test_a_prompt_sent_while_the_provider_warms_up_streams_its_reply(
    start_server: StartServer, model: FakeOpenAI
) -> None:
    model.set_default(text_reply("fine", "thanks"))
    client = await openai_server(start_server, model)
    await client.initialize()
    # At once: the warm-up started by the initialize answer is still importing the SDK.
    session = await client.new_session()
    answer = await client.call("session/prompt", prompt(session, "hi"), timeout=scaled(30))
    assert answer["result"]["stopReason"] == "end_turn"
    assert "".join(client.texts(session)) == "finethanks"
    # The first request is the prompt's: one client made, one call for it.
    assert model.requests[0].body["messages"][-1]["content"] == "hi"


async def test_a_cancel_while_the_provider_warms_up_is_answered_and_the_session_still_works(
    start_server: StartServer, model: FakeOpenAI
) -> None:
    model.set_default(text_reply("again"))
    client = await openai_server(start_server, model)
    await client.initialize()
    session = await client.new_session()
    # At once: the turn is still waiting for the SDK the warm-up is importing.
    request_id = await client.request("session/prompt", prompt(session, "first"))
    await client.cancel(session)
    answer = await client.response(request_id, timeout=scaled(30))
    assert answer["result"]["stopReason"] == "cancelled"
    again = await client.call("session/prompt", prompt(session, "again"), timeout=scaled(30))
    assert again["result"]["stopReason"] == "end_turn"


async def test_stdin_eof_while_the_provider_warms_up_ends_the_server_as_usual(
    start_server: StartServer, model: FakeOpenAI
) -> None:
    client = await openai_server(start_server, model)
    await client.initialize()
    code, _ = await client.close(T_EXIT)
    assert code == 0
