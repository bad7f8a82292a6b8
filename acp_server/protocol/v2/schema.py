"""Wire models of the ACP v2 requests read, where they differ from v1's (`protocol/schema.py`): the handshake,
`session/new` and `session/resume` (typed MCP servers, `mcpServers` optional, `replayFrom`), and the two cancels
that v2 adds. Same conventions as v1's models: strict, camelCase, `_meta` kept, unknown fields allowed.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field, field_validator

from acp_server.protocol.schema import KeptObject, KeptValue, WireModel

__all__ = [
    "CancelTerminalRequest",
    "CancelToolCallRequest",
    "ForkSessionRequestV2",
    "InitializeRequestV2",
    "NewSessionRequestV2",
    "ResumeSessionRequestV2",
]


class InitializeRequestV2(WireModel):
    """`info` and `capabilities` (object markers). Read leniently: what does not parse is left at its default, as the
    SDK does for a request above 2 (ACP-V2.md §2); nothing in it changes what acp-server does yet. Bounded as kept
    values all the same, so a `_meta` in them meets v1's bounds (`bounds.py`)."""

    protocol_version: int
    info: KeptValue = None
    capabilities: KeptValue = None


def _typed_servers(servers: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """v2 MCP servers carry a `type`; stdio, http and the unstable acp (a server the client offers over ACP,
    mcp_bridge/over_acp.py) are supported, `sse` is gone from v2 (§23 Q21)."""
    for index, server in enumerate(servers):
        kind = server.get("type")
        name = server.get("name", index)
        if kind not in ("stdio", "http", "acp"):
            raise ValueError(f"{index}: MCP server {name!r}: transport {kind!r} is not supported (stdio, http, acp)")
    return servers


class NewSessionRequestV2(WireModel):
    cwd: str
    mcp_servers: list[KeptObject] = []
    additional_directories: list[str] = []

    _servers = field_validator("mcp_servers")(_typed_servers)


class ResumeSessionRequestV2(WireModel):
    session_id: str
    cwd: str
    mcp_servers: list[KeptObject] = []
    additional_directories: list[str] = []
    # `{"type": "start"}` replays everything before the response; omitted or null replays nothing.
    replay_from: KeptObject | None = Field(default=None)

    _servers = field_validator("mcp_servers")(_typed_servers)


class ForkSessionRequestV2(WireModel):
    """Unstable `session/fork` (`session.fork`): the source's id and the fork's place, read as `session/new`'s."""

    session_id: str
    cwd: str
    mcp_servers: list[KeptObject] = []
    additional_directories: list[str] = []

    _servers = field_validator("mcp_servers")(_typed_servers)


class CancelToolCallRequest(WireModel):
    session_id: str
    tool_call_id: str


class CancelTerminalRequest(WireModel):
    session_id: str
    terminal_id: str
