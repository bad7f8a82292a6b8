"""Remote ACP's transport room over real sockets on 127.0.0.1 (REMOTE.md decisions 2, 3, 6, 8, 9; WebSocket profile).

The server is `acp_server.remote.serve_remote` on hypercorn, in the test's own event loop; the client is a real
WebSocket library (`websockets`) or, where a request must carry what no WebSocket client sends (a foreign Host),
raw HTTP/1.1 over a TCP socket. Where the agent will be plugged in stands `EchoHandler`: a small JSON-RPC answerer
that records what each connection's handler saw (its lines, their end, a write refused), so each test can assert
what the handler was handed, not only what the wire showed.

One test per security rule and per limit; each was seen failing with its rule taken out.
"""

from __future__ import annotations

import base64
import hmac
import os
import shutil
import signal
import socket
import ssl
import stat
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import anyio
import h2.config
import h2.connection
import h2.events
import orjson
import pytest
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidStatus
from websockets.typing import Subprotocol

from acp_server.errors import ServeSetupError
from acp_server.jsonrpc.transport import LineSink, LineSource
from acp_server.remote import tokens as tokens_module
from acp_server.remote.peer import ConnectionHandler, Peer
from acp_server.remote.server import RemoteServer, serve_remote
from acp_server.remote.settings import RemoteSettings, check
from acp_server.remote.tokens import Principal, Tokens, read_token_file
from tests.support.harness import T_ACK, T_WAIT, scaled

ALICE = "alice-" + "A" * 30  # base64url, 216 bits
BOB = "0123456789abcdef" * 3  # hex, 192 bits
INITIALIZE = {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {"protocolVersion": 1}}


@dataclass
class Seen:
    """What one connection's handler saw."""

    peer: Peer
    lines: list[Any] = field(default_factory=list)
    eof: anyio.Event = field(default_factory=anyio.Event)  # its LineSource ended (as at stdin EOF)
    ended: anyio.Event = field(default_factory=anyio.Event)  # the handler is returning
    refused: anyio.Event = field(default_factory=anyio.Event)  # a write raised BrokenPipeError
    writes_done: int = 0
    goodbye: str = ""  # what became of the write after its input ended: "written" or "refused"


