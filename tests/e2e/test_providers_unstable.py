"""ACP's unstable `auth/status` (with `auth/status_update`) and `providers/list`, `providers/set`,
`providers/disable`, on v1 and v2, each the calling connection's own (REMOTE.md decision 10).

Real servers throughout: the console script over stdio (and `serve` over WebSocket), and fake OpenAI endpoints on
127.0.0.1 that record the `Authorization` each model call carried: the server's own endpoint (`model`) and a client's
gateway (`gateway`). Every message the server writes is validated against the unstable schema of its version
(tests/support/wire_schema.py). Proved: where each key comes from and its changes (logout, authenticate, a 401);
a client's gateway gets the client's key and never the server's; a gateway URL must be https, loopback http on stdio,
or an `--allow-provider-host`; one connection's gateway is never another's.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import StartServer
from tests.e2e.test_serve import ALICE, BOB, editor, new_session, serving
from tests.support.fake_anthropic import FakeAnthropic
from tests.support.fake_anthropic import text_reply as anthropic_text_reply
from tests.support.fake_openai import FakeOpenAI, ServerReply, text_reply
from tests.support.harness import scaled

pytestmark = pytest.mark.timeout(90)

NO_KEYS = {"OPENAI_API_KEY": "", "OPENAI_BASE_URL": "", "ANTHROPIC_API_KEY": "", "ANTHROPIC_AUTH_TOKEN": ""}
SERVER_KEY = "sk-server-not-real-0123"
CLIENT_KEY = "sk-client-not-real-4567"


@pytest.fixture
def model() -> Iterator[FakeOpenAI]:
    with FakeOpenAI() as server:
        server.set_default(text_reply("from the server's endpoint"))
        yield server


@pytest.fixture
def gateway() -> Iterator[FakeOpenAI]:
    with FakeOpenAI() as server:
        server.set_default(text_reply("from the client's gateway"))
        yield server


def _env(model: FakeOpenAI) -> dict[str, str]:
    return {**NO_KEYS, "OPENAI_API_KEY": SERVER_KEY, "OPENAI_BASE_URL": model.base_url}


def ask(session_id: str, text: str) -> dict[str, Any]:
    return {"sessionId": session_id, "prompt": [{"type": "text", "text": text}]}


def authorizations(server: FakeOpenAI, text: str) -> set[str]:
    return {
        {k.lower(): v for k, v in request.headers.items()}.get("authorization", "")
        for request in server.requests
        if text in str(request.body)
    }


def account(status: dict[str, Any], provider: str) -> dict[str, Any]:
    found: list[dict[str, Any]] = [a for a in status["accounts"] if a["_meta"]["acpServer"]["providerId"] == provider]
    assert len(found) == 1, status
    return found[0]


def updates(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [m["params"] for m in messages if m.get("method") == "auth/status_update"]


@pytest.mark.parametrize("version", [1, 2])
async def test_auth_status_says_where_each_key_comes_from_and_a_logout_and_authenticate_update_it(
    start_server: StartServer, model: FakeOpenAI, version: int
) -> None:
    server = await start_server("--model", "openai:fake-model", env=_env(model))
    if version == 1:
        capabilities = (await server.initialize())["result"]["agentCapabilities"]
        assert capabilities["auth"] == {"logout": {}, "status": {}} and capabilities["providers"] == {}
        log_out: tuple[str, dict[str, Any]] = ("logout", {})
        log_in: tuple[str, dict[str, Any]] = ("authenticate", {"methodId": "api-key"})
    else:
        capabilities = (await server.initialize_v2())["result"]["capabilities"]
        assert capabilities["auth"] == {"status": {}} and capabilities["providers"] == {}
        log_out = log_in = ("", {})  # unused on v2
    status = (await server.call("auth/status", {}))["result"]
    assert status["state"] == "authenticated"
    openai, anthropic = account(status, "openai"), account(status, "anthropic")
    assert "OPENAI_API_KEY" in openai["label"] and openai["active"] is True
    assert "missing" in anthropic["label"] and anthropic["active"] is False
    assert SERVER_KEY not in str(status)
    if version == 2:  # v2 offers auth/login only while a key is missing: nothing more to show there
        return
    assert (await server.call(*log_out))["result"] == {}
    await server.wait_for(lambda m: m.get("method") == "auth/status_update")
    assert updates(server.received)[-1]["state"] == "unauthenticated"
    assert "logged out" in account(updates(server.received)[-1], "openai")["label"]
    assert (await server.call(*log_in))["result"] == {}
    await server.wait_for(lambda m: len(updates(server.received)) == 2)
    assert updates(server.received)[-1]["state"] == "authenticated"


@pytest.mark.parametrize("version", [1, 2])
async def test_a_clients_gateway_gets_its_own_key_and_never_the_servers(
    start_server: StartServer, model: FakeOpenAI, gateway: FakeOpenAI, tmp_path: Path, version: int
) -> None:
    server = await start_server("--model", "openai:fake-model", env=_env(model))
    if version == 1:
        await server.initialize()
        session = await server.new_session(str(tmp_path))
    else:
        await server.initialize_v2()
        session = await server.new_session_v2(str(tmp_path))

    async def prompt(text: str) -> dict[str, Any]:
        idle_before = sum(1 for update in server.states(session) if update.get("state") == "idle")
        answer = await server.call("session/prompt", ask(session, text), timeout=scaled(30))
        if version == 2 and "result" in answer:  # v2 answers at once: the turn ends in `idle`
            await server.idle(session, nth=idle_before + 1, timeout=scaled(30))
        return answer

    headers = {"Authorization": f"Bearer {CLIENT_KEY}", "X-Gateway-Team": "blue"}
    routed = {"providerId": "openai", "apiType": "openai", "baseUrl": gateway.base_url, "headers": headers}
    assert (await server.call("providers/set", routed))["result"] == {}
    listed = (await server.call("providers/list", {}))["result"]["providers"]
    assert {p["providerId"]: p["current"] for p in listed}["openai"] == {
        "apiType": "openai",
        "baseUrl": gateway.base_url,
    }
    assert "error" not in await prompt("through-the-gateway")
    assert authorizations(gateway, "through-the-gateway") == {f"Bearer {CLIENT_KEY}"}
    # (the session's title, asked for after its first turn, goes through the gateway too, the same way)
    sent = [r for r in gateway.requests if "through-the-gateway" in str(r.body)]
    assert sent and all({k.lower(): v for k, v in r.headers.items()}["x-gateway-team"] == "blue" for r in sent)
    assert not authorizations(model, "through-the-gateway")

    # A gateway set without a key of the client's gets none of the server's.
    keyless = {"providerId": "openai", "apiType": "openai", "baseUrl": gateway.base_url}
    assert (await server.call("providers/set", keyless))["result"] == {}
    assert "error" not in await prompt("keyless-gateway")
    assert SERVER_KEY not in str(authorizations(gateway, "keyless-gateway"))
    assert all(SERVER_KEY not in str(r.headers) for r in gateway.requests)

    assert (await server.call("providers/disable", {"providerId": "openai"}))["result"] == {}
    listed = (await server.call("providers/list", {}))["result"]["providers"]
    assert {p["providerId"]: p.get("current") for p in listed}["openai"] is None
    refused = await server.call("session/prompt", ask(session, "while-disabled"))
    assert refused["error"]["code"] == -32000 and "disabled" in refused["error"]["message"], refused
    unknown = await server.call("providers/set", {**keyless, "providerId": "vertex", "apiType": "vertex"})
    assert unknown["error"]["code"] == -32602


async def test_a_key_the_endpoint_refuses_is_reported_in_an_auth_status_update(
    start_server: StartServer, model: FakeOpenAI, gateway: FakeOpenAI, tmp_path: Path
) -> None:
    server = await start_server("--model", "openai:fake-model", env=_env(model))
    await server.initialize()
    session = await server.new_session(str(tmp_path))
    routed = {
        "providerId": "openai",
        "apiType": "openai",
        "baseUrl": gateway.base_url,
        "headers": {"Authorization": f"Bearer {CLIENT_KEY}"},
    }
    assert (await server.call("providers/set", routed))["result"] == {}
    assert (await server.call("auth/status", {}))["result"]["state"] == "authenticated"
    gateway.set_default(ServerReply(status=401, body={"error": {"message": "invalid api key"}}))
    failed = await server.call("session/prompt", ask(session, "refused"), timeout=scaled(30))
    assert "error" in failed, failed
    update = (
        await server.wait_for(
            lambda m: m.get("method") == "auth/status_update" and m["params"]["state"] == "unauthenticated"
        )
    )["params"]
    assert "refused" in account(update, "openai")["label"]
    assert account(update, "openai")["_meta"]["acpServer"]["key"] == "refused"


async def test_a_gateway_url_must_be_https_or_an_allowed_host_and_loopback_http_only_on_stdio(
    start_server: StartServer, model: FakeOpenAI, gateway: FakeOpenAI, tmp_path: Path
) -> None:
    plain = {"providerId": "openai", "apiType": "openai", "baseUrl": "http://gateway.example/v1"}
    server = await start_server("--model", "openai:fake-model", env=_env(model))
    await server.initialize()
    refused = await server.call("providers/set", plain)
    assert refused["error"]["code"] == -32602
    assert "--allow-provider-host gateway.example" in refused["error"]["message"]
    assert (await server.call("providers/set", {**plain, "baseUrl": "https://gateway.example/v1"}))["result"] == {}
    # stdio's one connection is the machine's own user: plain http to a loopback gateway is fine.
    assert (await server.call("providers/set", {**plain, "baseUrl": gateway.base_url}))["result"] == {}

    loopback = {**plain, "baseUrl": gateway.base_url}
    async with (
        serving(tmp_path, "--model", "openai:fake-model", env=_env(model)) as remote,
        editor(remote, ALICE, "alice") as alice,
    ):
        refused = await alice.call("providers/set", loopback)
        assert refused["error"]["code"] == -32602
        assert "--allow-provider-host 127.0.0.1" in refused["error"]["message"]
    async with (
        serving(tmp_path, "--model", "openai:fake-model", "--allow-provider-host", "127.0.0.1", env=_env(model)) as r,
        editor(r, ALICE, "alice") as alice,
    ):
        assert (await alice.call("providers/set", loopback))["result"] == {}


async def test_a_gateway_set_on_one_serve_connection_is_no_other_connections(
    tmp_path: Path, model: FakeOpenAI, gateway: FakeOpenAI
) -> None:
    async with (
        serving(tmp_path, "--model", "openai:fake-model", "--allow-provider-host", "127.0.0.1", env=_env(model)) as s,
        editor(s, ALICE, "alice") as alice,
        editor(s, BOB, "bob") as bob,
    ):
        mine = await new_session(alice, s.workspace)
        theirs = await new_session(bob, s.workspace)
        routed = {
            "providerId": "openai",
            "apiType": "openai",
            "baseUrl": gateway.base_url,
            "headers": {"Authorization": f"Bearer {CLIENT_KEY}"},
        }
        assert (await alice.call("providers/set", routed))["result"] == {}
        answer = await alice.response(await alice.request("session/prompt", ask(mine, "alice-routed")), scaled(30))
        assert answer["result"] == {"stopReason": "end_turn"}, answer
        answer = await bob.response(await bob.request("session/prompt", ask(theirs, "bob-unrouted")), scaled(30))
        assert answer["result"] == {"stopReason": "end_turn"}, answer
        assert authorizations(gateway, "alice-routed") == {f"Bearer {CLIENT_KEY}"}
        assert authorizations(model, "bob-unrouted") == {f"Bearer {SERVER_KEY}"}
        assert not authorizations(gateway, "bob-unrouted") and not authorizations(model, "alice-routed")
        bobs = {p["providerId"]: p["current"] for p in (await bob.call("providers/list", {}))["result"]["providers"]}
        assert bobs["openai"]["baseUrl"] == model.base_url


async def test_a_recording_holds_no_header_value_a_client_set_for_its_gateway(
    start_server: StartServer, tmp_path: Path
) -> None:
    """Whatever a gateway header is called, its value is a credential: gone from the `--record` transcript, in the
    `providers/set` line and wherever it appears later (here, echoed back by the model)."""
    path = tmp_path / "record.jsonl"
    virtual_key = "vk-team-blue-0123456789"
    client = await start_server("--model", "echo", "--record", str(path), env=NO_KEYS)
    await client.initialize()
    headers = {"Authorization": f"Bearer {CLIENT_KEY}", "X-Gateway-Virtual-Id": virtual_key, "X-Team": "blue"}
    routed = {"providerId": "openai", "apiType": "openai", "baseUrl": "https://gateway.example/v1", "headers": headers}
    assert (await client.call("providers/set", routed))["result"] == {}
    session = await client.new_session(str(tmp_path))
    said = f"one two three four five six {virtual_key} {CLIENT_KEY}"
    assert (await client.call("session/prompt", ask(session, said)))["result"] == {"stopReason": "end_turn"}
    await client.close()
    text = path.read_text()
    assert virtual_key not in text and CLIENT_KEY not in text
    assert "X-Gateway-Virtual-Id" in text and "gateway.example" in text


async def test_a_client_with_its_own_gateway_needs_no_key_of_the_servers(
    start_server: StartServer, gateway: FakeOpenAI, tmp_path: Path
) -> None:
    """A server that holds no key: the client's `providers/set` makes its connection authenticated, its sessions open
    and its prompts go to its gateway with its key."""
    server = await start_server("--model", "openai:fake-model", env=NO_KEYS)
    assert (await server.initialize())["result"]["authMethods"], "a key is missing: authenticate is offered"
    status = (await server.call("auth/status", {}))["result"]
    assert status["state"] == "unauthenticated" and "missing" in account(status, "openai")["label"]
    assert (await server.call("session/new", {"cwd": str(tmp_path), "mcpServers": []}))["error"]["code"] == -32000
    routed = {
        "providerId": "openai",
        "apiType": "openai",
        "baseUrl": gateway.base_url,
        "headers": {"Authorization": f"Bearer {CLIENT_KEY}"},
    }
    assert (await server.call("providers/set", routed))["result"] == {}
    update = await server.wait_for(lambda m: m.get("method") == "auth/status_update")
    assert update["params"]["state"] == "authenticated"
    assert "set by this client" in account(update["params"], "openai")["label"]
    session = await server.new_session(str(tmp_path))
    answer = await server.call("session/prompt", ask(session, "own-gateway"), timeout=scaled(30))
    assert answer["result"] == {"stopReason": "end_turn"}, answer
    assert authorizations(gateway, "own-gateway") == {f"Bearer {CLIENT_KEY}"}


async def test_an_anthropic_gateway_gets_the_clients_x_api_key(start_server: StartServer, tmp_path: Path) -> None:
    """The Anthropic provider routed the same way: its Messages API at the client's gateway, the client's
    `x-api-key` sent, and no key of the server's (ANTHROPIC_API_KEY) anywhere in what the gateway received."""
    with FakeAnthropic() as gateway:
        gateway.set_default(anthropic_text_reply("from the anthropic gateway"))
        server_key = "sk-ant-server-not-real-0123"
        env = {**NO_KEYS, "ANTHROPIC_API_KEY": server_key}
        server = await start_server("--model", "anthropic:claude-fake", env=env)
        await server.initialize()
        routed = {
            "providerId": "anthropic",
            "apiType": "anthropic",
            "baseUrl": gateway.base_url,
            "headers": {"x-api-key": CLIENT_KEY},
        }
        assert (await server.call("providers/set", {**routed, "apiType": "openai"}))["error"]["code"] == -32602
        assert (await server.call("providers/set", routed))["result"] == {}
        session = await server.new_session(str(tmp_path))
        answer = await server.call("session/prompt", ask(session, "anthropic-routed"), timeout=scaled(30))
        assert answer["result"] == {"stopReason": "end_turn"}, answer
        [request, *_] = [r for r in gateway.requests if "anthropic-routed" in str(r.body)]
        assert request.path.endswith("/v1/messages") and request.headers.get("x-api-key") == CLIENT_KEY
        assert all(server_key not in str(r.headers) for r in gateway.requests)
        assert "".join(server.texts(session)) == "from the anthropic gateway"
