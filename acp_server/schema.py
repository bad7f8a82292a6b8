"""Wire models of the ACP messages acp-server reads, and builders for the ones it writes.

Incoming params are validated by pydantic models named as in the official schema (`PromptRequest`, ...): strict
types (a `"1"` is not a protocol version), camelCase aliases, `_meta` kept, unknown fields allowed (ACP lets peers
add fields we must ignore). Models are built lazily (`defer_build`) so start-up pays only for what is used.

Outgoing messages are plain dicts made by the small builders at the bottom: a `session/update` is written once per
streamed chunk, and building and dumping a pydantic model per chunk would cost several times the server's whole
per-chunk budget. The tests validate every written message against the official JSON schema instead.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

__all__ = [
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
    "ListSessionsRequest",
    "LoadSessionRequest",
    "NewSessionRequest",
    "PromptRequest",
    "RequestId",
    "ResourceLink",
    "ScriptedReleaseNotification",
    "SetSessionConfigOptionRequest",
    "SetSessionModeRequest",
    "TextContent",
    "session_update",
    "text_block",
]

RequestId = int | str | None


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

    meta: dict[str, Any] | None = Field(default=None, alias="_meta")


class FileSystemCapability(WireModel):
    read_text_file: bool = False
    write_text_file: bool = False


class ClientCapabilities(WireModel):
    """What the editor can do for us. ACP: anything omitted is unsupported."""

    fs: FileSystemCapability = Field(default_factory=FileSystemCapability)
    terminal: bool = False


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


class NewSessionRequest(WireModel):
    cwd: str
    mcp_servers: list[dict[str, Any]]
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
    resource: dict[str, Any]


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
    mcp_servers: list[dict[str, Any]] = []
    additional_directories: list[str] = []


class ListSessionsRequest(WireModel):
    cwd: str | None = None
    cursor: str | None = None


class DeleteSessionRequest(WireModel):
    session_id: str


class CloseSessionRequest(WireModel):
    session_id: str


class CancelNotification(WireModel):
    session_id: str


class CancelRequestNotification(WireModel):
    request_id: int | str | None


class ScriptedReleaseNotification(WireModel):
    """`_scripted/release`: opens a gate of the scripted model (a product extension, see README)."""

    session_id: str
    gate: str


# --- builders for what we write (plain dicts: they are on the per-chunk hot path) ---


def text_block(text: str) -> dict[str, Any]:
    return {"type": "text", "text": text}


def session_update(session_id: str, update: dict[str, Any]) -> dict[str, Any]:
    """The params of a `session/update` notification."""
    return {"sessionId": session_id, "update": update}
