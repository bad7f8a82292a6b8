"""`delegate`: hand a self-contained task to a subagent, a child session with its own turn and the same tools, and
get its final answer back as the tool result.

The child runs inside this tool call (`ctx.subagents`), so cancelling the parent's turn cancels the child and its
own children before the parent answers; cancelling the child's session id stops the child only, and this call then
fails and the parent goes on. With the scripted model, the call may carry the child's own script.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from acp_server.runtime.tools import Tool, ToolContext, ToolResult

__all__ = ["DELEGATE_TOOLS"]


class DelegateArgs(BaseModel):
    model_config = ConfigDict(extra="forbid", defer_build=True)  # built on first use, not at start-up

    task: str = Field(description="the task, complete in itself: the subagent sees nothing else of this conversation")
    instructions: str | None = Field(default=None, description="how to go about it, what to return")
    script: list[dict[str, Any]] | None = Field(
        default=None, description="only with the scripted test model: the subagent's own script"
    )


async def _delegate(ctx: ToolContext, args: DelegateArgs) -> ToolResult:
    task = args.task if not args.instructions else f"{args.task}\n\n{args.instructions}"
    meta: dict[str, Any] = {"scripted": args.script} if args.script is not None else {}
    answer = await ctx.subagents.run(task, meta, ctx.tool_call_id, ctx.emit)
    return ToolResult(answer or "(the subagent finished without an answer)")


DELEGATE_TOOLS: tuple[Tool[Any], ...] = (
    Tool(
        "delegate",
        "Hand a self-contained task to a subagent with the same tools; returns its final answer.",
        DelegateArgs,
        "think",
        _delegate,
        lambda a: f"Delegate: {a.task[:60]}",
        cancellable=True,
    ),
)
