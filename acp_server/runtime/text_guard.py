"""Text from outside made safe before anything of the server holds it: valid Unicode, and no secret the server holds.

Why it exists: text reaches a turn from places the server does not control (a model endpoint's deltas, a tool's
output), and two kinds of it do harm further on.

- Not valid Unicode. A JSON decoder accepts `"\\ud83d"` (half of an emoji, as some proxies split one across two
  chunks) and hands Python a lone surrogate, which orjson then refuses to encode: the update is dropped, and the
  history, sent back to the endpoint on the next prompt, fails every later prompt of the session. `sanitize_text`
  joins a surrogate pair and replaces any other surrogate with U+FFFD; `SurrogateJoiner` does it for a stream,
  holding back a trailing high surrogate until the next piece says whether it completes a pair.
- A secret the server holds (its provider keys, the keys and MCP secrets of config.toml: `Config.held_secrets`).
  A model that prints one, or a tool whose output contains one, must not put it on the wire, in the store, in the
  log or in the model's context. `Redactor` replaces each exact value with `[redacted]`; `StreamRedactor` does it
  for a stream, holding back at most (longest secret - 1) characters at a chunk boundary, so a value split across
  two chunks is still caught, and flushing the rest at the end of the stream. Values shorter than
  `MIN_REDACTED_CHARS` are not searched for: they would mangle ordinary text, and no real key is that short.

Streaming state lives on objects made per stream (one model message, one tool call), never on a long-lived one:
`GuardedProvider` is as immutable as the provider it wraps, and its `GuardedTurn` makes fresh joiners and
redactors for every model call.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from functools import lru_cache
from typing import Any

from acp_server.runtime.model import (
    DiffOutput,
    Emit,
    Message,
    ModelTurn,
    Provider,
    Reply,
    TextDelta,
    TextOutput,
    ThoughtDelta,
    ToolCall,
    ToolContent,
    ToolSpec,
    TurnEvent,
    TurnInput,
)
from acp_server.valid_unicode import sanitize_json, sanitize_text

__all__ = [
    "MIN_REDACTED_CHARS",
    "NO_SECRETS",
    "REDACTED",
    "GuardedProvider",
    "Redactor",
    "StreamRedactor",
    "SurrogateJoiner",
    "guard_tool_content",
    "redactor_for",
    "sanitize_json",
    "sanitize_text",
]

REDACTED = "[redacted]"
# A held secret shorter than this is not redacted (e.g. a test key "abc" would turn every "abc" of a reply into
# [redacted]); real provider keys are far longer.
MIN_REDACTED_CHARS = 8

_HIGH = ("\ud800", "\udbff")


class SurrogateJoiner:
    """Sanitizes a stream of pieces: a high surrogate at the end of a piece waits for the next one."""

    __slots__ = ("_pending",)

    def __init__(self) -> None:
        self._pending = ""

    @property
    def holding(self) -> bool:
        """Whether a high surrogate waits for the next piece."""
        return bool(self._pending)

    def feed(self, piece: str) -> str:
        piece = self._pending + piece
        self._pending = ""
        if piece and _HIGH[0] <= piece[-1] <= _HIGH[1]:
            piece, self._pending = piece[:-1], piece[-1]
        return sanitize_text(piece)

    def flush(self) -> str:
        rest, self._pending = self._pending, ""
        return sanitize_text(rest)


@dataclass(frozen=True, slots=True)
class Redactor:
    """The exact secret values to remove, longest first. Immutable: one per set of secrets, shared freely."""

    secrets: tuple[str, ...] = ()
    pattern: re.Pattern[str] | None = None
    # The characters a secret starts with: where none is, a stream holds nothing back.
    firsts: frozenset[str] = frozenset()

    @property
    def longest(self) -> int:
        return len(self.secrets[0]) if self.secrets else 0

    def redact(self, text: str) -> str:
        if self.pattern is None or not text:
            return text
        return self.pattern.sub(REDACTED, text)

    def stream(self) -> StreamRedactor:
        return StreamRedactor(self)


# Redacts nothing: for embedders and tests that hold no secrets.
NO_SECRETS = Redactor()


@lru_cache(maxsize=8)
def redactor_for(secrets: tuple[str, ...]) -> Redactor:
    """The redactor for these values; the ones shorter than MIN_REDACTED_CHARS are left out."""
    kept = tuple(sorted({s for s in secrets if len(s) >= MIN_REDACTED_CHARS}, key=len, reverse=True))
    if not kept:
        return Redactor()
    # Longest first: where two secrets start at the same place, the whole longer one goes.
    return Redactor(kept, re.compile("|".join(re.escape(s) for s in kept)), frozenset(s[0] for s in kept))


class StreamRedactor:
    """Redacts one stream. What it returns, joined, is exactly `Redactor.redact` of the whole stream: a position
    where a secret could start is decided only once every character a secret there could need has arrived, so at
    most (longest secret - 1) characters are held back, and only from the first place where the text so far could
    be the start of a secret (ordinary text streams through chunk by chunk)."""

    __slots__ = ("_buffer", "_redactor")

    def __init__(self, redactor: Redactor) -> None:
        self._redactor = redactor
        self._buffer = ""

    def feed(self, piece: str) -> str:
        pattern = self._redactor.pattern
        if pattern is None:
            return piece
        buffer = self._buffer + piece
        # Every secret starting before `safe` fits wholly in the buffer, so the match found there is final.
        safe = len(buffer) - (self._redactor.longest - 1)
        out: list[str] = []
        done = 0
        for match in pattern.finditer(buffer):
            if match.start() >= safe:
                break
            out.append(buffer[done : match.start()])
            out.append(REDACTED)
            done = match.end()
        keep_from = self._first_possible_start(buffer, max(done, safe))
        out.append(buffer[done:keep_from])
        self._buffer = buffer[keep_from:]
        return "".join(out)

    def _first_possible_start(self, buffer: str, start: int) -> int:
        """The first position from `start` on where a secret may begin, given more text; the end if none."""
        firsts, secrets = self._redactor.firsts, self._redactor.secrets
        for position in range(start, len(buffer)):
            if buffer[position] in firsts:
                tail = buffer[position:]
                if any(secret.startswith(tail) or tail.startswith(secret) for secret in secrets):
                    return position
        return len(buffer)

    def flush(self) -> str:
        rest, self._buffer = self._buffer, ""
        return self._redactor.redact(rest)


class _TextStream:
    """One streamed text (a model message's text, or its thoughts): sanitized, then redacted."""

    __slots__ = ("_joiner", "_redacting", "_redactor")

    def __init__(self, redactor: Redactor) -> None:
        self._joiner = SurrogateJoiner()
        self._redactor = redactor.stream()
        self._redacting = redactor.pattern is not None

    def passes_as_is(self, piece: str) -> bool:
        """Whether `piece` would come out unchanged and nothing is held: no secret to look for, nothing waiting, and
        ASCII (a C-speed check), so it can be passed on without the work of `feed`. The common case, per chunk."""
        return self._redacting is False and not self._joiner.holding and piece.isascii()

    def feed(self, piece: str) -> str:
        return self._redactor.feed(self._joiner.feed(piece))

    def flush(self) -> str:
        return self._redactor.feed(self._joiner.flush()) + self._redactor.flush()


@dataclass(frozen=True, slots=True)
class GuardedProvider:
    """A provider whose every model call comes out as valid Unicode with the held secrets redacted."""

    inner: Provider
    redactor: Redactor

    @property
    def offline(self) -> bool:
        """Whether the inner model is offline (echo, scripted): a session title is then not asked of it."""
        return bool(getattr(self.inner, "offline", False))

    def open_turn(self, turn: TurnInput) -> ModelTurn:
        return GuardedTurn(self.inner.open_turn(turn), self.redactor)

    def check_turn(self, meta: dict[str, Any], turn_index: int) -> str | None:
        return self.inner.check_turn(meta, turn_index)

    async def warm(self) -> None:
        """The inner provider's warm-up, if it has one (agent/warmup.py)."""
        warm = getattr(self.inner, "warm", None)
        if warm is not None:
            await warm()

    async def aclose(self) -> None:
        """Close the inner provider's client, if it has one (after a logout dropped it: agent/providers.py)."""
        close = getattr(self.inner, "aclose", None)
        if close is not None:
            await close()


class GuardedTurn:
    """A provider's turn, guarded. Holds only the inner turn and the (immutable) redactor; each `respond` makes the
    streams of its own model message."""

    __slots__ = ("_inner", "_redactor")

    def __init__(self, inner: ModelTurn, redactor: Redactor) -> None:
        self._inner = inner
        self._redactor = redactor

    async def respond(self, messages: Sequence[Message], tools: Sequence[ToolSpec], emit: Emit) -> Reply:
        text, thought = _TextStream(self._redactor), _TextStream(self._redactor)

        async def guarded(event: TurnEvent) -> None:
            kind = type(event)
            if kind is TextDelta or kind is ThoughtDelta:
                assert isinstance(event, TextDelta | ThoughtDelta)
                stream = text if kind is TextDelta else thought
                if stream.passes_as_is(event.text):
                    await emit(event)  # no copy: a frozen event costs more to build than the check
                    return
                piece = stream.feed(event.text)
                if piece:
                    await emit(event if piece == event.text else kind(piece))
            else:
                await emit(event)

        reply = await self._inner.respond(messages, tools, guarded)
        # The held-back tails, before the reply ends (and before its tool calls start).
        for stream, kind in ((thought, ThoughtDelta), (text, TextDelta)):
            rest = stream.flush()
            if rest:
                await emit(kind(rest))
        return replace(
            reply,
            text=self._redactor.redact(sanitize_text(reply.text)),
            tool_calls=tuple(_guard_call(call) for call in reply.tool_calls),
        )

    async def settle(self) -> None:
        await self._inner.settle()


def _guard_call(call: ToolCall) -> ToolCall:
    return ToolCall(sanitize_text(call.id), sanitize_text(call.name), sanitize_json(call.arguments))


def guard_tool_content(content: Iterable[ToolContent], redactor: Redactor) -> tuple[ToolContent, ...]:
    """What a tool shows the client, as valid Unicode without the held secrets."""

    def clean(text: str) -> str:
        return redactor.redact(sanitize_text(text))

    guarded: list[ToolContent] = []
    for item in content:
        if isinstance(item, TextOutput):
            guarded.append(TextOutput(clean(item.text)))
        elif isinstance(item, DiffOutput):
            old = None if item.old_text is None else clean(item.old_text)
            guarded.append(DiffOutput(sanitize_text(item.path), old, clean(item.new_text)))
        else:
            guarded.append(item)
    return tuple(guarded)