class EchoHandler:
    """Stands where the agent will be plugged in: answers every request with what it knows of the connection.

    `flood` writes `count` messages of `size` bytes without waiting for anything. Once its input has ended it writes
    `goodbyes` messages; `hold` makes it wait for `release` before that (to watch a drain in progress)."""

    def __init__(self) -> None:
        self.seen: dict[str, Seen] = {}
        self.connected = anyio.Event()
        self.hold = False
        self.release = anyio.Event()
        self.goodbyes = 1  # how many messages it writes once its input has ended, of how many bytes
        self.goodbye_bytes = 16

    async def __call__(self, peer: Peer, source: LineSource, sink: LineSink) -> None:
        seen = self.seen[peer.connection_id] = Seen(peer)
        self.connected.set()
        try:
            async for line in source:
                assert isinstance(line, bytes)
                message = orjson.loads(line)
                seen.lines.append(message)
                if "id" not in message:
                    continue
                if message.get("method") == "flood":
                    await self._flood(seen, sink, **message["params"])
                    continue
                result = {
                    "method": message.get("method"),
                    "principal": peer.principal.name,
                    "roots": list(peer.principal.roots),
                    "connectionId": peer.connection_id,
                }
                if message.get("method") == "initialize":  # what a v1 client needs to go on
                    result |= {"protocolVersion": 1, "agentCapabilities": {}, "authMethods": []}
                await sink.write(orjson.dumps({"jsonrpc": "2.0", "id": message["id"], "result": result}) + b"\n")
            # Its input has ended, as stdin's at EOF. Then (after `release` if held) its last messages, as a server
            # answering what was in flight.
            seen.eof.set()
            if self.hold:
                with anyio.move_on_after(T_WAIT):
                    await self.release.wait()
            try:
                for number in range(self.goodbyes):
                    text = base64.b64encode(os.urandom(self.goodbye_bytes * 3 // 4)).decode()
                    goodbye = {"jsonrpc": "2.0", "method": "goodbye", "params": {"n": number, "text": text}}
                    await sink.write(orjson.dumps(goodbye) + b"\n")
                seen.goodbye = "written"
            except BrokenPipeError:
                seen.goodbye = "refused"
        except BrokenPipeError:
            seen.refused.set()
        finally:
            seen.ended.set()

    async def _flood(self, seen: Seen, sink: LineSink, count: int, size: int) -> None:
        text = base64.b64encode(os.urandom(size * 3 // 4)).decode()  # incompressible: deflate cannot shrink it
        for number in range(count):
            chunk = {"jsonrpc": "2.0", "method": "chunk", "params": {"n": number, "text": text}}
            await sink.write(orjson.dumps(chunk) + b"\n")
            seen.writes_done += 1


def write_token_file(path: Path, text: str, mode: int = 0o600) -> Path:
    path.write_text(text)
    path.chmod(mode)
    return path


def settings_for(tmp_path: Path, **changes: Any) -> RemoteSettings:
    token_file = write_token_file(tmp_path / "tokens", f"alice {ALICE} /srv/alice\n# a comment\n\nbob {BOB}\n")
    base = RemoteSettings(state_dir=tmp_path / "state", host="127.0.0.1", port=0, token_file=token_file)
    return replace(base, **changes)


@asynccontextmanager
async def running(settings: RemoteSettings, handler: ConnectionHandler | None = None) -> AsyncIterator[RemoteServer]:
    handler = handler or EchoHandler()
    async with anyio.create_task_group() as group:
        server: RemoteServer = await group.start(serve_remote, settings, handler)
        try:
            yield server
        finally:
            server.drain()


def ws_url(server: RemoteServer) -> str:
    return f"ws://127.0.0.1:{server.address[1]}/acp"


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


@asynccontextmanager
async def client(
    server: RemoteServer, headers: dict[str, str] | None = None, **options: Any
) -> AsyncIterator[ClientConnection]:
    options.setdefault("additional_headers", bearer(ALICE) if headers is None else headers)
    async with connect(ws_url(server), proxy=None, open_timeout=T_WAIT, close_timeout=T_ACK, **options) as ws:
        yield ws


async def ask(ws: ClientConnection, message: dict[str, Any]) -> Any:
    await ws.send(orjson.dumps(message).decode())
    with anyio.fail_after(T_WAIT):
        return orjson.loads(await ws.recv())


async def refused_status(server: RemoteServer, **options: Any) -> int:
    with pytest.raises(InvalidStatus) as refused:
        async with client(server, **options):
            pass
    return refused.value.response.status_code


async def raw_status(server: RemoteServer, request: str) -> tuple[int, bytes]:
    """One HTTP/1.1 request over a plain TCP socket: its status and its body."""
    with anyio.fail_after(T_WAIT):
        async with await anyio.connect_tcp("127.0.0.1", server.address[1]) as stream:
            await stream.send(request.replace("\n", "\r\n").encode() + b"\r\n")
            data = b""
            while b"\r\n\r\n" not in data:
                data += await stream.receive()
            head, _, body = data.partition(b"\r\n\r\n")
            fields = [line.partition(b":") for line in head.split(b"\r\n")]
            lengths = [int(value) for name, _, value in fields if name.lower() == b"content-length"]
            length = lengths[0] if lengths else 0
            while len(body) < length:
                body += await stream.receive()
    return int(head.split()[1]), body


def upgrade_request(host: str, extra: str = "") -> str:
    return (
        f"GET /acp HTTP/1.1\nHost: {host}\nUpgrade: websocket\nConnection: Upgrade\n"
        f"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\nSec-WebSocket-Version: 13\nAuthorization: Bearer {ALICE}\n"
        f"{extra}"
    )


def connection_id(ws: ClientConnection) -> str:
    assert ws.response is not None
    return ws.response.headers["Acp-Connection-Id"]


async def closed_with(ws: ClientConnection) -> int | None:
    with anyio.fail_after(T_WAIT):
        with pytest.raises(ConnectionClosed):
            while True:
                await ws.recv()
    return ws.close_code


# --- the profile ---


@pytest.mark.timeout(30)
async def test_each_text_frame_is_one_message_both_ways_and_binary_frames_are_ignored(tmp_path: Path) -> None:
    handler = EchoHandler()
    async with running(settings_for(tmp_path), handler) as server, client(server) as ws:
        assert ws.response is not None and ws.response.status_code == 101
        connection = connection_id(ws)
        answer = await ask(ws, INITIALIZE)
        assert (
            answer["result"].items()
            >= {
                "method": "initialize",
                "principal": "alice",
                "roots": ["/srv/alice"],
                "connectionId": connection,
            }.items()
        )
        await ws.send(b'{"jsonrpc":"2.0","id":99,"method":"binary"}')  # binary: never reaches the handler
        pretty = '{\n  "jsonrpc": "2.0",\n  "id": 1,\n  "method": "session/new"\n}'  # newlines inside one frame
        await ws.send(pretty)
        assert (await ask(ws, {"jsonrpc": "2.0", "id": 2, "method": "ping"}))["id"] == 1
        assert orjson.loads(await ws.recv())["id"] == 2
        methods = [line.get("method") for line in handler.seen[connection].lines]
        assert methods == ["initialize", "session/new", "ping"]


@pytest.mark.timeout(30)
async def test_a_first_message_that_is_not_initialize_closes_with_1002(tmp_path: Path) -> None:
    handler = EchoHandler()
    async with running(settings_for(tmp_path), handler) as server, client(server) as ws:
        await ws.send(orjson.dumps({"jsonrpc": "2.0", "id": 1, "method": "session/new"}).decode())
        assert await closed_with(ws) == 1002
    assert handler.seen == {}  # the handler never started


@pytest.mark.timeout(30)
async def test_no_initialize_within_the_deadline_closes_the_connection(tmp_path: Path) -> None:
    handler = EchoHandler()
    settings = settings_for(tmp_path, initialize_timeout=0.3)
    async with running(settings, handler) as server, client(server) as ws:
        await ws.send(b"binary frames do not count")
        assert await closed_with(ws) == 1008
    assert handler.seen == {}


@pytest.mark.timeout(30)
async def test_a_message_over_the_limit_closes_with_1009(tmp_path: Path) -> None:
    handler = EchoHandler()
    async with running(settings_for(tmp_path, max_message_bytes=4096), handler) as server, client(server) as ws:
        await ask(ws, INITIALIZE)
        # 3,000 characters, 6,000 bytes: over the limit in bytes though not in characters.
        await ws.send(orjson.dumps({"jsonrpc": "2.0", "method": "big", "params": {"t": "é" * 3000}}).decode())
        assert await closed_with(ws) == 1009
    (seen,) = handler.seen.values()
    assert [line["method"] for line in seen.lines] == ["initialize"]
    assert seen.ended.is_set()


# --- authentication (decision 2) ---


@pytest.mark.timeout(30)
@pytest.mark.parametrize(
    "headers",
    [
        {},
        bearer("wrong-" + "B" * 30),
        bearer(ALICE + "x"),
        {"Authorization": "Basic " + base64.b64encode(b"alice:" + b"C" * 30).decode()},
        {"Authorization": f"Token {ALICE}"},
    ],
    ids=["none", "wrong", "longer", "basic-wrong", "unknown-scheme"],
)
async def test_a_missing_or_wrong_token_gets_401(tmp_path: Path, headers: dict[str, str]) -> None:
    handler = EchoHandler()
    async with running(settings_for(tmp_path), handler) as server:
        assert await refused_status(server, headers=headers) == 401
        status, _ = await raw_status(server, "POST /acp HTTP/1.1\nHost: 127.0.0.1\nContent-Length: 0\n")
        assert status == 401
    assert handler.seen == {}


@pytest.mark.timeout(30)
async def test_http_basic_with_the_token_as_password_is_accepted(tmp_path: Path) -> None:
    basic = {"Authorization": "Basic " + base64.b64encode(f"anyone:{BOB}".encode()).decode()}
    async with running(settings_for(tmp_path)) as server, client(server, headers=basic) as ws:
        assert (await ask(ws, INITIALIZE))["result"]["principal"] == "bob"


@pytest.mark.timeout(30)
async def test_the_bearer_subprotocol_is_accepted_and_only_acp_is_selected(tmp_path: Path) -> None:
    offered = [Subprotocol("acp"), Subprotocol(f"acp.bearer.{BOB}")]
    async with running(settings_for(tmp_path)) as server, client(server, headers={}, subprotocols=offered) as ws:
        assert ws.subprotocol == "acp"
        assert ws.response is not None and BOB not in str(ws.response.headers)
        assert (await ask(ws, INITIALIZE))["result"]["principal"] == "bob"
        assert await refused_status(server, headers={}, subprotocols=[Subprotocol("acp.bearer.x" + "y" * 30)]) == 401


def test_tokens_are_compared_with_every_known_token_in_constant_time(monkeypatch: pytest.MonkeyPatch) -> None:
    """No early exit that would tell which token came close: every digest is compared, also after a match."""
    text = "".join(f"p{number} {'k' * 22}{number:04d}\n" for number in range(5))
    tokens = tokens_module.parse_tokens(text, "test")
    calls: list[tuple[bytes, bytes]] = []
    compare = hmac.compare_digest

    def counting(a: bytes, b: bytes) -> bool:
        calls.append((a, b))
        return compare(a, b)

    monkeypatch.setattr(hmac, "compare_digest", counting)
    assert tokens.principal_for("k" * 22 + "0000") == Principal("p0")
    assert len(calls) == 5
    assert all(len(a) == len(b) == 32 for a, b in calls)  # digests: the length of a token is not compared either
    assert tokens.principal_for("nobody" * 5) is None
    assert len(calls) == 10


@pytest.mark.parametrize("mode", [0o640, 0o604, 0o660, 0o644])
def test_a_token_file_others_may_read_or_change_is_refused(tmp_path: Path, mode: int) -> None:
    path = write_token_file(tmp_path / "tokens", f"alice {ALICE}\n", mode)
    with pytest.raises(ServeSetupError, match="chmod 600") as refused:
        read_token_file(path)
    assert ALICE not in str(refused.value)
    path.chmod(0o600)
    assert read_token_file(path).principals == (Principal("alice"),)


@pytest.mark.parametrize(
    ("line", "why"),
    [
        (f"alice {'z' * 21}", "22 characters"),
        (f"alice {'a1' * 15}", "32 characters"),  # 30 hex characters: 120 bits
        (f"alice {ALICE}=", "base64url"),
        (f"local {ALICE}", "reserved"),
        (f"alice {ALICE} relative/root", "absolute"),
        (f"alice {ALICE}\nbob {ALICE}", "another principal"),
        (f"alice {ALICE}\nalice {BOB}", "one line per principal"),
        ("# nobody\n", "nobody could connect"),
    ],
)
def test_a_token_file_line_that_cannot_be_used_is_refused_without_repeating_its_token(line: str, why: str) -> None:
    with pytest.raises(ServeSetupError, match=why) as refused:
        tokens_module.parse_tokens(line, "tokens")
    assert ALICE not in str(refused.value) and "z" * 21 not in str(refused.value)


@pytest.mark.timeout(30)
async def test_without_a_token_file_serve_token_is_made_once_and_announced(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    settings = replace(settings_for(tmp_path), token_file=None)
    async with running(settings) as server:
        path = settings.state_dir / "serve-token"
        assert server.token_file == path
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        principal, token = path.read_text().split()
        assert principal == "default" and tokens_module.token_problem(token) is None
        async with client(server, headers=bearer(token)) as ws:
            assert (await ask(ws, INITIALIZE))["result"]["principal"] == "default"
    announced = capsys.readouterr().err
    assert server.url in announced and str(path) in announced and "made now" in announced
    assert token not in announced
    async with running(settings) as server:  # a restart keeps the token
        assert path.read_text().split()[1] == token
    assert "kept from before" in capsys.readouterr().err


def test_the_default_token_file_is_never_followed_through_a_link(tmp_path: Path) -> None:
    elsewhere = write_token_file(tmp_path / "elsewhere", f"default {ALICE}\n")
    (tmp_path / "state").mkdir()
    (tmp_path / "state" / "serve-token").symlink_to(elsewhere)
    with pytest.raises(ServeSetupError, match="symbolic link"):
        tokens_module.default_tokens(tmp_path / "state")


@pytest.mark.timeout(30)
async def test_tokens_never_reach_the_log(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level("DEBUG")
    async with running(settings_for(tmp_path)) as server:
        async with client(server) as ws:
            await ask(ws, INITIALIZE)
        await refused_status(server, headers=bearer(BOB + "0"))
        await refused_status(server, headers={}, subprotocols=[Subprotocol("acp"), Subprotocol(f"acp.bearer.{ALICE}x")])
    ours = "\n".join(r.getMessage() for r in caplog.records if not r.name.startswith("websockets"))  # the client's
    assert "opened" in ours and "ended" in ours and "principal alice" in ours
    for secret in (ALICE, BOB):
        assert secret not in ours


# --- Origin and Host (decision 3) ---


@pytest.mark.timeout(30)
async def test_an_origin_not_allowed_gets_403_and_an_allowed_one_is_served(tmp_path: Path) -> None:
    settings = settings_for(tmp_path, allow_origins=("https://editor.example",))
    handler = EchoHandler()
    async with running(settings, handler) as server:
        status = await refused_status(server, headers={**bearer(ALICE), "Origin": "https://evil.example"})
        assert status == 403
        async with client(server, headers={**bearer(ALICE), "Origin": "https://EDITOR.example"}) as ws:
            assert (await ask(ws, INITIALIZE))["result"]["principal"] == "alice"
    assert len(handler.seen) == 1


@pytest.mark.timeout(30)
async def test_a_host_not_allowed_gets_403(tmp_path: Path) -> None:
    async with running(settings_for(tmp_path, allow_hosts=("acp.example",))) as server:
        port = server.address[1]
        assert (await raw_status(server, upgrade_request(f"evil.example:{port}")))[0] == 403
        assert (await raw_status(server, upgrade_request(f"127.0.0.1.evil.example:{port}")))[0] == 403
        for allowed in (f"localhost:{port}", f"[::1]:{port}", "acp.example", f"127.0.0.1:{port}"):
            assert (await raw_status(server, upgrade_request(allowed)))[0] == 101, allowed


# --- TLS (decision 1) ---


def test_tls_is_required_off_loopback(tmp_path: Path) -> None:
    for host in ("0.0.0.0", "192.0.2.1", "acp.example", "::"):
        with pytest.raises(ServeSetupError, match="without TLS"):
            check(settings_for(tmp_path, host=host))
        check(settings_for(tmp_path, host=host, insecure_no_tls=True))
        check(settings_for(tmp_path, host=host, certfile="c.pem", keyfile="k.pem"))
    for host in ("127.0.0.1", "::1", "localhost", "127.1.2.3"):
        check(settings_for(tmp_path, host=host))
    with pytest.raises(ServeSetupError, match="both"):
        check(settings_for(tmp_path, certfile="c.pem"))


@pytest.mark.timeout(30)
async def test_tls_with_certfile_and_keyfile_serves_wss(tmp_path: Path) -> None:
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    with anyio.fail_after(scaled(20)):
        await anyio.run_process(
            ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=localhost",
             "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1", "-keyout", str(key), "-out", str(cert)],
        )  # fmt: skip
    trust = ssl.create_default_context(cafile=str(cert))
    async with running(settings_for(tmp_path, certfile=str(cert), keyfile=str(key))) as server:
        assert server.url.startswith("wss://")
        url = f"wss://127.0.0.1:{server.address[1]}/acp"
        async with connect(url, ssl=trust, proxy=None, additional_headers=bearer(ALICE), open_timeout=T_WAIT) as ws:
            assert (await ask(ws, INITIALIZE))["result"]["principal"] == "alice"


@pytest.mark.timeout(30)
async def test_a_certificate_that_cannot_be_loaded_stops_the_start_before_anything_listens(tmp_path: Path) -> None:
    (tmp_path / "cert.pem").write_text("not a certificate\n")
    settings = settings_for(tmp_path, certfile=str(tmp_path / "cert.pem"), keyfile=str(tmp_path / "missing.pem"))
    with pytest.raises(ServeSetupError, match="cannot use the TLS certificate"), anyio.fail_after(T_WAIT):
        await serve_remote(settings, EchoHandler())
    assert not [name for name in os.listdir("/proc/self/fd") if _listens_on(int(name), settings)]


def _listens_on(fd: int, settings: RemoteSettings) -> bool:
    """Whether descriptor `fd` is a listening TCP socket bound to the settings' host (none may be left behind)."""
    try:
        candidate = socket.socket(fileno=os.dup(fd))
    except OSError:
        return False
    with candidate:
        try:
            listening = candidate.getsockopt(socket.SOL_SOCKET, socket.SO_ACCEPTCONN) == 1
            return listening and candidate.getsockname()[0] == settings.host
        except OSError:
            return False


# --- limits (decision 8) and dead peers (decision 6) ---


@pytest.mark.timeout(30)
async def test_connections_beyond_the_limit_get_503_before_the_upgrade(tmp_path: Path) -> None:
    handler = EchoHandler()
    async with running(settings_for(tmp_path, max_connections=2), handler) as server:
        async with client(server) as first, client(server) as second:
            await ask(first, INITIALIZE)
            await ask(second, INITIALIZE)
            assert await refused_status(server) == 503
        with anyio.fail_after(T_WAIT):
            while server.connections:  # noqa: ASYNC110 - a count the server exposes, no event
                await anyio.sleep(0.01)
        async with client(server) as third:  # room again once one has gone
            await ask(third, INITIALIZE)
    assert len(handler.seen) == 3


@pytest.mark.timeout(60)
async def test_a_reader_that_stops_reading_is_ended_as_a_dead_peer_and_others_go_on(tmp_path: Path) -> None:
    """The handler writes far more than the queue holds to a client that reads nothing: its writes never wait for
    the client (they all return while it reads nothing), one is refused, its input ends; another connection is
    served throughout."""
    handler = EchoHandler()
    settings = settings_for(tmp_path, max_queued_bytes=1 << 20)
    async with (
        running(settings, handler) as server,
        client(server, max_queue=1, max_size=None) as stalled,
        client(server) as other,
    ):
        await ask(stalled, INITIALIZE)
        await ask(other, INITIALIZE)
        flood = {"jsonrpc": "2.0", "id": 1, "method": "flood", "params": {"count": 400, "size": 256 * 1024}}
        await stalled.send(orjson.dumps(flood).decode())  # and never read again
        seen = handler.seen[connection_id(stalled)]
        with anyio.fail_after(T_WAIT):
            await seen.refused.wait()
            await seen.ended.wait()
        assert 0 < seen.writes_done < 400
        assert (await ask(other, {"jsonrpc": "2.0", "id": 5, "method": "still/here"}))["id"] == 5
        stalled.transport.abort()  # its closing handshake would wait behind all it never read


@pytest.mark.timeout(30)
async def test_a_disconnect_ends_only_that_connections_handler(tmp_path: Path) -> None:
    handler = EchoHandler()
    async with running(settings_for(tmp_path), handler) as server, client(server) as staying:
        await ask(staying, INITIALIZE)
        async with client(server, headers=bearer(BOB)) as leaving:
            await ask(leaving, INITIALIZE)
            gone = handler.seen[connection_id(leaving)]
        with anyio.fail_after(T_WAIT):
            await gone.ended.wait()
        assert gone.goodbye == "refused"  # nobody reads it: refused, as on a stdout the client closed
        kept = handler.seen[connection_id(staying)]
        assert not kept.ended.is_set()
        answer = await ask(staying, {"jsonrpc": "2.0", "id": 3, "method": "still/here"})
        assert answer["result"]["principal"] == "alice"


@pytest.mark.timeout(30)
async def test_a_quiet_connection_is_pinged_so_proxies_keep_it_open(tmp_path: Path) -> None:
    async with running(settings_for(tmp_path, ping_interval=0.2)) as server:
        with anyio.fail_after(T_WAIT):
            async with await anyio.connect_tcp("127.0.0.1", server.address[1]) as stream:
                await stream.send(upgrade_request(f"127.0.0.1:{server.address[1]}").replace("\n", "\r\n").encode())
                await stream.send(b"\r\n")
                data = b""
                while b"\r\n\r\n" not in data:
                    data += await stream.receive()
                head, _, frames = data.partition(b"\r\n\r\n")
                assert head.startswith(b"HTTP/1.1 101")
                while len(frames) < 2:
                    frames += await stream.receive()
                assert frames[0] == 0x89  # FIN + ping, the first thing sent on a connection nobody speaks on


def accepted_socket(local: tuple[str, int], peer: tuple[str, int]) -> socket.socket:
    """The server's own end of a connection, found among this process's descriptors (server and client share it)."""
    for name in os.listdir("/proc/self/fd"):
        try:
            candidate = socket.socket(fileno=os.dup(int(name)))
        except OSError:
            continue
        try:
            if candidate.getsockname()[:2] == local and candidate.getpeername()[:2] == peer:
                return candidate
        except OSError:
            pass
        candidate.close()
    raise AssertionError("the accepted socket was not found")


@pytest.mark.timeout(30)
@pytest.mark.skipif(not hasattr(socket, "TCP_USER_TIMEOUT"), reason="TCP_USER_TIMEOUT is Linux's")
async def test_accepted_sockets_carry_keepalive_and_tcp_user_timeout(tmp_path: Path) -> None:
    settings = settings_for(tmp_path, keepalive_idle=7, keepalive_interval=3, keepalive_count=4, user_timeout=12.5)
    async with running(settings) as server, client(server) as ws:
        await ask(ws, INITIALIZE)
        own = accepted_socket(server.address, ws.local_address[:2])
        with own:
            assert own.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE) == 1
            assert own.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE) == 7
            assert own.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPINTVL) == 3
            assert own.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPCNT) == 4
            assert own.getsockopt(socket.IPPROTO_TCP, socket.TCP_USER_TIMEOUT) == 12500


# --- health and the drain (decision 9) ---


@pytest.mark.timeout(30)
async def test_healthz_and_routes_answer_without_a_token(tmp_path: Path) -> None:
    async with running(settings_for(tmp_path)) as server:
        assert await raw_status(server, "GET /healthz HTTP/1.1\nHost: 10.1.2.3\n") == (200, b"ok\n")
        assert (await raw_status(server, "POST /healthz HTTP/1.1\nHost: 127.0.0.1\nContent-Length: 0\n"))[0] == 405
        assert (await raw_status(server, "GET /other HTTP/1.1\nHost: 127.0.0.1\n"))[0] == 404
        authorized = f"Host: 127.0.0.1\nAuthorization: Bearer {ALICE}\n"
        # A GET that is neither an upgrade nor a stream's (Streamable HTTP: tests/e2e/test_remote_http.py).
        assert (await raw_status(server, f"GET /acp HTTP/1.1\n{authorized}"))[0] == 406
        assert (await raw_status(server, f"PUT /acp HTTP/1.1\n{authorized}Content-Length: 0\n"))[0] == 405


async def h2c_get(server: RemoteServer, path: str) -> tuple[int, bytes]:
    """One HTTP/2 GET in cleartext with prior knowledge (h2c), as a load balancer speaking HTTP/2 sends it."""
    client_side = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
    client_side.initiate_connection()
    client_side.send_headers(
        1, [(":method", "GET"), (":path", path), (":scheme", "http"), (":authority", "127.0.0.1")], end_stream=True
    )
    status, body = 0, b""
    with anyio.fail_after(T_WAIT):
        async with await anyio.connect_tcp("127.0.0.1", server.address[1]) as stream:
            await stream.send(client_side.data_to_send())
            while True:
                for event in client_side.receive_data(await stream.receive()):
                    if isinstance(event, h2.events.ResponseReceived):
                        status = int(dict(event.headers or [])[b":status"])
                    elif isinstance(event, h2.events.DataReceived):
                        body += event.data or b""
                    elif isinstance(event, h2.events.StreamEnded):
                        return status, body
                await stream.send(client_side.data_to_send())


@pytest.mark.timeout(30)
async def test_healthz_is_served_over_h2c_too(tmp_path: Path) -> None:
    async with running(settings_for(tmp_path)) as server:
        assert await h2c_get(server, "/healthz") == (200, b"ok\n")
        assert (await h2c_get(server, "/acp"))[0] == 401


@pytest.mark.timeout(30)
async def test_a_handler_that_fails_ends_only_its_connection_with_1011(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level("INFO")
    echo = EchoHandler()

    async def failing_for_bob(peer: Peer, source: LineSource, sink: LineSink) -> None:
        if peer.principal.name == "bob":
            async for _ in source:
                raise RuntimeError("a defect")
        await echo(peer, source, sink)

    async with running(settings_for(tmp_path), failing_for_bob) as server, client(server) as alice:
        await ask(alice, INITIALIZE)
        async with client(server, headers=bearer(BOB)) as bob:
            await bob.send(orjson.dumps(INITIALIZE).decode())
            assert await closed_with(bob) == 1011
        assert (await ask(alice, {"jsonrpc": "2.0", "id": 7, "method": "still/here"}))["id"] == 7
        async with client(server, headers=bearer(BOB)) as again:  # the server still serves
            await again.send(orjson.dumps(INITIALIZE).decode())
            assert await closed_with(again) == 1011
    failures = [r for r in caplog.records if r.levelname == "ERROR" and "the handler failed" in r.getMessage()]
    assert len(failures) == 2 and all(r.exc_info for r in failures)  # said once each, with the defect's traceback
    ended = [r.getMessage() for r in caplog.records if r.getMessage().endswith("ended: the handler failed")]
    assert len(ended) == 2


def small_buffer_socket(server: RemoteServer) -> socket.socket:
    """A client socket with a small, fixed receive buffer (no autotuning): what it has not read holds back the
    server's sending after a few KiB, not after the tens of MiB loopback's buffers grow to."""
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * 1024)
    sock.connect(("127.0.0.1", server.address[1]))  # loopback: at once
    return sock


@pytest.mark.timeout(30)
async def test_a_drain_ends_every_connection_as_at_eof_and_refuses_new_ones(tmp_path: Path) -> None:
    handler = EchoHandler()
    handler.hold = True  # each handler, once its input ended, waits: the drain is watched while it runs
    # Once released, each writes 80 x 256 KiB to a client not reading yet (the sockets take less) and returns at
    # once: the rest is still queued when the handler returns, and is flushed before the close.
    handler.goodbyes, handler.goodbye_bytes = 80, 256 * 1024
    settings = settings_for(tmp_path, flush_timeout=T_WAIT)
    async with anyio.create_task_group() as group:
        server: RemoteServer = await group.start(serve_remote, settings, handler)
        slow: dict[str, Any] = {"max_size": None, "max_queue": 1, "compression": None}
        async with (
            client(server, sock=small_buffer_socket(server), **slow) as one,
            client(server, headers=bearer(BOB), sock=small_buffer_socket(server), **slow) as two,
        ):
            await ask(one, INITIALIZE)
            await ask(two, INITIALIZE)
            assert await raw_status(server, "GET /healthz HTTP/1.1\nHost: 127.0.0.1\n") == (200, b"ok\n")
            server.drain()
            with anyio.fail_after(T_WAIT):
                for seen in list(handler.seen.values()):
                    await seen.eof.wait()  # both handlers saw EOF, as at stdin EOF
            assert (await raw_status(server, "GET /healthz HTTP/1.1\nHost: 127.0.0.1\n"))[0] == 503
            assert await refused_status(server) == 503
            handler.release.set()
            await anyio.sleep(0.2)  # the handlers write it all and return while nobody reads
            received: dict[int, list[int]] = {}
            codes: dict[int, int | None] = {}

            async def read_to_the_close(index: int, ws: ClientConnection) -> None:
                received[index] = [orjson.loads(await ws.recv())["params"]["n"] for _ in range(80)]
                codes[index] = await closed_with(ws)

            with anyio.fail_after(T_WAIT):
                async with anyio.create_task_group() as readers:
                    readers.start_soon(read_to_the_close, 0, one)
                    readers.start_soon(read_to_the_close, 1, two)
            # What each handler wrote after its input ended arrived whole, in order, before the close.
            assert received == {0: list(range(80)), 1: list(range(80))}
            assert codes == {0: 1001, 1: 1001}
    assert [seen.goodbye for seen in handler.seen.values()] == ["written", "written"]


@pytest.mark.timeout(30)
async def test_a_handler_that_ignores_the_drain_is_cancelled_at_its_bound(tmp_path: Path) -> None:
    """Past `drain_timeout` the drain cancels a handler that will not end, while the server still listens: its own
    bound, not hypercorn's (which cancels what is left only after it has stopped listening)."""
    cancelled = anyio.Event()
    still_listening: list[bool] = []
    port = 0

    async def stubborn(peer: Peer, source: LineSource, sink: LineSink) -> None:
        async for _ in source:
            await sink.write(b'{"jsonrpc":"2.0","id":0,"result":{}}\n')
        try:
            await anyio.sleep_forever()  # never returns after EOF
        finally:
            try:  # a connect to a listening socket completes in the kernel, whatever the loop is doing
                socket.create_connection(("127.0.0.1", port), timeout=T_ACK).close()
                still_listening.append(True)
            except OSError:
                still_listening.append(False)
            cancelled.set()

    async with anyio.create_task_group() as group:
        server: RemoteServer = await group.start(serve_remote, settings_for(tmp_path, drain_timeout=0.3), stubborn)
        port = server.address[1]
        async with client(server) as ws:
            await ask(ws, INITIALIZE)
            with anyio.fail_after(T_WAIT):
                server.drain()
                await cancelled.wait()
    assert still_listening == [True]


# --- the official TypeScript SDK's WebSocket client ---

ROOT = Path(__file__).resolve().parents[2]
TS_CLIENT = ROOT / "tests" / "ts_client"


async def run_ts_client(server: RemoteServer, token: str, how: str) -> dict[str, Any]:
    node = shutil.which("node")
    installed = (TS_CLIENT / "node_modules" / "ws" / "package.json").exists()
    if node is None or not installed:
        missing = "`node` is not on PATH" if node is None else f"run `npm ci --prefix {TS_CLIENT}`"
        if os.environ.get("CI") == "true":
            pytest.fail(f"the TypeScript SDK's WebSocket client cannot run under CI: {missing}")
        pytest.skip(f"the TypeScript SDK's WebSocket client cannot run: {missing}")
    env = {**os.environ, "TS_FLOW_STEP_TIMEOUT_MS": f"{T_WAIT * 1000:.0f}"}
    with anyio.fail_after(scaled(20)):
        done = await anyio.run_process(
            [node, str(TS_CLIENT / "remote_ws.mjs"), ws_url(server), token, how], env=env, check=False
        )
    assert done.returncode == 0, done.stderr.decode(errors="replace")[-3000:]
    report = orjson.loads(done.stdout)
    assert isinstance(report, dict)
    return report


@pytest.mark.timeout(60)
@pytest.mark.parametrize("how", ["bearer", "subprotocol"])
async def test_the_typescript_sdks_websocket_client_is_served(tmp_path: Path, how: str) -> None:
    handler = EchoHandler()
    async with running(settings_for(tmp_path), handler) as server:
        report = await run_ts_client(server, BOB, how)
        assert "error" not in report, report
        assert report["initialize"]["protocolVersion"] == 1
        assert report["initialize"]["principal"] == "bob"
        assert report["next"]["method"] == "session/new"
        assert report["next"]["connectionId"] == report["initialize"]["connectionId"]
        refused = await run_ts_client(server, "nope" + "Q" * 30, how)
        assert "401" in refused["error"] and "initialize" not in refused
    (seen,) = handler.seen.values()
    assert [line["method"] for line in seen.lines] == ["initialize", "session/new"]
    assert seen.ended.is_set()


# A process serving with the echo handler until SIGTERM drains it: it prints its port, then what it saw at the end.
_SERVE_UNTIL_SIGTERM = """
import signal, sys, anyio
from pathlib import Path
from tests.e2e.test_remote_transport import EchoHandler, settings_for

async def main():
    handler = EchoHandler()
    async with anyio.create_task_group() as group:
        from acp_server.remote.server import serve_remote
        server = await group.start(
            lambda task_status: serve_remote(
                settings_for(Path(sys.argv[1])), handler, stop_signals=(signal.SIGTERM,), task_status=task_status
            )
        )
        print(server.address[1], flush=True)
    print("ended" if all(seen.ended.is_set() for seen in handler.seen.values()) else "not ended", flush=True)

anyio.run(main)
"""


@pytest.mark.timeout(60)
async def test_sigterm_drains_the_connections_and_the_process_exits(tmp_path: Path) -> None:
    command = [sys.executable, "-c", _SERVE_UNTIL_SIGTERM, str(tmp_path)]
    async with await anyio.open_process(command, cwd=ROOT) as process:
        assert process.stdout is not None
        with anyio.fail_after(T_WAIT):
            port = int((await process.stdout.receive()).split()[0])
        url = f"ws://127.0.0.1:{port}/acp"
        async with connect(url, proxy=None, additional_headers=bearer(ALICE), open_timeout=T_WAIT) as ws:
            await ask(ws, INITIALIZE)
            process.send_signal(signal.SIGTERM)
            assert await closed_with(ws) == 1001
        with anyio.fail_after(T_WAIT):
            assert await process.wait() == 0
            rest = b""
            async for data in process.stdout:
                rest += data
    assert rest.split() == [b"ended"]


def test_tokens_repr_names_principals_only() -> None:
    tokens = tokens_module.parse_tokens(f"alice {ALICE}\n", "t")
    assert isinstance(tokens, Tokens)
    assert repr(tokens) == "Tokens(alice)"
