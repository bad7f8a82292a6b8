"""End-to-end proofs for cancel bugs that no test over the wire used to catch (issue 15, items 1-8; issue 21 below).

Each bug was made by hand in the code, one at a time, and the suite stayed green (or only a unit test that looks at
internal state, or a test about something else, went red). Every test here drives the real server (over each
transport of TRANSPORTS, where it reaches it through the fixtures; a test that takes `version` runs as v1 and v2) and
fails with its bug in place; the bugs are kept as patches in tests/mutations/ (`python -m tests.mutations.run`
re-checks that each is still caught).

Where a test must tell "stopped at once" from "given up at the cleanup deadline", the server runs with a cleanup
deadline far above the acknowledgement bound (LONG_GRACE against T_ACK): with the usual 0.5 s deadline and 1 s
allowed for the answer, both would pass. Every cooperative cancel here also checks that no run was abandoned.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from pathlib import Path
from typing import Any

import orjson
import pytest

from tests.conftest import StartServer
from tests.e2e.test_interrupts import after, chunk, position
from tests.support.fake_openai import FakeOpenAI, text_reply, tool_call_reply
from tests.support.harness import (
    DEFAULT_ARGS,
    GRACE,
    LONG_GRACE,
    LONG_GRACE_ARGS,
    T_ACK,
    T_ESC,
    T_EXIT,
    T_START,
    T_WAIT,
    W_QUIET,
    RawClient,
    isolated_env,
    server_command,
)
from tests.support.versions import VERSIONS
from tests.support.wire_schema import WireValidator

# The invariants hold on every transport: each test that reaches a server through the fixtures runs over each.
pytestmark = pytest.mark.every_transport

FS = {"fs": {"readTextFile": True, "writeTextFile": True}}


async def start(start_server: StartServer, *args: str, grace: float = LONG_GRACE) -> RawClient:
    server = await start_server("--model", "scripted", "--test-mode", "--cleanup-deadline", str(grace), *args)
    await server.initialize()
    return server


def probes(server: RawClient, prompt: Any, event: str) -> list[dict[str, Any]]:
    return [
        m
        for m in server.received
        if m.get("method") == "_scripted/probe" and m["params"]["prompt"] == prompt and m["params"]["event"] == event
    ]


def assert_nothing_abandoned(server: RawClient) -> None:
    """A cooperative cancel stops the work: it is never left running at the deadline."""
    abandoned = [m for m in server.received if m.get("params", {}).get("reason") == "abandoned"]
    assert not abandoned, abandoned


def of_prompt(server: RawClient, prompt: Any) -> list[dict[str, Any]]:
    """Everything the server sent on behalf of `prompt`: its probes and its chunks (tagged by their text)."""
    return [m for m in server.received if m.get("params", {}).get("prompt") == prompt]


# --- 1. I8: a cancel ends the wait for a permission answer at once, not at the deadline ---


async def test_a_cancel_ends_an_unanswered_permission_wait_at_once_and_a_late_allow_writes_nothing(
    start_server: StartServer, tmp_path: Path
) -> None:
    server = await start_server("--model", "scripted", "--test-mode", "--cleanup-deadline", str(LONG_GRACE))
    await server.initialize(FS)
    a = await server.new_session(str(tmp_path))
    prompt = await server.prompt(
        a, [{"tool": "write_file", "args": {"path": "out.txt", "content": "x"}}, {"say": "no"}]
    )
    # out.txt is new, so it is not read through the editor first: the permission question comes next.
    # This client never answers the question, as a client may: the agent must not depend on it.
    asked = await server.wait_for(lambda m: m.get("method") == "session/request_permission" and "id" in m)
    t0 = await server.cancel(a)
    response = await server.response(prompt)
    assert response["result"] == {"stopReason": "cancelled"}
    assert server.arrival_time(response) - t0 <= T_ACK  # at once: the deadline is LONG_GRACE away
    [retraction] = [m for m in server.received if m.get("method") == "$/cancel_request"]
    assert retraction["params"] == {"requestId": asked["id"]}
    assert position(server, retraction) < position(server, response)
    count = len(server.received)
    await server.send({"id": asked["id"], "result": {"outcome": {"outcome": "selected", "optionId": "allow_once"}}})
    await server.quiet(W_QUIET, lambda m: m in server.received[count:] and m.get("method") != "_scripted/probe")
    assert not [m for m in server.received if m.get("method") == "fs/write_text_file"]
    assert not (tmp_path / "out.txt").exists()
    assert server.texts(a) == []
    assert_nothing_abandoned(server)


# --- 2. I6: what an abandoned run appends later never reaches a later turn ---


async def test_a_late_tool_result_of_an_abandoned_run_never_reaches_the_next_model_request(
    start_server: StartServer,
) -> None:
    stubborn_seconds = GRACE + 1.0  # returns well after the run was abandoned at the deadline
    with FakeOpenAI() as model:
        # Not a cancellable call (test_stubborn is one: its body runs apart and never gives its late result back):
        # it runs inside the turn, so when it returns the abandoned loop appends its result to its own list.
        late = ("call_late", "test_stubborn_inline", [orjson.dumps({"s": stubborn_seconds}).decode()])
        model.script(tool_call_reply(late))
        model.set_default(text_reply("fresh"))
        server = await start_server(
            "--model", "openai:fake", "--base-url", model.base_url, "--test-mode", "--cleanup-deadline", str(GRACE),
            env={"OPENAI_API_KEY": "sk-test"},
        )  # fmt: skip
        await server.initialize()
        a = await server.new_session()
        # Named first, so no background title request is still talking to the fake model when the test ends.
        title = {"sessionId": a, "prompt": [{"type": "text", "text": "/title Proof"}]}
        assert (await server.call("session/prompt", title))["result"] == {"stopReason": "end_turn"}
        first = await server.request("session/prompt", {"sessionId": a, "prompt": [{"type": "text", "text": "one"}]})
        # Only a wait, never asserted: the first model call loads the HTTP client, seconds on a loaded machine.
        await server.probe("tool_started", sessionId=a, toolCallId="call_late", timeout=4 * T_EXIT)
        await server.cancel(a)
        cancelled = await server.response(first, timeout=T_ESC + 1)
        assert cancelled["result"] == {"stopReason": "cancelled"}
        abandoned = await server.probe("step_exited", sessionId=a, reason="abandoned")
        assert position(server, abandoned) < position(server, cancelled)
        # The zombie's tool returns now, and its loop appends the result to the conversation it was working on.
        await server.probe("tool_exited", sessionId=a, toolCallId="call_late", reason="completed", timeout=T_ESC + 2)
        second = await server.request("session/prompt", {"sessionId": a, "prompt": [{"type": "text", "text": "two"}]})
        assert (await server.response(second))["result"] == {"stopReason": "end_turn"}
        [asked] = [
            r.body["messages"]
            for r in model.requests
            if r.body.get("tools") and r.body["messages"][-1] == {"role": "user", "content": "two"}
        ]
    assert not [m for m in asked if "ignored cancellation" in str(m.get("content"))], asked
    # The abandoned call has exactly one result in the history: the note the cancel wrote.
    results = [m for m in asked if m["role"] == "tool" and m.get("tool_call_id") == "call_late"]
    assert len(results) == 1, asked
    assert "cancelled" in str(results[0]["content"])


# --- 3. I19: a late finisher of a replaced run leaves the successor's registry entry alone ---


async def test_a_replacement_stays_cancellable_after_the_replaced_turn_finishes_late(
    start_server: StartServer, version: str
) -> None:
    """I19 under `interrupt`: P1's cleanup takes a while (far less than the deadline), P2 and P3 arrive together: P2
    is claimed before it ran (v1 `cancelled`, v2 withdrawn `-32800`), P1 ends `cancelled` once its finalizer is done,
    P3 runs alone after that; P1's late finish left P3's registry entry alone, so a cancel still finds P3 (its end
    within T_ACK)."""
    acp = VERSIONS[version](await start_server(*LONG_GRACE_ARGS, "--prompt-policy", "interrupt"))
    await acp.initialize()
    server = acp.client
    a = await acp.new_session()
    # Its cleanup (a shielded finally) takes a while, but far less than the deadline: the run ends late, not abandoned.
    old = await acp.prompt(a, [{"tool": "test_hang_finalizer", "args": {"s": 30, "f": T_ACK}}])
    await server.probe("tool_started", sessionId=a)
    superseded_message, superseded = acp.prompt_message(a, [{"say": "never"}])
    successor_message, successor = acp.prompt_message(a, [{"say": "p3"}, {"gate": "g3"}, {"say": "p3-late"}])
    await server.send(superseded_message, successor_message)  # P2 replaces P1, then P3 replaces P2 before it started
    await acp.claimed(superseded)
    old_end = await acp.stopped(old, "cancelled")
    finalized = await server.probe("finalizer_exited", sessionId=a)
    assert position(server, finalized) < position(server, old_end)
    await server.probe("gate_reached", sessionId=a, prompt=successor.request_id, gate="g3")
    t0 = await server.cancel(a)  # finds the successor: the old run's late finish left its entry alone
    end = await acp.stopped(successor, "cancelled")
    assert server.arrival_time(end) - t0 <= T_ACK
    started = probes(server, successor.request_id, "step_started")
    assert position(server, old_end) < position(server, started[0])  # and it ran alone, after P1's end
    assert server.texts(a) == ["p3"]
    assert_nothing_abandoned(server)
    stats = await server.stats()
    assert (stats["runningTurns"], stats["queuedPrompts"]) == (0, 0)


# --- 4. I15/I11: a cancel in the settlement window still claims every queued prompt ---


async def test_a_cancel_in_the_settlement_window_still_claims_every_queued_prompt(start_server: StartServer) -> None:
    server = await start(start_server, "--prompt-policy", "queue", grace=GRACE)
    a = await server.new_session()
    running = await server.prompt(a, [{"say": "p1"}, {"after_turn_gate": "settle"}])
    await server.probe("gate_reached", sessionId=a, gate="settle")  # the outcome is decided; the turn is settling
    queued = [server.prompt_message(a, [{"say": "p2"}]), server.prompt_message(a, [{"say": "p3"}])]
    # Admitted in reader order, so the cancel comes after both prompts, still inside the settlement window.
    t0 = await server.send(*queued, {"method": "session/cancel", "params": {"sessionId": a}})
    for prompt in queued:
        claimed = await server.response(prompt["id"])
        assert claimed["result"] == {"stopReason": "cancelled"}
        assert server.arrival_time(claimed) - t0 <= T_ACK
    await server.release(a, "settle")
    assert (await server.response(running))["result"] == {"stopReason": "end_turn"}  # the decided outcome stands
    for prompt in queued:
        assert probes(server, prompt["id"], "step_started") == []
    later = await server.response(await server.prompt(a, [{"say": "p4"}]))
    assert later["result"] == {"stopReason": "end_turn"}
    assert server.texts(a) == ["p1", "p4"]
    assert_nothing_abandoned(server)


# --- 5. I20: `$/cancel_request` naming a queued prompt cancels that prompt only ---


async def test_cancel_request_naming_a_queued_prompt_cancels_only_that_prompt(start_server: StartServer) -> None:
    server = await start(start_server, "--prompt-policy", "queue")
    a = await server.new_session()
    running = await server.prompt(a, [{"say": "p1"}, {"gate": "g1"}, {"say": "p1-end"}])
    await server.probe("gate_reached", sessionId=a, gate="g1")
    named = await server.prompt(a, [{"say": "p2-never"}])
    behind = await server.prompt(a, [{"say": "p3"}])
    t0 = await server.notify("$/cancel_request", {"requestId": named})
    response = await server.response(named)
    assert response["result"] == {"stopReason": "cancelled"}
    assert server.arrival_time(response) - t0 <= T_ACK
    await server.release(a, "g1")
    assert (await server.response(running))["result"] == {"stopReason": "end_turn"}
    assert (await server.response(behind))["result"] == {"stopReason": "end_turn"}
    assert probes(server, named, "step_started") == []
    assert server.texts(a) == ["p1", "p1-end", "p3"]
    assert_nothing_abandoned(server)


# --- 6. I14: the replacement starts only after the old turn's cleanup and response ---


async def test_a_replacement_starts_only_after_the_replaced_turn_has_cleaned_up_and_answered(
    start_server: StartServer,
) -> None:
    server = await start(start_server)
    a = await server.new_session()
    old = await server.prompt(a, [{"say": "p1"}, {"abort_gate": "cleanup"}])
    await server.probe("step_started", sessionId=a, prompt=old, action="abort_gate")
    new = await server.prompt(a, [{"say": "p2"}])
    await server.probe("gate_reached", sessionId=a, prompt=old, gate="cleanup")  # P1 is cancelled; its cleanup holds
    held = len(server.received)
    await server.quiet(
        W_QUIET,
        lambda m: m in server.received[held:] and (m in of_prompt(server, new) or chunk("p2")(m) or "method" not in m),
    )
    await server.release(a, "cleanup")
    old_response = await server.response(old)
    assert old_response["result"] == {"stopReason": "cancelled"}
    first = await server.wait_for(chunk("p2"))
    assert position(server, old_response) < position(server, first)
    assert position(server, old_response) < position(server, probes(server, new, "step_started")[0])
    assert server.arrival_time(first) - server.arrival_time(old_response) <= T_START
    assert (await server.response(new))["result"] == {"stopReason": "end_turn"}
    assert server.texts(a) == ["p1", "p2"]
    assert_nothing_abandoned(server)


# --- 7. I18: at the writer, a response never overtakes the updates queued before it ---


class PipeLines:
    """The read end of the server's stdout, read only when the test says so (a client that stops reading)."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.buffer = b""
        self.validator = WireValidator()

    def _next(self) -> bytes | None:
        while b"\n" not in self.buffer:
            data = os.read(self.fd, 1 << 16)
            if not data:
                return None
            self.buffer += data
        line, _, self.buffer = self.buffer.partition(b"\n")
        return line + b"\n"

    async def until(self, request_id: int) -> list[dict[str, Any]]:
        """Read (in a worker thread: the fd blocks) up to and including the response to `request_id`."""
        messages: list[dict[str, Any]] = []
        while True:
            line = await asyncio.to_thread(self._next)
            assert line is not None, f"stdout closed before the response to {request_id}"
            message = self.validator.server_wrote(line)
            assert message is not None
            messages.append(message)
            if message.get("id") == request_id and "method" not in message:
                return messages

    async def rest(self) -> list[dict[str, Any]]:
        messages = []
        while (line := await asyncio.to_thread(self._next)) is not None:
            message = self.validator.server_wrote(line)
            assert message is not None
            messages.append(message)
        return messages


