"""The composition root's second half: the pieces a session needs and `initialize` does not (the turn services: the
edge to the editor, the tools, the sandbox; the session lifecycle's methods), and, imported with them, every module of
the session side.

`server.py` builds what answers `initialize`; this module is imported once that answer is out, the last step of
`server.load_session_side` (protocol/deferred.py), so a fresh process answers the handshake without it. Its imports
are the session side: the session side's method tables (protocol/session_methods.py, which import the session
handlers) are imported here too, so that one import loads them all.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from acp_server.agent.sessions.runs import RunRegistry
from acp_server.agent.sessions.services import TurnServices
from acp_server.jsonrpc.connection import Connection
from acp_server.protocol.context import SessionSide
from acp_server.protocol.edge import AcpEdge
from acp_server.protocol.plugins import Plugin, observer_of
from acp_server.protocol.session_methods import SESSION_METHODS, SESSION_METHODS_V2
from acp_server.protocol.session_table import Handshake
from acp_server.runtime.call_bodies import CallBodies
from acp_server.runtime.model import Provider
from acp_server.runtime.processes import ProcessTable
from acp_server.runtime.sandbox import sandbox_for
from acp_server.runtime.tools import ToolBox
from acp_server.runtime.tools.ask import ASK_TOOLS
from acp_server.runtime.tools.commands import COMMAND_TOOLS
from acp_server.runtime.tools.delegate import DELEGATE_TOOLS
from acp_server.runtime.tools.files import FILE_TOOLS
from acp_server.runtime.tools.plan import PLAN_TOOLS
from acp_server.settings.config import Config

if TYPE_CHECKING:
    from acp_server.store import SessionStore

__all__ = ["build_session_side"]


def build_session_side(
    config: Config,
    *,
    connection: Connection,
    handshake: Handshake,
    runs: RunRegistry,
    processes: ProcessTable,
    calls: CallBodies,
    providers: Callable[[str], Provider],
    store: Callable[[], SessionStore | None],
    plugins: Sequence[Plugin],
) -> SessionSide:
    """What a turn needs from the server, and the methods the session side serves, once per connection: built with
    the first request that needs the session side (or the warm-up)."""
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
    turns = TurnServices(
        config,
        runs,
        # The core's way out: its events rendered as ACP v1 or v2, the editor's side of its tools.
        # Decided once: which sandbox local commands get (said on stderr when none can be had).
        AcpEdge(connection, config, processes, handshake, sandbox_for(config)),
        providers,
        tools,
        processes,
        calls,
        store,
        observer_of(plugins),
    )
    return SessionSide(turns, SESSION_METHODS, SESSION_METHODS_V2)
