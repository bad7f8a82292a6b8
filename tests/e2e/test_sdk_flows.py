"""The ordinary editor flows, driven by the official ACP Python SDK's client side over real stdio.

docs/interrupts.md asks for two test clients: a raw-line client for the cases the SDK cannot produce, and the SDK for
the ordinary flows, so that what the server writes is proven parseable by a real client library and what such a
library writes is accepted. Every test runs through `tests.support.sdk_client.spawn_sdk_agent`, whose teardown closes
stdin and asserts exit 0 within 3 s, a schema-valid wire (C1-C4), no SDK-side error log and no stderr red flag.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest
from acp import PROTOCOL_VERSION, RequestError, text_block
from acp.schema import (
    AgentMessageChunk,
    AgentThoughtChunk,
    AvailableCommandsUpdate,
    ClientCapabilities,
    ConfigOptionUpdate,
    ContentToolCallContent,
    CurrentModeUpdate,
    FileSystemCapabilities,
    Implementation,
    PromptResponse,
    SessionInfoUpdate,
    TextContentBlock,
    ToolCallProgress,
    ToolCallStart,
    UsageUpdate,
)

from tests.conftest import server_args
from tests.support import harness
from tests.support.harness import DEFAULT_ARGS, T_ACK, T_ESC, T_WAIT, W_QUIET, Transport, scaled
from tests.support.sdk_client import RecordingClient, SdkAgent, spawn_sdk_agent

# Updates that belong to a session rather than to a turn (the commands announced after session/new, titles after
# the first turn); the checks below are about turn output.
SESSION_SCOPED = (AvailableCommandsUpdate, SessionInfoUpdate, CurrentModeUpdate, ConfigOptionUpdate, UsageUpdate)


def turn_updates(client: RecordingClient, session_id: str | None = None, since: int = 0) -> list[Any]:
    return [u for u in client.session_updates(session_id, since) if not isinstance(u, SESSION_SCOPED)]


def turn_records(client: RecordingClient) -> list[Any]:
    return [r for r in client.updates if not isinstance(r.update, SESSION_SCOPED)]


StartAgent = Callable[..., Awaitable[SdkAgent]]

ECHO_ARGS = ("--model", "echo")
# W_quiet of docs/interrupts.md, scaled down: long enough for a late line to show up on an idle loopback pipe.
QUIET = W_QUIET


@pytest.fixture
async def start_agent(transport: type[Transport]) -> AsyncIterator[StartAgent]:
    """Start SDK-driven servers over the test's transport; each one is closed and checked at teardown (see
    `spawn_sdk_agent`)."""
    async with contextlib.AsyncExitStack() as stack:

        async def start(*args: str, client: RecordingClient | None = None) -> SdkAgent:
            return await stack.enter_async_context(spawn_sdk_agent(*args, client=client, transport=transport))

        yield start


async def initialized(start: StartAgent, *args: str, client: RecordingClient | None = None) -> SdkAgent:
    agent = await start(*args, client=client)
    response = await agent.conn.initialize(
        protocol_version=PROTOCOL_VERSION,
        client_capabilities=ClientCapabilities(
            fs=FileSystemCapabilities(read_text_file=True, write_text_file=True), terminal=False
        ),
        client_info=Implementation(name="sdk-flow-tests", version="1"),
    )
    assert response.protocol_version == 1
    return agent


@pytest.fixture
async def scripted(start_agent: StartAgent, request: pytest.FixtureRequest) -> SdkAgent:
    """`--model scripted --test-mode --cleanup-deadline 0.5` (LONG_GRACE with `@pytest.mark.at_once`), initialized
    through the SDK."""
    return await initialized(start_agent, *(server_args(request) or DEFAULT_ARGS))


async def new_session(agent: SdkAgent, cwd: str = "/tmp") -> str:
    response = await agent.conn.new_session(cwd=cwd, mcp_servers=[])
    return response.session_id


def prompt(
    agent: SdkAgent, session_id: str, script: list[dict[str, Any]], text: str = "go"
) -> Awaitable[PromptResponse]:
    """A `session/prompt` whose `_meta.scripted` is `script` (the SDK puts extra kwargs into `_meta`)."""
    return agent.conn.prompt(session_id=session_id, prompt=[text_block(text)], scripted=script)


def start_prompt(agent: SdkAgent, session_id: str, script: list[dict[str, Any]]) -> asyncio.Task[PromptResponse]:
    async def run() -> PromptResponse:
        return await prompt(agent, session_id, script)

    return asyncio.create_task(run())


async def release(agent: SdkAgent, session_id: str, gate: str) -> None:
    await agent.conn.ext_notification("scripted/release", {"sessionId": session_id, "gate": gate})


async def assert_idle(agent: SdkAgent) -> dict[str, Any]:
    """`_acp_server/stats` shows nothing left running, queued or waiting on the client."""
    stats = await agent.stats()
    assert stats["runningTurns"] == 0, stats
    assert stats["queuedPrompts"] == 0, stats
    assert stats["pendingClientRequests"] == 0, stats
    assert stats["requestsInFlight"] == 1, stats  # the stats request itself
    return stats


def chunk_text(update: AgentMessageChunk | AgentThoughtChunk) -> str:
    assert isinstance(update.content, TextContentBlock), update
    return update.content.text


def tool_text(update: ToolCallProgress) -> str:
    texts = [
        c.content.text
        for c in update.content or []
        if isinstance(c, ContentToolCallContent) and isinstance(c.content, TextContentBlock)
    ]
    return "\n".join(texts)


# --- initialize and sessions ---


@pytest.mark.timeout(15)
async def test_initialize_answers_protocol_version_1_with_agent_info(start_agent: StartAgent) -> None:
    agent = await start_agent(*ECHO_ARGS)
    response = await agent.conn.initialize(protocol_version=1, client_info=Implementation(name="t", version="0"))
    assert response.protocol_version == 1
    assert response.agent_info is not None
    assert response.agent_info.name == "acp-server"
    assert response.agent_info.version
    assert response.agent_capabilities is not None
    assert response.agent_capabilities.load_session is True  # the session store is on by default


@pytest.mark.timeout(15)
async def test_initialize_answers_1_when_the_client_asks_for_65535_and_v2_is_off(start_agent: StartAgent) -> None:
    """The v1 agent's promise, kept under `--protocol 1`. With v2 on (the default, issue 12 item 1) a request above 2
    gets 2, the highest version at or below it (tests/e2e/test_v2_negotiation.py::test_acp_init_003_...)."""
    agent = await start_agent(*ECHO_ARGS, "--protocol", "1")
    response = await agent.conn.initialize(protocol_version=65535)
    assert response.protocol_version == 1


@pytest.mark.timeout(15)
async def test_new_sessions_get_distinct_non_empty_ids(start_agent: StartAgent) -> None:
    agent = await initialized(start_agent, *ECHO_ARGS)
    ids = [await new_session(agent) for _ in range(3)]
    ids.append((await agent.conn.new_session(cwd="/", additional_directories=["/tmp"], mcp_servers=[])).session_id)
    assert all(isinstance(i, str) and i for i in ids), ids
    assert len(set(ids)) == len(ids), ids


# --- echo ---


@pytest.mark.timeout(15)
async def test_echo_streams_the_prompt_text_back_on_its_own_session(start_agent: StartAgent) -> None:
    agent = await initialized(start_agent, *ECHO_ARGS)
    session, other = await new_session(agent), await new_session(agent)
    text = "The quick brown fox jumps over the lazy dog, " * 5 + "and the SDK hears every word of it."
    response = await agent.conn.prompt(session_id=session, prompt=[text_block(text)])
    assert response.stop_reason == "end_turn"
    chunks = [u for u in turn_updates(agent.client, session) if isinstance(u, AgentMessageChunk)]
    assert len(chunks) > 1, "a text this long streams in several chunks"
    assert "".join(chunk_text(c) for c in chunks) == text
    assert len({c.message_id for c in chunks}) == 1 and chunks[0].message_id, "one message, one messageId"
    assert {r.session_id for r in turn_records(agent.client)} == {session}
    assert turn_updates(agent.client, other) == []
    # The other session echoes its own text, and nothing of it lands on the first one.
    before = agent.client.mark()
    response = await agent.conn.prompt(session_id=other, prompt=[text_block("second")])
    assert response.stop_reason == "end_turn"
    assert agent.client.texts(other) == ["second"]
    assert {r.session_id for r in turn_records(agent.client) if r.seq > before} == {other}


# --- scripted turns ---


@pytest.mark.timeout(15)
async def test_scripted_say_and_think_arrive_as_message_and_thought_chunks_in_order(scripted: SdkAgent) -> None:
    session = await new_session(scripted)
    script: list[dict[str, Any]] = [
        {"think": "t1"},
        {"say": "a"},
        {"think": "t2"},
        {"say": "b", "repeat": 2},
        {"say": "c"},
    ]
    response = await prompt(scripted, session, script)
    assert response.stop_reason == "end_turn"
    updates = turn_updates(scripted.client, session)
    assert [
        (u.session_update, chunk_text(u)) for u in updates if isinstance(u, AgentMessageChunk | AgentThoughtChunk)
    ] == [
        ("agent_thought_chunk", "t1"),
        ("agent_message_chunk", "a"),
        ("agent_thought_chunk", "t2"),
        ("agent_message_chunk", "b"),
        ("agent_message_chunk", "b"),
        ("agent_message_chunk", "c"),
    ]
    assert len(updates) == 6, updates
    assert scripted.client.thoughts(session) == ["t1", "t2"]
    assert {r.session_id for r in turn_records(scripted.client)} == {session}


@pytest.mark.timeout(20)
@pytest.mark.at_once
async def test_cancel_during_a_gate_answers_cancelled_quickly_and_the_next_prompt_ends_end_turn(
    scripted: SdkAgent,
) -> None:
    client = scripted.client
    session = await new_session(scripted)
    turn = start_prompt(scripted, session, [{"say": "before"}, {"gate": "g1"}, {"say": "after"}])
    await client.wait_for_probe("gate_reached", sessionId=session, gate="g1")
    started = time.monotonic()
    await scripted.conn.cancel(session_id=session)
    response = await asyncio.wait_for(turn, T_WAIT)
    took = time.monotonic() - started
    assert response.stop_reason == "cancelled"
    assert took < T_ACK, f"cancel -> cancelled took {took:.3f} s"
    assert client.texts(session) == ["before"]
    # Opening the gate now changes nothing; the session is ready for the next prompt at once.
    await release(scripted, session, "g1")
    mark = client.mark()
    response = await prompt(scripted, session, [{"say": "ok"}])
    assert response.stop_reason == "end_turn"
    assert client.texts(session, since=mark) == ["ok"]
    assert "after" not in client.texts(session)
    await assert_idle(scripted)


@pytest.mark.timeout(20)
@pytest.mark.parametrize("cancelled_first", [True, False], ids=["cancel-first-started", "cancel-last-started"])
@pytest.mark.at_once
async def test_cancel_of_one_gated_session_leaves_the_other_running_to_end_turn(
    scripted: SdkAgent, cancelled_first: bool
) -> None:
    client = scripted.client
    a, b = await new_session(scripted), await new_session(scripted)
    first, second = (a, b) if cancelled_first else (b, a)
    turns: dict[str, asyncio.Task[PromptResponse]] = {}
    for session in (first, second):
        label = "A" if session == a else "B"
        turns[session] = start_prompt(scripted, session, [{"say": f"{label}1"}, {"gate": "g"}, {"say": f"{label}2"}])
        await client.wait_for_probe("gate_reached", sessionId=session, gate="g")

    started = time.monotonic()
    await scripted.conn.cancel(session_id=a)
    response_a = await asyncio.wait_for(turns[a], T_WAIT)
    assert response_a.stop_reason == "cancelled"
    assert time.monotonic() - started < T_ACK
    await asyncio.sleep(scaled(0.1))
    assert not turns[b].done(), "B must still be waiting on its gate"

    await release(scripted, b, "g")
    response_b = await asyncio.wait_for(turns[b], T_WAIT)
    assert response_b.stop_reason == "end_turn"
    assert client.texts(a) == ["A1"]
    assert client.texts(b) == ["B1", "B2"]
    assert client.probes("step_exited", sessionId=b, reason="cancelled") == []
    # Every update carries its own session's id: A's texts only on A, B's only on B.
    for record in turn_records(client):
        assert isinstance(record.update, AgentMessageChunk)
        assert chunk_text(record.update)[0] == ("A" if record.session_id == a else "B"), record
    # Neither session keeps cancelled state behind.
    for session in (a, b):
        assert (await prompt(scripted, session, [{"say": "ok"}])).stop_reason == "end_turn"
    await assert_idle(scripted)


@pytest.mark.timeout(15)
@pytest.mark.parametrize("reason", ["end_turn", "max_tokens", "refusal"])
async def test_a_stop_step_ends_the_turn_with_that_stop_reason(scripted: SdkAgent, reason: str) -> None:
    session = await new_session(scripted)
    response = await prompt(scripted, session, [{"say": "x"}, {"stop": reason}, {"say": "never"}])
    assert response.stop_reason == reason
    assert scripted.client.texts(session) == ["x"]


@pytest.mark.timeout(15)
async def test_a_script_that_does_not_parse_raises_invalid_params_naming_the_step(scripted: SdkAgent) -> None:
    session = await new_session(scripted)
    with pytest.raises(RequestError) as raised:
        await prompt(scripted, session, [{"say": "fine"}, {"bogus": 1}])
    assert raised.value.code == -32602
    assert "step 1" in str(raised.value)
    assert turn_updates(scripted.client, session) == [], "a refused script plays nothing"


@pytest.mark.timeout(15)
async def test_a_fail_step_raises_request_error_not_end_turn(scripted: SdkAgent) -> None:
    session = await new_session(scripted)
    with pytest.raises(RequestError) as raised:
        await prompt(scripted, session, [{"say": "x"}, {"fail": "boom"}, {"say": "never"}])
    assert raised.value.code == -32603
    assert "boom" in str(raised.value)
    assert scripted.client.texts(session) == ["x"]
    # The failure leaves the session usable.
    assert (await prompt(scripted, session, [{"say": "ok"}])).stop_reason == "end_turn"
    await assert_idle(scripted)


@pytest.mark.timeout(15)
async def test_a_tool_call_shows_up_as_tool_call_then_tool_call_update_completed(scripted: SdkAgent) -> None:
    session = await new_session(scripted)
    response = await prompt(scripted, session, [{"tool": "test_sleep", "args": {"s": 0.01}}, {"say": "done"}])
    assert response.stop_reason == "end_turn"
    updates = turn_updates(scripted.client, session)
    start, *progress, said = updates
    assert isinstance(start, ToolCallStart), updates
    assert start.tool_call_id
    assert start.title == "test_sleep"
    assert start.raw_input == {"s": 0.01}
    assert progress and all(isinstance(u, ToolCallProgress) for u in progress), updates
    assert {u.tool_call_id for u in progress if isinstance(u, ToolCallProgress)} == {start.tool_call_id}
    # Any intermediate updates are in_progress; the last one closes the call as completed.
    statuses = [u.status for u in progress if isinstance(u, ToolCallProgress)]
    assert statuses[-1] == "completed" and set(statuses[:-1]) <= {"in_progress"}, statuses
    # The next model step only plays after the tool's result.
    assert isinstance(said, AgentMessageChunk) and chunk_text(said) == "done"


@pytest.mark.timeout(15)
async def test_the_client_request_tool_reaches_read_text_file_and_its_answer_is_the_tool_result(
    start_agent: StartAgent,
) -> None:
    client = RecordingClient(files={"/x": "contents of x, from the editor's buffer"})
    agent = await initialized(start_agent, *DEFAULT_ARGS, client=client)
    session = await new_session(agent)
    script: list[dict[str, Any]] = [
        {"tool": "test_client_request", "args": {"method": "fs/read_text_file", "params": {"path": "/x"}}},
        {"say": "read it"},
    ]
    response = await prompt(agent, session, script)
    assert response.stop_reason == "end_turn"
    [call] = client.calls
    assert (call.method, call.session_id, call.params["path"]) == ("fs/read_text_file", session, "/x")
    finished = [
        u for u in turn_updates(client, session) if isinstance(u, ToolCallProgress) and u.status != "in_progress"
    ]
    assert [u.status for u in finished] == ["completed"]
    assert finished[0].raw_output == {"content": "contents of x, from the editor's buffer"}
    assert "contents of x, from the editor's buffer" in tool_text(finished[0])
    assert client.texts(session) == ["read it"]


@pytest.mark.timeout(15)
async def test_the_client_request_tool_writes_files_and_asks_permission_through_the_sdk(
    start_agent: StartAgent,
) -> None:
    client = RecordingClient(permission_option="allow-once")
    agent = await initialized(start_agent, *DEFAULT_ARGS, client=client)
    session = await new_session(agent)
    permission = {
        "toolCall": {"toolCallId": "call_1", "title": "write /y"},
        "options": [
            {"optionId": "allow-once", "name": "Allow", "kind": "allow_once"},
            {"optionId": "reject-once", "name": "Reject", "kind": "reject_once"},
        ],
    }
    script: list[dict[str, Any]] = [
        {"tool": "test_client_request", "args": {"method": "session/request_permission", "params": permission}},
        {
            "tool": "test_client_request",
            "args": {"method": "fs/write_text_file", "params": {"path": "/y", "content": "new"}},
        },
    ]
    response = await prompt(agent, session, script)
    assert response.stop_reason == "end_turn"
    assert [c.method for c in client.calls] == ["session/request_permission", "fs/write_text_file"]
    assert client.files == {"/y": "new"}
    closing = [
        u for u in turn_updates(client, session) if isinstance(u, ToolCallProgress) and u.status != "in_progress"
    ]
    assert [u.status for u in closing] == ["completed", "completed"]
    results = [u.raw_output for u in closing]
    assert results == [{"outcome": {"outcome": "selected", "optionId": "allow-once"}}, {}]


@pytest.mark.timeout(15)
async def test_a_client_error_fails_the_tool_call_and_the_turn_goes_on(scripted: SdkAgent) -> None:
    """The editor answers `fs/read_text_file` with an error (no such file): the tool call ends `failed` with the
    error in its content, the model sees the failure and the turn still ends `end_turn`."""
    session = await new_session(scripted)
    script: list[dict[str, Any]] = [
        {"tool": "test_client_request", "args": {"method": "fs/read_text_file", "params": {"path": "/missing"}}},
        {"say": "after"},
    ]
    response = await prompt(scripted, session, script)
    assert response.stop_reason == "end_turn"
    [call] = scripted.client.calls
    assert call.params["path"] == "/missing"
    closing = [
        u
        for u in turn_updates(scripted.client, session)
        if isinstance(u, ToolCallProgress) and u.status != "in_progress"
    ]
    assert [u.status for u in closing] == ["failed"]
    assert "-32002" in tool_text(closing[0])
    assert scripted.client.texts(session) == ["after"]


@pytest.mark.timeout(20)
@pytest.mark.at_once
async def test_cancel_while_a_client_request_hangs_answers_cancelled_without_waiting_for_the_client(
    scripted: SdkAgent,
) -> None:
    client = scripted.client
    client.files["/x"] = "late"
    hold = client.hold("fs/read_text_file")
    session = await new_session(scripted)
    script: list[dict[str, Any]] = [
        {"tool": "test_client_request", "args": {"method": "fs/read_text_file", "params": {"path": "/x"}}},
        {"say": "never"},
    ]
    turn = start_prompt(scripted, session, script)
    call = await client.wait_for_call("fs/read_text_file")
    assert (call.session_id, call.params["path"]) == (session, "/x")
    assert hold.entered.is_set()
    started = time.monotonic()
    await scripted.conn.cancel(session_id=session)
    response = await asyncio.wait_for(turn, T_WAIT)
    took = time.monotonic() - started
    assert response.stop_reason == "cancelled"
    assert took < T_ACK, f"cancel -> cancelled took {took:.3f} s"
    assert not hold.released and hold.answered == 0, "the answer must not have waited for the client"

    # The server retracted its request with `$/cancel_request` before the prompt's response, and closed the call.
    [read] = scripted.wire.server_messages("fs/read_text_file")
    retractions = scripted.wire.server_messages("$/cancel_request")
    assert [r["params"]["requestId"] for r in retractions] == [read["id"]]
    response_entry = scripted.wire.response_entry("session/prompt", session)
    assert all(e.seq < response_entry.seq for e in scripted.wire.log if e.msg in retractions)
    updates = turn_updates(client, session)
    assert isinstance(updates[0], ToolCallStart) and isinstance(updates[-1], ToolCallProgress), updates
    assert updates[-1].status == "failed", "a call the cancel cut short is closed as failed"
    assert all(isinstance(u, ToolCallProgress) and u.status == "in_progress" for u in updates[1:-1]), updates

    # The editor answers late: the server ignores it (no line at all), and the session goes on.
    lines_before = len(scripted.wire.server_messages())
    hold.release()
    await asyncio.sleep(QUIET)
    assert hold.answered == 1
    # SDK 0.12.1 has no `$/cancel_request` handler: it logged the retraction and kept its handler running, which is
    # why its answer comes late here (an editor that honours the retraction would answer -32800 or nothing).
    assert scripted.sdk_ignored_cancel_requests == 1
    late = [m for m in scripted.wire.client_messages() if m.get("id") == read["id"] and "method" not in m]
    assert len(late) == 1 and late[0]["result"] == {"content": "late"}, "the SDK did send its late answer"
    assert scripted.wire.server_messages()[lines_before:] == []
    assert "never" not in client.texts(session)
    mark = client.mark()
    assert (await prompt(scripted, session, [{"say": "ok"}])).stop_reason == "end_turn"
    assert client.texts(session, since=mark) == ["ok"]
    await assert_idle(scripted)


# --- leaks and errors ---


@pytest.mark.timeout(30)
async def test_stats_return_to_zero_running_queued_and_pending_after_every_kind_of_turn(scripted: SdkAgent) -> None:
    client = scripted.client
    a, b = await new_session(scripted), await new_session(scripted)
    baseline = await assert_idle(scripted)
    assert baseline["sessions"] == 2

    # normal, tool, failure
    assert (
        await prompt(scripted, a, [{"say": "x"}, {"tool": "test_sleep", "args": {"s": 0}}])
    ).stop_reason == "end_turn"
    with pytest.raises(RequestError):
        await prompt(scripted, a, [{"fail": "boom"}])
    # two gated sessions, one cancelled, one released
    turn_a = start_prompt(scripted, a, [{"gate": "g"}])
    turn_b = start_prompt(scripted, b, [{"gate": "g"}, {"say": "b"}])
    await client.wait_for_probe("gate_reached", sessionId=a, gate="g")
    await client.wait_for_probe("gate_reached", sessionId=b, gate="g")
    await scripted.conn.cancel(session_id=a)
    assert (await asyncio.wait_for(turn_a, T_WAIT)).stop_reason == "cancelled"
    await release(scripted, b, "g")
    assert (await asyncio.wait_for(turn_b, T_WAIT)).stop_reason == "end_turn"
    # a cancel while the client holds a request, answered late
    hold = client.hold("fs/read_text_file")
    client.files["/x"] = "x"
    turn = start_prompt(
        scripted,
        b,
        [{"tool": "test_client_request", "args": {"method": "fs/read_text_file", "params": {"path": "/x"}}}],
    )
    await asyncio.wait_for(hold.entered.wait(), T_WAIT)
    await scripted.conn.cancel(session_id=b)
    assert (await asyncio.wait_for(turn, T_WAIT)).stop_reason == "cancelled"
    hold.release()
    # a cancel on an idle session, and a cancel of an already cancelled one
    await scripted.conn.cancel(session_id=a)
    await scripted.conn.cancel(session_id=b)
    await asyncio.sleep(QUIET)

    final = await assert_idle(scripted)
    assert final["sessions"] == 2
    assert final["childProcesses"] == 0
    assert final["tasks"] <= baseline["tasks"], f"tasks leaked: {baseline} -> {final}"


@pytest.mark.timeout(15)
async def test_an_unknown_method_raises_request_error_method_not_found(scripted: SdkAgent) -> None:
    with pytest.raises(RequestError) as unknown_extension:
        await scripted.conn.ext_method("acp_server/no_such_method", {})
    assert unknown_extension.value.code == -32601
    # An ACP method the server does not implement (`proxy/initialize`, unstable in v1 and for proxies, not agents;
    # every stable method is implemented since `logout`) is refused the same way. The SDK client has no method for
    # it, so it goes through the SDK's own connection.
    with pytest.raises(RequestError) as unsupported:
        await scripted.conn._conn.send_request("proxy/initialize", {})
    assert unsupported.value.code == -32601
    # The connection is unharmed.
    session = await new_session(scripted)
    assert (await prompt(scripted, session, [{"say": "ok"}])).stop_reason == "end_turn"


@pytest.mark.timeout(20)
@pytest.mark.at_once  # the 0.3 s finalizer must fit in the deadline however loaded the machine: LONG_GRACE
async def test_a_prompt_sent_right_after_cancel_waits_for_the_cleanup_then_runs(scripted: SdkAgent) -> None:
    """The editor's Stop-then-type flow: the cancelled turn cleans up (a finalizer holds it 0.3 s), the next prompt
    is accepted (not refused as busy), and it starts only after the cancelled turn's response."""
    client, wire = scripted.client, scripted.wire
    session = await new_session(scripted)
    first = start_prompt(scripted, session, [{"tool": "test_hang_finalizer", "args": {"s": 30, "f": 0.3}}])
    await client.wait_for_probe("tool_started", sessionId=session)
    started = time.monotonic()
    await scripted.conn.cancel(session_id=session)
    second = start_prompt(scripted, session, [{"say": "next"}])
    first_response = await asyncio.wait_for(first, T_WAIT)
    second_response = await asyncio.wait_for(second, T_WAIT)
    assert first_response.stop_reason == "cancelled"
    assert time.monotonic() - started < T_ESC
    assert second_response.stop_reason == "end_turn"
    assert client.texts(session) == ["next"]
    assert client.probes("finalizer_exited", sessionId=session), "the 0.3 s finalizer fits in the deadline"

    # On the wire: the first prompt's response precedes every update of the second turn.
    cancelled_at = wire.response_entry("session/prompt", session, nth=0).seq
    second_updates = [
        e.seq
        for e in wire.log
        if e.dir == "out"
        and isinstance(e.msg, dict)
        and e.msg.get("method") == "session/update"
        and e.msg["params"]["update"].get("sessionUpdate") == "agent_message_chunk"
    ]
    assert second_updates and min(second_updates) > cancelled_at
    await assert_idle(scripted)


