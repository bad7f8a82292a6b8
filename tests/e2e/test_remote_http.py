"""`acp-server serve`'s Streamable HTTP profile for real (REMOTE.md, "What the transport is", decisions 6 and 8): the
console script in a subprocess on 127.0.0.1, driven by httpx (HTTP/1.1, h2c with prior knowledge, and HTTP/2 over TLS
with ALPN) and by the official TypeScript SDK's `createHttpStream`. Every message the server writes, in a POST's body
or on an SSE stream, is validated against the official schema.

One test per status-code rule and per routing rule; each was seen failing with its rule taken out.
"""

from __future__ import annotations

import os
import shutil
import socket
import ssl
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx
import orjson
import pytest

from acp_server.remote.settings import MAX_MESSAGE_BYTES
from tests.e2e.test_remote_transport import INITIALIZE, EchoHandler, running, settings_for
from tests.e2e.test_serve import ALICE, BOB, Server, prompt, serving
from tests.support.harness import T_ACK, T_WAIT, scaled
from tests.support.wire_schema import WireValidator

pytestmark = pytest.mark.timeout(60)

JSON = {"Content-Type": "application/json"}
STREAM = {"Accept": "text/event-stream"}
ROOT = Path(__file__).resolve().parents[2]
TS_CLIENT = ROOT / "tests" / "ts_client"


def http_url(server: Server) -> str:
    return server.url.replace("wss://", "https://").replace("ws://", "http://")


