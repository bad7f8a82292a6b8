"""Wire models of the ACP messages acp-server reads, and builders for the ones it writes.

Incoming params are validated by pydantic models named as in the official schema (`PromptRequest`, ...): strict
types (a `"1"` is not a protocol version), camelCase aliases, `_meta` kept, unknown fields allowed (ACP lets peers
add fields we must ignore). Models are built lazily (`defer_build`) so start-up pays only for what is used.

Outgoing messages are plain dicts made by the small builders at the bottom: a `session/update` is written once per
streamed chunk, and building and dumping a pydantic model per chunk would cost several times the server's whole
per-chunk budget. The tests validate every written message against the official JSON schema instead.

Client JSON that is kept as it came (`_meta`, `mcpServers` entries, an embedded resource) is bounded by the rules
of `bounds.py`, applied here as validators: what exceeds them is refused as invalid params (-32602), before anything
is stored.

This module is not on the path to the first `initialize` answer (issue 14: start-up): the method tables name its
models (`params.py`), imported on first use, and `initialize` is read without pydantic (`initialize.py`).
"""

from __future__ import annotations

import enum
from typing import Annotated, Any, Literal, Self

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, model_validator
from pydantic.alias_generators import to_camel

from acp_server.protocol.bounds import (
    MAX_KEPT_DEPTH,
    MAX_META_BYTES,
    MAX_META_DEPTH,
    check_kept_object,
    check_kept_value,
    check_meta,
    check_metas_within,
    deeper_than,
)

__all__ = [
    "MAX_KEPT_DEPTH",
    "MAX_META_BYTES",
    "MAX_META_DEPTH",
    "AudioContent",
    "AuthenticateRequest",
    "CancelNotification",
    "CancelRequestNotification",
    "ClientCapabilities",
    "CloseSessionRequest",
    "ContentBlock",
    "DeleteSessionRequest",
    "EmbeddedResource",
    "ImageContent",
    "InitializeRequest",
    "KeptObject",
    "KeptValue",
    "ListSessionsRequest",
    "LoadSessionRequest",
    "LogoutRequest",
    "MessageMcpNotification",
    "Meta",
    "NewSessionRequest",
    "NoParams",
    "PermissionOptionKind",
    "PermissionOutcome",
    "PromptRequest",
    "RequestId",
    "ResourceLink",
    "SessionIdRequest",
    "SetSessionConfigOptionRequest",
    "SetSessionModeRequest",
    "SetSessionTitleRequest",
    "TextContent",
    "notice_update",
    "session_update",
    "text_block",
]

RequestId = int | str | None


class PermissionOptionKind(enum.StrEnum):
    """ACP `PermissionOptionKind`; our options' ids are their kinds."""

    ALLOW_ONCE = "allow_once"
    ALLOW_ALWAYS = "allow_always"
    REJECT_ONCE = "reject_once"
    REJECT_ALWAYS = "reject_always"


class PermissionOutcome(enum.StrEnum):
    """ACP `RequestPermissionOutcome.outcome`: the user picked an option, or the turn was cancelled first."""

    SELECTED = "selected"
    CANCELLED = "cancelled"


Meta = Annotated[dict[str, Any] | None, AfterValidator(check_meta)]
KeptObject = Annotated[dict[str, Any], AfterValidator(check_kept_object)]
# A field read leniently (any JSON value), kept as it came: bounded like a kept object when it is one (or an array).
KeptValue = Annotated[Any, AfterValidator(check_kept_value)]


class WireModel(BaseModel):
    """Base of every incoming wire model: strict JSON types, camelCase on the wire, `_meta` preserved."""

    model_config = ConfigDict(
        strict=True,
        extra="allow",
        populate_by_name=True,
        alias_generator=to_camel,
        defer_build=True,
        frozen=True,
    )

    meta: Meta = Field(default=None, alias="_meta")

    @model_validator(mode="after")
    def _bounded_extras(self) -> Self:
        # Unknown fields are kept (a prompt block is stored as it came), so they are bounded like any kept object:
        # their depth, and every `_meta` inside them.
        for name, value in (self.model_extra or {}).items():
            if isinstance(value, (dict, list)):
                if deeper_than(value, MAX_KEPT_DEPTH):
                    raise ValueError(f"{name} is nested deeper than {MAX_KEPT_DEPTH} levels")
                check_metas_within(value)
        return self


class FileSystemCapability(WireModel):
    read_text_file: bool = False
    write_text_file: bool = False


