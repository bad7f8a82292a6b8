"""A `session/prompt` request as the core's `Prompt` input: its content blocks as text for the model (every
block represented, none silently dropped), the images and sounds it shows a model that takes them, and the blocks
as the store keeps them.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import unquote, urlparse

from acp_server.agent.sessions.inputs import Attachment, ClientTools, LinkedImage, Prompt
from acp_server.jsonrpc.rpc import ErrorCode, RpcError
from acp_server.protocol.initialize import Capabilities
from acp_server.protocol.schema import (
    AudioContent,
    EmbeddedResource,
    ImageContent,
    PromptRequest,
    ResourceLink,
    TextContent,
)
from acp_server.runtime.media import validate_media
from acp_server.runtime.model import TEXT_ONLY, Media

__all__ = ["check_media", "client_tools", "prompt_attachments", "prompt_input", "prompt_text"]

# The image formats both providers take (OpenAI and Anthropic: PNG, JPEG, GIF, WebP), by file name ending.
IMAGE_ENDINGS = {".png": "image/png", ".jpg": "image/jpeg", ".jpeg": "image/jpeg", ".gif": "image/gif"}
IMAGE_ENDINGS[".webp"] = "image/webp"


def prompt_input(request: PromptRequest, accepts: frozenset[str] = TEXT_ONLY) -> Prompt:
    """`accepts`: what the session's model takes ("image", "audio" besides text), see `Config.accepts`."""
    blocks = request.prompt
    return Prompt(
        lambda: prompt_text(request, accepts),
        len(blocks),
        lambda: [block.model_dump(by_alias=True, exclude_none=True) for block in blocks],
        request.meta or {},
        lambda: prompt_attachments(request, accepts),
    )


def check_media(request: PromptRequest, model: str, accepts: frozenset[str]) -> None:
    """Refuse (-32602, naming the block) an image or a sound the session's model does not take, or one the
    providers would refuse (`validate_media`: its format, its base64, its size), pasted or an embedded resource's
    blob: never silently dropped, never sent to fail at the endpoint and stay in the history. Cheap: it runs on the
    connection's reader path."""
    for index, block in enumerate(request.prompt):
        where = f"Invalid params: prompt.{index}"
        if isinstance(block, EmbeddedResource):
            image = _embedded_image(block)
            if image is not None and "image" in accepts and (why := validate_media("image", *image)) is not None:
                raise RpcError(ErrorCode.INVALID_PARAMS, f"{where}: embedded resource: {why}")
            continue
        if not isinstance(block, ImageContent | AudioContent):
            continue
        kind = block.type
        if kind not in accepts:
            raise RpcError(
                ErrorCode.INVALID_PARAMS,
                f"{where}: {kind} content is not supported by the model {model}; if it takes {kind}s, list it in "
                f'config.toml as models = [{{ model = "{model}", input = ["text", "{kind}"] }}] '
                "(docs/configuration.md, Images)",
            )
        if not block.mime_type.startswith(f"{kind}/"):
            raise RpcError(ErrorCode.INVALID_PARAMS, f"{where}: mimeType {block.mime_type!r} is not an {kind} type")
        why = validate_media(kind, block.mime_type, block.data)
        if why is not None:
            raise RpcError(ErrorCode.INVALID_PARAMS, f"{where}: {why}")


def _linked_image(block: ResourceLink) -> str | None:
    """The local path of a `file://` link to an image, or None."""
    parsed = urlparse(block.uri)
    if parsed.scheme != "file":
        return None
    path = unquote(parsed.path)
    ending = path[path.rfind(".") :].lower() if "." in path.rpartition("/")[2] else ""
    if (block.mime_type or "").startswith("image/") or ending in IMAGE_ENDINGS:
        return path
    return None


def _embedded_image(block: EmbeddedResource) -> tuple[str, str] | None:
    """An embedded resource's image, as (mime type, base64 blob), or None."""
    mime, blob = block.resource.get("mimeType"), block.resource.get("blob")
    if isinstance(mime, str) and mime.startswith("image/") and isinstance(blob, str):
        return mime, blob
    return None


def prompt_attachments(request: PromptRequest, accepts: frozenset[str]) -> tuple[Attachment, ...]:
    """The images (sounds) the model is shown, in the prompt's order; nothing for a model that takes none."""
    found: list[Attachment] = []
    for block in request.prompt:
        if isinstance(block, ImageContent | AudioContent):
            if block.type in accepts:
                found.append(Media(block.type, block.mime_type, block.data))
        elif "image" not in accepts:
            continue
        elif isinstance(block, ResourceLink):
            path = _linked_image(block)
            if path is not None:
                found.append(LinkedImage(path, block.name))
        elif isinstance(block, EmbeddedResource):
            image = _embedded_image(block)
            if image is not None:
                found.append(Media("image", *image))
    return tuple(found)


def prompt_text(request: PromptRequest, accepts: frozenset[str] = TEXT_ONLY) -> str:
    """The user's prompt as text for the model; every block is represented, none silently dropped. An image the
    model is shown is named here and follows the text (`prompt_attachments`)."""
    parts: list[str] = []
    images = "image" in accepts
    for block in request.prompt:
        if isinstance(block, TextContent):
            parts.append(block.text)
        elif isinstance(block, ImageContent | AudioContent):
            parts.append(f"[{block.type}: {block.mime_type}]")
        elif isinstance(block, ResourceLink):
            parsed = urlparse(block.uri)
            if parsed.scheme == "file":
                path = unquote(parsed.path)
                if images and _linked_image(block) is not None:
                    parts.append(f"[The user attached the image {path} ({block.name})]")
                else:
                    parts.append(
                        f"[The user attached the file {path} ({block.name}); read it with read_file if needed]"
                    )
            else:
                parts.append(f"[The user attached a link: {block.name} <{block.uri}>]")
        elif isinstance(block, EmbeddedResource):
            uri = block.resource.get("uri", "")
            text = block.resource.get("text")
            if isinstance(text, str):
                parts.append(f'<context uri="{uri}">\n{text}\n</context>')
            elif images and (image := _embedded_image(block)) is not None:
                parts.append(f"[The user attached the image {uri} ({image[0]})]")
            else:
                mime = block.resource.get("mimeType", "binary")
                parts.append(f"[The user attached {uri} ({mime}); its binary content is not shown]")
        else:
            parts.append(f"[{block.type} content]")
    return "\n".join(parts)


def client_tools(capabilities: Capabilities) -> ClientTools:
    session, elicitation = capabilities.session, capabilities.elicitation
    tools = ClientTools(
        capabilities.fs.read_text_file,
        capabilities.fs.write_text_file,
        capabilities.terminal,
        notices=_advertised(session, "notices"),
        compaction=_advertised(session, "compaction"),
        elicitation=_advertised(elicitation, "form"),
        elicitation_url=_advertised(elicitation, "url"),
    )
    return _SHARED_CLIENT_TOOLS.setdefault(tools, tools)


# One (frozen) `ClientTools` per combination of capabilities, shared by every session that has it, rather than one
# each; there are 128 combinations at most.
_SHARED_CLIENT_TOOLS: dict[ClientTools, ClientTools] = {}


def _advertised(capabilities: Any, name: str) -> bool:
    """ACP: `{}` advertises a capability; omitted, `null` or malformed means it is not."""
    return isinstance(capabilities, dict) and isinstance(capabilities.get(name), dict)
