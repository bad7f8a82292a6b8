"""What the server acknowledged survives a kill -9 right after the acknowledgement.

Streamed chunks may wait for the store's batching window (store.py), but a session's metadata (its creation, its
mode, its config options, its deletion) is committed before its response: an editor that saw `session/new` answered
and then lost the server must be able to load that session. Real processes, a real SIGKILL, a real SQLite file; several
trials, because a kill can land after a flush by luck. The turn's promise is kept on PostgreSQL too (`store_url`).

A turn, likewise, is committed before its response (v1) or its `idle` (v2), whether it ended or was cancelled
(sessions/turn.py::execute_prompt). Those tests leave nothing to luck: they hold the store's write lock from outside,
as another process's long transaction would, while the turn ends, see that nothing answers it while its commit
waits, then let go and kill -9 the server the moment the answer arrives.
"""

from __future__ import annotations

import os
import resource
import signal
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import StartServer
from tests.support.harness import DEFAULT_ARGS, W_QUIET, RawClient
from tests.support.stores import StoreAt, once_free

TRIALS = 8


async def start(start_server: StartServer, state: Path, config: Path) -> RawClient:
    env = {"ACP_SERVER_STATE_DIR": str(state), "ACP_SERVER_CONFIG": str(config)}
    server = await start_server("--model", "scripted", "--test-mode", env=env)
    await server.initialize()
    return server


async def ok(client: RawClient, method: str, params: dict[str, Any]) -> dict[str, Any]:
    response = await client.call(method, params)
    assert "result" in response, response
    result: dict[str, Any] = response["result"]
    return result


def current(options: list[dict[str, Any]]) -> dict[str, Any]:
    return {option["id"]: option["currentValue"] for option in options}


async def kill_9(client: RawClient) -> None:
    os.killpg(client.process.pid, signal.SIGKILL)
    await client.process.wait()


@pytest.mark.timeout(120)
async def test_session_metadata_answered_just_before_a_kill_9_is_all_there_after_restart(
    start_server: StartServer, tmp_path: Path
) -> None:
    config = tmp_path / "config.toml"
    config.write_text('models = ["echo"]\n')
    state = tmp_path / "state"
    state.mkdir()
    cwd = tmp_path / "project"
    cwd.mkdir()
    new_session = {"cwd": str(cwd), "mcpServers": []}
    lost: list[str] = []
    for trial in range(TRIALS):
        first = await start(start_server, state, config)
        deleted = (await ok(first, "session/new", new_session))["sessionId"]
        assert await ok(first, "session/delete", {"sessionId": deleted}) == {}
        closed = (await ok(first, "session/new", new_session))["sessionId"]
        assert await ok(first, "session/close", {"sessionId": closed}) == {}
        kept = (await ok(first, "session/new", new_session))["sessionId"]
        assert await ok(first, "session/set_mode", {"sessionId": kept, "modeId": "read_only"}) == {}
        for config_id, value in (("model", "echo"), ("prompt_policy", "queue")):
            params = {"sessionId": kept, "configId": config_id, "value": value}
            assert current((await ok(first, "session/set_config_option", params))["configOptions"])[config_id] == value
        fresh = (await ok(first, "session/new", new_session))["sessionId"]
        await kill_9(first)  # at once: well inside the store's 50 ms batching window

        second = await start(start_server, state, config)
        listed = {s["sessionId"] for s in (await ok(second, "session/list", {"cwd": str(cwd)}))["sessions"]}
        load = {"cwd": str(cwd), "mcpServers": []}
        if kept not in listed:
            lost.append(f"trial {trial}: the session answered by session/new is not listed")
        else:
            loaded = await ok(second, "session/load", {"sessionId": kept, **load})
            if loaded["modes"]["currentModeId"] != "read_only":
                lost.append(f"trial {trial}: mode {loaded['modes']['currentModeId']!r} after set_mode read_only")
            values = current(loaded["configOptions"])
            if (values["model"], values["prompt_policy"]) != ("echo", "queue"):
                lost.append(f"trial {trial}: config options {values} after setting model echo, prompt_policy queue")
        if fresh not in listed:
            lost.append(f"trial {trial}: the session answered by the last session/new is not listed")
        if closed not in listed:  # closing frees the session here; it stays stored, to be loaded again
            lost.append(f"trial {trial}: the closed session is not listed")
        if deleted in listed:
            lost.append(f"trial {trial}: the deleted session is listed")
        gone = await second.call("session/load", {"sessionId": deleted, **load})
        if gone.get("error", {}).get("code") != -32002:
            lost.append(f"trial {trial}: the deleted session loads: {gone}")
        await kill_9(second)
    assert not lost, "\n".join(lost)