@pytest.mark.timeout(30)
async def test_a_response_is_written_after_every_update_queued_before_it_when_the_client_stops_reading() -> None:
    read_end, write_end = os.pipe()
    process = await asyncio.create_subprocess_exec(
        *server_command(*DEFAULT_ARGS),
        stdin=asyncio.subprocess.PIPE,
        stdout=write_end,
        stderr=asyncio.subprocess.DEVNULL,
        env={**os.environ, **isolated_env()},
        start_new_session=True,
    )
    os.close(write_end)
    stdout = PipeLines(read_end)
    assert process.stdin is not None
    try:

        async def send(message: dict[str, Any]) -> None:
            assert process.stdin is not None
            stdout.validator.client_sent(message)
            process.stdin.write(orjson.dumps({"jsonrpc": "2.0", **message}) + b"\n")
            await process.stdin.drain()

        await send({"id": 1, "method": "initialize", "params": {"protocolVersion": 1, "clientCapabilities": {}}})
        await send({"id": 2, "method": "session/new", "params": {"cwd": "/tmp", "mcpServers": []}})
        [*_, created] = await stdout.until(2)
        session = created["result"]["sessionId"]
        # About 440 KB of chunks: more than the pipe and one write batch hold, less than that plus the outbox, so the
        # turn ends, and its response is queued, while the writer is stuck behind a client that reads nothing.
        chunks = 400
        script = [{"say": "y" * 1000, "repeat": chunks}]
        prompt = {"sessionId": session, "prompt": [{"type": "text", "text": "x"}], "_meta": {"scripted": script}}
        await send({"id": 3, "method": "session/prompt", "params": prompt})
        await asyncio.sleep(W_QUIET)  # nobody reads meanwhile: the server queues its whole turn behind a full pipe
        written = await stdout.until(3)
        assert written[-1]["result"] == {"stopReason": "end_turn"}
        process.stdin.close()
        later = await stdout.rest()
        code = await asyncio.wait_for(process.wait(), T_EXIT)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, 9)
        os.close(read_end)
    before = [m for m in written if m.get("method") == "session/update" and m["params"]["sessionId"] == session]
    after = [m for m in later if m.get("method") == "session/update" and m["params"]["sessionId"] == session]
    assert len([m for m in before if m["params"]["update"]["sessionUpdate"] == "agent_message_chunk"]) == chunks
    assert not [m for m in after if m["params"]["update"]["sessionUpdate"] == "agent_message_chunk"]
    assert stdout.validator.violations == []
    assert code == 0


