"""The plain values the session store hands out and takes in (layer 2: plain rows, no schema objects).

Kept apart from the SQL so a reader of `session/load` or `session/list` sees what a stored session is without the
machinery that stores it: the frozen records, how a turn can end, the model history as JSON (`runtime.model.Message`
encoded by `message_to_json`), and the opaque `session/list` cursor. The store's error, `StoreUnavailable`, is in
the package's one exception tree (acp_server/errors).
What a turn showed the client is a list of turn records (turn_records.py).
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Literal

import orjson

from acp_server.runtime.model import Media, Message, ToolCall
from acp_server.store.turn_records import TurnEntry

__all__ = [
    "ARCHIVE_FILTERS",
    "EMPTY_SESSION_GRACE_S",
    "OWNER_KEY",
    "PRUNE_CANDIDATES",
    "Lease",
    "LeaseHeld",
    "LoadedSession",
    "Pruned",
    "Retention",
    "SessionOverview",
    "SessionPage",
    "SessionRecord",
    "SessionSummary",
    "TurnRecord",
    "TurnStatus",
    "decode_cursor",
    "decode_messages",
    "encode_cursor",
    "encode_messages",
    "message_from_json",
    "message_to_json",
    "owner_in",
    "prune_choice",
    "utc_now",
]

TurnStatus = Literal["running", "completed", "cancelled", "interrupted", "failed"]

_ROLES: Mapping[str, Literal["user", "assistant", "tool"]] = {"user": "user", "assistant": "assistant", "tool": "tool"}


# --- records handed to the caller ---


@dataclass(frozen=True, slots=True)
class SessionRecord:
    session_id: str
    cwd: str
    additional_directories: tuple[str, ...]
    mcp_servers: tuple[dict[str, Any], ...]
    created_at: str  # ISO 8601, UTC
    updated_at: str
    title: str | None
    mode: str
    config: dict[str, Any]
    parent_session_id: str | None
    forked_from: str | None
    archived: bool = False  # hidden from the default `session/list`; not loaded or resumed until unarchived


@dataclass(frozen=True, slots=True)
class TurnRecord:
    turn_id: str
    status: TurnStatus
    stop_reason: str | None
    error: str | None
    started_at: str
    ended_at: str | None
    prompt_text: str
    # What the client was shown, in order, starting with the prompt's blocks (`UserChunk`s).
    entries: list[TurnEntry]
    # The turn's prompt reached the model's history: it recorded messages (a turn that ran records at least its
    # user message; one cancelled before it ran, none) or it was interrupted (rebuilt from its prompt).
    ran: bool = False


@dataclass(frozen=True, slots=True)
class LoadedSession:
    """Everything `session/load` needs: replay `replay_entries(loaded)` (rendered by the protocol edge), then continue
    from `history`."""

    session: SessionRecord
    turns: list[TurnRecord]
    # The model-visible conversation to continue from (interrupted turns rebuilt with an `[interrupted]` note;
    # turns still running in another live process left out).
    history: list[Message]


@dataclass(frozen=True, slots=True)
class SessionSummary:
    """One `session/list` entry."""

    session_id: str
    cwd: str
    additional_directories: tuple[str, ...]
    title: str | None
    updated_at: str  # ISO 8601, UTC
    owner: str = "local"  # the principal the session belongs to (`owner_in` its config)
    archived: bool = False  # `session/archive` hid it from the default list


# `session/list`'s archive filter (ACP unstable `SessionArchiveFilter`): not archived (the default), both, or only
# archived ones.
ARCHIVE_FILTERS = ("exclude", "include", "only")


@dataclass(frozen=True, slots=True)
class SessionPage:
    sessions: list[SessionSummary]
    next_cursor: str | None


# A session that never got a prompt is kept this long after it was created (an editor may open a session well before
# its first prompt), then pruned unless a live process has it open.
EMPTY_SESSION_GRACE_S = 10 * 60


@dataclass(frozen=True, slots=True)
class Retention:
    """Which sessions pruning removes (SessionStore.prune): those that never got a prompt, older than `empty_after`
    seconds; those not updated for `max_age_days` days (0: no limit); the oldest past the `max_count` most recently
    updated (0: no limit). Never one a live process has open, nor a subagent's on its own (it goes with its parent)."""

    max_age_days: float = 0.0
    max_count: int = 0
    empty_after: float = EMPTY_SESSION_GRACE_S


@dataclass(frozen=True, slots=True)
class Pruned:
    """What one prune removed: session ids by reason (a session counts once, under the first reason that applies)."""

    empty: tuple[str, ...] = ()
    expired: tuple[str, ...] = ()
    over_count: tuple[str, ...] = ()

    @property
    def total(self) -> int:
        return len(self.empty) + len(self.expired) + len(self.over_count)


@dataclass(frozen=True, slots=True)
class SessionOverview:
    """One line of `acp-server sessions list`."""

    session_id: str
    cwd: str
    title: str | None
    created_at: str
    updated_at: str
    turns: int
    held: bool  # a live process has it open


@dataclass(frozen=True, slots=True)
class Lease:
    """This process runs the session until `expires_at` (seconds since the epoch, the database's clock) unless it renews
    the lease; `epoch` grows each time another process takes the session over (PostgreSQL; issue 24, item 2)."""

    session_id: str
    epoch: int
    expires_at: float
    # Taken over from another process whose lease expired without a release (it died, or was paused): what the
    # operator's `lease_take_overs` counts. A lease taken after a release, or first, is not.
    taken_over: bool = False


