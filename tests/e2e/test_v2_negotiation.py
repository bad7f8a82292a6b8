"""ACP v2 beside v1: which protocol a connection speaks, chosen by `initialize` (ACP-V2.md §2, §3, §23 Q1), end to end
over stdio. Tests named `test_acp_…` (lower case, as ruff wants) hold the acp-tck v2 requirement of that id
(registry src/tck/v2/requirements.py at commit 1314e0951863b03844fd530e0e14bd88843aabe7), judged against the 2.4.0
schema."""

from __future__ import annotations

from typing import Any

import pytest

from tests.conftest import StartServer
from tests.support.harness import DEFAULT_ARGS, RawClient

pytestmark = pytest.mark.timeout(30)


def _markers(value: Any, path: str = "capabilities") -> list[str]:
    """Every boolean anywhere under the capabilities (v2 markers are objects, never booleans)."""
    if isinstance(value, bool):
        return [path]
    if isinstance(value, dict):
        return [p for key, child in value.items() if key != "_meta" for p in _markers(child, f"{path}.{key}")]
    return []


async def test_acp_init_201_203_204_a_request_for_2_gets_the_v2_surface(start_server: StartServer) -> None:
    """2 -> 2, with `info` (name and version), object markers only, the session baseline, and our extensions
    under `capabilities._meta` (ACP-EXT-202)."""
    server = await start_server()
    result = (await server.initialize_v2())["result"]
    assert result["protocolVersion"] == 2
    assert result["info"]["name"] == "acp-server" and result["info"]["version"]
    capabilities = result["capabilities"]
    assert _markers(capabilities) == []
    assert capabilities["session"]["mcp"] == {"stdio": {}, "http": {}, "acp": {}}
    assert "delete" in capabilities["session"]
    # Images and audio as on v1 for the same models (present as `{}` markers, else left out, never false).
    v1 = await start_server()
    taken = (await v1.initialize())["result"]["agentCapabilities"]["promptCapabilities"]
    expected: dict[str, Any] = {kind: {} for kind in ("image", "audio") if taken[kind]}
    assert capabilities["session"]["prompt"] == {**expected, "embeddedContext": {}}
    # `auth` and `providers`: the unstable auth/status and providers/* (ACP-EXT-202 checks them against the schema).
    assert set(capabilities) == {"session", "auth", "providers", "_meta"}
    assert capabilities["auth"] == {"status": {}} and capabilities["providers"] == {}
    assert capabilities["_meta"]["acpServer"]["defaultPromptPolicy"] == "queue"
    assert result["authMethods"] == []


async def test_acp_init_003_a_request_above_2_gets_2(start_server: StartServer) -> None:
    server = await start_server()
    response = await server.call("initialize", {"protocolVersion": 65535, "info": {"name": "x", "version": "1"}})
    assert response["result"]["protocolVersion"] == 2
    assert "info" in response["result"] and "agentCapabilities" not in response["result"]


async def test_acp_init_202_a_request_for_1_gets_the_v1_surface_as_before(start_server: StartServer) -> None:
    server = await start_server()
    result = (await server.initialize())["result"]
    assert result["protocolVersion"] == 1
    assert result["agentCapabilities"]["loadSession"] is True and "capabilities" not in result
    session_id = await server.new_session()  # v1: mcpServers required, modes in the result
    prompt = await server.prompt(session_id, [{"say": "hi"}])
    assert (await server.response(prompt))["result"] == {"stopReason": "end_turn"}
    assert server.states(session_id) == []


@pytest.mark.parametrize("requested", [0, -1])
async def test_a_version_below_1_is_minus_32022_with_the_supported_versions_and_the_connection_stays_open(
    start_server: StartServer, requested: int
) -> None:
    server = await start_server()
    response = await server.call("initialize", {"protocolVersion": requested})
    assert response["error"]["code"] == -32022
    assert response["error"]["data"] == {"requested": requested, "supported": [1, 2]}
    assert (await server.initialize_v2())["result"]["protocolVersion"] == 2


async def test_a_version_that_is_not_an_integer_is_invalid_params_naming_it(start_server: StartServer) -> None:
    server = await start_server()
    response = await server.call("initialize", {"protocolVersion": "2"})
    assert response["error"]["code"] == -32602 and "protocolVersion" in response["error"]["message"]


@pytest.mark.parametrize("how", ["flag", "environment"])
async def test_protocol_1_serves_v1_to_a_client_asking_for_2(start_server: StartServer, how: str) -> None:
    """`--protocol 1` (or ACP_SERVER_PROTOCOL=1) is the v1 agent exactly as before v2: every integer gets 1."""
    if how == "flag":
        server = await start_server(*DEFAULT_ARGS, "--protocol", "1")
    else:
        server = await start_server(env={"ACP_SERVER_PROTOCOL": "1"})
    for requested in (2, 0):
        response = await server.call("initialize", {"protocolVersion": requested, "clientCapabilities": {}})
        assert response["result"]["protocolVersion"] == 1
        assert "agentCapabilities" in response["result"]


async def test_a_v2_connection_stays_v2_and_has_no_v1_only_methods(start_server: StartServer) -> None:
    server = await start_server()
    await server.initialize_v2()
    again = await server.call("initialize", {"protocolVersion": 1, "clientCapabilities": {}})
    assert again["error"]["code"] == -32600
    for method in ("session/load", "session/set_mode", "authenticate"):
        response = await server.call(method, {"sessionId": "sess_x", "cwd": "/tmp", "modeId": "x", "methodId": "x"})
        assert response["error"]["code"] == -32601, method


async def test_acp_ext_001_an_extension_request_is_answered_on_v2(server_v2: RawClient) -> None:
    stats = await server_v2.call("_acp_server/stats", {})
    assert stats["result"]["sessions"] == 0
    unknown = await server_v2.call("_nobody/knows", {})
    assert unknown["error"]["code"] == -32601


@pytest.mark.parametrize("asked", [2, 65535])
async def test_a_v1_connection_stays_v1_when_a_second_initialize_asks_for_2(
    start_server: StartServer, asked: int
) -> None:
    """The version is chosen once per connection (§2): a later `initialize` asking another one is -32600 and the
    connection goes on speaking v1; asking the same version again is answered as the first was."""
    server = await start_server()
    assert (await server.initialize())["result"]["protocolVersion"] == 1
    again = await server.call("initialize", {"protocolVersion": asked, "info": {"name": "x", "version": "1"}})
    assert again["error"]["code"] == -32600
    same = await server.call("initialize", {"protocolVersion": 1, "clientCapabilities": {}})
    assert same["result"]["protocolVersion"] == 1 and "agentCapabilities" in same["result"]
    session_id = await server.new_session()  # v1 still: mcpServers required, the prompt answered with its stop
    prompt = await server.prompt(session_id, [{"say": "hi"}])
    assert (await server.response(prompt))["result"] == {"stopReason": "end_turn"}
    assert server.states(session_id) == []
