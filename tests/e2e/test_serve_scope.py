"""`acp-server serve` with several editors at once: what one connection does stays its own (REMOTE.md decisions 6,
7, 8 and 10; issue 23 items 3, 5 and 7).

The real console script in a subprocess, real WebSocket clients (`websockets`), every message the server writes
validated against the official schema (the fixtures of tests/e2e/test_serve.py). Proved here: two connections with
different protocol versions work at once; a connection whose reader stops holds back no other's cancel; a logout on
one connection is that connection's alone (the fake OpenAI server shows the key each model call carries); test-mode
probes and `_acp_server/stats` show a connection only its own sessions; and a connection may have only so many
sessions open. Each test was seen failing with its rule taken out.
"""

from __future__ import annotations

import array
import asyncio
import fcntl
import socket
import termios
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import anyio
import orjson
import pytest
from websockets.asyncio.client import connect

from tests.e2e.test_serve import ALICE, BOB, Editor, editor, new_session, prompt, serving
from tests.support.fake_openai import FakeOpenAI, text_reply
from tests.support.harness import T_ACK, T_WAIT, scaled

pytestmark = pytest.mark.timeout(90)

NO_KEYS = {"OPENAI_API_KEY": "", "OPENAI_BASE_URL": "", "ANTHROPIC_API_KEY": "", "ANTHROPIC_AUTH_TOKEN": ""}


def _idle(client: Editor, session_id: str) -> Any:
    def matches(message: dict[str, Any]) -> bool:
        return (
            message.get("method") == "session/update"
            and message["params"]["sessionId"] == session_id
            and message["params"]["update"].get("sessionUpdate") == "state_update"
            and message["params"]["update"].get("state") == "idle"
        )

    return matches


async def test_a_v1_and_a_v2_connection_work_at_once(tmp_path: Path) -> None:
    async with (
        serving(tmp_path) as server,
        editor(server, ALICE, "alice-v1", 1) as one,
        editor(server, BOB, "bob-v2", 2) as two,
    ):
        a = await new_session(one, server.workspace)
        answer = await two.call("session/new", {"cwd": str(server.workspace)})
        b = str(answer["result"]["sessionId"])
        first = await one.request("session/prompt", prompt(a, "A", "ga"))
        second = await two.request("session/prompt", prompt(b, "B", "gb"))
        assert "messageId" in (await two.response(second))["result"]  # v2: answered on insertion
        await one.probe("gate_reached", a)
        await two.probe("gate_reached", b)
        # Each in its own version's shapes: v1's prompt waits for its stop reason, v2's work ends in `idle`.
        await one.notify("session/cancel", {"sessionId": a})
        assert (await one.response(first, T_ACK))["result"] == {"stopReason": "cancelled"}
        await two.notify("_scripted/release", {"sessionId": b, "gate": "gb"})
        idle = await two.wait_for(_idle(two, b))
        assert idle["params"]["update"]["stopReason"] == "end_turn"
        assert one.texts(a) == ["A-before"] and two.texts(b) == ["B-before", "B-after"]
        # And each goes on in its version: a second v1 turn to its end, a v2 listing of the v2 session.
        again = await one.request("session/prompt", prompt(a, "C", "gc"))
        await one.probe("gate_reached", a)
        await one.notify("_scripted/release", {"sessionId": a, "gate": "gc"})
        assert (await one.response(again))["result"] == {"stopReason": "end_turn"}
        listed = await two.call("session/list", {})
        assert [entry["sessionId"] for entry in listed["result"]["sessions"]] == [b]
    assert b"ended (ACP v1)" in server.stderr and b"ended (ACP v2)" in server.stderr


def _unread_bytes(sock: socket.socket) -> int:
    """What the kernel holds for this socket that its reader has not taken (FIONREAD)."""
    count = array.array("i", [0])
    fcntl.ioctl(sock.fileno(), termios.FIONREAD, count)
    return count[0]


