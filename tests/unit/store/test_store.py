"""The session store (acp_server/store/) on real SQLite files: what is written comes back exactly, what is buffered
is committed in one transaction by a flush, a kill -9 loses at most the last 100 ms, processes sharing a store never
interrupt each other's live turns, a corrupt file is left byte for byte as it was, and replay closes cancelled and
interrupted turns as docs/interrupts.md decision 6 says, and a store written before the turn records is upgraded.
Child processes run tests/support/store_writer.py; tests/unit/protocol/test_replay.py renders the records as v1."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import sqlite3
import subprocess
import sys
import threading
import time
import zlib
from collections.abc import AsyncIterator, Iterator, Mapping
from pathlib import Path
from typing import Any

import anyio
import anyio.lowlevel
import anyio.to_thread
import orjson
import pytest

from acp_server.errors import StoreUnavailable
from acp_server.runtime.model import DiffOutput, Media, Message, PlanEntry, TerminalOutput, TextOutput, ToolCall
from acp_server.store import (
    STORE_FILENAME,
    AgentText,
    AgentThought,
    ContextUsage,
    LoadedSession,
    PlanSet,
    SessionStore,
    TerminalEnded,
    ToolCallChanged,
    ToolCallOpened,
    ToolCallTerminal,
    TurnClosed,
    TurnEntry,
    UserChunk,
    default_state_dir,
    message_from_json,
    message_to_json,
    replay_entries,
)
from acp_server.store.sqlite_file import SCHEMA_VERSION
from acp_server.store.turn_records import decode_entry, encode_entry
from tests.conftest import STORE_BACKENDS
from tests.support.harness import scaled
from tests.support.postgres import PostgresServer, count_rows_at

pytestmark = pytest.mark.timeout(60)

ROOT = Path(__file__).resolve().parents[3]
PROMPT = [{"type": "text", "text": "hello"}, {"type": "resource_link", "uri": "file:///a.py", "name": "a.py"}]


def text_chunk(text: str, message_id: str = "msg_a") -> AgentText:
    return AgentText(message_id, text)


def raw(db: Path) -> sqlite3.Connection:
    """A second connection, as another process would see the file."""
    return sqlite3.connect(db, isolation_level=None)


def count_rows(db: Path | str, sql: str, *params: Any) -> int:
    """A count read by another connection, as another process would see the store (SQLite file or PostgreSQL URL)."""
    if isinstance(db, str):
        return count_rows_at(db, sql, *params)
    conn = raw(db)
    try:
        return int(conn.execute(sql, params).fetchone()[0])
    finally:
        conn.close()


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "state" / STORE_FILENAME


@pytest.fixture
def location(db: Path, request: pytest.FixtureRequest) -> Iterator[Path | str]:
    """Where the test's store is: the SQLite file, or (parametrized `postgres` by `on_both_backends`) the URL of a new
    database of its own on the tests' PostgreSQL server (tests/conftest.py)."""
    if getattr(request, "param", "sqlite") == "sqlite":
        yield db
        return
    server: PostgresServer = request.getfixturevalue("postgres")
    url = server.database()
    try:
        yield url
    finally:
        server.drop(url)


async def open_at(location: Path | str) -> SessionStore:
    return SessionStore.open(location) if isinstance(location, Path) else await SessionStore.connect(location)


# The tests of what the store promises whatever its backend: once on SQLite, once on PostgreSQL.
on_both_backends = pytest.mark.parametrize("location", STORE_BACKENDS, indirect=True)


@pytest.fixture
async def store(location: Path | str) -> AsyncIterator[SessionStore]:
    opened = await open_at(location)
    yield opened
    await opened.aclose()


def meta_of(entry: TurnEntry) -> dict[str, Any]:
    assert isinstance(entry, AgentText) and entry.meta is not None
    return entry.meta


async def loaded(store: SessionStore, session_id: str) -> LoadedSession:
    result = await store.load(session_id)
    assert result is not None
    return result


# --- round trip ---


def test_messages_round_trip_through_json_with_tool_calls() -> None:
    messages = [
        Message("user", "fix it"),
        Message("assistant", "", (ToolCall("c1", "read_file", {"path": "a.py", "nested": {"n": [1, 2]}}),)),
        Message("tool", "contents", tool_call_id="c1"),
        Message("assistant", "done"),
    ]
    encoded = orjson.loads(orjson.dumps([message_to_json(m) for m in messages]))
    assert [message_from_json(m) for m in encoded] == messages


def test_messages_with_images_round_trip_and_a_history_written_before_images_still_reads() -> None:
    messages = [
        Message("user", "look", media=(Media("image", "image/png", "iVBORw0KGgo="),)),
        Message("tool", "shot", tool_call_id="c1", media=(Media("audio", "audio/wav", "UklGRg=="),)),
    ]
    encoded = orjson.loads(orjson.dumps([message_to_json(m) for m in messages]))
    assert [message_from_json(m) for m in encoded] == messages
    assert message_from_json({"role": "user", "content": "old"}) == Message("user", "old")
    assert "media" not in message_to_json(Message("user", "plain"))  # unchanged rows for text-only turns
    with pytest.raises(ValueError, match="not stored media"):
        message_from_json({"role": "user", "content": "x", "media": [["video", "video/mp4", "AA"]]})


@pytest.mark.parametrize("data", [{"role": "system", "content": "x"}, {"role": "user"}, {"content": "x"}])
def test_message_from_json_refuses_what_it_did_not_write(data: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match="not a stored message"):
        message_from_json(data)


@on_both_backends
async def test_a_session_round_trips_through_close_and_reopen(location: Path | str) -> None:
    store = await open_at(location)
    store.create_session(
        "s1",
        "/work/project",
        additional_directories=["/work/lib"],
        mcp_servers=[{"name": "fs", "command": "mcp-fs", "args": [], "env": []}],
        mode="accept_edits",
        config={"model": "echo"},
    )
    first = store.begin_turn("s1", PROMPT, "hello\n[file a.py]", message_id="msg_user1")
    sent: list[TurnEntry] = [
        text_chunk("Hel"),
        text_chunk("lo"),
        ToolCallOpened("c1", "Read a.py", "read", "pending"),
        ToolCallChanged("c1", "completed", ()),
        PlanSet((PlanEntry("x", "high", "pending"),)),
    ]
    for update in sent:
        first.append(update)
    first_messages = [
        Message("user", "hello\n[file a.py]"),
        Message("assistant", "Hello", (ToolCall("c1", "read_file", {"path": "a.py"}),)),
        Message("tool", "print(1)", tool_call_id="c1"),
        Message("assistant", "Done."),
    ]
    store.finish_turn(first, "completed", stop_reason="end_turn", messages=first_messages)
    second = store.begin_turn("s1", [{"type": "text", "text": "again"}], "again")
    second.append(text_chunk("Sure", "msg_b"))
    second_messages = [Message("user", "again"), Message("assistant", "Sure")]
    store.finish_turn(second, "completed", stop_reason="end_turn", messages=second_messages)
    await store.aclose()

    reopened = await open_at(location)
    try:
        result = await loaded(reopened, "s1")
    finally:
        await reopened.aclose()
    session = result.session
    assert (session.session_id, session.cwd, session.additional_directories) == ("s1", "/work/project", ("/work/lib",))
    assert session.mcp_servers == ({"name": "fs", "command": "mcp-fs", "args": [], "env": []},)
    assert (session.mode, session.config, session.title) == ("accept_edits", {"model": "echo"}, None)
    assert [t.status for t in result.turns] == ["completed", "completed"]
    assert [t.stop_reason for t in result.turns] == ["end_turn", "end_turn"]
    user_chunks = [UserChunk("msg_user1", b) for b in PROMPT]
    assert result.turns[0].entries == user_chunks + sent
    assert result.turns[1].entries[1:] == [text_chunk("Sure", "msg_b")]
    assert isinstance(result.turns[1].entries[0], UserChunk)
    assert result.history == first_messages + second_messages
    assert replay_entries(result) == result.turns[0].entries + result.turns[1].entries


