"""Session notices and compactions (`notice`, `compaction_update`): on v1 for the clients that advertise them
(`clientCapabilities.session.notices` / `.compaction`), today's text for the others; on v2 for every client (the
tests that hold for both take `version`: v1/v2); and a `session/load` whose replay holds everything: nothing follows
its response.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import StartServer
from tests.e2e.test_interrupts import position
from tests.support.fake_openai import FakeOpenAI, ServerReply, text_reply
from tests.support.harness import W_QUIET, RawClient, is_response, scaled
from tests.support.versions import VERSIONS, Acp, Turn

NOTICES: dict[str, Any] = {"session": {"notices": {}}}
COMPACTION: dict[str, Any] = {"session": {"notices": {}, "compaction": {}}}
BROKEN_MCP = {"name": "broken", "command": "/nonexistent/acp-test-mcp-server", "args": [], "env": []}
# What a client that shows notices and compactions says, by version: v1 asks for them, v2 gives them to every client
# (ACP-V2.md §18); v2 names an MCP server's transport.
SHOWS_NOTICES: dict[str, dict[str, Any]] = {"v1": NOTICES, "v2": {}}
SHOWS_COMPACTION: dict[str, dict[str, Any]] = {"v1": COMPACTION, "v2": {}}
BROKEN_MCP_OF: dict[str, dict[str, Any]] = {"v1": BROKEN_MCP, "v2": {"type": "stdio", **BROKEN_MCP}}


@pytest.fixture
def model() -> Iterator[FakeOpenAI]:
    with FakeOpenAI() as server:
        yield server


def ask(session_id: str, text: str) -> dict[str, Any]:
    return {"sessionId": session_id, "prompt": [{"type": "text", "text": text}]}


async def mcp_problem_turn(client: RawClient, tmp_path: Path) -> str:
    response = await client.call("session/new", {"cwd": str(tmp_path), "mcpServers": [BROKEN_MCP]})
    session: str = response["result"]["sessionId"]
    done = await client.response(await client.prompt(session, [{"say": "hello"}]), scaled(20))
    assert done["result"] == {"stopReason": "end_turn"}
    return session


async def test_an_mcp_server_problem_is_a_warning_notice_for_a_client_that_shows_notices(
    start_server: StartServer, version: str, tmp_path: Path
) -> None:
    """A broken MCP server is one `warning` notice, never words in the reply: on v1 for a client that advertises
    `session.notices`, on v2 for every client (notices need no capability there)."""
    acp = VERSIONS[version](await start_server("--model", "scripted", "--test-mode"))
    await acp.initialize(SHOWS_NOTICES[version])
    client = acp.client
    response = await client.call("session/new", {"cwd": str(tmp_path), "mcpServers": [BROKEN_MCP_OF[version]]})
    session: str = response["result"]["sessionId"]
    await acp.stopped(await acp.prompt(session, [{"say": "hello"}]), "end_turn", timeout=scaled(20))
    [notice] = client.updates(session, "notice")
    assert notice["severity"] == "warning"
    assert "'broken'" in notice["title"] and "its tools are not available" in notice["title"]
    assert client.texts(session) == ["hello"]  # the reply holds only the model's words


async def test_an_mcp_server_problem_stays_text_for_a_client_without_notices(
    start_server: StartServer, tmp_path: Path
) -> None:
    client = await start_server("--model", "scripted", "--test-mode")
    await client.initialize()
    session = await mcp_problem_turn(client, tmp_path)
    assert client.updates(session, "notice") == []
    problem, said = client.texts(session)
    assert "'broken'" in problem and "its tools are not available" in problem
    assert said == "hello"


async def compacting_client(
    start_server: StartServer,
    model: FakeOpenAI,
    tmp_path: Path,
    capabilities: dict[str, Any],
    *,
    version: str = "v1",
    summary: ServerReply | None = None,
    args: Sequence[str] = (),
) -> tuple[Acp, str, Turn]:
    """A session whose second prompt (sent here, its turn returned unended) starts with the context 90% full, so it
    is compacted first; `summary` is the model's reply to the compaction request."""
    config = tmp_path / "config.toml"
    config.write_text("[providers.openai]\ncontext_window = 1000\n")
    model.script(
        text_reply("long answer", usage=(880, 20)),
        text_reply("title"),
        summary or text_reply("Summary: the user asked for a long answer."),
        text_reply("fresh reply"),
    )
    env = {"OPENAI_API_KEY": "sk-test", "ACP_SERVER_CONFIG": str(config)}
    client = await start_server("--model", "openai:fake", "--base-url", model.base_url, *args, env=env)
    acp = VERSIONS[version](client)
    await acp.initialize(capabilities)
    session = await acp.new_session(str(tmp_path))
    await acp.end(await acp.prompt_with(ask(session, "tell me everything")), timeout=scaled(30))
    assert await model.wait_requests(2, timeout=scaled(10))
    return acp, session, await acp.prompt_with(ask(session, "and now?"))


