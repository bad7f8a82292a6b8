"""acp-tck v2 conformance of the handshake and of message shapes, end to end over stdio: `initialize` succeeds for any
version asked (ACP-INIT-001), what it sends is valid against the v2 schema (ACP-SCHEMA-001), and nothing we send
carries a root key the schema does not define (ACP-SCHEMA-002). Tests named `test_acp_…` hold the requirement of that
id (registry src/tck/v2/requirements.py of agentclientprotocol/acp-tck at 1314e0951863b03844fd530e0e14bd88843aabe7,
vendored in fixtures/acp-tck/), judged against the 2.4.0 schema (fixtures/acp-schema/v2/schema.json)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.conftest import StartServer
from tests.support.harness import DEFAULT_ARGS, RawClient
from tests.support.schema_keys import definition_for, unknown_root_keys
from tests.support.wire_schema import validate_v2

pytestmark = pytest.mark.timeout(40)


@pytest.mark.parametrize("requested", [2, 1, 65535])
async def test_acp_init_001_initialize_succeeds_whatever_version_is_asked(
    start_server: StartServer, requested: int
) -> None:
    """Judged the same whatever is negotiated: a result, never an error, and an integer version."""
    server = await start_server()
    params: dict[str, Any] = {"protocolVersion": requested, "info": {"name": "tck", "version": "1"}}
    response = await server.call("initialize", {**params, "capabilities": {}, "clientCapabilities": {}})
    assert "error" not in response and isinstance(response["result"], dict)
    assert type(response["result"]["protocolVersion"]) is int


@pytest.mark.parametrize(
    "capabilities",
    [{}, {"auth": {"terminal": {}}, "elicitation": {"form": {}}, "_meta": {"x": 1}}],
    ids=["bare", "with-client-capabilities"],
)
async def test_acp_schema_001_everything_sent_during_a_v2_initialize_is_valid_against_the_v2_schema(
    start_server: StartServer, capabilities: dict[str, Any]
) -> None:
    server = await start_server()
    response = await server.initialize_v2(capabilities)
    assert validate_v2("InitializeResponse", response["result"]) == []
    assert server.received == [response]  # the exchange is the one response
    assert server.validator.violations == []


def _unknown_keys(server: RawClient) -> list[tuple[str, list[str]]]:
    """(method, unknown root keys) for every request, notification and result the server sent."""
    asked = {
        entry.msg["id"]: entry.msg["method"]
        for entry in server.log
        if entry.dir == "in" and isinstance(entry.msg, dict) and "method" in entry.msg and "id" in entry.msg
    }
    found = []
    for message in server.received:
        method = message.get("method") or asked.get(message.get("id"))
        if method is None or method.startswith("_") or "error" in message:
            continue
        definition = definition_for(method, "method" not in message)
        assert definition is not None, method
        value = message.get("params") if "method" in message else message["result"]
        if unknown := unknown_root_keys(definition, value):
            found.append((method, unknown))
    return found


async def test_acp_schema_002_nothing_sent_carries_a_root_key_the_schema_does_not_define(
    start_server: StartServer, tmp_path: Path
) -> None:
    """Every params and result of a full session: initialize, new, the built-in demo turn (thoughts, messages, tool
    calls, a plan), a permission request, config, list, resume with replay, close, delete. The checker itself is
    shown to catch a stray key."""
    assert unknown_root_keys("PromptResponse", {"messageId": "m", "stopReason": "end_turn"}) == ["stopReason"]
    assert unknown_root_keys("StateUpdate", {"state": "_paused", "why": "x"}) == []  # an `other` variant is open
    server = await start_server(*DEFAULT_ARGS, env={"ACP_SERVER_STATE_DIR": str(tmp_path)})
    await server.initialize_v2()
    session_id = await server.new_session_v2(str(tmp_path))
    await server.call("session/prompt", {"sessionId": session_id, "prompt": [{"type": "text", "text": "hi"}]})
    await server.idle(session_id)
    script: list[dict[str, Any]] = [
        {"tool": "write_file", "args": {"path": "a.txt", "content": "x\n"}},
        {"say": "wrote"},
    ]
    await server.prompt(session_id, script)
    asked = await server.wait_for(lambda m: m.get("method") == "session/request_permission")
    allow = next(o for o in asked["params"]["options"] if o["kind"] == "allow_once")
    outcome = {"outcome": "selected", "optionId": allow["optionId"]}
    await server.send({"id": asked["id"], "result": {"outcome": outcome}})
    await server.idle(session_id, 2)
    await server.call(
        "session/set_config_option", {"sessionId": session_id, "configId": "mode", "type": "id", "value": "bypass"}
    )
    await server.call("session/list", {})
    await server.call("session/close", {"sessionId": session_id})
    resumed = await server.call(
        "session/resume", {"sessionId": session_id, "cwd": str(tmp_path), "replayFrom": {"type": "start"}}
    )
    assert "result" in resumed
    await server.call("session/delete", {"sessionId": session_id})
    assert _unknown_keys(server) == []
