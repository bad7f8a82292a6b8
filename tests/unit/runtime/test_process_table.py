"""Unit tests of the process table's exit path, each on an event loop of its own that closes before the test ends.

What goes wrong here shows only after the loop has closed: a child's asyncio transport still open then is collected
later and fails in its finaliser ("Event loop is closed"), which the server's stderr shows as a traceback. So each
test runs its scenario under `anyio.run`, collects garbage after it, and counts what the finalisers raised.
"""

from __future__ import annotations

import gc
import os
import signal
import sys
from collections.abc import Awaitable, Callable
from contextlib import suppress

import anyio
import pytest

from acp_server.runtime.processes import ProcessTable
from tests.support.harness import scaled

# How long `release` may wait for the pipes of what was just killed (the connection's RELEASE_TIMEOUT).
RELEASE = 0.1


def unraisable_after(scenario: Callable[[], Awaitable[None]], monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Run `scenario` on a fresh event loop, let the loop close, collect garbage: what the finalisers raised."""
    raised: list[str] = []
    monkeypatch.setattr(sys, "unraisablehook", lambda unraisable: raised.append(repr(unraisable.exc_value)))
    anyio.run(scenario, backend="asyncio")
    gc.collect()
    return raised


def test_a_pipe_held_by_a_child_out_of_reach_is_let_go_of_before_the_loop_closes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A command whose background child left its group (`setsid`), where no subreaper adopts it (an embedder's
    # table): `kill_all` cannot reach it, and it holds the command's output pipe open past the server's exit.
    escaped: list[int] = []

    async def scenario() -> None:
        table = ProcessTable()
        process = await table.open(["/bin/sh", "-c", "setsid sleep 30 & echo $!"])
        assert process.stdout is not None
        escaped.append(int((await process.stdout.receive()).decode()))
        await process.wait()
        table.forget(process, keep_group_if_alive=True)
        del process
        table.kill_all()
        await table.release(RELEASE)

    try:
        assert unraisable_after(scenario, monkeypatch) == []
    finally:
        for pid in escaped:
            with suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def test_a_killed_command_and_its_background_children_leave_nothing_open(monkeypatch: pytest.MonkeyPatch) -> None:
    # One command still running at exit, one finished whose background child lives on in its group: both killed,
    # both pipes seen closed within the release time, the table empty.
    tables: list[ProcessTable] = []

    async def scenario() -> None:
        table = ProcessTable()
        tables.append(table)
        running = await table.open(["/bin/sh", "-c", "echo up; sleep 30"])
        finished = await table.open(["/bin/sh", "-c", "sleep 30 & echo started"])
        for process in (running, finished):
            assert process.stdout is not None
            await process.stdout.receive()
        await finished.wait()
        table.forget(finished, keep_group_if_alive=True)
        assert len(table) == 2
        table.kill_all()
        # A generous bound, as the outcome is asserted (both exits seen), not the speed: on a loaded machine a
        # SIGKILLed group may take longer than the server's RELEASE_TIMEOUT to be reaped.
        await table.release(scaled(5))
        assert running.returncode == -signal.SIGKILL

    assert unraisable_after(scenario, monkeypatch) == []
    assert len(tables[0]) == 0