# --- 8. message ids are unique across turns, sessions and processes, and replayed unchanged ---


def agent_chunks(server: RawClient, session: str, since: int = 0) -> list[tuple[str, str, str]]:
    """(kind, messageId, text) of the agent's message and thought chunks for `session`, from message `since` on."""
    return [
        (u["sessionUpdate"], u["messageId"], u["content"]["text"])
        for m in server.received[since:]
        if m.get("method") == "session/update"
        and m["params"]["sessionId"] == session
        and (u := m["params"]["update"])["sessionUpdate"] in ("agent_message_chunk", "agent_thought_chunk")
    ]


async def test_message_ids_are_unique_across_turns_and_sessions_and_replayed_unchanged(
    start_server: StartServer, tmp_path: Path
) -> None:
    env = {"ACP_SERVER_STATE_DIR": str(tmp_path)}
    first = await start_server(*DEFAULT_ARGS, env=env)
    await first.initialize()
    sessions = [await first.new_session(), await first.new_session()]
    # Two model replies per turn (the tool call ends the first), each with its thought and its message.
    script: list[dict[str, Any]] = [
        {"think": "t1"},
        {"say": "s1"},
        {"tool": "test_sleep", "args": {"s": 0}},
        {"think": "t2"},
        {"say": "s2"},
    ]
    turn_ids: list[set[str]] = []
    for _ in range(2):
        for session in sessions:
            count = len(first.received)
            assert (await first.response(await first.prompt(session, script)))["result"] == {"stopReason": "end_turn"}
            seen = agent_chunks(first, session, count)
            assert [text for _, _, text in seen] == ["t1", "s1", "t2", "s2"]
            ids = {message_id for _, message_id, _ in seen}
            assert len(ids) == 4, seen  # each reply's message and thought have ids of their own
            turn_ids.append(ids)
    originals = {session: agent_chunks(first, session) for session in sessions}
    await first.close()
    second = await start_server(*DEFAULT_ARGS, env=env)
    await second.initialize()
    for session in sessions:
        count = len(second.received)
        loaded = await second.call("session/load", {"sessionId": session, "cwd": "/tmp", "mcpServers": []})
        assert "result" in loaded, loaded
        assert agent_chunks(second, session, count) == originals[session]  # replayed with the ids first sent
    count = len(second.received)
    assert (await second.response(await second.prompt(sessions[0], script)))["result"] == {"stopReason": "end_turn"}
    turn_ids.append({message_id for _, message_id, _ in agent_chunks(second, sessions[0], count)})
    every = [message_id for ids in turn_ids for message_id in ids]
    assert len(every) == len(set(every)), turn_ids  # no id shared by two turns, two sessions or two processes


