"""`acp-server chat --connect URL` against a real `acp-server serve`, driven through a pty as a person would.

The server is the real `serve` (scripted model, a token file, a free port on 127.0.0.1); the chat is the real
command on a pty (tests/e2e/test_chat_pty.py's `PtyChat`), so Ctrl-C is the kernel's SIGINT. Drops and cookies are
shown by a small WebSocket relay between them (the `websockets` server in a thread of its own): it sets a cookie on
the first upgrade's answer, as a balancer's affinity does, records each upgrade's `Cookie` header, and can drop the
chat's connection (closing its side to the server too, which serve takes as that connection's EOF).
"""

from __future__ import annotations

import asyncio
import os
import re
import select
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
import pytest
from websockets.asyncio.client import connect
from websockets.asyncio.server import Server, ServerConnection, serve
from websockets.datastructures import Headers
from websockets.exceptions import ConnectionClosed
from websockets.http11 import Request, Response

from tests.e2e.test_chat_pty import CTRL_C, ENTER, PtyChat
from tests.support.harness import T_START, isolated_env, scaled, server_command

pytestmark = pytest.mark.timeout(90)

TOKEN = "chatter-" + "C" * 30  # base64url, 228 bits
PROTOCOLS = (1, 2)
AFFINITY = "acp_replica=r1"


@dataclass
class Serve:
    url: str
    process: subprocess.Popen[bytes]
    token_file: Path
    stderr: bytes = b""


@pytest.fixture
def start_serve(tmp_path: Path) -> Iterator[Any]:
    """`serve` on 127.0.0.1 with a scripted model and one principal; its workspace root is the test's directory."""
    started: list[Serve] = []

    def start(*turns: list[dict[str, Any]], protocol: int = 2) -> Serve:
        script = tmp_path.parent / f"{tmp_path.name}-script.json"
        script.write_bytes(orjson.dumps({"turns": list(turns)}))
        tokens = tmp_path.parent / f"{tmp_path.name}-tokens"
        tokens.write_text(f"chatter {TOKEN}\n")
        tokens.chmod(0o600)
        command = server_command(
            "serve",
            *("--listen", "127.0.0.1:0", "--token-file", str(tokens), "--workspace-root", str(tmp_path)),
            *("--model", f"scripted:{script}", "--protocol", str(protocol)),
        )
        process = subprocess.Popen(
            command,
            cwd=tmp_path,
            env={**os.environ, **isolated_env()},
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            start_new_session=True,
        )
        assert process.stderr is not None
        announced = b""
        deadline = time.monotonic() + T_START * 8
        while (found := re.search(rb"serving (ws://\S+)", announced)) is None:
            assert time.monotonic() < deadline, announced.decode(errors="replace")
            if select.select([process.stderr], [], [], 0.1)[0]:
                line = process.stderr.readline()
                assert line, f"serve ended before it listened: {announced.decode(errors='replace')}"
                announced += line
        server = Serve(found.group(1).decode(), process, tokens)
        started.append(server)
        return server

    yield start
    for server in started:
        if server.process.poll() is None:
            os.killpg(server.process.pid, signal.SIGKILL)
        server.process.communicate()


@pytest.fixture
def chat(tmp_path: Path) -> Iterator[Any]:
    started: list[PtyChat] = []

    def start(*args: str, env: dict[str, str] | None = None) -> PtyChat:
        session = PtyChat(*args, cwd=tmp_path, env=env)
        started.append(session)
        return session

    yield start
    for session in started:
        session.close()


