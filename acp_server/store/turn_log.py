"""The hot path of the session store: buffering each turn's records in memory until a flush commits them.

The server streams up to ~1M chunks/s and everything it shows the client is stored, so `TurnLog.append` only encodes
the record (turn_records.py) into an in-memory buffer. A flush takes the whole buffer as one `Batch` and commits it in
ONE transaction on a worker thread, one row per turn (a JSON array of up to 1 MiB of that turn's new records,
zlib-compressed when large), not one row per chunk, so its cost barely depends on how finely the model streamed. This
module holds the buffer and the row format; it never touches SQLite.
"""

from __future__ import annotations

import logging
import time
import uuid
import zlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson

from acp_server.store.turn_records import TurnEntry, decode_entry, encode_entry

__all__ = ["Batch", "TurnLog", "decode_entries", "decode_row", "encode_row", "new_turn_id", "update_rows"]

log = logging.getLogger(__name__)

_ROW_BYTES = 1 << 20  # a row's JSON before compression: bounded, so one is cheap to write and to read back
_COMPRESS_FROM = 4096  # bytes of JSON


# --- the write buffer ---


class TurnLog:
    """One turn's stream of records into the store: `append` each thing the client is shown, in the order it is sent.

    Cheap and synchronous: the record is encoded at once (so the caller may reuse or drop it) straight into a
    growing JSON array for the next flush. A bytearray, not a list of objects: keeping tens of thousands of small
    dicts or bytes alive until the flush costs several times more per chunk (allocator and garbage collector).
    Appends after `SessionStore.finish_turn` are ignored, like the run's fence.
    """

    __slots__ = ("_buf", "_count", "_dirty", "_done", "_queued", "_rows", "appended", "session_id", "turn_id")

    def __init__(self, session_id: str, turn_id: str, dirty: list[TurnLog]) -> None:
        self.session_id = session_id
        self.turn_id = turn_id
        self._dirty = dirty
        self._buf = bytearray(b"[")
        self._count = 0
        self._rows: list[tuple[int, bytearray]] = []  # full JSON arrays waiting for the flush
        self._queued = False
        self._done = False
        # Every record kept since the turn began, flushed or not: what the turn has shown so far, as a count (a
        # resume replaying running work cuts what it reads to it, ACP-V2.md §23 Q12).
        self.appended = 0

    def append(self, entry: TurnEntry) -> None:
        if self._done:
            return
        try:
            data = orjson.dumps(encode_entry(entry))
        except TypeError:
            log.warning("session %s: a record that is not JSON was not stored: %.200r", self.session_id, entry)
            return
        self._add(data)

    def append_text(self, message_id: str, text: str, thought: bool = False) -> None:
        """`append(AgentText(message_id, text))` (or `AgentThought`): the same row, without building the record.
        The hot path, one per streamed chunk, so written out in full (each call saved shows in chunks/s)."""
        if self._done:
            return
        try:
            data = orjson.dumps(("thought" if thought else "agent", message_id, text))
        except TypeError:
            log.warning("session %s: a chunk that is not text was not stored: %.200r", self.session_id, text)
            return
        if not self._queued:
            self._queued = True
            self._dirty.append(self)
        buf = self._buf
        buf += data
        buf += b","
        self._count += 1
        self.appended += 1
        if len(buf) >= _ROW_BYTES:
            self._seal()

    def _add(self, data: bytes) -> None:
        if not self._queued:
            self._queued = True
            self._dirty.append(self)
        buf = self._buf
        buf += data
        buf += b","
        self._count += 1
        self.appended += 1
        if len(buf) >= _ROW_BYTES:
            self._seal()

    @property
    def finished(self) -> bool:
        return self._done

    @property
    def buffered(self) -> int:
        return self._count + sum(count for count, _ in self._rows)

    def pending(self) -> list[TurnEntry]:
        """The records appended since a flush last took them, oldest first, decoded; the buffer stays as it is.
        With a read of what was committed (under the store's lock, which every take holds until its commit), this is
        everything the turn has shown so far, each record once (a resume replaying running work, ACP-V2.md §23 Q12)."""
        out: list[TurnEntry] = []
        for _, row in self._rows:
            out += decode_entries(bytes(row))
        if self._count:
            out += decode_entries(bytes(self._buf[:-1]) + b"]")
        return out

    def _seal(self) -> None:
        buf = self._buf
        buf[-1:] = b"]"
        self._rows.append((self._count, buf))
        self._buf = bytearray(b"[")
        self._count = 0

    def _take(self) -> list[tuple[int, bytearray]]:
        if self._count:
            self._seal()
        rows, self._rows = self._rows, []
        self._queued = False
        return rows


