"""The server's frozen configuration: read once at start-up, shared by everything, changed by nothing.

Per-turn state lives on the turn's run context and per-session state on the session (docs/architecture.md);
this object holds only what a flag, an environment variable or the config file decided (settings/command_line.py
merges them, in that order of precedence). The choices of the enumerated settings are the enums of
settings/choices.py, so the command line, the config file's checks and `doctor` agree on them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from acp_server.settings.choices import PermissionMode, PromptPolicy, SandboxMode

__all__ = [
    "DEFAULT_CLEANUP_DEADLINE",
    "DEFAULT_INPUT",
    "DEFAULT_KEEP_SESSIONS",
    "DEFAULT_KEEP_SESSIONS_DAYS",
    "DEFAULT_LEASE_TTL",
    "DEFAULT_MAX_LINE_BYTES",
    "DEFAULT_MAX_TURN_REQUESTS",
    "DEFAULT_MCP_START_WAIT",
    "INPUT_KINDS",
    "LEASE_TTL_RANGE",
    "LOG_LEVELS",
    "PERMISSION_MODE_IDS",
    "PROMPT_POLICY_IDS",
    "PROTOCOL_IDS",
    "SANDBOX_MODE_IDS",
    "Config",
    "SandboxMode",
]

LOG_LEVELS = ("debug", "info", "warning", "error")
# The enums' spellings, as the command line and the config file's checks list them.
PERMISSION_MODE_IDS = tuple(mode.value for mode in PermissionMode)
PROMPT_POLICY_IDS = tuple(policy.value for policy in PromptPolicy)
PROTOCOL_IDS = ("1", "2")
SANDBOX_MODE_IDS = tuple(mode.value for mode in SandboxMode)
DEFAULT_MAX_TURN_REQUESTS = 50

DEFAULT_CLEANUP_DEADLINE = 2.0
# How long a replica's lease on a session lasts without a renewal (the PostgreSQL store; docs/postgres.md "Leases"):
# the time from a replica's death to its sessions loading elsewhere. Renewed every third of it.
DEFAULT_LEASE_TTL = 15.0
LEASE_TTL_RANGE = (1.0, 3600.0)
# Session retention, applied when the store opens: sessions not updated for this many days go, and the oldest past
# this many (0 for either: no limit). Sessions that never got a prompt go after ten minutes (store.records).
DEFAULT_KEEP_SESSIONS_DAYS = 90.0
DEFAULT_KEEP_SESSIONS = 500
# Long enough for a typical `npx`/`uvx` MCP server's first start (a package download included); a server that hangs
# delays only the turns of its first ten seconds.
DEFAULT_MCP_START_WAIT = 10.0
# ACP puts no limit on a line; 64 MiB keeps a runaway client from exhausting memory while leaving room for the
# 50 MiB messages (large embedded files) that editors do send.
DEFAULT_MAX_LINE_BYTES = 64 * 1024 * 1024

# What a model may take in a prompt, and what each family takes unless the config file says otherwise (`input` of a
# `models` entry, or of `[providers.FAMILY]`). Current OpenAI and Claude models read images, and a local model that
# does not is told so with one line of config; `echo` only echoes text; `scripted` takes everything, so clients and
# tests can exercise images and sounds without a real model.
INPUT_KINDS = ("text", "image", "audio")
DEFAULT_INPUT: dict[str, tuple[str, ...]] = {
    "echo": ("text",),
    "scripted": INPUT_KINDS,
    "openai": ("text", "image"),
    "anthropic": ("text", "image"),
}


@dataclass(frozen=True, slots=True)
class Config:
    """Everything the command line, the environment and the config file decided."""

    model: str = "echo"
    cleanup_deadline: float = DEFAULT_CLEANUP_DEADLINE
    log_level: str = "warning"
    # Test mode swaps nothing in the cancellation logic: it only adds the test tools and the probe notifications.
    test_mode: bool = False
    max_line_bytes: int = DEFAULT_MAX_LINE_BYTES
    # What a prompt for a busy session does (agent.RunRegistry.admit): interrupt, queue, reject or steer.
    prompt_policy: PromptPolicy = PromptPolicy.INTERRUPT
    # Whether a flag, the environment or the file chose `prompt_policy`: unchosen, a v2 connection queues (ACP-V2.md
    # §23 Q4) while a v1 connection interrupts.
    prompt_policy_chosen: bool = False
    # The highest ACP protocol version served: 2 (the draft, on by default) or 1 (`--protocol 1`: exactly v1).
    protocol: int = 2
    # The permission mode new sessions start in.
    permission_mode: PermissionMode = PermissionMode.DEFAULT
    # Model calls allowed in one turn before it ends with `max_turn_requests`.
    max_turn_requests: int = DEFAULT_MAX_TURN_REQUESTS
    # An OpenAI-compatible endpoint, for `--model openai:MODEL`.
    base_url: str | None = None
    # Where the session store lives; None means the user's state directory (platformdirs).
    state_dir: str | None = None
    # False keeps sessions in memory only (`--no-store`).
    store: bool = True
    # A PostgreSQL store shared by replicas (`--store-url postgresql://...`); None: the SQLite file in `state_dir`.
    # It may hold a password: shown only as settings.store_url.redact_store_url gives it.
    store_url: str | None = field(default=None, repr=False)
    # Seconds a replica's lease on a session lasts unless renewed (PostgreSQL only; SQLite has no leases).
    lease_ttl: float = DEFAULT_LEASE_TTL
    # Retention: sessions not updated for `keep_sessions_days` days are removed, and the oldest past the
    # `keep_sessions` most recent (0: no limit), when the store is opened; never one a live process has open.
    keep_sessions_days: float = DEFAULT_KEEP_SESSIONS_DAYS
    keep_sessions: int = DEFAULT_KEEP_SESSIONS
    # Where to write a transcript of every line in and out (`--record FILE`); None records nothing.
    record: str | None = None
    # Whether logs also go to a rotating file (editors hide or drop stderr); `log_file` None means the default place,
    # the user's log directory (logfile.default_log_file), resolved only when the first record is written.
    log_to_file: bool = True
    log_file: str | None = None
    # MCP servers from the config file, as ACP `McpServer` objects (stdio, http or sse), that every session gets in
    # addition to the ones the editor sends with `session/new`.
    mcp_servers: tuple[dict[str, Any], ...] = ()
    # How long after an MCP server was started a turn waits for it to be ready before going on without its tools.
    mcp_start_wait: float = DEFAULT_MCP_START_WAIT
    # The choices of the `model` config option besides `model` itself (the file's `models = [...]`).
    models: tuple[str, ...] = ()
    # Whether the endpoints of the configured models are asked for their models lists, which then join the `model`
    # option's choices (cached in the state directory; `--no-model-discovery` turns it off).
    model_discovery: bool = True
    # What a model takes in a prompt ("text", "image", "audio"), where the file says: by model spec (`input` of a
    # `models` entry) and by family (`input` of `[providers.FAMILY]`); see `accepts`.
    model_input: tuple[tuple[str, tuple[str, ...]], ...] = ()
    family_input: tuple[tuple[str, tuple[str, ...]], ...] = ()
    # The secrets the server itself holds (settings.held_secrets: provider keys, the file's keys and MCP secrets),
    # longest first: removed from every child process's environment and redacted from tool output and model text.
    held_secrets: tuple[str, ...] = ()
    # The environment variables that carry the providers' keys (OPENAI_API_KEY, ..., any `api_key_env`): never
    # passed to a child process, whatever their value.
    secret_variables: tuple[str, ...] = ()
    # `[tools] env_deny` of the file: more variables kept from child processes, by name or `PREFIX_*` pattern.
    env_deny: tuple[str, ...] = ()
    # How local commands are confined (runtime/sandbox.py): the careful choice by default; where the kernel offers
    # no sandbox, commands run as before and the server says so at start and in `doctor`.
    sandbox: SandboxMode = SandboxMode.WORKSPACE_WRITE
    # Whether `sandbox` was set by the user (flag, variable or file) rather than defaulted: a sandbox asked for by
    # name that cannot be had refuses commands (fails closed) instead of running them with the user's rights.
    sandbox_explicit: bool = False
    # Whether sandboxed commands may use the network (off: TCP bind and connect refused, where the kernel can).
    sandbox_network: bool = True
    # More directories sandboxed commands may write in workspace-write (caches: `~/.cache/pip`), absolute.
    sandbox_writable: tuple[str, ...] = ()
    # The hosts a client's `providers/set` may name in a plain-http `baseUrl` (lower case); every other must be https
    # (REMOTE.md decision 10). On stdio, http to a loopback address is allowed as well (agent/routes.py).
    allow_provider_hosts: tuple[str, ...] = ()
    # Whether sandboxed commands may read only the session's directories, the temp directory and the system's
    # (`/usr`, `/lib*`, `/bin`, `/sbin`, `/etc`, `/opt`, `/proc`) rather than all of /: `serve` sets it, so one
    # principal's commands read neither the server's files nor a home directory (shared/design/REMOTE.md, decision 5).
    sandbox_confine_reads: bool = False
    # With `sandbox_confine_reads`: the server's own files and directories (absolute, resolved), hidden from commands
    # even where they lie inside a readable directory (a state directory under /tmp, a config file under /etc).
    sandbox_hidden: tuple[str, ...] = ()

    def accepts(self, spec: str) -> frozenset[str]:
        """What the model `spec` takes in a prompt: its `models` entry's `input`, else its family's, else the
        family's default (`DEFAULT_INPUT`). Text always."""
        family = spec.partition(":")[0]
        kinds = dict(self.model_input).get(spec) or dict(self.family_input).get(family) or DEFAULT_INPUT.get(family)
        return frozenset(("text", *(kinds or ())))