@on_both_backends
async def test_an_unknown_session_loads_as_none(store: SessionStore) -> None:
    assert await store.load("nope") is None


@on_both_backends
async def test_titles_modes_config_and_touch_are_stored_and_move_updated_at(store: SessionStore) -> None:
    store.create_session("s", "/w")
    before = (await loaded(store, "s")).session.updated_at
    store.set_title("s", "Fix the parser")
    store.set_mode("s", "bypass")
    store.set_config("s", {"model": "openai:gpt", "thought_level": "high"})
    session = (await loaded(store, "s")).session
    assert (session.title, session.mode) == ("Fix the parser", "bypass")
    assert session.config == {"model": "openai:gpt", "thought_level": "high"}
    assert session.updated_at > before
    store.touch("s")
    assert (await loaded(store, "s")).session.updated_at > session.updated_at


@on_both_backends
async def test_a_turn_that_replaces_the_history_starts_it_afresh(store: SessionStore) -> None:
    store.create_session("s", "/w")
    for text, replaces in (("one", False), ("two", False), ("summary", True), ("four", False)):
        turn = store.begin_turn("s", [{"type": "text", "text": text}], text)
        store.finish_turn(
            turn, "completed", messages=[Message("user", text), Message("assistant", text)], replaces_history=replaces
        )
    history = (await loaded(store, "s")).history
    assert [m.content for m in history] == ["summary", "summary", "four", "four"]


@on_both_backends
async def test_appends_after_finish_are_not_stored(store: SessionStore) -> None:
    store.create_session("s", "/w")
    turn = store.begin_turn("s", [], "")
    turn.append(text_chunk("before"))
    store.finish_turn(turn, "cancelled", stop_reason="cancelled")
    turn.append(text_chunk("after the fence"))
    assert (await loaded(store, "s")).turns[0].entries == [text_chunk("before")]


@on_both_backends
async def test_pending_entries_are_exactly_what_was_appended_since_the_last_flush(store: SessionStore) -> None:
    """A resume replaying running work (ACP-V2.md §23 Q12) reads the committed records, then `pending_entries`: the
    records appended since a flush took them (a row sealed by size, then the open buffer), in order, none of those the
    flush committed; a flush leaves nothing pending."""
    store.create_session("s", "/w")
    turn = store.begin_turn("s", [], "")
    turn.append(text_chunk("committed"))
    assert await store.flush()
    assert store.pending_entries("s") == {}
    big = "x" * (1 << 20)  # seals a row of its own
    for record in (text_chunk(big), text_chunk("buffered")):
        turn.append(record)
    turn.append_text("msg_a", "fast")
    expected = [text_chunk(big), text_chunk("buffered"), AgentText("msg_a", "fast")]
    assert store.pending_entries("s") == {turn.turn_id: expected}
    assert store.pending_entries("other") == {}
    assert (await loaded(store, "s")).turns[0].entries == [text_chunk("committed"), *expected]
    assert store.pending_entries("s") == {}


@on_both_backends
async def test_a_record_that_is_not_json_is_skipped_and_the_rest_are_kept(store: SessionStore) -> None:
    store.create_session("s", "/w")
    turn = store.begin_turn("s", [], "")
    turn.append(text_chunk("a"))
    turn.append(ToolCallOpened("c1", "Run", raw_input={"x": object()}))
    turn.append_text("msg_a", object())  # type: ignore[arg-type]  # what a careless caller could pass
    turn.append(text_chunk("b"))
    assert await store.flush()
    assert (await loaded(store, "s")).turns[0].entries == [text_chunk("a"), text_chunk("b")]


async def test_a_long_burst_is_stored_in_bounded_compressed_rows_and_read_back_in_order(
    store: SessionStore, db: Path
) -> None:
    store.create_session("s", "/w")
    turn = store.begin_turn("s", [], "")
    for n in range(30_000):  # ~3 MB of JSON in one flush
        turn.append(AgentText("msg_a", f"{n} " + "-" * 64, {"n": n}))
    assert await store.flush()
    conn = raw(db)
    try:
        rows = conn.execute("SELECT n, length(data), substr(data, 1, 1) FROM updates ORDER BY seq").fetchall()
    finally:
        conn.close()
    assert len(rows) >= 3
    assert sum(r[0] for r in rows) == 30_000
    assert all(r[2] != b"[" and r[1] < 200_000 for r in rows)  # compressed, each a bounded share of the burst
    assert [meta_of(u)["n"] for u in (await loaded(store, "s")).turns[0].entries] == list(range(30_000))


def test_the_default_state_dir_is_the_users_state_directory_for_acp_server() -> None:
    import platformdirs

    assert default_state_dir() == Path(platformdirs.user_state_dir("acp-server", appauthor=False))
    assert "acp-server" in default_state_dir().parts


def test_a_new_store_file_is_private_to_its_user(db: Path) -> None:
    SessionStore.open(db).close()
    assert db.stat().st_mode & 0o077 == 0


# --- batching ---


async def test_updates_are_not_committed_until_a_flush(store: SessionStore, db: Path) -> None:
    store.create_session("s", "/w")
    turn = store.begin_turn("s", [], "")
    for n in range(10):
        turn.append(text_chunk(str(n)))
    assert store.buffered == 10
    assert count_rows(db, "SELECT count(*) FROM turns") == 0
    assert await store.flush()
    assert store.buffered == 0
    assert count_rows(db, "SELECT count(*) FROM turns WHERE status = 'running'") == 1
    assert count_rows(db, "SELECT sum(n) FROM updates") == 10


async def test_a_flush_commits_everything_buffered_in_one_transaction(store: SessionStore) -> None:
    statements: list[str] = []
    store._conn.set_trace_callback(statements.append)
    for index in range(5):
        store.create_session(f"s{index}", "/w")
        turn = store.begin_turn(f"s{index}", PROMPT, "hello")
        for n in range(100):
            turn.append(text_chunk(str(n)))
        store.finish_turn(turn, "completed", messages=[Message("user", "hello")])
        store.set_title(f"s{index}", "t")
    assert await store.flush()
    store._conn.set_trace_callback(None)
    assert [s for s in statements if s.startswith(("BEGIN", "COMMIT", "ROLLBACK"))] == ["BEGIN IMMEDIATE", "COMMIT"]
    for index in range(5):
        assert len((await loaded(store, f"s{index}")).turns[0].entries) == 102  # 2 prompt blocks + 100 chunks


