"""Stand-ins for the chat's edges, so its logic can be driven message by message: a scripted agent on in-memory
pipes (the real `RpcClient` reads them, so the order of the wire is the order it sees), a screen that keeps what
was drawn, and a keyboard the test types on.

The end-to-end tests (tests/e2e/test_chat_pty.py) use the real acp-server, which never produces some of the orders
a v2 agent may (an idle snapshot before a held prompt's response, a response and an idle in one read).
"""

from __future__ import annotations

import math
import sys
from typing import Any

import anyio
import orjson
from anyio.abc import ByteReceiveStream, ByteSendStream
from anyio.streams.buffered import BufferedByteReceiveStream
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from acp_server.chat.terminal import Terminal


class _PipeIn(ByteSendStream):
    def __init__(self, stream: MemoryObjectSendStream[bytes]) -> None:
        self._stream = stream

    async def send(self, item: bytes) -> None:
        self._stream.send_nowait(item)

    async def aclose(self) -> None:
        self._stream.close()


class _PipeOut(ByteReceiveStream):
    def __init__(self, stream: MemoryObjectReceiveStream[bytes]) -> None:
        self._stream = stream
        self._left = b""

    async def receive(self, max_bytes: int = 65536) -> bytes:
        if not self._left:
            self._left = await self._stream.receive()
        data, self._left = self._left[:max_bytes], self._left[max_bytes:]
        return data

    async def aclose(self) -> None:
        self._stream.close()


def _pipe() -> tuple[_PipeIn, _PipeOut]:
    send, receive = anyio.create_memory_object_stream[bytes](math.inf)
    return _PipeIn(send), _PipeOut(receive)


class ScriptedAgent:
    """The agent's side of the chat's pipes: `stdin` and `stdout` as `AgentChild` has them; the test reads what
    the chat sent and writes the agent's lines."""

    def __init__(self) -> None:
        self.stdin, self._from_chat = _pipe()
        self._to_chat, self.stdout = _pipe()
        self._lines = BufferedByteReceiveStream(self._from_chat)

    async def read(self) -> dict[str, Any]:
        """The next message the chat sent."""
        message = orjson.loads(await self._lines.receive_until(b"\n", 1 << 20))
        assert isinstance(message, dict)
        return message

    async def write(self, *messages: dict[str, Any]) -> None:
        """`messages` in one write: the chat's reader gets them in one read, with no pause between them."""
        await self._to_chat.send(b"".join(orjson.dumps(m) + b"\n" for m in messages))

    async def close(self) -> None:
        for stream in (self.stdin, self._from_chat, self._to_chat, self.stdout):
            await stream.aclose()


def answer(request: dict[str, Any], result: Any) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": request["id"], "result": result}


def refuse(request: dict[str, Any], code: int, message: str) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": request["id"], "error": {"code": code, "message": message}}


def update(session_id: str, fields: dict[str, Any]) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "method": "session/update", "params": {"sessionId": session_id, "update": fields}}


class Screen(Terminal):
    """A terminal that keeps what was written to it (stdout and stderr apart)."""

    def __init__(self) -> None:
        super().__init__(sys.stdout, sys.stderr, colour=False)
        self.out = ""
        self.err = ""

    def write(self, text: str) -> None:
        self.out += text

    def write_error(self, text: str) -> None:
        self.err += text


class Keyboard:
    """`LineInput` as the questions use it: the lines the test types, in order, kept until asked for."""

    def __init__(self) -> None:
        self._send, self._receive = anyio.create_memory_object_stream[str | None](math.inf)

    def type(self, line: str) -> None:
        self._send.send_nowait(line)

    async def next_line(self) -> str | None:
        return await self._receive.receive()

    def discard_typed_ahead(self) -> None:
        pass  # the tests type an answer only for the question they mean it for

    def close(self) -> None:
        self._send.close()
        self._receive.close()
