"""The tools every test MCP server offers: one read-only, one that writes, one slow (it records being cancelled),
one that fails, one that returns mixed content, one an SVG image (which no model takes), one that adds a tool (and
says the list changed), and two that make the server die (now, or a moment later).

Kept in one place so the stdio and HTTP servers behave the same; `MCPServer` is the MCP SDK's own server class, so
the bridge is tested against a real implementation of the protocol, not a fake.
"""

from __future__ import annotations

import base64
import os
import threading
import time
from pathlib import Path
from typing import Any

import anyio
from mcp.server.mcpserver import Context, MCPServer
from mcp.types import ImageContent, ResourceLink, TextContent, ToolAnnotations

READ_ONLY = ToolAnnotations(read_only_hint=True)


def _mark(marker: str, text: str) -> None:
    # Synchronous on purpose: it runs while the call is being cancelled, where an await would not complete.
    Path(marker).write_text(text)


def build_server(name: str) -> MCPServer:
    server = MCPServer(name)

    @server.tool(annotations=READ_ONLY)
    def echo(text: str) -> str:
        """Return the text unchanged."""
        return f"echo: {text}"

    @server.tool(annotations=READ_ONLY)
    def env(name: str) -> str:
        """The value of an environment variable of the server process, or (unset)."""
        return os.environ.get(name, "(unset)")

    @server.tool(annotations=READ_ONLY)
    def pid() -> int:
        """The server's process id."""
        return os.getpid()

    @server.tool()
    def write_note(name: str, text: str) -> str:
        """Write text to a file in the server's working directory."""
        Path(name).write_text(text)
        return f"wrote {len(text)} characters to {name}"

    @server.tool(annotations=READ_ONLY)
    async def slow(seconds: float, marker: str) -> str:
        """Sleep; if the call is cancelled first, write 'cancelled' to the marker file."""
        _mark(marker, "started")
        try:
            await anyio.sleep(seconds)
        except anyio.get_cancelled_exc_class():
            _mark(marker, "cancelled")
            raise
        _mark(marker, "finished")
        return f"slept {seconds} s"

    @server.tool(annotations=READ_ONLY)
    def fail(message: str) -> str:
        """Always fails with the message."""
        raise ValueError(message)

    @server.tool(annotations=READ_ONLY)
    def mixed() -> list[Any]:
        """Text, an image and a resource link."""
        return [
            TextContent(type="text", text="a picture follows"),
            ImageContent(type="image", data="iVBORw0KGgo=", mime_type="image/png"),
            ResourceLink(type="resource_link", uri="file:///tmp/report.txt", name="report.txt"),
        ]

    @server.tool(annotations=READ_ONLY)
    def svg() -> list[Any]:
        """An SVG image, which no model endpoint takes."""
        return [
            TextContent(type="text", text="a drawing follows"),
            ImageContent(type="image", data=base64.b64encode(b"<svg/>").decode(), mime_type="image/svg+xml"),
        ]

    @server.tool(annotations=READ_ONLY, structured_output=True)
    def weather(city: str) -> dict[str, Any]:
        """Structured content."""
        return {"city": city, "celsius": 21}

    @server.tool()
    async def grow(name: str, ctx: Context) -> str:
        """Add a read-only tool called `name`, then tell the client the tool list changed."""

        def grown(text: str) -> str:
            return f"grown: {text}"

        server.add_tool(grown, name=name, description="Answer with the text.", annotations=READ_ONLY)
        await ctx.notify_tools_changed()
        return f"added {name}"

    @server.tool()
    def die() -> str:
        """The server process exits at once, in the middle of the call."""
        os._exit(3)

    @server.tool()
    def die_soon(seconds: float) -> str:
        """Answer, then exit after `seconds`: the server dies between calls."""

        def later() -> None:
            time.sleep(seconds)
            os._exit(4)

        threading.Thread(target=later, daemon=True).start()
        return f"exiting in {seconds} s"

    return server
