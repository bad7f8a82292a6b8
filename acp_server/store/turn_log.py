"""The hot path of the session store: buffering each turn's updates in memory until a flush commits them.

The server streams up to ~1M chunks/s and every `session/update` it sends is stored, so `TurnLog.append` only encodes
the update into an in-memory buffer. A flush takes the whole buffer as one `Batch` and commits it in ONE transaction on
a worker thread, one row per turn (a JSON array of up to 1 MiB of that turn's new updates, zlib-compressed when
large), not one row per chunk, so its cost barely depends on how finely the model streamed. This module holds the
buffer and the row format; it never touches SQLite.
"""

from __future__ import annotations

import logging
import time
import uuid
import zlib
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson

__all__ = ["Batch", "TurnLog", "decode_updates", "new_turn_id", "update_rows"]

log = logging.getLogger(__name__)

_ROW_BYTES = 1 << 20  # a row's JSON before compression: bounded, so one is cheap to write and to read back
_COMPRESS_FROM = 4096  # bytes of JSON


# --- the write buffer ---


class TurnLog:
    """One turn's stream of updates into the store: `append` each update exactly as it is sent to the client.

    Cheap and synchronous: the update is encoded at once (so the caller may reuse or drop it) straight into a
    growing JSON array for the next flush. A bytearray, not a list of objects: keeping tens of thousands of small
    dicts or bytes alive until the flush costs several times more per chunk (allocator and garbage collector).
    Appends after `SessionStore.finish_turn` are ignored, like the run's fence.
    """

    __slots__ = ("_buf", "_count", "_dirty", "_done", "_queued", "_rows", "session_id", "turn_id")

    def __init__(self, session_id: str, turn_id: str, dirty: list[TurnLog]) -> None:
        self.session_id = session_id
        self.turn_id = turn_id
        self._dirty = dirty
        self._buf = bytearray(b"[")
        self._count = 0
        self._rows: list[tuple[int, bytearray]] = []  # full JSON arrays waiting for the flush
        self._queued = False
        self._done = False

    def append(self, update: Mapping[str, Any]) -> None:
        if self._done:
            return
        try:
            data = orjson.dumps(update)
        except TypeError:
            log.warning("session %s: an update that is not JSON was not stored: %.200r", self.session_id, update)
            return
        if not self._queued:
            self._queued = True
            self._dirty.append(self)
        buf = self._buf
        buf += data
        buf += b","
        self._count += 1
        if len(buf) >= _ROW_BYTES:
            self._seal()

    @property
    def finished(self) -> bool:
        return self._done

    @property
    def buffered(self) -> int:
        return self._count + sum(count for count, _ in self._rows)

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
    """What one flush commits, in one transaction: statements in call order, then each turn's new updates."""

    ops: list[tuple[str, tuple[Any, ...]]]
    updates: list[tuple[str, int, bytearray]]  # turn id, how many updates, their JSON array
    heartbeat: bool
    sweep: bool
    first_taken: float = field(default_factory=time.monotonic)

    def after(self, earlier: Batch | None) -> Batch:
        if earlier is None:
            return self
        return Batch(
            earlier.ops + self.ops,
            earlier.updates + self.updates,
            earlier.heartbeat or self.heartbeat,
            earlier.sweep or self.sweep,
            earlier.first_taken,
        )

    @property
    def empty(self) -> bool:
        return not (self.ops or self.updates or self.heartbeat or self.sweep)

    def update_count(self) -> int:
        return sum(count for _, count, _ in self.updates)


def update_rows(updates: Sequence[tuple[str, int, bytearray]]) -> Iterator[tuple[str, int, bytes, str]]:
    for turn_id, count, data in updates:
        # Streamed chunks repeat themselves (kind, message id): zlib at level 1 shrinks them ~100x for less CPU than
        # SQLite spends writing them uncompressed, and it runs without the GIL.
        yield turn_id, count, zlib.compress(data, 1) if len(data) >= _COMPRESS_FROM else bytes(data), turn_id


def decode_updates(data: bytes) -> list[dict[str, Any]]:
    """A stored row: a JSON array, or (from _COMPRESS_FROM bytes on) the same zlib-compressed."""
    decoded = orjson.loads(data if data[:1] == b"[" else zlib.decompress(data))
    if not isinstance(decoded, list):
        raise ValueError("a stored update row is not a list")
    return decoded


def new_turn_id() -> str:
    return uuid.uuid4().hex
