"""The provider warm-up end to end: once `initialize` is answered the server imports the model's SDK and builds its
client in the background (agent/warmup.py). It must never be in anybody's way: a prompt sent while it runs
streams as usual, a cancel during it is answered, and stdin EOF during it ends the server as always."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
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


# Loaded by the server's interpreter at start (PYTHONPATH): the import of one module of the deferred side fails, as
# it would in a broken install.
_FAIL_ONE_IMPORT = """
import sys

class _Fail:
    def find_spec(self, name, path=None, target=None):
        if name == "acp_server.protocol.acp_edge":
            raise ImportError("simulated failure importing " + name)
        return None

sys.meta_path.insert(0, _Fail())
"""


async def test_a_deferred_side_that_cannot_be_imported_is_each_requests_answer_and_the_server_exits_cleanly(
    start_server: StartServer, tmp_path: Path
) -> None:
    (tmp_path / "sitecustomize.py").write_text(_FAIL_ONE_IMPORT)
    client = await start_server("--model", "scripted", "--test-mode", env={"PYTHONPATH": str(tmp_path)})
    initialize = {"protocolVersion": 1, "clientCapabilities": {}}
    new_session = {"cwd": str(tmp_path), "mcpServers": []}
    await client.send(  # session/new waits for the deferred side, whose load begins once initialize is answered
        {"id": 101, "method": "initialize", "params": initialize},
        {"id": 102, "method": "session/new", "params": new_session},
    )
    assert "result" in await client.response(101)
    expected = (
        "the server could not load acp_server.protocol.acp_edge: "
        "simulated failure importing acp_server.protocol.acp_edge; "
        "reinstall acp-server"
    )
    for answer in (await client.response(102), await client.call("session/list", {})):
        assert answer["error"] == {"code": -32603, "message": expected}
    assert "result" in await client.call("_acp_server/stats", {})  # the connection goes on
    code, _ = await client.close()
    assert code == 0
    assert client.stderr_text.count(expected) == 1, client.stderr_text  # said once
