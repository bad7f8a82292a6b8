"""A session's MCP servers: started together in the background, offered to each turn, stopped with the session.

Waiting for a server that is still starting: a turn waits at most until `start_wait` (`--mcp-start-wait`, 10 s by
default) after the server was started (not after the turn began), so the first prompt of a fresh session gets a
typical `npx`/`uvx` server's tools, and a server that hangs delays only the turns of its first ten seconds. After
that, a turn says once that the server is still starting and goes on without it; its tools join a later turn once it
is ready.

Problems (a server that failed to start, stopped, or is still starting) are told to the user at the start of the
next turn, as one short agent message, each once; never outside a turn, where the editor has nowhere to show it.

A server's tool list is read when it connects, and again at the start of the next turn after the server says it
changed (`notifications/tools/list_changed`), so a turn's tool list never changes under the model mid-turn.
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine, Iterable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import anyio

from acp_server.errors import McpServerError
from acp_server.mcp_bridge.link import ServerLink
from acp_server.mcp_bridge.over_acp import AcpMcpMessages
from acp_server.mcp_bridge.specs import ServerSpec, parse_server, safe_name
from acp_server.mcp_bridge.tools import link_tools
from acp_server.runtime.child_env import KEEP_ALL, ChildEnvPolicy
from acp_server.runtime.model import Emit, Notice
from acp_server.runtime.tools import Tool, ToolBox
from acp_server.settings.config import DEFAULT_MCP_START_WAIT

__all__ = ["McpHub", "Spawn"]

# Starts a task under a long-lived owner (the ACP connection's task group).
Spawn = Callable[[Callable[..., Coroutine[Any, Any, Any]]], None]

# After a session's servers were asked to stop and the grace period passed, how long the kill may take to show.
KILL_WAIT = 1.0


class McpHub:
    """The MCP servers of one session, one `ServerLink` (and one task) each."""

    def __init__(
        self,
        servers: Iterable[Mapping[str, Any]],
        cwd: Path,
        roots: tuple[Path, ...] = (),
        environment: ChildEnvPolicy = KEEP_ALL,
        start_wait: float = DEFAULT_MCP_START_WAIT,
        *,
        untrusted: Sequence[Mapping[str, Any]] = (),
        allowed_hosts: tuple[str, ...] = (),
        messages: AcpMcpMessages | None = None,
    ) -> None:
        """`untrusted`: the entries of `servers` a remote client gave (by identity), connected only to global
        addresses or `allowed_hosts` (mcp_bridge/addresses.py). `messages`: the session's client's ACP connection,
        which carries the servers it offers itself (`acp`, mcp_bridge/over_acp.py)."""
        self._start_wait = start_wait
        self.links: list[ServerLink] = []
        used: set[str] = set()
        for raw in servers:
            name = raw.get("name")
            label = name if isinstance(name, str) and name else "(unnamed)"
            spec: ServerSpec | None
            try:
                spec, problem = parse_server(raw), ""
                if any(raw is entry for entry in untrusted):
                    spec = replace(spec, allowed_hosts=allowed_hosts)
            except McpServerError as exc:
                spec, problem = None, str(exc)
            server_id = base = safe_name(label)
            suffix = 2
            while server_id in used:  # two names that read alike once made safe ("a b", "a_b")
                server_id, suffix = f"{base}_{suffix}", suffix + 1
            used.add(server_id)
            self.links.append(
                ServerLink(
                    label,
                    server_id,
                    spec,
                    cwd,
                    problem=problem,
                    roots=roots,
                    environment=environment,
                    messages=messages,
                )
            )
        self._tools: dict[ServerLink, tuple[Tool[Any], ...]] = {}

    def start(self, spawn: Spawn) -> None:
        """Start every server's task under `spawn`, the owner of background work (the ACP connection's task
        group), so nothing here outlives the connection."""
        for link in self.links:
            spawn(link.run)

    async def toolbox(self, base: ToolBox, emit: Emit) -> ToolBox:
        """The turn's tools: `base` plus every ready server's. Servers still starting are waited for (see the
        module docstring); what the user has not been told yet is said first. Cancellable."""
        for link in self.links:
            with anyio.move_on_at(link.started_at + self._start_wait):
                await link.settled.wait()
        lines = self._notice()
        if lines:
            # One line stands alone as the notice's title; several get a title of their own.
            title = "" if len(lines) == 1 else f"{len(lines)} MCP servers' tools are not available"
            await emit(Notice("\n".join(lines), title=title, severity="warning"))
        tools: list[Tool[Any]] = []
        for link in self.links:
            if link.state == "ready" and link.tools_changed:
                await link.refresh_tools()
                self._tools.pop(link, None)
            if link.state == "ready":
                if link not in self._tools:
                    self._tools[link] = link_tools(link)
                tools.extend(self._tools[link])
        return base.extended(tools)

    def _notice(self) -> list[str]:
        lines: list[str] = []
        for link in self.links:
            if link.untold:
                link.untold = False
                lines.append(f"{link.problem[:1].upper()}{link.problem[1:]}; its tools are not available.")
            elif link.state == "connecting" and not link.told_slow:
                link.told_slow = True
                lines.append(f"The MCP server {link.name!r} is still starting; its tools are not available yet.")
        return lines

    # --- ending ---

    def stop(self) -> None:
        for link in self.links:
            link.stop()

    def kill(self) -> None:
        for link in self.links:
            link.kill()

    @property
    def finished(self) -> bool:
        return all(link.finished.is_set() for link in self.links)

    async def wait_finished(self) -> None:
        for link in self.links:
            await link.finished.wait()

    async def aclose(self, grace: float) -> None:
        """Stop every server; one that is still running after `grace` seconds is killed."""
        self.stop()
        with anyio.move_on_after(grace):
            await self.wait_finished()
        if not self.finished:
            self.kill()
            with anyio.move_on_after(KILL_WAIT):
                await self.wait_finished()
