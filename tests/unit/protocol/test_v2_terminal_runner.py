"""The v2 display terminal's own stop (protocol/v2/terminals.py, §20.4) where no stdio test can aim: a
`terminal/cancel` that lands while the command's process is still being spawned. It must be kept and stop the process
the moment it runs; the e2e tests cover every other path over stdio."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, cast

import anyio
import pytest
from anyio.abc import Process, TaskGroup

from acp_server.protocol.v2.terminals import TerminalRunner
from acp_server.runtime.ports import CommandResult
from acp_server.runtime.processes import ProcessTable
from acp_server.sessions.runs import RunContext
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
    (result,) = results
    assert result.signal == "SIGTERM" and result.exit_code is None
    assert wire.sent[-1]["exitStatus"] == {"signal": "SIGTERM"} and wire.sent[-1]["capabilities"] is None
