"""Notices and compactions on ACP v2 (ACP-V2.md §18), end to end: neither needs a client capability in v2, so every
v2 client gets a `notice` (an MCP server that failed) and one `compaction_update` entity per compaction (`in_progress`,
then `completed` with its summary), never the v1 text fallback as an `agent_message_chunk`: those are proved for both
versions at once in test_notices.py. Here what only v2 has: a compaction a cancel ends, `cancelled`, before the idle."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import StartServer
from tests.e2e.test_interrupts import position
from tests.e2e.test_notices import compacting_client
from tests.support.fake_openai import FakeOpenAI, text_reply
from tests.support.harness import LONG_GRACE, T_ACK

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def model() -> Iterator[FakeOpenAI]:
    with FakeOpenAI() as server:
        yield server


async def test_a_cancel_during_a_compaction_ends_it_cancelled_before_idle_cancelled(
    start_server: StartServer, model: FakeOpenAI, tmp_path: Path
) -> None:
    # The summary never comes (the model holds its reply open); LONG_GRACE: an idle within T_ACK means at once.
    hanging = text_reply("Summary: never", ending="hang")
    acp, session, turn = await compacting_client(
        start_server, model, tmp_path, {}, version="v2", summary=hanging, args=("--cleanup-deadline", f"{LONG_GRACE:g}")
    )
    client = acp.client
    started = await client.wait_for(
        lambda m: m.get("method") == "session/update" and m["params"]["update"]["sessionUpdate"] == "compaction_update"
    )
    sent = await client.cancel(session)
    idle = await acp.end(turn)
    assert client.arrival_time(idle) - sent <= T_ACK
    assert idle["params"]["update"]["stopReason"] == "cancelled"
    first, last = client.updates(session, "compaction_update")
    assert first["status"] == "in_progress" and first is started["params"]["update"]
    assert last == {"sessionUpdate": "compaction_update", "compactionId": first["compactionId"], "status": "cancelled"}
    ended = next(m for m in client.received if m.get("params", {}).get("update") is last)
    assert position(client, started) < position(client, ended) < position(client, idle)
    assert "fresh reply" not in "".join(client.texts(session))
