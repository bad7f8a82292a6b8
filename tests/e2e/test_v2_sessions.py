"""The v2 session methods end to end over stdio (ACP-V2.md §4, §5): `session/new` with optional typed MCP servers,
`list`, `resume` with and without replay (one store shared by both versions, so a session made on one version
resumes on the other), `close` and `delete`. Tests named `test_acp_…` hold the acp-tck v2 requirement of that id
(src/tck/v2/requirements.py at 1314e0951863b03844fd530e0e14bd88843aabe7)."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import anyio
import pytest

from tests.conftest import StartServer
from tests.e2e.test_interrupts import after, position
from tests.support.harness import DEFAULT_ARGS, T_WAIT, RawClient

pytestmark = pytest.mark.timeout(40)


def updates_before(server: RawClient, session_id: str, response: dict[str, Any]) -> list[dict[str, Any]]:
    end = position(server, response)
    return [
        m["params"]["update"]
        for m in server.received[:end]
        if m.get("method") == "session/update" and m["params"]["sessionId"] == session_id
    ]


async def _v2(start_server: StartServer, state: Path, *args: str) -> RawClient:
    server = await start_server(*DEFAULT_ARGS, *args, env={"ACP_SERVER_STATE_DIR": str(state)})
    await server.initialize_v2()
    return server


async def test_acp_session_203_mcp_servers_may_be_left_out_and_sse_is_refused(server_v2: RawClient) -> None:
    assert "sessionId" in (await server_v2.call("session/new", {"cwd": "/tmp", "mcpServers": []}))["result"]
    assert "sessionId" in (await server_v2.call("session/new", {"cwd": "/tmp"}))["result"]
    sse = {"type": "sse", "name": "old", "url": "http://localhost:1/sse", "headers": []}
    refused = await server_v2.call("session/new", {"cwd": "/tmp", "mcpServers": [sse]})
    assert refused["error"]["code"] == -32602 and "sse" in refused["error"]["message"]


async def test_acp_resume_202_204_replay_from_start_replays_every_message_with_its_id_before_the_response(
    start_server: StartServer, tmp_path: Path
) -> None:
    """Whole-message upserts with the ids the live session used (the user message keeps its prompt response's
    id), a tool call as tool_call_updates, then the idle snapshot, then the response; nothing after it."""
    first = await _v2(start_server, tmp_path)
    session_id = await first.new_session_v2()
    prompt = await first.prompt(session_id, [{"say": "hel"}, {"say": "lo"}, {"tool": "test_sleep", "args": {"s": 0}}])
    user_id = (await first.response(prompt))["result"]["messageId"]
    await first.idle(session_id)
    agent_id = first.updates(session_id, "agent_message_chunk")[0]["messageId"]
    await first.close()

    second = await _v2(start_server, tmp_path)
    response = await second.call(
        "session/resume", {"sessionId": session_id, "cwd": "/tmp", "replayFrom": {"type": "start"}}
    )
    assert set(response["result"]) == {"configOptions", "availableCommands"}
    replayed = updates_before(second, session_id, response)
    kinds = [u["sessionUpdate"] for u in replayed]
    assert kinds[0] == "user_message" and replayed[0]["messageId"] == user_id
    whole = {"sessionUpdate": "agent_message", "messageId": agent_id, "content": [{"type": "text", "text": "hello"}]}
    assert whole in replayed
    assert "tool_call_update" in kinds and "tool_call" not in kinds and "agent_message_chunk" not in kinds
    assert replayed[-1] == {"sessionUpdate": "state_update", "state": "idle", "stopReason": "end_turn"}
    assert kinds.count("state_update") == 1
    await second.quiet(0.3, lambda m: m in after(second, response) and m.get("method") == "session/update")
    # The resumed session goes on.
    await second.response(await second.prompt(session_id, [{"say": "more"}]))
    assert (await second.idle(session_id))["params"]["update"]["stopReason"] == "end_turn"


async def test_acp_resume_203_resume_without_replay_sends_only_the_state_snapshot(
    start_server: StartServer, tmp_path: Path
) -> None:
    first = await _v2(start_server, tmp_path)
    session_id = await first.new_session_v2()
    await first.prompt(session_id, [{"say": "x"}])
    await first.idle(session_id)
    await first.close()
    second = await _v2(start_server, tmp_path)
    response = await second.call("session/resume", {"sessionId": session_id, "cwd": "/tmp"})
    assert "result" in response
    assert [u["sessionUpdate"] for u in updates_before(second, session_id, response)] == ["state_update"]
    bad = await second.call("session/resume", {"sessionId": session_id, "cwd": "/tmp", "replayFrom": {"type": "_x"}})
    assert bad["error"]["code"] == -32602
    elsewhere = await second.call("session/resume", {"sessionId": session_id, "cwd": str(tmp_path)})
    assert elsewhere["error"]["code"] == -32602 and "cwd" in elsewhere["error"]["message"]
    unknown = await second.call("session/resume", {"sessionId": "sess_none", "cwd": "/tmp"})
    assert unknown["error"]["code"] == -32002 and unknown["error"]["data"] == {"sessionId": "sess_none"}


async def test_a_session_made_on_v1_resumes_on_v2_and_one_made_on_v2_loads_on_v1(
    start_server: StartServer, tmp_path: Path
) -> None:
    env = {"ACP_SERVER_STATE_DIR": str(tmp_path)}
    v1 = await start_server(*DEFAULT_ARGS, env=env)
    await v1.initialize()
    old = await v1.new_session()
    await v1.response(await v1.prompt(old, [{"say": "from v1"}]))
    await v1.close()

    v2 = await start_server(*DEFAULT_ARGS, env=env)
    await v2.initialize_v2()
    response = await v2.call("session/resume", {"sessionId": old, "cwd": "/tmp", "replayFrom": {"type": "start"}})
    replayed = updates_before(v2, old, response)
    assert [b["text"] for u in replayed if u["sessionUpdate"] == "agent_message" for b in u["content"]] == ["from v1"]
    assert replayed[0]["sessionUpdate"] == "user_message"
    new = await v2.new_session_v2()
    await v2.response(await v2.prompt(new, [{"say": "from v2"}]))
    await v2.idle(new)
    await v2.close()

    back = await start_server(*DEFAULT_ARGS, env=env)
    await back.initialize()
    loaded = await back.call("session/load", {"sessionId": new, "cwd": "/tmp", "mcpServers": []})
    assert "modes" in loaded["result"]
    assert back.texts(new) == ["from v2"]


async def test_acp_list_201_202_close_201_delete_201_202_203(server_v2: RawClient) -> None:
    session_id = await server_v2.new_session_v2()
    await server_v2.response(await server_v2.prompt(session_id, [{"say": "x"}]))
    await server_v2.idle(session_id)
    listed = (await server_v2.call("session/list", {}))["result"]["sessions"]
    assert session_id in [s["sessionId"] for s in listed]
    assert (await server_v2.call("session/list", {"cwd": "/nonexistent/nowhere"}))["result"] == {"sessions": []}
    assert (await server_v2.call("session/close", {"sessionId": session_id}))["result"] == {}
    assert (await server_v2.call("session/close", {"sessionId": "sess_never"}))["result"] == {}
    assert (await server_v2.call("session/delete", {"sessionId": session_id}))["result"] == {}
    listed = (await server_v2.call("session/list", {}))["result"]["sessions"]
    assert session_id not in [s["sessionId"] for s in listed]
    assert (await server_v2.call("session/delete", {"sessionId": session_id}))["result"] == {}


async def test_list_and_resume_are_baseline_without_a_store(start_server: StartServer) -> None:
    """§23 Q22: under `--no-store` they serve this process's open sessions."""
    server = await start_server(*DEFAULT_ARGS, "--no-store")
    await server.initialize_v2()
    session_id = await server.new_session_v2()
    listed = (await server.call("session/list", {}))["result"]["sessions"]
    assert [s["sessionId"] for s in listed] == [session_id]
    resumed = await server.call("session/resume", {"sessionId": session_id, "cwd": "/tmp"})
    assert "configOptions" in resumed["result"]
    other = await server.call("session/resume", {"sessionId": "sess_elsewhere", "cwd": "/tmp"})
    assert other["error"]["code"] == -32002


