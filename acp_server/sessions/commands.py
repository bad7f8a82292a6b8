"""What the core is asked to do, in its own terms: the protocol edge parses wire requests into these, so nothing in
`sessions/` reads a wire model.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

__all__ = ["ClientTools", "Prompt", "RequestId"]

# A JSON-RPC request id, kept as the client sent it (a prompt's is echoed in test-mode probes).
RequestId = int | str | None


@dataclass(frozen=True, slots=True)
class Prompt:
    """One `session/prompt`: its text for the model, and what the store keeps of it."""

    # Every block represented as text (see protocol/prompts.py); what the model is given.
    text: str
    # How many content blocks the client sent: a slash command is a prompt of exactly one.
    block_count: int
    # The blocks as the client sent them, for the session store; made only when a store records the turn.
    blocks: Callable[[], list[dict[str, Any]]] = list
    # The request's `_meta` (the scripted model reads its script there).
    meta: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class ClientTools:
    """What the client can do for a session's tools (from its `initialize` capabilities)."""

    read_files: bool = False
    write_files: bool = False
    terminals: bool = False
