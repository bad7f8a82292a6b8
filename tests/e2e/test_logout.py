"""ACP `logout`: advertised as `agentCapabilities.auth.logout`, it forgets the key this process was given through
`authenticate`; sessions and prompts then need `authenticate` again, where the model takes a key at all.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import StartServer
from tests.e2e.test_interrupts import position
from tests.support.fake_openai import FakeOpenAI, text_reply
from tests.support.harness import scaled

NO_KEYS = {"OPENAI_API_KEY": "", "OPENAI_BASE_URL": "", "ANTHROPIC_API_KEY": "", "ANTHROPIC_AUTH_TOKEN": ""}


@pytest.fixture
def model() -> Iterator[FakeOpenAI]:
    with FakeOpenAI() as server:
        yield server


def prompt(session_id: str, text: str) -> dict[str, Any]:
    return {"sessionId": session_id, "prompt": [{"type": "text", "text": text}]}


async def test_logout_forgets_the_key_given_through_authenticate_until_the_next_authenticate(
    start_server: StartServer, model: FakeOpenAI, tmp_path: Path
) -> None:
    config = tmp_path / "config.toml"
    # The official OpenAI API (no base URL of a local server): a key is required.
    server = await start_server("--model", "openai:fake-model", env={**NO_KEYS, "ACP_SERVER_CONFIG": str(config)})
    initialized = (await server.initialize())["result"]
    assert initialized["agentCapabilities"]["auth"] == {"logout": {}, "status": {}}  # status: unstable auth/status
    config.write_text(f'[providers.openai]\napi_key = "sk-test-not-real"\nbase_url = "{model.base_url}"\n')
    assert (await server.call("authenticate", {"methodId": "api-key"}))["result"] == {}
    session = await server.new_session(str(tmp_path))
    model.set_default(text_reply("hello"))
    answer = await server.call("session/prompt", prompt(session, "hi"), timeout=scaled(30))
    assert answer["result"] == {"stopReason": "end_turn"}

    assert (await server.call("logout", {}))["result"] == {}
    assert (await server.call("logout", {}))["result"] == {}  # idempotent
    refused = await server.call("session/prompt", prompt(session, "again"))
    assert refused["error"]["code"] == -32000
    assert "authenticate" in refused["error"]["message"]
    assert (await server.call("session/new", {"cwd": str(tmp_path), "mcpServers": []}))["error"]["code"] == -32000
    assert not any("again" in str(r.body) for r in model.requests)  # the refused prompt never reached the model

    assert (await server.call("authenticate", {"methodId": "api-key"}))["result"] == {}
    answer = await server.call("session/prompt", prompt(session, "back"), timeout=scaled(30))
    assert answer["result"] == {"stopReason": "end_turn"}
    [last] = [r for r in model.requests if "back" in str(r.body)]
    assert {k.lower(): v for k, v in last.headers.items()}["authorization"] == "Bearer sk-test-not-real"


async def test_logout_changes_nothing_for_a_model_that_needs_no_key(start_server: StartServer) -> None:
    server = await start_server("--model", "echo", env=NO_KEYS)
    initialized = (await server.initialize())["result"]
    assert initialized["agentCapabilities"]["auth"]["logout"] == {}
    session = await server.new_session()
    assert (await server.call("logout", {}))["result"] == {}
    assert (await server.call("session/prompt", prompt(session, "still here")))["result"] == {"stopReason": "end_turn"}
    assert "".join(server.texts(session)) == "still here"


async def test_after_logout_a_session_switched_to_a_model_without_a_key_keeps_working(
    start_server: StartServer, model: FakeOpenAI, tmp_path: Path
) -> None:
    config = tmp_path / "config.toml"
    config.write_text(
        f'models = ["echo"]\n[providers.openai]\napi_key = "sk-test-not-real"\nbase_url = "{model.base_url}"\n'
    )
    server = await start_server("--model", "openai:fake-model", env={**NO_KEYS, "ACP_SERVER_CONFIG": str(config)})
    await server.initialize()
    keyed = await server.new_session(str(tmp_path))
    offline = await server.new_session(str(tmp_path))
    switched = await server.call(
        "session/set_config_option", {"sessionId": offline, "configId": "model", "value": "echo"}
    )
    assert "result" in switched, switched
    model.set_default(text_reply("hello"))
    assert (await server.call("session/prompt", prompt(keyed, "hi"), timeout=scaled(30)))["result"] == {
        "stopReason": "end_turn"
    }

    assert (await server.call("logout", {}))["result"] == {}
    answer = await server.call("session/prompt", prompt(offline, "still echoed"))
    assert answer["result"] == {"stopReason": "end_turn"}
    assert "".join(server.texts(offline)) == "still echoed"
    refused = await server.call("session/prompt", prompt(keyed, "refused"))
    assert refused["error"]["code"] == -32000 and "authenticate" in refused["error"]["message"]
    assert not any("refused" in str(r.body) for r in model.requests)

    assert (await server.call("authenticate", {"methodId": "api-key"}))["result"] == {}
    assert (await server.call("session/prompt", prompt(keyed, "back"), timeout=scaled(30)))["result"] == {
        "stopReason": "end_turn"
    }


@pytest.mark.parametrize("session_first", [True, False], ids=["session-new-then-logout", "logout-then-session-new"])
async def test_requests_pipelined_behind_initialize_take_effect_in_their_order(
    start_server: StartServer, model: FakeOpenAI, tmp_path: Path, session_first: bool
) -> None:
    # session/new waits for the deferred side, loaded once `initialize` is answered; a logout written after it in
    # the same write must not overtake it (nor one written before it be overtaken).
    env = {**NO_KEYS, "OPENAI_API_KEY": "sk-test-not-real", "OPENAI_BASE_URL": model.base_url}
    server = await start_server("--model", "openai:fake-model", env=env)
    new_session = {"method": "session/new", "params": {"cwd": str(tmp_path), "mcpServers": []}}
    logout = {"method": "logout", "params": {}}
    first, second = (new_session, logout) if session_first else (logout, new_session)
    await server.send(
        {"id": 1, "method": "initialize", "params": {"protocolVersion": 1, "clientCapabilities": {}}},
        {"id": 2, **first},
        {"id": 3, **second},
    )
    created = await server.response(2 if session_first else 3)
    assert (await server.response(3 if session_first else 2))["result"] == {}
    if session_first:
        assert "sessionId" in created.get("result", {}), created
    else:
        assert created["error"]["code"] == -32000, created


@pytest.mark.parametrize("version", [1, 2])
async def test_requests_pipelined_behind_initialize_are_answered_after_it(
    start_server: StartServer, model: FakeOpenAI, tmp_path: Path, version: int
) -> None:
    """Whatever they are (a start-up extension, a session method, one with invalid params): nothing is validated,
    run or answered before the `initialize` in front of them is answered, though its handler awaits the endpoint's
    cached models list (read in a worker thread)."""
    env = {**NO_KEYS, "OPENAI_API_KEY": "sk-test-not-real", "OPENAI_BASE_URL": model.base_url}
    server = await start_server("--model", "openai:fake-model", env=env)
    hello: dict[str, Any] = (
        {"protocolVersion": 2, "info": {"name": "t", "version": "0"}, "capabilities": {}}
        if version == 2
        else {"protocolVersion": 1, "clientCapabilities": {}}
    )
    new = {"cwd": str(tmp_path)} if version == 2 else {"cwd": str(tmp_path), "mcpServers": []}
    await server.send(
        {"id": 1, "method": "initialize", "params": hello},
        {"id": 2, "method": "_acp_server/stats", "params": {}},
        {"id": 3, "method": "session/new", "params": {"cwd": 7}},
        {"id": 4, "method": "session/new", "params": new},
    )
    answers = [await server.response(n) for n in (1, 2, 3, 4)]
    assert "result" in answers[0] and "result" in answers[1] and "sessionId" in answers[3]["result"]
    assert answers[2]["error"]["code"] == -32602
    assert [position(server, a) for a in answers] == sorted(position(server, a) for a in answers)