# How long a turn's last commit is held up while the test watches that nothing answers the turn. SQLite's busy
# timeout (5 s, store/sqlite_file.py) runs from when that commit starts waiting, once the turn has ended; past it the
# commit fails (retried by the next flush) and the answer goes out without it, by design: another process's lock is
# no reason to leave the editor without an answer. So the window is W_QUIET, capped well below the busy timeout
# however big ACP_TEST_TIME_SCALE is; an answer that does not wait for the commit is written at once, well inside it.
COMMIT_HOLD = min(W_QUIET, 2.5)


@dataclass(frozen=True)
class Outcome:
    """How a test's turn ends: its script, what the client sends once the turn waits at its gate, the step whose exit
    says the turn's work is over (its last commit comes next), and the text a replay must show."""

    script: list[dict[str, Any]]
    action: str  # "release" (the gate opens) or "cancel"
    last_step: int
    exit_reason: str
    replayed: list[str]


OUTCOMES = {
    "end_turn": Outcome(
        [{"say": "before-the-lock "}, {"gate": "g"}, {"say": "while-the-lock-is-held"}],
        "release",
        2,
        "completed",
        ["before-the-lock ", "while-the-lock-is-held"],
    ),
    "cancelled": Outcome(
        [{"say": "before-the-lock "}, {"gate": "g"}, {"say": "never"}],
        "cancel",
        1,
        "cancelled",
        ["before-the-lock ", "[cancelled]"],
    ),
}


async def end_the_turn_with_its_commit_held(server: RawClient, store: StoreAt, session: str, outcome: str) -> None:
    """At the gate: take the store's write lock (as another acp-server's commit, or a `sessions prune`, would hold
    it; on PostgreSQL its tables), end the turn (its gate opened, or a cancel), and wait until its work is over; then
    the turn's last commit waits on the lock, and the lock is held COMMIT_HOLD more."""
    ending = OUTCOMES[outcome]
    await server.probe("gate_reached", sessionId=session, gate="g")
    with store.write_lock():
        if ending.action == "release":
            await server.release(session, "g")
        else:
            await server.cancel(session)
        await server.probe("step_exited", sessionId=session, step=ending.last_step, reason=ending.exit_reason)
        await server.quiet(COMMIT_HOLD, lambda m: answers_the_turn(m, session))


def answers_the_turn(message: dict[str, Any], session: str) -> bool:
    """The turn's answer: a `session/prompt` response (v1; the only response the test waits for then) or the
    session's `idle` (v2)."""
    if "method" not in message:
        return "id" in message and isinstance(message.get("result"), dict) and "stopReason" in message["result"]
    update = message.get("params", {}).get("update", {})
    return bool(
        message["method"] == "session/update"
        and message["params"].get("sessionId") == session
        and update.get("sessionUpdate") == "state_update"
        and update.get("state") == "idle"
    )


async def kill_9_at_once(client: RawClient) -> None:
    """SIGKILL now, then read what the server wrote before it died (the wire log stays complete for the checks)."""
    await kill_9(client)
    await client.read_to_end()


@pytest.mark.timeout(60)
@pytest.mark.parametrize("outcome", list(OUTCOMES))
async def test_a_turn_is_committed_before_its_response_and_a_kill_9_right_after_it_loses_nothing(
    start_server: StartServer, tmp_path: Path, outcome: str, store_url: str | None
) -> None:
    """v1: while the turn's last commit waits on a write lock another connection holds, no response is written;
    once the lock is let go, the response comes, a kill -9 follows at once, and after a restart `session/load`
    replays the whole turn: all its text, and for a cancelled turn the `[cancelled]` note (never `[interrupted]`,
    the note of a turn whose end was never committed)."""
    script, replayed_text = OUTCOMES[outcome].script, OUTCOMES[outcome].replayed
    store = StoreAt(tmp_path / "state", store_url)
    env = store.env()
    first = await start_server(*DEFAULT_ARGS, env=env)
    await first.initialize()
    session = await first.new_session()
    prompt = await first.prompt(session, script)
    await end_the_turn_with_its_commit_held(first, store, session, outcome)
    answered = await first.response(prompt)
    await kill_9_at_once(first)
    assert answered["result"] == {"stopReason": outcome}

    second = await start_server(*DEFAULT_ARGS, env=env)
    await second.initialize()
    loaded = await once_free(second, "session/load", {"sessionId": session, "cwd": "/tmp", "mcpServers": []})
    assert "result" in loaded, loaded
    assert second.texts(session) == replayed_text
    assert session in store.sessions()  # in the store the test chose (a PostgreSQL URL was not ignored)
    closing = second.updates(session, "agent_message_chunk")[-1]
    assert closing.get("_meta") == ({"acpServer": {"turnStatus": "cancelled"}} if outcome == "cancelled" else None)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("outcome", list(OUTCOMES))
