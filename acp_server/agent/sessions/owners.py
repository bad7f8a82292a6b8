"""Who a connection acts for, and which sessions are theirs (shared/design/REMOTE.md, decisions 4 and 5).

A remote connection authenticates as a principal (remote/tokens.py) with the directories it may work in; stdio's one
connection is the principal `local`, which no token maps to, and may work anywhere. A session belongs to the
principal that created it (new or fork): stored in its config (store/records.py `OWNER_KEY`, absent for `local`),
and kept in the agent's memory (`SessionOwners`) while the session is open here, so a look-up of an open session
reads no store.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from acp_server.errors import InvalidArgumentError, McpServerError

__all__ = ["LOCAL", "Owner", "SessionOwners"]


@dataclass(frozen=True, slots=True)
class Owner:
    """A principal as the agent sees it: its name and the real paths it may work in (None: anywhere, stdio)."""

    name: str
    roots: tuple[str, ...] | None = None
    # Hosts its HTTP or SSE MCP servers may name although they are loopback, private or link-local
    # (`--allow-mcp-host`, lower case); every other host must resolve to global addresses only (decision 5).
    mcp_hosts: tuple[str, ...] = ()

    @property
    def remote(self) -> bool:
        """A connection over the network: it works on the server's files only within its roots, and its client's
        files, terminals and commands are on another machine (decision 5)."""
        return self.roots is not None

    def check_directory(self, where: str, directory: str) -> None:
        """`directory` (an existing absolute path) resolved inside one of the roots, else -32602 naming them."""
        if self.roots is None:
            return
        real = os.path.realpath(directory)
        for root in self.roots:
            if real == root or real.startswith(root.rstrip(os.sep) + os.sep):
                return
        allowed = ", ".join(self.roots) or "none"
        raise InvalidArgumentError(
            f"{where}: {directory!r} is outside the directories this principal may use: {allowed}"
        )

    def check_servers(self, servers: object) -> None:
        """A remote client's MCP servers that are commands would run on the server's machine: refused. (Where an
        HTTP or SSE one may point is `check_addresses`'s.)"""
        if self.roots is None or not isinstance(servers, list | tuple):
            return
        for server in servers:
            if isinstance(server, dict) and ("command" in server or server.get("type") == "stdio"):
                name = server.get("name", "?")
                raise InvalidArgumentError(
                    f"mcpServers: {name!r} is a command; a remote connection may give HTTP, SSE or ACP servers only"
                )

    async def check_addresses(self, servers: object) -> None:
        """A remote client's HTTP or SSE MCP server must not point at a loopback, private or link-local address
        unless its host is one of `mcp_hosts`: -32602 naming the rule (mcp_bridge/addresses.py; checked again at
        every connect)."""
        if self.roots is None or not isinstance(servers, list | tuple):
            return
        from acp_server.mcp_bridge.addresses import check_url  # noqa: PLC0415 (only for a remote client's servers)

        for server in servers:
            if (
                isinstance(server, dict)
                and server.get("type") in ("http", "sse")
                and isinstance(server.get("url"), str)
            ):
                try:
                    await check_url(server["url"], self.mcp_hosts)
                except McpServerError as exc:
                    raise InvalidArgumentError(f"mcpServers: {server.get('name', '?')!r}: {exc}") from None


LOCAL = Owner("local")


class SessionOwners:
    """Session id -> its owner's name, for the open sessions of remote principals (created, forked, loaded or
    resumed here); every other open session is `local`'s. Only remote owners are kept, so stdio's cost nothing."""

    def __init__(self) -> None:
        self._owners: dict[str, str] = {}

    def record(self, session_id: str, owner: Owner) -> None:
        if owner.name != LOCAL.name:
            self._owners[session_id] = owner.name

    def owns(self, owner: Owner, session_id: str) -> bool:
        return self.name_of(session_id) == owner.name

    def name_of(self, session_id: str) -> str:
        return self._owners.get(session_id, LOCAL.name)

    def forget(self, session_id: str) -> None:
        self._owners.pop(session_id, None)