@pytest.mark.parametrize("store", [(), ("--no-store",)], ids=["store", "no-store"])
async def test_resume_of_a_session_whose_work_runs_on_this_connection_snapshots_running_and_the_work_goes_on(
    start_server: StartServer, store: tuple[str, ...]
) -> None:
    """§23 Q12 (and Q22 under `--no-store`): allowed; the snapshot before the response says `running` (the work is
    not idle, and a resume ends nothing), then the work streams on live to its one idle; nothing is sent twice."""
    server = await start_server(*DEFAULT_ARGS, *store)
    await server.initialize_v2()
    session_id = await server.new_session_v2()
    await server.prompt(session_id, [{"gate": "g"}, {"say": "after"}])
    await server.probe("gate_reached", sessionId=session_id, gate="g")
    response = await server.call("session/resume", {"sessionId": session_id, "cwd": "/tmp"})
    assert set(response["result"]) == {"configOptions", "availableCommands"}
    assert updates_before(server, session_id, response)[-1] == {"sessionUpdate": "state_update", "state": "running"}
    await server.release(session_id, "g")
    idle = await server.idle(session_id)
    assert idle["params"]["update"]["stopReason"] == "end_turn"
    assert [u["state"] for u in server.states(session_id)] == ["running", "running", "idle"]
    assert server.texts(session_id) == ["after"] and len(server.updates(session_id, "user_message")) == 1
    said = next(
        m
        for m in server.received
        if m.get("params", {}).get("update", {}).get("content", {}) == {"type": "text", "text": "after"}
    )
    assert position(server, response) < position(server, said) < position(server, idle)
    elsewhere = await server.call("session/resume", {"sessionId": session_id, "cwd": "/nonexistent"})
    assert elsewhere["error"]["code"] == -32602
    # Idle now: a resume's snapshot is the idle with the last stop reason, which ends nothing.
    again = await server.call("session/resume", {"sessionId": session_id, "cwd": "/tmp"})
    assert updates_before(server, session_id, again)[-1]["state"] == "idle"
    await server.response(await server.prompt(session_id, [{"say": "more"}]))
    assert (await server.idle(session_id, 3))["params"]["update"]["stopReason"] == "end_turn"