async def test_a_v2_turn_is_committed_before_its_idle_and_a_kill_9_right_after_it_loses_nothing(
    start_server: StartServer, tmp_path: Path, outcome: str, store_url: str | None
) -> None:
    """v2: the same with the `idle` as the turn's answer (the prompt itself was answered when it was inserted), and
    `session/resume` with its whole replay after the restart."""
    script, replayed_text = OUTCOMES[outcome].script, OUTCOMES[outcome].replayed
    store = StoreAt(tmp_path / "state", store_url)
    env = store.env()
    first = await start_server(*DEFAULT_ARGS, env=env)
    await first.initialize_v2()
    session = await first.new_session_v2()
    assert "result" in await first.response(await first.prompt(session, script))
    await end_the_turn_with_its_commit_held(first, store, session, outcome)
    idle = await first.idle(session)
    await kill_9_at_once(first)
    assert idle["params"]["update"]["stopReason"] == outcome

    second = await start_server(*DEFAULT_ARGS, env=env)
    await second.initialize_v2()
    resume = {"sessionId": session, "cwd": "/tmp", "replayFrom": {"type": "start"}}
    resumed = await once_free(second, "session/resume", resume)
    assert "result" in resumed, resumed
    assert session in store.sessions()
    said = second.updates(session, "agent_message")  # a replay joins one message's chunks
    assert "".join(block["text"] for u in said for block in u["content"]) == "".join(replayed_text)
    assert said[-1].get("_meta") == ({"acpServer": {"turnStatus": "cancelled"}} if outcome == "cancelled" else None)


def limit_file_size(client: RawClient, size: int | None) -> None:
    """RLIMIT_FSIZE of the running server: no file of it grows past `size` bytes (None: no limit again). A write past
    it fails with EFBIG, as on a full disk (Python ignores the SIGXFSZ it also brings). The soft limit only, so
    lifting it again needs no privilege."""
    _, hard = resource.prlimit(client.process.pid, resource.RLIMIT_FSIZE)
    resource.prlimit(client.process.pid, resource.RLIMIT_FSIZE, (hard if size is None else size, hard))


async def failed(client: RawClient, method: str, params: dict[str, Any]) -> dict[str, Any]:
    response = await client.call(method, params)
    assert "error" in response, f"{method} answered success although nothing can be saved: {response}"
    error: dict[str, Any] = response["error"]
    assert error["code"] == -32603, response
    assert "not saved" in error["message"], response
    return error


