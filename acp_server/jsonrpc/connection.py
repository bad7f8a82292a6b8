"""One connection to one peer: the reader, the single ordered writer, and our own requests to the client.

The reader classifies each line and never blocks: notifications are handled inline in arrival order, a request is
first `prepare`d synchronously (this is where a `session/prompt` is admitted, before anything can be awaited, so a
cancel read after it always finds it) and then answered in its own task. Responses to our requests resolve the
waiting caller through the pending table.

A batch (a line holding a JSON array, JSON-RPC 2.0 §6) is taken apart by `classify` and its entries are admitted one
by one, in order, exactly as separate lines would be: a request is prepared on the reader and answered in its own
task, a notification handled inline, a response resolves our request, an invalid entry gets its -32600. So a cancel
in a batch binds to the prompts before it, in the batch or not (the epoch rule, docs/interrupts.md I10). What differs
is only where the answers go: each request's response (and each invalid entry's error) waits in its place in the
batch's array (`_Batch`), which is written as one line once every request of the batch is answered; a batch with no
request and no invalid entry gets nothing. So a batch holding a turn that answers at its end (a v1
`session/prompt`) is answered then: the turn's updates, and everything else, flow meanwhile. A response sent
out of band (`respond`: a cancel answers a held v2 prompt) goes into its batch's array too.

All output goes through one FIFO outbox drained by one writer task, so lines never interleave and a response is
written after everything queued before it. Turn output is *fenced*: `send_fenced` drops a message whose turn has
already been answered (or abandoned), which is what keeps a dying or replaced run from reaching the client.

Messages are serialised as they are queued, so the outbox is measured in bytes: over OUTBOX_HIGH_BYTES the reader
takes no more lines until the client has read it down to OUTBOX_LOW_BYTES, or has closed stdin (which the transport
reports even while it is paused).
"""

from __future__ import annotations

import itertools
import logging
from collections import deque
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any, Protocol

import anyio
import orjson
from anyio.abc import TaskGroup

from acp_server.jsonrpc.rpc import (
    ErrorCode,
    Incoming,
    IncomingBatch,
    IncomingNotification,
    IncomingRequest,
    IncomingResponse,
    classify,
    error_message,
)
from acp_server.jsonrpc.transport import LineSink, LineSource, Oversized
from acp_server.valid_unicode import sanitize_json

__all__ = ["ClientRequestError", "Connection", "Dispatcher", "Fence"]

log = logging.getLogger(__name__)

# Turn output waits for the writer above this many queued messages, so a fast model cannot outrun the client, and a
# cancel is read (and its response written) after at most this many queued updates of the dying turn.
HIGH_WATER = 256
# One write system call carries at most about this much.
BATCH_BYTES = 1 << 20
# Backpressure on the input: above this many bytes of serialised lines waiting for the client (it is not reading
# stdout, or slower than its own requests), stdin is no longer read, so memory stays bounded and nothing is dropped;
# the pipe fills and the client's writes wait. Reading resumes below the low-water mark, so it does not flap per line.
OUTBOX_HIGH_BYTES = 4 << 20
OUTBOX_LOW_BYTES = 1 << 20
# At EOF the writer gets this long to flush what is queued before the process leaves; it must stay below the
# exit watchdog in server.py, so a client that stopped reading cannot hold the process.
FLUSH_TIMEOUT = 0.25
# After EOF every turn is cancelled and answers within the cleanup deadline; this much slack on top.
ANSWER_SLACK = 0.25
# At EOF, how long the last commit of the session store may take.
DRAIN_TIMEOUT = 0.25
# From EOF on, how long any one wait for the session store may take (a commit another process's write lock holds up
# would wait out SQLite's busy timeout, shielded: the bounds here cannot cut it). Below ANSWER_SLACK, so the last
# commit of a turn the cleanup deadline cut short still lets its response out, and below DRAIN_TIMEOUT.
STORE_WAIT_TIMEOUT = 0.2
# How many of the requests we withdrew (`retract`) are remembered: the client answers each (v1's permission request:
# `cancelled`), and that answer is expected, not a stray. Bounded, so a client that never answers costs nothing.
WITHDRAWN_KEPT = 256
# At exit, how long the pipes of the processes just killed may take to close (a SIGKILLed process's pipes close at
# once; what is still open after this belongs to a process out of our reach). Well within the exit watchdog.
RELEASE_TIMEOUT = 0.1


