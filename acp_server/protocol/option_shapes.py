"""A session's options in their wire shape: its modes, its config options and its slash commands.

The definitions are typed in `agent/sessions/options.py`; this is their wire shape, in responses (`session/new`,
`session/set_config_option`) and in the updates that announce a change (both versions: `config_options` takes what
the version calls an option's id).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from acp_server.agent.sessions.options import (
    MODE_OPTION,
    MODEL_OPTION,
    PERMISSION_MODES,
    PROMPT_POLICIES,
    PROMPT_POLICY_OPTION,
    Choice,
    SlashCommand,
)
from acp_server.settings.choices import PermissionMode, PromptPolicy

__all__ = ["available_commands", "config_options", "modes"]


def _choices(choices: Sequence[Choice]) -> list[dict[str, Any]]:
    return [{"value": c.value, "name": c.name, "description": c.description} for c in choices]


_MODE_CHOICES = tuple(_choices(PERMISSION_MODES))
_POLICY_CHOICES = tuple(_choices(PROMPT_POLICIES))


def modes(mode: PermissionMode) -> dict[str, Any]:
    return {
        "currentModeId": mode,
        "availableModes": [{"id": m.value, "name": m.name, "description": m.description} for m in PERMISSION_MODES],
    }


def config_options(
    model: str, mode: PermissionMode, prompt_policy: PromptPolicy, models: Sequence[str], *, id_key: str = "id"
) -> list[dict[str, Any]]:
    """The complete list, as `session/set_config_option` and `config_option_update` must carry it. `id_key`: what
    the version calls an option's id (v1 `id`, v2 `configId`)."""
    return [
        {
            id_key: MODEL_OPTION,
            "name": "Model",
            "category": "model",
            "type": "select",
            "currentValue": model,
            "options": [{"value": spec, "name": spec} for spec in models],
        },
        {
            id_key: MODE_OPTION,
            "name": "Permissions",
            "category": "mode",
            "type": "select",
            "currentValue": mode,
            "options": list(_MODE_CHOICES),
        },
        {
            id_key: PROMPT_POLICY_OPTION,
            "name": "While busy",
            "category": "_prompt_policy",
            "type": "select",
            "currentValue": prompt_policy,
            "options": list(_POLICY_CHOICES),
        },
    ]


def available_commands(commands: Sequence[SlashCommand]) -> list[dict[str, Any]]:
    return [
        {"name": c.name, "description": c.description, **({"input": {"hint": c.hint}} if c.hint is not None else {})}
        for c in commands
    ]
