"""What the composition root is handed for each remote connection: who is on the other end, and the handler's shape.

Light on purpose (no hypercorn): the composition root names these types without loading the server.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from acp_server.jsonrpc.transport import LineSink, LineSource
from acp_server.remote.tokens import Principal

__all__ = ["ConnectionHandler", "Peer", "Principal"]


@dataclass(frozen=True, slots=True)
class Peer:
    """One accepted, authenticated connection: its id (the `Acp-Connection-Id` header), the principal its token
    stands for, and the remote address (None where the server does not know it)."""

    connection_id: str
    principal: Principal
    address: tuple[str, int] | None

    def describe(self) -> str:
        """For log lines: never a token."""
        where = f"{self.address[0]}:{self.address[1]}" if self.address else "unknown"
        return f"{self.connection_id} (principal {self.principal.name}, peer {where})"


# Serves one connection as stdio is served: lines in (the client's messages; the iterator ends as stdin EOF does,
# when the client goes, is found dead, or the server drains) and whole lines out (`LineSink.write` raises
# BrokenPipeError once the connection is gone). The connection ends when the handler returns.
ConnectionHandler = Callable[[Peer, LineSource, LineSink], Awaitable[None]]
