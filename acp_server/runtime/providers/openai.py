"""The `openai` model family: any OpenAI-compatible Chat Completions endpoint, streamed through the official SDK.

One module reaches OpenAI itself and the local servers people run (Ollama, LM Studio, llama.cpp, vLLM) through
`base_url`. Chat Completions rather than the Responses API, because the local servers mostly lack the latter.

Why it looks the way it does:

- The SDK costs about half a second to import, so it is imported on first use, in a worker thread, keeping the
  event loop (and every other session's Stop) responsive meanwhile. One `AsyncOpenAI` client per provider, made on
  first use: it is configuration plus a connection pool, never turn state.
- The request goes through the SDK's generic `post(..., cast_to=object, stream=True)`: the same endpoint, error
  classes and `AsyncStream` as `chat.completions.create`, but each chunk stays the dict it was parsed into.
  Building the SDK's typed chunk objects costs about 70 µs a chunk (measured: 85 µs against 15 µs end to end), and
  the fields that matter most here, the reasoning deltas local servers add, are not in those types anyway. The
  body of that stream is read by `chat_stream.ChatChunks` rather than by the SDK's SSE decoder, which alone cost
  most of the agent's budget per chunk (12 µs); the SDK still sends the request and closes the stream.
- The SDK wraps that response in a stream of ours (`stream_class`) that holds the response alone. The SDK's own
  `AsyncStream` makes its reader at once, a generator that refers back to the stream: a cycle holding the response,
  its request with the serialized body (the whole conversation, images and all) and the request options with the
  body as a dict, which only the cyclic collector frees, and the server runs that rarely (`server.GC_THRESHOLD`).
  Unused here, it kept every call's body alive for many calls: memory grew with each one (issue 20, item 4).
- The stream is held in `async with` inside the caller's cancel scope, so a cancel closes the HTTP connection at
  once (the server stops generating) and surfaces as a cancellation, never as a model error.
- Tool-call arguments are untrusted text: if they are not a JSON object, the call carries
  `{INVALID_ARGUMENTS: raw text}` and the loop answers the model with an error instead of running the tool.
- Every failure becomes one `ModelError` line the user can act on, without a traceback and without the API key.
- Images go as `image_url` parts holding data URLs, sounds as `input_audio` parts (wav or mp3), on a model that takes
  them (`TurnInput.accepts`); a user message without media keeps the plain string content every server reads. A
  `tool` message can carry text only, so the media a tool returned follow the tool messages of that step as one user
  message ("the tool call X returned:"), the usual way to show a model a tool's image on Chat Completions.
- The attempts and the timeouts (connect, first byte, between chunks, total) are `HttpProvider.stream_reply`'s, not
  the SDK's, so a silent endpoint ends the turn with a line naming the setting that fired.

The failure wording, the attempts and the worker-thread import live in `http_common.py`, shared with the
`anthropic` module.
"""

from __future__ import annotations

import functools
import logging
import types
import uuid
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson

from acp_server.errors import ModelError
from acp_server.runtime.media import AUDIO_FORMATS
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
from acp_server.runtime.providers.chat_stream import ChatChunks
from acp_server.runtime.providers.http_common import HttpProvider, parse_arguments

__all__ = ["OpenAIProvider", "wire_messages"]

log = logging.getLogger(__name__)

DEFAULT_BASE_URL = "https://api.openai.com/v1"
# Reasoning text arrives under either name, depending on the server (DeepSeek, vLLM, llama.cpp: the first;
# OpenRouter, Ollama: the second).
REASONING_FIELDS = ("reasoning_content", "reasoning")


class OpenAIProvider(HttpProvider):
    """A model on an OpenAI-compatible endpoint."""

    SDK = "openai"
    CLIENT = "AsyncOpenAI"
    MISSING_SDK = "the openai provider needs the openai package: pip install openai"
    DEFAULT_BASE_URL = DEFAULT_BASE_URL

    @staticmethod
    def sdk_module() -> types.ModuleType:
        import openai  # noqa: PLC0415 (half a second to import: on first use, in a worker thread, http_common.import_sdk)

        return openai

    def open_turn(self, turn: TurnInput) -> ModelTurn:
        return _OpenAITurn(self, turn.system_prompt, turn.accepts)

    def stream_class(self, sdk: types.ModuleType) -> Any:
        return _response_only_stream(sdk.AsyncStream)

    def items(self, stream: Any) -> AsyncIterator[Any]:
        return ChatChunks(stream.response, self.sdk.APIError)  # the body read leaner than by the SDK: chat_stream.py


