"""One accepted WebSocket connection, turned into the stdio seam: frames in become lines, lines out become frames.

Every text frame is one JSON-RPC message both ways, or one batch (a JSON array: the protocol layer takes it apart and
answers it with one array, in one frame); binary frames are ignored. Before the handler starts, the first message
must come within `initialize_timeout` and be an `initialize` (only its `method` is looked at: reading the rest is the
protocol layer's job; a batch is no `initialize`), else the connection is closed with 1008 (too late) or 1002 (not
`initialize`).
A message over `max_message_bytes` closes it with 1009: hypercorn counts a text message in characters
(`websocket_max_message_size`, set to the same number, so never stricter than bytes) and drops a longer one itself;
the UTF-8 bytes are counted here.

Input is handed over as stdio's is (jsonrpc/transport.py): the frames hypercorn has received by the time the handler
comes back for more are handed to it in one burst, in order, with nothing else run between them (up to
`LINES_PER_BATCH` a burst), as the lines one read of stdin brought are. So messages a client writes together (in one
write: their frames arrive in one read) are admitted together, which is what "together" means on this transport
(docs/remote.md): a prompt that supersedes another sent with it finds it still held (docs/interrupts.md I14). Handing
each frame over on its own gave the tasks the first one started several loop iterations before the second was
admitted, enough for an interrupted work to end and the superseded prompt to be inserted. Input is still pulled: the
reader takes frames from hypercorn only while fewer than `INPUT_HIGH_BYTES` wait for the handler, so a client writing
faster than it is served fills its own socket, not our memory.

Output never waits for the network (decision 8). `write` cuts what it is given into lines and queues them for this
connection's sender task; it returns at once. When the queue already holds more than `max_queued_bytes` that the
socket has not taken, the reader is too slow or gone: the connection ends as a dead peer (close 1008), that write and
every later one raise BrokenPipeError (as a closed stdout does), and the handler's lines end as at stdin EOF. So a
reader that stops holds back nothing but its own connection, and a turn's cancel never waits on its socket. The queue
holds at most `max_queued_bytes` plus one write. A TCP connection whose peer vanished is found by the kernel (TCP
keepalive and TCP_USER_TIMEOUT on the socket, server.py) and reaches us as a disconnect.

When the client goes (a close, a reset, the kernel's verdict on a dead peer), the handler's lines end and its
writes fail from then on, as when an editor closes stdin and stdout. Ending from our side (`stop`: a drain) ends
the handler's lines first, lets it answer what it can (it flushes into the queue as at EOF), sends what is queued
within `flush_timeout`, then closes with the stop's code.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import AsyncGenerator, Awaitable, Callable
from typing import Any

import anyio
import anyio.lowlevel
import orjson

from acp_server.jsonrpc.transport import INPUT_HIGH_BYTES, INPUT_LOW_BYTES, LINES_PER_BATCH, Oversized
from acp_server.remote.peer import ConnectionHandler, Peer

__all__ = ["CLOSE_GOING_AWAY", "Receive", "Send", "WebSocketConnection"]

log = logging.getLogger(__name__)

Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]

# Close codes (RFC 6455 §7.4.1), as the TypeScript SDK's own server uses them.
CLOSE_NORMAL = 1000
CLOSE_GOING_AWAY = 1001  # the server drains
CLOSE_PROTOCOL_ERROR = 1002  # the first message is not `initialize`
CLOSE_POLICY = 1008  # no `initialize` in time; a reader too slow (the SDK's server: a limit broken)
CLOSE_TOO_BIG = 1009  # a message over the limit
CLOSE_INTERNAL_ERROR = 1011  # the handler failed
# How long sending the close frame may take: a peer that reads nothing would hold it forever.
CLOSE_TIMEOUT = 0.5


class _Outgoing:
    """The connection's `LineSink`: a queue of frames, bounded in bytes, that never makes `write` wait.

    Per message it does as little as it can (hypercorn and wsproto already spend several times our cost on each
    frame): a write's lines are decoded once, kept as one batch and sent back to back by one wake-up of the sender;
    nothing is copied or logged per message. A write does not yield: its caller, the connection's one writer, waits
    for its next lines anyway, and that wait lets the sender run."""

    def __init__(self, max_queued_bytes: int, on_overflow: Callable[[], None]) -> None:
        self._max = max_queued_bytes
        self._on_overflow = on_overflow
        # Each write's frames, in order, with the bytes they came in (what the bound counts).
        self._batches: deque[tuple[list[str], int]] = deque()
        self.queued_bytes = 0
        self._ready = anyio.Event()
        # Made only by `flushed` (once, at the end): a new event per queue-empty-to-busy turn cost as much as the rest
        # of a write with one line in it.
        self._emptied: anyio.Event | None = None
        self.closed = False

    async def write(self, data: bytes) -> None:
        if self.closed:
            raise BrokenPipeError("the remote connection is closed")
        if self.queued_bytes > self._max:
            self._on_overflow()
            raise BrokenPipeError("the client is not reading: the connection was ended")
        # One decode for the whole write: a newline byte never lies inside a UTF-8 sequence, so this cuts exactly
        # where cutting the bytes would. Blank lines carry no message (the writer ends each line with one newline).
        frames = [line for line in data.decode("utf-8", "replace").split("\n") if line and not line.isspace()]
        if frames:
            self._batches.append((frames, len(data)))
            self.queued_bytes += len(data)
            self._ready.set()

    def close(self) -> None:
        """No more writes; what is queued may still be sent (`flush`)."""
        self.closed = True
        self._ready.set()

    def discard(self) -> None:
        self.close()
        self._batches.clear()
        self.queued_bytes = 0
        if self._emptied is not None:
            self._emptied.set()

    async def pump(self, send: Send) -> None:
        """The sender task: frames to hypercorn, one at a time, in order; a whole batch per wake-up."""
        batches = self._batches
        while True:
            if not batches:
                if self._emptied is not None:
                    self._emptied.set()
                if self.closed:
                    return
                if self._ready.is_set():
                    self._ready = anyio.Event()
                await self._ready.wait()
                continue
            batch = batches[0]
            for text in batch[0]:
                await send({"type": "websocket.send", "text": text})
                if not batches:  # `discard` emptied it meanwhile: nothing more of it is sent
                    break
            else:
                batches.popleft()
                self.queued_bytes -= batch[1]

    async def flushed(self) -> None:
        """Once everything queued is sent (a batch leaves the queue only when its last frame is sent), or discarded."""
        if self._batches:
            if self._emptied is None or self._emptied.is_set():
                self._emptied = anyio.Event()
            await self._emptied.wait()


class _Incoming:
    """The frames read from hypercorn and not yet taken by the handler: handed over in bursts, bounded in bytes.

    `lines` hands over every frame waiting when the handler asks (at most `LINES_PER_BATCH`) without an await between
    them, so what arrived together is admitted together; between bursts it yields once, so the tasks the frames
    started run and a flood cannot hold the loop (as `_InputLines.lines` does for stdin). The reader waits in `room`
    while more than `INPUT_HIGH_BYTES` wait, until the handler has taken them down to `INPUT_LOW_BYTES`: at most that
    plus one frame is held here, beyond what hypercorn's own bounded queue holds."""

    def __init__(self, first: bytes) -> None:
        self._frames: deque[bytes] = deque((first,))
        self._bytes = len(first)
        self._ready = anyio.Event()  # a frame came, or the end
        self._room = anyio.Event()  # the handler has taken the frames down to the low mark
        self._ended = False

    def put(self, data: bytes) -> None:
        self._frames.append(data)
        self._bytes += len(data)
        self._ready.set()

    def end(self) -> None:
        """No more frames: the handler's lines end once it has taken those already here (as at stdin EOF)."""
        self._ended = True
        self._ready.set()

    async def room(self) -> None:
        """Return at once, without a checkpoint, while under the bound: the reader goes straight on to the next frame
        hypercorn holds. Over it, wait until the handler has taken what waits down to the low mark."""
        while self._bytes > INPUT_HIGH_BYTES:
            self._room = anyio.Event()
            await self._room.wait()

    async def lines(self) -> AsyncGenerator[bytes | Oversized, None]:
        frames = self._frames
        while True:
            if frames:
                for _ in range(min(len(frames), LINES_PER_BATCH)):
                    data = frames.popleft()
                    self._bytes -= len(data)
                    if self._bytes <= INPUT_LOW_BYTES:
                        self._room.set()
                    yield data
                # Between bursts the tasks the frames started get to run (and the reader takes what came meanwhile).
                await anyio.lowlevel.checkpoint()
            elif self._ended:
                return
            else:
                self._ready = anyio.Event()
                await self._ready.wait()


