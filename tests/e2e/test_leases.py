"""Leases that survive a dead replica (issue 24, item 2), end to end: two real `acp-server serve` processes on one real
PostgreSQL database stand for two replicas (no balancer: each editor picks its replica), real WebSocket editors.

- A session one replica runs is refused by the other with our own error, -34001, whose `data` names the session and
  when the lease ends, never the unknown-session answer; once the first replica's connection closes (it releases the
  lease) the other loads it at once, with everything acknowledged replayed.
- A replica killed with SIGKILL releases nothing: the other refuses the session until the lease has expired, then
  loads it with everything acknowledged, and counts a take-over on /metrics.
- A replica paused with SIGSTOP past the TTL while a turn streams (it cannot be stopped from running when it wakes):
  the other takes the session over; once resumed, the paused one cancels its turn (its client gets `cancelled`, not
  saved), refuses the session from then on, and nothing it commits after losing the lease lands in the store.

SQLite keeps today's behaviour (no leases): the existing tests of serve and the store say so.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import AsyncIterator, Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import anyio
import pytest

from tests.e2e.test_serve import ALICE, Editor, Server, editor, new_session, serving
from tests.e2e.test_serve_replicas import metrics
from tests.support.harness import T_WAIT, scaled
from tests.support.postgres import PostgresServer, count_rows_at

pytestmark = pytest.mark.timeout(120)

SESSION_LEASED = -34001  # docs/postgres.md "Leases": the code the failover test asserts too
# A short lease for the tests that wait for one to expire; never below the server's minimum of 1 s.
SHORT_TTL = max(1.0, scaled(2.0))
# A lease that outlives every test that must not see one expire.
LONG_TTL = min(3600.0, scaled(60.0))


@pytest.fixture
def database(postgres: PostgresServer) -> Iterator[str]:
    url = postgres.database()
    try:
        yield url
    finally:
        postgres.drop(url)


@contextlib.asynccontextmanager
async def replica(tmp_path: Path, database: str, ttl: float, name: str) -> AsyncIterator[Server]:
    """One replica: `serve` on the shared database, with alice's token (the same token file for every replica)."""
    async with serving(
        tmp_path, "--lease-ttl", f"{ttl:g}", "--replica-name", name, env={"ACP_SERVER_STORE_URL": database}
    ) as server:
        yield server


def said(turn: str) -> dict[str, Any]:
    """A turn that says two things and ends: what a replay must show once its answer was received."""
    return {"scripted": [{"say": f"{turn}-one "}, {"say": f"{turn}-two"}]}


async def run_turn(client: Editor, session: str, turn: str) -> None:
    params = {"sessionId": session, "prompt": [{"type": "text", "text": turn}], "_meta": said(turn)}
    answer = await client.call("session/prompt", params)
    assert answer.get("result") == {"stopReason": "end_turn"}, answer


def load_params(server: Server, session: str) -> dict[str, Any]:
    return {"sessionId": session, "cwd": str(server.workspace), "mcpServers": []}


def check_lease_error(answer: dict[str, Any], session: str) -> float:
    """The lease error, exactly: our code, a one-line message saying another replica holds the session, and `data`
    with the session and the lease's expiry (ISO 8601 UTC and seconds). When it expires, in seconds since the epoch."""
    assert "error" in answer, answer
    error = answer["error"]
    assert error["code"] == SESSION_LEASED, error
    assert "another replica" in error["message"] and "\n" not in error["message"], error
    data = error["data"]
    assert set(data) == {"sessionId", "expiresAt", "expiresInSeconds"}, data
    assert data["sessionId"] == session
    assert data["expiresAt"].endswith("Z")
    expires_at = datetime.fromisoformat(data["expiresAt"]).timestamp()
    assert isinstance(data["expiresInSeconds"], int | float) and data["expiresInSeconds"] > 0, data
    return expires_at


