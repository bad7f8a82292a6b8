"""`acp-server serve` for real: the console script in a subprocess on 127.0.0.1 (port 0), driven by a real WebSocket
client (`websockets`), every message the server writes validated against the official schema (REMOTE.md decisions
1, 4, 5 and 6; issue 23, the WebSocket profile).

What the transport room does on its own (tokens, Origin and Host, limits, drain) is
tests/e2e/test_remote_transport.py's; here the agent is behind it: sessions across connections, principals, roots,
and a disconnect as an EOF for one connection only. Each test was seen failing with its rule taken out.
"""

from __future__ import annotations

import asyncio
import os
import re
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import orjson
import pytest
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed

from tests.support.harness import DEFAULT_ARGS, T_ACK, T_EXIT, T_START, T_WAIT, isolated_env, scaled, server_command
from tests.support.wire_schema import WireValidator

pytestmark = pytest.mark.timeout(60)

ALICE = "alice-" + "A" * 30  # base64url, 216 bits
BOB = "0123456789abcdef" * 3  # hex, 192 bits


class Server:
    """An `acp-server serve` subprocess and the URL it announced."""

    def __init__(self, process: asyncio.subprocess.Process, url: str, workspace: Path) -> None:
        self.process = process
        self.url = url
        self.workspace = workspace
        self.stderr = b""


@asynccontextmanager
async def serving(tmp_path: Path, *extra: str, env: dict[str, str] | None = None) -> AsyncIterator[Server]:
    """`acp-server serve` in `tmp_path/work` (its default workspace root), alice and bob in its token file."""
    workspace = tmp_path / "work"
    workspace.mkdir(exist_ok=True)
    tokens = tmp_path / "tokens"
    tokens.write_text(f"alice {ALICE}\nbob {BOB}\n")
    tokens.chmod(0o600)
    process = await asyncio.create_subprocess_exec(
        *server_command("serve", "--listen", "127.0.0.1:0", "--token-file", str(tokens), *DEFAULT_ARGS, *extra),
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
        env={**os.environ, **isolated_env(), **(env or {})},
        cwd=workspace,
        start_new_session=True,
    )
    assert process.stderr is not None
    seen = b""
    with anyio.fail_after(T_START * 8):
        while (found := re.search(rb"serving (wss?://\S+)", seen)) is None:
            line = await process.stderr.readline()
            assert line, f"serve ended before it listened: {seen.decode(errors='replace')}"
            seen += line
    server = Server(process, found.group(1).decode(), workspace)
    try:
        yield server
    finally:
        if process.returncode is None:
            process.send_signal(signal.SIGTERM)  # a drain (decision 9)
            with anyio.fail_after(T_EXIT + scaled(6)):
                rest = await process.stderr.read()
                await process.wait()
            server.stderr = seen + rest


class Editor:
    """One editor over WebSocket: what it sends is validated, what the server writes is logged and validated."""

    def __init__(self, ws: ClientConnection, name: str) -> None:
        self.ws = ws
        self.name = name
        self.validator = WireValidator()
        self.received: list[dict[str, Any]] = []
        self.raw: dict[Any, bytes] = {}  # a response's exact text, by request id
        self._arrived = anyio.Event()
        self._ids = iter(range(1, 1_000_000))
        self.closed = anyio.Event()

    async def read(self) -> None:
        try:
            async for frame in self.ws:
                data = frame.encode() if isinstance(frame, str) else frame
                message = self.validator.server_wrote(data + b"\n")
                if message is not None:
                    self.received.append(message)
                    if "method" not in message and "id" in message:
                        self.raw[message["id"]] = data
                self._arrived.set()
        except ConnectionClosed:
            pass
        finally:
            self.closed.set()
            self._arrived.set()

    async def send(self, message: dict[str, Any]) -> None:
        message = {"jsonrpc": "2.0", **message}
        self.validator.client_sent(message)
        await self.ws.send(orjson.dumps(message).decode())

    async def request(self, method: str, params: dict[str, Any], request_id: int | None = None) -> int:
        request_id = next(self._ids) if request_id is None else request_id
        await self.send({"id": request_id, "method": method, "params": params})
        return request_id

    async def call(self, method: str, params: dict[str, Any], request_id: int | None = None) -> dict[str, Any]:
        return await self.response(await self.request(method, params, request_id))

    async def notify(self, method: str, params: dict[str, Any]) -> None:
        await self.send({"method": method, "params": params})

    async def wait_for(self, predicate: Callable[[dict[str, Any]], bool], timeout: float = T_WAIT) -> dict[str, Any]:
        with anyio.fail_after(timeout):
            while True:
                for message in self.received:
                    if predicate(message):
                        return message
                assert not self.closed.is_set(), f"{self.name}: the connection closed"
                self._arrived = anyio.Event()
                await self._arrived.wait()

    async def response(self, request_id: int, timeout: float = T_WAIT) -> dict[str, Any]:
        return await self.wait_for(lambda m: "method" not in m and m.get("id") == request_id, timeout)

    async def probe(self, event: str, session_id: str) -> None:
        await self.wait_for(
            lambda m: (
                m.get("method") == "_scripted/probe"
                and m["params"].get("event") == event
                and m["params"].get("sessionId") == session_id
            )
        )

    def texts(self, session_id: str) -> list[str]:
        return [
            m["params"]["update"]["content"]["text"]
            for m in self.received
            if m.get("method") == "session/update"
            and m["params"]["sessionId"] == session_id
            and m["params"]["update"].get("sessionUpdate") == "agent_message_chunk"
        ]


