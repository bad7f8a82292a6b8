"""The seam a plug-in uses: what it adds to the ACP side of a connection (request methods, notifications, tools, and
an observer of the steps each turn takes).

Only the composition root (`server.py`) registers plug-ins; nothing in the core imports one, so a plug-in's code is
on no production path unless it is registered (tests/unit/test_architecture.py checks both).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from acp_server.protocol.context import Handler, NotificationHandler

if TYPE_CHECKING:  # types only: the tools and the turn are the deferred side's (protocol/deferred.py)
    from acp_server.agent.sessions.runs import RunContext
    from acp_server.agent.sessions.services import Observer
    from acp_server.runtime.tools import Tool

__all__ = ["Plugin", "observer_of"]


@dataclass(frozen=True, slots=True)
class Plugin:
    """What one plug-in adds. Its method names must not be the core's (an ACP method is never replaced)."""

    methods: Mapping[str, Handler] = field(default_factory=dict)
    notifications: Mapping[str, NotificationHandler] = field(default_factory=dict)
    tools: tuple[Tool[Any], ...] = ()
    # Told each step a turn takes (see sessions/services.py `TurnServices.probe`).
    observer: Observer | None = None


def observer_of(plugins: Sequence[Plugin]) -> Observer | None:
    """One observer for all the plug-ins' observers, in registration order; None when none observes."""
    observers = [plugin.observer for plugin in plugins if plugin.observer is not None]
    if not observers:
        return None
    if len(observers) == 1:
        return observers[0]

    def observe(run: RunContext, event: str, fields: dict[str, Any]) -> None:
        for observer in observers:
            observer(run, event, fields)

    return observe
