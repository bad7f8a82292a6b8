"""The composition root's second half: the pieces a session needs and `initialize` does not (the turn services: the
tools, the sandbox, the plug-ins' observer), and, imported with them, every module of the deferred side.

`cli/server.py` builds what answers `initialize`; this module is imported once that answer is out, the last step of
`cli/server.py::load_deferred_side` (protocol/deferred.py), so a fresh process answers the handshake without it. Its
imports are the deferred side: the deferred side's method tables (protocol/deferred_methods.py, which import the
session handlers) and the edge each connection builds with its first session are imported here too, so that one
import loads them all.
"""

from __future__ import annotations

from collections.abc import Sequence

from acp_server.agent.agent import Agent
from acp_server.agent.sessions.services import TurnServices
from acp_server.protocol.acp_edge import AcpEdge  # noqa: F401 - the edge every connection builds with its first session
from acp_server.protocol.deferred_methods import DEFERRED_METHODS  # noqa: F401 - the deferred side's method tables
from acp_server.protocol.plugins import Plugin, observer_of
from acp_server.runtime.sandbox import sandbox_for
from acp_server.runtime.tools import ToolBox
from acp_server.runtime.tools.ask import ASK_TOOLS
from acp_server.runtime.tools.commands import COMMAND_TOOLS
from acp_server.runtime.tools.delegate import DELEGATE_TOOLS
from acp_server.runtime.tools.files import FILE_TOOLS
from acp_server.runtime.tools.plan import PLAN_TOOLS

__all__ = ["build_turns"]


def build_turns(agent: Agent, plugins: Sequence[Plugin]) -> TurnServices:
    """What a turn needs from the server, once per process: built with the first session (or the warm-up)."""
    tools = ToolBox(
        (
            *FILE_TOOLS,
            *COMMAND_TOOLS,
            *PLAN_TOOLS,
            *ASK_TOOLS,
            *DELEGATE_TOOLS,
            *(tool for plugin in plugins for tool in plugin.tools),
        )
    )
    config = agent.config
    return TurnServices(
        config,
        agent.runs,
        agent.providers.get,
        tools,
        agent.processes,
        agent.calls,
        lambda: agent.store.current,
        observer_of(plugins),
        # Decided once: which sandbox local commands get (said on stderr when none can be had).
        sandbox_for(config),
        agent.meter,
    )
