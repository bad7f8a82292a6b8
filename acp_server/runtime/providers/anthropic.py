"""The `anthropic` model family: Claude through the official SDK's streaming Messages API.

An optional extra (`pip install 'acp-server[anthropic]'`): the SDK takes over a second to import, so it is imported
on first use, in a worker thread, and a missing SDK is a `ModelError` saying how to install it rather than a crash
at start-up. One `AsyncAnthropic` client per provider, made on first use.

It follows the `openai` module's choices, for the same reasons (see its docstring): the request goes through the
SDK's generic `post(..., cast_to=object, stream=True)` (through `HttpProvider.stream_reply`, which makes the
attempts and keeps the timeouts), which keeps the SDK's error classes and `AsyncStream` but reads each event as a
plain dict. That also steps around `messages.stream()`'s accumulator,
which parses `input_json_delta` fragments as they arrive and raises on arguments that are not valid JSON, where
this server must hand the loop a marked tool call instead. The stream is held in `async with` inside the caller's
cancel scope; failures become one line without the key.

Images go as base64 `image` blocks after the text of a user message, and inside a `tool_result` block's content for
a tool's images, on a model that takes them (`TurnInput.accepts`). The Messages API takes no audio: a sound is
always sent as its text stand-in.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

from acp_server.errors import ModelError
from acp_server.runtime.model import (
    INVALID_ARGUMENTS,
    TEXT_ONLY,
    Emit,
    Media,
    Message,
    ModelTurn,
    Reply,
    StopReason,
    TextDelta,
    ThoughtDelta,
    ToolCall,
    ToolSpec,
    TurnInput,
    UsageReported,
)
from acp_server.runtime.providers.http_common import HttpProvider, parse_arguments
from acp_server.settings.files import DEFAULT_TIMEOUTS, EndpointTimeouts

__all__ = ["AnthropicProvider", "wire_messages"]

log = logging.getLogger(__name__)

MISSING_SDK = "the anthropic provider needs: pip install 'acp-server[anthropic]'"
DEFAULT_BASE_URL = "https://api.anthropic.com"
# Anthropic stop reasons that are not a plain end of the turn.
STOP_REASONS: dict[str, StopReason] = {
    "max_tokens": StopReason.MAX_TOKENS,
    "model_context_window_exceeded": StopReason.MAX_TOKENS,
    "refusal": StopReason.REFUSAL,
}


class AnthropicProvider(HttpProvider):
    """A Claude model. `api_key=None` lets the SDK use ANTHROPIC_API_KEY or ANTHROPIC_AUTH_TOKEN."""

    SDK = "anthropic"
    CLIENT = "AsyncAnthropic"
    MISSING_SDK = MISSING_SDK
    DEFAULT_BASE_URL = DEFAULT_BASE_URL

    @staticmethod
    def sdk_module() -> ModuleType:
        import anthropic  # noqa: PLC0415 (over a second to import, and optional: on first use, in a worker thread)

        return anthropic

    def __init__(
        self,
        model: str,
        *,
        api_key: str | None = None,
        base_url: str | None = None,
        context_window: int | None = None,
        max_tokens: int = 8192,
        timeouts: EndpointTimeouts = DEFAULT_TIMEOUTS,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(
            model,
            api_key=api_key,
            base_url=base_url,
            context_window=context_window,
            timeouts=timeouts,
            headers=headers,
        )
        self.max_tokens = max_tokens

    def open_turn(self, turn: TurnInput) -> ModelTurn:
        return _AnthropicTurn(self, turn.system_prompt, turn.accepts)


class _AnthropicTurn:
    """One turn on the Messages API: holds nothing but the turn's system prompt and what the model takes."""

    __slots__ = ("_accepts", "_provider", "_system_prompt")

    def __init__(self, provider: AnthropicProvider, system_prompt: str, accepts: frozenset[str]) -> None:
        self._provider = provider
        self._system_prompt = system_prompt
        self._accepts = accepts

    async def respond(self, messages: Sequence[Message], tools: Sequence[ToolSpec], emit: Emit) -> Reply:
        provider = self._provider
        body: dict[str, Any] = {
            "model": provider.model,
            "max_tokens": provider.max_tokens,
            "messages": wire_messages(messages, self._accepts),
            "stream": True,
        }
        if self._system_prompt:
            body["system"] = self._system_prompt
        if tools:
            body["tools"] = [
                {"name": t.name, "description": t.description, "input_schema": t.parameters} for t in tools
            ]
        reading = _Reading()
        await provider.stream_reply("/v1/messages", body, reading.feed, emit)
        if not reading.stopped:
            raise ModelError("the model stream ended before the reply was complete")
        if provider.context_window and reading.input_tokens + reading.output_tokens:
            await emit(UsageReported(reading.input_tokens + reading.output_tokens, provider.context_window))
        return reading.reply()

    async def settle(self) -> None:
        return None


