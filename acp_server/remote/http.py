"""One Streamable HTTP connection (REMOTE.md, "What the transport is"): POSTed messages in, SSE streams out, turned
into the stdio seam as websocket.py does for frames: the handler reads lines and writes lines, and never learns which
request or stream carried them.

A connection is made by a POSTed `initialize` (app.py), whose answer is taken out of the handler's output and becomes
that POST's body; every later message is POSTed with `Acp-Connection-Id` and answered 202 once the handler has taken
it (input is pulled, as over WebSocket: a client posting faster than it is served waits for its own 202s).

Output is routed, line by line, to a stream. A message with the `params.sessionId` of a session the client has
named (POSTed for, opened a stream of) or been told of in an answer (`session/new`, `session/fork`) goes to that
session's stream: its `session/update`s and its requests to the client, and a `$/cancel_request` retracting such a
request follows that request there. A response goes to the session's stream when the request it answers was POSTed
with `Acp-Session-Id`. Everything else, and the messages of a session the client never named (a subagent's child),
goes to the connection's stream. Each stream is an ordered queue, so a `session/load` replay reaches its stream
before the load's response, which follows it there. The connection's stream may have several readers at once (a
client that opens it around each request, such as acp-openai-gateway around each `session/new`, several at a time):
each reader after the first gets its own queue of everything written for that stream while it reads, and picks
out its answers by id; what waited for a reader goes to the first, and what a reader got is not kept for a later
one. A queue exists from the first message for it, whether or not a reader is attached yet (a session's stream is
opened after `session/new`'s answer names it): messages wait there for the reader. Output never waits for the
network (decision 8): when a connection holds more than `max_queued_bytes` that no reader has taken, its client is
too slow or gone and it is ended as a dead peer (writes raise BrokenPipeError from then on, as on a closed stdout),
so a turn's cancel never waits on a socket.

A connection ends as stdio's does at EOF (the handler's lines end, its turns are cancelled, its sessions stay):
on `DELETE` (its streams closed at once, what it writes afterwards dropped), on a dead peer, when it has had no
request and no open stream for `idle_timeout` (the HTTP profile's dead peer, decision 6), or on a drain (what the
handler writes while ending is flushed to open readers within `flush_timeout`).
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import AsyncGenerator, Sequence
from typing import Any

import anyio
import anyio.lowlevel
import orjson

from acp_server.jsonrpc.transport import Oversized
from acp_server.remote.peer import ConnectionHandler, Peer
from acp_server.remote.websocket import Receive, Send

__all__ = ["HttpConnection", "id_key", "is_event_stream", "session_of"]

log = logging.getLogger(__name__)

EVENT_STREAM = b"text/event-stream"
# The first bytes of a stream, at once: the SDK's client waits for a session stream's response before it posts that
# session's messages, and a proxy in between may hold the headers back until a body comes.
_OPENED = b": open\n\n"
_KEEPALIVE = b": keep-alive\n\n"


def id_key(value: object) -> bytes | None:
    """A JSON-RPC id as a dictionary key: `1` and `"1"` are different ids."""
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        return None
    return orjson.dumps(value)


def session_of(message: dict[str, Any]) -> str | None:
    params = message.get("params")
    session = params.get("sessionId") if isinstance(params, dict) else None
    return session if isinstance(session, str) else None


class _Stream:
    """One stream's queue of SSE events, and whether a reader is attached."""

    def __init__(self) -> None:
        self.events: deque[bytes] = deque()
        self.queued_bytes = 0
        self.ready = anyio.Event()
        self.emptied = anyio.Event()  # set while nothing waits in it
        self.emptied.set()
        self.reader = False
        self.closed = False
        self.scope: anyio.CancelScope | None = None  # the reader's, cancelled on a dead peer

    def put(self, line: bytes) -> None:
        self.events.append(b"data: " + line + b"\n\n")
        self.queued_bytes += len(line)
        self.ready.set()
        if self.emptied.is_set():
            self.emptied = anyio.Event()

    def close(self) -> None:
        self.closed = True
        self.ready.set()

    def discard(self) -> None:
        self.events.clear()
        self.queued_bytes = 0
        self.emptied.set()
        self.close()


