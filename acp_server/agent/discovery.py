"""Model discovery as the sessions see it: started at `initialize`, `authenticate` and each `session/new`
(agent/model_choices.py does the reading and refreshing), and a changed list told to every open session, through
the connection it is attached to.

Its own module, on the start-up path: `initialize` starts discovery, and the session lifecycle (loaded later,
protocol/deferred.py) tells a session what changed; neither imports the other.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from acp_server.agent.agent import Agent
    from acp_server.agent.sessions.runs import Session

__all__ = ["announce_models_to", "discover_models"]


def discover_models(agent: Agent) -> None:
    """Start model discovery (agent/model_choices.py); a changed list reaches every open session."""
    agent.models.start(lambda: _announce_models(agent))


def _announce_models(agent: Agent) -> None:
    for session in agent.sessions:
        if session.offered_models is not None and not session.closed:
            announce_models_to(agent, session)


def announce_models_to(agent: Agent, session: Session) -> None:
    """Tell `session` the models it may pick when they are not what it was told last."""
    offered = agent.models.offered(session.model)
    if offered != session.offered_models and session.edge is not None:
        session.offered_models = offered
        # A session exists, so the deferred side is loaded (protocol/deferred.py): a look-up.
        from acp_server.agent.sessions.edge import ConfigChanged, edge_of  # noqa: PLC0415 (start-up: the deferred side loads after `initialize`)

        event = ConfigChanged(session.model, session.mode, session.prompt_policy, offered)
        edge_of(session).session_event(session.session_id, event)
