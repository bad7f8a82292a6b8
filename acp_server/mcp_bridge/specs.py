"""MCP servers as the editor (ACP `McpServer`) or the config file describes them, read into one frozen shape.

ACP sends four shapes: stdio (`name`, `command`, `args`, `env: [{name, value}]`, no `type`), `type: "http"` and
`type: "sse"` (`name`, `url`, `headers: [{name, value}]`), and the unstable `type: "acp"` (`name`, `serverId`: a
server the client itself provides over the ACP connection, mcp_bridge/over_acp.py). An entry that cannot be read is
not a reason to refuse the session: it becomes a server that failed to start, and the user hears why inside the next
turn.

Also here: the names the model sees. A tool is offered as `mcp__<server>__<tool>`, with every character a model
API might refuse replaced, so one rule serves every provider.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from acp_server.errors import McpServerError

__all__ = [
    "MCP_TOOL_PREFIX",
    "ServerSpec",
    "merge_servers",
    "parse_server",
    "safe_name",
    "tool_name",
]

MCP_TOOL_PREFIX = "mcp__"
# OpenAI's limit on a function name, the strictest of the providers; Anthropic allows 64 as well.
MAX_TOOL_NAME = 64
_UNSAFE = re.compile(r"[^A-Za-z0-9_-]")


@dataclass(frozen=True, slots=True)
class ServerSpec:
    name: str
    transport: Literal["stdio", "http", "sse", "acp"]
    command: str = ""
    args: tuple[str, ...] = ()
    # stdio: variables set on top of the MCP SDK's small default environment (HOME, PATH, ...).
    env: Mapping[str, str] = field(default_factory=dict)
    # stdio: where it runs; None is the session's directory. ACP has no such field: the config file sets it in
    # `_meta.acpServer.cwd`.
    cwd: str | None = None
    url: str = ""
    headers: Mapping[str, str] = field(default_factory=dict)
    # http/sse from a remote client (REMOTE.md decision 5): connected only to global addresses, or to these hosts
    # (`--allow-mcp-host`; mcp_bridge/addresses.py). None: not checked (stdio's editor, the config file's servers).
    allowed_hosts: tuple[str, ...] | None = None
    # acp: the client's id for the server (`serverId`), which its `mcp/message` traffic names.
    acp_id: str = ""

    def describe(self) -> str:
        """Where the server is, for messages (never the env or headers: they may hold keys)."""
        if self.transport == "acp":
            return f"the client's MCP server {self.acp_id!r} (over ACP)"
        return " ".join((self.command, *self.args)) if self.transport == "stdio" else self.url


def _pairs(raw: Any, what: str, server: str) -> dict[str, str]:
    if raw is None:
        return {}
    if not isinstance(raw, list):
        raise McpServerError(f"the MCP server {server!r} has an invalid {what} list")
    pairs: dict[str, str] = {}
    for item in raw:
        if (
            not isinstance(item, dict)
            or not isinstance(item.get("name"), str)
            or not isinstance(item.get("value"), str)
        ):
            raise McpServerError(f"the MCP server {server!r} has an invalid {what} entry (name and value are strings)")
        pairs[item["name"]] = item["value"]
    return pairs


def parse_server(raw: Mapping[str, Any]) -> ServerSpec:
    """An ACP `McpServer` object as a spec; raises McpServerError saying what is wrong with it."""
    name = raw.get("name")
    if not isinstance(name, str) or not name.strip():
        raise McpServerError("an MCP server entry has no name")
    kind = raw.get("type", "stdio")
    if kind == "stdio":
        command = raw.get("command")
        args = raw.get("args", [])
        if not isinstance(command, str) or not command:
            raise McpServerError(f"the MCP server {name!r} has no command")
        if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
            raise McpServerError(f"the MCP server {name!r} has invalid args (a list of strings)")
        meta = raw.get("_meta")
        ours = meta.get("acpServer") if isinstance(meta, dict) else None
        cwd = ours.get("cwd") if isinstance(ours, dict) else None
        return ServerSpec(
            name,
            "stdio",
            command=command,
            args=tuple(args),
            env=_pairs(raw.get("env"), "env", name),
            cwd=cwd if isinstance(cwd, str) and cwd else None,
        )
    if kind in ("http", "sse"):
        url = raw.get("url")
        if not isinstance(url, str) or not url.startswith(("http://", "https://")):
            raise McpServerError(f"the MCP server {name!r} has no http(s) url")
        transport: Literal["http", "sse"] = "http" if kind == "http" else "sse"
        return ServerSpec(name, transport, url=url, headers=_pairs(raw.get("headers"), "headers", name))
    if kind == "acp":
        server_id = raw.get("serverId")
        if not isinstance(server_id, str) or not server_id:
            raise McpServerError(f"the MCP server {name!r} has no serverId (the acp transport names it)")
        return ServerSpec(name, "acp", acp_id=server_id)
    raise McpServerError(f"the MCP server {name!r} uses the {kind!r} transport, which this agent does not support")


def merge_servers(
    configured: Iterable[Mapping[str, Any]], editor: Iterable[Mapping[str, Any]]
) -> tuple[Mapping[str, Any], ...]:
    """The config file's servers, then the editor's; an editor entry replaces a configured one of the same name."""
    merged: dict[Any, Mapping[str, Any]] = {}
    for index, entry in enumerate((*configured, *editor)):
        name = entry.get("name")
        merged.pop(name if isinstance(name, str) else index, None)  # a replaced entry moves to the editor's place
        merged[name if isinstance(name, str) else index] = entry
    return tuple(merged.values())


def safe_name(text: str) -> str:
    """Text in the characters every model API accepts in a tool name."""
    return _UNSAFE.sub("_", text) or "_"


def tool_name(server_id: str, tool: str) -> str:
    """`mcp__<server>__<tool>`, at most MAX_TOOL_NAME long; `server_id` is the server's `safe_name`, made unique."""
    return f"{MCP_TOOL_PREFIX}{server_id}__{safe_name(tool)}"[:MAX_TOOL_NAME]