async def test_a_compaction_is_a_compaction_update_with_its_summary_for_a_client_that_shows_them(
    start_server: StartServer, model: FakeOpenAI, tmp_path: Path, version: str
) -> None:
    """One `compaction_update` entity per compaction (`in_progress`, then `completed` with its summary), never a
    notice nor the text fallback, before the reply that goes on from it and inside the turn: on v1 for a client that
    advertises `session.compaction`, on v2 for every client."""
    acp, session, turn = await compacting_client(
        start_server, model, tmp_path, SHOWS_COMPACTION[version], version=version
    )
    end = await acp.stopped(turn, "end_turn", timeout=scaled(30))
    client = acp.client
    started, completed = client.updates(session, "compaction_update")
    assert started["status"] == "in_progress" and "summary" not in started
    assert completed["compactionId"] == started["compactionId"]
    assert completed["status"] == "completed"
    assert completed["summary"] == [{"type": "text", "text": "Summary: the user asked for a long answer."}]
    assert client.updates(session, "notice") == []
    assert not any("Context compacted" in text for text in client.texts(session))
    # The compaction comes before the reply that goes on from it, and inside the turn (before its end).
    kinds = [u["sessionUpdate"] for u in client.updates(session)]
    last_reply = len(kinds) - 1 - kinds[::-1].index("agent_message_chunk")
    assert kinds.index("compaction_update") < last_reply
    assert position(client, end) > max(
        i
        for i, m in enumerate(client.received)
        if m.get("params", {}).get("update", {}).get("sessionUpdate") == "compaction_update"
    )
    assert "fresh reply" in "".join(client.texts(session))


async def test_a_compaction_is_a_notice_for_a_client_with_notices_but_no_compaction(
    start_server: StartServer, model: FakeOpenAI, tmp_path: Path
) -> None:
    acp, session, turn = await compacting_client(start_server, model, tmp_path, NOTICES)
    await acp.stopped(turn, "end_turn", timeout=scaled(30))
    client = acp.client
    assert client.updates(session, "compaction_update") == []
    [notice] = client.updates(session, "notice")
    assert notice["title"] == "Context compacted" and notice["severity"] == "info"
    assert "earlier messages were summarised" in notice["description"]
    assert not any("Context compacted" in text for text in client.texts(session))


# --- session/load: the replay marks unfinished turns, and holds everything the client is told ---


async def start(start_server: StartServer, state: Path, capabilities: dict[str, Any] | None = None) -> RawClient:
    server = await start_server("--model", "scripted", "--test-mode", env={"ACP_SERVER_STATE_DIR": str(state)})
    await server.initialize(capabilities)
    return server


async def cancelled_session(start_server: StartServer, state: Path) -> str:
    first = await start(start_server, state)
    session = await first.new_session()
    prompt = await first.prompt(session, [{"say": "partial"}, {"gate": "g"}])
    await first.probe("gate_reached", sessionId=session)
    await first.cancel(session)
    assert (await first.response(prompt))["result"] == {"stopReason": "cancelled"}
    await first.close()
    return session


