"""ACP 2.4.0's unstable `auth/status` (with `auth/status_update`) and `providers/*` through the official TypeScript
SDK's unstable entries (issue 25 item 2): each advertised by its capability, answered in the shapes the SDK's own
unstable zod schemas and the official unstable JSON schemas accept, and a client's gateway given the client's key,
never the server's.

`tests/ts_client/provider_flows.mjs` runs one group (`v1` through `@agentclientprotocol/sdk/unstable`, `v2` through
`@agentclientprotocol/sdk/experimental/v2/unstable`) against a fresh server whose own endpoint and the client's
gateway are fake OpenAI servers on 127.0.0.1; the edge cases are tests/e2e/test_providers_unstable.py's.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from typing import Any

import orjson
import pytest

from tests.e2e.test_ts_sdk import CLIENT_DIR, SDK_PACKAGE, assert_clean, pinned_sdk_version
from tests.support.fake_openai import FakeOpenAI, text_reply
from tests.support.harness import T_WAIT, isolated_env, scaled, server_command

pytestmark = pytest.mark.timeout(60)

SERVER_KEY = "sk-server-not-real-ts-0123"
CLIENT_KEY = "sk-client-not-real-ts-4567"
MODEL = "openai:fake-model"


def run_provider_flows(group: str, model: FakeOpenAI, gateway: FakeOpenAI) -> tuple[dict[str, Any], str]:
    node = shutil.which("node")
    if node is None:
        pytest.skip("`node` is not on PATH: the TypeScript SDK tests need Node 20 (`.ci/run` has it)")
    if not SDK_PACKAGE.exists():
        pytest.skip(f"the TypeScript SDK is not installed: run `npm ci --prefix {CLIENT_DIR}` (`.ci/run` does)")
    installed = orjson.loads(SDK_PACKAGE.read_text())["version"]
    assert installed == pinned_sdk_version(), f"installed SDK {installed}, lockfile pins {pinned_sdk_version()}"
    env = {
        **os.environ,
        **isolated_env(),
        "TS_FLOW_STEP_TIMEOUT_MS": f"{T_WAIT * 1000:.0f}",
        "TS_GATEWAY_URL": gateway.base_url,
        "TS_GATEWAY_KEY": CLIENT_KEY,
        "OPENAI_API_KEY": SERVER_KEY,
        "OPENAI_BASE_URL": model.base_url,
        "ANTHROPIC_API_KEY": "",
        "ANTHROPIC_AUTH_TOKEN": "",
    }
    with tempfile.TemporaryDirectory(prefix="acp-ts-providers-") as cwd:
        done = subprocess.run(
            [node, str(CLIENT_DIR / "provider_flows.mjs"), group, "--", *server_command("--model", MODEL)],
            cwd=cwd,
            env=env,
            capture_output=True,
            timeout=scaled(40),
            check=False,
        )
    stderr = done.stderr.decode(errors="replace")
    assert done.stdout, f"provider_flows.mjs printed nothing (exit {done.returncode}); stderr:\n{stderr[-3000:]}"
    report = orjson.loads(done.stdout)
    assert isinstance(report, dict)
    assert "fatal" not in report, f"{report['fatal']}\n{report.get('data')}\nstderr:\n{stderr[-3000:]}"
    assert done.returncode == 0, stderr[-3000:]
    return report, stderr


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
