"""What the session store keeps of a turn, built from the core's events: `StoreLog`, one per turn's sink, and
`record_terminal_end`. The one place the store's records are made from what a turn does (the prompt's own records are
made by the store, store.py `begin_turn`), the same for either protocol version: the v1 and v2 renderers
(protocol/v1/updates.py, protocol/v2/updates.py) each hand it every event they sent, never their wire message.

The records are what the client was shown, as the store's own words (store/turn_records.py), so a session stored
from one version replays on the other. One difference is the connection's, not the wire's: a command shown as an
agent-owned display terminal (v2, `display_terminals`) is kept as records of its own (`ToolCallTerminal`, and its end,
`TerminalEnded`), and the tool call's own changes keep the command's text, so a replay on a connection without such
terminals never names one its client never had; an editor terminal (v1) is kept as the call's content.

The per-chunk hot path is not here: a reply's or thought's text chunk goes from the sink straight to its row
(`TurnLog.append_text`), no record built. The store (and sqlite3) load only when persistence is on, so its record
types are imported when the first record is made, never at start-up.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from acp_server.agent.sessions.runs import RunContext
from acp_server.runtime.model import (
    PlanUpdated,
    TerminalOutput,
    TextOutput,
    ToolCallFinished,
    ToolCallStarted,
    ToolCallUpdated,
    ToolContent,
    ToolContentAppended,
    TurnEvent,
    UsageReported,
)

if TYPE_CHECKING:
    from acp_server.store import TurnLog

__all__ = ["StoreLog", "record_terminal_end"]


class StoreLog:
    """One turn's events as the store's records, appended to the turn's log (nothing without a store).

    `record` takes each event the client was sent (after it was sent: what the fence dropped was never shown);
    `text` a text shown as a message (a notice on a v1 client that shows no notices). Text deltas, reply starts,
    notices and compactions make no record here: the sink writes the text chunks' rows itself, and notices and
    compactions are live only (ACP: notices are not session history; a compaction's summary is in the model history)."""

    __slots__ = ("_display_terminals", "_run", "_shown")

    def __init__(self, run: RunContext, *, display_terminals: bool = False) -> None:
        self._run = run
        self._display_terminals = display_terminals
        # What each running call that set or appended content shows so far: the store keeps a call's whole content
        # with each change (its records have no append). Per turn; a call's entry goes when it finishes.
        self._shown: dict[str, list[ToolContent]] = {}

    def text(self, message_id: str, text: str, *, thought: bool = False) -> None:
        turn_log = self._run.turn_log
        if turn_log is not None:
            turn_log.append_text(message_id, text, thought)

    def record(self, event: TurnEvent) -> None:
        turn_log = self._run.turn_log
        if turn_log is None:
            return
        # The store and sqlite3 load only when persistence is on (a log exists: they are loaded).
        from acp_server.store.turn_records import (  # noqa: PLC0415 (the store loads only when persistence is on)
            ContextUsage,
            PlanSet,
            ToolCallChanged,
            ToolCallOpened,
        )

        if isinstance(event, ToolCallStarted):
            locations = tuple(event.locations) if event.locations else None
            call = event.call
            turn_log.append(ToolCallOpened(call.id, event.title, event.kind, "pending", call.arguments, locations))
        elif isinstance(event, ToolCallUpdated):
            content = event.content
            if content is not None:
                self._shown[event.call_id] = list(content)  # replaces whatever was appended before
                if self._display_terminals and _names_terminal(content):
                    self._terminals(turn_log, event.call_id, content)
                    content = None  # the call's changes keep no display terminal
                    if event.status is None and event.locations is None and event.meta is None:
                        return  # nothing else changed: the terminal's record says it all
            turn_log.append(
                ToolCallChanged(
                    event.call_id,
                    event.status,
                    None if content is None else tuple(content),
                    None if event.locations is None else tuple(event.locations),
                    None,
                    event.meta,
                )
            )
        elif isinstance(event, ToolContentAppended):
            items = self._shown.setdefault(event.call_id, [])
            items.append(event.item)
            # Appended after a display terminal the call showed (kept apart): never named by the call's changes.
            kept = [i for i in items if not isinstance(i, TerminalOutput)] if self._display_terminals else items
            turn_log.append(ToolCallChanged(event.call_id, None, tuple(kept)))
        elif isinstance(event, ToolCallFinished):
            self._shown.pop(event.call_id, None)
            shown: Sequence[ToolContent] = event.content if event.content is not None else (TextOutput(event.output),)
            if self._display_terminals and _names_terminal(event.content):
                self._terminals(turn_log, event.call_id, shown)  # right before the change shown with its terminal
                shown = (TextOutput(event.output),)
            status = "completed" if event.ok else "failed"  # v2's `cancelled` is its own rendering of `failed`
            turn_log.append(ToolCallChanged(event.call_id, status, tuple(shown), None, event.raw_output))
        elif isinstance(event, PlanUpdated):
            turn_log.append(PlanSet(tuple(event.entries)))
        elif isinstance(event, UsageReported):
            turn_log.append(ContextUsage(event.used, event.size))

    def _terminals(self, turn_log: TurnLog, call_id: str, content: Sequence[ToolContent]) -> None:
        """Which display terminals the call's content named. A subagent's terminal is shown in its parent's session,
        not the one this log belongs to (protocol/v2/terminals.py): kept as the call's text only."""
        if self._run.parent_session_id is not None:
            return
        from acp_server.store.turn_records import ToolCallTerminal  # noqa: PLC0415 (the store loads only when persistence is on)

        for item in content:
            if isinstance(item, TerminalOutput):
                turn_log.append(ToolCallTerminal(call_id, item.terminal_id))


def _names_terminal(content: Sequence[ToolContent] | None) -> bool:
    return content is not None and any(isinstance(item, TerminalOutput) for item in content)


def record_terminal_end(  # noqa: PLR0917 (the terminal's end, field by field, as the record keeps it)
    run: RunContext,
    terminal_id: str,
    command: str,
    cwd: Path,
    output: bytes | bytearray,
    exit_code: int | None,
    signal: str | None,
) -> None:
    """A display terminal's end, as its client was sent it (command, cwd, the tail of its output, how it exited), so a
    replay shows it as one upsert. A subagent's terminal is shown in its parent's session, which this log is not."""
    if run.turn_log is None or run.parent_session_id is not None:
        return
    from acp_server.store.turn_records import TerminalEnded  # noqa: PLC0415 (the store loads only when persistence is on)

    run.turn_log.append(TerminalEnded(terminal_id, command, str(cwd), bytes(output), exit_code, signal))
