"""The enumerated choices every layer shares, defined once: permission modes, prompt policies, sandbox modes.

They are `StrEnum`s whose values are the wire and configuration spellings, so they are compared as enums inside the
server and serialize byte for byte as the strings they replace. Here, in `settings`, because the command line and the
config file's checks need them before anything else loads (and every layer may import `settings`).
"""

from __future__ import annotations

import enum

__all__ = ["PermissionMode", "PromptPolicy", "SandboxMode"]


class PermissionMode(enum.StrEnum):
    """What a session's tools may do without asking (ACP session modes; the `mode` config option)."""

    DEFAULT = "default"  # ask before editing files and before running commands
    ACCEPT_EDITS = "accept_edits"
    BYPASS = "bypass"
    READ_ONLY = "read_only"


class PromptPolicy(enum.StrEnum):
    """What a prompt sent while a turn runs does (the `prompt_policy` config option)."""

    INTERRUPT = "interrupt"
    QUEUE = "queue"
    REJECT = "reject"
    STEER = "steer"


class SandboxMode(enum.StrEnum):
    """How local commands are confined (runtime/sandbox.py), in codex's words."""

    OFF = "off"  # with the user's full rights, as before the sandbox existed
    WORKSPACE_WRITE = "workspace-write"  # writes only in the session's directories and the temp directory
    READ_ONLY = "read-only"  # no writes at all (but /dev/null and the like)