@asynccontextmanager
async def editor(server: Server, token: str, name: str, version: int = 1) -> AsyncIterator[Editor]:
    """An initialized editor on its own connection; closed (a WebSocket close) on the way out."""
    async with (
        connect(server.url, additional_headers={"Authorization": f"Bearer {token}"}) as ws,
        anyio.create_task_group() as group,
    ):
        client = Editor(ws, name)
        group.start_soon(client.read)
        if version == 1:
            params: dict[str, Any] = {"protocolVersion": 1, "clientCapabilities": {}}
        else:
            params = {"protocolVersion": 2, "capabilities": {}}
        assert (await client.call("initialize", params))["result"]["protocolVersion"] == version
        try:
            yield client
        finally:
            await ws.close()
            with anyio.fail_after(T_WAIT):
                await client.closed.wait()
            assert client.validator.violations == [], client.validator.violations


def script(tag: str, gate: str) -> dict[str, Any]:
    return {"scripted": [{"say": f"{tag}-before"}, {"gate": gate}, {"say": f"{tag}-after"}]}


def prompt(session_id: str, tag: str, gate: str) -> dict[str, Any]:
    return {"sessionId": session_id, "prompt": [{"type": "text", "text": tag}], "_meta": script(tag, gate)}


async def new_session(client: Editor, cwd: Path) -> str:
    answer = await client.call("session/new", {"cwd": str(cwd), "mcpServers": []})
    assert "result" in answer, answer
    return str(answer["result"]["sessionId"])


@pytest.mark.parametrize("version", [1, 2])
async def test_a_scripted_turn_streams_and_a_cancel_ends_it_over_websocket(tmp_path: Path, version: int) -> None:
    async with serving(tmp_path) as server, editor(server, ALICE, f"alice-v{version}", version) as alice:
        session = await new_session(alice, server.workspace)
        prompt_id = await alice.request("session/prompt", prompt(session, "A", "g"))
        if version == 2:
            assert "messageId" in (await alice.response(prompt_id))["result"]  # v2: answered on insertion
        await alice.probe("gate_reached", session)
        assert alice.texts(session) == ["A-before"]
        await alice.notify("session/cancel", {"sessionId": session})
        if version == 1:
            assert (await alice.response(prompt_id, T_ACK))["result"] == {"stopReason": "cancelled"}
        else:
            idle = await alice.wait_for(
                lambda m: (
                    m.get("method") == "session/update"
                    and m["params"]["update"].get("sessionUpdate") == "state_update"
                    and m["params"]["update"].get("state") == "idle"
                ),
                T_ACK,
            )
            assert idle["params"]["update"]["stopReason"] == "cancelled"
        assert alice.texts(session) == ["A-before"]
    assert b"ended (ACP v%d)" % version in server.stderr  # the connection's end line names its version