class Fence(Protocol):
    """What a turn exposes to the connection: whether it has been answered, and its requests in flight."""

    @property
    def fenced(self) -> bool: ...

    @property
    def pending_requests(self) -> set[int]: ...


class Dispatcher(Protocol):
    """The layer above: ACP handlers, reached only through these calls."""

    def prepare(self, request: IncomingRequest) -> Any:
        """Synchronous work done when the request's line is read; returns the request's context."""
        ...

    async def answer(self, request: IncomingRequest, context: Any) -> dict[str, Any] | None:
        """The request's response; None if it was already queued, out of band (`Connection.respond`), by another
        handler."""
        ...

    def after_response(self, context: Any) -> None:
        """Called once the response is queued (e.g. to start the next queued prompt of a session)."""
        ...

    def notify(self, method: str, params: Any) -> None:
        """Handle a notification inline, in arrival order. Must not block."""
        ...

    def closing(self) -> None:
        """stdin reached EOF: cancel every turn."""
        ...

    async def turns_ended(self) -> None:
        """After `closing` and the wait for requests in flight: wait until every turn has ended. Bounded by the
        caller."""
        ...

    async def drain(self) -> None:
        """Every request is answered (or abandoned): persist what must survive. Bounded by the caller."""
        ...

    def exiting(self) -> None:
        """Last words before the process leaves: kill what we started."""
        ...

    async def released(self, timeout: float) -> None:
        """After `exiting`: let go of what was killed (its pipes and exit status) within `timeout` seconds, so
        nothing of it is collected after the event loop has closed."""
        ...


class ClientRequestError(Exception):
    """The client answered one of our requests with an error (or it was cancelled, or the connection closed)."""

    def __init__(self, method: str, code: int, message: str) -> None:
        super().__init__(f"{method}: {message} ({code})")
        self.method = method
        self.code = code
        self.message = message


class _Batch:
    """The answers of one batch, in the order of its entries: each request's response (or None once it needs none)
    and each invalid entry's error, serialised as they come; written as one array once the batch is read whole
    (`sealed`) and no request of it is still waiting."""

    __slots__ = ("parts", "sealed", "waiting")

    def __init__(self) -> None:
        self.parts: list[bytes | None] = []
        self.waiting = 0
        self.sealed = False

    def line(self) -> bytes | None:
        """The array of its answers as one line; None if nothing in it needs one (notifications and responses)."""
        parts = [part for part in self.parts if part is not None]
        return b"[" + b",".join(parts) + b"]\n" if parts else None


@dataclass(eq=False, slots=True)
class _Slot:
    """One request's place in its batch's array."""

    batch: _Batch
    index: int
    request_id: Any
    filled: bool = False


@dataclass(eq=False, slots=True)
class _Outgoing:
    method: str
    done: anyio.Event = field(default_factory=anyio.Event)
    result: Any = None
    error: dict[str, Any] | None = None


