"""ACP 2.4.0's unstable `auth/status` (with `auth/status_update`) and `providers/*` through the official TypeScript
SDK's unstable entries (issue 25 item 2): each advertised by its capability, answered in the shapes the SDK's own
unstable zod schemas and the official unstable JSON schemas accept, and a client's gateway given the client's key,
never the server's.

`tests/ts_client/provider_flows.mjs` runs one group (`v1` through `@agentclientprotocol/sdk/unstable`, `v2` through
`@agentclientprotocol/sdk/experimental/v2/unstable`) against a fresh server whose own endpoint and the client's
gateway are fake OpenAI servers on 127.0.0.1; the edge cases are tests/e2e/test_providers_unstable.py's.
"""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from tests.e2e.test_ts_sdk import assert_clean, run_stdio_script
from tests.support.fake_openai import FakeOpenAI, text_reply

pytestmark = pytest.mark.timeout(60)

SERVER_KEY = "sk-server-not-real-ts-0123"
CLIENT_KEY = "sk-client-not-real-ts-4567"
MODEL = "openai:fake-model"


def run_provider_flows(group: str, model: FakeOpenAI, gateway: FakeOpenAI) -> tuple[dict[str, Any], str]:
    """One group of provider_flows.mjs against a fresh stdio server whose own endpoint is `model`."""
    env = {
        "TS_GATEWAY_URL": gateway.base_url,
        "TS_GATEWAY_KEY": CLIENT_KEY,
        "OPENAI_API_KEY": SERVER_KEY,
        "OPENAI_BASE_URL": model.base_url,
        "ANTHROPIC_API_KEY": "",
        "ANTHROPIC_AUTH_TOKEN": "",
    }
    return run_stdio_script("provider_flows.mjs", group, ("--model", MODEL), env)


@pytest.mark.parametrize("group", ["v1", "v2"])
def test_the_typescript_sdk_unstable_entries_route_openai_through_the_clients_gateway(group: str) -> None:
    with FakeOpenAI() as model, FakeOpenAI() as gateway:
        model.set_default(text_reply("from the server's endpoint"))
        gateway.set_default(text_reply("from the client's gateway"))
        report, stderr = run_provider_flows(group, model, gateway)
        sent = [r for r in gateway.requests if "through the client's gateway" in str(r.body)]
        assert sent and all(r.headers.get("authorization") == f"Bearer {CLIENT_KEY}" for r in sent), sent
        assert not [r for r in model.requests if "through the client's gateway" in str(r.body)]
    assert_clean(report, stderr)
    init = report["initialize"]
    capabilities = init["agentCapabilities"] if group == "v1" else init["capabilities"]
    assert capabilities["providers"] == {} and capabilities["auth"]["status"] == {}
    assert report["statusBefore"]["result"]["state"] == "authenticated"
    current = {p["providerId"]: p.get("current") for p in report["listBefore"]["result"]["providers"]}
    assert current["openai"] == {"apiType": "openai", "baseUrl": model.base_url}
    assert report["set"] == {"result": {}}
    current = {p["providerId"]: p.get("current") for p in report["listAfterSet"]["result"]["providers"]}
    assert current["openai"] == {"apiType": "openai", "baseUrl": gateway.base_url}
    if group == "v1":
        assert report["prompt"] == {"result": {"stopReason": "end_turn"}}
    else:
        assert "messageId" in report["prompt"]["accepted"]["result"]
        assert report["prompt"]["ended"]["stopReason"] == "end_turn"
    assert report["disable"] == {"result": {}}
    current = {p["providerId"]: p.get("current") for p in report["listAfterDisable"]["result"]["providers"]}
    assert current["openai"] is None
    assert report["statusAfterDisable"]["result"]["state"] == "unauthenticated"
    # The set and the disable changed what this connection knows of the OpenAI key: it was told, in order.
    assert [update["state"] for update in report["updates"]][-1] == "unauthenticated"
    assert CLIENT_KEY not in orjson.dumps(report["updates"]).decode() and SERVER_KEY not in stderr