# --- issue 21 ---
# Bugs a second audit found the suite let through (issue 21); each is kept as a patch in tests/mutations/.

# Returns well after its turn was abandoned at the cleanup deadline (GRACE) and answered.
LATE_SECONDS = T_ESC + 1.0


async def open_session(server: RawClient, protocol: int) -> str:
    if protocol == 2:
        await server.initialize_v2()
        return await server.new_session_v2()
    await server.initialize()
    return await server.new_session()


async def turn_end(server: RawClient, protocol: int, session: str, prompt: Any, *, nth: int, timeout: float) -> Any:
    """What ends the turn: its `session/prompt` response (v1), the session's `nth` idle (v2)."""
    if protocol == 2:
        return await server.idle(session, nth, timeout=timeout)
    return await server.response(prompt, timeout=timeout)


def stop_reason(protocol: int, end: dict[str, Any]) -> str:
    reason: str = end["params"]["update"]["stopReason"] if protocol == 2 else end["result"]["stopReason"]
    return reason


def text_prompt(session: str, text: str) -> dict[str, Any]:
    return {"sessionId": session, "prompt": [{"type": "text", "text": text}]}


# --- 9. I6: what work abandoned inside a turn (not a cancellable call) does after the turn ended never goes out ---


@pytest.mark.parametrize("then", ["", "permission"], ids=["late_result", "late_permission"])
@pytest.mark.parametrize("protocol", [1, 2], ids=["v1", "v2"])
async def test_work_abandoned_inside_a_turn_sends_nothing_after_the_turn_ended_and_its_result_stays_out_of_history(
    start_server: StartServer, protocol: int, then: str
) -> None:
    """The tool ignores the cancel and is not a cancellable call, so no fence of its own stands in its way: only the
    turn's. It is abandoned at the deadline with its turn and, after the `cancelled` response (v1) or `idle` (v2),
    reports progress, then returns (its result) or asks a permission. Nothing of it reaches the client (no update,
    no request, no model step: only the probes saying it ended) and the next turn's model request holds no trace of
    it: the abandoned call's one result is the cancel's note."""
    args = {"s": LATE_SECONDS, "progress": "zombie progress", "then": then}
    with FakeOpenAI() as model:
        model.script(tool_call_reply(("call_late", "test_stubborn_inline", [orjson.dumps(args).decode()])))
        model.set_default(text_reply("fresh"))
        server = await start_server(
            "--model", "openai:fake", "--base-url", model.base_url, "--test-mode", "--cleanup-deadline", str(GRACE),
            env={"OPENAI_API_KEY": "sk-test"},
        )  # fmt: skip
        a = await open_session(server, protocol)
        # Named first, so no background title request is still talking to the fake model when the test ends.
        titled = await server.request("session/prompt", text_prompt(a, "/title Proof"))
        assert stop_reason(protocol, await turn_end(server, protocol, a, titled, nth=1, timeout=T_WAIT)) == "end_turn"
        first = await server.request("session/prompt", text_prompt(a, "one"))
        # Only a wait, never asserted: the first model call loads the HTTP client, seconds on a loaded machine.
        await server.probe("tool_started", sessionId=a, toolCallId="call_late", timeout=4 * T_EXIT)
        await server.cancel(a)
        ended = await turn_end(server, protocol, a, first, nth=2, timeout=T_ESC + 1)
        assert stop_reason(protocol, ended) == "cancelled"
        abandoned = await server.probe("step_exited", sessionId=a, reason="abandoned")
        assert position(server, abandoned) < position(server, ended)
        exited = await server.probe("tool_exited", sessionId=a, toolCallId="call_late", timeout=LATE_SECONDS + T_WAIT)
        assert exited["params"]["reason"] == "completed"  # it returned its result, late (its late ask told "no")
        if then:
            await server.probe("late_action", sessionId=a, toolCallId="call_late")  # it has asked

        def of_the_late_work(message: dict[str, Any]) -> bool:
            """Whatever the server sent after the turn ended, but the probes saying how the late call ended."""
            params = message.get("params", {})
            said_how_it_ended = message.get("method") == "_scripted/probe" and params.get("toolCallId") == "call_late"
            return message in after(server, ended) and not said_how_it_ended

        await server.quiet(W_QUIET, of_the_late_work)
        second = await server.request("session/prompt", text_prompt(a, "two"))
        assert stop_reason(protocol, await turn_end(server, protocol, a, second, nth=3, timeout=T_WAIT)) == "end_turn"
        [asked] = [
            r.body["messages"]
            for r in model.requests
            if r.body.get("tools") and r.body["messages"][-1] == {"role": "user", "content": "two"}
        ]
    assert not [m for m in asked if "ignored cancellation" in str(m.get("content"))], asked
    results = [m for m in asked if m["role"] == "tool" and m.get("tool_call_id") == "call_late"]
    assert len(results) == 1 and "cancelled" in str(results[0]["content"]), asked
    assert not [u for u in server.updates(a) if "zombie" in str(u.get("content"))]
    assert not [m for m in server.received if m.get("method") == "session/request_permission"]