class HttpConnection:
    """One connection of the HTTP profile, from its `initialize` to its end. It is the handler's `LineSink`."""

    def __init__(
        self,
        peer: Peer,
        *,
        max_queued_bytes: int,
        flush_timeout: float,
        idle_timeout: float,
        keepalive_interval: float,
        max_session_streams: int,
    ) -> None:
        self.peer = peer
        self._max_queued_bytes = max_queued_bytes
        self._flush_timeout = flush_timeout
        self._idle_timeout = idle_timeout
        self._keepalive_interval = keepalive_interval
        self._max_session_streams = max_session_streams
        self._input, self._lines = anyio.create_memory_object_stream[bytes | Oversized](0)
        self._streams: dict[str | None, _Stream] = {None: _Stream()}  # None: the connection's own stream
        # Readers of the connection's stream beyond the first, each with its own copy of what is written for it from
        # its GET on: the same principal's same connection, so nothing is shown that it could not read anyway.
        self._extra_readers: list[_Stream] = []
        self._routes: dict[bytes, str] = {}  # a POSTed request's id -> the session its answer goes to
        self._asked: dict[bytes, str] = {}  # the id of a request to the client -> its session
        # Sessions the client has named (POSTed for, opened a stream of) or been told of in an answer: only these have
        # streams of their own; messages of any other (a subagent's child session) go on the connection's stream,
        # which the client reads anyway, rather than waiting for a reader that will never come.
        self._known: set[str] = set()
        self._initialize: bytes | None = None  # the id of the `initialize` whose answer a POST waits for
        self._initialized = anyio.Event()
        self.initialize_answer: bytes | None = None
        self._scope = anyio.CancelScope()  # everything of this connection (a drain's last resort)
        self._busy = 0  # requests in progress and open streams: while any, the connection is not idle
        self._last_active = anyio.current_time()
        self._gone = False  # deleted or a dead peer: nobody will read what is written
        self._ending = False
        self.why = "the handler returned"
        self.ended = anyio.Event()

    # --- ended from outside ---

    def stop(self, why: str, code: int = 0) -> None:
        """End the handler's input as at stdin EOF (a drain; `code` is WebSocket's). What it writes while ending
        still reaches open streams, within `flush_timeout`."""
        if not self._ending:
            self._ending = True
            self.why = why
        self._input.close()

    def delete(self) -> None:
        """`DELETE`: the streams close now and what is written from now on is dropped; then as `stop`."""
        self._drop_output()
        self.stop("the client deleted the connection")

    def cancel(self) -> None:
        self._scope.cancel()

    def _all_streams(self) -> list[_Stream]:
        return [*self._streams.values(), *self._extra_readers]

    def _drop_output(self) -> None:
        self._gone = True
        for stream in self._all_streams():
            stream.discard()

    def _dead_peer(self, why: str) -> None:
        log.warning("remote connection %s: %s: ended as a dead peer", self.peer.connection_id, why)
        self.stop(f"dead peer: {why}")
        self._drop_output()
        for stream in self._all_streams():
            if stream.scope is not None:
                stream.scope.cancel()  # its reader may wait on a socket nobody reads

    # --- the handler's side ---

    async def write(self, data: bytes) -> None:
        """`LineSink.write`: each line to its stream's queue; never waits for a reader."""
        if self._gone:
            raise BrokenPipeError("the remote connection is closed")
        for line in data.split(b"\n"):
            if line.strip():
                self._route(line)
        if sum(stream.queued_bytes for stream in self._all_streams()) > self._max_queued_bytes:
            self._dead_peer("more queued than the client reads")
            raise BrokenPipeError("the client is not reading: the connection was ended")
        await anyio.lowlevel.checkpoint()  # one turn for the readers per write, as websocket.py does

    def _route(self, line: bytes) -> None:
        try:
            message = orjson.loads(line)
        except orjson.JSONDecodeError:
            message = None
        session: str | None = None
        if isinstance(message, dict):
            key = id_key(message.get("id"))
            if "method" in message:
                session = session_of(message)
                if session not in self._known:
                    session = None  # a session the client never named (a subagent's child): no stream of its own
                if session is not None and key is not None:
                    self._asked[key] = session
                elif message["method"] == "$/cancel_request" and isinstance(message.get("params"), dict):
                    # The retraction of a request to the client follows that request on its stream, so it is read
                    # in the order written (before the turn's last updates).
                    asked = id_key(message["params"].get("requestId"))
                    session = self._asked.get(asked) if asked is not None else None
            elif key is not None:
                if key == self._initialize:  # the initialize POST's body, not a stream's
                    self._initialize = None
                    self.initialize_answer = line
                    self._initialized.set()
                    return
                session = self._routes.pop(key, None)
                result = message.get("result")
                if isinstance(result, dict) and isinstance(result.get("sessionId"), str):
                    self._known.add(result["sessionId"])  # named to the client (session/new, fork): it will open it
        stream = self._streams.get(session)
        if stream is None:
            stream = self._streams[session] = _Stream()
        if session is None and self._extra_readers:
            for extra in self._extra_readers:
                extra.put(line)
            if not stream.reader:
                return  # read already: kept for a later first reader, it would reach that client twice
        stream.put(line)

    async def _source(self) -> AsyncGenerator[bytes | Oversized, None]:
        async with self._lines:
            async for data in self._lines:
                yield data

    # --- the connection's life ---

    async def run(self, handler: ConnectionHandler) -> None:
        with self._scope:
            try:
                async with anyio.create_task_group() as group:
                    group.start_soon(self._expire_when_idle)
                    source = self._source()
                    try:
                        await handler(self.peer, source, self)
                    finally:
                        self._input.close()
                        self._initialized.set()  # an initialize never answered: its POST learns it now
                        with anyio.CancelScope(shield=True), anyio.move_on_after(self._flush_timeout):
                            await source.aclose()
                            self._lines.close()
                            await self._flushed()
                        group.cancel_scope.cancel()
            except Exception:  # a defect in the handler: this connection ends, the server and the others go on
                log.exception("remote connection %s: the handler failed", self.peer.connection_id)
                self.why = "the handler failed"
            finally:
                for stream in self._all_streams():
                    stream.close()  # each reader ends its response
                self.ended.set()

    async def _flushed(self) -> None:
        """Until every stream with a reader has sent what it holds (a stream nobody reads is not waited for)."""
        for stream in self._all_streams():
            if stream.reader:
                await stream.emptied.wait()

    async def _expire_when_idle(self) -> None:
        while True:
            idle = anyio.current_time() - self._last_active
            if self._busy == 0 and idle >= self._idle_timeout:
                log.warning(
                    "remote connection %s: no request and no open stream for %g s: ended as a dead peer",
                    self.peer.connection_id,
                    self._idle_timeout,
                )
                self.stop(f"dead peer: idle for {self._idle_timeout:g} s")
                return
            # Busy, it is looked at again a quarter of the bound later: expiry comes within 1.25 times the bound.
            await anyio.sleep(self._idle_timeout - idle if self._busy == 0 else self._idle_timeout / 4)

    def _enter(self) -> None:
        self._busy += 1

    def _leave(self) -> None:
        self._busy -= 1
        self._last_active = anyio.current_time()

    # --- requests ---

    async def initialize(self, line: bytes, request_id: object, timeout: float) -> bytes | None:
        """Hand over the `initialize` and wait (up to `timeout`) for its answer; None if none came."""
        self._initialize = id_key(request_id)
        if not await self.post(line, {}, None):
            return None
        with anyio.move_on_after(timeout):
            await self._initialized.wait()
        return self.initialize_answer

    def expected_session(self, message: dict[str, Any]) -> str | None:
        """The session a POSTed message belongs to: its `params.sessionId`, or for the client's answer to a request
        of ours, that request's session."""
        if "method" in message:
            return session_of(message)
        key = id_key(message.get("id"))
        return self._asked.get(key) if key is not None else None

    async def post(self, line: bytes, message: dict[str, Any], session: str | None) -> bool:
        """Hand one message (`line`, parsed: `message`) to the handler; a request's answer will go to `session`'s
        stream. False when the connection has ended meanwhile."""
        key = id_key(message.get("id"))
        if session is not None:
            self._known.add(session)
        if key is not None:
            if "method" in message:
                if session is not None:
                    self._routes[key] = session
            else:
                self._asked.pop(key, None)
        self._enter()
        try:
            await self._input.send(line)
        except (anyio.ClosedResourceError, anyio.BrokenResourceError):
            if key is not None:
                self._routes.pop(key, None)
            return False
        finally:
            self._leave()
        return True

    def stream_refused(self, session: str | None) -> tuple[int, str] | None:
        """Why a stream GET cannot be served, as a status and words, or None: a session's stream has a reader already
        (409), too many streams are open (429: session streams and readers of the connection's beyond its first), or
        the connection has just ended (404)."""
        if self._gone or self.ended.is_set():
            return 404, "unknown Acp-Connection-Id"  # it ended between the lookup and now
        stream = self._streams.get(session)
        if session is not None and stream is not None and stream.reader:
            return 409, "this stream already has a reader on this connection"
        readers = sum(1 for key, open_ in self._streams.items() if key is not None and open_.reader)
        readers += len(self._extra_readers)
        extra = session is None and stream is not None and stream.reader
        if (session is not None or extra) and readers >= self._max_session_streams:
            return 429, f"{self._max_session_streams} streams are open on this connection"
        return None

    async def serve_stream(
        self, session: str | None, receive: Receive, send: Send, headers: Sequence[tuple[bytes, bytes]] = ()
    ) -> None:
        """One SSE GET (`stream_refused` said yes, nothing awaited since): the stream's events as they come, a
        comment every `keepalive_interval`, until the connection ends or the client goes."""
        stream = self._streams.get(session)
        if stream is None:
            stream = self._streams[session] = _Stream()
        elif session is None and stream.reader:  # a further reader of the connection's stream: a queue of its own
            stream = _Stream()
            self._extra_readers.append(stream)
        if session is not None:
            self._known.add(session)
        stream.reader = True
        self._enter()
        try:
            await send(
                {
                    "type": "http.response.start",
                    "status": 200,
                    "headers": [(b"content-type", EVENT_STREAM), (b"cache-control", b"no-cache"), *headers],
                }
            )
            await send({"type": "http.response.body", "body": _OPENED, "more_body": True})
            async with anyio.create_task_group() as group:
                stream.scope = group.cancel_scope

                async def until_the_client_goes() -> None:
                    while (await receive())["type"] != "http.disconnect":
                        pass
                    group.cancel_scope.cancel()

                group.start_soon(until_the_client_goes)
                await self._pump(stream, send)
                group.cancel_scope.cancel()
        finally:
            stream.scope = None
            stream.reader = False
            if stream in self._extra_readers:
                self._extra_readers.remove(stream)
            self._leave()
            if session is not None and not stream.events and self._streams.get(session) is stream:
                del self._streams[session]  # nothing kept for a session stream nobody reads and nothing waits in

    async def _pump(self, stream: _Stream, send: Send) -> None:
        while True:
            while stream.events:
                event = stream.events[0]
                await send({"type": "http.response.body", "body": event, "more_body": True})
                if stream.events and stream.events[0] is event:  # `discard` may have emptied it meanwhile
                    stream.events.popleft()
                    stream.queued_bytes -= len(event) - 8  # "data: " and "\n\n" were not counted
            stream.emptied.set()
            if stream.closed:
                with anyio.move_on_after(self._flush_timeout):
                    await send({"type": "http.response.body", "body": b"", "more_body": False})
                return
            stream.ready = anyio.Event()
            with anyio.move_on_after(self._keepalive_interval) as quiet:
                await stream.ready.wait()
            if quiet.cancelled_caught:
                await send({"type": "http.response.body", "body": _KEEPALIVE, "more_body": True})


def is_event_stream(accept: bytes | None) -> bool:
    return accept is not None and EVENT_STREAM in accept.lower()
