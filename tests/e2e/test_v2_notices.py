"""Notices and compactions on ACP v2 (ACP-V2.md §18), end to end over stdio: neither needs a client capability in
v2, so every v2 client gets a `notice` (an MCP server that failed) and one `compaction_update` entity per compaction
(`in_progress`, then `completed` with its summary), never the v1 text fallback as an `agent_message_chunk`."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import StartServer
from tests.e2e.test_interrupts import position
from tests.e2e.test_notices import BROKEN_MCP, ask
from tests.support.fake_openai import FakeOpenAI, ServerReply, text_reply
from tests.support.harness import LONG_GRACE, T_ACK, RawClient, scaled

pytestmark = pytest.mark.timeout(60)

V2_BROKEN_MCP: dict[str, Any] = {"type": "stdio", **BROKEN_MCP}


@pytest.fixture
def model() -> Iterator[FakeOpenAI]:
    with FakeOpenAI() as server:
        yield server


async def test_an_mcp_server_problem_is_a_warning_notice_and_not_a_message(
    start_server: StartServer, tmp_path: Path
) -> None:
    client = await start_server("--model", "scripted", "--test-mode")
    await client.initialize_v2()  # no capabilities at all: notices need none in v2
    response = await client.call("session/new", {"cwd": str(tmp_path), "mcpServers": [V2_BROKEN_MCP]})
    session: str = response["result"]["sessionId"]
    await client.prompt(session, [{"say": "hello"}])
    assert (await client.idle(session, timeout=scaled(20)))["params"]["update"]["stopReason"] == "end_turn"
    [notice] = client.updates(session, "notice")
    assert notice["severity"] == "warning"
    assert "'broken'" in notice["title"] and "its tools are not available" in notice["title"]
    assert client.texts(session) == ["hello"]  # the reply holds only the model's words


async def compacting_session(
    start_server: StartServer, model: FakeOpenAI, tmp_path: Path, summary: ServerReply, *args: str
) -> tuple[RawClient, str]:
    """A session whose second prompt (sent here) starts with the context 90% full, so it is compacted first."""
    config = tmp_path / "config.toml"
    config.write_text("[providers.openai]\ncontext_window = 1000\n")
    model.script(text_reply("long answer", usage=(880, 20)), text_reply("title"), summary, text_reply("fresh reply"))
    env = {"OPENAI_API_KEY": "sk-test", "ACP_SERVER_CONFIG": str(config)}
    client = await start_server("--model", "openai:fake", "--base-url", model.base_url, *args, env=env)
    await client.initialize_v2()
    session = await client.new_session_v2(str(tmp_path))
    await client.call("session/prompt", ask(session, "tell me everything"), timeout=scaled(30))
    await client.idle(session, timeout=scaled(30))
    assert await model.wait_requests(2, timeout=scaled(10))
    await client.call("session/prompt", ask(session, "and now?"), timeout=scaled(30))
    return client, session


async def test_a_compaction_is_one_compaction_update_entity_with_its_summary_before_the_reply(
    start_server: StartServer, model: FakeOpenAI, tmp_path: Path
) -> None:
    summary = text_reply("Summary: the user asked for a long answer.")
    client, session = await compacting_session(start_server, model, tmp_path, summary)
    idle = await client.idle(session, 2, timeout=scaled(30))
    assert idle["params"]["update"]["stopReason"] == "end_turn"

    started, completed = client.updates(session, "compaction_update")
    assert started["status"] == "in_progress" and "summary" not in started
    assert completed["compactionId"] == started["compactionId"]
    assert completed["status"] == "completed"
    assert completed["summary"] == [{"type": "text", "text": "Summary: the user asked for a long answer."}]
    assert client.updates(session, "notice") == []
    assert not any("Context compacted" in text for text in client.texts(session))
    # The compaction comes before the reply that goes on from it, and inside the turn (before its idle).
    kinds = [u["sessionUpdate"] for u in client.updates(session)]
    last_reply = len(kinds) - 1 - kinds[::-1].index("agent_message_chunk")
    assert kinds.index("compaction_update") < last_reply
    assert position(client, idle) > max(
        i
        for i, m in enumerate(client.received)
        if m.get("params", {}).get("update", {}).get("sessionUpdate") == "compaction_update"
    )
    assert "fresh reply" in "".join(client.texts(session))


async def test_a_cancel_during_a_compaction_ends_it_cancelled_before_idle_cancelled(
    start_server: StartServer, model: FakeOpenAI, tmp_path: Path
) -> None:
    # The summary never comes (the model holds its reply open); LONG_GRACE: an idle within T_ACK means at once.
    hanging = text_reply("Summary: never", ending="hang")
    client, session = await compacting_session(
        start_server, model, tmp_path, hanging, "--cleanup-deadline", f"{LONG_GRACE:g}"
    )
    started = await client.wait_for(
        lambda m: m.get("method") == "session/update" and m["params"]["update"]["sessionUpdate"] == "compaction_update"
    )
    sent = await client.cancel(session)
    idle = await client.idle(session, 2)
    assert client.arrival_time(idle) - sent <= T_ACK
    assert idle["params"]["update"]["stopReason"] == "cancelled"
    first, last = client.updates(session, "compaction_update")
    assert first["status"] == "in_progress" and first is started["params"]["update"]
    assert last == {"sessionUpdate": "compaction_update", "compactionId": first["compactionId"], "status": "cancelled"}
    ended = next(m for m in client.received if m.get("params", {}).get("update") is last)
    assert position(client, started) < position(client, ended) < position(client, idle)
    assert "fresh reply" not in "".join(client.texts(session))
