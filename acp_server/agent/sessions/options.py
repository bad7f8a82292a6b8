"""What a client can see and change about a session: config options (`model`, `mode`, `prompt_policy`) and slash
commands, as typed definitions; `protocol/` renders them for the wire.

The definitions are shared and immutable; a session holds only its current values, so idle sessions stay small.
`mode` mirrors the ACP session modes (the permission modes), and both are kept in sync: a change through either
`session/set_mode` or `session/set_config_option` sends `current_mode_update` and `config_option_update`.
"""

from __future__ import annotations

from dataclasses import dataclass

from acp_server.settings.choices import PermissionMode, PromptPolicy

__all__ = [
    "MODEL_OPTION",
    "MODE_OPTION",
    "PERMISSION_MODES",
    "PROMPT_POLICIES",
    "PROMPT_POLICY_OPTION",
    "SLASH_COMMANDS",
    "Choice",
    "SlashCommand",
    "parse_slash_command",
]

MODEL_OPTION = "model"
MODE_OPTION = "mode"
PROMPT_POLICY_OPTION = "prompt_policy"


@dataclass(frozen=True, slots=True)
class Choice:
    """One value of an enumerated option, as a person sees it."""

    value: PermissionMode | PromptPolicy
    name: str
    description: str


PERMISSION_MODES: tuple[Choice, ...] = (
    Choice(PermissionMode.DEFAULT, "Ask", "Ask before editing files and before running commands"),
    Choice(PermissionMode.ACCEPT_EDITS, "Accept edits", "Edit files without asking; ask before running commands"),
    Choice(PermissionMode.BYPASS, "Bypass permissions", "Edit files and run commands without asking"),
    Choice(PermissionMode.READ_ONLY, "Read only", "Read and search only; edits and commands are refused"),
)
PROMPT_POLICIES: tuple[Choice, ...] = (
    Choice(PromptPolicy.INTERRUPT, "Interrupt", "A new prompt stops the running turn and takes over"),
    Choice(PromptPolicy.QUEUE, "Queue", "A new prompt waits until the running turn ends"),
    Choice(PromptPolicy.REJECT, "Reject", "A new prompt is refused while a turn runs"),
    Choice(
        PromptPolicy.STEER, "Steer", "A new prompt joins the running turn before its next model call, keeping its work"
    ),
)


@dataclass(frozen=True, slots=True)
class SlashCommand:
    name: str
    description: str
    # What the argument is, for commands that take one.
    hint: str | None = None


SLASH_COMMANDS: tuple[SlashCommand, ...] = (
    SlashCommand("clear", "Start a fresh context in this session; the conversation so far is forgotten"),
    SlashCommand("compact", "Summarise the conversation so far and continue from the summary"),
    SlashCommand("title", "Set this session's title", "the new title"),
)
_COMMAND_NAMES = frozenset(command.name for command in SLASH_COMMANDS)


def parse_slash_command(text: str) -> tuple[str, str] | None:
    """`/name argument` for one of our slash commands, else None (the text is an ordinary prompt)."""
    if not text.startswith("/"):
        return None
    name, _, argument = text[1:].partition(" ")
    name = name.strip()
    return (name, argument.strip()) if name in _COMMAND_NAMES else None