async def test_a_disconnect_cancels_only_that_connections_turn_and_its_session_loads_from_a_new_one(
    tmp_path: Path,
) -> None:
    async with serving(tmp_path) as server, editor(server, BOB, "bob") as bob:
        other = await new_session(bob, server.workspace)
        bob_prompt = await bob.request("session/prompt", prompt(other, "B", "gb"))
        await bob.probe("gate_reached", other)
        async with editor(server, ALICE, "alice") as alice:
            session = await new_session(alice, server.workspace)
            await alice.request("session/prompt", prompt(session, "A", "ga"))
            await alice.probe("gate_reached", session)
        # alice's connection is gone: bob's turn runs on, and ends normally once released.
        await bob.notify("_scripted/release", {"sessionId": other, "gate": "gb"})
        assert (await bob.response(bob_prompt))["result"] == {"stopReason": "end_turn"}
        assert bob.texts(other) == ["B-before", "B-after"]
        # A new connection of alice's loads the session: the turn the disconnect cancelled is in its history.
        async with editor(server, ALICE, "alice again") as again:
            loaded = await again.call(
                "session/load", {"sessionId": session, "cwd": str(server.workspace), "mcpServers": []}
            )
            assert "result" in loaded, loaded
            replayed = again.texts(session)  # the cancelled turn, as stored: never "A-after"
            assert replayed[0] == "A-before" and "A-after" not in replayed, replayed
            # ... and runs a turn on it.
            turn = await again.request("session/prompt", prompt(session, "C", "gc"))
            await again.probe("gate_reached", session)
            await again.notify("_scripted/release", {"sessionId": session, "gate": "gc"})
            assert (await again.response(turn))["result"] == {"stopReason": "end_turn"}
    assert b"principal alice" in server.stderr and ALICE.encode() not in server.stderr


async def test_another_principals_session_is_answered_exactly_as_an_unknown_id(tmp_path: Path) -> None:
    unknown = "sess_" + "0" * 32
    async with (
        serving(tmp_path) as server,
        editor(server, ALICE, "alice") as alice,
        editor(server, BOB, "bob") as bob,
    ):
        session = await new_session(alice, server.workspace)
        mine = await new_session(bob, server.workspace)
        cwd = str(server.workspace)
        requests: list[tuple[str, dict[str, Any]]] = [
            ("session/prompt", prompt(session, "X", "gx")),
            ("session/set_mode", {"sessionId": session, "modeId": "default"}),
            ("session/set_config_option", {"sessionId": session, "configId": "model", "value": "scripted"}),
            ("session/load", {"sessionId": session, "cwd": cwd, "mcpServers": []}),
            ("session/resume", {"sessionId": session, "cwd": cwd, "mcpServers": []}),
            ("session/fork", {"sessionId": session, "cwd": cwd, "mcpServers": []}),
            ("session/close", {"sessionId": session}),
            ("session/delete", {"sessionId": session}),
        ]
        for number, (method, params) in enumerate(requests):
            foreign_id = 1000 + number
            await bob.call(method, params, request_id=foreign_id)
            unknown_params = orjson.loads(orjson.dumps(params).replace(session.encode(), unknown.encode()))
            await bob.call(method, unknown_params, request_id=foreign_id + 100)
            foreign = bob.raw[foreign_id].replace(session.encode(), unknown.encode())
            expected = bob.raw[foreign_id + 100].replace(b'"id":%d' % (foreign_id + 100), b'"id":%d' % foreign_id)
            assert foreign == expected, method
        await bob.notify("session/cancel", {"sessionId": session})
        # alice's session is untouched (not deleted, not closed, not taken over) and still hers.
        listed = await alice.call("session/list", {})
        assert [entry["sessionId"] for entry in listed["result"]["sessions"]] == [session]
        listed = await bob.call("session/list", {})
        assert [entry["sessionId"] for entry in listed["result"]["sessions"]] == [mine]
        turn = await alice.request("session/prompt", prompt(session, "A", "ga"))
        await alice.probe("gate_reached", session)
        await alice.notify("_scripted/release", {"sessionId": session, "gate": "ga"})
        assert (await alice.response(turn))["result"] == {"stopReason": "end_turn"}