@pytest.mark.timeout(20)
async def test_closing_stdin_mid_turn_answers_every_prompt_cancelled_and_exits_cleanly() -> None:
    """The editor quits while one turn waits on a gate and another on the editor itself: both prompts are answered
    `cancelled` before the server exits 0 (C1: nothing left unanswered)."""
    client = RecordingClient(files={"/x": "x"})
    hold = client.hold("fs/read_text_file")
    async with spawn_sdk_agent(*DEFAULT_ARGS, client=client) as agent:
        await agent.conn.initialize(protocol_version=1)
        a, b = await new_session(agent), await new_session(agent)
        gated = start_prompt(agent, a, [{"gate": "g"}, {"say": "never"}])
        waiting = start_prompt(
            agent,
            b,
            [{"tool": "test_client_request", "args": {"method": "fs/read_text_file", "params": {"path": "/x"}}}],
        )
        await client.wait_for_probe("gate_reached", sessionId=a)
        await asyncio.wait_for(hold.entered.wait(), T_WAIT)
        problems = await agent.close()
        assert problems == []
        assert gated.done() and waiting.done(), "the responses were on the wire before stdout closed"
        assert gated.result().stop_reason == "cancelled"
        assert waiting.result().stop_reason == "cancelled"
        assert hold.answered == 0
        assert "never" not in client.texts(a)


FAKE_SERVER = """
import sys
line = sys.stdin.readline()
sys.stdout.write("this is not JSON-RPC\\n")
sys.stdout.write('{"jsonrpc": "2.0", "id": 0, "result": {"protocolVersion": 1}}\\n')
sys.stdout.flush()
sys.stdin.read()
sys.stderr.write("Task exception was never retrieved\\n")
sys.exit(3)
"""


@pytest.mark.timeout(15)
async def test_the_sdk_tee_fails_on_a_non_json_line_a_red_flag_and_a_bad_exit(monkeypatch: pytest.MonkeyPatch) -> None:
    """The teardown checks above can fail: a fake server that breaks the rules trips every one of them."""
    # The stdio transport builds the server's command line: a fake server in its place.
    monkeypatch.setattr(harness, "server_command", lambda *args: [sys.executable, "-c", FAKE_SERVER])
    with pytest.raises(AssertionError) as failed:
        async with spawn_sdk_agent() as agent:
            response = await agent.conn.initialize(protocol_version=1)
            assert response.protocol_version == 1
    report = str(failed.value)
    assert "not JSON" in report
    assert "exit status 3" in report
    assert "Task exception was never retrieved" in report
    assert "the SDK logged an error: Error parsing JSON-RPC message" in report
