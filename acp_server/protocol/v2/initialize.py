"""The v2 `initialize` result (ACP-V2.md §3): `info`, and every capability an object marker.

`capabilities.session` commits to the baseline (new, list, resume, close, prompt, cancel, update); `delete` and
`additionalDirectories` are advertised beside it, and where sessions are stored the unstable `fork`, `archive`,
`status` and `title`. Images and audio are advertised when a configured model takes
them, else left out (never `false`). `authMethods` holds the `agent` key method while the default model's key is
missing, else it is `[]` (§16; the methods themselves are in `auth.py`).
"""

from __future__ import annotations

from typing import Any

from acp_server import __version__
from acp_server.agent.sessions.options import PROMPT_POLICIES
from acp_server.protocol.context import RequestContext
from acp_server.protocol.editor_connection import EditorConnection
from acp_server.protocol.initialize import InitializeParams
from acp_server.protocol.shared_methods import taken_media
from acp_server.settings.config import Config

__all__ = ["auth_method_id", "initialize_result", "initialize_v2"]


async def initialize_v2(context: RequestContext, params: InitializeParams) -> dict[str, Any]:
    """`initialize` on a connection that chose v2 (its version and the client's capabilities were recorded in
    AcpDispatcher.prepare, in reader order): what both versions do first (protocol/shared_methods.py), then v2's
    result. An `initialize` that chose no version yet is answered by v1's, which this replaces once v2 is chosen."""
    if context.admission_error is not None:
        raise context.admission_error
    return initialize_result(context.connection, context.agent.config, await taken_media(context))


def initialize_result(connection: EditorConnection, config: Config, taken: frozenset[str]) -> dict[str, Any]:
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
                # `acp` (unstable): MCP servers the client offers over ACP, in `mcp/message` (mcp_bridge/over_acp.py).
                "mcp": {"stdio": {}, "http": {}, "acp": {}},
                "delete": {},
                "additionalDirectories": {},
                # Unstable (v2/schema.unstable.json), where sessions are stored: `archive` also means
                # `session/list`'s filter and `archived` flag.
                **({"fork": {}, "archive": {}, "status": {}, "title": {}} if config.store else {}),
            },
            # Unstable: `auth/status` (and its `auth/status_update`), and `providers/*` (protocol/provider_methods.py).
            "auth": {"status": {}},
            "providers": {},
            "_meta": {
                "acpServer": {
                    "promptPolicies": [policy.value for policy in PROMPT_POLICIES],
                    "defaultPromptPolicy": default_prompt_policy(config),
                    "extensionMethods": ["_acp_server/stats"],
                    "extensionNotifications": list(connection.extension_notifications),
                }
            },
        },
        "authMethods": auth_methods_v2(connection, config),
    }


def default_prompt_policy(config: Config) -> str:
    """What a busy prompt does on a v2 connection unless a session says otherwise: the configured policy when one
    was chosen, else `queue` (hold it until idle; ACP-V2.md §23 Q4)."""
    return config.prompt_policy.value if config.prompt_policy_chosen else "queue"


def auth_method_id(config: Config) -> str:
    """`<provider>-key`, the provider being the default model's (`openai:gpt-x` -> `openai-key`)."""
    provider = config.model.partition(":")[0] or "api"
    return f"{provider}-key"


def auth_methods_v2(connection: EditorConnection, config: Config) -> list[dict[str, Any]]:
    """What `initialize` advertises: the `agent` method while a key was missing as it was read (its description says
    where to put it), else nothing. Decided in reader order (`Handshake.auth_problem`, which also decides whether
    `auth/*` is served), so a login pipelined behind `initialize` finds it offered."""
    problem = connection.handshake.auth_problem
    if problem is None:
        return []
    return [{"methodId": auth_method_id(config), "name": "API key", "type": "agent", "description": problem}]
