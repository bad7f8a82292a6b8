"""ACP v2 authentication (ACP-V2.md §16), end to end over stdio: `auth/login {methodId}` and `auth/logout {}` in
their v2 shapes, offered through a non-empty `authMethods` (`type: agent`, `methodId`) only while the default
model's key is missing, and `-32601` on a connection whose `initialize` offered none."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import StartServer
from tests.support.fake_openai import FakeOpenAI, text_reply
from tests.support.harness import scaled
from tests.support.wire_schema import validate_v2

pytestmark = pytest.mark.timeout(60)

NO_KEYS = {"OPENAI_API_KEY": "", "OPENAI_BASE_URL": "", "ANTHROPIC_API_KEY": "", "ANTHROPIC_AUTH_TOKEN": ""}


@pytest.fixture
def model() -> Iterator[FakeOpenAI]:
    with FakeOpenAI() as server:
        yield server


def update_of(message: dict[str, Any]) -> dict[str, Any]:
    update: dict[str, Any] = message["params"]["update"]
    return update


def prompt(session_id: str, text: str) -> dict[str, Any]:
    return {"sessionId": session_id, "prompt": [{"type": "text", "text": text}]}


async def test_login_finds_the_key_and_logout_forgets_it_until_the_next_login(
    start_server: StartServer, model: FakeOpenAI, tmp_path: Path
) -> None:
    config = tmp_path / "config.toml"
    # The official OpenAI API (no base URL of a local server): a key is required, and none is there yet.
    server = await start_server("--model", "openai:fake-model", env={**NO_KEYS, "ACP_SERVER_CONFIG": str(config)})
    result = (await server.initialize_v2())["result"]
    [method] = result["authMethods"]
    assert validate_v2("AuthMethod", method) == []
    assert method["methodId"] == "openai-key" and method["type"] == "agent" and method["name"]
    assert "OPENAI_API_KEY" in method["description"] or "api_key" in method["description"]
    # v2 has no logout marker (`authMethods` implies both methods): only the unstable `auth/status`
    assert result["capabilities"]["auth"] == {"status": {}}
    assert (await server.call("session/new", {"cwd": str(tmp_path)}))["error"]["code"] == -32000
    # v1's names are gone on v2; a method that was not advertised is refused, naming it.
    assert (await server.call("authenticate", {"methodId": "openai-key"}))["error"]["code"] == -32601
    wrong = await server.call("auth/login", {"methodId": "api-key"})
    assert wrong["error"]["code"] == -32602 and "api-key" in wrong["error"]["message"]
    # Still no key: login is refused as auth-required, and the connection keeps working.
    assert (await server.call("auth/login", {"methodId": "openai-key"}))["error"]["code"] == -32000

    config.write_text(f'[providers.openai]\napi_key = "sk-test-not-real"\nbase_url = "{model.base_url}"\n')
    assert (await server.call("auth/login", {"methodId": "openai-key"}))["result"] == {}
    session = await server.new_session_v2(str(tmp_path))
    model.set_default(text_reply("hello"))
    answer = await server.call("session/prompt", prompt(session, "hi"), timeout=scaled(30))
    assert "result" in answer, answer
    assert update_of(await server.idle(session, timeout=scaled(30)))["stopReason"] == "end_turn"

    assert (await server.call("auth/logout", {}))["result"] == {}
    assert (await server.call("auth/logout", {"_meta": None}))["result"] == {}  # idempotent
    refused = await server.call("session/prompt", prompt(session, "again"))
    assert refused["error"]["code"] == -32000 and "auth/login" in refused["error"]["message"]
    assert (await server.call("session/new", {"cwd": str(tmp_path)}))["error"]["code"] == -32000
    assert not any("again" in str(r.body) for r in model.requests)  # the refused prompt never reached the model

    assert (await server.call("auth/login", {"methodId": "openai-key"}))["result"] == {}
    answer = await server.call("session/prompt", prompt(session, "back"), timeout=scaled(30))
    assert "result" in answer, answer
    assert update_of(await server.idle(session, 2, timeout=scaled(30)))["stopReason"] == "end_turn"
    [last] = [r for r in model.requests if "back" in str(r.body)]
    assert {k.lower(): v for k, v in last.headers.items()}["authorization"] == "Bearer sk-test-not-real"


async def test_with_no_auth_methods_offered_login_and_logout_are_method_not_found(start_server: StartServer) -> None:
    server = await start_server("--model", "echo", env=NO_KEYS)
    assert (await server.initialize_v2())["result"]["authMethods"] == []
    for method, params in (("auth/login", {"methodId": "echo-key"}), ("auth/logout", {})):
        refused = await server.call(method, params)
        assert refused["error"]["code"] == -32601 and method in refused["error"]["message"]
    session = await server.new_session_v2()  # the connection keeps working, no login needed
    assert "result" in await server.call("session/prompt", prompt(session, "still here"), timeout=scaled(30))


async def test_login_session_new_and_logout_pipelined_behind_initialize_take_effect_in_their_order(
    start_server: StartServer, model: FakeOpenAI, tmp_path: Path
) -> None:
    # session/new waits for the deferred side, loaded once `initialize` is answered; the login before it and the
    # logout after it, written in the same write, must neither overtake it nor be overtaken.
    config = tmp_path / "config.toml"
    server = await start_server("--model", "openai:fake-model", env={**NO_KEYS, "ACP_SERVER_CONFIG": str(config)})
    await server.call("_acp_server/stats", {})  # answered (refused before `initialize`): the key was looked for
    config.write_text(f'[providers.openai]\napi_key = "sk-test-not-real"\nbase_url = "{model.base_url}"\n')
    initialize = {"protocolVersion": 2, "info": {"name": "harness", "version": "0"}, "capabilities": {}}
    await server.send(
        {"id": 101, "method": "initialize", "params": initialize},
        {"id": 102, "method": "auth/login", "params": {"methodId": "openai-key"}},
        {"id": 103, "method": "session/new", "params": {"cwd": str(tmp_path)}},
        {"id": 104, "method": "auth/logout", "params": {}},
    )
    assert (await server.response(101))["result"]["authMethods"]  # the key was missing when the server started
    login = await server.response(102)
    assert login.get("result") == {}, login  # offered by the initialize before it, even if its handler runs later
    assert "sessionId" in (await server.response(103)).get("result", {})
    assert (await server.response(104))["result"] == {}
    assert (await server.call("session/new", {"cwd": str(tmp_path)}))["error"]["code"] == -32000  # logged out now