async def test_a_connection_that_stops_reading_holds_back_no_other_connections_cancel(tmp_path: Path) -> None:
    async with serving(tmp_path) as server, editor(server, BOB, "bob") as bob:
        other = await new_session(bob, server.workspace)
        bob_turn = await bob.request("session/prompt", prompt(other, "B", "gb"))
        await bob.probe("gate_reached", other)

        # alice's connection: a small receive buffer and a client that stops reading at her turn's first chunk,
        # while the turn streams on (no permessage-deflate: the bytes are what they are).
        url = urlsplit(server.url)
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.setblocking(False)
        await asyncio.get_running_loop().sock_connect(sock, (url.hostname, url.port))
        async with connect(
            server.url,
            sock=sock,
            additional_headers={"Authorization": f"Bearer {ALICE}"},
            compression=None,
            max_queue=1,
            ping_interval=None,
            close_timeout=0.1,
        ) as ws:
            alice = Editor(ws, "alice")
            first_chunk = anyio.Event()
            ids = iter(range(1, 100))

            async def read_until_first_chunk() -> None:
                async for frame in ws:
                    message = orjson.loads(frame)
                    alice.received.append(message)
                    params = message.get("params") or {}
                    if params.get("update", {}).get("sessionUpdate") == "agent_message_chunk":
                        first_chunk.set()
                        return  # alice's client reads nothing more

            async def call(method: str, params: dict[str, Any]) -> dict[str, Any]:
                request_id = next(ids)
                await alice.send({"id": request_id, "method": method, "params": params})
                with anyio.fail_after(T_WAIT):
                    while True:
                        for message in alice.received:
                            if message.get("id") == request_id and "method" not in message:
                                return message
                        await anyio.sleep(0.01)

            async with anyio.create_task_group() as reading:
                reading.start_soon(read_until_first_chunk)
                await call("initialize", {"protocolVersion": 1, "clientCapabilities": {}})
                session = (await call("session/new", {"cwd": str(server.workspace), "mcpServers": []}))["result"]
                # 8 KiB chunks, 16 MiB in all: more than the socket buffers on both sides hold.
                flood = {"say": "0123456789abcdef" * 512, "repeat": 2048}
                await alice.send(
                    {
                        "id": next(ids),
                        "method": "session/prompt",
                        "params": {
                            "sessionId": session["sessionId"],
                            "prompt": [{"type": "text", "text": "flood"}],
                            "_meta": {"scripted": [flood, {"gate": "never"}]},
                        },
                    }
                )
                with anyio.fail_after(T_WAIT):
                    await first_chunk.wait()
            # Her socket fills: the kernel holds what her client does not read (and the server the rest).
            with anyio.fail_after(T_WAIT):
                while _unread_bytes(sock) < 2048:  # noqa: ASYNC110 - the kernel's receive queue: no event
                    await anyio.sleep(0.05)

            # bob's cancel is answered within the usual bound, and his connection goes on.
            await bob.notify("session/cancel", {"sessionId": other})
            assert (await bob.response(bob_turn, T_ACK))["result"] == {"stopReason": "cancelled"}
            assert "result" in await bob.call("_acp_server/stats", {}, request_id=777)
            assert _unread_bytes(sock) >= 2048  # still not read: alice's connection held back nothing of bob's


@pytest.fixture
def model() -> Iterator[FakeOpenAI]:
    with FakeOpenAI() as fake:
        yield fake


def _authorization(request: Any) -> str:
    return str({key.lower(): value for key, value in request.headers.items()}["authorization"])


async def test_a_logout_on_one_connection_leaves_the_others_sessions_and_key_alone(
    tmp_path: Path, model: FakeOpenAI
) -> None:
    config = tmp_path / "config.toml"
    config.write_text(f'[providers.openai]\napi_key = "sk-server-not-real"\nbase_url = "{model.base_url}"\n')
    env = {**NO_KEYS, "ACP_SERVER_CONFIG": str(config)}
    model.set_default(text_reply("hello"))
    async with (
        serving(tmp_path, "--model", "openai:fake-model", env=env) as server,
        editor(server, ALICE, "alice") as alice,
        editor(server, BOB, "bob") as bob,
    ):
        mine = await new_session(alice, server.workspace)
        theirs = await new_session(bob, server.workspace)

        def ask(session_id: str, text: str) -> dict[str, Any]:
            return {"sessionId": session_id, "prompt": [{"type": "text", "text": text}]}

        assert (await alice.call("logout", {}))["result"] == {}
        refused = await alice.call("session/prompt", ask(mine, "alice-out"))
        assert refused["error"]["code"] == -32000 and "authenticate" in refused["error"]["message"], refused
        assert (await alice.call("session/new", {"cwd": str(server.workspace), "mcpServers": []}))["error"][
            "code"
        ] == -32000

        # bob's connection keeps its credentials: his prompts reach the model with the server's key, and he can
        # open sessions; a second connection of bob's initializes with nothing to authenticate.
        answer = await bob.response(await bob.request("session/prompt", ask(theirs, "bob-still-in")), scaled(30))
        assert answer["result"] == {"stopReason": "end_turn"}, answer
        # (its title's request, after the session's first turn, may be among them: the same key)
        bobs = {_authorization(request) for request in model.requests if "bob-still-in" in str(request.body)}
        assert bobs == {"Bearer sk-server-not-real"}
        await new_session(bob, server.workspace)
        async with editor(server, BOB, "bob again") as again:
            hello = await again.call("initialize", {"protocolVersion": 1, "clientCapabilities": {}})
            assert hello["result"]["authMethods"] == []
        assert not any("alice-out" in str(request.body) for request in model.requests)

        # alice's `authenticate` ends her logout alone.
        assert (await alice.call("authenticate", {"methodId": "api-key"}))["result"] == {}
        answer = await alice.response(await alice.request("session/prompt", ask(mine, "alice-back")), scaled(30))
        assert answer["result"] == {"stopReason": "end_turn"}, answer
        alices = {_authorization(request) for request in model.requests if "alice-back" in str(request.body)}
        assert alices == {"Bearer sk-server-not-real"}


