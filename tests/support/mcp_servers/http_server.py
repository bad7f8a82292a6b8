"""An MCP server over HTTP on 127.0.0.1 (port chosen by the OS), for the MCP bridge's tests:
`python http_server.py http|sse`. It prints its URL on the first line of stdout, then serves until killed.
"""

from __future__ import annotations

import socket
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

import anyio
import uvicorn

from tests.support.mcp_servers.tools import build_server


async def serve(transport: str) -> None:
    server = build_server(f"{transport}-test")
    app = server.sse_app() if transport == "sse" else server.streamable_http_app()
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    path = "/sse" if transport == "sse" else "/mcp"
    sys.stdout.write(f"http://127.0.0.1:{port}{path}\n")
    sys.stdout.flush()
    config = uvicorn.Config(app, log_level="warning", lifespan="on")
    await uvicorn.Server(config).serve(sockets=[listener])


if __name__ == "__main__":
    anyio.run(serve, sys.argv[1] if len(sys.argv) > 1 else "http")