@pytest.mark.timeout(60)
async def test_a_change_the_store_cannot_commit_is_answered_an_error_and_never_saved_later(
    start_server: StartServer, tmp_path: Path
) -> None:
    config = tmp_path / "config.toml"
    config.write_text('models = ["echo", "scripted"]\n')
    state = tmp_path / "state"
    state.mkdir()
    cwd = tmp_path / "project"
    cwd.mkdir()
    new_session = {"cwd": str(cwd), "mcpServers": []}
    env = {"ACP_SERVER_STATE_DIR": str(state), "ACP_SERVER_CONFIG": str(config), "ACP_SERVER_LOG_FILE": "off"}
    first = await start_server("--model", "scripted", "--test-mode", env=env)
    await first.initialize()
    kept = (await ok(first, "session/new", new_session))["sessionId"]
    assert await ok(first, "session/set_mode", {"sessionId": kept, "modeId": "read_only"}) == {}
    policy = {"sessionId": kept, "configId": "prompt_policy", "value": "queue"}
    assert current((await ok(first, "session/set_config_option", policy))["configOptions"])["prompt_policy"] == "queue"
    doomed = (await ok(first, "session/new", new_session))["sessionId"]

    limit_file_size(first, 0)  # from now on every commit fails, as on a full disk
    await failed(first, "session/new", new_session)
    await failed(first, "session/set_mode", {"sessionId": kept, "modeId": "bypass"})
    await failed(first, "session/set_config_option", {"sessionId": kept, "configId": "mode", "value": "bypass"})
    await failed(first, "session/set_config_option", {**policy, "value": "interrupt"})
    await failed(first, "session/set_config_option", {"sessionId": kept, "configId": "model", "value": "echo"})
    await failed(first, "session/delete", {"sessionId": doomed})
    # A turn whose end cannot be committed keeps its outcome (it ran, the client saw it) but says it was not saved;
    # the store keeps it for its next flush.
    turn = await first.call("session/prompt", first.prompt_message(kept, [{"say": "unsaved words"}])["params"])
    assert turn.get("result") == {"stopReason": "end_turn", "_meta": {"acpServer": {"saved": False}}}, turn
    # A change answered an error did not happen here either: the session runs as it was.
    same = {"sessionId": kept, "configId": "mode", "value": "read_only"}  # no change: nothing to commit
    values = current((await ok(first, "session/set_config_option", same))["configOptions"])
    assert (values["mode"], values["prompt_policy"], values["model"]) == ("read_only", "queue", "scripted")

    limit_file_size(first, None)  # space again: what the store kept for its next flush is committed now
    later = (await ok(first, "session/new", new_session))["sessionId"]
    await kill_9(first)

    second = await start_server("--model", "scripted", "--test-mode", env=env)
    await second.initialize()
    listed = {s["sessionId"] for s in (await ok(second, "session/list", {"cwd": str(cwd)}))["sessions"]}
    # Everything answered success is there; the session whose session/new was an error was never stored, and the
    # deletion answered an error did not happen later either.
    assert listed == {kept, doomed, later}
    loaded = await ok(second, "session/load", {"sessionId": kept, **new_session})
    assert loaded["modes"]["currentModeId"] == "read_only"
    values = current(loaded["configOptions"])
    assert (values["mode"], values["prompt_policy"], values["model"]) == ("read_only", "queue", "scripted")
    assert "unsaved words" in second.texts(kept), "the turn kept for the next flush is committed once there is space"


@pytest.mark.timeout(60)
async def test_on_v2_a_turn_whose_end_cannot_be_committed_says_so_on_its_idle(
    start_server: StartServer, tmp_path: Path
) -> None:
    env = {"ACP_SERVER_STATE_DIR": str(tmp_path), "ACP_SERVER_LOG_FILE": "off"}
    server = await start_server("--model", "scripted", "--test-mode", env=env)
    await server.initialize_v2()
    saved = await server.new_session_v2()
    await server.response(await server.prompt(saved, [{"say": "saved"}]))
    assert "_meta" not in (await server.idle(saved))["params"]["update"]
    limit_file_size(server, 0)
    await failed(server, "session/new", {"cwd": "/tmp"})
    await server.response(await server.prompt(saved, [{"say": "not saved"}]))
    idle = (await server.idle(saved, nth=2))["params"]["update"]
    assert (idle["stopReason"], idle.get("_meta")) == ("end_turn", {"acpServer": {"saved": False}}), idle


@pytest.mark.timeout(60)
async def test_a_v2_prompt_is_answered_only_once_its_user_message_is_committed_and_a_kill_9_right_after_keeps_it(
    start_server: StartServer, tmp_path: Path, store_url: str | None
) -> None:
    """v2 answers `session/prompt` with the `messageId` it gave the user's message, at insertion, long before the
    turn ends: that answer acknowledges the message, so it waits for the message's commit. While another connection
    holds the store's write lock nothing answers the prompt; once it lets go the answer comes, a kill -9 follows at
    once, and after a restart `session/resume` replays the message under that id (the turn, cut short, closed by
    the interrupted note)."""
    store = StoreAt(tmp_path / "state", store_url)
    first = await start_server(*DEFAULT_ARGS, env=store.env())
    await first.initialize_v2()
    session = await first.new_session_v2()
    with store.write_lock():
        request = await first.prompt(session, [{"say": "never"}, {"gate": "g"}])
        await first.quiet(COMMIT_HOLD, lambda m: m.get("id") == request and "method" not in m)
    answered = await first.response(request)
    await kill_9_at_once(first)
    message_id = answered["result"]["messageId"]

    second = await start_server(*DEFAULT_ARGS, env=store.env())
    await second.initialize_v2()
    resumed = await once_free(
        second, "session/resume", {"sessionId": session, "cwd": "/tmp", "replayFrom": {"type": "start"}}
    )
    assert "result" in resumed, resumed
    assert session in store.sessions()
    assert [u["messageId"] for u in second.updates(session, "user_message")] == [message_id]
