"""The `echo` model: offline and free, it streams the user's own text back in chunks.

It is the default so that `acp-server` works out of the box with no key, and it exercises the same streaming path
as a real provider.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import anyio

from acp_server.runtime.model import Emit, Message, ModelTurn, Reply, TextDelta, ToolSpec, TurnInput

__all__ = ["EchoProvider"]

MAX_ECHO_CHARS = 10_000
CHUNK_CHARS = 48


class EchoProvider:
    # No model to ask: titles are the first words of the first prompt.
    offline = True

    def open_turn(self, turn: TurnInput) -> ModelTurn:
        return _EchoTurn()

    def check_turn(self, meta: dict[str, Any], turn_index: int) -> str | None:
        return None


class _EchoTurn:
    async def respond(self, messages: Sequence[Message], tools: Sequence[ToolSpec], emit: Emit) -> Reply:
        text = next((m.content for m in reversed(messages) if m.role == "user"), "")[:MAX_ECHO_CHARS]
        for chunk in _chunks(text):
            await emit(TextDelta(chunk))
            await anyio.lowlevel.checkpoint()  # a long echo stays cancellable, like a network stream
        return Reply(text)

    async def settle(self) -> None:
        return None


def _chunks(text: str) -> list[str]:
    """Split at spaces into pieces of about CHUNK_CHARS, the way a model streams tokens."""
    pieces: list[str] = []
    start = 0
    while start < len(text):
        end = min(start + CHUNK_CHARS, len(text))
        if end < len(text):
            space = text.rfind(" ", start + 1, end)
            end = space + 1 if space > start else end
        pieces.append(text[start:end])
        start = end
    return pieces
