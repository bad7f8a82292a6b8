"""Model discovery as the sessions see it: started at `initialize`, `authenticate` and each `session/new`
(protocol/model_choices.py does the reading and refreshing), and a changed list told to every open session.

Its own module, on the start-up path: `initialize` starts discovery, and the session handlers (loaded later,
protocol/deferred.py) tell a session what changed; neither imports the other.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from acp_server.agent.sessions.runs import Session
    from acp_server.protocol.context import Parts

__all__ = ["announce_models_to", "discover_models"]


def discover_models(parts: Parts) -> None:
    """Start model discovery (protocol/model_choices.py); a changed list reaches every open session."""
    parts.models.start(lambda: _announce_models(parts))


def _announce_models(parts: Parts) -> None:
    for session in parts.sessions:
        if session.offered_models is not None and not session.closed:
            announce_models_to(parts, session)


def announce_models_to(parts: Parts, session: Session) -> None:
    """Tell `session` the models it may pick when they are not what it was told last."""
    offered = parts.models.offered(session.model)
    if offered != session.offered_models:
        session.offered_models = offered
        # A session exists, so the session side is loaded (protocol/deferred.py): a look-up.
        from acp_server.agent.sessions.edge import ConfigChanged  # noqa: PLC0415 (start-up: the session side loads after `initialize`)

        event = ConfigChanged(session.model, session.mode, session.prompt_policy, offered)
        parts.turns.edge.session_event(session.session_id, event)
