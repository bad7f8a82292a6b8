"""The v2 display terminal's own stop (protocol/v2/terminals.py, §20.4) where no stdio test can aim: a
`terminal/cancel` or the turn's seal that lands while the command's process is still being spawned. The cancel must be
kept and stop the process the moment it runs; the seal must kill it then (the group, as a running one) and say so in
the end it sends at once. The e2e tests cover every other path over stdio."""

from __future__ import annotations

import os
import signal
from collections.abc import Sequence
from pathlib import Path
from typing import Any, cast

import anyio
import pytest
from anyio.abc import Process, TaskGroup

from acp_server.agent.sessions.runs import RunContext
from acp_server.protocol.v2.terminals import TerminalRunner
from acp_server.runtime.ports import CommandResult
from acp_server.runtime.processes import ProcessTable
from tests.support.harness import scaled
from tests.unit.test_units import make_session, prompt

pytestmark = pytest.mark.timeout(30)


class _Wire:
    """What the runner needs of the connection: it records what is sent and spawns into the test's task group."""

    def __init__(self, tasks: TaskGroup) -> None:
        self.sent: list[dict[str, Any]] = []
        self._tasks = tasks

    async def send_fenced(self, message: dict[str, Any], fence: object) -> bool:
        self.sent.append(message["params"]["update"])
        return True

    def notify(self, method: str, params: dict[str, Any]) -> None:
        self.sent.append(params["update"])

    def spawn(self, function: Any, *args: Any) -> None:
        self._tasks.start_soon(function, *args)


async def _let_go(processes: ProcessTable) -> None:
    """What the server does on its way out (`kill_all`, then `release`): a killed command's output pipe is read to
    its end before this test's event loop closes. One left open is collected in a later test, which then fails on
    the unclosed transport's ResourceWarning."""
    processes.kill_all()
    await processes.release(scaled(5))


class _SlowToSpawn(ProcessTable):
    """A real process table whose `open` waits for the test before it spawns."""

    def __init__(self) -> None:
        super().__init__()
        self.opening = anyio.Event()
        self.go = anyio.Event()

    async def open(self, argv: Sequence[str], *, cwd: str | None = None) -> Process:
        self.opening.set()
        await self.go.wait()
        return await super().open(argv, cwd=cwd)


async def test_a_terminal_cancel_while_the_process_is_being_spawned_stops_it_once_it_runs() -> None:
    session = make_session()
    run = RunContext(session, 1, prompt(session))
    processes = _SlowToSpawn()
    results: list[CommandResult] = []

    async def anchor(terminal_id: str) -> None:
        pass

    with anyio.fail_after(scaled(10)):
        async with anyio.create_task_group() as tasks:
            wire = _Wire(tasks)
            deadline = scaled(5)
            runner = TerminalRunner(cast(Any, wire), run, processes, lambda: anyio.current_time() + deadline)

            async def command() -> None:
                results.append(await runner.run("sleep 30", Path("/tmp"), None, anchor))

            tasks.start_soon(command)
            await processes.opening.wait()
            (stop,) = run.terminal_stops.values()  # announced, cancellable, not running yet
            assert wire.sent[0]["capabilities"] == {"cancel": {}}
            stop()
            processes.go.set()
        await _let_go(processes)
    (result,) = results
    assert result.signal == "SIGTERM" and result.exit_code is None
    assert wire.sent[-1]["exitStatus"] == {"signal": "SIGTERM"} and wire.sent[-1]["capabilities"] is None


class _SpawnedLate(ProcessTable):
    """A real process table whose `open` waits for the test before it spawns, shielded like the real spawn (a cancel
    of the turn does not stop a spawn once begun), and keeps what it spawned."""

    def __init__(self) -> None:
        super().__init__()
        self.opening = anyio.Event()
        self.go = anyio.Event()
        self.spawned: list[Process] = []

    async def open(self, argv: Sequence[str], *, cwd: str | None = None) -> Process:
        with anyio.CancelScope(shield=True):
            self.opening.set()
            await self.go.wait()
            process = await super().open(argv, cwd=cwd)
        self.spawned.append(process)
        return process


async def test_a_terminal_sealed_while_its_process_is_being_spawned_is_killed_once_it_runs_and_ends_sigkill(
    tmp_path: Path,
) -> None:
    """`_seal` (the cleanup deadline passed, the turn's work cancelled) ends a terminal whose process is still being
    spawned: its end says SIGKILL at once (before the turn's idle), and the process, which ignores SIGTERM, is killed
    with its group the moment it runs. It used to get only the bounded polite stop (SIGTERM: the deadline had passed)
    and outlived the turn, its end saying nothing of how it died."""
    session = make_session()
    run = RunContext(session, 1, prompt(session))
    processes = _SpawnedLate()
    work = tmp_path / "work"
    work.mkdir()

    async def anchor(terminal_id: str) -> None:
        pass

    try:
        with anyio.fail_after(scaled(10)):
            async with anyio.create_task_group() as tasks:
                wire = _Wire(tasks)
                # The seal comes after the cleanup deadline: whatever the runner bounds by it has no time left.
                runner = TerminalRunner(cast(Any, wire), run, processes, lambda: anyio.current_time() - 1)
                turn = anyio.CancelScope()

                async def command() -> None:
                    with turn:
                        await runner.run("trap '' TERM; sleep 30", work, None, anchor)

                tasks.start_soon(command)
                await processes.opening.wait()
                turn.cancel()  # the turn's work is cancelled...
                for end in list(run.terminal_ends.values()):  # ... and sealed, as `_seal` does
                    end()
                at_seal = list(wire.sent)
                processes.go.set()
            (process,) = processes.spawned
            with anyio.move_on_after(scaled(3)):  # SIGKILLed: it dies at once; SIGTERM alone leaves it 30 s
                await process.wait()
        assert process.returncode == -signal.SIGKILL
        assert at_seal[-1]["exitStatus"] == {"signal": "SIGKILL"} and at_seal[-1]["capabilities"] is None
        assert wire.sent == at_seal  # one end, the seal's
    finally:
        for process in processes.spawned:
            if process.returncode is None:
                os.killpg(process.pid, signal.SIGKILL)
        await _let_go(processes)