def connect_args(server: Serve, url: str | None = None) -> tuple[str, ...]:
    return ("--connect", url or server.url, "--token-file", str(server.token_file), "--reconnect-timeout", "20")


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_chat_connect_streams_answers_a_permission_and_ctrl_c_cancels_a_turn_on_either_version(
    chat: Any, start_serve: Any, protocol: int
) -> None:
    server = start_serve(
        [{"say": "let me check"}, {"tool": "run_command", "args": {"command": "echo ran-it"}}, {"say": "all done"}],
        [{"say": "working on it"}, {"sleep": 30}, {"say": "never shown"}],
        [{"say": "back again"}],
        protocol=protocol,
    )
    session = chat(*connect_args(server))
    session.expect("Chatting with")
    session.expect("> ")
    session.type_line("run it")
    session.expect("let me check")
    session.expect("Permission: echo ran-it")
    session.expect("choose 1-4: ")
    session.send(b"1" + ENTER)
    session.expect("→ Allow")
    session.expect("echo ran-it (execute) completed")
    session.expect("all done")
    session.expect("> ")
    session.type_line("long one")
    session.expect("working on it")  # streamed while the turn still runs (it sleeps 30 s next)
    session.send(CTRL_C)
    session.expect("cancelling…")
    session.expect("cancelled")
    session.expect("> ")
    session.type_line("again")
    session.expect("back again")
    session.expect("> ")
    session.type_line("/quit")
    assert session.wait() == 0
    assert "never shown" not in session.text
    assert "\n    ran-it\n" in session.text.split("→ Allow")[1]


class Relay:
    """A WebSocket relay on 127.0.0.1 in a thread of its own: each connection is passed on to `upstream` with the
    client's Authorization, the first answer sets `AFFINITY`, every upgrade's Cookie header is kept, and `drop()`
    closes the live connection on both sides (the server sees this connection end). With `only_first`, every later
    connection is closed as soon as it is accepted (a server that keeps dropping the chat)."""

    def __init__(self, upstream: str, only_first: bool = False) -> None:
        self.upstream = upstream
        self.only_first = only_first
        self.cookies: list[str | None] = []
        self.loop = asyncio.new_event_loop()
        self._server: Server | None = None
        self._live: list[ServerConnection] = []
        self._ready: Future[str] = Future()
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._start(), self.loop).result(timeout=scaled(5))

    async def _start(self) -> None:
        self._server = await serve(self._relay, "127.0.0.1", 0, process_response=self._answer, compression=None)
        port = self._server.sockets[0].getsockname()[1]
        self.url = f"ws://127.0.0.1:{port}/acp"

    def _answer(self, connection: ServerConnection, request: Request, response: Response) -> Response:
        self.cookies.append(request.headers.get("Cookie"))
        if len(self.cookies) == 1:
            response.headers["Set-Cookie"] = f"{AFFINITY}; Path=/; HttpOnly"
        return response

    async def _relay(self, client: ServerConnection) -> None:
        if self.only_first and len(self.cookies) > 1:
            await client.close(1011)
            return
        auth = client.request.headers["Authorization"] if client.request is not None else ""
        async with connect(self.upstream, additional_headers=Headers(Authorization=auth), max_size=None) as server:
            self._live.append(client)

            async def pump(source: Any, sink: Any) -> None:
                try:
                    async for frame in source:
                        await sink.send(frame)
                except ConnectionClosed:
                    pass

            pumps = [asyncio.create_task(pump(client, server)), asyncio.create_task(pump(server, client))]
            await asyncio.wait(pumps, return_when=asyncio.FIRST_COMPLETED)
            for task in pumps:
                task.cancel()
            await asyncio.gather(*pumps, return_exceptions=True)
            await client.close()

    def drop(self) -> None:
        async def close() -> None:
            connection = self._live.pop()
            await connection.close(1001)

        asyncio.run_coroutine_threadsafe(close(), self.loop).result(timeout=scaled(5))

    def stop(self) -> None:
        async def stop() -> None:
            if self._server is not None:
                self._server.close()
                await self._server.wait_closed()

        asyncio.run_coroutine_threadsafe(stop(), self.loop).result(timeout=scaled(5))
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout=scaled(5))
        self.loop.close()


