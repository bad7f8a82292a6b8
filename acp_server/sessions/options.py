"""What a client can see and change about a session: config options (`model`, `mode`) and slash commands.

The definitions are shared and immutable; a session holds only its current values, so idle sessions stay small.
`mode` mirrors the ACP session modes (the permission modes), and both are kept in sync: a change through either
`session/set_mode` or `session/set_config_option` sends `current_mode_update` and `config_option_update`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from acp_server.protocol.editor import PERMISSION_MODES
from acp_server.sessions.runs import Session

__all__ = [
    "AVAILABLE_COMMANDS",
    "MODEL_OPTION",
    "MODE_OPTION",
    "PROMPT_POLICIES",
    "PROMPT_POLICY_OPTION",
    "config_options",
    "modes",
    "parse_command",
]

MODEL_OPTION = "model"
MODE_OPTION = "mode"
PROMPT_POLICY_OPTION = "prompt_policy"
PROMPT_POLICIES: tuple[dict[str, Any], ...] = (
    {"value": "interrupt", "name": "Interrupt", "description": "A new prompt stops the running turn and takes over"},
    {"value": "queue", "name": "Queue", "description": "A new prompt waits until the running turn ends"},
    {"value": "reject", "name": "Reject", "description": "A new prompt is refused while a turn runs"},
    {
        "value": "steer",
        "name": "Steer",
        "description": "A new prompt joins the running turn before its next model call, keeping its work",
    },
)

AVAILABLE_COMMANDS: tuple[dict[str, Any], ...] = (
    {"name": "clear", "description": "Start a fresh context in this session; the conversation so far is forgotten"},
    {"name": "compact", "description": "Summarise the conversation so far and continue from the summary"},
    {"name": "title", "description": "Set this session's title", "input": {"hint": "the new title"}},
)
_COMMAND_NAMES = frozenset(command["name"] for command in AVAILABLE_COMMANDS)
_MODE_CHOICES = tuple({"value": m.id, "name": m.name, "description": m.description} for m in PERMISSION_MODES)


def modes(session: Session) -> dict[str, Any]:
    return {
        "currentModeId": session.mode,
        "availableModes": [{"id": m.id, "name": m.name, "description": m.description} for m in PERMISSION_MODES],
    }


def config_options(session: Session, models: Sequence[str]) -> list[dict[str, Any]]:
    """The complete list, as `session/set_config_option` and `config_option_update` must carry it."""
    return [
        {
            "id": MODEL_OPTION,
            "name": "Model",
            "category": "model",
            "type": "select",
            "currentValue": session.model,
            "options": [{"value": model, "name": model} for model in models],
        },
        {
            "id": MODE_OPTION,
            "name": "Permissions",
            "category": "mode",
            "type": "select",
            "currentValue": session.mode,
            "options": list(_MODE_CHOICES),
        },
        {
            "id": PROMPT_POLICY_OPTION,
            "name": "While busy",
            "category": "_prompt_policy",
            "type": "select",
            "currentValue": session.prompt_policy,
            "options": list(PROMPT_POLICIES),
        },
    ]


def parse_command(text: str) -> tuple[str, str] | None:
    """`/name argument` for one of our commands, else None (the text is an ordinary prompt)."""
    if not text.startswith("/"):
        return None
    name, _, argument = text[1:].partition(" ")
    name = name.strip()
    return (name, argument.strip()) if name in _COMMAND_NAMES else None