async def test_a_loaded_cancelled_turn_ends_with_a_notice_for_a_client_that_shows_notices(
    start_server: StartServer, tmp_path: Path
) -> None:
    session = await cancelled_session(start_server, tmp_path)
    second = await start(start_server, tmp_path, NOTICES)
    response = await second.call("session/load", {"sessionId": session, "cwd": "/tmp", "mcpServers": []})
    assert "result" in response
    [notice] = second.updates(session, "notice")
    assert notice["severity"] == "warning" and "cancelled" in notice["title"]
    assert notice["_meta"] == {"acpServer": {"turnStatus": "cancelled"}}
    assert second.texts(session) == ["partial"]  # no "[cancelled]" text marker
    replayed = [u["sessionUpdate"] for u in second.updates(session)]
    assert replayed.index("notice") > replayed.index("agent_message_chunk")


async def test_a_loaded_cancelled_turn_keeps_the_text_marker_for_a_client_without_notices(
    start_server: StartServer, tmp_path: Path
) -> None:
    session = await cancelled_session(start_server, tmp_path)
    second = await start(start_server, tmp_path)
    await second.call("session/load", {"sessionId": session, "cwd": "/tmp", "mcpServers": []})
    assert second.updates(session, "notice") == []
    assert second.texts(session) == ["partial", "[cancelled]"]


async def test_nothing_follows_the_load_response_commands_and_title_belong_to_the_replay(
    start_server: StartServer, tmp_path: Path
) -> None:
    first = await start(start_server, tmp_path)
    session = await first.new_session()
    titled = await first.call("session/prompt", ask(session, "/title Release notes"))
    assert titled["result"] == {"stopReason": "end_turn"}
    await first.close()

    second = await start(start_server, tmp_path)
    request_id = await second.request("session/load", {"sessionId": session, "cwd": "/tmp", "mcpServers": []})
    response = await second.response(request_id)
    assert "result" in response
    await asyncio.sleep(W_QUIET)
    at = next(i for i, m in enumerate(second.received) if is_response(m, request_id))
    before = [m["params"]["update"] for m in second.received[:at] if m.get("method") == "session/update"]
    after = [m for m in second.received[at + 1 :] if m.get("method") not in ("_scripted/probe",)]
    assert after == []
    kinds = [u["sessionUpdate"] for u in before]
    assert "available_commands_update" in kinds
    [info] = [u for u in before if u["sessionUpdate"] == "session_info_update"]
    assert info["title"] == "Release notes"
    assert kinds.index("user_message_chunk") < kinds.index("available_commands_update")


async def test_the_usage_a_session_reported_is_replayed_before_the_load_response(
    start_server: StartServer, model: FakeOpenAI, tmp_path: Path
) -> None:
    config = tmp_path / "config.toml"
    config.write_text("[providers.openai]\ncontext_window = 1000\n")
    model.set_default(text_reply("an answer", usage=(300, 20)))
    env = {"OPENAI_API_KEY": "sk-test", "ACP_SERVER_CONFIG": str(config), "ACP_SERVER_STATE_DIR": str(tmp_path)}
    args = ("--model", "openai:fake", "--base-url", model.base_url)
    first = await start_server(*args, env=env)
    await first.initialize()
    session = await first.new_session(str(tmp_path))
    await first.call("session/prompt", ask(session, "hi"), timeout=scaled(30))
    [used] = first.updates(session, "usage_update")
    await first.close()

    second = await start_server(*args, env=env)
    await second.initialize()
    request_id = await second.request("session/load", {"sessionId": session, "cwd": str(tmp_path), "mcpServers": []})
    assert "result" in await second.response(request_id)
    await asyncio.sleep(W_QUIET)
    at = next(i for i, m in enumerate(second.received) if is_response(m, request_id))
    assert [m for m in second.received[at + 1 :] if m.get("method") == "session/update"] == []
    assert second.updates(session, "usage_update") == [used]