@pytest.fixture
def relay() -> Iterator[Any]:
    made: list[Relay] = []

    def start(upstream: str, only_first: bool = False) -> Relay:
        made.append(Relay(upstream, only_first))
        return made[-1]

    yield start
    for one in made:
        one.stop()


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_a_dropped_connection_is_reconnected_with_its_cookies_and_the_session_goes_on(
    chat: Any, start_serve: Any, relay: Any, protocol: int
) -> None:
    server = start_serve(
        [{"say": "first answer"}],
        [{"say": "working on it"}, {"sleep": 30}, {"say": "never shown"}],
        [{"say": "back again"}],
        protocol=protocol,
    )
    hop = relay(server.url)
    session = chat(*connect_args(server, hop.url))
    session.expect("> ")
    session.type_line("hello")
    session.expect("first answer")
    session.expect("> ")
    session.type_line("long one")
    session.expect("working on it")
    hop.drop()  # mid-turn: serve cancels the turn as at that connection's EOF, and keeps the session
    session.expect("connection lost: the running turn was cancelled by the server")
    session.expect("reconnecting…")
    session.expect("reconnected: the session goes on")
    session.expect("> ")
    session.type_line("again")
    session.expect("back again")
    session.expect("> ")
    session.type_line("/quit")
    assert session.wait() == 0
    # The session was taken up again, not replayed onto the screen, and the turn lost with the connection ended there.
    assert session.text.count("first answer") == 1 and session.text.count("working on it") == 1
    assert "never shown" not in session.text
    # The cookie the first answer set came back on the reconnection, and only then.
    assert hop.cookies == [None, AFFINITY]


def test_a_server_that_keeps_dropping_the_chat_is_given_up_on_after_the_reconnect_timeout(
    chat: Any, start_serve: Any, relay: Any
) -> None:
    server = start_serve([{"say": "first answer"}])
    hop = relay(server.url, only_first=True)
    session = chat("--connect", hop.url, "--token-file", str(server.token_file), "--reconnect-timeout", "1")
    session.expect("> ")
    session.type_line("hello")
    session.expect("first answer")
    session.expect("> ")  # the turn has ended: the drop finds the chat idle
    hop.drop()
    assert session.wait(scaled(10)) == 2
    assert "running turn" not in session.text
    assert "could not take the session up again within 1 s" in session.text
    assert 3 <= len(hop.cookies) <= 6, "a few tries, each after a pause, not a busy loop"


def test_a_refused_token_is_said_plainly_and_never_shown(chat: Any, start_serve: Any, tmp_path: Path) -> None:
    server = start_serve([{"say": "never"}])
    wrong = tmp_path.parent / f"{tmp_path.name}-wrong"
    wrong.write_text("Z" * 40 + "\n")
    wrong.chmod(0o600)
    session = chat("--connect", server.url, "--token-file", str(wrong), "hi")
    assert session.wait() == 2
    assert "the server answered 401: the token was refused" in session.text
    assert "Z" * 40 not in session.text


def test_the_token_can_come_from_the_environment_and_a_one_shot_question_is_answered(
    chat: Any, start_serve: Any
) -> None:
    server = start_serve([{"say": "from afar"}])
    session = chat("--connect", server.url, "what is there", env={"ACP_SERVER_TOKEN": TOKEN})
    session.expect("from afar")
    assert session.wait() == 0


def test_chat_connect_without_websockets_says_which_command_installs_it(tmp_path: Path) -> None:
    blocker = (
        "import sys\n"
        "class Blocker:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name == 'websockets' or name.startswith('websockets.'):\n"
        "            raise ModuleNotFoundError(name)\n"
        "sys.meta_path.insert(0, Blocker())\n"
        "from acp_server.cli import main\n"
        "sys.exit(main(['chat', '--connect', 'ws://127.0.0.1:9/acp', 'hi']))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", blocker],
        capture_output=True,
        text=True,
        env={**os.environ, **isolated_env(), "ACP_SERVER_TOKEN": TOKEN},
        stdin=subprocess.DEVNULL,
        cwd=tmp_path,
        timeout=scaled(20),
        check=False,
    )
    assert result.returncode == 2, result
    assert "pip install 'acp-server[remote]'" in result.stderr
