"""MCP servers for sessions: the editor's (`mcpServers` of `session/new`, `load`, `resume`, `fork`) and the config
file's, connected with the official `mcp` SDK in the background, their tools offered to the model as
`mcp__<server>__<tool>`.

Named `mcp_bridge` so it never shadows the SDK's `mcp` package. Importing this package is cheap: the SDK is imported
(in a worker thread) only when a session actually has MCP servers, or when `probe_mcp_server` runs.

    specs.py       ACP McpServer objects -> ServerSpec; tool names
    transports.py  ServerSpec -> connected SDK client (stdio / HTTP / SSE / acp), with a lost-connection signal
    over_acp.py    a server the client offers over the ACP connection: its `mcp/message` traffic
    link.py        one server's connection task, state, tools and calls
    tools.py       a server's tools as runtime Tools (permissions, results)
    hub.py         one session's servers; the tools of a turn and what the user must be told
    registry.py    every session's servers on a connection: shutdown at EOF, kill at exit
    probe.py       start a server, list its tools, stop it (for `acp-server doctor`)

May import `runtime`, `settings` and the package's version (its client name); never `sessions` or `protocol`.
"""

from __future__ import annotations

from acp_server.mcp_bridge.registry import McpRegistry
from acp_server.mcp_bridge.specs import MCP_TOOL_PREFIX, merge_servers

# Only what the server needs at start-up is imported here; `hub` (a session's servers) and `probe` (for doctor) are
# imported from their modules when they are needed.
__all__ = ["MCP_TOOL_PREFIX", "McpRegistry", "merge_servers"]
