"""ACP 2.4.0's unstable `mcp/message` (RFD "MCP-over-ACP") through the official TypeScript SDK (issue 25 item 2): the
client offers an MCP server over the ACP connection itself (`McpOverAcpProvider`, an `@modelcontextprotocol/server`
server through the SDK's `experimental/mcp-server` entry, MCP 2026-07-28) and declares it in `session/new` as
`{"type": "acp"}`; the agent lists its tools, the scripted model calls them, a cancelled turn withdraws the call in
flight (`$/cancel_request`), and the client's `mcp/message` notifications (its subscription's acknowledgement, then
`notifications/tools/list_changed`) make the next turn read the tool list again.

`tests/ts_client/mcp_flows.mjs` runs one group (`v1` through `@agentclientprotocol/sdk/unstable`, `v2` through
`@agentclientprotocol/sdk/experimental/v2/unstable`) against a fresh stdio server, or over the SDK's WebSocket client
against `acp-server serve` (the client's server runs in the client, so a remote connection may offer one); the wire
shapes and bad input are tests/e2e/test_mcp_over_acp.py's.
"""

from __future__ import annotations

import os
import signal
import tempfile
from typing import Any

import pytest

from tests.e2e.test_ts_sdk import (
    CLIENT_DIR,
    TRANSPORTS,
    assert_clean,
    node_with_sdk,
    report_of,
    run_script,
    run_stdio_script,
    serving,
)
from tests.support.harness import DEFAULT_ARGS, T_WAIT, WEBSOCKET_TOKEN, isolated_env, scaled

pytestmark = pytest.mark.timeout(60)


def run_mcp_flows(group: str, transport: str) -> tuple[dict[str, Any], str]:
    """One group of mcp_flows.mjs against a fresh server over `transport`; its report and the combined stderr."""
    if transport == "stdio":
        return run_stdio_script("mcp_flows.mjs", group, DEFAULT_ARGS)
    node = node_with_sdk()
    env = {**os.environ, **isolated_env(), "TS_FLOW_STEP_TIMEOUT_MS": f"{T_WAIT * 1000:.0f}"}
    with tempfile.TemporaryDirectory(prefix="acp-ts-mcp-") as scratch:
        cwd = os.path.realpath(scratch)  # the session's directory must lie inside the server's root once resolved
        with serving(cwd, env) as (url, server, server_stderr):
            script = [node, str(CLIENT_DIR / "mcp_flows.mjs"), group, "--ws", url]
            done = run_script(script, cwd, {**env, "ACP_FLOWS_TOKEN": WEBSOCKET_TOKEN})
            report = report_of(done, done.stderr.decode(errors="replace"))
            assert report["exit"] is None
            server.send_signal(signal.SIGTERM)
            server.wait(timeout=scaled(10))
        stderr = done.stderr.decode(errors="replace") + server_stderr[0].decode(errors="replace")
        report["exit"] = {"code": server.returncode, "signal": None}  # the drain ends serve as EOF ends stdio
    return report, stderr


def mcp_messages(wire: list[dict[str, Any]], direction: str) -> list[dict[str, Any]]:
    return [e["message"] for e in wire if e["dir"] == direction and e["message"].get("method") == "mcp/message"]


@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize("group", ["v1", "v2"])
def test_the_typescript_sdk_offers_an_mcp_server_over_acp_whose_tools_the_agent_calls_and_cancels(
    group: str, transport: str
) -> None:
    report, stderr = run_mcp_flows(group, transport)
    assert_clean(report, stderr)
    init = report["initialize"]
    if group == "v1":
        assert init["agentCapabilities"]["mcpCapabilities"]["acp"] is True
    else:
        assert init["capabilities"]["session"]["mcp"]["acp"] == {}

    # The tools were listed and called over ACP, the result came back to the model and the editor.
    assert report["echo"] == "end_turn" and report["echoTexts"] == ["echo: over acp"]
    assert report["calls"][:2] == ["echo", "wait"]
    server_id = report["declaration"]["serverId"]
    ours = mcp_messages(report["wire"], "agent")
    assert ours and all("id" in m and m["params"]["serverId"] == server_id for m in ours)
    assert all(m["params"]["params"]["_meta"]["io.modelcontextprotocol/protocolVersion"] == "2026-07-28" for m in ours)

    # A cancelled turn withdrew its call in flight, and the client's tool saw it.
    assert report["cancel"] == "cancelled" and report["aborted"] == ["wait"]
    (wait,) = [m for m in ours if m["params"]["method"] == "tools/call" and m["params"]["params"]["name"] == "wait"]
    withdrawn = [
        e["message"]["params"]["requestId"]
        for e in report["wire"]
        if e["dir"] == "agent" and e["message"].get("method") == "$/cancel_request"
    ]
    assert withdrawn == [wait["id"]]

    # The client's notifications for the open subscription reached it: the next turn had the new tool.
    theirs = [m["params"]["method"] for m in mcp_messages(report["wire"], "client")]
    assert "notifications/tools/list_changed" in theirs
    assert report["grow"] == "end_turn" and report["fresh"] == "end_turn" and report["freshTexts"] == ["fresh tool"]
    assert report["served"].count("tools/list") == 2