async def test_probes_and_stats_show_a_connection_only_its_own_sessions(tmp_path: Path) -> None:
    async with (
        serving(tmp_path) as server,
        editor(server, ALICE, "alice") as alice,
        editor(server, BOB, "bob") as bob,
    ):
        mine = await new_session(alice, server.workspace)
        theirs = await new_session(bob, server.workspace)
        await new_session(bob, server.workspace)
        queue = {"sessionId": mine, "configId": "prompt_policy", "value": "queue"}
        assert "result" in await alice.call("session/set_config_option", queue)
        proc = {"tool": "test_local_proc", "args": {"command": "sleep 600"}}
        busy = await alice.request(
            "session/prompt",
            {"sessionId": mine, "prompt": [{"type": "text", "text": "p"}], "_meta": {"scripted": [proc]}},
        )
        await alice.probe("proc_started", mine)
        queued = await alice.request("session/prompt", prompt(mine, "Q", "gq"))  # queued behind the running turn

        mine_stats = (await alice.call("_acp_server/stats", {}))["result"]
        theirs_stats = (await bob.call("_acp_server/stats", {}))["result"]
        assert (mine_stats["sessions"], mine_stats["runningTurns"], mine_stats["queuedPrompts"]) == (1, 1, 1)
        assert mine_stats["childProcesses"] == 1
        assert (theirs_stats["sessions"], theirs_stats["runningTurns"], theirs_stats["queuedPrompts"]) == (2, 0, 0)
        assert theirs_stats["childProcesses"] == 0 and theirs_stats["mcpSessions"] == 0
        # Nothing of the process as a whole (its tasks, its memory), which would tell of the other connections.
        assert "tasks" not in theirs_stats and "warmUps" not in theirs_stats

        # bob was told nothing of alice's session: no probe, no update.
        await bob.call("_acp_server/stats", {})  # a round trip: what alice's turn made is out by now
        assert all(mine not in orjson.dumps(message).decode() for message in bob.received)
        assert any(message.get("method") == "_scripted/probe" for message in alice.received)

        await alice.notify("session/cancel", {"sessionId": mine})
        assert (await alice.response(busy, T_ACK))["result"] == {"stopReason": "cancelled"}
        assert (await alice.response(queued, T_ACK))["result"] == {"stopReason": "cancelled"}
        assert theirs  # bob's session is untouched throughout


async def test_a_connection_may_have_only_so_many_sessions_open(tmp_path: Path) -> None:
    async with (
        serving(tmp_path, "--max-sessions-per-connection", "2") as server,
        editor(server, ALICE, "alice") as alice,
        editor(server, ALICE, "alice's other") as other,
    ):
        cwd = str(server.workspace)
        stored = await new_session(other, server.workspace)  # alice's, open on her other connection
        first = await new_session(alice, server.workspace)
        second = await new_session(alice, server.workspace)
        for method, params in (
            ("session/new", {"cwd": cwd, "mcpServers": []}),
            ("session/load", {"sessionId": stored, "cwd": cwd, "mcpServers": []}),
            ("session/resume", {"sessionId": stored, "cwd": cwd, "mcpServers": []}),
            ("session/fork", {"sessionId": first, "cwd": cwd, "mcpServers": []}),
        ):
            refused = await alice.call(method, params)
            assert refused["error"]["code"] == -32600, (method, refused)
            assert "2 sessions open" in refused["error"]["message"], refused
        # Nothing was taken over: the other connection still has its session.
        assert "result" in await other.call("session/set_mode", {"sessionId": stored, "modeId": "default"})
        # A session this connection has open takes no second slot.
        assert "result" in await alice.call("session/load", {"sessionId": second, "cwd": cwd, "mcpServers": []})
        # Each connection has its own slots.
        await new_session(other, server.workspace)
        # A close frees one, and so does a delete.
        assert "result" in await alice.call("session/close", {"sessionId": first})
        third = await new_session(alice, server.workspace)
        assert (await alice.call("session/new", {"cwd": cwd, "mcpServers": []}))["error"]["code"] == -32600
        assert "result" in await alice.call("session/delete", {"sessionId": third})
        await new_session(alice, server.workspace)
