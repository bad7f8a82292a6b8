"""Where a remote client's HTTP and SSE MCP servers may point under `acp-server serve` (REMOTE.md decision 5), for
real: the console script, a WebSocket editor, and a real MCP server on 127.0.0.1. Loopback, private and link-local
addresses (named, or a name that resolves there) are refused with -32602 naming the rule, unless `--allow-mcp-host`
names the host; then the agent connects and a scripted turn calls the server's tool. The check at connect time
(DNS rebinding) is tests/unit/test_mcp_addresses.py's.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.test_mcp_e2e import http_server  # noqa: F401 (a fixture: an MCP server over HTTP or SSE)
from tests.e2e.test_serve import ALICE, Editor, editor, serving

pytestmark = pytest.mark.timeout(90)


def entry(kind: str, url: str) -> dict[str, Any]:
    return {"type": kind, "name": "srv", "url": url, "headers": []}


async def new_session_with(client: Editor, cwd: Path, servers: list[dict[str, Any]]) -> dict[str, Any]:
    return await client.call("session/new", {"cwd": str(cwd), "mcpServers": servers})


@pytest.mark.parametrize("http_server", ["http", "sse"], indirect=True)
async def test_a_clients_mcp_server_on_a_loopback_or_private_address_is_refused_unless_its_host_is_allowed(
    tmp_path: Path,
    http_server: tuple[str, asyncio.subprocess.Process],  # noqa: F811 (the fixture)
) -> None:
    url, _ = http_server
    kind = "sse" if url.endswith("/sse") else "http"
    async with serving(tmp_path) as server, editor(server, ALICE, "alice") as alice:
        for where, host in (
            (url, "127.0.0.1"),
            ("http://localhost:9/mcp", "localhost"),  # a name that resolves to loopback
            ("http://10.1.2.3/mcp", "10.1.2.3"),
            ("https://192.168.0.1/mcp", "192.168.0.1"),
            ("http://169.254.169.254/latest/meta-data/", "169.254.169.254"),  # a cloud's metadata service
            ("http://[::1]:9/mcp", "::1"),
            ("http://[fd00::1]/mcp", "fd00::1"),
        ):
            answer = await new_session_with(alice, server.workspace, [entry(kind, where)])
            assert answer.get("error", {}).get("code") == -32602, (where, answer)
            message = answer["error"]["message"]
            assert "loopback, private or link-local" in message and f"--allow-mcp-host {host}" in message, message
    async with (
        serving(tmp_path, "--allow-mcp-host", "127.0.0.1") as server,
        editor(server, ALICE, "alice") as alice,
    ):
        answer = await new_session_with(alice, server.workspace, [entry(kind, url)])
        assert "result" in answer, answer
        session = answer["result"]["sessionId"]
        mode = await alice.call("session/set_mode", {"sessionId": session, "modeId": "bypass"})
        assert mode.get("result") == {}, mode
        turn = await alice.call(
            "session/prompt",
            {
                "sessionId": session,
                "prompt": [{"type": "text", "text": "echo"}],
                "_meta": {"scripted": [{"tool": "mcp__srv__echo", "args": {"text": "through"}}, {"say": "done"}]},
            },
        )
        assert turn["result"] == {"stopReason": "end_turn"}, turn
        finals = [
            m["params"]["update"]
            for m in alice.received
            if m.get("method") == "session/update"
            and m["params"]["update"].get("sessionUpdate") == "tool_call_update"
            and m["params"]["update"].get("status") in ("completed", "failed")
        ]
        assert [final["status"] for final in finals] == ["completed"], finals
        assert "through" in str(finals[0].get("content")), finals