async def test_a_flush_of_many_busy_turns_writes_their_rows_in_a_few_statements_in_order(
    store: SessionStore, db: Path
) -> None:
    """A thousand sessions streaming put a row for nearly each of them in every flush: those go in statements of many
    rows (each statement costs the worker a round trip for the GIL), in order, still without a deleted turn's."""
    turns = []
    for index in range(500):
        store.create_session(f"s{index}", "/w")
        turns.append(store.begin_turn(f"s{index}", [], ""))
    store.create_session("gone", "/w")
    gone = store.begin_turn("gone", [], "")
    assert await store.flush()
    store.delete("gone")
    for n in range(2):
        for index, turn in enumerate(turns):
            turn.append(text_chunk(f"{index}.{n}"))
        gone.append(text_chunk("late"))
        assert await store.flush()  # one row per turn per flush
    statements: list[str] = []
    store._conn.set_trace_callback(statements.append)
    for turn in turns:
        turn.append(text_chunk("last"))
    assert await store.flush()
    store._conn.set_trace_callback(None)
    assert len([s for s in statements if s.startswith("INSERT INTO updates")]) <= 3
    assert count_rows(db, "SELECT count(*) FROM updates WHERE turn_id = ?", gone.turn_id) == 0
    for index in (0, 199, 200, 499):
        entries = (await loaded(store, f"s{index}")).turns[0].entries
        assert entries == [text_chunk(f"{index}.0"), text_chunk(f"{index}.1"), text_chunk("last")]


async def test_a_flush_whose_commit_raises_leaves_the_queue_and_the_flush_behind_it_commits(
    store: SessionStore,
) -> None:
    """A flush that drives a commit and fails with what the commit does not turn into False (here its batch cannot
    be taken) must hand the driving on: every prompt response flushes, so a queue left without a driver would stop
    the server answering."""
    started, release = threading.Event(), threading.Event()
    commit = store._worker.commit
    first = True

    def gated(batch: Any) -> None:  # the first commit runs only when the test lets it
        nonlocal first
        if first:
            first = False
            started.set()
            release.wait(scaled(10))
        commit(batch)

    store._worker.commit = gated  # type: ignore[method-assign]
    store.create_session("s", "/w")
    turn = store.begin_turn("s", [], "")
    turn.append(text_chunk("a"))
    take = store._take
    failures = 0

    def take_failing_once(**options: Any) -> Any:
        nonlocal failures
        if failures == 0:
            failures += 1
            raise RuntimeError("the batch cannot be taken")
        return take(**options)

    outcomes: list[str] = []

    async def flush(name: str) -> None:
        turn.append(text_chunk(name))
        try:
            outcomes.append(f"{name}: {await store.flush()}")
        except RuntimeError:
            outcomes.append(f"{name}: raised")

    with anyio.fail_after(scaled(10)):
        async with anyio.create_task_group() as tg:
            tg.start_soon(store.flush)  # drives the first commit, held in the worker thread
            await anyio.to_thread.run_sync(started.wait)
            tg.start_soon(flush, "b")  # drives next: its commit cannot take its batch
            await anyio.sleep(0.05)
            tg.start_soon(flush, "c")  # behind it: must still be committed
            await anyio.sleep(0.05)
            store._take = take_failing_once  # type: ignore[method-assign]
            release.set()
    assert outcomes == ["b: raised", "c: True"]


async def test_flushes_called_while_a_commit_runs_share_the_next_commit_and_return_together_in_order(
    store: SessionStore,
) -> None:
    """Every prompt response flushes: the ones that come while a commit runs wait for it and then for one more
    commit between them, and are released together, in call order, not one event-loop iteration after another
    (with a thousand busy sessions that queue held responses for a second)."""
    started: list[threading.Event] = [threading.Event() for _ in range(3)]
    release: list[threading.Event] = [threading.Event() for _ in range(3)]
    commits: list[int] = []
    commit = store._worker.commit

    def gated(batch: Any) -> None:  # each of the first three commits runs only when the test lets it
        number = len(commits)
        if number == len(started):
            commit(batch)  # the store's final write, as it closes
            return
        commits.append(batch.update_count())
        started[number].set()
        release[number].wait(scaled(10))
        commit(batch)

    store._worker.commit = gated  # type: ignore[method-assign]
    store.create_session("s", "/w")
    turn = store.begin_turn("s", [], "")
    iterations = 0
    returned_at: list[int] = []
    returned: list[str] = []

    async def tick() -> None:
        nonlocal iterations
        while True:
            iterations += 1
            await anyio.lowlevel.checkpoint()

    async def flush_after(text: str) -> None:
        turn.append(text_chunk(text))
        assert await store.flush()
        returned_at.append(iterations)
        returned.append(text)

    async def until(condition: Any) -> None:
        with anyio.fail_after(scaled(10)):
            while not condition():  # noqa: ASYNC110 - a worker thread's progress and the store's queue: no event
                await anyio.sleep(0.001)

    async with anyio.create_task_group() as tg:
        tg.start_soon(tick)
        async with anyio.create_task_group() as flushes:
            flushes.start_soon(flush_after, "a")
            await until(started[0].is_set)
            for index in range(20):
                flushes.start_soon(flush_after, f"w{index}")
            await until(lambda: len(store._waits) == 21)  # "a" and the twenty waiting behind its commit
            release[0].set()
            await until(started[1].is_set)  # the first of the twenty commits for all of them
            for index in range(5):
                flushes.start_soon(flush_after, f"late{index}")
            await until(lambda: len(store._waits) == 25)
            release[1].set()
            release[2].set()
        tg.cancel_scope.cancel()
    assert commits == [1, 20, 5]
    waiters = returned_at[1:21]
    assert max(waiters) - min(waiters) <= 2, returned_at
    expected = ["a", *(f"w{index}" for index in range(20)), *(f"late{index}" for index in range(5))]
    assert returned == expected  # answered in the order they were called, as the lock's queue did
    texts = [e.text for e in (await loaded(store, "s")).turns[0].entries if isinstance(e, AgentText)]
    assert texts == expected


async def test_a_flush_blocked_by_another_writer_keeps_the_batch_and_the_next_commits_it_in_order(
    store: SessionStore, db: Path
) -> None:
    store._conn.execute("PRAGMA busy_timeout = 50")
    store.create_session("s", "/w")
    turn = store.begin_turn("s", [], "")
    turn.append(text_chunk("first"))
    other = raw(db)
    try:
        other.execute("BEGIN IMMEDIATE")  # another process holds the write lock past our busy timeout
        assert not await store.flush()
        turn.append(text_chunk("second"))
        assert count_rows(db, "SELECT count(*) FROM sessions") == 0  # the failed transaction left nothing
    finally:
        other.execute("ROLLBACK")
        other.close()
    assert await store.flush()
    assert (await loaded(store, "s")).turns[0].entries == [text_chunk("first"), text_chunk("second")]


async def test_a_change_whose_commit_failed_raises_and_no_later_flush_commits_it_while_the_rest_is_kept(
    store: SessionStore,
) -> None:
    """`commit_change`: a change whose commit fails (a full disk) raises, so its request is answered an error, and it
    is taken out of the batch kept for the next flush at once: a change called while the failing commit ran drives
    the next commit, which commits the rest of the failed batch (a turn's records) and its own change, not the
    failed one."""
    store.create_session("s", "/w")
    assert await store.flush()
    turn = store.begin_turn("s", [], "")
    turn.append(text_chunk("kept"))
    commit = store._worker.commit
    others_waiting = threading.Event()
    calls = 0

    def failing_once(batch: Any) -> None:
        nonlocal calls
        calls += 1
        if calls == 1:
            others_waiting.wait(scaled(10))
            raise sqlite3.OperationalError("database or disk is full")
        commit(batch)

    store._worker.commit = failing_once  # type: ignore[method-assign]
    outcomes: dict[str, str] = {}

    async def change(name: str, write: Any) -> None:
        try:
            await store.commit_change(write)
        except StoreUnavailable as exc:
            outcomes[name] = str(exc)
        else:
            outcomes[name] = "saved"

    async def until(condition: Any) -> None:
        with anyio.fail_after(scaled(10)):
            while not condition():  # noqa: ASYNC110 - a worker thread's progress and the store's queue: no event
                await anyio.sleep(0.001)

    async with anyio.create_task_group() as tg:
        tg.start_soon(change, "mode", lambda: store.set_mode("s", "bypass"))
        await until(lambda: calls == 1)
        tg.start_soon(change, "title", lambda: store.set_title("s", "named"))
        await until(lambda: len(store._waits) == 2)
        others_waiting.set()
    assert outcomes["title"] == "saved"
    assert "database or disk is full" in outcomes["mode"], outcomes
    record = await loaded(store, "s")
    assert (record.session.mode, record.session.title) == ("default", "named")
    assert record.turns[0].entries == [text_chunk("kept")]


