"""Server-Sent Events framing, lean: bytes as they arrive in, complete events out, in the fewest Python steps.

A model's reply streams as one SSE event per token or so, and the SDK's own decoder spends 8 to 11 µs on each
(a generator step and a `str` decode per line, a `ServerSentEvent` object per event, then `json`), most of the agent's
CPU per streamed chunk. This decoder keeps the bytes as bytes (the JSON parser reads them directly), splits all the
complete lines of a network read at once, and hands back a list of `(event name, data)` per read.

It follows the WHATWG event-stream rules a model stream needs: lines end in LF, CRLF or CR (a CRLF split across two
reads is one line end); a line starting with `:` is a comment (the keep-alives some servers send); `data:` lines of
one event are joined with LF; one space after the colon is dropped; a blank line ends an event; an event with no data
line is not dispatched; `id` and `retry` are read and dropped (nothing here reconnects). An event the stream ends
before its blank line is discarded, as the rules say: the caller learns of the cut from the transport or from the
missing end-of-reply marker.
"""

from __future__ import annotations

__all__ = ["SseDecoder", "SseEvent"]

# (event name or None, data): the data stays bytes, for orjson.
SseEvent = tuple[str | None, bytes]

_LF = b"\n"
_CR = b"\r"


class SseDecoder:
    """The events in one stream's bytes, fed one network read at a time. Holds only the unfinished line and event
    of that one stream."""

    __slots__ = ("_data", "_event", "_partial", "_skip_lf")

    def __init__(self) -> None:
        self._partial: list[bytes] = []  # the bytes of an unfinished line, kept as parts (no growing copies)
        self._skip_lf = False  # the last read ended in CR: an LF starting the next one ends no second line
        self._data: list[bytes] = []  # the data lines of the event being read
        self._event: str | None = None

    def feed(self, chunk: bytes) -> list[SseEvent]:
        """The events that `chunk` completes, in order."""
        if not chunk:
            return []
        if self._skip_lf:
            self._skip_lf = False
            if chunk[:1] == _LF:
                chunk = chunk[1:]
        if _CR in chunk:
            self._skip_lf = chunk[-1:] == _CR
            chunk = chunk.replace(b"\r\n", _LF).replace(_CR, _LF)
        if (
            chunk.startswith(b"data: ")
            and chunk.find(_LF) == len(chunk) - 2
            and chunk.endswith(b"\n\n")
            and not self._partial
            and not self._data
            and self._event is None
        ):
            return [(None, chunk[6:-2])]  # the usual read: one event of one data line, nothing pending
        end = chunk.rfind(_LF)
        if end < 0:
            self._partial.append(chunk)
            return []
        complete = chunk[:end]
        if self._partial:
            self._partial.append(complete)
            complete = b"".join(self._partial)
            self._partial.clear()
        if end + 1 < len(chunk):
            self._partial.append(chunk[end + 1 :])
        return self._lines(complete.split(_LF))

    def _lines(self, lines: list[bytes]) -> list[SseEvent]:
        events: list[SseEvent] = []
        data = self._data
        for line in lines:
            if not line:
                if data:
                    events.append((self._event, data[0] if len(data) == 1 else _LF.join(data)))
                    data = self._data = []
                self._event = None
            elif line.startswith(b"data:"):  # nearly every line of a model stream: checked first
                data.append(line[6:] if line[5:6] == b" " else line[5:])
            else:  # a comment (`:` first) has an empty field name, ignored like any unknown one
                name, _, value = line.partition(b":")
                if value[:1] == b" ":
                    value = value[1:]
                if name == b"data":
                    data.append(value)
                elif name == b"event":
                    # Invalid UTF-8 here raises UnicodeDecodeError, as the SDK's decoder does for any such line.
                    self._event = value.decode()
        return events
