"""`_scripted/release`: the client opens a gate of the scripted model (runtime/providers/scripted.py), by session id.

A product extension (docs/guide.md, "The scripted model"): the scripted model is how editor integrations are tested,
so this part of the plug-in is registered whatever the mode. The gate board is the session's own, kept among its
session services.
"""

from __future__ import annotations

from types import ModuleType
from typing import TYPE_CHECKING

from acp_server.protocol.editor_connection import EditorConnection
from acp_server.protocol.params import WireParams
from acp_server.protocol.plugins import Plugin

if TYPE_CHECKING:
    from acp_server.protocol.testmode.gate_params import ScriptedReleaseNotification

__all__ = ["GATES", "RELEASE_PARAMS"]


def _gate_params() -> ModuleType:
    from acp_server.protocol.testmode import gate_params  # noqa: PLC0415 (start-up: pydantic loads with the first release)

    return gate_params


# Imported with the first `_scripted/release` (testmode/gate_params.py).
RELEASE_PARAMS = WireParams(_gate_params, "ScriptedReleaseNotification")


def scripted_release(connection: EditorConnection, params: ScriptedReleaseNotification) -> None:
    agent = connection.agent
    session = agent.sessions.get(params.session_id)
    if session is None:  # a subagent's session lives only in the run registry
        running = agent.runs.running(params.session_id)
        session = running.session if running is not None else None
    if session is not None and connection.owns(session):  # another editor's gates are not this one's to open
        # Imported here: registered whatever the model, this plug-in must not load the scripted model for others.
        from acp_server.runtime.providers.scripted import gate_board  # noqa: PLC0415 (the scripted provider loads only with a scripted model)

        gate_board(session.services).release(params.gate)


GATES = Plugin(notifications={"_scripted/release": (RELEASE_PARAMS, scripted_release)})
