"""A `session/prompt` request as the core's `Prompt` command: its content blocks as text for the model (every
block represented, none silently dropped) and as the store keeps them.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import unquote, urlparse

from acp_server.protocol.schema import ClientCapabilities, EmbeddedResource, PromptRequest, ResourceLink, TextContent
from acp_server.sessions.commands import ClientTools, Prompt

__all__ = ["client_tools", "prompt_command", "prompt_text"]


def prompt_command(request: PromptRequest) -> Prompt:
    blocks = request.prompt
    return Prompt(
        lambda: prompt_text(request),
        len(blocks),
        lambda: [block.model_dump(by_alias=True, exclude_none=True) for block in blocks],
        request.meta or {},
    )


def prompt_text(request: PromptRequest) -> str:
    """The user's prompt as text for the model; every block is represented, none silently dropped.

    Images and audio never get here: admission refuses them (-32602) while no configured model takes them.
    """
    parts: list[str] = []
    for block in request.prompt:
        if isinstance(block, TextContent):
            parts.append(block.text)
        elif isinstance(block, ResourceLink):
            parsed = urlparse(block.uri)
            if parsed.scheme == "file":
                path = unquote(parsed.path)
                parts.append(f"[The user attached the file {path} ({block.name}); read it with read_file if needed]")
            else:
                parts.append(f"[The user attached a link: {block.name} <{block.uri}>]")
        elif isinstance(block, EmbeddedResource):
            uri = block.resource.get("uri", "")
            text = block.resource.get("text")
            if isinstance(text, str):
                parts.append(f'<context uri="{uri}">\n{text}\n</context>')
            else:
                mime = block.resource.get("mimeType", "binary")
                parts.append(f"[The user attached {uri} ({mime}); its binary content is not shown]")
        else:
            parts.append(f"[{block.type} content]")
    return "\n".join(parts)


def client_tools(capabilities: ClientCapabilities) -> ClientTools:
    session, elicitation = capabilities.session, capabilities.elicitation
    return ClientTools(
        capabilities.fs.read_text_file,
        capabilities.fs.write_text_file,
        capabilities.terminal,
        notices=_advertised(session, "notices"),
        compaction=_advertised(session, "compaction"),
        elicitation=_advertised(elicitation, "form"),
    )


def _advertised(capabilities: Any, name: str) -> bool:
    """ACP: `{}` advertises a capability; omitted, `null` or malformed means it is not."""
    return isinstance(capabilities, dict) and isinstance(capabilities.get(name), dict)
