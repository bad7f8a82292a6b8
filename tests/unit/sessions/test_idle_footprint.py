"""What an idle session costs the server (issue 14: at most 20 KB of RSS each, `bench.memory`): the session itself
holds no `__dict__` and no pre-allocated containers, shares what sessions have in common, and what `session/new`
buffers for the store's next commit and queues for the client is sized to what it says. Measured with tracemalloc,
which counts the Python allocations themselves: deterministic, unlike RSS."""

from __future__ import annotations

import tracemalloc
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from acp_server.agent.sessions.runs import Session
from acp_server.jsonrpc.connection import Connection
from acp_server.protocol.initialize import NO_CAPABILITIES, read_initialize
from acp_server.protocol.prompts import client_tools
from acp_server.settings.choices import PermissionMode, PromptPolicy
from acp_server.store import STORE_FILENAME, SessionStore

SESSIONS = 500


@pytest.fixture
def traced() -> Iterator[Callable[[], int]]:
    """Traced bytes now (tracemalloc running for the test alone)."""
    was_tracing = tracemalloc.is_tracing()
    if not was_tracing:
        tracemalloc.start()
    try:
        yield lambda: tracemalloc.get_traced_memory()[0]
    finally:
        if not was_tracing:
            tracemalloc.stop()


def test_an_idle_session_holds_well_under_a_kilobyte(traced: Callable[[], int]) -> None:
    cwd = Path("/tmp")
    capabilities = NO_CAPABILITIES
    client_tools(capabilities)  # the shared one exists before the count starts
    before = traced()
    sessions = [
        Session(
            f"sess_{uuid.uuid4().hex}",
            cwd,
            (),
            (),
            client=client_tools(capabilities),
            mode=PermissionMode.DEFAULT,
            model="scripted",
            prompt_policy=PromptPolicy.QUEUE,
        )
        for _ in range(SESSIONS)
    ]
    per_session = (traced() - before - sessions.__sizeof__()) / SESSIONS
    # Its id, the object and five empty containers: about 600 bytes (a dataclass with a __dict__, a deque and a set
    # made eagerly held 1.7 KB).
    assert per_session < 1024, f"an idle session holds {per_session:.0f} bytes"


def test_sessions_of_one_client_share_their_client_tools() -> None:
    params = {"protocolVersion": 1, "clientCapabilities": {"fs": {"readTextFile": True}, "terminal": True}}
    one, other = read_initialize(params), read_initialize(params)  # two reads: equal, not the same object
    assert one is not None and other is not None and one.client_capabilities is not other.client_capabilities
    first, second = client_tools(one.client_capabilities), client_tools(other.client_capabilities)
    assert first is second
    assert first.read_files and first.terminals and not first.write_files


async def test_a_new_sessions_buffered_row_is_sized_to_its_content(tmp_path: Path, traced: Callable[[], int]) -> None:
    store = SessionStore.open(tmp_path / STORE_FILENAME)
    try:
        before = traced()
        for _ in range(SESSIONS):
            store.create_session(
                f"sess_{uuid.uuid4().hex}", "/tmp", config={"model": "scripted", "prompt_policy": "queue"}
            )
        per_session = (traced() - before) / SESSIONS
        # Until the next commit (a burst of session/new fills one batch): about 800 bytes; with orjson's own buffers
        # (4 KB at least each, whatever the length) three JSON columns held over 12 KB.
        assert per_session < 2048, f"a buffered new session holds {per_session:.0f} bytes"
        await store.flush()
    finally:
        await store.aclose()


async def test_lines_queued_for_the_client_hold_their_own_size(traced: Callable[[], int]) -> None:
    # What session/new sends (its response, its commands) is queued unbounded: a burst queues thousands at once.
    connection = Connection(cleanup_deadline=1.0)
    update = {"sessionUpdate": "available_commands_update", "availableCommands": []}
    before = traced()
    for _ in range(SESSIONS):
        connection.notify("session/update", {"sessionId": f"sess_{uuid.uuid4().hex}", "update": update})
    per_line = (traced() - before) / SESSIONS
    # A 150-byte line: with orjson's own buffer each held 4 KB.
    assert per_line < 512, f"a queued line holds {per_line:.0f} bytes"
