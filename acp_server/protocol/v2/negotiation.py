"""Which protocol a connection speaks, from the version its `initialize` asks for (ACP-V2.md §2, §23 Q1).

The schema's rule: the highest version we serve at or below the request; none such is `-32022` with
`UnsupportedProtocolVersionErrorData`. With `--protocol 1` the server is the v1 agent it always was: every integer
gets 1.
"""

from __future__ import annotations

from acp_server.jsonrpc.rpc import RpcError

__all__ = ["UNSUPPORTED_PROTOCOL_VERSION", "negotiate"]

UNSUPPORTED_PROTOCOL_VERSION = -32022


def negotiate(requested: int, highest: int) -> int:
    """The version to speak, or the error the request gets."""
    if highest < 2:
        return 1  # v1 only: ACP v1's rule (the requested version if supported, else our latest)
    if requested >= 2:
        return 2
    if requested == 1:
        return 1
    raise RpcError(
        UNSUPPORTED_PROTOCOL_VERSION,
        f"Unsupported protocol version {requested}: this agent speaks 1 and 2",
        {"requested": requested, "supported": [1, 2]},
    )
