"""The server's frozen configuration: read once at start-up, shared by everything, changed by nothing.

Per-turn state lives on the turn's run context and per-session state on the session (ARCHITECTURE.md, "State");
this object holds only what a flag or an environment variable decided.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["DEFAULT_CLEANUP_DEADLINE", "DEFAULT_MAX_LINE_BYTES", "Config"]

DEFAULT_CLEANUP_DEADLINE = 2.0
# ACP puts no limit on a line; 64 MiB keeps a runaway client from exhausting memory while leaving room for the
# 50 MiB messages (large embedded files) that editors do send.
DEFAULT_MAX_LINE_BYTES = 64 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class Config:
    """Everything the command line and the environment decided."""

    model: str = "echo"
    cleanup_deadline: float = DEFAULT_CLEANUP_DEADLINE
    log_level: str = "warning"
    # Test mode swaps nothing in the cancellation logic: it only adds the test tools and the probe notifications.
    test_mode: bool = False
    max_line_bytes: int = DEFAULT_MAX_LINE_BYTES
    # What a prompt for a busy session does (agent.Agent.admit): interrupt, queue or reject.
    prompt_policy: str = "interrupt"
    # The permission mode new sessions start in (editor.PERMISSION_MODES).
    permission_mode: str = "default"
    # Model calls allowed in one turn before it ends with `max_turn_requests`.
    max_turn_requests: int = 50
    # An OpenAI-compatible endpoint, for `--model openai:MODEL`.
    base_url: str | None = None
    # Where the session store lives; None means the user's state directory (platformdirs).
    state_dir: str | None = None
    # False keeps sessions in memory only (`--no-store`).
    store: bool = True
    # Where to write a transcript of every line in and out (`--record FILE`); None records nothing.
    record: str | None = None
