"""One `acp-server serve` as a replica behind a load balancer (issue 24, items 3 and 5), for real: the console script
in a subprocess on 127.0.0.1, a real WebSocket client (`websockets`) and a real HTTP one (httpx).

- `--replica-name NAME` sets the affinity cookie `acp_replica=NAME` on the WebSocket upgrade and on the HTTP
  profile's answers (none without a name), and every log line of a connection names the replica, the connection
  and its principal;
- `GET /metrics` (the Prometheus text format) needs the token, and counts connections, sessions, turns by stop
  reason, the cancel -> answer latency and the store's commits;
- `SIGTERM` drains: `/healthz` and new connections get 503 while a running turn is cancelled within the cleanup
  deadline, then the process exits.

The balancer itself (HAProxy in front of two replicas) is tests/e2e/test_load_balancer.py's.
"""

from __future__ import annotations

import re
import signal
import time
from pathlib import Path

import anyio
import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families
from websockets.asyncio.client import connect
from websockets.exceptions import InvalidStatus

from tests.e2e.test_serve import ALICE, Server, editor, new_session, prompt, serving
from tests.support.harness import T_ACK, T_WAIT, scaled

pytestmark = pytest.mark.timeout(60)

BEARER = {"Authorization": f"Bearer {ALICE}"}


def http_base(server: Server) -> str:
    return server.url.replace("ws://", "http://").removesuffix("/acp")


async def metrics(server: Server) -> dict[str, float]:
    """`GET /metrics` with the token: each sample by its name and labels (`name{label="value"}`)."""
    async with httpx.AsyncClient(trust_env=False) as client:
        answer = await client.get(http_base(server) + "/metrics", headers=BEARER)
    assert answer.status_code == 200, answer.text
    assert answer.headers["content-type"].startswith("text/plain; version=")
    samples: dict[str, float] = {}
    for family in text_string_to_metric_families(answer.text):
        for sample in family.samples:
            labels = ",".join(f'{key}="{value}"' for key, value in sorted(sample.labels.items()))
            samples[f"{sample.name}{{{labels}}}" if labels else sample.name] = sample.value
    return samples


async def test_a_named_replica_sets_its_cookie_and_names_itself_in_each_connections_log_lines(tmp_path: Path) -> None:
    async with serving(tmp_path, "--replica-name", "replica-a") as server:
        async with connect(server.url, proxy=None, additional_headers=BEARER) as ws:
            assert ws.response is not None
            cookie = ws.response.headers["set-cookie"]
        assert cookie == "acp_replica=replica-a; Path=/; HttpOnly; SameSite=Lax"
        async with httpx.AsyncClient(trust_env=False) as client:
            initialize = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": 1}}
            answer = await client.post(server.url.replace("ws://", "http://"), json=initialize, headers=BEARER)
            assert answer.status_code == 200 and answer.headers["set-cookie"] == cookie
            connection_id = answer.headers["acp-connection-id"]
            stream = {**BEARER, "Accept": "text/event-stream", "Acp-Connection-Id": connection_id}
            async with client.stream("GET", server.url.replace("ws://", "http://"), headers=stream) as events:
                assert events.status_code == 200 and events.headers["set-cookie"] == cookie
            refused = await client.post(server.url.replace("ws://", "http://"), json=initialize)
            assert refused.status_code == 401 and "set-cookie" not in refused.headers  # a refusal routes nothing
            assert (await client.get(http_base(server) + "/healthz")).headers.get("set-cookie") is None
    lines = server.stderr.decode()
    opened = re.search(rf".*\[replica=replica-a connection={connection_id} principal=alice\].* opened\n", lines)
    assert opened is not None, lines
    assert ALICE not in lines


async def test_an_unnamed_server_sets_no_cookie(tmp_path: Path) -> None:
    async with (
        serving(tmp_path) as server,
        connect(server.url, proxy=None, additional_headers=BEARER) as ws,
    ):
        assert ws.response is not None and "set-cookie" not in ws.response.headers