async def test_a_sessions_owner_outlives_a_restart_of_serve(tmp_path: Path) -> None:
    state = {"ACP_SERVER_STATE_DIR": str(tmp_path / "state")}
    async with serving(tmp_path, env=state) as server, editor(server, ALICE, "alice") as alice:
        session = await new_session(alice, server.workspace)
        # A changed option rewrites the stored config: the owner stays in it.
        changed = await alice.call("session/set_mode", {"sessionId": session, "modeId": "default"})
        assert "result" in changed, changed
        changed = await alice.call(
            "session/set_config_option", {"sessionId": session, "configId": "model", "value": "scripted"}
        )
        assert "result" in changed, changed
    load = {"sessionId": session, "cwd": str(server.workspace), "mcpServers": []}
    async with (
        serving(tmp_path, env=state) as server,
        editor(server, BOB, "bob") as bob,
        editor(server, ALICE, "alice") as alice,
    ):
        assert (await bob.call("session/list", {}))["result"]["sessions"] == []
        assert (await bob.call("session/load", load))["error"]["code"] == -32002
        assert [entry["sessionId"] for entry in (await alice.call("session/list", {}))["result"]["sessions"]] == [
            session
        ]
        assert "result" in await alice.call("session/load", load)


async def test_a_load_from_a_second_connection_of_the_same_principal_takes_the_session_over(tmp_path: Path) -> None:
    async with (
        serving(tmp_path) as server,
        editor(server, ALICE, "first") as first,
        editor(server, ALICE, "second") as second,
    ):
        session = await new_session(first, server.workspace)
        running = await first.request("session/prompt", prompt(session, "A", "ga"))
        await first.probe("gate_reached", session)
        loaded = await second.call(
            "session/load", {"sessionId": session, "cwd": str(server.workspace), "mcpServers": []}
        )
        assert "result" in loaded, loaded
        # The first connection's turn was cancelled as at its EOF, answered there...
        assert (await first.response(running, T_ACK))["result"] == {"stopReason": "cancelled"}
        # ... and from now on the session is unknown to it, as an id that never existed.
        unknown = "sess_" + "0" * 32
        await first.call("session/set_mode", {"sessionId": session, "modeId": "default"}, request_id=900)
        await first.call("session/set_mode", {"sessionId": unknown, "modeId": "default"}, request_id=901)
        assert b"error" in first.raw[900]
        assert first.raw[900].replace(session.encode(), unknown.encode()) == first.raw[901].replace(b"901", b"900")
        # The second connection runs it.
        again = await second.request("session/prompt", prompt(session, "B", "gb"))
        await second.probe("gate_reached", session)
        await second.notify("_scripted/release", {"sessionId": session, "gate": "gb"})
        assert (await second.response(again))["result"] == {"stopReason": "end_turn"}


async def test_directories_outside_the_principals_roots_are_refused(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    async with serving(tmp_path) as server, editor(server, ALICE, "alice") as alice:
        link = server.workspace / "link"
        link.symlink_to(outside)  # inside by name, outside once resolved
        for params in (
            {"cwd": str(outside), "mcpServers": []},
            {"cwd": str(link), "mcpServers": []},
            {"cwd": str(server.workspace), "additionalDirectories": [str(outside)], "mcpServers": []},
        ):
            answer = await alice.call("session/new", params)
            assert answer["error"]["code"] == -32602, answer
            assert str(server.workspace.resolve()) in answer["error"]["message"], answer  # names the allowed roots
        command = {"name": "local", "command": sys.executable, "args": [], "env": []}
        answer = await alice.call("session/new", {"cwd": str(server.workspace), "mcpServers": [command]})
        assert answer["error"]["code"] == -32602 and "command" in answer["error"]["message"], answer
        inside = server.workspace / "project"
        inside.mkdir()
        await new_session(alice, inside)


def test_serve_without_hypercorn_says_which_command_installs_it(tmp_path: Path) -> None:
    blocker = (
        "import sys\n"
        "class Blocker:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name == 'hypercorn' or name.startswith('hypercorn.'):\n"
        "            raise ModuleNotFoundError(name)\n"
        "sys.meta_path.insert(0, Blocker())\n"
        "from acp_server.cli import main\n"
        "main(['serve', '--listen', '127.0.0.1:0'])\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", blocker],
        capture_output=True,
        text=True,
        env={**os.environ, **isolated_env()},
        cwd=tmp_path,
        timeout=scaled(20),
        check=False,
    )
    assert result.returncode == 2, result
    assert "pip install 'acp-server[remote]'" in result.stderr