def _is_initialize(data: bytes) -> bool:
    """Whether the first message asks for `initialize` (only its method is looked at)."""
    try:
        message = orjson.loads(data)
    except orjson.JSONDecodeError:
        return False
    return isinstance(message, dict) and message.get("method") == "initialize"


class WebSocketConnection:
    """One accepted connection, from its first message to its close. `stop` and `cancel` come from a drain."""

    def __init__(
        self,
        peer: Peer,
        receive: Receive,
        send: Send,
        *,
        initialize_timeout: float,
        max_message_bytes: int,
        max_queued_bytes: int,
        flush_timeout: float,
    ) -> None:
        self.peer = peer
        self._receive = receive
        self._send = send
        self._initialize_timeout = initialize_timeout
        self._max_message_bytes = max_message_bytes
        self._flush_timeout = flush_timeout
        self._outgoing = _Outgoing(max_queued_bytes, self._dead_peer)
        # The reading of frames (one scope while waiting for `initialize`, a new one while serving): cancelled, the
        # handler's lines end.
        self._input_scope = anyio.CancelScope()
        self._scope = anyio.CancelScope()  # everything of this connection (a drain's last resort)
        self._sender_scope = anyio.CancelScope()
        self._close_code = CLOSE_NORMAL
        self.why = "the handler returned"
        self._ending = False
        self._client_gone = False

    # --- ended from outside ---

    def stop(self, why: str, code: int = CLOSE_GOING_AWAY) -> None:
        """End the handler's input as at stdin EOF; once it has returned, flush and close with `code`."""
        self._end(why, code)

    def cancel(self) -> None:
        """Past a drain's bound: stop everything of this connection now."""
        self._scope.cancel()

    def _end(self, why: str, code: int) -> None:
        if not self._ending:
            self._ending = True
            self.why = why
            self._close_code = code
        self._input_scope.cancel()

    def _dead_peer(self) -> None:
        log.warning(
            "remote connection %s: %d bytes queued and not read: ended as a dead peer",
            self.peer.connection_id,
            self._outgoing.queued_bytes,
        )
        self._end("dead peer: the client stopped reading", CLOSE_POLICY)
        self._outgoing.discard()
        self._sender_scope.cancel()  # it may wait on a socket nobody reads

    # --- the connection's life ---

    async def run(self, handler: ConnectionHandler) -> None:
        with self._scope:
            first = await self._first_message()
            if first is not None:
                try:
                    await self._serve(handler, first)
                except Exception:  # a defect in the handler: this connection ends, the server and the others go on
                    log.exception("remote connection %s: the handler failed", self.peer.connection_id)
                    self._end("the handler failed", CLOSE_INTERNAL_ERROR)
            with anyio.CancelScope(shield=True), anyio.move_on_after(CLOSE_TIMEOUT):
                if not self._client_gone:
                    await self._send({"type": "websocket.close", "code": self._close_code})

    async def _next_text(self) -> bytes | Oversized | None:
        """The next text frame's bytes, skipping binary frames; None once the client has gone."""
        while True:
            message = await self._receive()
            if message["type"] == "websocket.disconnect":
                self._client_gone = True
                # Nobody reads what would be written now: writes fail from here on, as on a stdout the client
                # closed, so the handler stops producing output for nobody.
                self._outgoing.discard()
                if not self._ending:
                    self._ending = True
                    self.why = f"the client closed the connection ({message.get('code', CLOSE_NORMAL)})"
                return None
            text = message.get("text")
            if message["type"] != "websocket.receive" or not isinstance(text, str):
                continue  # a binary frame: ignored (the RFD)
            data = text.encode("utf-8", "surrogatepass")
            if len(data) > self._max_message_bytes:
                return Oversized(len(data))
            return data

    def _new_input_scope(self) -> anyio.CancelScope:
        self._input_scope = anyio.CancelScope()
        if self._ending:
            self._input_scope.cancel()
        return self._input_scope

    async def _first_message(self) -> bytes | None:
        """The first message if it is an `initialize` in time; else the close code is chosen and None returned."""
        with self._new_input_scope(), anyio.move_on_after(self._initialize_timeout) as deadline:
            first = await self._next_text()
            if isinstance(first, Oversized):
                self._end(f"a message of {first.size} bytes, over the limit", CLOSE_TOO_BIG)
                return None
            if first is not None and not _is_initialize(first):
                self._end("the first message is not `initialize`", CLOSE_PROTOCOL_ERROR)
                return None
            return first
        if deadline.cancelled_caught:
            self._end(f"no `initialize` within {self._initialize_timeout:g} s", CLOSE_POLICY)
        return None

    async def _serve(self, handler: ConnectionHandler, first: bytes) -> None:
        incoming = _Incoming(first)
        input_scope = self._new_input_scope()
        lines = incoming.lines()
        async with anyio.create_task_group() as group:

            async def read_frames() -> None:
                # No checkpoint between frames while there is room: every frame hypercorn already holds is taken in
                # one go (its queue's `get` returns at once when it has one), so the handler, woken by the first,
                # finds them all and admits them together.
                try:
                    with input_scope:
                        while (data := await self._next_text()) is not None:
                            if isinstance(data, Oversized):
                                self._end(f"a message of {data.size} bytes, over the limit", CLOSE_TOO_BIG)
                                return
                            incoming.put(data)
                            await incoming.room()
                finally:
                    incoming.end()

            async def send_frames() -> None:
                with self._sender_scope:
                    await self._outgoing.pump(self._send)

            group.start_soon(read_frames)
            group.start_soon(send_frames)
            try:
                await handler(self.peer, lines, self._outgoing)
            finally:
                self._outgoing.close()
                input_scope.cancel()
                with anyio.CancelScope(shield=True), anyio.move_on_after(self._flush_timeout):
                    await lines.aclose()
                    if not self._client_gone:
                        await self._outgoing.flushed()
                group.cancel_scope.cancel()