@dataclass(frozen=True, slots=True)
class LeaseHeld:
    """Another live process (`owner_id`) holds the session's lease until `expires_at` (the database's clock),
    `remaining` seconds after it was asked (by the same clock: a client's own may differ)."""

    session_id: str
    owner_id: str
    expires_at: float
    remaining: float = 0.0


# --- the model history as JSON ---


# The top-level sessions `prune` judges, newest first, each with whether it is busy (held by a live process, or a
# turn running) and whether it was ever prompted: one query for both stores (worker.py, postgres.py).
PRUNE_CANDIDATES = (
    "SELECT s.id, s.created_at, s.updated_at,"
    " EXISTS (SELECT 1 FROM holds h WHERE h.session_id = s.id)"
    " OR EXISTS (SELECT 1 FROM turns t WHERE t.session_id = s.id AND t.status = 'running'),"
    " EXISTS (SELECT 1 FROM turns t WHERE t.session_id = s.id)"
    " FROM sessions s WHERE s.deleted = 0 AND s.parent_id IS NULL ORDER BY s.updated_at DESC, s.id DESC"
)


def prune_choice(rows: Iterable[Sequence[Any]], retention: Retention, empty_before: str, now: datetime) -> Pruned:
    """Which of `PRUNE_CANDIDATES`' rows `retention` removes: never a busy one; an empty one created before
    `empty_before`; one older than `max_age_days`; and past `max_count` kept (the busy count), the oldest."""
    expired_before = utc_stamp(now - timedelta(days=retention.max_age_days)) if retention.max_age_days > 0 else ""
    empty: list[str] = []
    expired: list[str] = []
    over: list[str] = []
    kept = 0
    for session_id, created_at, updated_at, busy, prompted in rows:
        if busy:
            kept += 1
        elif not prompted and created_at < empty_before:
            empty.append(session_id)
        elif updated_at < expired_before:
            expired.append(session_id)
        elif retention.max_count and kept >= retention.max_count:
            over.append(session_id)
        else:
            kept += 1
    return Pruned(tuple(empty), tuple(expired), tuple(over))


def message_to_json(message: Message) -> dict[str, Any]:
    data: dict[str, Any] = {"role": message.role, "content": message.content}
    if message.tool_calls:
        data["toolCalls"] = [{"id": c.id, "name": c.name, "arguments": c.arguments} for c in message.tool_calls]
    if message.tool_call_id is not None:
        data["toolCallId"] = message.tool_call_id
    if message.media:
        # Optional, so a history written before images were kept reads the same (no schema change); an older
        # acp-server reading this one continues without the images.
        data["media"] = [[m.kind, m.mime_type, m.data] for m in message.media]
    return data


def message_from_json(data: Mapping[str, Any]) -> Message:
    """The inverse of `message_to_json`; raises ValueError on anything it did not write."""
    role = _ROLES.get(data.get("role", ""))
    content = data.get("content")
    if role is None or not isinstance(content, str):
        raise ValueError(f"not a stored message: {data!r:.200}")
    calls = tuple(ToolCall(str(c["id"]), str(c["name"]), dict(c["arguments"])) for c in data.get("toolCalls", ()))
    tool_call_id = data.get("toolCallId")
    media = tuple(_media(item) for item in data.get("media", ()))
    return Message(role, content, calls, None if tool_call_id is None else str(tool_call_id), media)


def _media(item: Any) -> Media:
    kind, mime_type, payload = item
    if kind not in ("image", "audio") or not isinstance(mime_type, str) or not isinstance(payload, str):
        raise ValueError(f"not stored media: {item!r:.200}")
    return Media(kind, mime_type, payload)


def json_bytes(value: Any) -> bytes:
    """`value` as JSON, in bytes of its own size. orjson (3.12 and later) hands back its whole growth buffer, 4 KB
    at least, whatever the length: a value buffered for the next commit (a new session's three columns, a turn's
    messages) would hold that until the commit, and a burst of `session/new` fills one batch with thousands."""
    return bytes(memoryview(orjson.dumps(value)))


def encode_messages(messages: Iterable[Message]) -> bytes:
    return json_bytes([message_to_json(m) for m in messages])


def decode_messages(data: bytes) -> list[Message]:
    return [message_from_json(m) for m in orjson.loads(data)]


# --- the session/list cursor and timestamps ---


def encode_cursor(updated_at: str, session_id: str) -> str:
    return base64.urlsafe_b64encode(orjson.dumps([updated_at, session_id])).decode()


def decode_cursor(cursor: str) -> tuple[str, str]:
    try:
        value = orjson.loads(base64.urlsafe_b64decode(cursor.encode()))
    except (ValueError, binascii.Error, orjson.JSONDecodeError) as exc:
        raise ValueError("invalid cursor") from exc
    if not (isinstance(value, list) and len(value) == 2 and all(isinstance(v, str) for v in value)):
        raise ValueError("invalid cursor")
    return value[0], value[1]


def utc_now() -> str:
    """A timestamp as the records carry it: ISO 8601, UTC, to the microsecond (so it also orders sessions)."""
    return utc_stamp(datetime.now(UTC))


def utc_stamp(moment: datetime) -> str:
    """`moment` (aware) as the records carry it; such strings order as the moments do."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


# The key of a session's stored config that names the principal it belongs to (shared/design/REMOTE.md, decision 4);
# absent for stdio's sessions, which belong to `local`.
OWNER_KEY = "owner"


def owner_in(config: Any) -> str:
    """The principal a session's stored config names as its owner (`local` when none)."""
    owner = config.get(OWNER_KEY) if isinstance(config, dict) else None
    return owner if isinstance(owner, str) else "local"