class Connection:
    def __init__(self, cleanup_deadline: float) -> None:
        # The layer above, handed in by `serve`: it is built with this connection (to send and spawn through it).
        self._dispatcher: Dispatcher
        self._cleanup_deadline = cleanup_deadline
        self._outbox: deque[bytes] = deque()  # serialised lines, so the backpressure bound is in bytes
        self._outbox_bytes = 0
        self._has_output = anyio.Event()
        self._has_space = anyio.Event()
        self._has_room = anyio.Event()  # the outbox fell below OUTBOX_LOW_BYTES (or waiting is pointless)
        self._input_closed = False  # the client closed stdin: what is left to read is finite, read it regardless
        self._drained = anyio.Event()  # set by the writer when the outbox is empty and nothing is being written
        self._writing = False  # a batch taken off the outbox is still being written
        self._pending: dict[int, _Outgoing] = {}
        self._withdrawn: deque[int] = deque(maxlen=WITHDRAWN_KEPT)  # the latest ids `retract` gave up waiting for
        self._ids = itertools.count(1)
        self._in_flight = 0
        # The requests of batches not yet answered, by id (ids are the client's, unique among its requests in
        # flight): where `respond` puts a response sent out of band. Emptied as they are answered.
        self._batched: dict[Any, list[_Slot]] = {}
        self._no_requests_in_flight = anyio.Event()
        self._task_group: TaskGroup | None = None
        self._broken = False
        self.closing = False

    # --- serving ---

    async def serve(self, dispatcher: Dispatcher, source: LineSource, sink: LineSink) -> None:
        """Read until EOF, then cancel everything, wait for it within the deadline, flush, and return."""
        self._dispatcher = dispatcher
        async with anyio.create_task_group() as task_group:
            self._task_group = task_group
            task_group.start_soon(self._write_loop, sink)
            async for line in source:
                self._on_line(line)
                if self._outbox_bytes > OUTBOX_HIGH_BYTES and not self._input_closed:
                    await self._wait_for_room()
            await self._shut_down()
            task_group.cancel_scope.cancel()

    async def _wait_for_room(self) -> None:
        """Read no more input until the client has taken most of what is queued for it, or closed stdin."""
        log.info("%d bytes queued for the client: reading paused until it reads", self._outbox_bytes)
        while self._outbox_bytes > OUTBOX_LOW_BYTES and not self._input_closed and not self._broken:
            self._has_room = anyio.Event()
            await self._has_room.wait()

    def input_closed(self) -> None:
        """The input is finite now (the client closed stdin, which the transport sees even while paused, or EOF was
        read): stop waiting for the client to read. What is left is bounded by the pipe's capacity, and the EOF
        behind it must be reached for the bounded exit of I17."""
        self._input_closed = True
        self._has_room.set()

    def spawn(self, function: Callable[..., Coroutine[Any, Any, Any]], *args: Any) -> None:
        """Start a task owned by the connection (it outlives the request that started it)."""
        assert self._task_group is not None
        self._task_group.start_soon(function, *args)

    def _on_line(self, line: bytes | Oversized) -> None:
        incoming = classify(line)
        if isinstance(incoming, IncomingBatch):
            self._on_batch(incoming)
        else:
            self._admit(incoming, None)

    def _on_batch(self, batch: IncomingBatch) -> None:
        """Admit a batch's entries in order, as separate lines; its answers go into one array (see the module)."""
        answers = _Batch()
        for entry in batch.entries:
            self._admit(entry, answers)
        answers.sealed = True
        self._flush_if_answered(answers)

    def _admit(self, incoming: Incoming, batch: _Batch | None) -> None:
        """One message, a line's or a batch entry's; its answer goes to `batch`'s array if it came in one."""
        if isinstance(incoming, IncomingRequest):
            slot = self._slot(batch, incoming.id) if batch is not None else None
            try:
                context = self._dispatcher.prepare(incoming)
            except Exception:
                log.exception("failed to prepare %s", incoming.method)
                self._reply(error_message(incoming.id, ErrorCode.INTERNAL_ERROR, "Internal error"), slot)
                return
            self._in_flight += 1
            self.spawn(self._answer, incoming, context, slot)
        elif isinstance(incoming, IncomingNotification):
            try:
                self._dispatcher.notify(incoming.method, incoming.params)
            except Exception:  # a notification never gets a reply, not even an error
                log.exception("failed to handle notification %s", incoming.method)
        elif isinstance(incoming, IncomingResponse):
            self._on_response(incoming)
        else:
            log.warning("rejected %s: %s", "a batch entry" if batch is not None else "line", incoming.message)
            message = error_message(incoming.id, incoming.code, incoming.message)
            if batch is None:
                self.send(message)
            else:
                batch.parts.append(self._encode(message, newline=False))

    def _slot(self, batch: _Batch, request_id: Any) -> _Slot:
        slot = _Slot(batch, len(batch.parts), request_id)
        batch.parts.append(None)
        batch.waiting += 1
        self._batched.setdefault(request_id, []).append(slot)
        return slot

    def _reply(self, response: dict[str, Any] | None, slot: _Slot | None) -> None:
        """A request's response: written now, or put in its place in its batch's array (None: it needs none, it was
        answered out of band)."""
        if slot is None:
            if response is not None:
                self.send(response)
            return
        if slot.filled:
            return
        slot.filled = True
        others = self._batched[slot.request_id]
        others.remove(slot)
        if not others:
            del self._batched[slot.request_id]
        batch = slot.batch
        if response is not None:
            batch.parts[slot.index] = self._encode(response, newline=False)
        batch.waiting -= 1
        self._flush_if_answered(batch)

    def _flush_if_answered(self, batch: _Batch) -> None:
        if batch.sealed and not batch.waiting:
            data = batch.line()
            if data is not None:
                self._queue(data)

    def respond(self, response: dict[str, Any]) -> None:
        """A response sent out of band, outside its request's own task (whose answer is then None): a cancel answers
        a held v2 prompt at once. It goes into its batch's array if the request came in one, else out now."""
        slots = self._batched.get(response.get("id"))
        self._reply(response, slots[0] if slots else None)

    async def _answer(self, request: IncomingRequest, context: Any, slot: _Slot | None) -> None:
        try:
            self._reply(await self._dispatcher.answer(request, context), slot)
        finally:
            if slot is not None and not slot.filled:
                self._reply(None, slot)  # never answered (it failed, or was cancelled): the batch still ends
            self._dispatcher.after_response(context)
            self._in_flight -= 1
            if self._in_flight == 0:
                self._no_requests_in_flight.set()

    async def _shut_down(self) -> None:
        self.closing = True
        self._dispatcher.closing()
        for request_id in list(self._pending):
            self._resolve(request_id, error={"code": ErrorCode.REQUEST_CANCELLED, "message": "connection closed"})
        with anyio.move_on_after(self._cleanup_deadline + ANSWER_SLACK) as waiting:
            while self._in_flight:
                self._no_requests_in_flight = anyio.Event()
                await self._no_requests_in_flight.wait()
            # A turn can outlive its request (ACP v2 answers a prompt at insertion): its end, and the steering
            # prompts it hands over to, are recorded only as it ends, so the store is closed only after that.
            await self._dispatcher.turns_ended()
        if self._in_flight:
            log.warning("exiting with %d request(s) unanswered", self._in_flight)
        elif waiting.cancelled_caught:
            log.warning("exiting with turns still running at the cleanup deadline")
        with anyio.move_on_after(DRAIN_TIMEOUT):
            await self._dispatcher.drain()
        self._dispatcher.exiting()
        await self._dispatcher.released(RELEASE_TIMEOUT)
        with anyio.move_on_after(FLUSH_TIMEOUT):
            # A batch taken off the outbox is not written yet either: a regular file is written from a worker
            # thread, and cancelling the writer before that thread ran lost the last answers (`printf
            # '<initialize>' | acp-server > out.jsonl` wrote nothing).
            while (self._outbox or self._writing) and not self._broken:
                self._drained = anyio.Event()
                await self._drained.wait()

    # --- output ---

    def send(self, message: dict[str, Any], *, right_size: bool = True) -> None:
        """Queue a message for the writer. Synchronous, so it can never be interleaved or reordered.

        `right_size` copies the line into bytes of its own length: orjson (3.12 and later) hands back its whole
        growth buffer, 4 KB at least, and what nothing holds back (responses, session notifications, a load's
        replay) can queue by the thousand in one loop iteration (a burst of 1,000 `session/new`: 12 MB of buffers
        for 2.3 MB of lines, which the process keeps as RSS). Turn output (`send_fenced`) skips the copy: it waits
        at HIGH_WATER, so its buffers are bounded, and it is the per-chunk hot path."""
        if self._broken:
            return
        data = self._encode(message, right_size=right_size)
        if data is not None:
            self._queue(data)

    def _encode(self, message: dict[str, Any], *, newline: bool = True, right_size: bool = True) -> bytes | None:
        """The message serialised (one line, with its newline unless told); None for a request or notification that
        cannot be, a response that cannot be becomes an internal error (`send`)."""
        dumps, option = orjson.dumps, orjson.OPT_APPEND_NEWLINE if newline else 0
        data: bytes | None
        try:
            data = dumps(message, option=option)
        except TypeError:
            data = _dumps_sanitized(message, option)
        if right_size and data is not None:
            data = bytes(memoryview(data))
        if data is None:
            log.error("cannot serialize an outgoing %s", message.get("method", "response"))
            if "id" not in message or "method" in message:
                return None
            data = dumps(error_message(message["id"], ErrorCode.INTERNAL_ERROR, "Internal error"), option=option)
        return data

    def _queue(self, data: bytes) -> None:
        if self._broken:
            return
        self._outbox.append(data)
        self._outbox_bytes += len(data)
        self._has_output.set()

    async def send_fenced(self, message: dict[str, Any], fence: Fence) -> bool:
        """Queue turn output unless its turn is over; waits while the client is far behind."""
        if self._broken:
            # Nothing is queued any more, so the wait below never comes: yield here, or a turn that emits without
            # I/O (a long scripted reply) would hold the loop and its cancel would never land.
            await anyio.lowlevel.checkpoint()
        while self._outbox_full() and not self._broken:
            # Every waiting turn shares one event: replacing it while others wait on it would strand them.
            if self._has_space.is_set():
                self._has_space = anyio.Event()
            await self._has_space.wait()
        if fence.fenced:
            return False
        self.send(message, right_size=False)
        return True

    def _outbox_full(self) -> bool:
        return len(self._outbox) >= HIGH_WATER or self._outbox_bytes >= OUTBOX_HIGH_BYTES

    def notify(self, method: str, params: dict[str, Any]) -> None:
        self.send({"jsonrpc": "2.0", "method": method, "params": params})

    async def _write_loop(self, sink: LineSink) -> None:
        outbox = self._outbox
        while True:
            if not outbox:
                self._drained.set()
                self._has_output = anyio.Event()
                await self._has_output.wait()
            batch: list[bytes] = []
            size = 0
            while outbox and size < BATCH_BYTES:
                data = outbox.popleft()
                batch.append(data)
                size += len(data)
            self._outbox_bytes -= size
            if not self._outbox_full():
                self._has_space.set()
            if self._outbox_bytes <= OUTBOX_LOW_BYTES:
                self._has_room.set()
            self._writing = True
            try:
                await sink.write(b"".join(batch))
            except OSError as exc:
                # The client is gone (EPIPE): write nothing more. Never a crash: the transport has ended the input,
                # so the EOF shutdown follows and still cancels turns and kills children.
                log.info("the client closed its end while output was written: %s", exc)
                self._broken = True
                outbox.clear()
                self._outbox_bytes = 0
                self._has_space.set()
                self._has_room.set()
            finally:
                self._writing = False

    # --- our requests to the client ---

    async def request(self, method: str, params: dict[str, Any], fence: Fence | None = None) -> Any:
        """Send a request to the client and wait for its answer, cancellably.

        If the caller is cancelled first, the request is retracted with `$/cancel_request` and a late answer is
        ignored, because its pending entry is gone.
        """
        if self._broken:
            raise ClientRequestError(method, ErrorCode.REQUEST_CANCELLED, "connection closed")
        if self.closing:
            # stdin is closed, so no answer can come; cleanup requests (terminal/kill, terminal/release) are still
            # written, best effort, because a client that still reads stdout must learn of them.
            self.send({"jsonrpc": "2.0", "id": next(self._ids), "method": method, "params": params})
            raise ClientRequestError(method, ErrorCode.REQUEST_CANCELLED, "connection closed")
        if fence is not None and fence.fenced:
            raise ClientRequestError(method, ErrorCode.REQUEST_CANCELLED, "the turn has ended")
        request_id = next(self._ids)
        entry = _Outgoing(method)
        self._pending[request_id] = entry
        if fence is not None:
            fence.pending_requests.add(request_id)
        self.send({"jsonrpc": "2.0", "id": request_id, "method": method, "params": params})
        try:
            await entry.done.wait()
        finally:
            if fence is not None:
                fence.pending_requests.discard(request_id)
            if not entry.done.is_set():
                self.retract(request_id)
        if entry.error is not None:
            code = entry.error.get("code")
            message = entry.error.get("message")
            raise ClientRequestError(
                method,
                code if isinstance(code, int) else ErrorCode.INTERNAL_ERROR,
                message if isinstance(message, str) else "error",
            )
        return entry.result

    def retract(self, request_id: int) -> None:
        """Stop waiting for one of our requests and tell the client (`$/cancel_request`). Idempotent."""
        if request_id in self._pending:
            self._resolve(request_id, error={"code": ErrorCode.REQUEST_CANCELLED, "message": "request cancelled"})
            self._withdrawn.append(request_id)
            self.notify("$/cancel_request", {"requestId": request_id})

    def _resolve(self, request_id: int, result: Any = None, error: dict[str, Any] | None = None) -> None:
        entry = self._pending.pop(request_id)
        entry.result, entry.error = result, error
        entry.done.set()

    def _on_response(self, response: IncomingResponse) -> None:
        request_id = response.id
        # Our ids are JSON integers, and a JSON id matches by type and value: `true`, `1.0` and `"1"` are not 1,
        # though Python's `True == 1 == 1.0` finds request 1 by them (so `type(...) is int`: a bool is an int).
        if type(request_id) is not int or request_id not in self._pending:
            # A late answer to a request we retracted, or a stray: ignoring it is the whole point of retracting. The
            # first is expected (v1 wants a withdrawn permission request answered `cancelled`), so only at debug.
            if type(request_id) is int and request_id in self._withdrawn:
                self._withdrawn.remove(request_id)
                log.debug("ignored the answer to request %d, which we had withdrawn", request_id)
            else:
                log.warning("ignored a response to no pending request (id %s)", _shown_id(request_id))
            return
        self._resolve(request_id, result=response.result, error=response.error)

    @property
    def pending_client_requests(self) -> int:
        return len(self._pending)

    @property
    def requests_in_flight(self) -> int:
        return self._in_flight


def _shown_id(request_id: Any) -> str:
    """The id as JSON, cut short: it came from the client and goes into a one-line log message."""
    try:
        shown = orjson.dumps(request_id).decode()
    except TypeError:  # nested too deep for orjson
        shown = type(request_id).__name__
    return shown if len(shown) <= 80 else shown[:77] + "..."


def _dumps_sanitized(message: dict[str, Any], option: int) -> bytes | None:
    """A message holding text that is not valid Unicode (a lone surrogate that got past every way in), with that
    text repaired; None if it still cannot be serialized. The ways in sanitize already (runtime/text_guard.py):
    this is the last line, so one bad character never costs a message."""
    try:
        return orjson.dumps(sanitize_json(message), option=option)
    except TypeError:
        return None