async def test_resume_while_the_work_waits_on_a_permission_snapshots_requires_action(server_v2: RawClient) -> None:
    """§23 Q12/Q13: the snapshot is the foreground state as it is now: `requires_action` while the question is
    open; after the answer, `running`, then the work's one idle."""
    server = server_v2
    session_id = await server.new_session_v2()
    await server.prompt(session_id, [{"tool": "run_command", "args": {"command": "true"}}, {"say": "ok"}])
    asked = await server.wait_for(lambda m: m.get("method") == "session/request_permission")
    response = await server.call("session/resume", {"sessionId": session_id, "cwd": "/tmp"})
    assert updates_before(server, session_id, response)[-1] == {
        "sessionUpdate": "state_update",
        "state": "requires_action",
    }
    await server.send({"id": asked["id"], "result": {"outcome": {"outcome": "selected", "optionId": "allow_once"}}})
    assert (await server.idle(session_id))["params"]["update"]["stopReason"] == "end_turn"
    states = [u["state"] for u in server.states(session_id)]
    assert states == ["running", "requires_action", "requires_action", "running", "idle"]


async def test_resume_with_replay_of_running_work_replays_what_it_has_shown_once_then_it_streams_on(
    server_v2: RawClient,
) -> None:
    """§23 Q12: replay if asked, the snapshot, the answer, and the live work goes on; the replay is what the session
    showed before the resume (the earlier turn, and the running one so far, without a close note), nothing twice."""
    server = server_v2
    session_id = await server.new_session_v2()
    await server.response(await server.prompt(session_id, [{"say": "first"}]))
    await server.idle(session_id)
    running_id = (await server.response(await server.prompt(session_id, [{"say": "so-far"}, {"gate": "g"}])))["result"][
        "messageId"
    ]
    await server.probe("gate_reached", sessionId=session_id, gate="g")
    since = len(server.received)
    response = await server.call(
        "session/resume", {"sessionId": session_id, "cwd": "/tmp", "replayFrom": {"type": "start"}}
    )
    assert "result" in response
    replayed = [
        m["params"]["update"]
        for m in server.received[since : position(server, response)]
        if m.get("method") == "session/update" and m["params"]["sessionId"] == session_id
    ]
    texts = [b["text"] for u in replayed if u["sessionUpdate"] == "agent_message" for b in u["content"]]
    assert texts == ["first", "so-far"]
    assert [u["messageId"] for u in replayed if u["sessionUpdate"] == "user_message"][-1] == running_id
    assert replayed[-1] == {"sessionUpdate": "state_update", "state": "running"}
    assert [u["sessionUpdate"] for u in replayed].count("state_update") == 1
    await server.release(session_id, "g")
    idle = await server.idle(session_id, 2)
    assert idle["params"]["update"]["stopReason"] == "end_turn"
    live = [m for m in after(server, response) if m.get("method") == "session/update"]
    assert not [m for m in live if "so-far" in repr(m) or "first" in repr(m)]