async def test_the_commit_runs_off_the_event_loop(store: SessionStore, db: Path) -> None:
    store.create_session("s", "/w")
    ticks = 0
    other = raw(db)
    other.execute("BEGIN IMMEDIATE")  # the flush's commit waits (busy timeout) until this is released

    async def ticker() -> None:
        nonlocal ticks
        while True:
            await anyio.sleep(0.01)
            ticks += 1

    async def release_later() -> None:
        await anyio.sleep(0.3)
        other.execute("ROLLBACK")

    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(ticker)
            tg.start_soon(release_later)
            assert await store.flush()
            tg.cancel_scope.cancel()
    finally:
        other.close()
    assert ticks >= 10  # the loop kept running while the commit was blocked
    assert count_rows(db, "SELECT count(*) FROM sessions") == 1


@on_both_backends
async def test_a_flush_from_a_cancelled_scope_still_commits(store: SessionStore, location: Path | str) -> None:
    store.create_session("s", "/w")
    with anyio.CancelScope() as scope:
        scope.cancel()
        assert await store.flush()  # "before every prompt response", even after a cancel
    assert count_rows(location, "SELECT count(*) FROM sessions") == 1


# --- waits at shutdown (bound_waits) ---

BOUND = 0.1  # the shutdown bound these tests give the store's waits


async def timed(wait: Any) -> tuple[Any, float]:
    """What an awaitable gives, and how long it took."""
    started = anyio.current_time()
    result = await wait
    return result, anyio.current_time() - started


async def test_at_shutdown_a_commit_held_up_by_another_writer_ends_at_the_bound_and_the_next_job_waits_for_its_thread(
    store: SessionStore, db: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A flush whose commit waits for another process's write lock (SQLite's busy timeout: 5 s) when the connection
    closes ends at the bound counted from then, without its commit; the thread is left to commit later. A read then
    fails within its bound rather than run beside that thread (one warning for all of it), and once the lock is free
    the final write waits for the thread and commits after it: the abandoned commit's rows, the turn `interrupted`."""
    store.create_session("s", "/w")
    turn = store.begin_turn("s", [], "")
    turn.append(text_chunk("first"))
    other = raw(db)
    try:
        other.execute("BEGIN IMMEDIATE")
        outcome: list[tuple[bool, float]] = []

        async def flush() -> None:
            outcome.append(await timed(store.flush()))

        async with anyio.create_task_group() as tg:
            tg.start_soon(flush)
            await anyio.sleep(BOUND)  # the commit is waiting for the lock: unbounded until the connection closes
            assert not outcome
            store.bound_waits(BOUND)
        [(committed, took)] = outcome
        assert not committed
        assert 2 * BOUND * 0.9 <= took <= 2 * BOUND + scaled(0.5)  # the bound counts from `bound_waits`
        with pytest.raises(StoreUnavailable):
            await store.load("s")
        assert count_rows(db, "SELECT count(*) FROM sessions") == 0
        lost = [r for r in caplog.records if "not committed by then is lost" in r.getMessage()]
        assert len(lost) == 1 and lost[0].levelname == "WARNING", caplog.records
    finally:
        other.execute("ROLLBACK")
        other.close()
    await store.aclose()
    assert count_rows(db, "SELECT count(*) FROM updates") == 1
    assert count_rows(db, "SELECT count(*) FROM turns WHERE status = 'interrupted'") == 1
    assert count_rows(db, "SELECT count(*) FROM owners") == 0


