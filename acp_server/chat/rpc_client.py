"""JSON-RPC 2.0 over the agent's stdin/stdout, from the client's side of ACP.

The chat client needs three things from the wire: to send requests and await their responses, to send
notifications (`session/cancel` must go out the instant it is decided, never behind a response), and to serve the
agent's own requests (`session/request_permission`) while one of ours is waiting. One reader task classifies each
line; the agent's requests run as tasks owned by the connection, its notifications are handled inline, in order.
When the agent's stdout ends, `run` raises `AgentGoneError`, which ends the whole conversation it belongs to.
"""

from __future__ import annotations

import itertools
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import orjson
from anyio.abc import ByteReceiveStream, ByteSendStream, TaskGroup
from anyio.streams.buffered import BufferedByteReceiveStream

__all__ = ["AgentGoneError", "ResponseError", "RpcClient"]

MAX_LINE_BYTES = 64 * 1024 * 1024
METHOD_NOT_FOUND = -32601
INTERNAL_ERROR = -32603

RequestHandler = Callable[[str, Any, Any], Awaitable[Any]]  # (method, params, id) -> result
NotificationHandler = Callable[[str, Any], None]  # (method, params)


class ResponseError(Exception):
    """An error response: from the agent to one of our requests, or ours to one of its requests."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


class AgentGoneError(Exception):
    """The agent closed its stdout (it exited or crashed) or stopped reading its stdin."""


class _Pending:
    def __init__(self, on_answer: Callable[[], None] | None) -> None:
        self.done = anyio.Event()
        self.message: dict[str, Any] | None = None
        self.on_answer = on_answer


class RpcClient:
    def __init__(
        self,
        send: ByteSendStream,
        receive: ByteReceiveStream,
        on_request: RequestHandler,
        on_notification: NotificationHandler,
    ) -> None:
        self._send = send
        self._receive = BufferedByteReceiveStream(receive)
        self._on_request = on_request
        self._on_notification = on_notification
        self._write_lock = anyio.Lock()
        self._ids = itertools.count(1)
        self._pending: dict[int, _Pending] = {}
        self._ended = False
        self._closing = False

    def closing(self) -> None:
        """We are shutting the agent down: its stdout ending is expected, not a failure."""
        self._closing = True

    async def run(self) -> None:
        async with anyio.create_task_group() as tasks:
            while (line := await self._read_line()) is not None:
                self._classify(line, tasks)
            self._ended = True
            for pending in self._pending.values():
                pending.done.set()
            if not self._closing:
                raise AgentGoneError("the agent closed its output")

    async def request(self, method: str, params: Any, on_answer: Callable[[], None] | None = None) -> Any:
        """Send a request and return its result; an error response raises ResponseError. `on_answer` is called by
        the reader the moment the response is read, before the next line is: the caller learns where the answer
        fell among the notifications, which it could not from the time it resumes."""
        request_id = next(self._ids)
        pending = self._pending[request_id] = _Pending(on_answer)
        try:
            await self._write({"jsonrpc": "2.0", "id": request_id, "method": method, "params": params})
            await pending.done.wait()
        finally:
            del self._pending[request_id]
        message = pending.message
        if message is None:
            raise AgentGoneError(f"the agent stopped before answering {method}")
        if "error" in message:
            error = message["error"] if isinstance(message["error"], dict) else {}
            raise ResponseError(int(error.get("code", INTERNAL_ERROR)), str(error.get("message", "unknown error")))
        return message.get("result")

    async def notify(self, method: str, params: Any) -> None:
        await self._write({"jsonrpc": "2.0", "method": method, "params": params})

    async def _read_line(self) -> bytes | None:
        try:
            return await self._receive.receive_until(b"\n", MAX_LINE_BYTES)
        except (anyio.EndOfStream, anyio.IncompleteRead, anyio.BrokenResourceError, anyio.ClosedResourceError):
            return None
        except anyio.DelimiterNotFound:
            raise AgentGoneError(f"the agent wrote a line longer than {MAX_LINE_BYTES} bytes") from None

    def _classify(self, line: bytes, tasks: TaskGroup) -> None:
        try:
            message = orjson.loads(line)
        except orjson.JSONDecodeError:
            return  # not ours to fix; an agent's stray output must not end the conversation
        if not isinstance(message, dict):
            return
        method = message.get("method")
        if isinstance(method, str):
            if "id" in message:
                tasks.start_soon(self._serve, method, message.get("params"), message["id"])
            else:
                self._on_notification(method, message.get("params"))
        elif isinstance(message.get("id"), int) and message["id"] in self._pending:
            pending = self._pending[message["id"]]
            pending.message = message
            if pending.on_answer is not None:
                pending.on_answer()
            pending.done.set()

    async def _serve(self, method: str, params: Any, request_id: Any) -> None:
        reply: dict[str, Any] = {"jsonrpc": "2.0", "id": request_id}
        try:
            reply["result"] = await self._on_request(method, params, request_id)
        except ResponseError as exc:
            reply["error"] = {"code": exc.code, "message": exc.message}
        await self._write(reply)

    async def _write(self, message: dict[str, Any]) -> None:
        if self._ended:
            raise AgentGoneError("the agent has stopped")
        data = orjson.dumps(message) + b"\n"
        try:
            async with self._write_lock:
                await self._send.send(data)
        except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
            raise AgentGoneError("the agent stopped reading its input") from None
