"""An MCP server's tools as the runtime's `Tool`s: named `mcp__<server>__<tool>`, gated by the permission mode, and
their results turned into what the model reads and the editor shows.

Permissions follow the tool's `readOnlyHint` annotation: a read-only tool runs without asking in every mode; any other
goes through the session's permission gate as an `execute` request remembered per tool, so `default` and
`accept_edits` ask, `bypass` never asks, and `read_only` refuses it. (Annotations are the server's own claims; they
decide only whether we ask, never what the server may do.)
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import orjson
from pydantic import BaseModel, ConfigDict

from acp_server.errors import ToolError
from acp_server.mcp_bridge.link import RemoteTool, ServerLink
from acp_server.mcp_bridge.specs import tool_name
from acp_server.runtime.media import validate_media
from acp_server.runtime.model import Media, TextOutput, ToolContent
from acp_server.runtime.ports import PermissionRequest
from acp_server.runtime.tools import Tool, ToolContext, ToolResult

if TYPE_CHECKING:
    from mcp.types import CallToolResult

__all__ = ["link_tools", "tool_result"]


class McpArguments(BaseModel):
    """Whatever the model sent: the MCP server validates it against its own schema and says what is wrong."""

    model_config = ConfigDict(extra="allow", defer_build=True)


def link_tools(link: ServerLink) -> tuple[Tool[McpArguments], ...]:
    return tuple(_tool(link, remote) for remote in link.tools)


def _tool(link: ServerLink, remote: RemoteTool) -> Tool[McpArguments]:
    title = f"mcp: {link.name}/{remote.name}"

    async def run(ctx: ToolContext, args: McpArguments) -> ToolResult:
        arguments = dict(args.model_extra or {})
        if not remote.read_only:
            decision = await ctx.permissions.decide(
                PermissionRequest(
                    tool_call_id=ctx.tool_call_id,
                    tool_name=ctx.tool_name,
                    kind="execute",
                    rule=ctx.tool_name,
                    title=title,
                    raw_input=arguments,
                )
            )
            if not decision.allowed:
                raise ToolError(f"{decision.reason or 'the tool was not allowed'}; nothing was done")
        return tool_result(await link.call(remote.name, arguments))

    description = remote.description or f"The {remote.name} tool of the MCP server {link.name!r}."
    return Tool(
        tool_name(link.server_id, remote.name),
        f"[MCP server {link.name}] {description}",
        McpArguments,
        "read" if remote.read_only else "execute",
        run,
        lambda args: title,
        asks_permission=not remote.read_only,
        parameters=remote.input_schema,
        cancellable=True,
    )


def tool_result(result: CallToolResult) -> ToolResult:
    """Each content block becomes one ACP content item (images and audio as a short placeholder); structured
    content becomes `rawOutput`, and the text when there is no other content; `isError` fails the tool call.

    Images and sounds also go to the model as `media`, beside the text (named there, without "not shown"): the
    provider shows them to a model that takes them and says what was left out to one that does not. One the
    providers would refuse (`validate_media`) stays a placeholder that says why."""
    parts = [_block_text(block) for block in result.content]
    structured = result.structured_content
    if not parts and structured is not None:
        parts.append(orjson.dumps(structured, option=orjson.OPT_INDENT_2).decode())
    shown: tuple[ToolContent, ...] = tuple(TextOutput(part) for part in parts)
    media: list[Media] = []
    read = list(parts)
    blocks: list[Any] = list(result.content)
    for index, block in enumerate(blocks):
        if getattr(block, "type", None) not in ("image", "audio"):
            continue
        # A medium the endpoint would refuse is never sent (it would stay in the history and fail every later
        # turn): the model reads why instead.
        why = validate_media(block.type, str(block.mime_type), str(block.data))
        if why is None:
            media.append(Media(block.type, str(block.mime_type), str(block.data)))
            read[index] = parts[index].removesuffix(", not shown]") + "]"
        else:
            read[index] = parts[index].removesuffix("]") + f": {why}]"
    output = "\n".join(read) or "(no output)"
    if result.is_error:
        output = f"error: {output}"
    return ToolResult(output, ok=not result.is_error, raw_output=structured, content=shown or None, media=tuple(media))


def _block_text(block: Any) -> str:
    kind = getattr(block, "type", None)
    if kind == "text":
        return str(block.text)
    if kind in ("image", "audio"):
        size = len(block.data) * 3 // 4  # base64
        return f"[{kind}: {block.mime_type}, about {size} bytes, not shown]"
    if kind == "resource_link":
        return f"[resource link: {block.name} <{block.uri}>]"
    if kind == "resource":
        resource = block.resource
        text = getattr(resource, "text", None)
        if isinstance(text, str):
            return f'<resource uri="{resource.uri}">\n{text}\n</resource>'
        return f"[resource {resource.uri} ({resource.mime_type or 'binary'}), not shown]"
    return f"[{kind} content]"