@dataclass(slots=True)
class _Block:
    kind: str
    call_id: str = ""
    name: str = ""
    start_input: Any = None
    fragments: list[str] = field(default_factory=list)


@dataclass(slots=True)
class _Reading:
    """What the events of one streamed message add up to; events of an unexpected shape are skipped."""

    text: list[str] = field(default_factory=list)
    blocks: dict[int, _Block] = field(default_factory=dict)
    stop_reason: str | None = None
    stopped: bool = False
    input_tokens: int = 0
    output_tokens: int = 0

    async def feed(self, event: Any, emit: Emit) -> None:
        if type(event) is not dict:
            return
        kind = event.get("type")
        if kind == "content_block_delta":
            delta = event.get("delta")
            if type(delta) is not dict:
                return
            delta_kind = delta.get("type")
            if delta_kind == "text_delta":
                text = delta.get("text")
                if text and type(text) is str:
                    self.text.append(text)
                    await emit(TextDelta(text))
            elif delta_kind == "thinking_delta":
                thought = delta.get("thinking")
                if thought and type(thought) is str:
                    await emit(ThoughtDelta(thought))
            elif delta_kind == "input_json_delta":
                index = event.get("index")
                block = self.blocks.get(index) if type(index) is int else None
                fragment = delta.get("partial_json")
                if block is not None and fragment and type(fragment) is str:
                    block.fragments.append(fragment)
        elif kind == "content_block_start":
            start = event.get("content_block")
            index = event.get("index")
            if type(start) is dict and type(index) is int:
                self.blocks[index] = _Block(
                    str(start.get("type")), str(start.get("id") or ""), str(start.get("name") or ""), start.get("input")
                )
        elif kind == "message_start":
            message = event.get("message")
            usage = message.get("usage") if type(message) is dict else None
            if type(usage) is dict:
                self._count(usage)
        elif kind == "message_delta":
            delta = event.get("delta")
            if type(delta) is dict and type(delta.get("stop_reason")) is str:
                self.stop_reason = delta["stop_reason"]
            usage = event.get("usage")
            if type(usage) is dict:
                self._count(usage)
        elif kind == "message_stop":
            self.stopped = True

    def _count(self, usage: dict[str, Any]) -> None:
        """Usage totals are cumulative; a field left out keeps its earlier value."""
        inputs = [usage.get(k) for k in ("input_tokens", "cache_creation_input_tokens", "cache_read_input_tokens")]
        if any(type(n) is int for n in inputs):
            self.input_tokens = sum(n for n in inputs if type(n) is int and n > 0)
        output = usage.get("output_tokens")
        if type(output) is int and output >= 0:
            self.output_tokens = output

    def reply(self) -> Reply:
        calls = tuple(
            ToolCall(block.call_id, block.name, self._arguments(block))
            for _, block in sorted(self.blocks.items())
            if block.kind == "tool_use"
        )
        return Reply("".join(self.text), calls, STOP_REASONS.get(self.stop_reason or "", StopReason.END_TURN))

    @staticmethod
    def _arguments(block: _Block) -> dict[str, Any]:
        if block.fragments:
            return parse_arguments("".join(block.fragments))
        return dict(block.start_input) if isinstance(block.start_input, dict) else {}


def wire_messages(messages: Sequence[Message], accepts: frozenset[str] = TEXT_ONLY) -> list[dict[str, Any]]:
    """The conversation in Messages form: tool results are user content blocks, consecutive same-role entries are
    merged, empty text blocks (which the API rejects) are left out, and images the model takes are image blocks."""
    accepts = accepts - {"audio"}  # the Messages API has no audio input
    wire: list[dict[str, Any]] = []

    def add(role: str, blocks: list[dict[str, Any]]) -> None:
        if not blocks:
            return
        if wire and wire[-1]["role"] == role:
            wire[-1]["content"].extend(blocks)
        else:
            wire.append({"role": role, "content": blocks})

    for message in messages:
        content = "\n".join([message.content, *(m.describe() for m in message.media if m.kind not in accepts)])
        text = [{"type": "text", "text": content}] if content.strip() else []
        images = [_image(m) for m in message.media if m.kind in accepts]
        if message.role == "user":
            add("user", text + images)
        elif message.role == "assistant":
            uses = [
                {
                    "type": "tool_use",
                    "id": call.id,
                    "name": call.name,
                    # Invalid arguments go back as {}: the API wants an object; the tool's error result says why.
                    "input": {} if INVALID_ARGUMENTS in call.arguments else call.arguments,
                }
                for call in message.tool_calls
            ]
            add("assistant", text + uses)
        else:
            result: dict[str, Any] = {"type": "tool_result", "tool_use_id": message.tool_call_id or ""}
            if images:
                result["content"] = text + images
            elif content:
                result["content"] = content
            add("user", [result])
    return wire


def _image(media: Media) -> dict[str, Any]:
    return {"type": "image", "source": {"type": "base64", "media_type": media.mime_type, "data": media.data}}