async def load_when_free(client: Editor, server: Server, session: str, bound: float) -> tuple[dict[str, Any], float]:
    """Ask to load the session until it loads (each refusal must be the lease error), within `bound`: the load's
    answer, and the expiry the last refusal named (0 if none)."""
    expires_at = 0.0
    with anyio.fail_after(bound):
        while True:
            # A replica paused mid-commit holds the lease row until the database ends its transaction: a take may wait.
            answer = await client.response(await client.request("session/load", load_params(server, session)), bound)
            if "result" in answer:
                return answer, expires_at
            expires_at = check_lease_error(answer, session)
            await anyio.sleep(0.1)


def replayed(client: Editor, session: str, since: int) -> list[str]:
    """The agent's text the client was sent for the session from message number `since` on."""
    return [
        m["params"]["update"]["content"]["text"]
        for m in client.received[since:]
        if m.get("method") == "session/update"
        and m["params"]["sessionId"] == session
        and m["params"]["update"].get("sessionUpdate") == "agent_message_chunk"
    ]


async def test_a_session_another_replica_holds_is_refused_with_the_lease_error_until_its_connection_closes(
    tmp_path: Path, database: str
) -> None:
    async with (
        replica(tmp_path, database, LONG_TTL, "a") as first,
        replica(tmp_path, database, LONG_TTL, "b") as second,
        editor(second, ALICE, "alice on b") as moved,
    ):
        async with editor(first, ALICE, "alice on a") as alice:
            session = await new_session(alice, first.workspace)
            await run_turn(alice, session, "t1")
            refused = await moved.call("session/load", load_params(second, session))
            expires_at = check_lease_error(refused, session)  # never -32002: the session exists, it is busy elsewhere
            assert expires_at > time.time() + LONG_TTL / 2  # A's lease, far from its end
            # A's own session stays A's: a prompt there still runs.
            await run_turn(alice, session, "t2")
        # A's connection closed: A released the lease at once (long before it would expire), and B loads it.
        since = len(moved.received)
        loaded, _ = await load_when_free(moved, second, session, T_WAIT)
        assert time.time() < expires_at
        assert replayed(moved, session, since) == ["t1-one ", "t1-two", "t2-one ", "t2-two"], loaded
        await run_turn(moved, session, "t3")  # and runs there
        assert (await metrics(second))["acp_server_lease_take_overs_total"] == 0  # released, not taken over


async def test_a_killed_replicas_session_loads_elsewhere_once_its_lease_expires_with_everything_acknowledged(
    tmp_path: Path, database: str
) -> None:
    async with (
        replica(tmp_path, database, SHORT_TTL, "a") as first,
        replica(tmp_path, database, SHORT_TTL, "b") as second,
        editor(second, ALICE, "alice on b") as moved,
    ):
        async with editor(first, ALICE, "alice on a") as alice:
            session = await new_session(alice, first.workspace)
            await run_turn(alice, session, "t1")
            mode = await alice.call("session/set_mode", {"sessionId": session, "modeId": "read_only"})
            assert mode.get("result") == {}, mode
            os.kill(first.process.pid, signal.SIGKILL)  # releases nothing
            await first.process.wait()
        refused = await moved.call("session/load", load_params(second, session))
        expires_at = check_lease_error(refused, session)
        since = len(moved.received)
        loaded, last_refused = await load_when_free(moved, second, session, SHORT_TTL + T_WAIT)
        assert time.time() >= max(expires_at, last_refused) - 0.001  # not before the lease expired
        assert replayed(moved, session, since) == ["t1-one ", "t1-two"]
        assert loaded["result"]["modes"]["currentModeId"] == "read_only"
        await run_turn(moved, session, "t2")
        assert (await metrics(second))["acp_server_lease_take_overs_total"] == 1