# --- 10. a client's -32800 answer to a permission request the server withdrew is ignored: nothing breaks ---


@pytest.mark.parametrize(
    ("protocol", "cancel"),
    [(1, "session/cancel"), (1, "$/cancel_request"), (2, "session/cancel")],
    ids=["v1-session_cancel", "v1-cancel_request", "v2-session_cancel"],
)
async def test_an_error_answer_to_a_withdrawn_permission_request_writes_nothing_and_the_session_goes_on(
    start_server: StartServer, tmp_path: Path, protocol: int, cancel: str
) -> None:
    """write_file asks permission; a cancel (of the session, or `$/cancel_request` of the prompt on v1) withdraws the
    question with `$/cancel_request`; then the client answers the withdrawn id with a -32800 error, as the SDK
    clients do. That answer is a stray for the server: nothing is written, the next prompt ends `end_turn`, and the
    server exits 0 at stdin EOF."""
    server = await start_server("--model", "scripted", "--test-mode", "--cleanup-deadline", str(LONG_GRACE))
    if protocol == 2:
        await server.initialize_v2()
        a = await server.new_session_v2(str(tmp_path))
    else:
        await server.initialize()
        a = await server.new_session(str(tmp_path))
    prompt = await server.prompt(
        a, [{"tool": "write_file", "args": {"path": "out.txt", "content": "x"}}, {"say": "no"}]
    )
    asked = await server.wait_for(lambda m: m.get("method") == "session/request_permission" and "id" in m)
    if cancel == "session/cancel":
        await server.cancel(a)
    else:
        await server.notify("$/cancel_request", {"requestId": prompt})
    ended = await turn_end(server, protocol, a, prompt, nth=1, timeout=T_ESC)
    assert stop_reason(protocol, ended) == "cancelled"
    [retraction] = [m for m in server.received if m.get("method") == "$/cancel_request"]
    assert retraction["params"] == {"requestId": asked["id"]}
    assert position(server, retraction) < position(server, ended)
    await server.send({"id": asked["id"], "error": {"code": -32800, "message": "Request cancelled"}})
    after_prompt = await server.prompt(a, [{"say": "after"}])
    assert stop_reason(protocol, await turn_end(server, protocol, a, after_prompt, nth=2, timeout=T_WAIT)) == "end_turn"
    assert server.texts(a) == ["after"]
    assert not (tmp_path / "out.txt").exists()
    code, _ = await server.close()
    assert code == 0, server.stderr_text
