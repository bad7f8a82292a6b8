"""Anthropic Messages replies for the loopback fake server, in the SSE shapes api.anthropic.com streams.

The HTTP side (queue, recording, hang and drop, disconnect detection) is `tests.support.fake_openai.FakeModelServer`;
this module only builds the event sequences of `POST /v1/messages` with `stream: true`: `message_start`, content blocks
(text, thinking, tool_use with `input_json_delta` fragments), `message_delta` with the stop reason and usage,
`message_stop`, plus `ping` and `error` events and Anthropic-style error bodies.
"""

from __future__ import annotations

import base64
from collections.abc import Sequence
from typing import Any

from tests.support.fake_openai import Ending, FakeModelServer, Received, ServerReply

__all__ = ["FakeAnthropic", "block", "error", "images_sent", "message_reply", "stream_error_reply", "text_reply"]

MODEL = "claude-fake"

Event = tuple[str | None, Any]


class FakeAnthropic(FakeModelServer):
    """`POST /v1/messages`: point the Anthropic SDK at `base_url` (the SDK adds `/v1/messages` itself). `GET
    /v1/models` answers what `serve_models` set, in the Models API's shape."""

    api_prefix = ""

    @staticmethod
    def models_body(ids: Sequence[str]) -> dict[str, Any]:
        data = [
            {"type": "model", "id": name, "display_name": name.title(), "created_at": "2025-01-01T00:00:00Z"}
            for name in ids
        ]
        return {
            "data": data,
            "has_more": False,
            "first_id": ids[0] if ids else None,
            "last_id": ids[-1] if ids else None,
        }


def _event(name: str, **data: Any) -> Event:
    return (name, {"type": name, **data})


def block(kind: str, *pieces: str, call_id: str = "", name: str = "") -> list[Event]:
    """One content block's events without its index (message_reply numbers them): "text", "thinking" or
    "tool_use" (pieces are then the `input_json_delta` fragments)."""
    if kind == "text":
        start: dict[str, Any] = {"type": "text", "text": ""}
        deltas = [{"type": "text_delta", "text": p} for p in pieces]
    elif kind == "thinking":
        start = {"type": "thinking", "thinking": ""}
        deltas = [{"type": "thinking_delta", "thinking": p} for p in pieces]
        deltas.append({"type": "signature_delta", "signature": "c2lnbmF0dXJl"})
    elif kind == "tool_use":
        start = {"type": "tool_use", "id": call_id, "name": name, "input": {}}
        deltas = [{"type": "input_json_delta", "partial_json": p} for p in ("", *pieces)]
    else:
        raise ValueError(kind)
    return [
        _event("content_block_start", content_block=start),
        *(_event("content_block_delta", delta=d) for d in deltas),
        _event("content_block_stop"),
    ]


def message_reply(
    *blocks: list[Event],
    stop_reason: str = "end_turn",
    usage: tuple[int, int] = (10, 5),
    ending: Ending = "done",
    cached_input: int = 0,
    complete: bool = True,
) -> ServerReply:
    """A whole streamed message. Without `complete`, or with ending "hang" or "drop", the closing events
    (`message_delta`, `message_stop`) are not sent."""
    input_tokens, output_tokens = usage
    start_usage = {
        "input_tokens": input_tokens,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": cached_input,
        "output_tokens": 1,
    }
    message: dict[str, Any] = {
        "id": "msg_fake",
        "type": "message",
        "role": "assistant",
        "content": [],
        "model": MODEL,
        "stop_reason": None,
        "stop_sequence": None,
        "usage": start_usage,
    }
    events: list[Event] = [_event("message_start", message=message), ("ping", {"type": "ping"})]
    for index, events_of_block in enumerate(blocks):
        for name, data in events_of_block:
            events.append((name, {**data, "index": index}))
    if ending == "done" and complete:
        events.append(
            _event(
                "message_delta",
                delta={"stop_reason": stop_reason, "stop_sequence": None},
                usage={"output_tokens": output_tokens},
            )
        )
        events.append(_event("message_stop"))
    return ServerReply(events=tuple(events), ending=ending, done_marker=False)


def text_reply(*pieces: str, stop_reason: str = "end_turn", ending: Ending = "done") -> ServerReply:
    return message_reply(block("text", *pieces), stop_reason=stop_reason, ending=ending)


def stream_error_reply(pieces: Sequence[str], message: str) -> ServerReply:
    """A stream that starts fine and then carries an `error` event, as an overloaded backend sends."""
    events = list(message_reply(block("text", *pieces), ending="hang").events)
    events.append(("error", {"type": "error", "error": {"type": "overloaded_error", "message": message}}))
    return ServerReply(events=tuple(events), done_marker=False)


def error(
    status: int, message: str, *, kind: str = "invalid_request_error", retry_after_ms: int | None = None
) -> ServerReply:
    """An error answer with an Anthropic-style body."""
    headers = () if retry_after_ms is None else (("retry-after-ms", str(retry_after_ms)),)
    body = {"type": "error", "error": {"type": kind, "message": message}, "request_id": "req_fake"}
    return ServerReply(status=status, body=body, headers=headers)


def images_sent(received: Received) -> list[tuple[str, str, bytes]]:
    """Every `image` block a Messages request carried, in order, as (where: "user" or "tool_result ID", media type,
    decoded bytes), each checked to have the shape the API takes (a base64 source of a type it reads)."""
    found = []

    def image(where: str, item: dict[str, Any]) -> None:
        source = item["source"]
        assert source["type"] == "base64", source["type"]
        assert source["media_type"] in ("image/png", "image/jpeg", "image/gif", "image/webp"), source["media_type"]
        found.append((where, source["media_type"], base64.b64decode(source["data"], validate=True)))

    for message in received.body.get("messages", []):
        content = message.get("content")
        for item in content if isinstance(content, list) else ():
            if item["type"] == "image":
                assert message["role"] == "user", "only user turns carry images"
                image("user", item)
            elif item["type"] == "tool_result" and isinstance(item.get("content"), list):
                for inner in item["content"]:
                    if inner["type"] == "image":
                        image(f"tool_result {item['tool_use_id']}", inner)
                    else:
                        assert inner["type"] == "text", inner
    return found
