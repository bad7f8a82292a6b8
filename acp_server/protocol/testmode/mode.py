"""Test mode (`--test-mode`, never for production): what black-box tests need to drive and watch a turn.

`_scripted/probe` notifications report each step a turn takes (`{"sessionId", "prompt", "event", ...}`, docs/guide.md);
the test tools (tools.py) cooperate with cancellation, ignore it or hang in cleanup; `_scripted/raise` fails
unexpectedly, to prove the error boundary keeps internals private.
"""

from __future__ import annotations

from typing import Any

from acp_server.agent.sessions.runs import RunContext
from acp_server.agent.sessions.services import Observer
from acp_server.protocol.context import RequestContext
from acp_server.protocol.editor_connection import EditorConnections
from acp_server.protocol.plugins import Plugin
from acp_server.protocol.shared_methods import NO_PARAMS
from acp_server.protocol.testmode.tools import TEST_TOOLS

__all__ = ["test_mode"]


def test_mode(editors: EditorConnections) -> Plugin:
    """The test-mode plug-in for the agent: each turn's probes go to the connection its session is attached to."""
    return Plugin(
        methods={"_scripted/raise": (NO_PARAMS, scripted_raise)},
        tools=TEST_TOOLS,
        observer=_prober(editors),
    )


def _prober(editors: EditorConnections) -> Observer:
    def probe(run: RunContext, event: str, fields: dict[str, Any]) -> None:
        """A `_scripted/probe` notification: what the turn is doing, for black-box tests."""
        editor = editors.of(run.session)
        if editor is None:  # its connection has ended: nobody to tell
            return
        params = {"sessionId": run.session_id, "prompt": run.request_id, "event": event, **fields}
        editor.rpc.notify("_scripted/probe", params)

    return probe


async def scripted_raise(context: RequestContext, params: object) -> dict[str, Any]:
    """A handler that fails unexpectedly, to prove the error boundary keeps internals private."""
    raise RuntimeError("secret internal detail /etc/passwd")
