"""Test mode (`--test-mode`, never for production): what black-box tests need to drive and watch a turn.

`_scripted/probe` notifications report each step a turn takes (`{"sessionId", "prompt", "event", ...}`, docs/guide.md);
the test tools (tools.py) cooperate with cancellation, ignore it or hang in cleanup; `_scripted/raise` fails
unexpectedly, to prove the error boundary keeps internals private.
"""

from __future__ import annotations

from typing import Any

from acp_server.agent.sessions.runs import RunContext
from acp_server.agent.sessions.services import Observer
from acp_server.jsonrpc.connection import Connection
from acp_server.protocol.context import RequestContext
from acp_server.protocol.handlers import NO_PARAMS
from acp_server.protocol.plugins import Plugin
from acp_server.protocol.testmode.tools import TEST_TOOLS

__all__ = ["test_mode"]


def test_mode(connection: Connection) -> Plugin:
    """The test-mode plug-in for one connection (its probes are sent through it)."""
    return Plugin(
        methods={"_scripted/raise": (NO_PARAMS, scripted_raise)},
        tools=TEST_TOOLS,
        observer=_prober(connection),
    )


def _prober(connection: Connection) -> Observer:
    def probe(run: RunContext, event: str, fields: dict[str, Any]) -> None:
        """A `_scripted/probe` notification: what the turn is doing, for black-box tests."""
        params = {"sessionId": run.session_id, "prompt": run.request_id, "event": event, **fields}
        connection.notify("_scripted/probe", params)

    return probe


async def scripted_raise(context: RequestContext, params: object) -> dict[str, Any]:
    """A handler that fails unexpectedly, to prove the error boundary keeps internals private."""
    raise RuntimeError("secret internal detail /etc/passwd")
