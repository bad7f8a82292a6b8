"""One agent, two editors: a v1 and a v2 connection served in one process over in-memory transports (issue 22 item 1,
shared/design/REMOTE.md "One process, many connections").

Each connection is the real one (jsonrpc/connection.py, protocol/dispatcher.py) on the real agent (agent/agent.py),
with the real scripted model, session store and turn core; only the transport is a pair of in-memory streams in
place of stdin and stdout. Every line a connection writes is validated against the official schema of the version
that connection negotiated (tests/support/wire_schema.py, as the stdio harness does), and every request gets exactly
one response. What is proved: both stream at once; a cancel on one ends that turn `cancelled` while the other runs on
and ends normally; a session's updates reach only its own connection; and the end of one connection (its EOF) ends
only its own turns.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import anyio
import orjson
import pytest
from anyio.abc import TaskGroup

from acp_server.agent.agent import Agent
from acp_server.cli.server import Served, build_agent, connect
from acp_server.jsonrpc.transport import Oversized
from acp_server.settings.config import Config
from tests.support.harness import GRACE, T_ACK, T_WAIT, request_key
from tests.support.wire_schema import WireValidator

pytestmark = pytest.mark.timeout(60)


class MemoryEditor:
    """One editor on an in-memory transport: what it sends is the connection's input (`lines`, ended by `hang_up`,
    as a closed stdin ends stdio's), what the connection writes (`write`, its `LineSink`) is logged and validated."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._send, self._receive = anyio.create_memory_object_stream[bytes](1000)
        self.validator = WireValidator()
        self.received: list[dict[str, Any]] = []
        self.sent_ids: list[Any] = []
        self._arrived = anyio.Event()
        self._ids = iter(range(1, 1_000_000))
        self.served = anyio.Event()  # its connection's `serve` has returned

    # --- the transport, as the connection sees it ---

    async def lines(self) -> AsyncIterator[bytes | Oversized]:
        async with self._receive:
            async for line in self._receive:
                yield line

    async def write(self, data: bytes) -> None:
        for line in data.splitlines():
            message = self.validator.server_wrote(line + b"\n")
            if message is not None:
                self.received.append(message)
        self._arrived.set()

    # --- the editor ---

    async def send(self, message: dict[str, Any]) -> None:
        message = {"jsonrpc": "2.0", **message}
        self.validator.client_sent(message)
        if "id" in message:
            self.sent_ids.append(message["id"])
        await self._send.send(orjson.dumps(message))

    async def request(self, method: str, params: dict[str, Any]) -> int:
        request_id = next(self._ids)
        await self.send({"id": request_id, "method": method, "params": params})
        return request_id

    async def call(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        request_id = await self.request(method, params)
        return await self.response(request_id)

    async def notify(self, method: str, params: dict[str, Any]) -> None:
        await self.send({"method": method, "params": params})

    async def hang_up(self) -> None:
        await self._send.aclose()

    async def wait_for(self, predicate: Callable[[dict[str, Any]], bool], timeout: float = T_WAIT) -> dict[str, Any]:
        with anyio.fail_after(timeout):
            while True:
                for message in self.received:
                    if predicate(message):
                        return message
                self._arrived = anyio.Event()
                await self._arrived.wait()

    async def response(self, request_id: int, timeout: float = T_WAIT) -> dict[str, Any]:
        def answers(message: dict[str, Any]) -> bool:
            return "method" not in message and message.get("id") == request_id

        return await self.wait_for(answers, timeout)

    async def probe(self, event: str, session_id: str) -> dict[str, Any]:
        def matches(message: dict[str, Any]) -> bool:
            params = message.get("params") or {}
            return (
                message.get("method") == "_scripted/probe"
                and params.get("event") == event
                and params.get("sessionId") == session_id
            )

        return await self.wait_for(matches)

    def session_ids(self) -> set[str]:
        """Every session id this editor was written about (updates, probes, requests to it)."""
        return {
            str(message["params"]["sessionId"])
            for message in self.received
            if isinstance(message.get("params"), dict) and "sessionId" in message["params"]
        }

    def texts(self, session_id: str) -> list[str]:
        return [
            update["content"]["text"]
            for message in self.received
            if message.get("method") == "session/update" and message["params"]["sessionId"] == session_id
            for update in [message["params"]["update"]]
            if update.get("sessionUpdate") == "agent_message_chunk"
        ]

    def states(self, session_id: str) -> list[dict[str, Any]]:
        return [
            message["params"]["update"]
            for message in self.received
            if message.get("method") == "session/update"
            and message["params"]["sessionId"] == session_id
            and message["params"]["update"].get("sessionUpdate") == "state_update"
        ]

    def problems(self) -> list[str]:
        """Schema violations, and C1: every request answered exactly once, no answer to anything else."""
        problems = list(self.validator.violations)
        answered = [request_key(m["id"]) for m in self.received if "method" not in m and m.get("id") is not None]
        for request_id in self.sent_ids:
            count = answered.count(request_key(request_id))
            if count != 1:
                problems.append(f"C1: request {request_id!r} answered {count}x")
        if len(answered) != len(self.sent_ids):
            problems.append(f"C1: {len(answered)} responses to {len(self.sent_ids)} requests")
        return [f"{self.name}: {problem}" for problem in problems]


def _script(tag: str, gate: str) -> dict[str, Any]:
    return {"scripted": [{"say": f"{tag}-before"}, {"gate": gate}, {"say": f"{tag}-after"}]}


def _prompt(session_id: str, tag: str, gate: str) -> dict[str, Any]:
    return {"sessionId": session_id, "prompt": [{"type": "text", "text": tag}], "_meta": _script(tag, gate)}


@contextlib.asynccontextmanager
async def _agent_with(tmp_path: Path) -> AsyncIterator[tuple[Agent, Served, TaskGroup]]:
    config = Config(model="scripted", test_mode=True, cleanup_deadline=GRACE, state_dir=str(tmp_path))
    agent, served = build_agent(config)
    async with agent.running(), anyio.create_task_group() as connections:
        yield agent, served, connections


def _serve(agent: Agent, served: Served, connections: TaskGroup, editor: MemoryEditor) -> None:
    rpc, dispatcher = connect(agent, served)

    async def serve() -> None:
        try:
            await rpc.serve(dispatcher, editor.lines(), editor)
        finally:
            editor.served.set()

    connections.start_soon(serve)


async def _open(v1: MemoryEditor, v2: MemoryEditor, cwd: str) -> tuple[str, str]:
    """Both editors initialized (one per version) and each with a session of its own."""
    assert (await v1.call("initialize", {"protocolVersion": 1, "clientCapabilities": {}}))["result"][
        "protocolVersion"
    ] == 1
    assert (await v2.call("initialize", {"protocolVersion": 2, "capabilities": {}}))["result"]["protocolVersion"] == 2
    a = (await v1.call("session/new", {"cwd": cwd, "mcpServers": []}))["result"]["sessionId"]
    b = (await v2.call("session/new", {"cwd": cwd}))["result"]["sessionId"]
    return a, b


async def test_a_cancel_on_one_of_two_connections_ends_its_turn_and_the_other_streams_on_to_its_end(
    tmp_path: Path,
) -> None:
    v1, v2 = MemoryEditor("v1"), MemoryEditor("v2")
    async with _agent_with(tmp_path) as (agent, served, connections):
        _serve(agent, served, connections, v1)
        _serve(agent, served, connections, v2)
        a, b = await _open(v1, v2, str(tmp_path))

        # Both stream at once: each turn's first chunk reaches its own editor, and each parks on its gate.
        prompt_a = await v1.request("session/prompt", _prompt(a, "A", "ga"))
        prompt_b = await v2.request("session/prompt", _prompt(b, "B", "gb"))
        assert "messageId" in (await v2.response(prompt_b))["result"]  # v2: answered on insertion
        await v1.probe("gate_reached", a)
        await v2.probe("gate_reached", b)
        assert v1.texts(a) == ["A-before"] and v2.texts(b) == ["B-before"]

        # Another connection's session is not this one's to cancel: named from v2, v1's turn is untouched (the
        # round trip behind the cancel shows it was read: notifications are handled in arrival order).
        await v2.notify("session/cancel", {"sessionId": a})
        assert "result" in await v2.call("_acp_server/stats", {})
        running_a = agent.runs.running(a)
        assert running_a is not None and not running_a.cancelled
        # The cancel on the v1 connection ends its turn `cancelled`, at once; the v2 turn is untouched.

        await v1.notify("session/cancel", {"sessionId": a})
        assert (await v1.response(prompt_a, T_ACK))["result"] == {"stopReason": "cancelled"}
        assert [state["state"] for state in v2.states(b)] == ["running"]
        # ... and goes on to end normally once its gate opens.
        await v2.notify("_scripted/release", {"sessionId": b, "gate": "gb"})
        await v2.wait_for(lambda m: any(s.get("state") == "idle" for s in v2.states(b)))
        assert v2.states(b)[-1]["stopReason"] == "end_turn"
        assert v2.texts(b) == ["B-before", "B-after"] and v1.texts(a) == ["A-before"]

        # A session's updates and probes went to its own connection only.
        assert v1.session_ids() == {a} and v2.session_ids() == {b}

        await v1.hang_up()
        await v2.hang_up()
    assert v1.problems() == [] and v2.problems() == []


async def test_the_end_of_one_connection_cancels_only_its_own_turns(tmp_path: Path) -> None:
    v1, v2 = MemoryEditor("v1"), MemoryEditor("v2")
    async with _agent_with(tmp_path) as (agent, served, connections):
        _serve(agent, served, connections, v1)
        _serve(agent, served, connections, v2)
        a, b = await _open(v1, v2, str(tmp_path))
        prompt_a = await v1.request("session/prompt", _prompt(a, "A", "ga"))
        prompt_b = await v2.request("session/prompt", _prompt(b, "B", "gb"))
        await v1.probe("gate_reached", a)
        await v2.probe("gate_reached", b)

        # The v1 editor goes away (as at stdin EOF): its turn is answered `cancelled` and its connection ends...
        await v1.hang_up()
        assert (await v1.response(prompt_a, T_ACK))["result"] == {"stopReason": "cancelled"}
        with anyio.fail_after(T_WAIT):
            await v1.served.wait()
        # ... while the v2 turn still runs, and ends `end_turn` once its gate opens.
        assert [state["state"] for state in v2.states(b)] == ["running"]
        await v2.notify("_scripted/release", {"sessionId": b, "gate": "gb"})
        await v2.wait_for(lambda m: any(s.get("state") == "idle" for s in v2.states(b)))
        assert v2.states(b)[-1]["stopReason"] == "end_turn" and v2.texts(b) == ["B-before", "B-after"]
        # The agent still serves the connection that is left: a new session and a whole turn.
        c = (await v2.call("session/new", {"cwd": str(tmp_path)}))["result"]["sessionId"]
        assert "messageId" in (await v2.call("session/prompt", _prompt(c, "C", "gc")))["result"]
        await v2.notify("_scripted/release", {"sessionId": c, "gate": "gc"})
        await v2.wait_for(lambda m: any(s.get("state") == "idle" for s in v2.states(c)))
        assert v2.states(c)[-1]["stopReason"] == "end_turn"
        assert prompt_b in v2.sent_ids
        await v2.hang_up()
    assert v1.problems() == [] and v2.problems() == []
