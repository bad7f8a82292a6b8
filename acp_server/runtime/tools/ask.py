"""`ask_user`: the model asks the user a structured question and gets the answer back as the tool result.

Where the client can show a form (ACP `elicitation/create`, form mode: `ctx.questions`), the question goes there
with a JSON schema of the fields asked for; the user's answer, a decline or a dismissal reaches the model as such. A
client that cannot be asked gets the question as plain text in the agent's reply, and the tool result tells the
model to end its turn and wait: the user's next message is the answer. A cancel of the turn withdraws an open form
like any request to the client (docs/interrupts.md I8).
"""

from __future__ import annotations

from typing import Any, Literal

import orjson
from pydantic import BaseModel, ConfigDict, Field

from acp_server.runtime.model import TextDelta
from acp_server.runtime.ports import Question
from acp_server.runtime.tools import Tool, ToolContext, ToolResult

__all__ = ["ASK_TOOLS", "requested_schema"]

# The one field of a question asked without fields: a free-text answer.
ANSWER_FIELD = "answer"

WAIT_FOR_THE_USER = (
    "This client cannot show a form, so your question was shown to the user as text in your reply. End your turn "
    "now without guessing the answer: the user's next message holds it."
)


class FieldArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(
        pattern=r"^[A-Za-z_][A-Za-z0-9_]{0,63}$", description="the key of this field in the answer, e.g. branch_name"
    )
    title: str | None = Field(default=None, description="the label the user sees")
    description: str | None = Field(default=None, description="help for the user")
    type: Literal["string", "number", "integer", "boolean"] = "string"
    choices: list[str] | None = Field(
        default=None, min_length=1, description="only for a string: the values the user picks one of"
    )
    required: bool = True


class AskUserArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    question: str = Field(min_length=1, description="what you need to know, as the user will read it")
    fields: list[FieldArgs] = Field(
        default_factory=list,
        max_length=20,
        description="the answer's fields; leave out for one free-text answer",
    )


def requested_schema(args: AskUserArgs) -> dict[str, Any]:
    """The fields as ACP's `ElicitationSchema`: an object of primitive properties."""
    fields = args.fields or [FieldArgs(name=ANSWER_FIELD, title="Answer")]
    properties: dict[str, Any] = {}
    for item in fields:
        prop: dict[str, Any] = {"type": item.type}
        if item.title:
            prop["title"] = item.title
        if item.description:
            prop["description"] = item.description
        if item.choices and item.type == "string":
            prop["enum"] = item.choices
        properties[item.name] = prop
    schema: dict[str, Any] = {"type": "object", "properties": properties}
    required = [item.name for item in fields if item.required]
    if required:
        schema["required"] = required
    return schema


def _plain(args: AskUserArgs) -> str:
    """The question as text in the reply, for a client without forms."""
    lines = [args.question.strip()]
    for item in args.fields:
        label = item.title or item.name
        detail = f": {item.description}" if item.description else ""
        options = f" (one of: {', '.join(item.choices)})" if item.choices else ""
        lines.append(f"- {label}{detail}{options}")
    return "\n\n" + "\n".join(lines) + "\n\n"


async def _ask_user(ctx: ToolContext, args: AskUserArgs) -> ToolResult:
    schema = requested_schema(args)
    answer = await ctx.questions.ask(Question(ctx.tool_call_id, args.question, schema))
    if answer is None:
        await ctx.emit(TextDelta(_plain(args)))
        return ToolResult(WAIT_FOR_THE_USER, raw_output={"action": "asked_in_reply"})
    if answer.action == "accept":
        known = schema["properties"]
        content = {k: v for k, v in (answer.content or {}).items() if k in known}
        text = orjson.dumps(content).decode()
        return ToolResult(f"The user answered: {text}", raw_output={"action": "accept", "content": content})
    if answer.action == "decline":
        text = "The user declined to answer this question. Do not ask it again; go on without it or stop."
    elif answer.action == "cancel":
        text = "The user dismissed the question without answering it."
    else:
        text = f"The question was not answered (the client said {answer.action[:40]!r})."
    return ToolResult(text, raw_output={"action": answer.action})


ASK_TOOLS: tuple[Tool[Any], ...] = (
    Tool(
        "ask_user",
        "Ask the user a question you cannot answer yourself (a choice, a missing detail, a confirmation) and wait "
        "for the answer. Give fields for a structured answer, or none for free text.",
        AskUserArgs,
        "other",
        _ask_user,
        lambda a: f"Ask: {a.question[:60]}",
    ),
)