class ClientCapabilities(WireModel):
    """What the editor can do for us. ACP: anything omitted is unsupported."""

    fs: FileSystemCapability = Field(default_factory=FileSystemCapability)
    terminal: bool = False
    # Kept loose: the schema says a malformed value means "not advertised", never an error (protocol/prompts.py).
    # Still bounded as kept values: a `_meta` inside them is a `_meta` like any other.
    session: KeptValue = None
    elicitation: KeptValue = None


class Implementation(WireModel):
    name: str
    version: str
    title: str | None = None


class InitializeRequest(WireModel):
    protocol_version: int
    client_capabilities: ClientCapabilities = Field(default_factory=ClientCapabilities)
    client_info: Implementation | None = None


class AuthenticateRequest(WireModel):
    method_id: str


class LogoutRequest(WireModel):
    pass


class NoParams(WireModel):
    """A method without params of its own (`_acp_server/stats`)."""


class NewSessionRequest(WireModel):
    cwd: str
    mcp_servers: list[KeptObject]
    additional_directories: list[str] = []


class TextContent(WireModel):
    type: Literal["text"]
    text: str


class ImageContent(WireModel):
    type: Literal["image"]
    data: str
    mime_type: str
    uri: str | None = None


class AudioContent(WireModel):
    type: Literal["audio"]
    data: str
    mime_type: str


class ResourceLink(WireModel):
    type: Literal["resource_link"]
    uri: str
    name: str
    mime_type: str | None = None
    title: str | None = None
    description: str | None = None
    size: int | None = None


class EmbeddedResource(WireModel):
    type: Literal["resource"]
    resource: KeptObject


ContentBlock = Annotated[
    TextContent | ImageContent | AudioContent | ResourceLink | EmbeddedResource,
    Field(discriminator="type"),
]


class PromptRequest(WireModel):
    session_id: str
    prompt: list[ContentBlock]


class SetSessionModeRequest(WireModel):
    session_id: str
    mode_id: str


class SetSessionConfigOptionRequest(WireModel):
    session_id: str
    config_id: str
    value: str | bool
    type: str | None = None


class LoadSessionRequest(WireModel):
    """Also `session/resume` (same params; `mcpServers` optional there)."""

    session_id: str
    cwd: str
    mcp_servers: list[KeptObject] = []
    additional_directories: list[str] = []


class ListSessionsRequest(WireModel):
    cwd: str | None = None
    cursor: str | None = None
    # Unstable (`sessionCapabilities.archive`): `exclude` (as omitted), `include` or `only`; any other is -32602.
    archived: str | None = None


class SetSessionTitleRequest(WireModel):
    """Unstable `session/set_title` (both versions' shape)."""

    session_id: str
    title: str


class SessionIdRequest(WireModel):
    """Unstable `session/status`, `session/archive`, `session/unarchive` (both versions): a session id alone."""

    session_id: str


class SetProviderRequest(WireModel):
    """Unstable `providers/set` (both versions' shape). `headers` may hold the client's key: kept in memory only."""

    provider_id: str
    api_type: str
    base_url: str
    headers: dict[str, str] = {}


class DisableProviderRequest(WireModel):
    """Unstable `providers/disable` (both versions' shape)."""

    provider_id: str


class DeleteSessionRequest(WireModel):
    session_id: str


class CloseSessionRequest(WireModel):
    session_id: str


class CancelNotification(WireModel):
    session_id: str


class CancelRequestNotification(WireModel):
    request_id: int | str | None


class MessageMcpNotification(WireModel):
    """Unstable `mcp/message` from the client: an MCP notification for one of our MCP requests in flight to a server
    it offers over ACP (mcp_bridge/over_acp.py). Also the request's params (which a client may not send us: we
    offer no MCP server)."""

    server_id: str
    request_id: str
    method: str
    params: KeptObject | None = None


# --- builders for what we write (plain dicts: they are on the per-chunk hot path) ---


def text_block(text: str) -> dict[str, Any]:
    return {"type": "text", "text": text}


def session_update(session_id: str, update: dict[str, Any]) -> dict[str, Any]:
    """The params of a `session/update` notification."""
    return {"sessionId": session_id, "update": update}


def notice_update(
    title: str, description: str | None, severity: str, meta: dict[str, Any] | None = None
) -> dict[str, Any]:
    """ACP `notice` (only for a client that advertised `session.notices`): live, never stored or replayed as such."""
    update: dict[str, Any] = {"sessionUpdate": "notice", "severity": severity, "title": title}
    if description:
        update["description"] = description
    if meta is not None:
        update["_meta"] = meta
    return update
