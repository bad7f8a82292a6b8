"""The v2 `initialize` result (ACP-V2.md §3): `info`, and every capability an object marker.

`capabilities.session` commits to the baseline (new, list, resume, close, prompt, cancel, update); `delete` and
`additionalDirectories` are advertised beside it. Images and audio are advertised when a configured model takes
them, else left out (never `false`). No `auth/*` methods are advertised yet: `authMethods` is `[]` (v2 login and
logout are not built).
"""

from __future__ import annotations

from typing import Any

from acp_server import __version__
from acp_server.protocol.context import Parts
from acp_server.sessions.options import PROMPT_POLICIES

__all__ = ["initialize_result"]


def initialize_result(parts: Parts, taken: frozenset[str]) -> dict[str, Any]:
    """`taken`: what any model a session may pick takes in a prompt (images, sounds), as v1 advertises it; a marker is
    left out, never `false`."""
    prompt: dict[str, Any] = {kind: {} for kind in ("image", "audio") if kind in taken}
    prompt["embeddedContext"] = {}
    return {
        "protocolVersion": 2,
        "info": {"name": "acp-server", "title": "acp-server", "version": __version__},
        "capabilities": {
            "session": {
                "prompt": prompt,
                "mcp": {"stdio": {}, "http": {}},
                "delete": {},
                "additionalDirectories": {},
            },
            "_meta": {
                "acpServer": {
                    "promptPolicies": [policy.value for policy in PROMPT_POLICIES],
                    "defaultPromptPolicy": default_prompt_policy(parts),
                    "extensionMethods": ["_acp_server/stats"],
                    "extensionNotifications": list(parts.extension_notifications),
                }
            },
        },
        "authMethods": [],
    }


def default_prompt_policy(parts: Parts) -> str:
    """What a busy prompt does on a v2 connection unless a session says otherwise: the configured policy when one
    was chosen, else `queue` (hold it until idle; ACP-V2.md §23 Q4)."""
    config = parts.config
    return config.prompt_policy.value if config.prompt_policy_chosen else "queue"
