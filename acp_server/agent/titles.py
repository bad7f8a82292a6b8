"""A session's title after its first turn, made in the background (both protocol versions' prompt lifecycles start
it): it never delays a response and is cancelled with the session."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import anyio

from acp_server.agent.sessions.edge import provider_for
from acp_server.agent.sessions.runs import Session
from acp_server.agent.sessions.slash_commands import first_title, prompt_title

if TYPE_CHECKING:
    from acp_server.agent.agent import Agent

__all__ = ["title_session"]

log = logging.getLogger(__name__)


async def title_session(agent: Agent, session: Session, first_prompt: str) -> None:
    with anyio.CancelScope() as scope:
        session.background.append(scope)
        try:
            # Through the session's connection's gateway where its client set one: its prompt goes nowhere else.
            provider = provider_for(agent.providers.get, session, session.model)
            title: str | None = await first_title(provider, session.session_id, first_prompt)
        except Exception as exc:  # a title is a nicety (cancellation is not caught here): the first words then
            log.warning(
                "session %s: the model gave no title (%s); using the prompt's first words", session.session_id, exc
            )
            title = prompt_title(first_prompt)
        finally:
            session.background.remove(scope)
        if title is None:
            return
        if session.title is None and session.session_id in agent.sessions:
            session.title = title
            agent.turns.announce_title(session, title)
