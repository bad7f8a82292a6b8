"""What a turn's log in the session store keeps of each `session/update` the client is sent: `log_update`.

The per-chunk hot path, so kept light: a plain text chunk goes straight to the log's row (`TurnLog.append_text`), no
record built; anything else is read as a record by protocol/replay.py, loaded with the store, so nothing of the store
is imported at start-up.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from acp_server.store import TurnLog

__all__ = ["log_update"]

log = logging.getLogger(__name__)

_TEXT_CHUNKS = frozenset({"agent_message_chunk", "agent_thought_chunk"})
# Live only (ACP: notices are not session history); a compaction's summary is in the history the model goes on from.
_LIVE = frozenset({"notice", "compaction_update", "compaction_summary_chunk"})


def log_update(turn_log: TurnLog | None, update: Mapping[str, Any]) -> None:
    """Record an update the client was just sent in its turn's log (nothing without a store)."""
    if turn_log is None:
        return
    kind = update["sessionUpdate"]
    if kind in _TEXT_CHUNKS and len(update) == 3:
        # The hot path, one per streamed chunk: a plain text chunk (its content, messageId and nothing else) goes
        # straight to its row, no record built, as few checks as keep it exact.
        content = update["content"]
        if type(content) is dict and len(content) == 2 and content.get("type") == "text":
            turn_log.append_text(update["messageId"], content["text"], kind == "agent_thought_chunk")
            return
    from acp_server.protocol.replay import entry_of  # noqa: PLC0415 (the store and sqlite3 load only when persistence is on)

    entry = entry_of(update)
    if entry is not None:
        turn_log.append(entry)
    elif kind not in _LIVE:
        log.warning("an update the session store cannot keep was not stored: %.200r", update)
