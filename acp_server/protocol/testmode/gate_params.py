"""The params of `_scripted/release` (testmode/gates.py), a pydantic model: in a module of its own, imported with the
first such notification, so that registering the plug-in at start-up imports no pydantic (protocol/params.py)."""

from __future__ import annotations

from acp_server.protocol.schema import WireModel

__all__ = ["ScriptedReleaseNotification"]


class ScriptedReleaseNotification(WireModel):
    """`_scripted/release`: opens a gate of the scripted model (a product extension, see docs/guide.md)."""

    session_id: str
    gate: str
