"""The MCP bridge's own logic, without an agent around it: reading ACP `McpServer` entries, tool names, merging the
config file's servers with the editor's, mapping results, what a turn is told about servers, and the doctor's probe
(against the real stdio test server)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp.types import CallToolResult, EmbeddedResource, ImageContent, TextContent, TextResourceContents

from acp_server.errors import McpServerError
from acp_server.mcp_bridge import merge_servers
from acp_server.mcp_bridge.hub import McpHub
from acp_server.mcp_bridge.probe import probe_mcp_server
from acp_server.mcp_bridge.specs import ServerSpec, parse_server, tool_name
from acp_server.mcp_bridge.tools import tool_result
from acp_server.runtime.model import Notice, TextOutput, TurnEvent
from acp_server.runtime.tools import ToolBox
from tests.support.harness import scaled

SERVER = Path(__file__).resolve().parents[2] / "support" / "mcp_servers" / "stdio_server.py"


def test_the_three_acp_shapes_are_read() -> None:
    stdio = parse_server({"name": "a", "command": "/bin/x", "args": ["-v"], "env": [{"name": "K", "value": "v"}]})
    assert stdio == ServerSpec("a", "stdio", command="/bin/x", args=("-v",), env={"K": "v"})
    http = parse_server({"type": "http", "name": "b", "url": "http://h/mcp", "headers": [{"name": "H", "value": "1"}]})
    assert http == ServerSpec("b", "http", url="http://h/mcp", headers={"H": "1"})
    assert parse_server({"type": "sse", "name": "c", "url": "https://h/sse", "headers": []}).transport == "sse"
    # The unstable MCP-over-ACP: the client's own server, named by its `serverId` (mcp_bridge/over_acp.py).
    assert parse_server({"type": "acp", "name": "d", "serverId": "tools:1"}) == ServerSpec("d", "acp", acp_id="tools:1")


def test_a_config_file_servers_working_directory_travels_in_meta() -> None:
    raw = {"name": "a", "command": "x", "args": [], "env": [], "_meta": {"acpServer": {"cwd": "/srv"}}}
    assert parse_server(raw).cwd == "/srv"


@pytest.mark.parametrize(
    ("raw", "words"),
    [
        ({"command": "x", "args": [], "env": []}, "no name"),
        ({"name": "a", "args": [], "env": []}, "'a' has no command"),
        ({"name": "a", "command": "x", "args": [1], "env": []}, "invalid args"),
        ({"name": "a", "command": "x", "args": [], "env": [{"name": "K"}]}, "invalid env entry"),
        ({"type": "http", "name": "a", "url": "ftp://h", "headers": []}, "no http(s) url"),
        ({"type": "acp", "name": "a", "id": "x"}, "'a' has no serverId"),
        ({"type": "websocket", "name": "a", "url": "ws://h"}, "'websocket' transport"),
    ],
)
def test_an_unusable_entry_is_refused_in_words_naming_the_server(raw: dict[str, Any], words: str) -> None:
    with pytest.raises(McpServerError, match=words.replace("(", r"\(").replace(")", r"\)")):
        parse_server(raw)


def test_tool_names_use_only_characters_every_model_api_accepts() -> None:
    assert tool_name("srv", "echo") == "mcp__srv__echo"
    assert tool_name("my_server", "get.issue/v2") == "mcp__my_server__get_issue_v2"
    assert len(tool_name("s" * 40, "t" * 40)) == 64


def test_two_server_names_that_read_alike_get_distinct_tool_prefixes() -> None:
    async def build() -> McpHub:
        servers: list[dict[str, Any]] = [
            {"name": n, "command": "x", "args": [], "env": []} for n in ("my server", "my_server")
        ]
        return McpHub(servers, Path("/tmp"))

    hub = anyio.run(build)
    assert [link.server_id for link in hub.links] == ["my_server", "my_server_2"]


def test_the_editors_servers_replace_the_config_files_of_the_same_name() -> None:
    configured = [{"name": "a", "command": "config-a"}, {"name": "b", "command": "config-b"}]
    editor = [{"name": "b", "command": "editor-b"}, {"name": "c", "command": "editor-c"}]
    merged = merge_servers(configured, editor)
    assert [(s["name"], s["command"]) for s in merged] == [("a", "config-a"), ("b", "editor-b"), ("c", "editor-c")]


def test_results_map_to_content_items_and_structured_content_to_raw_output() -> None:
    result = CallToolResult(
        content=[
            TextContent(type="text", text="first"),
            ImageContent(type="image", data="AAAA", mime_type="image/png"),
            EmbeddedResource(
                type="resource", resource=TextResourceContents(uri="file:///a.txt", text="inside", mime_type=None)
            ),
        ],
        structured_content={"n": 1},
    )
    mapped = tool_result(result)
    assert mapped.ok
    assert mapped.raw_output == {"n": 1}
    assert mapped.content == (
        TextOutput("first"),
        TextOutput("[image: image/png, about 3 bytes, not shown]"),
        TextOutput('<resource uri="file:///a.txt">\ninside\n</resource>'),
    )
    only_structured = tool_result(CallToolResult(content=[], structured_content={"n": 2}))
    assert only_structured.output == '{\n  "n": 2\n}'
    failed = tool_result(CallToolResult(content=[TextContent(type="text", text="bad input")], is_error=True))
    assert not failed.ok
    assert failed.output == "error: bad input"


def test_a_turn_waits_for_a_starting_server_only_so_long_and_says_so_once() -> None:
    said: list[TurnEvent] = []

    async def emit(event: TurnEvent) -> None:
        said.append(event)

    async def turns() -> tuple[float, ToolBox, ToolBox]:
        # Never started, so it stays "connecting": the case of a server that hangs while starting.
        hub = McpHub([{"name": "slow", "command": "x", "args": [], "env": []}], Path("/tmp"), start_wait=0.2)
        base = ToolBox(())
        started = anyio.current_time()
        first = await hub.toolbox(base, emit)
        waited = anyio.current_time() - started
        second = await hub.toolbox(base, emit)
        return waited, first, second

    waited, first, second = anyio.run(turns)
    assert 0.15 < waited < scaled(1.0)  # the ready wait, then no more
    assert first.specs == () and second.specs == ()
    assert said == [
        Notice("The MCP server 'slow' is still starting; its tools are not available yet.", severity="warning")
    ]


async def test_the_probe_lists_a_servers_tools() -> None:
    spec = {"name": "srv", "command": sys.executable, "args": [str(SERVER)], "env": []}
    names = await probe_mcp_server(spec, timeout=scaled(20))
    assert {"echo", "write_note", "slow", "die"} <= set(names)


async def test_the_probe_says_why_a_server_cannot_start() -> None:
    spec = {"name": "srv", "command": "acp-test-no-such-command", "args": [], "env": []}
    with pytest.raises(McpServerError, match="command not found: acp-test-no-such-command"):
        await probe_mcp_server(spec, timeout=scaled(5))
