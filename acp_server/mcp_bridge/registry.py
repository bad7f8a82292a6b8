"""Every session's MCP servers on one ACP connection, so stdin EOF can shut them all down and exit can kill what is
left: a session closed or replaced mid-shutdown is still found here until its servers are gone.

The connection calls `stop_all` when stdin ends (the servers' shutdowns start alongside the turns' cleanup),
`wait_stopped` while it drains, and `kill_all` on the way out; a stdio server that ignored its closed stdin is then
killed with its whole process group, so no process outlives the agent.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from acp_server.runtime.child_env import KEEP_ALL, ChildEnvPolicy
from acp_server.settings.config import DEFAULT_MCP_START_WAIT

if TYPE_CHECKING:  # the hub (and what it imports) loads when a session first has servers, not at start-up
    from acp_server.mcp_bridge.hub import McpHub, Spawn
    from acp_server.mcp_bridge.over_acp import AcpMcpMessages

__all__ = ["McpRegistry"]


class McpRegistry:
    def __init__(
        self, spawn: Spawn, environment: ChildEnvPolicy = KEEP_ALL, start_wait: float = DEFAULT_MCP_START_WAIT
    ) -> None:
        self._spawn = spawn
        # What a stdio server's environment leaves out, and how long a turn waits for a starting server (frozen
        # configuration; see runtime/child_env.py and Config.mcp_start_wait).
        self._environment = environment
        self._start_wait = start_wait
        self._hubs: list[McpHub] = []

    def open(
        self,
        servers: Iterable[Mapping[str, Any]],
        cwd: Path,
        roots: tuple[Path, ...] = (),
        *,
        untrusted: Sequence[Mapping[str, Any]] = (),
        allowed_hosts: tuple[str, ...] = (),
        messages: AcpMcpMessages | None = None,
    ) -> McpHub | None:
        """Start a session's servers in the background; None when it has none (the SDK is then never imported).
        `roots`: the session's directories (cwd first), for servers that ask. `untrusted`: those a remote client
        gave, connected only to global addresses or `allowed_hosts` (mcp_bridge/addresses.py). `messages`: the
        session's client's ACP connection, for the servers it offers over it (`acp`, mcp_bridge/over_acp.py)."""
        servers = tuple(servers)
        if not servers:
            return None
        from acp_server.mcp_bridge.hub import McpHub  # noqa: PLC0415 (MCP: the hub loads only for a session with an MCP server)

        self._hubs = [hub for hub in self._hubs if not hub.finished]
        hub = McpHub(
            servers,
            cwd,
            roots,
            self._environment,
            self._start_wait,
            untrusted=untrusted,
            allowed_hosts=allowed_hosts,
            messages=messages,
        )
        hub.start(self._spawn)
        self._hubs.append(hub)
        return hub

    def stop_all(self) -> None:
        for hub in self._hubs:
            hub.stop()

    async def wait_stopped(self) -> None:
        for hub in self._hubs:
            await hub.wait_finished()

    def kill_all(self) -> None:
        for hub in self._hubs:
            hub.kill()

    def __len__(self) -> int:
        """Sessions whose servers are not all shut down yet."""
        return sum(1 for hub in self._hubs if not hub.finished)
