"""A hand-written MCP server of the 2025 protocol on stdio (`initialize` handshake, no `server/discover`): what most
servers in use today speak (the TypeScript SDK 1.x, `npx` servers). Plain JSON-RPC over stdin/stdout with the stdlib,
so the bridge is tested against the older era without the new SDK deciding the era for it.

Tools: `roots` asks the client `roots/list` and answers with the URIs; `grow` adds a tool named by its argument and
sends `notifications/tools/list_changed`; every grown tool answers "grown: TEXT".
"""

from __future__ import annotations

import itertools
import sys
from typing import Any

import orjson

PROTOCOL = "2025-06-18"
_ids = itertools.count(1)
grown: list[str] = []


def send(message: dict[str, Any]) -> None:
    sys.stdout.buffer.write(orjson.dumps({"jsonrpc": "2.0", **message}) + b"\n")
    sys.stdout.flush()


def read() -> dict[str, Any] | None:
    line = sys.stdin.buffer.readline()
    message: dict[str, Any] | None = orjson.loads(line) if line else None
    return message


def tools() -> list[dict[str, Any]]:
    schema = {"type": "object", "properties": {"name": {"type": "string"}}}
    read_only = {"readOnlyHint": True}
    listed = [
        {"name": "roots", "description": "The roots.", "inputSchema": {"type": "object"}, "annotations": read_only},
        {"name": "grow", "description": "Add a tool.", "inputSchema": schema},
    ]
    text = {"type": "object", "properties": {"text": {"type": "string"}}}
    listed += [{"name": n, "description": "Echo.", "inputSchema": text, "annotations": read_only} for n in grown]
    return listed


def ask_roots() -> str:
    """Send `roots/list` and wait for its answer (answering nothing else meanwhile: the client sends nothing)."""
    request_id = f"srv-{next(_ids)}"
    send({"id": request_id, "method": "roots/list"})
    while (message := read()) is not None:
        if message.get("id") == request_id and "method" not in message:
            return " ".join(root["uri"] for root in message.get("result", {}).get("roots", []))
    return "no answer"


def call(name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    if name == "roots":
        text = ask_roots()
    elif name == "grow":
        grown.append(arguments["name"])
        send({"method": "notifications/tools/list_changed"})
        text = f"added {arguments['name']}"
    elif name in grown:
        text = f"grown: {arguments.get('text', '')}"
    else:
        return {"content": [{"type": "text", "text": f"unknown tool {name}"}], "isError": True}
    return {"content": [{"type": "text", "text": text}]}


def main() -> None:
    while (message := read()) is not None:
        method, request_id = message.get("method"), message.get("id")
        if request_id is None:
            continue  # notifications (initialized, cancelled) need no answer
        if method == "initialize":
            capabilities = {"tools": {"listChanged": True}}
            info = {"name": "legacy", "version": "1.0"}
            send(
                {
                    "id": request_id,
                    "result": {"protocolVersion": PROTOCOL, "capabilities": capabilities, "serverInfo": info},
                }
            )
        elif method == "tools/list":
            send({"id": request_id, "result": {"tools": tools()}})
        elif method == "tools/call":
            params = message.get("params", {})
            send({"id": request_id, "result": call(params.get("name", ""), params.get("arguments") or {})})
        elif method == "ping":
            send({"id": request_id, "result": {}})
        else:
            send({"id": request_id, "error": {"code": -32601, "message": f"Method not found: {method}"}})


if __name__ == "__main__":
    main()