async def test_at_shutdown_the_final_write_held_up_by_another_writer_ends_at_the_bound_with_a_warning(
    store: SessionStore, db: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """`aclose` is shielded (its thread cannot be stopped), so no bound outside it can cut it: its own does."""
    store.create_session("s", "/w")
    other = raw(db)
    try:
        other.execute("BEGIN IMMEDIATE")
        store.bound_waits(BOUND)
        with anyio.move_on_after(0):  # the drain's bound, already over: a shielded wait outlives it
            _, took = await timed(store.aclose())
        assert took <= BOUND + scaled(0.5)
        lost = [r for r in caplog.records if "not committed by then is lost" in r.getMessage()]
        assert len(lost) == 1 and lost[0].levelname == "WARNING", caplog.records
    finally:
        other.execute("ROLLBACK")
        other.close()
    assert store._job_done is not None and store._job_done.wait(scaled(10))  # the final write, on its own
    assert count_rows(db, "SELECT count(*) FROM owners") == 0


async def test_a_change_queued_behind_a_commit_when_the_final_write_fails_is_answered_an_error(
    store: SessionStore, db: Path
) -> None:
    """A change (`commit_change`) and a turn's end (`flush`) queued behind a commit in flight while the server exits:
    `aclose` takes their batch into the final write, and when that write fails they are answered with its failure
    (an error, `run.saved` False), never success for what was not committed."""
    store.create_session("s", "/w")
    commit = store._worker.commit
    committing = threading.Event()
    release = threading.Event()

    def held(batch: Any) -> None:
        committing.set()
        release.wait(scaled(10))
        commit(batch)

    def failing_finish(batch: Any) -> None:
        raise sqlite3.OperationalError("disk I/O error")

    store._worker.commit = held  # type: ignore[method-assign]
    store._worker.finish = failing_finish  # type: ignore[method-assign]
    outcomes: dict[str, object] = {}

    async def until(condition: Any) -> None:
        with anyio.fail_after(scaled(10)):
            while not condition():  # noqa: ASYNC110 - a worker thread's progress and the store's queue: no event
                await anyio.sleep(0.001)

    async def first_flush() -> None:
        outcomes["first"] = await store.flush()

    async def close() -> None:
        try:
            await store.aclose()
        except sqlite3.Error as exc:
            outcomes["close"] = str(exc)

    async def change() -> None:
        try:
            await store.commit_change(lambda: store.set_mode("s", "plan"))
        except StoreUnavailable as exc:
            outcomes["change"] = str(exc)
        else:
            outcomes["change"] = "saved"

    async def turn_end() -> None:
        outcomes["turn_end"] = await store.flush()

    async with anyio.create_task_group() as tg:
        tg.start_soon(first_flush)
        await until(committing.is_set)
        tg.start_soon(close)
        await until(lambda: store._async_lock().statistics().tasks_waiting == 1)  # the exit waits for the commit
        tg.start_soon(change)
        tg.start_soon(turn_end)
        await until(lambda: len(store._waits) == 3)
        release.set()
    assert outcomes["first"] is True
    assert outcomes["close"] == "disk I/O error"
    assert "disk I/O error" in str(outcomes["change"]), outcomes
    assert outcomes["turn_end"] is False
    conn = raw(db)
    try:
        assert conn.execute("SELECT mode FROM sessions WHERE id = 's'").fetchone() == ("default",)
    finally:
        conn.close()
    # Called after closing: nothing more is committed, so no flush says it was.
    assert await store.flush() is False


async def test_the_flusher_commits_within_its_interval(store: SessionStore, db: Path) -> None:
    store.create_session("s", "/w")
    turn = store.begin_turn("s", [], "")
    async with anyio.create_task_group() as tg:
        tg.start_soon(store.run_flusher)
        for n in range(3):
            turn.append(text_chunk(str(n)))
            # No explicit flush: the flusher alone commits it. Waited for, not slept for (the interval itself is
            # what bench/store.py and the kill -9 test measure); the bound is a scaled safety bound.
            deadline = anyio.current_time() + scaled(1.0)
            while count_rows(db, "SELECT coalesce(sum(n), 0) FROM updates") != n + 1:
                assert anyio.current_time() < deadline, f"update {n} was never committed by the flusher"
                await anyio.sleep(0.01)
        tg.cancel_scope.cancel()


# --- crashes and several processes ---


@contextlib.contextmanager
def child(*args: str) -> Iterator[subprocess.Popen[str]]:
    """A tests/support/store_writer.py child; killed at the end if still running, so a failing test cannot hang."""
    process = subprocess.Popen(
        [sys.executable, "-m", "tests.support.store_writer", *args], cwd=ROOT, stdout=subprocess.PIPE, text=True
    )
    try:
        yield process
    finally:
        if process.poll() is None:
            process.kill()
        process.wait()
        assert process.stdout is not None
        process.stdout.close()


def wait_ready(process: subprocess.Popen[str]) -> None:
    assert process.stdout is not None
    assert process.stdout.readline().strip() == "ready"


def kill(process: subprocess.Popen[str]) -> float:
    """SIGKILL the process; the wall-clock time just before the signal."""
    killed_at = time.time()
    process.send_signal(signal.SIGKILL)
    process.wait()
    return killed_at


async def test_kill_9_loses_at_most_the_last_100_ms_and_the_turn_becomes_interrupted(db: Path) -> None:
    with child("stream", str(db), "s") as writer:
        wait_ready(writer)
        await anyio.sleep(0.6)
        killed_at = kill(writer)
    store = SessionStore.open(db)
    try:
        result = await loaded(store, "s")
    finally:
        await store.aclose()
    turn = result.turns[0]
    assert turn.status == "interrupted"
    chunks = [u for u in turn.entries if isinstance(u, AgentText)]
    assert [meta_of(c)["seq"] for c in chunks] == list(range(len(chunks)))  # a prefix, nothing missing inside
    assert len(chunks) > 1000  # it really was streaming
    last_stored = meta_of(chunks[-1])["t"]
    assert last_stored >= killed_at - 0.1, f"lost {killed_at - last_stored:.3f} s before the kill"
    replayed = replay_entries(result)
    assert replayed[-1] == TurnClosed(turn.turn_id, "interrupted")
    assert replayed[-1].note == "[interrupted]"
    assert result.history[0] == Message("user", "go")
    assert result.history[1].content.endswith("[interrupted]")


async def test_a_live_owners_running_turn_is_never_interrupted_and_a_dead_owners_is(db: Path) -> None:
    with child("hold", str(db), "theirs") as writer:
        wait_ready(writer)
        store = SessionStore.open(db)  # open sweeps
        try:
            assert (await loaded(store, "theirs")).turns[0].status == "running"  # load sweeps too
            assert await store.sweep() == 0
            result = await loaded(store, "theirs")
            assert result.turns[0].status == "running"
            assert replay_entries(result) == result.turns[0].entries  # no closing chunk for a live turn
            assert result.history == []
            kill(writer)
            assert (await loaded(store, "theirs")).turns[0].status == "interrupted"
            assert count_rows(db, "SELECT count(*) FROM owners") == 1  # the dead owner's lease is gone; ours stays
        finally:
            await store.aclose()


async def test_twenty_sessions_writing_concurrently_lose_nothing(db: Path) -> None:
    store = SessionStore.open(db)

    async def write(session_id: str) -> None:
        store.create_session(session_id, "/w")
        turn = store.begin_turn(session_id, [{"type": "text", "text": session_id}], session_id)
        for seq in range(500):
            turn.append(AgentText("msg_a", f"{seq} ", {"seq": seq}))
            if seq % 7 == 0:
                await anyio.lowlevel.checkpoint()
        store.finish_turn(turn, "completed", messages=[Message("user", session_id)])
        assert await store.flush()

    async with anyio.create_task_group() as flusher:
        flusher.start_soon(store.run_flusher)
        async with anyio.create_task_group() as tg:
            for index in range(20):
                tg.start_soon(write, f"s{index}")
        flusher.cancel_scope.cancel()
    await store.aclose()
    reopened = SessionStore.open(db)
    try:
        for index in range(20):
            result = await loaded(reopened, f"s{index}")
            assert result.turns[0].status == "completed"
            assert [meta_of(u)["seq"] for u in result.turns[0].entries[1:]] == list(range(500))
            assert result.history == [Message("user", f"s{index}")]
    finally:
        await reopened.aclose()


async def test_two_processes_writing_twenty_sessions_at_once_lose_nothing(db: Path) -> None:
    with (
        child("sessions", str(db), "a", "10", "400") as a,
        child("sessions", str(db), "b", "10", "400") as b,
    ):
        assert a.wait(timeout=scaled(50)) == 0
        assert b.wait(timeout=scaled(50)) == 0
    store = SessionStore.open(db)
    try:
        for prefix in ("a", "b"):
            for index in range(10):
                result = await loaded(store, f"{prefix}-{index}")
                assert result.turns[0].status == "completed"
                assert [meta_of(u)["seq"] for u in result.turns[0].entries[1:]] == list(range(400))
        assert count_rows(db, "SELECT count(*) FROM owners") == 1  # both children released their leases
    finally:
        await store.aclose()


def test_processes_racing_to_create_a_new_store_all_open_it(db: Path) -> None:
    with contextlib.ExitStack() as stack:
        children = [stack.enter_context(child("open", str(db))) for _ in range(8)]
        assert [c.wait(timeout=scaled(50)) for c in children] == [0] * 8


def test_opening_waits_for_another_process_that_holds_a_new_store_locked(db: Path) -> None:
    db.parent.mkdir(parents=True)
    other = sqlite3.connect(db, isolation_level=None, check_same_thread=False)
    other.execute("BEGIN IMMEDIATE")  # a new file, still in rollback mode: the switch to WAL would fail at once
    release = threading.Timer(0.3, lambda: other.execute("ROLLBACK"))
    release.start()
    try:
        SessionStore.open(db).close()
    finally:
        release.join()
        other.close()


def add_foreign_owner(db: Path, owner: tuple[str, int, str | None, str, str | None, str | None, float]) -> None:
    """An owner row and a running turn of it, as another process would have left them."""
    conn = raw(db)
    try:
        conn.execute(
            "INSERT INTO owners (owner_id, pid, start_time, host, boot_id, pid_ns, started_at, heartbeat)"
            " VALUES (?,?,?,?,?,?,?,?)",
            (*owner, owner[-1]),
        )
        conn.execute(
            "INSERT INTO turns (turn_id, session_id, owner_id, status, started_at, prompt_text)"
            " VALUES (?, 's', ?, 'running', '2026-01-01T00:00:00.000000Z', 'p')",
            (f"turn-{owner[0]}", owner[0]),
        )
    finally:
        conn.close()


def turn_status(db: Path, owner_id: str) -> str:
    conn = raw(db)
    try:
        return str(conn.execute("SELECT status FROM turns WHERE owner_id = ?", (owner_id,)).fetchone()[0])
    finally:
        conn.close()


async def test_owner_liveness_survives_pid_reuse_reboots_and_other_machines(store: SessionStore, db: Path) -> None:
    me = store._identity
    assert me.host == socket.gethostname()
    pid, now, stale = os.getpid(), time.time(), time.time() - 3600
    owners = [
        # our own pid, but another start time: the pid was reused, that owner is gone
        ("reused-pid", pid, "1", me.host, me.boot_id, me.pid_ns, now),
        # this machine before a reboot
        ("rebooted", pid, me.start_time, me.host, "an-old-boot", me.pid_ns, now),
        # another machine sharing the file: only the heartbeat can tell
        ("remote-stale", 1, "1", "elsewhere", None, None, stale),
        ("remote-fresh", 1, "1", "elsewhere", None, None, now),
        # a live process on this machine: alive however old its heartbeat (a laptop that slept)
        ("same-process", pid, me.start_time, me.host, me.boot_id, me.pid_ns, stale),
    ]
    for owner in owners:
        add_foreign_owner(db, owner)
    assert await store.sweep() == 3
    assert {owner[0]: turn_status(db, owner[0]) for owner in owners} == {
        "reused-pid": "interrupted",
        "rebooted": "interrupted",
        "remote-stale": "interrupted",
        "remote-fresh": "running",
        "same-process": "running",
    }


async def test_closing_interrupts_this_processs_running_turns_and_releases_its_lease(db: Path) -> None:
    store = SessionStore.open(db)
    store.create_session("s", "/w")
    turn = store.begin_turn("s", [], "left running")
    turn.append(text_chunk("partial"))
    await store.aclose()
    assert count_rows(db, "SELECT count(*) FROM owners") == 0
    reopened = SessionStore.open(db)
    try:
        result = await loaded(reopened, "s")
    finally:
        await reopened.aclose()
    assert result.turns[0].status == "interrupted"
    assert result.history == [Message("user", "left running"), Message("assistant", "partial\n\n[interrupted]")]


# --- a store that cannot be used is left alone ---


def open_refused(db: Path) -> str:
    with pytest.raises(StoreUnavailable) as caught:
        SessionStore.open(db)
    return str(caught.value)


def test_a_store_file_of_garbage_is_refused_and_left_untouched(db: Path) -> None:
    db.parent.mkdir(parents=True)
    garbage = os.urandom(8192)
    db.write_bytes(garbage)
    message = open_refused(db)
    assert str(db) in message and "untouched" in message
    assert db.read_bytes() == garbage
    assert sorted(p.name for p in db.parent.iterdir()) == [db.name]


async def test_a_truncated_store_is_refused_and_left_untouched(db: Path) -> None:
    store = SessionStore.open(db)
    for index in range(50):
        store.create_session(f"s{index}", "/w")
        turn = store.begin_turn(f"s{index}", PROMPT, "x" * 1000)
        for n in range(200):
            turn.append(text_chunk(f"{index}-{n}-" + "y" * 50))
        store.finish_turn(turn, "completed", messages=[Message("user", "x" * 1000)])
        assert await store.flush()
    await store.aclose()
    before = truncate_half(db)
    message = open_refused(db)
    assert "corrupt" in message or "malformed" in message
    assert file_bytes(db) == before


def truncate_half(db: Path) -> bytes:
    size = db.stat().st_size
    assert size > 200_000
    with db.open("r+b") as f:
        f.truncate(size // 2)
    return db.read_bytes()


def file_bytes(path: Path) -> bytes:
    return path.read_bytes()


async def test_a_store_with_a_damaged_page_is_refused_and_left_untouched(db: Path) -> None:
    store = SessionStore.open(db)
    store.create_session("s", "/w")
    turn = store.begin_turn("s", PROMPT, "p")
    for n in range(2000):
        turn.append(text_chunk(f"{n}-" + "y" * 200))
        if n % 100 == 0:
            assert await store.flush()  # many rows, many pages
    store.finish_turn(turn, "completed")
    await store.aclose()
    before = damage_a_middle_page(db)
    assert "corrupt" in open_refused(db)
    assert file_bytes(db) == before


def damage_a_middle_page(db: Path) -> bytes:
    """Garbage over one page of update rows in the middle of the file: nothing read at open touches it, so only
    the integrity check can find it."""
    size = db.stat().st_size
    page = 4096
    with db.open("r+b") as f:
        f.seek((size // page // 2) * page)
        f.write(b"\xff" * page)
    return db.read_bytes()


async def test_a_row_damaged_while_running_makes_load_raise_store_unavailable(store: SessionStore, db: Path) -> None:
    store.create_session("s", "/w")
    store.begin_turn("s", [], "").append(text_chunk("x"))
    assert await store.flush()
    conn = raw(db)
    conn.execute("UPDATE updates SET data = x'00ff00ff'")
    conn.close()
    with pytest.raises(StoreUnavailable, match="session s is unreadable"):
        await store.load("s")


def test_another_applications_sqlite_database_is_refused_and_left_untouched(db: Path) -> None:
    db.parent.mkdir(parents=True)
    conn = raw(db)
    conn.execute("CREATE TABLE notes (body TEXT)")
    conn.execute("INSERT INTO notes VALUES ('mine')")
    conn.close()
    before = db.read_bytes()
    assert "not an acp-server store" in open_refused(db)
    assert db.read_bytes() == before


def test_a_store_from_a_newer_version_is_refused_and_left_untouched(db: Path) -> None:
    SessionStore.open(db).close()
    conn = raw(db)
    conn.execute("PRAGMA user_version = 99")
    conn.close()
    before = db.read_bytes()
    assert "newer acp-server" in open_refused(db)
    assert db.read_bytes() == before


def test_a_store_path_that_is_a_directory_is_refused(db: Path) -> None:
    db.mkdir(parents=True)
    assert "not a regular file" in open_refused(db)
    assert db.is_dir()


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="POSIX: links and FIFOs")
def test_a_store_path_that_is_a_link_or_a_fifo_is_refused_without_following_or_blocking(db: Path) -> None:
    # Issue 20 item 10: state files are opened without following a link (O_NOFOLLOW), without blocking on a FIFO
    # (O_NONBLOCK), and refused unless fstat on the open descriptor says regular file.
    elsewhere = db.parent / "elsewhere" / "real.db"
    elsewhere.parent.mkdir(parents=True)
    SessionStore.open(elsewhere).close()
    before = elsewhere.read_bytes()
    db.symlink_to(elsewhere)
    assert "not a regular file (a symbolic link, not followed)" in open_refused(db)
    assert db.is_symlink() and elsewhere.read_bytes() == before
    db.unlink()
    os.mkfifo(db)
    assert "not a regular file (a FIFO)" in open_refused(db)  # pytest's timeout ends a blocked open


# --- listing ---


@on_both_backends
async def test_listing_250_sessions_pages_through_each_once_newest_first(store: SessionStore) -> None:
    for index in range(250):
        store.create_session(f"s{index:03}", "/even" if index % 2 == 0 else "/odd", additional_directories=["/lib"])
    store.create_session("child", "/even", parent_session_id="s000")  # subagent sessions are never listed
    store.touch("s007")  # the most recent activity comes first
    seen: list[str] = []
    stamps: list[tuple[str, str]] = []
    cursor: str | None = None
    pages = 0
    while True:
        page = await store.list_sessions(cursor=cursor, limit=40)
        pages += 1
        seen += [s.session_id for s in page.sessions]
        stamps += [(s.updated_at, s.session_id) for s in page.sessions]
        if page.next_cursor is None:
            break
        cursor = page.next_cursor
    assert pages == 7
    assert sorted(seen) == sorted(f"s{i:03}" for i in range(250))
    assert len(seen) == len(set(seen))
    assert seen[0] == "s007"
    assert stamps == sorted(stamps, reverse=True)
    assert all(stamp.endswith("Z") and "T" in stamp for stamp, _ in stamps)
    first = (await store.list_sessions(limit=1)).sessions[0]
    assert (first.cwd, first.additional_directories, first.title) == ("/odd", ("/lib",), None)

    odd: list[str] = []
    cursor = None
    while True:
        page = await store.list_sessions(cwd="/odd", cursor=cursor)
        odd += [s.session_id for s in page.sessions]
        assert all(s.cwd == "/odd" for s in page.sessions)
        if page.next_cursor is None:
            break
        cursor = page.next_cursor
    assert sorted(odd) == sorted(f"s{i:03}" for i in range(1, 250, 2))
    assert (await store.list_sessions(cwd="/nowhere")).sessions == []


@pytest.mark.parametrize("cursor", ["not a cursor!", "", "W10=", "WyJhIl0=", "eyJhIjoxfQ=="])
@on_both_backends
async def test_an_invalid_list_cursor_is_a_value_error(store: SessionStore, cursor: str) -> None:
    with pytest.raises(ValueError, match="invalid cursor"):
        await store.list_sessions(cursor=cursor)


# --- delete and fork ---


@on_both_backends
async def test_a_deleted_session_disappears_with_its_content_and_unknown_ids_are_fine(
    store: SessionStore, location: Path | str
) -> None:
    store.create_session("keep", "/w")
    store.create_session("gone", "/w")
    turn = store.begin_turn("gone", PROMPT, "p")
    turn.append(text_chunk("secret"))
    await store.flush()
    store.delete("gone")
    store.delete("never-existed")
    assert await store.load("gone") is None
    assert [s.session_id for s in (await store.list_sessions()).sessions] == ["keep"]
    turn.append(text_chunk("late"))  # a turn still running when its session was deleted
    assert await store.flush()
    assert count_rows(location, "SELECT count(*) FROM turns") == 0
    assert count_rows(location, "SELECT count(*) FROM updates") == 0


@on_both_backends
async def test_a_fork_copies_history_and_updates_and_leaves_the_source_alone(store: SessionStore) -> None:
    store.create_session("src", "/w", mode="bypass", title="Original")
    done = store.begin_turn("src", PROMPT, "hello")
    done.append(text_chunk("answer"))
    store.finish_turn(done, "completed", messages=[Message("user", "hello"), Message("assistant", "answer")])
    running = store.begin_turn("src", [{"type": "text", "text": "more"}], "more")
    running.append(text_chunk("half", "msg_b"))
    assert await store.fork("src", "copy", cwd="/elsewhere")
    source, copy = await loaded(store, "src"), await loaded(store, "copy")
    assert (copy.session.cwd, copy.session.mode, copy.session.title) == ("/elsewhere", "bypass", "Original")
    assert copy.session.forked_from == "src"
    assert [t.entries for t in copy.turns] == [t.entries for t in source.turns]
    assert {t.turn_id for t in copy.turns}.isdisjoint(t.turn_id for t in source.turns)
    assert [t.status for t in source.turns] == ["completed", "running"]
    assert [t.status for t in copy.turns] == ["completed", "interrupted"]
    assert copy.history[:2] == source.history == [Message("user", "hello"), Message("assistant", "answer")]
    assert copy.history[2:] == [Message("user", "more"), Message("assistant", "half\n\n[interrupted]")]
    assert not await store.fork("missing", "other")
    with pytest.raises(ValueError, match="already exists"):
        await store.fork("src", "copy")


# --- replay (docs/interrupts.md decision 6) ---


async def test_replay_closes_cancelled_and_interrupted_turns(store: SessionStore) -> None:
    store.create_session("s", "/w")
    cancelled = store.begin_turn("s", PROMPT, "hello")
    cancelled.append(text_chunk("partial"))
    store.finish_turn(
        cancelled, "cancelled", stop_reason="cancelled", messages=[Message("user", "hello"), Message("assistant", "x")]
    )
    completed = store.begin_turn("s", [{"type": "text", "text": "ok"}], "ok")
    completed.append(ToolCallOpened("c1", "Read", "read", "pending"))
    completed.append(ToolCallChanged("c1", "completed", (TextOutput("fine"),)))
    store.finish_turn(completed, "completed", stop_reason="end_turn")
    crashed = store.begin_turn("s", [{"type": "text", "text": "go"}], "go")
    crashed.append(ToolCallOpened("c9", "Run tests", "execute"))
    crashed.append(text_chunk("running tests", "msg_c"))
    await store.flush()
    conn = store._conn  # the process dies here: its turn is left running, then found gone
    conn.execute("UPDATE turns SET status = 'interrupted' WHERE turn_id = ?", (crashed.turn_id,))
    result = await loaded(store, "s")
    turns = result.turns
    assert replay_entries(result) == [
        *turns[0].entries,
        TurnClosed(turns[0].turn_id, "cancelled"),
        *turns[1].entries,  # completed: nothing added, its tool call finished
        *turns[2].entries,
        ToolCallChanged("c9", "failed", (TextOutput("The tool call was interrupted."),)),
        TurnClosed(turns[2].turn_id, "interrupted"),
    ]
    assert result.history[-2:] == [
        Message("user", "go"),
        Message("assistant", 'running tests\n\n[tool call "Run tests": pending]\n\n[interrupted]'),
    ]


# --- turn records and the schema-1 upgrade ---

EVERY_KIND: list[TurnEntry] = [
    UserChunk("msg_u", {"type": "image", "data": "AAAA", "mimeType": "image/png"}),
    AgentText("msg_1", "hello"),
    AgentText("msg_1", "with meta", {"k": [1, 2]}),
    AgentThought("msg_2", "hmm"),
    AgentThought("msg_2", "hmm", {"k": None}),
    ToolCallOpened("c1", "Edit a.py", "edit", "pending", {"path": "a.py"}, ("/w/a.py",)),
    ToolCallOpened("c2", None),
    ToolCallChanged("c1", "in_progress", locations=("/w/a.py", "/w/b.py"), meta={"acpServer": {"child": "s2"}}),
    ToolCallChanged(
        "c1",
        "completed",
        (TextOutput("ok"), DiffOutput("/w/a.py", None, "new\n"), DiffOutput("/w/b.py", "a", "b"), TerminalOutput("t1")),
        raw_output={"exit": 0},
    ),
    ToolCallChanged("c2"),
    PlanSet((PlanEntry("one", "high", "completed"), PlanEntry("two", "low", "in_progress"))),
    PlanSet(()),
    ContextUsage(1200, 200_000),
    ToolCallTerminal("c3", "term_1"),
    TerminalEnded("term_1", "printf x", "/w", b"\xc3\xa9\x00\xff tail"),
    TerminalEnded("term_2", "sleep 9", "/w", b"", exit_code=None, signal="SIGTERM"),
    TerminalEnded("term_3", "false", "/w", b"", exit_code=1),
]


def test_every_kind_of_record_round_trips_through_its_row() -> None:
    rows = orjson.loads(orjson.dumps([encode_entry(e) for e in EVERY_KIND]))
    assert [decode_entry(r) for r in rows] == EVERY_KIND


@pytest.mark.parametrize("row", [["nope", 1], ["agent"], ["agent", "m", "t", None, "extra"], {"tag": "agent"}, 3])
def test_decode_entry_refuses_what_it_did_not_write(row: Any) -> None:
    with pytest.raises(ValueError, match="not a stored turn record"):
        decode_entry(row)


async def test_every_kind_of_record_comes_back_from_the_file_in_order(db: Path) -> None:
    store = SessionStore.open(db)
    store.create_session("s", "/w")
    turn = store.begin_turn("s", [], "")
    for entry in EVERY_KIND:
        turn.append(entry)
    turn.append_text("msg_3", "fast", True)
    turn.append_text("msg_3", "path")
    store.finish_turn(turn, "completed")
    await store.aclose()
    reopened = SessionStore.open(db)
    try:
        entries = (await loaded(reopened, "s")).turns[0].entries
    finally:
        await reopened.aclose()
    assert entries == [*EVERY_KIND, AgentThought("msg_3", "fast"), AgentText("msg_3", "path")]


def schema_1_store(db: Path, rows: list[list[Any]]) -> None:
    """A store as schema 1 left it: one session, one completed turn, its updates in the given rows."""
    SessionStore.open(db).close()
    conn = raw(db)
    try:
        conn.execute("DELETE FROM owners")
        conn.execute(
            "INSERT INTO sessions (id, cwd, additional_directories, mcp_servers, created_at, updated_at, mode, config)"
            " VALUES ('s', '/w', '[]', '[]', '2026-01-01T00:00:00.000000Z', '2026-01-01T00:00:00.000000Z', 'default',"
            " '{}')"
        )
        conn.execute(
            "INSERT INTO turns (turn_id, session_id, owner_id, status, started_at, prompt_text, messages)"
            " VALUES ('t1', 's', 'gone', 'completed', '2026-01-01T00:00:00.000000Z', 'p', '[]')"
        )
        for row in rows:
            data = orjson.dumps(row)
            conn.execute(
                "INSERT INTO updates (turn_id, n, data) VALUES ('t1', ?, ?)",
                (len(row), zlib.compress(data, 1) if len(data) >= 4096 else data),
            )
        conn.execute("PRAGMA user_version = 1")
    finally:
        conn.close()


def read_legacy(update: Mapping[str, Any]) -> TurnEntry | None:
    """A stand-in for the protocol edge's reader: text chunks, and nothing for anything else."""
    if update.get("sessionUpdate") == "agent_message_chunk":
        return AgentText(update["messageId"], update["content"]["text"])
    return None


def legacy_chunk(text: str) -> dict[str, Any]:
    return {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": text}, "messageId": "m"}


async def test_a_schema_1_store_is_upgraded_in_one_transaction_when_opened(db: Path) -> None:
    big = [legacy_chunk(f"{n} ") for n in range(500)]  # compressed, like a flush's big rows
    small = [[legacy_chunk(f"r{n}")] for n in range(70)]  # more rows than the upgrade reads at a time
    schema_1_store(
        db, [[legacy_chunk("a"), {"sessionUpdate": "notice", "title": "live only"}], big, [{"x": 1}], *small]
    )
    statements: list[str] = []
    store = SessionStore.open(db, read_legacy=read_legacy)
    try:
        assert count_rows(db, "PRAGMA user_version") == SCHEMA_VERSION
        assert count_rows(db, "SELECT count(*) FROM updates") == 72  # the row with nothing kept is gone
        assert count_rows(db, "SELECT sum(n) FROM updates") == 571
        store._conn.set_trace_callback(statements.append)
        result = await loaded(store, "s")
    finally:
        await store.aclose()
    assert result.turns[0].entries == [
        AgentText("m", "a"),
        *(AgentText("m", f"{n} ") for n in range(500)),
        *(AgentText("m", f"r{n}") for n in range(70)),
    ]
    assert not any("user_version" in s for s in statements)  # upgraded once, at open
    reopened = SessionStore.open(db)  # today's schema now: no reader needed
    try:
        assert (await loaded(reopened, "s")).turns[0].entries == result.turns[0].entries
    finally:
        await reopened.aclose()


async def test_a_schema_2_store_opens_as_todays_schema_with_its_rows_as_they_were(db: Path) -> None:
    """Schema 3 only adds records (v2's display terminals): the upgrade bumps the version, so an acp-server of schema
    2 refuses the store rather than failing on a session it cannot read, and rewrites nothing; schema 4's archive
    column is there already (the store was made today), and is not added twice."""
    store = SessionStore.open(db)
    store.create_session("s", "/w")
    turn = store.begin_turn("s", [], "")
    turn.append(AgentText("msg_1", "kept"))
    store.finish_turn(turn, "completed")
    await store.aclose()
    conn = raw(db)
    try:
        conn.execute("PRAGMA user_version = 2")
    finally:
        conn.close()
    before = update_rows_of(db)
    reopened = SessionStore.open(db)
    try:
        assert count_rows(db, "PRAGMA user_version") == SCHEMA_VERSION == 4
        assert update_rows_of(db) == before
        assert (await loaded(reopened, "s")).turns[0].entries == [AgentText("msg_1", "kept")]
    finally:
        await reopened.aclose()


def update_rows_of(db: Path) -> list[tuple[Any, ...]]:
    conn = raw(db)
    try:
        return conn.execute("SELECT seq, turn_id, n, data FROM updates ORDER BY seq").fetchall()
    finally:
        conn.close()


def test_a_failed_upgrade_leaves_the_schema_1_store_as_it_was(db: Path) -> None:
    schema_1_store(db, [[legacy_chunk("a")], [legacy_chunk("b"), legacy_chunk("c")]])
    before = update_rows_of(db)
    seen: list[str] = []

    def broken(update: Mapping[str, Any]) -> TurnEntry | None:
        seen.append(update["content"]["text"])
        if len(seen) == 2:
            raise RuntimeError("a reader that fails half way")
        return read_legacy(update)

    with pytest.raises(RuntimeError, match="half way"):
        SessionStore.open(db, read_legacy=broken)
    assert seen == ["a", "b"]  # the first row was rewritten, then rolled back
    assert update_rows_of(db) == before
    assert count_rows(db, "PRAGMA user_version") == 1
    assert count_rows(db, "SELECT count(*) FROM owners") == 0


def test_a_schema_1_store_without_a_reader_is_refused_and_left_untouched(db: Path) -> None:
    schema_1_store(db, [[legacy_chunk("a")]])
    message = open_refused(db)
    assert "older acp-server (schema 1)" in message and "untouched" in message
    assert count_rows(db, "PRAGMA user_version") == 1


async def test_at_shutdown_a_commit_that_never_got_a_thread_is_kept_for_the_final_write(
    store: SessionStore, db: Path
) -> None:
    """The bound can end a wait before any worker thread took its job (every thread busy): that job must never run
    later, and its batch is not lost but kept for the final write, which commits it once a thread is free."""
    store.create_session("s", "/w")
    turn = store.begin_turn("s", [], "")
    turn.append(text_chunk("kept"))
    limiter = anyio.to_thread.current_default_thread_limiter()
    tokens = limiter.total_tokens
    blocker = threading.Event()
    limiter.total_tokens = 1
    try:
        async with anyio.create_task_group() as tg:

            async def busy() -> None:
                await anyio.to_thread.run_sync(blocker.wait)

            tg.start_soon(busy)  # the one thread, busy
            await anyio.sleep(0.05)
            store.bound_waits(BOUND)
            assert not await store.flush()  # its commit waited for a thread, and the bound ended the wait
            blocker.set()
        await anyio.sleep(0.1)  # had the abandoned job been left to run, it would have by now
        assert count_rows(db, "SELECT count(*) FROM updates") == 0
    finally:
        blocker.set()
        limiter.total_tokens = tokens
    await store.aclose()
    assert count_rows(db, "SELECT count(*) FROM updates") == 1  # committed once, by the final write
