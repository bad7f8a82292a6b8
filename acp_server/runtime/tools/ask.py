"""`ask_user`: the model asks the user a structured question and gets the answer back as the tool result.

Where the client can show a form (ACP `elicitation/create`, form mode: `ctx.questions`), the question goes there
with a JSON schema of the fields asked for; the user's answer, a decline or a dismissal reaches the model as such.
A question with a `url` sends the user to a link instead (URL mode: signing in, approving in a browser), where the
client can; its answer says whether the user agreed to go, never that they finished there. A client that cannot be
asked gets the question (and the link) as plain text in the agent's reply, and the tool result tells the model to end
its turn and wait: the user's next message is the answer. A cancel of the turn withdraws an open question like any
request to the client (docs/interrupts.md I8).

Secrets are never asked for in a form (ACP: form mode is not for secrets; its answer passes through the editor and
the conversation): a field that names a password, key or token is refused, and the model is told to send the user to
where the secret belongs.
"""

from __future__ import annotations

import re
from typing import Any, Literal
from urllib.parse import urlsplit

import orjson
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from acp_server.errors import ToolError
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
NO_SECRETS_IN_FORMS = (
    "ask_user never asks for a password, key or token in a form: the answer would pass through the editor and this "
    "conversation. Give a `url` where the user enters it, or tell the user which setting or environment variable to "
    "put it in."
)
# A field whose name, title or description has one of these words (a part of it: `db_password`, `API keys`,
# `authToken`) asks for a secret.
_SECRET_WORDS = re.compile(
    r"(?:^|[^a-z0-9])"
    r"(?:passwords?|passwd|pwd|passphrases?|secrets?|(?:auth|access|refresh|bearer)[ _-]?tokens?|token"
    r"|(?:api|access|private|secret|ssh)[ _-]?keys?|credentials?|pin[ _-]?(?:code|number)s?)"
    r"(?:$|[^a-z0-9])"
)
MAX_URL = 2048


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
        description="the answer's fields; leave out for one free-text answer. Never a password, key or token",
    )
    url: str | None = Field(
        default=None,
        description=(
            "instead of fields: an https link the user should open (to sign in, approve something, or enter a "
            "secret where it belongs); the answer says whether they agreed to go, not that they finished there"
        ),
    )

    @field_validator("url")
    @classmethod
    def _a_plain_web_link(cls, url: str | None) -> str | None:
        if url is None:
            return None
        if len(url) > MAX_URL or any(c.isspace() or not c.isprintable() for c in url):
            raise ValueError(f"the url must be one line of at most {MAX_URL} printable characters")
        parts = urlsplit(url)
        if parts.scheme not in ("https", "http") or not parts.hostname:
            raise ValueError("the url must be an https link with a host")
        if parts.scheme == "http" and parts.hostname not in ("localhost", "127.0.0.1", "::1"):
            # Plain http only to this machine (a local sign-in callback): anything else the user would open in the
            # clear, where they may be asked for a secret.
            raise ValueError("the url must be an https link (plain http only to localhost)")
        if parts.username is not None or parts.password is not None:
            raise ValueError("the url must not carry a user name or password")
        return url

    @model_validator(mode="after")
    def _a_link_or_fields(self) -> AskUserArgs:
        if self.url is not None and self.fields:
            raise ValueError("give either fields or a url, not both")
        return self


def asks_for_a_secret(args: AskUserArgs) -> bool:
    """Whether a field's name, title or description names a password, key or token (`max_tokens` does not)."""
    for item in args.fields:
        for label in (item.name, item.title or "", item.description or ""):
            if _SECRET_WORDS.search(re.sub(r"([a-z])([A-Z])", r"\1_\2", label).lower()):
                return True
    return False


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
    """The question as text in the reply, for a client without forms (or without links, for a link)."""
    lines = [args.question.strip()]
    if args.url is not None:
        lines.append(args.url)
    for item in args.fields:
        label = item.title or item.name
        detail = f": {item.description}" if item.description else ""
        options = f" (one of: {', '.join(item.choices)})" if item.choices else ""
        lines.append(f"- {label}{detail}{options}")
    return "\n\n" + "\n".join(lines) + "\n\n"


async def _ask_user(ctx: ToolContext, args: AskUserArgs) -> ToolResult:
    if asks_for_a_secret(args):
        raise ToolError(NO_SECRETS_IN_FORMS)
    schema = requested_schema(args) if args.url is None else {"type": "object", "properties": {}}
    answer = await ctx.questions.ask(Question(ctx.tool_call_id, args.question, schema, url=args.url))
    if answer is None:
        await ctx.emit(TextDelta(_plain(args)))
        return ToolResult(WAIT_FOR_THE_USER, raw_output={"action": "asked_in_reply"})
    if args.url is not None and answer.action == "accept":
        text = (
            f"The user agreed to open {args.url}. That does not mean they finished what it asks: check that it is "
            "done (for example, by retrying what needed it) before relying on it."
        )
        return ToolResult(text, raw_output={"action": "accept"})
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
        "for the answer. Give fields for a structured answer, none for free text, or a url to send the user to a "
        "link (to sign in or approve something). Never ask for a password, key or token in a field.",
        AskUserArgs,
        "other",
        _ask_user,
        lambda a: f"Ask: {a.question[:60]}",
    ),
)
