"""ACP's unstable `mcp/message` (RFD "MCP-over-ACP") over the harness: the client offers an MCP server over the ACP
connection itself (`mcpServers: [{"type": "acp", "name", "serverId"}]`), played here by hand (`ClientMcpServer`:
it answers the agent's `mcp/message` requests as the TypeScript SDK's `McpOverAcpProvider` would), on v1 and v2.

What is checked: the wire shapes (every `mcp/message` request of ours is validated against the unstable schema's
`MessageMcpRequest` by the harness; each names the declared `serverId`, a string `requestId` and carries MCP
2026-07-28's `_meta`); a result, an inner MCP error and an outer ACP error each reach the tool call; a cancelled turn
withdraws its call in flight (`$/cancel_request`, the binding's cancellation); the client's notifications reach the
request they name and are dropped otherwise (bad ones too, with the connection unharmed); an `mcp/message` request to
the agent is -33001 naming the server; `session/load` (v1) and `session/resume` (v2) bring the client's server back;
and a remote connection (`serve`) may offer one, though not a command. The end-to-end run through the official SDK
is tests/e2e/test_ts_sdk_mcp.py.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import StartServer
from tests.support.harness import T_WAIT, RawClient
from tests.support.versions import VERSIONS, Acp

pytestmark = pytest.mark.timeout(60)

SERVER_ID = "client-tools:0001"
PROTOCOL = "2026-07-28"
READ_ONLY = {"readOnlyHint": True}
TOOLS = [
    {"name": name, "description": f"The {name} tool.", "inputSchema": {"type": "object"}, "annotations": READ_ONLY}
    for name in ("echo", "fail", "broken", "wait")
]


def declared(server_id: str = SERVER_ID, name: str = "client-tools") -> dict[str, Any]:
    return {"type": "acp", "name": name, "serverId": server_id}


@dataclass
class ClientMcpServer:
    """The client's MCP server over ACP, by hand: `tools/list` lists TOOLS; `tools/call` of `echo` answers, `fail`
    answers an inner MCP error, `broken` an outer ACP error, `wait` never; `subscriptions/listen` is held open (its
    notifications are the test's to send)."""

    client: RawClient
    server_id: str = SERVER_ID
    requests: list[dict[str, Any]] = field(default_factory=list)
    held: list[dict[str, Any]] = field(default_factory=list)

    async def serve(self) -> None:
        # Polled, and ended by `stopping` rather than by cancelling: the harness's waits share one event, and 3.11's
        # `asyncio.wait_for` can swallow a cancellation that lands as it wakes.
        while not self.stopping.is_set():
            try:
                message = await self.client.wait_for(
                    lambda m: m.get("method") == "mcp/message" and "id" in m and id(m) not in self._done, timeout=0.05
                )
            except TimeoutError:
                continue
            self._done.add(id(message))
            self.requests.append(message)
            reply = self.answer(message["params"])
            if reply is None:
                self.held.append(message)
            else:
                await self.client.send({"id": message["id"], **reply})

    def __post_init__(self) -> None:
        self._done: set[int] = set()
        self.stopping = asyncio.Event()

    def answer(self, params: dict[str, Any]) -> dict[str, Any] | None:
        if params["serverId"] != self.server_id:
            return {"error": {"code": -33001, "message": "MCP server registration unavailable"}}
        method, inner = params["method"], params.get("params") or {}
        if method == "tools/list":
            # MCP 2026-07-28's shapes: a list says how long it may be cached, every result its type.
            return {
                "result": {"result": {"tools": TOOLS, "ttlMs": 0, "cacheScope": "private", "resultType": "complete"}}
            }
        if method == "subscriptions/listen":
            return None  # held open, as a subscription is (the test sends its notifications)
        if method == "tools/call":
            name, arguments = inner.get("name"), inner.get("arguments") or {}
            if name == "echo":
                text = f"echo: {arguments.get('text')}"
                return {"result": {"result": {"content": [{"type": "text", "text": text}], "resultType": "complete"}}}
            if name == "fail":
                return {"result": {"error": {"code": -32602, "message": "fail refuses everything"}}}
            if name == "broken":
                return {"error": {"code": -33002, "message": "MCP server handler failed"}}
            if name == "wait":
                return None
        return {"result": {"error": {"code": -32601, "message": f"Method not found: {method}"}}}

    def calls(self, tool: str) -> list[dict[str, Any]]:
        return [
            r for r in self.requests if r["params"]["method"] == "tools/call" and r["params"]["params"]["name"] == tool
        ]


@contextlib.asynccontextmanager
async def offering(client: RawClient, server_id: str = SERVER_ID) -> AsyncIterator[ClientMcpServer]:
    server = ClientMcpServer(client, server_id)
    task = asyncio.create_task(server.serve())
    try:
        yield server
    finally:
        server.stopping.set()
        await task


async def open_session(acp: Acp, cwd: Path, servers: list[dict[str, Any]]) -> str:
    response = await acp.client.call("session/new", {**acp.session_new_params(str(cwd)), "mcpServers": servers})
    assert "result" in response, response
    session_id: str = response["result"]["sessionId"]
    return session_id


def call(tool: str, **args: Any) -> dict[str, Any]:
    return {"tool": f"mcp__client-tools__{tool}", "args": args}


def call_texts(client: RawClient, session_id: str) -> list[str]:
    texts = []
    for update in client.updates(session_id, "tool_call_update"):
        for item in update.get("content") or []:
            if item.get("type") == "content" and item["content"].get("type") == "text":
                texts.append(item["content"]["text"])
    return texts


async def test_the_agent_lists_and_calls_the_tools_of_an_mcp_server_the_client_offers_over_acp(
    acp: Acp, tmp_path: Path
) -> None:
    init = acp.client.received[0]["result"]
    if acp.version == "v1":
        assert init["agentCapabilities"]["mcpCapabilities"] == {"http": True, "sse": True, "acp": True}
    else:
        assert init["capabilities"]["session"]["mcp"] == {"stdio": {}, "http": {}, "acp": {}}
    async with offering(acp.client) as server:
        session_id = await open_session(acp, tmp_path, [declared()])
        turn = await acp.prompt(session_id, [call("echo", text="over acp"), {"say": "done"}])
        await acp.stopped(turn, "end_turn", timeout=T_WAIT)
    assert call_texts(acp.client, session_id) == ["echo: over acp"]
    methods = [r["params"]["method"] for r in server.requests]
    assert methods[0] == "tools/list" and "tools/call" in methods
    for request in server.requests:  # each is also checked against MessageMcpRequest by the harness
        params = request["params"]
        assert params["serverId"] == SERVER_ID and isinstance(params["requestId"], str)
        assert params["params"]["_meta"]["io.modelcontextprotocol/protocolVersion"] == PROTOCOL
    request_ids = [r["params"]["requestId"] for r in server.requests]
    assert len(set(request_ids)) == len(request_ids)
    (echo,) = server.calls("echo")
    assert echo["params"]["params"]["arguments"] == {"text": "over acp"}


async def test_two_sessions_using_the_same_client_server_never_share_a_request_id(acp: Acp, tmp_path: Path) -> None:
    """Each session's MCP client numbers its requests from 1; the same server serving two sessions of the connection
    must still see every `requestId` once (the binding refuses a duplicate in flight, and routes by it)."""
    async with offering(acp.client) as server:
        first = await open_session(acp, tmp_path, [declared()])
        second = await open_session(acp, tmp_path, [declared()])
        for session_id in (first, second):
            turn = await acp.prompt(session_id, [call("echo", text=session_id), {"say": "done"}])
            await acp.stopped(turn, "end_turn")
    request_ids = [r["params"]["requestId"] for r in server.requests]
    assert [r["params"]["method"] for r in server.requests].count("tools/list") == 2
    assert len(set(request_ids)) == len(request_ids), request_ids
    assert call_texts(acp.client, first) == [f"echo: {first}"] and call_texts(acp.client, second) == [f"echo: {second}"]


async def test_an_inner_mcp_error_and_an_outer_acp_error_each_fail_the_tool_call_in_words(
    acp: Acp, tmp_path: Path
) -> None:
    async with offering(acp.client):
        session_id = await open_session(acp, tmp_path, [declared()])
        turn = await acp.prompt(session_id, [call("fail"), call("broken"), call("echo", text="still"), {"say": "ok"}])
        await acp.stopped(turn, "end_turn")
    started = acp.calls_started(session_id)
    statuses = [acp.call_status(session_id, c["toolCallId"]) for c in started]
    assert statuses == ["failed", "failed", "completed"]
    texts = call_texts(acp.client, session_id)
    assert any("fail refuses everything" in t for t in texts), texts
    assert any("MCP server handler failed" in t for t in texts), texts
    assert texts[-1] == "echo: still"


async def test_a_cancelled_turn_withdraws_its_mcp_message_request_in_flight(acp: Acp, tmp_path: Path) -> None:
    async with offering(acp.client) as server:
        session_id = await open_session(acp, tmp_path, [declared()])
        turn = await acp.prompt(session_id, [call("wait"), {"say": "never"}])
        await acp.client.wait_for(
            lambda m: m.get("method") == "mcp/message" and (m["params"].get("params") or {}).get("name") == "wait"
        )
        await acp.client.cancel(session_id)
        await acp.stopped(turn, "cancelled")
        (held,) = server.calls("wait")
        withdrawn = await acp.client.wait_for(lambda m: m.get("method") == "$/cancel_request")
        assert withdrawn["params"] == {"requestId": held["id"]}
        # The client's late answer is ignored; the next turn calls the server as before.
        await acp.client.send({"id": held["id"], "error": {"code": -32800, "message": "Request cancelled"}})
        turn = await acp.prompt(session_id, [call("echo", text="after"), {"say": "done"}])
        await acp.stopped(turn, "end_turn")
    assert call_texts(acp.client, session_id)[-1] == "echo: after"


async def test_the_clients_mcp_message_notifications_reach_only_the_request_they_name(acp: Acp, tmp_path: Path) -> None:
    """The agent's `subscriptions/listen` is a request in flight: the client's `notifications/tools/list_changed`
    for it makes the next turn list the tools again. One naming no request of ours, another server, or no server at
    all (or a request id that is not a string) is dropped, never answered, and changes nothing."""
    async with offering(acp.client) as server:
        session_id = await open_session(acp, tmp_path, [declared()])
        listen = await acp.client.wait_for(
            lambda m: m.get("method") == "mcp/message" and m["params"]["method"] == "subscriptions/listen"
        )
        request_id = listen["params"]["requestId"]
        subscription = {"io.modelcontextprotocol/subscriptionId": request_id}
        acknowledged = {"notifications": {"toolsListChanged": True}, "_meta": subscription}
        await acp.client.notify(
            "mcp/message",
            {
                "serverId": SERVER_ID,
                "requestId": request_id,
                "method": "notifications/subscriptions/acknowledged",
                "params": acknowledged,
            },
        )
        changed = {"method": "notifications/tools/list_changed", "params": {"_meta": subscription}}
        for stray in (
            {"serverId": SERVER_ID, "requestId": "no-such-request", **changed},
            {"serverId": "no-such-server", "requestId": request_id, **changed},
            {"requestId": request_id, **changed},  # no serverId: invalid
            {"serverId": SERVER_ID, "requestId": 7, **changed},  # not a string id: invalid
            {"serverId": SERVER_ID, "requestId": request_id, "method": 7},  # not a method: invalid
        ):
            await acp.client.notify("mcp/message", stray)
        for _ in range(2):
            turn = await acp.prompt(session_id, [call("echo", text="unchanged")])
            await acp.stopped(turn, "end_turn")
        assert [r["params"]["method"] for r in server.requests].count("tools/list") == 1

        await acp.client.notify("mcp/message", {"serverId": SERVER_ID, "requestId": request_id, **changed})
        relisted = False
        for _ in range(20):  # the change reaches the MCP client in its own task: a turn or two later at most
            turn = await acp.prompt(session_id, [call("echo", text="changed")])
            await acp.stopped(turn, "end_turn")
            relisted = [r["params"]["method"] for r in server.requests].count("tools/list") == 2
            if relisted:
                break
        assert relisted, [r["params"]["method"] for r in server.requests]
    # Nothing answered a notification, and the connection is unharmed: it still answers.
    assert "result" in await acp.client.call("session/list", {})


async def test_an_mcp_message_request_to_the_agent_names_the_server_it_does_not_offer(acp: Acp) -> None:
    params = {"serverId": "anything", "requestId": "r1", "method": "tools/list", "params": {}}
    response = await acp.client.call("mcp/message", params)
    assert response["error"]["code"] == -33001, response
    assert "'anything'" in response["error"]["message"] and "offers no MCP servers" in response["error"]["message"]
    assert response["error"]["data"] == {"serverId": "anything"}
    invalid = await acp.client.call("mcp/message", {"requestId": "r1", "method": "tools/list"})
    assert invalid["error"]["code"] == -32602 and "serverId" in invalid["error"]["message"], invalid


async def test_an_acp_mcp_server_without_a_server_id_is_told_inside_the_next_turn(acp: Acp, tmp_path: Path) -> None:
    session_id = await open_session(acp, tmp_path, [{"type": "acp", "name": "nameless"}])
    turn = await acp.prompt(session_id, [{"say": "hi"}])
    await acp.stopped(turn, "end_turn")
    notices = [m for m in acp.client.received if "no serverId" in str(m)]
    assert notices, acp.client.received[-5:]
    assert not [m for m in acp.client.received if m.get("method") == "mcp/message"]


async def test_loading_a_session_again_brings_the_clients_mcp_server_back(
    start_server: StartServer, version: str, tmp_path: Path
) -> None:
    """v1 `session/load`, v2 `session/resume`: the servers are the request's, the client's over its connection."""
    acp = VERSIONS[version](await start_server())
    await acp.initialize()
    async with offering(acp.client, "second:0002") as server:
        session_id = await open_session(acp, tmp_path, [])
        turn = await acp.prompt(session_id, [{"say": "first"}])
        await acp.stopped(turn, "end_turn")
        again = {"sessionId": session_id, "cwd": str(tmp_path), "mcpServers": [declared("second:0002")]}
        if version == "v1":
            response = await acp.client.call("session/load", again)
        else:
            response = await acp.client.call("session/resume", again)
        assert "result" in response, response
        turn = await acp.prompt(session_id, [call("echo", text="loaded"), {"say": "done"}])
        if version == "v1":
            await acp.stopped(turn, "end_turn")
        else:  # the resume said `idle` too (the session's state): this turn's is the third
            assert (await acp.client.idle(session_id, 3))["params"]["update"]["stopReason"] == "end_turn"
        assert [r["params"]["serverId"] for r in server.requests] == ["second:0002"] * len(server.requests)
    assert call_texts(acp.client, session_id) == ["echo: loaded"]


@pytest.mark.parametrize("transport", ["websocket"], indirect=True)
async def test_a_remote_connection_may_offer_an_mcp_server_over_acp_but_not_a_command(
    start_server: StartServer, tmp_path: Path
) -> None:
    """Under `serve` a client's command would run on the server's machine (refused, REMOTE.md decision 5); a server
    it offers over ACP runs in the client, so it is used like on stdio."""
    acp = VERSIONS["v1"](await start_server())
    await acp.initialize()
    refused = await acp.client.call(
        "session/new",
        {"cwd": str(tmp_path), "mcpServers": [{"name": "cmd", "command": "/bin/true", "args": [], "env": []}]},
    )
    assert refused["error"]["code"] == -32602 and "is a command" in refused["error"]["message"], refused
    async with offering(acp.client):
        session_id = await open_session(acp, tmp_path, [declared()])
        turn = await acp.prompt(session_id, [call("echo", text="remote"), {"say": "done"}])
        await acp.stopped(turn, "end_turn")
    assert call_texts(acp.client, session_id) == ["echo: remote"]