async def test_a_paused_replica_that_lost_the_lease_cancels_its_turn_and_commits_nothing_more_of_it(
    tmp_path: Path, database: str
) -> None:
    """The fencing the issue asks for: SIGSTOP past the TTL while a turn streams, another replica takes the session
    over, SIGCONT: the paused replica's turn is cancelled (its client answered `cancelled`, not saved), the session
    is refused there from then on, and what it would commit after losing the lease (more text, the turn's end)
    never lands: the store holds exactly what the other replica replayed when it took the session."""
    async with (
        replica(tmp_path, database, SHORT_TTL, "a") as first,
        replica(tmp_path, database, SHORT_TTL, "b") as second,
        editor(first, ALICE, "alice on a") as alice,
        editor(second, ALICE, "alice on b") as moved,
    ):
        session = await new_session(alice, first.workspace)
        await run_turn(alice, session, "t1")
        streaming = {"scripted": [{"say": "tick ", "repeat": 100_000, "every": 0.02}]}
        params = {"sessionId": session, "prompt": [{"type": "text", "text": "stream"}], "_meta": streaming}
        turn = await alice.request("session/prompt", params)
        await alice.wait_for(lambda _: alice.texts(session).count("tick ") >= 5)
        try:
            os.kill(first.process.pid, signal.SIGSTOP)
            since = len(moved.received)
            await load_when_free(moved, second, session, SHORT_TTL + T_WAIT)
            taken = replayed(moved, session, since)
            assert taken[:2] == ["t1-one ", "t1-two"] and set(taken[2:]) == {"tick "}, taken
        finally:
            os.kill(first.process.pid, signal.SIGCONT)
        answer = await alice.response(turn, T_WAIT)
        assert answer.get("result") == {"stopReason": "cancelled", "_meta": {"acpServer": {"saved": False}}}, answer
        # From then on the session is refused there (with the lease error), until it is loaded again.
        refused = await alice.call("session/set_mode", {"sessionId": session, "modeId": "read_only"})
        assert refused["error"]["code"] == SESSION_LEASED, refused
        assert refused["error"]["data"] == {"sessionId": session, "lost": True}
        # ... but a close still reaches it (freeing it there), and leaves the other replica's lease alone.
        assert (await alice.call("session/close", {"sessionId": session})).get("result") == {}
        # Nothing A wrote after losing the lease landed: the store holds what B replayed, and the turn's end (its
        # `cancelled`) is not A's to write any more.
        with anyio.fail_after(T_WAIT):
            await anyio.sleep(scaled(0.5))  # A's flushes run every 50 ms: any late write would be in by now
        since = len(moved.received)
        again = await moved.call("session/load", load_params(second, session))
        assert "result" in again, again
        assert replayed(moved, session, since) == taken
        cancelled = "SELECT count(*) FROM turns WHERE session_id = ? AND status = 'cancelled'"
        assert count_rows_at(database, cancelled, session) == 0
        await run_turn(moved, session, "t3")  # B runs it


async def test_on_v2_a_resume_gets_the_lease_error_until_the_holder_closes_the_session(
    tmp_path: Path, database: str
) -> None:
    """v2's `session/resume` is refused the same way, and a `session/close` on the holder releases the lease before
    its answer: the resume that follows it succeeds at once, replaying the acknowledged turn."""
    async with (
        replica(tmp_path, database, LONG_TTL, "a") as first,
        replica(tmp_path, database, LONG_TTL, "b") as second,
        editor(first, ALICE, "alice on a", version=2) as alice,
        editor(second, ALICE, "alice on b", version=2) as moved,
    ):
        session = await new_session(alice, first.workspace)
        params = {"sessionId": session, "prompt": [{"type": "text", "text": "t1"}], "_meta": said("t1")}
        assert "messageId" in (await alice.call("session/prompt", params))["result"]
        await alice.wait_for(
            lambda m: (
                m.get("method") == "session/update"
                and m["params"]["update"].get("sessionUpdate") == "state_update"
                and m["params"]["update"].get("state") == "idle"
            )
        )
        resume = {"sessionId": session, "cwd": str(second.workspace), "replayFrom": {"type": "start"}}
        check_lease_error(await moved.call("session/resume", resume), session)
        assert (await alice.call("session/close", {"sessionId": session})).get("result") == {}
        since = len(moved.received)
        resumed = await moved.call("session/resume", resume)
        assert "result" in resumed, resumed
        messages = [
            block["text"]
            for m in moved.received[since:]
            if m.get("method") == "session/update" and m["params"]["update"].get("sessionUpdate") == "agent_message"
            for block in m["params"]["update"]["content"]
        ]
        assert "".join(messages) == "t1-one t1-two"