@dataclass(slots=True)
class Batch:
    """What one flush commits, in one transaction: statements in call order, then each turn's new records."""

    ops: list[tuple[str, tuple[Any, ...]]]
    updates: list[tuple[str, int, bytearray]]  # turn id, how many records, their JSON array
    heartbeat: bool
    sweep: bool
    first_taken: float = field(default_factory=time.monotonic)
    # Turn id -> its session id, for the turns in `updates`: a batch kept after a failed commit still holds records
    # shown to the client, and a resume replaying a session's running work must find them (`pending_entries`).
    sessions: dict[str, str] = field(default_factory=dict)
    # The ids of the statements in `ops` that are changes a request waits to acknowledge (`commit_change`).
    changes: set[int] = field(default_factory=set)
    # Leases (PostgreSQL): the epoch each leased session's writes are fenced by, and the session of each statement
    # of theirs in `ops` (by id). Empty without leases.
    fences: dict[str, int] = field(default_factory=dict)
    op_sessions: dict[int, str] = field(default_factory=dict)

    def after(self, earlier: Batch | None) -> Batch:
        if earlier is None:
            return self
        return Batch(
            earlier.ops + self.ops,
            earlier.updates + self.updates,
            earlier.heartbeat or self.heartbeat,
            earlier.sweep or self.sweep,
            earlier.first_taken,
            {**earlier.sessions, **self.sessions},
            earlier.changes | self.changes,
            {**earlier.fences, **self.fences},
            {**earlier.op_sessions, **self.op_sessions},
        )

    def without_changes(self) -> Batch:
        """The batch to keep after its commit failed: without the changes whose requests are answered an error."""
        if not self.changes:
            return self
        ops = [op for op in self.ops if id(op) not in self.changes]
        return Batch(
            ops,
            self.updates,
            self.heartbeat,
            self.sweep,
            self.first_taken,
            self.sessions,
            set(),
            self.fences,
            self.op_sessions,
        )

    @property
    def empty(self) -> bool:
        return not (self.ops or self.updates or self.heartbeat or self.sweep)

    def update_count(self) -> int:
        return sum(count for _, count, _ in self.updates)


def update_rows(updates: Sequence[tuple[str, int, bytearray]]) -> Iterator[tuple[str, int, bytes]]:
    for turn_id, count, data in updates:
        # Streamed chunks repeat themselves (kind, message id): zlib at level 1 shrinks them ~100x for less CPU than
        # SQLite spends writing them uncompressed, and it runs without the GIL.
        yield turn_id, count, zlib.compress(data, 1) if len(data) >= _COMPRESS_FROM else bytes(data)


def decode_row(data: bytes) -> list[Any]:
    """A stored row: a JSON array, or (from _COMPRESS_FROM bytes on) the same zlib-compressed."""
    decoded = orjson.loads(data if data[:1] == b"[" else zlib.decompress(data))
    if not isinstance(decoded, list):
        raise ValueError("a stored row is not a list")
    return decoded


def decode_entries(data: bytes) -> list[TurnEntry]:
    """A stored row's records; ValueError (or zlib.error) when it is not one this module wrote."""
    return [decode_entry(row) for row in decode_row(data)]


def encode_row(items: Sequence[Any]) -> bytes:
    """A row of already-built JSON values, compressed like a flush's (for the schema migration)."""
    data = orjson.dumps(list(items))
    return zlib.compress(data, 1) if len(data) >= _COMPRESS_FROM else data


def new_turn_id() -> str:
    return uuid.uuid4().hex