@functools.cache
def _response_only_stream(base: Any) -> Any:
    """The SDK's `AsyncStream[object]` holding nothing but the response: what `post(..., stream=True)` hands back.
    `ChatChunks` reads the body and the SDK's `close` (the `async with` in `stream_reply`) closes it, so the reader
    the SDK's stream would make at once, a generator referring back to the stream (see the module's docstring), and
    its SSE decoder are never made. One class per SDK module."""

    def init(self: Any, *, cast_to: Any, response: Any, client: Any, options: Any = None) -> None:
        self.response = response  # the SDK's own `__init__` takes the same keywords

    def body(namespace: dict[str, Any]) -> None:
        namespace.update(__init__=init, __module__=__name__, __doc__=_response_only_stream.__doc__)

    # `new_class`, not `type`: the base is a generic alias, and the SDK reads the chunk type (object) back from it.
    return types.new_class("ResponseOnlyStream", (base[object],), exec_body=body)


class _OpenAITurn:
    """One turn on an OpenAI-compatible endpoint: holds nothing but the turn's system prompt and what the model
    takes."""

    __slots__ = ("_accepts", "_provider", "_system_prompt")

    def __init__(self, provider: OpenAIProvider, system_prompt: str, accepts: frozenset[str]) -> None:
        self._provider = provider
        self._system_prompt = system_prompt
        self._accepts = accepts

    async def respond(self, messages: Sequence[Message], tools: Sequence[ToolSpec], emit: Emit) -> Reply:
        provider = self._provider
        body: dict[str, Any] = {
            "model": provider.model,
            "messages": wire_messages(self._system_prompt, messages, self._accepts),
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        if tools:
            # An empty list is an error on some servers: leave the field out when there are no tools.
            body["tools"] = [
                {
                    "type": "function",
                    "function": {"name": t.name, "description": t.description, "parameters": t.parameters},
                }
                for t in tools
            ]
        reading = _Reading()
        await provider.stream_reply("/chat/completions", body, reading.feed, emit)
        if reading.finish is None:
            raise ModelError("the model stream ended before the reply was complete")
        if reading.usage is not None and provider.context_window:
            await emit(UsageReported(used=reading.usage, size=provider.context_window))
        return reading.reply()

    async def settle(self) -> None:
        return None


@dataclass(slots=True)
class _PartialCall:
    id: str | None
    name: str = ""
    fragments: list[str] = field(default_factory=list)


@dataclass(slots=True)
class _Reading:
    """What the chunks of one streamed reply add up to. Chunk fields are checked by type, since they come from
    whatever server the user points at, and a chunk of an unexpected shape is skipped rather than crashing."""

    text: list[str] = field(default_factory=list)
    calls: dict[int, _PartialCall] = field(default_factory=dict)
    finish: str | None = None
    refused: bool = False
    usage: int | None = None

    async def feed(self, chunk: Any, emit: Emit) -> None:
        if type(chunk) is not dict:
            return
        usage = chunk.get("usage")
        if type(usage) is dict:
            self.usage = _count(usage.get("prompt_tokens")) + _count(usage.get("completion_tokens"))
        choices = chunk.get("choices")
        if type(choices) is not list:
            return
        for choice in choices:
            if type(choice) is not dict or (choice.get("index") or 0) != 0:
                continue  # one completion is requested; ignore any other a server sends
            delta = choice.get("delta")
            if type(delta) is dict:
                for name in REASONING_FIELDS:
                    thought = delta.get(name)
                    if thought and type(thought) is str:
                        await emit(ThoughtDelta(thought))
                        break  # servers in transition send both names with the same text: show it once
                text = delta.get("content")
                if text and type(text) is str:
                    self.text.append(text)
                    await emit(TextDelta(text))
                refusal = delta.get("refusal")
                if refusal and type(refusal) is str:
                    self.refused = True
                    self.text.append(refusal)
                    await emit(TextDelta(refusal))  # the refusal is what the user should read
                fragments = delta.get("tool_calls")
                if type(fragments) is list:
                    for fragment in fragments:
                        if type(fragment) is dict:
                            self._add_fragment(fragment)
            finish = choice.get("finish_reason")
            if finish and type(finish) is str:
                self.finish = finish

    def _add_fragment(self, fragment: dict[str, Any]) -> None:
        """Streamed tool calls arrive in pieces: id and name first, then the arguments text in fragments."""
        call_id = fragment.get("id") if type(fragment.get("id")) is str else None
        function = fragment.get("function")
        function = function if type(function) is dict else {}
        name = function.get("name") if type(function.get("name")) is str else None
        index = fragment.get("index")
        if type(index) is not int:
            index = self._guess_index(call_id or None, name or None)
        call = self.calls.get(index)
        if call is None:
            call = self.calls[index] = _PartialCall(call_id or None)
        elif call_id and call.id is None:
            call.id = call_id
        if name and not call.name:
            call.name = name  # the name comes whole in the first fragment; a server repeating it is not appended
        arguments = function.get("arguments")
        if arguments:
            call.fragments.append(arguments if type(arguments) is str else orjson.dumps(arguments).decode())

    def _guess_index(self, call_id: str | None, name: str | None) -> int:
        """For servers that leave out `index`: a new id or a second name starts a call, anything else continues."""
        if not self.calls:
            return 0
        last = max(self.calls)
        current = self.calls[last]
        if call_id is not None:
            known = next((i for i, c in self.calls.items() if c.id == call_id), None)
            if known is not None:
                return known
            return last + 1 if current.id is not None or current.name else last
        return last + 1 if name and current.name else last

    def reply(self) -> Reply:
        calls = tuple(
            ToolCall(call.id or f"call_{uuid.uuid4().hex[:24]}", call.name, parse_arguments("".join(call.fragments)))
            for _, call in sorted(self.calls.items())
        )
        stop = StopReason.END_TURN
        if self.finish == "length":
            stop = StopReason.MAX_TOKENS
        elif self.refused or self.finish == "content_filter":
            stop = StopReason.REFUSAL
        return Reply("".join(self.text), calls, stop)


def _count(value: Any) -> int:
    return value if type(value) is int and value > 0 else 0


def wire_messages(
    system_prompt: str, messages: Sequence[Message], accepts: frozenset[str] = TEXT_ONLY
) -> list[dict[str, Any]]:
    """The conversation in Chat Completions form, the system prompt first; media the model takes as content parts,
    the others as their text."""
    wire: list[dict[str, Any]] = [{"role": "system", "content": system_prompt}] if system_prompt else []
    # The media of the tool messages just written: shown as one user message once the step's tool messages end
    # (nothing may come between an assistant's tool calls and their tool messages).
    returned: list[dict[str, Any]] = []
    for message in messages:
        if returned and message.role != "tool":
            wire.append({"role": "user", "content": returned})
            returned = []
        if message.role == "user":
            wire.append({"role": "user", "content": _user_content(message, accepts)})
        elif message.role == "assistant":
            entry: dict[str, Any] = {"role": "assistant", "content": message.content}
            if message.tool_calls:
                entry["content"] = message.content or None
                entry["tool_calls"] = [
                    {
                        "id": call.id,
                        "type": "function",
                        "function": {"name": call.name, "arguments": _arguments_text(call)},
                    }
                    for call in message.tool_calls
                ]
            wire.append(entry)
        else:
            content = message.content
            shown = [m for m in message.media if m.kind in accepts]
            unsent = [m.describe() for m in message.media if m.kind not in accepts]
            if unsent:
                content = "\n".join([content, *unsent])
            if shown:
                content += f"\n[{len(shown)} attachment(s) follow in the next user message]"
                returned.append({"type": "text", "text": f"The tool call {message.tool_call_id} returned:"})
                returned.extend(_part(m) for m in shown)
            wire.append({"role": "tool", "tool_call_id": message.tool_call_id or "", "content": content})
    if returned:
        wire.append({"role": "user", "content": returned})
    return wire


def _user_content(message: Message, accepts: frozenset[str]) -> str | list[dict[str, Any]]:
    if not message.media:
        return message.content
    text = "\n".join([message.content, *(m.describe() for m in message.media if m.kind not in accepts)])
    shown = [_part(m) for m in message.media if m.kind in accepts]
    if not shown:
        return text
    return [{"type": "text", "text": text}, *shown] if text else shown


def _part(media: Media) -> dict[str, Any]:
    if media.kind == "audio":
        # Chat Completions takes wav and mp3 (`input_audio.format`); every sound that reaches a model passed
        # `validate_media`, which admits only those.
        audio_format = AUDIO_FORMATS.get(media.mime_type, "wav")
        return {"type": "input_audio", "input_audio": {"data": media.data, "format": audio_format}}
    return {"type": "image_url", "image_url": {"url": f"data:{media.mime_type};base64,{media.data}"}}


def _arguments_text(call: ToolCall) -> str:
    # Invalid arguments go back as "{}": servers that render history through a template (llama.cpp) parse them,
    # and one bad call must not make every later request of the session fail. The tool's error result says what
    # was wrong.
    if INVALID_ARGUMENTS in call.arguments:
        return "{}"
    return orjson.dumps(call.arguments).decode()