async def test_metrics_need_the_token_and_count_turns_by_stop_reason(tmp_path: Path) -> None:
    async with serving(tmp_path, "--replica-name", "a") as server:
        async with httpx.AsyncClient(trust_env=False) as client:
            assert (await client.get(http_base(server) + "/metrics")).status_code == 401
            wrong = {"Authorization": "Bearer " + "B" * 40}
            assert (await client.get(http_base(server) + "/metrics", headers=wrong)).status_code == 401
        before = await metrics(server)
        assert before['acp_server_replica_info{replica="a"}'] == 1
        assert before["acp_server_connections"] == 0 and before["acp_server_turns_started_total"] == 0
        assert before["acp_server_lease_take_overs_total"] == 0 and before["acp_server_store_errors_total"] == 0
        async with editor(server, ALICE, "alice") as alice:
            session = await new_session(alice, server.workspace)
            done = await alice.request("session/prompt", prompt(session, "A", "ga"))
            await alice.probe("gate_reached", session)
            running = await metrics(server)
            assert running["acp_server_connections"] == 1
            assert running["acp_server_sessions_open"] == 1 and running["acp_server_sessions_running"] == 1
            await alice.notify("_scripted/release", {"sessionId": session, "gate": "ga"})
            assert (await alice.response(done))["result"] == {"stopReason": "end_turn"}
            cancelled = await alice.request("session/prompt", prompt(session, "B", "gb"))
            await alice.probe("gate_reached", session)
            await alice.notify("session/cancel", {"sessionId": session})
            assert (await alice.response(cancelled, T_ACK))["result"] == {"stopReason": "cancelled"}
            after = await metrics(server)
    assert after["acp_server_turns_started_total"] == 2
    assert after['acp_server_turns_ended_total{stop_reason="end_turn"}'] == 1
    assert after['acp_server_turns_ended_total{stop_reason="cancelled"}'] == 1
    assert after["acp_server_sessions_running"] == 0
    assert after["acp_server_cancel_to_answer_seconds_count"] == 1
    assert 0 < after["acp_server_cancel_to_answer_seconds_sum"] < T_ACK
    assert after["acp_server_store_commit_seconds_count"] == 2  # each turn's commit before its answer
    assert after["acp_server_store_errors_total"] == 0


async def test_sigterm_drains_the_replica_while_a_turn_runs(tmp_path: Path) -> None:
    """A turn whose command ignores SIGTERM holds the drain for the cleanup deadline: meanwhile `/healthz` and a new
    connection get 503 (what HAProxy's `retry-on 503` and its health check act on); the turn answers `cancelled`
    within the deadline, and the process exits within it and a second more (slack for a loaded machine added)."""
    deadline = scaled(2.0)
    async with (
        serving(tmp_path, "--replica-name", "a", "--cleanup-deadline", f"{deadline:g}") as server,
        editor(server, ALICE, "alice") as alice,
        httpx.AsyncClient(trust_env=False) as client,
    ):
        session = await new_session(alice, server.workspace)
        assert "result" in await alice.call("session/set_mode", {"sessionId": session, "modeId": "bypass"})
        command = "trap '' TERM; echo up > stubborn; sleep 3171"
        stubborn = {"tool": "run_command", "args": {"command": command, "timeout_s": 600}}
        running = await alice.request(
            "session/prompt",
            {"sessionId": session, "prompt": [{"type": "text", "text": "x"}], "_meta": {"scripted": [stubborn]}},
        )
        with anyio.fail_after(T_WAIT):
            # The command runs, deaf to SIGTERM (a file another process writes: no event to wait on).
            while not (server.workspace / "stubborn").exists():  # noqa: ASYNC110
                await anyio.sleep(0.01)
        assert (await client.get(http_base(server) + "/healthz")).status_code == 200
        signalled = time.monotonic()
        server.process.send_signal(signal.SIGTERM)
        with anyio.fail_after(T_WAIT):
            while (health := await client.get(http_base(server) + "/healthz")).status_code == 200:  # noqa: ASYNC110 - another process
                await anyio.sleep(0.01)
        assert health.status_code == 503 and health.text == "draining\n"
        with pytest.raises(InvalidStatus) as refused:
            async with connect(server.url, proxy=None, additional_headers=BEARER):
                pass
        assert refused.value.response.status_code == 503
        assert (await metrics(server))["acp_server_connections"] == 1  # an operator watches the drain
        answer = await alice.response(running, deadline + scaled(1.0))
        assert answer["result"]["stopReason"] == "cancelled"
        with anyio.fail_after(deadline + 1.0 + scaled(2.0)):
            assert await server.process.wait() == 0
        assert time.monotonic() - signalled < deadline + 1.0 + scaled(2.0)


async def test_a_replica_warms_up_at_its_start_before_any_editor_connects(tmp_path: Path) -> None:
    """The deferred side and the default model are made ready when `serve` starts, not with its first editor: a
    replica that takes over a dead one's sessions answers their loads without a second of imports first. No client
    connects here: the warm-up's own line (at debug) comes anyway."""
    async with serving(tmp_path, "--log-level", "debug") as server:
        assert server.process.stderr is not None
        seen = b""
        with anyio.fail_after(T_WAIT):
            while b"warmed up " not in seen:
                line = await server.process.stderr.readline()
                assert line, f"serve ended before it warmed up: {seen.decode(errors='replace')}"
                seen += line
        assert b"connection " not in seen  # nobody connected: the warm-up was the server's own