async def test_resume_with_replay_while_the_work_streams_replays_only_what_was_shown_before_it_and_streams_the_rest(
    server_v2: RawClient,
) -> None:
    """§23 Q12: the work streams on while the resume reads the store (it awaits a flush and a read): what the turn
    sends meanwhile goes live and is not replayed too, so each chunk reaches the client once."""
    server = server_v2
    session_id = await server.new_session_v2()
    # Many stored records make the resume's read of the store take a while, so chunks stream during it.
    await server.response(await server.prompt(session_id, [{"say": "x ", "repeat": 5000, "every": 0.00001}]))
    await server.idle(session_id, timeout=4 * T_WAIT)  # a safety bound only: thousands of chunks on a busy machine
    script: list[dict[str, Any]] = [
        {"say": "so-far "},
        {"gate": "g"},
        {"sleep": 0.005},
        {"say": "p ", "repeat": 400, "every": 0.002},
    ]
    await server.response(await server.prompt(session_id, script))
    await server.probe("gate_reached", sessionId=session_id, gate="g")
    since = len(server.received)
    resume_id = server.next_id()
    resume = {"sessionId": session_id, "cwd": "/tmp", "replayFrom": {"type": "start"}}
    # The resume first, then the release: the chunks start only after the resume has begun.
    await server.send(
        {"id": resume_id, "method": "session/resume", "params": resume},
        {"method": "_scripted/release", "params": {"sessionId": session_id, "gate": "g"}},
    )
    response = await server.response(resume_id)
    assert "result" in response
    idle = await server.idle(session_id, 2)
    assert idle["params"]["update"]["stopReason"] == "end_turn"
    updates = [
        m["params"]["update"]
        for m in server.received[since : position(server, idle)]
        if m.get("method") == "session/update" and m["params"]["sessionId"] == session_id
    ]
    # Whole messages are the replay's; the live stream sends chunks.
    replayed = [b["text"] for u in updates if u["sessionUpdate"] == "agent_message" for b in u["content"]]
    live = "".join(u["content"]["text"] for u in updates if u["sessionUpdate"] == "agent_message_chunk")
    # The replay is what the turns had shown when the resume began (the running one up to its gate), and every
    # chunk after that comes once, live.
    assert replayed == ["x " * 5000, "so-far "]
    assert live == "p " * 400


async def test_resume_with_replay_of_running_work_replays_what_a_failed_flush_still_holds(
    start_server: StartServer, tmp_path: Path
) -> None:
    """§23 Q12 when the store cannot commit (another process holds its write lock past the busy timeout): a flush
    that failed keeps its batch for the next one, and what it holds was shown to the client, so a resume replaying
    the running work replays it too (it is neither committed nor in the turn's buffer any more: it used to be left
    out, the replay skipping what the client had been shown between the last commit and the failure)."""
    state, log_file = tmp_path / "state", tmp_path / "acp-server.log"
    env = {"ACP_SERVER_STATE_DIR": str(state), "ACP_SERVER_LOG_FILE": str(log_file)}
    server = await start_server(env=env)
    await server.initialize_v2()
    session_id = await server.new_session_v2()
    script = [{"say": "committed "}, {"gate": "g1"}, {"say": "kept "}, {"gate": "g2"}]
    await server.response(await server.prompt(session_id, script))
    await server.probe("gate_reached", sessionId=session_id, gate="g1")
    blocker = sqlite3.connect(state / "sessions.sqlite3", timeout=T_WAIT, isolation_level=None)
    try:
        await anyio.sleep(0.3)  # a few flushes: what was shown so far is committed
        blocker.execute("BEGIN IMMEDIATE")  # from here on every commit waits out the busy timeout and fails
        await server.release(session_id, "g1")
        await server.probe("gate_reached", sessionId=session_id, gate="g2")
        with anyio.fail_after(3 * T_WAIT):  # the busy timeout is 5 s
            # Another process's log file: no event to wait on.
            while "a flush failed" not in (log_file.read_text() if log_file.exists() else ""):  # noqa: ASYNC110
                await anyio.sleep(0.1)
        since = len(server.received)
        resume = {"sessionId": session_id, "cwd": "/tmp", "replayFrom": {"type": "start"}}
        response = await server.call("session/resume", resume, timeout=3 * T_WAIT)  # its flush fails too
        assert "result" in response
    finally:
        blocker.close()
    replayed = [
        m["params"]["update"]
        for m in server.received[since : position(server, response)]
        if m.get("method") == "session/update" and m["params"]["sessionId"] == session_id
    ]
    texts = "".join(b["text"] for u in replayed if u["sessionUpdate"] == "agent_message" for b in u["content"])
    assert texts == "committed kept "
    await server.release(session_id, "g2")
    assert (await server.idle(session_id))["params"]["update"]["stopReason"] == "end_turn"
