"""`probe_mcp_server`: start one MCP server, list its tools, and shut it down; for `acp-server doctor`, which tells a
user whether the servers in their config file work before an editor session depends on them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio

from acp_server.errors import McpServerError
from acp_server.mcp_bridge.link import describe_failure, list_remote_tools
from acp_server.mcp_bridge.specs import parse_server
from acp_server.mcp_bridge.transports import connect, load_sdk

__all__ = ["probe_mcp_server"]


async def probe_mcp_server(spec: dict[str, Any], *, timeout: float) -> list[str]:
    """The server's tool names (as the server names them); raises McpServerError saying, in plain words, why the
    server cannot be used. A stdio server runs in the current directory."""
    server = parse_server(spec)
    # Our own import of the SDK is not the server's answer time: a cold import takes seconds on a busy machine.
    await load_sdk()
    try:
        with anyio.fail_after(timeout):
            async with connect(server, Path.cwd()) as (client, _lost):
                tools = await list_remote_tools(client)
    except TimeoutError:
        raise McpServerError(f"the MCP server {server.name!r} did not answer within {timeout:g} s") from None
    except McpServerError:
        raise
    except Exception as exc:
        raise McpServerError(f"the MCP server {server.name!r} failed to start: {describe_failure(exc)}") from None
    return [tool.name for tool in tools]