def auth(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def initialize_params(version: int) -> dict[str, Any]:
    if version == 1:
        return {"protocolVersion": 1, "clientCapabilities": {}}
    return {"protocolVersion": 2, "capabilities": {}}


class HttpEditor:
    """One editor over Streamable HTTP: POSTs what it sends (validated), reads SSE streams into `received` (each
    message validated, with the stream it came on: None for the connection's, else the session id)."""

    def __init__(self, client: httpx.AsyncClient, url: str, token: str, name: str) -> None:
        self.client = client
        self.url = url
        self.token = token
        self.name = name
        self.connection_id = ""
        self.validator = WireValidator()
        self.received: list[tuple[str | None, dict[str, Any]]] = []
        self.comments: list[tuple[str | None, str]] = []
        self.ended: dict[str | None, anyio.Event] = {}
        self._arrived = anyio.Event()
        self._ids = iter(range(1, 1_000_000))

    def headers(self, session: str | None = None, **extra: str) -> dict[str, str]:
        headers = {**auth(self.token), "Acp-Connection-Id": self.connection_id, **extra}
        if session is not None:
            headers["Acp-Session-Id"] = session
        return headers

    async def initialize(self, version: int = 1) -> dict[str, Any]:
        message = {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": initialize_params(version)}
        self.validator.client_sent(message)
        answer = await self.client.post(self.url, json=message, headers=auth(self.token))
        assert answer.status_code == 200, answer.text
        assert answer.headers["content-type"] == "application/json"
        self.connection_id = answer.headers["acp-connection-id"]
        body = self.validator.server_wrote(answer.content + b"\n")
        assert body is not None
        return body

    async def read_stream(
        self, session: str | None = None, *, task_status: anyio.abc.TaskStatus[int] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        """One SSE stream until it ends; `task_status.started` with the status once its headers arrived."""
        ended = self.ended[session] = anyio.Event()
        try:
            async with self.client.stream("GET", self.url, headers=self.headers(session, **STREAM)) as response:
                task_status.started(response.status_code)
                if response.status_code != 200:
                    return
                assert response.headers["content-type"] == "text/event-stream"
                async for line in response.aiter_lines():
                    if line.startswith("data: "):
                        message = self.validator.server_wrote(line[6:].encode() + b"\n")
                        assert message is not None
                        self.received.append((session, message))
                    elif line.startswith(":"):
                        self.comments.append((session, line))
                    self._arrived.set()
        except (httpx.RemoteProtocolError, httpx.ReadError):
            pass  # the server ended the stream without a last chunk (a dead peer)
        finally:
            ended.set()
            self._arrived.set()

    async def post(self, message: dict[str, Any], session: str | None = None) -> httpx.Response:
        """POST one message; its `Acp-Session-Id` is `params.sessionId` unless `session` says otherwise."""
        message = {"jsonrpc": "2.0", **message}
        self.validator.client_sent(message)
        params = message.get("params")
        if session is None and isinstance(params, dict) and isinstance(params.get("sessionId"), str):
            session = params["sessionId"]
        return await self.client.post(self.url, content=orjson.dumps(message), headers=self.headers(session, **JSON))

    async def request(self, method: str, params: dict[str, Any]) -> int:
        request_id = next(self._ids)
        answer = await self.post({"id": request_id, "method": method, "params": params})
        assert answer.status_code == 202, answer.text
        return request_id

    async def notify(self, method: str, params: dict[str, Any]) -> None:
        answer = await self.post({"method": method, "params": params})
        assert answer.status_code == 202, answer.text

    async def call(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        return await self.response(await self.request(method, params))

    async def wait_for(
        self, predicate: Callable[[dict[str, Any]], bool], timeout: float = T_WAIT
    ) -> tuple[str | None, dict[str, Any]]:
        with anyio.fail_after(timeout):
            while True:
                for stream, message in self.received:
                    if predicate(message):
                        return stream, message
                self._arrived = anyio.Event()
                await self._arrived.wait()

    async def response_on(self, request_id: int, timeout: float = T_WAIT) -> tuple[str | None, dict[str, Any]]:
        return await self.wait_for(lambda m: "method" not in m and m.get("id") == request_id, timeout)

    async def response(self, request_id: int, timeout: float = T_WAIT) -> dict[str, Any]:
        return (await self.response_on(request_id, timeout))[1]

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
            for _, m in self.received
            if m.get("method") == "session/update"
            and m["params"]["sessionId"] == session_id
            and m["params"]["update"].get("sessionUpdate") == "agent_message_chunk"
        ]

    async def delete(self) -> int:
        return (await self.client.delete(self.url, headers=self.headers())).status_code


@asynccontextmanager
async def http_client(**options: Any) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(timeout=T_WAIT, trust_env=False, **options) as client:
        yield client


@asynccontextmanager
async def editor(
    server: Server, token: str = ALICE, name: str = "alice", version: int = 1, **options: Any
) -> AsyncIterator[HttpEditor]:
    """An initialized editor reading its connection's stream; DELETEd on the way out."""
    async with http_client(**options) as client, anyio.create_task_group() as group:
        me = HttpEditor(client, http_url(server), token, name)
        answer = await me.initialize(version)
        assert answer["result"]["protocolVersion"] == version, answer
        assert await group.start(me.read_stream) == 200
        try:
            yield me
        finally:
            await me.delete()
            with anyio.fail_after(T_WAIT):
                await me.ended[None].wait()
            group.cancel_scope.cancel()
            assert me.validator.violations == [], me.validator.violations


async def open_session_stream(group: anyio.abc.TaskGroup, me: HttpEditor, session: str) -> None:
    assert await group.start(me.read_stream, session) == 200


async def new_session(me: HttpEditor, cwd: Path) -> str:
    answer = await me.call("session/new", {"cwd": str(cwd), "mcpServers": []})
    assert "result" in answer, answer
    return str(answer["result"]["sessionId"])


# --- the profile: making a connection, routing, replays ---


@pytest.mark.parametrize("version", [1, 2])
async def test_a_turn_streams_on_the_session_stream_and_a_cancel_ends_it(tmp_path: Path, version: int) -> None:
    async with serving(tmp_path) as server, editor(server, version=version) as me, anyio.create_task_group() as group:
        stream, created = await me.response_on(
            await me.request("session/new", {"cwd": str(server.workspace), "mcpServers": []})
        )
        assert stream is None  # not session-scoped: on the connection's stream
        session = created["result"]["sessionId"]
        await open_session_stream(group, me, session)
        prompt_id = await me.request("session/prompt", prompt(session, "A", "g"))
        await me.probe("gate_reached", session)
        assert me.texts(session) == ["A-before"]
        await me.notify("session/cancel", {"sessionId": session})
        if version == 1:
            stream, answer = await me.response_on(prompt_id, T_ACK)
            assert answer["result"] == {"stopReason": "cancelled"}
        else:
            stream, idle = await me.wait_for(
                lambda m: m.get("method") == "session/update" and m["params"]["update"].get("state") == "idle", T_ACK
            )
            assert idle["params"]["update"]["stopReason"] == "cancelled"
        assert stream == session
        # Everything tied to the session came on its stream, nothing else did.
        for on, message in me.received:
            tied = message.get("params", {}).get("sessionId") == session or message.get("id") == prompt_id
            assert (on == session) == tied, (on, message)
        group.cancel_scope.cancel()
    assert b"ended (ACP v%d)" % version in server.stderr


async def test_messages_for_a_session_stream_not_open_yet_wait_for_it(tmp_path: Path) -> None:
    async with serving(tmp_path) as server, editor(server) as me, anyio.create_task_group() as group:
        session = await new_session(me, server.workspace)
        # No session stream yet: the prompt's answer and updates wait for it...
        prompt_id = await me.request("session/prompt", prompt(session, "A", "g"))
        await anyio.sleep(scaled(0.3))
        assert [m for on, m in me.received if on is None and m.get("params", {}).get("sessionId") == session] == []
        await me.notify("_scripted/release", {"sessionId": session, "gate": "g"})
        await anyio.sleep(scaled(0.3))
        # ... and arrive, all of them, in order, once it opens.
        await open_session_stream(group, me, session)
        assert (await me.response(prompt_id))["result"] == {"stopReason": "end_turn"}
        assert me.texts(session) == ["A-before", "A-after"]
        on_session = [m for on, m in me.received if on == session]
        chunks = [i for i, m in enumerate(on_session) if m.get("params", {}).get("update", {}).get("content")]
        answered = next(i for i, m in enumerate(on_session) if m.get("id") == prompt_id)
        assert chunks and max(chunks) < answered  # in the order written
        group.cancel_scope.cancel()


async def test_a_load_replays_on_the_session_stream_before_its_response(tmp_path: Path) -> None:
    async with serving(tmp_path) as server:
        async with editor(server) as first, anyio.create_task_group() as group:
            session = await new_session(first, server.workspace)
            await open_session_stream(group, first, session)
            turn = await first.request("session/prompt", prompt(session, "A", "g"))
            await first.probe("gate_reached", session)
            await first.notify("_scripted/release", {"sessionId": session, "gate": "g"})
            assert (await first.response(turn))["result"] == {"stopReason": "end_turn"}
            group.cancel_scope.cancel()
        async with editor(server) as again, anyio.create_task_group() as group:
            await open_session_stream(group, again, session)  # as the SDK does: the stream before the load
            load = {"sessionId": session, "cwd": str(server.workspace), "mcpServers": []}
            stream, loaded = await again.response_on(await again.request("session/load", load))
            assert "result" in loaded, loaded
            assert stream == session
            on_session = [m for on, m in again.received if on == session]
            assert on_session[-1] is loaded  # the response after every replayed update
            assert again.texts(session) == ["A-before", "A-after"]
            assert not [m for on, m in again.received if on is None and m.get("method") == "session/update"]
            group.cancel_scope.cancel()


async def test_a_permission_request_comes_on_the_session_stream_and_is_answered_over_post(tmp_path: Path) -> None:
    question = {
        "toolCall": {"toolCallId": "call_1", "title": "write /y"},
        "options": [
            {"optionId": "allow-once", "name": "Allow", "kind": "allow_once"},
            {"optionId": "reject-once", "name": "Reject", "kind": "reject_once"},
        ],
    }
    script = [
        {"tool": "test_client_request", "args": {"method": "session/request_permission", "params": question}},
        {"say": "granted"},
    ]
    async with serving(tmp_path) as server, editor(server) as me, anyio.create_task_group() as group:
        session = await new_session(me, server.workspace)
        await open_session_stream(group, me, session)
        params = {"sessionId": session, "prompt": [{"type": "text", "text": "ask"}], "_meta": {"scripted": script}}
        turn = await me.request("session/prompt", params)
        stream, asked = await me.wait_for(lambda m: m.get("method") == "session/request_permission")
        assert stream == session
        answer = {"id": asked["id"], "result": {"outcome": {"outcome": "selected", "optionId": "allow-once"}}}
        assert (await me.post(answer, session="sess_other")).status_code == 400  # its session's id, or nothing
        assert (await me.post(answer)).status_code == 400  # the answer carries its session's header too
        assert (await me.post(answer, session=session)).status_code == 202
        assert (await me.response(turn))["result"] == {"stopReason": "end_turn"}
        assert me.texts(session)[-1] == "granted"
        group.cancel_scope.cancel()


async def test_a_retraction_follows_its_request_on_the_session_stream(tmp_path: Path) -> None:
    """v2: a cancel while the client holds a request of the turn's retracts it (`$/cancel_request`, which names no
    session) on the stream the question came on, before the turn's last updates."""
    script = [{"tool": "test_client_request", "args": {"method": "_test/hold", "params": {}}}]
    async with serving(tmp_path) as server, editor(server, version=2) as me, anyio.create_task_group() as group:
        session = await new_session(me, server.workspace)
        await open_session_stream(group, me, session)
        params = {"sessionId": session, "prompt": [{"type": "text", "text": "ask"}], "_meta": {"scripted": script}}
        await me.request("session/prompt", params)
        came_on, asked = await me.wait_for(lambda m: m.get("method") == "_test/hold")
        assert came_on == session and asked["params"]["sessionId"] == session
        await me.notify("session/cancel", {"sessionId": session})
        stream, retraction = await me.wait_for(
            lambda m: m.get("method") == "$/cancel_request" and m["params"].get("requestId") == asked["id"]
        )
        assert stream == session
        _, idle = await me.wait_for(
            lambda m: m.get("method") == "session/update" and m["params"]["update"].get("state") == "idle"
        )
        on_session = [m for on, m in me.received if on == session]
        assert on_session.index(retraction) < on_session.index(idle)
        group.cancel_scope.cancel()


async def test_a_subagents_child_session_speaks_on_the_connection_stream(tmp_path: Path) -> None:
    """A child session's messages (test-mode probes) name a session the client never named: they come on the
    connection's stream, which the client reads, instead of waiting for a stream nobody will open."""
    child = [{"say": "child answer"}]
    script = [{"tool": "delegate", "args": {"task": "count", "script": child}}, {"say": "parent done"}]
    async with serving(tmp_path) as server, editor(server) as me, anyio.create_task_group() as group:
        session = await new_session(me, server.workspace)
        await open_session_stream(group, me, session)
        params = {"sessionId": session, "prompt": [{"type": "text", "text": "go"}], "_meta": {"scripted": script}}
        assert (await me.response(await me.request("session/prompt", params)))["result"] == {"stopReason": "end_turn"}
        stream, _ = await me.wait_for(
            lambda m: m.get("method") == "_scripted/probe" and m["params"].get("sessionId") not in (None, session)
        )
        assert stream is None
        group.cancel_scope.cancel()


async def test_delete_cancels_the_running_turn_and_the_session_loads_on_a_new_connection(tmp_path: Path) -> None:
    async with serving(tmp_path) as server:
        async with http_client() as client, anyio.create_task_group() as group:
            me = HttpEditor(client, http_url(server), ALICE, "alice")
            await me.initialize()
            await group.start(me.read_stream)
            session = await new_session(me, server.workspace)
            await open_session_stream(group, me, session)
            await me.request("session/prompt", prompt(session, "A", "g"))
            await me.probe("gate_reached", session)
            # Another connection of alice's watches the session's status (`_acp_server/stats` counts only the
            # caller's own turns): `open` while it is held here, `saved` once its turn has ended and it is let go.
            async with editor(server, name="watcher") as watcher, anyio.create_task_group() as watching:
                await open_session_stream(watching, watcher, session)  # where the answers about it come
                status = {"sessionId": session}
                assert (await watcher.call("session/status", status))["result"]["status"] == "open"
                assert await me.delete() == 202
                with anyio.fail_after(T_WAIT):  # both streams end
                    await me.ended[None].wait()
                    await me.ended[session].wait()
                with anyio.fail_after(T_ACK):  # the turn was cancelled as at stdin EOF, the session let go
                    while (await watcher.call("session/status", status))["result"]["status"] != "saved":  # noqa: ASYNC110 - the server's answer is what is watched
                        await anyio.sleep(0.05)
                watching.cancel_scope.cancel()
            # The connection is gone: its id is unknown from now on.
            assert (await me.post({"id": 99, "method": "session/list", "params": {}})).status_code == 404
            assert await me.delete() == 404
            assert me.validator.violations == []
        async with editor(server) as again, anyio.create_task_group() as group:
            await open_session_stream(group, again, session)
            loaded = await again.call(
                "session/load", {"sessionId": session, "cwd": str(server.workspace), "mcpServers": []}
            )
            assert "result" in loaded, loaded
            replayed = again.texts(session)  # the turn DELETE cancelled, as stored: never "A-after"
            assert replayed[0] == "A-before" and "A-after" not in replayed, replayed
            turn = await again.request("session/prompt", prompt(session, "C", "gc"))
            await again.probe("gate_reached", session)
            await again.notify("_scripted/release", {"sessionId": session, "gate": "gc"})
            assert (await again.response(turn))["result"] == {"stopReason": "end_turn"}
            group.cancel_scope.cancel()


# --- status codes ---


async def test_a_missing_or_wrong_token_gets_401_on_every_method(tmp_path: Path) -> None:
    async with serving(tmp_path) as server, http_client() as client:
        url = http_url(server)
        body = {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": initialize_params(1)}
        for headers in ({}, auth(ALICE + "x"), {"Authorization": "Basic bm9ib2R5Ondyb25n"}):
            assert (await client.post(url, json=body, headers=headers)).status_code == 401
            assert (await client.get(url, headers={**headers, **STREAM, "Acp-Connection-Id": "x"})).status_code == 401
            assert (await client.delete(url, headers={**headers, "Acp-Connection-Id": "x"})).status_code == 401
        basic = await client.post(url.replace("http://", f"http://bob:{BOB}@"), json=body)  # httpx sends Basic
        assert basic.status_code == 200 and "acp-connection-id" in basic.headers


async def test_a_foreign_origin_or_host_gets_403(tmp_path: Path) -> None:
    async with serving(tmp_path) as server, http_client() as client:
        body = {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": initialize_params(1)}
        url = http_url(server)
        assert (
            await client.post(url, json=body, headers={**auth(ALICE), "Origin": "https://evil.example"})
        ).status_code == 403
        assert (await client.post(url, json=body, headers={**auth(ALICE), "Host": "evil.example"})).status_code == 403
        assert (await client.post(url, json=body, headers=auth(ALICE))).status_code == 200


async def test_an_unknown_or_another_principals_connection_id_gets_404(tmp_path: Path) -> None:
    async with serving(tmp_path) as server, editor(server, ALICE) as alice, http_client() as client:
        listing = {"jsonrpc": "2.0", "id": 5, "method": "session/list", "params": {}}
        for token, connection in ((ALICE, "no-such-connection"), (BOB, alice.connection_id)):
            headers = {**auth(token), "Acp-Connection-Id": connection}
            assert (await client.post(alice.url, json=listing, headers=headers)).status_code == 404
            assert (await client.get(alice.url, headers={**headers, **STREAM})).status_code == 404
            assert (await client.delete(alice.url, headers=headers)).status_code == 404
        # bob's tries changed nothing for alice.
        assert "result" in await alice.call("session/list", {})


async def test_a_session_stream_is_200_for_any_session_id_and_409_for_a_second_reader(tmp_path: Path) -> None:
    async with serving(tmp_path) as server, editor(server) as me, anyio.create_task_group() as group:
        for never_existed in ("sess_" + "0" * 32, "anything at all"):
            await open_session_stream(group, me, never_existed)
        mine = await new_session(me, server.workspace)
        await open_session_stream(group, me, mine)
        with anyio.fail_after(T_WAIT):  # a second reader served would never end: bounded
            async with me.client.stream("GET", me.url, headers=me.headers(mine, **STREAM)) as second:
                assert second.status_code == 409
        group.cancel_scope.cancel()


async def test_a_second_reader_of_the_connections_stream_gets_what_is_written_while_it_reads(tmp_path: Path) -> None:
    # acp-openai-gateway opens the connection's stream around each `session/new`, two at once for two chats, and
    # picks its answer out by id: each reader gets every message written for that stream while it reads.
    async with serving(tmp_path) as server, editor(server) as me:
        second: list[dict[str, Any]] = []
        arrived = anyio.Event()

        async def read_second(*, task_status: anyio.abc.TaskStatus[int]) -> None:
            async with me.client.stream("GET", me.url, headers=me.headers(None, **STREAM)) as response:
                task_status.started(response.status_code)
                async for line in response.aiter_lines():
                    if line.startswith("data: "):
                        message = me.validator.server_wrote(line[6:].encode() + b"\n")
                        assert message is not None
                        second.append(message)
                        arrived.set()

        async with anyio.create_task_group() as group:
            assert await group.start(read_second) == 200
            request_id = await me.request("session/new", {"cwd": str(server.workspace), "mcpServers": []})
            first = await me.response(request_id)  # the first reader's copy
            with anyio.fail_after(T_WAIT):
                await arrived.wait()
            assert second == [first]
            assert "sessionId" in first["result"]
            group.cancel_scope.cancel()


async def test_what_a_further_reader_of_the_connections_stream_got_does_not_wait_for_a_later_first(
    tmp_path: Path,
) -> None:
    async with serving(tmp_path) as server, http_client() as client, anyio.create_task_group() as group:
        me = HttpEditor(client, http_url(server), ALICE, "alice")
        await me.initialize()
        first = anyio.CancelScope()

        async def read_first(*, task_status: anyio.abc.TaskStatus[int]) -> None:
            with first:
                await me.read_stream(task_status=task_status)

        further: list[dict[str, Any]] = []
        arrived = anyio.Event()

        async def read_further(*, task_status: anyio.abc.TaskStatus[int]) -> None:
            async with client.stream("GET", me.url, headers=me.headers(None, **STREAM)) as response:
                task_status.started(response.status_code)
                async for line in response.aiter_lines():
                    if line.startswith("data: "):
                        further.append(orjson.loads(line[6:]))
                        arrived.set()

        assert await group.start(read_first) == 200
        assert await group.start(read_further) == 200
        first.cancel()  # the first reader goes; the further one stays
        await anyio.sleep(scaled(0.2))  # for the server to see it go (were it not seen, nothing would be kept)
        listed = await me.request("session/list", {})
        with anyio.fail_after(T_WAIT):
            await arrived.wait()
        assert [m.get("id") for m in further] == [listed]
        # A new first reader: what the further one got is not given again; the next answer is.
        assert await group.start(me.read_stream) == 200
        again = await me.request("session/list", {})
        await me.response(again)
        assert [m.get("id") for _, m in me.received] == [again]
        group.cancel_scope.cancel()


async def test_a_missing_or_mismatched_session_header_gets_400(tmp_path: Path) -> None:
    async with serving(tmp_path) as server, editor(server) as me:
        session = await new_session(me, server.workspace)
        message = {"id": 40, "method": "session/set_mode", "params": {"sessionId": session, "modeId": "default"}}
        body = orjson.dumps({"jsonrpc": "2.0", **message})
        assert (await me.client.post(me.url, content=body, headers=me.headers(None, **JSON))).status_code == 400
        assert (await me.client.post(me.url, content=body, headers=me.headers("sess_x", **JSON))).status_code == 400
        without_connection = {**auth(ALICE), **JSON, "Acp-Session-Id": session}
        assert (await me.client.post(me.url, content=body, headers=without_connection)).status_code == 400
        assert (await me.post(message)).status_code == 202


async def test_wrong_accept_content_type_size_and_batches_get_406_415_413_and_501(tmp_path: Path) -> None:
    async with serving(tmp_path) as server, editor(server) as me:
        plain = await me.client.get(me.url, headers=me.headers(None, Accept="application/json"))
        assert plain.status_code == 406
        listing = orjson.dumps({"jsonrpc": "2.0", "id": 1, "method": "session/list", "params": {}})
        text = await me.client.post(me.url, content=listing, headers=me.headers(None, **{"Content-Type": "text/plain"}))
        assert text.status_code == 415
        batch = await me.client.post(me.url, content=b"[" + listing + b"]", headers=me.headers(None, **JSON))
        assert batch.status_code == 501
        big = {"id": 2, "method": "session/list", "params": {"cursor": "x" * MAX_MESSAGE_BYTES}}
        assert (await me.post(big)).status_code == 413
        # The request failed; the connection stays.
        assert "result" in await me.call("session/list", {})


async def test_connections_beyond_the_limit_get_503(tmp_path: Path) -> None:
    async with serving(tmp_path, "--max-connections", "1") as server, editor(server), http_client() as client:
        body = {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": initialize_params(1)}
        assert (await client.post(http_url(server), json=body, headers=auth(ALICE))).status_code == 503


async def test_a_failed_initialize_is_a_json_rpc_error_in_a_200_with_the_connection_id(tmp_path: Path) -> None:
    """What the SDK's client reads (`postInitialize`): a JSON-RPC response body with `Acp-Connection-Id`, so the
    caller gets the agent's error; the connection stays until its DELETE, as stdio's does."""
    async with serving(tmp_path) as server, http_client() as client:
        body = {"jsonrpc": "2.0", "id": 7, "method": "initialize", "params": {"protocolVersion": "one"}}
        answer = await client.post(http_url(server), json=body, headers=auth(ALICE))
        assert answer.status_code == 200
        assert answer.json()["id"] == 7 and "error" in answer.json(), answer.json()
        connection = answer.headers["acp-connection-id"]
        assert (
            await client.delete(http_url(server), headers={**auth(ALICE), "Acp-Connection-Id": connection})
        ).status_code == 202
        no_id = {"jsonrpc": "2.0", "method": "initialize", "params": initialize_params(1)}
        assert (await client.post(http_url(server), json=no_id, headers=auth(ALICE))).status_code == 400


# --- liveness ---

IDLE = f"{scaled(1):g}"  # long enough for the requests a test makes in a row on a loaded machine


async def test_a_quiet_stream_gets_keep_alive_comments(tmp_path: Path) -> None:
    async with serving(tmp_path, "--sse-keepalive", "0.2") as server, editor(server) as me:
        with anyio.fail_after(T_WAIT):
            while not any(comment == ": keep-alive" for _, comment in me.comments):
                me._arrived = anyio.Event()
                await me._arrived.wait()


async def test_a_connection_with_no_request_and_no_stream_expires_as_a_dead_peer(tmp_path: Path) -> None:
    async with serving(tmp_path, "--http-idle-timeout", IDLE) as server, http_client() as client:
        me = HttpEditor(client, http_url(server), ALICE, "alice")
        await me.initialize()
        session = await new_session_without_stream(me, server)
        await me.request("session/prompt", prompt(session, "A", "g"))
        # Nobody reads and nobody asks (a request would be activity): the connection ends, its turn is cancelled,
        # and its id is unknown from then on. The expiry comes within 1.25 times the bound.
        await anyio.sleep(float(IDLE) * 2)
        assert (await me.post({"id": 90, "method": "session/list", "params": {}})).status_code == 404
    assert b"no request and no open stream for %s s: ended as a dead peer" % IDLE.encode() in server.stderr


async def new_session_without_stream(me: HttpEditor, server: Server) -> str:
    """A session made while no stream is read: its answer is taken from the connection's stream afterwards."""
    request_id = await me.request("session/new", {"cwd": str(server.workspace), "mcpServers": []})
    async with anyio.create_task_group() as group:
        await group.start(me.read_stream)
        answer = await me.response(request_id)
        group.cancel_scope.cancel()
    return str(answer["result"]["sessionId"])


async def test_a_reader_open_keeps_the_connection_past_the_idle_timeout(tmp_path: Path) -> None:
    async with serving(tmp_path, "--http-idle-timeout", IDLE) as server, editor(server) as me:
        await anyio.sleep(float(IDLE) * 3)
        assert "result" in await me.call("session/list", {})


# --- limits, in the transport room itself (serve_remote with the echo handler: its limits are settings here) ---


def raw_stream_get(port: int, connection: str, session: str | None = None) -> socket.socket:
    """A stream GET over a socket with a small receive buffer that is then never read: a reader that stopped."""
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * 1024)
    sock.connect(("127.0.0.1", port))
    extra = f"Acp-Session-Id: {session}\r\n" if session else ""
    sock.sendall(
        f"GET /acp HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {ALICE}\r\n"
        f"Accept: text/event-stream\r\nAcp-Connection-Id: {connection}\r\n{extra}\r\n".encode()
    )
    return sock


def response_head(sock: socket.socket) -> bytes:
    sock.settimeout(T_WAIT)
    data = b""
    while b"\r\n\r\n" not in data and (chunk := sock.recv(4096)):
        data += chunk
    return data


async def echo_initialize(client: httpx.AsyncClient, url: str) -> str:
    answer = await client.post(url, json=INITIALIZE, headers=auth(ALICE))
    assert answer.status_code == 200, answer.text
    return answer.headers["acp-connection-id"]


@pytest.mark.timeout(30)
async def test_a_stream_reader_that_stops_reading_ends_its_connection_as_a_dead_peer(tmp_path: Path) -> None:
    handler = EchoHandler()
    async with running(settings_for(tmp_path, max_queued_bytes=1 << 20), handler) as server, http_client() as client:
        url = f"http://127.0.0.1:{server.address[1]}/acp"
        stalled = await echo_initialize(client, url)
        other = await echo_initialize(client, url)
        with raw_stream_get(server.address[1], stalled):
            flood = {"jsonrpc": "2.0", "id": 1, "method": "flood", "params": {"count": 64, "size": 256 * 1024}}
            headers = {**auth(ALICE), "Acp-Connection-Id": stalled}
            assert (await client.post(url, json=flood, headers=headers)).status_code == 202
            seen = handler.seen[stalled]
            with anyio.fail_after(T_WAIT):
                await seen.refused.wait()  # a write refused, never one that waited for the reader
                await seen.ended.wait()
            assert seen.writes_done < 64
            assert (await client.post(url, json=flood, headers=headers)).status_code == 404  # it has ended
        # The other connection was never held back.
        headers = {**auth(ALICE), "Acp-Connection-Id": other}
        ping = {"jsonrpc": "2.0", "id": 2, "method": "still/here"}
        assert (await client.post(url, json=ping, headers=headers)).status_code == 202
        assert not handler.seen[other].ended.is_set()


@pytest.mark.timeout(30)
async def test_beyond_64_open_session_streams_a_connection_gets_429(tmp_path: Path) -> None:
    async with running(settings_for(tmp_path)) as server, http_client() as client:
        url = f"http://127.0.0.1:{server.address[1]}/acp"
        connection = await echo_initialize(client, url)
        readers = [raw_stream_get(server.address[1], connection, f"s{number}") for number in range(64)]
        try:
            with anyio.fail_after(T_WAIT):
                for reader in readers:  # each has its stream's head: it is open
                    assert (await anyio.to_thread.run_sync(response_head, reader)).startswith(b"HTTP/1.1 200 ")
            headers = {**auth(ALICE), **STREAM, "Acp-Connection-Id": connection}
            assert (await client.get(url, headers={**headers, "Acp-Session-Id": "s0"})).status_code == 409
            with anyio.fail_after(T_WAIT):  # a 65th stream served would never end: bounded
                async with client.stream("GET", url, headers={**headers, "Acp-Session-Id": "s64"}) as over:
                    assert over.status_code == 429
            # The connection's stream: its first reader is always served; a further one counts as a stream too.
            readers.append(raw_stream_get(server.address[1], connection))
            with anyio.fail_after(T_WAIT):
                assert (await anyio.to_thread.run_sync(response_head, readers[-1])).startswith(b"HTTP/1.1 200 ")
                async with client.stream("GET", url, headers=headers) as over:
                    assert over.status_code == 429
        finally:
            for reader in readers:
                reader.close()


# --- HTTP/2 ---


async def test_h2c_with_prior_knowledge_serves_the_profile(tmp_path: Path) -> None:
    async with serving(tmp_path) as server, editor(server, http1=False, http2=True) as me:
        answer = await me.client.get(http_url(server).replace("/acp", "/healthz"))
        assert answer.http_version == "HTTP/2"
        assert "result" in await me.call("session/list", {})


async def test_tls_with_alpn_serves_the_profile_over_http2(tmp_path: Path) -> None:
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    with anyio.fail_after(scaled(20)):
        await anyio.run_process(
            ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=localhost",
             "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1", "-keyout", str(key), "-out", str(cert)],
        )  # fmt: skip
    trust = ssl.create_default_context(cafile=str(cert))
    async with (
        serving(tmp_path, "--certfile", str(cert), "--keyfile", str(key)) as server,
        editor(server, http2=True, verify=trust) as me,
        anyio.create_task_group() as group,
    ):
        assert server.url.startswith("wss://")
        answer = await me.client.get(http_url(server).replace("/acp", "/healthz"))
        assert answer.http_version == "HTTP/2"
        session = await new_session(me, server.workspace)
        await open_session_stream(group, me, session)
        turn = await me.request("session/prompt", prompt(session, "A", "g"))
        await me.probe("gate_reached", session)
        await me.notify("_scripted/release", {"sessionId": session, "gate": "g"})
        assert (await me.response(turn))["result"] == {"stopReason": "end_turn"}
        group.cancel_scope.cancel()


# --- the official TypeScript SDK's HTTP client ---


@pytest.mark.parametrize("version", [1, 2])
async def test_the_typescript_sdks_http_client_runs_a_turn_and_a_cancel(tmp_path: Path, version: int) -> None:
    node = shutil.which("node")
    installed = (TS_CLIENT / "node_modules" / "@agentclientprotocol" / "sdk" / "package.json").exists()
    if node is None or not installed:
        missing = "`node` is not on PATH" if node is None else f"run `npm ci --prefix {TS_CLIENT}`"
        if os.environ.get("CI") == "true":
            pytest.fail(f"the TypeScript SDK's HTTP client cannot run under CI: {missing}")
        pytest.skip(f"the TypeScript SDK's HTTP client cannot run: {missing}")
    env = {**os.environ, "TS_FLOW_STEP_TIMEOUT_MS": f"{T_WAIT * 1000:.0f}"}
    async with serving(tmp_path) as server:
        with anyio.fail_after(scaled(30)):
            done = await anyio.run_process(
                [node, str(TS_CLIENT / "remote_http.mjs"), http_url(server), BOB, str(version)],
                env=env,
                cwd=server.workspace,
                check=False,
            )
    assert done.returncode == 0, done.stderr.decode(errors="replace")[-3000:]
    report = orjson.loads(done.stdout)
    assert "error" not in report, report
    assert report["schemaErrors"] == [], report["schemaErrors"]
    assert report["initialize"]["protocolVersion"] == version
    assert report["streamed"]["texts"] == ["hello, ", "typescript ", "sdk"]
    assert report["cancel"]["stopReason"] == "cancelled"
    assert report["cancel"]["texts"] == ["before"]
    validator = WireValidator()
    for entry in report["wire"]:
        if entry["dir"] == "client":
            validator.client_sent(entry["message"])
        else:
            validator.server_wrote(orjson.dumps(entry["message"]) + b"\n")
    assert validator.violations == [], validator.violations
    assert b"principal bob" in server.stderr and b"ended (ACP v%d)" % version in server.stderr
