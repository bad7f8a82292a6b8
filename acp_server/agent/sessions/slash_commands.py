"""The slash commands a client offers through `available_commands_update`: `/clear`, `/compact`, `/title NAME`.

ACP runs them as ordinary prompt text, so each is a turn like any other: admitted, cancellable, answered once. They
change the session rather than asking the model to act: `/clear` forgets the conversation, `/compact` has the model
summarise it and continues from the summary, `/title` names the session. Titles made after the first turn also live
here (`first_title`), generated in the background so they never delay a response.
"""

from __future__ import annotations

from collections.abc import Callable

from acp_server.agent.sessions.runs import RunContext
from acp_server.runtime.compaction import compact_history
from acp_server.runtime.model import (
    Emit,
    Message,
    ModelTurn,
    Provider,
    ReplyStarted,
    StopReason,
    TextDelta,
    TurnEvent,
    TurnInput,
)

__all__ = ["first_title", "prompt_title", "run_slash_command"]

TITLE_INSTRUCTIONS = "Reply with a title of three to six words for a conversation that starts with the user's message."
MAX_TITLE_CHARS = 80
TITLE_WORDS = 6


async def run_slash_command(
    name: str,
    argument: str,
    *,
    run: RunContext,
    model: Callable[[str], ModelTurn],
    emit: Emit,
    announce_title: Callable[[str], None],
) -> StopReason:
    """Play one command as the turn; `model(system_prompt)` opens a model turn when the command needs one."""
    session = run.session
    await emit(ReplyStarted(0))
    if name == "clear":
        run.messages, run.turn_start = [], 0
        await emit(TextDelta("Context cleared: the conversation starts afresh in this session."))
    elif name == "title":
        if not argument:
            await emit(TextDelta("Usage: /title NAME"))
        else:
            session.title = argument[:MAX_TITLE_CHARS]
            announce_title(session.title)
            await emit(TextDelta(f"Title set: {session.title}"))
    elif name == "compact":
        before = len(session.history)
        if not session.history:
            await emit(TextDelta("Nothing to compact yet."))
        else:
            run.messages = await compact_history(model(""), session.history, emit)
            run.turn_start = len(run.messages)
            await emit(TextDelta(f"\n\n[Compacted {before} messages into the summary above.]"))
    return StopReason.END_TURN


def prompt_title(text: str) -> str | None:
    """A title made of a prompt's first words: one line, trimmed, at most MAX_TITLE_CHARS (cut at a space, with an
    ellipsis, when a word is long); None for a prompt without words (an image, a file only)."""
    words = text.split()
    if not words:
        return None
    title = " ".join(words[:TITLE_WORDS])
    if len(title) > MAX_TITLE_CHARS:
        cut = title[: MAX_TITLE_CHARS - 1]
        space = cut.rfind(" ")
        title = (cut[:space] if space >= MAX_TITLE_CHARS // 2 else cut).rstrip() + "…"
    return title


async def first_title(provider: Provider, session_id: str, first_prompt: str) -> str:
    """A short title for a session from its first prompt: the model's, or the first words for offline models."""
    words = prompt_title(first_prompt)
    if getattr(provider, "offline", False) or not words:
        return words or "Untitled"
    turn = provider.open_turn(
        TurnInput(
            session_id=session_id, run_id=0, turn_index=0, meta={}, probe=_no_probe, system_prompt=TITLE_INSTRUCTIONS
        )
    )
    reply = await turn.respond([Message("user", first_prompt[:2000])], (), _ignore)
    title = " ".join(reply.text.strip().strip("\"'").split())
    return (title or words)[:MAX_TITLE_CHARS]


async def _ignore(event: TurnEvent) -> None:
    return None


def _no_probe(event: str, **fields: object) -> None:
    return None
