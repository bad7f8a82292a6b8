"""Context that does not overflow: summarise the conversation when it nears the model's window, or when the provider
says it no longer fits, and carry on from the summary.

`/compact` uses `compact_history` directly; a turn uses a `ContextCompactor`, which watches the usage the provider
reports and compacts the history from before the current turn (the turn's own messages stay as they are), telling
the user it happened. A provider error that says the context is too long triggers one compaction and one retry.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Sequence

from acp_server.errors import ModelError
from acp_server.runtime.model import Compaction, Emit, Message, ModelTurn, Notice, TurnEvent, UsageReported

__all__ = ["SUMMARY_REQUEST", "ContextCompactor", "compact_history", "is_context_overflow"]

SUMMARY_REQUEST = (
    "Summarise our conversation so far for yourself, so that we can continue from the summary alone: the goal, "
    "decisions made, files and commands involved, what is done and what is left. Be complete but brief."
)
# Compact before the next model call once the context is this full.
THRESHOLD = 0.85
OVERFLOW_WORDS = (
    "context length",
    "context_length",
    "maximum context",
    "context window",
    "too many tokens",
    "prompt is too long",
)
# What the client is told of a compaction that failed of anything but a provider's (redacted) `ModelError`: an
# unforeseen exception's text may hold paths, keys or internals, so it goes to the server log only.
GENERIC_FAILURE = "compaction failed; see the server log"

log = logging.getLogger(__name__)


async def compact_history(model: ModelTurn, history: Sequence[Message], emit: Emit | None = None) -> list[Message]:
    """Ask the model to summarise `history`; the new history is that summary. Streams it through `emit`, if given,
    so the user sees what the conversation was reduced to."""
    reply = await model.respond([*history, Message("user", SUMMARY_REQUEST)], (), emit or _ignore)
    return summary_history(reply.text)


def summary_history(summary: str) -> list[Message]:
    return [
        Message("user", f"Here is a summary of our conversation so far:\n\n{summary}"),
        Message("assistant", "Understood. I will continue from this summary."),
    ]


def is_context_overflow(message: str) -> bool:
    lowered = message.lower()
    return any(words in lowered for words in OVERFLOW_WORDS)


class ContextCompactor:
    """One turn's guard against a full context. `keep_from` is where the turn's own messages start."""

    def __init__(
        self, summariser: Callable[[], ModelTurn], emit: Emit, keep_from: int, usage: UsageReported | None = None
    ) -> None:
        self._summariser = summariser
        self._emit = emit
        self._keep_from = keep_from
        # The session's last report, until this turn's first model call reports afresh.
        self._usage = usage
        self._retried = False

    async def watch(self, event: TurnEvent) -> None:
        """The turn's emit, passed through: it remembers the latest usage report."""
        if isinstance(event, UsageReported):
            self._usage = event
        await self._emit(event)

    async def before_call(self, messages: list[Message]) -> None:
        usage = self._usage
        if usage is not None and usage.size > 0 and usage.used >= THRESHOLD * usage.size:
            await self.compact(messages, f"the context was {usage.used * 100 // usage.size}% full")

    async def on_overflow(self, messages: list[Message], error: Exception) -> bool:
        """True if the history was compacted, so the failed model call may be tried once more."""
        if self._retried or not is_context_overflow(str(error)):
            return False
        self._retried = True
        return await self.compact(messages, "the model said the conversation no longer fits its context")

    async def compact(self, messages: list[Message], why: str) -> bool:
        earlier, current = messages[: self._keep_from], messages[self._keep_from :]
        if len(earlier) < 2:
            return False  # nothing before this turn to summarise
        compaction_id = f"cmp_{uuid.uuid4().hex}"
        await self._emit(Compaction(compaction_id, "in_progress"))
        try:
            reply = await self._summariser().respond([*earlier, Message("user", SUMMARY_REQUEST)], (), _ignore)
        except Exception as exc:  # a cancellation is not an Exception: it passes untouched
            if isinstance(exc, ModelError):
                error = str(exc)[:300] or GENERIC_FAILURE
            else:
                log.error("compaction %s failed", compaction_id, exc_info=True)
                error = GENERIC_FAILURE
            await self._emit(Compaction(compaction_id, "failed", error=error))
            raise
        summary = summary_history(reply.text)
        messages[:] = [*summary, *current]
        self._keep_from = len(summary)
        self._usage = None
        detail = f"{why}; {len(earlier)} earlier messages were summarised."
        told = Notice(f"[Context compacted: {detail}]\n\n", title="Context compacted", severity="info")
        await self._emit(Compaction(compaction_id, "completed", summary=reply.text, notice=told))
        return True


async def _ignore(event: TurnEvent) -> None:
    return None
