"""`update_plan`: the model keeps a visible task list, which the client shows as the ACP agent plan.

ACP: "Agents SHOULD send the complete list of entries with each update; clients replace the current plan", so the
tool takes the whole plan every time and emits it whole.
"""

from __future__ import annotations

from collections import Counter
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from acp_server.runtime.model import PlanEntry, PlanUpdated
from acp_server.runtime.tools import Tool, ToolContext, ToolResult

__all__ = ["PLAN_TOOLS"]


class PlanEntryArgs(BaseModel):
    model_config = ConfigDict(extra="forbid", defer_build=True)  # built on first use, not at start-up

    content: str = Field(min_length=1, description="What this step does, in a few words.")
    priority: Literal["high", "medium", "low"] = "medium"
    status: Literal["pending", "in_progress", "completed"] = "pending"


class UpdatePlanArgs(BaseModel):
    model_config = ConfigDict(extra="forbid", defer_build=True)  # built on first use, not at start-up

    entries: list[PlanEntryArgs] = Field(description="The complete plan, every step, in order.")


async def _update_plan(ctx: ToolContext, args: UpdatePlanArgs) -> ToolResult:
    entries = tuple(PlanEntry(e.content, e.priority, e.status) for e in args.entries)
    await ctx.emit(PlanUpdated(entries))
    counts = Counter(e.status for e in entries)
    summary = ", ".join(f"{counts[s]} {s.replace('_', ' ')}" for s in ("completed", "in_progress", "pending"))
    return ToolResult(f"plan updated: {len(entries)} steps ({summary})")


PLAN_TOOLS: tuple[Tool[Any], ...] = (
    Tool(
        "update_plan",
        "Show the user your plan for this task: send every step, each time, with its status.",
        UpdatePlanArgs,
        "think",
        _update_plan,
        lambda a: "Update plan",
    ),
)
