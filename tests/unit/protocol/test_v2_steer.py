"""The v2 steer hand-over (protocol/v2/prompt.py `_joined_work`, ACP-V2.md §7): a cancel that lands after the running
turn handed the session to the steering prompt, but before its waiting task resumed, still ends the work with
`idle cancelled`. Over stdio that window is one scheduling step, so it is driven here, deterministically, with the
real run registry and turn core and a stand-in for the connection."""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

import anyio
import pytest
from anyio.abc import TaskGroup

from acp_server.agent.sessions.runs import RunContext, RunRegistry, RunState, Session
from acp_server.protocol.prompts import prompt_input
from acp_server.protocol.schema import PromptRequest
from acp_server.protocol.v2.prompt import _joined_work
from acp_server.settings.choices import PromptPolicy

pytestmark = pytest.mark.timeout(10)


class _Connection:
    """What the v2 prompt lifecycle uses of the connection: notify, and spawn into a task group the test owns."""

    def __init__(self, tg: TaskGroup) -> None:
        self._tg = tg
        self.updates: list[dict[str, Any]] = []

    def notify(self, method: str, params: dict[str, Any]) -> None:
        assert method == "session/update"
        self.updates.append(params["update"])

    def spawn(self, fn: Callable[..., Coroutine[Any, Any, Any]], *args: Any) -> None:
        self._tg.start_soon(fn, *args)


class _Turns:
    """The turn services a run the cancel claimed before it started reads: the registry, no store, no edge work."""

    meter = None  # no operator's metrics (`serve` sets one)

    def __init__(self, runs: RunRegistry) -> None:
        self.runs = runs

    @staticmethod
    def store() -> None:
        return None


class _Agent:
    def __init__(self, runs: RunRegistry) -> None:
        self.runs = runs
        self.turns = _Turns(runs)


class _Editor:
    """The editor's connection as the v2 prompt lifecycle uses it: its JSON-RPC connection and its agent."""

    def __init__(self, connection: _Connection, runs: RunRegistry) -> None:
        self.rpc = connection
        self.agent = _Agent(runs)


def _prompt() -> Any:
    return prompt_input(PromptRequest.model_validate({"sessionId": "s", "prompt": []}))


def _state(run: RunContext) -> RunState:
    return run.state  # read again (mypy narrows an attribute it has just compared)


async def test_a_cancel_right_after_the_hand_over_ends_the_joined_work_with_idle_cancelled() -> None:
    runs, session = RunRegistry(), Session("s", Path("/tmp"), (), ())
    session.prompt_policy = PromptPolicy.STEER
    first = runs.admit(session, 1, _prompt())
    steering = runs.admit(session, 2, _prompt())
    assert steering.steers and steering.state is RunState.QUEUED
    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            connection = _Connection(tg)
            editor = _Editor(connection, runs)
            tg.start_soon(_joined_work, editor, steering)  # type: ignore[arg-type]  # a stand-in with what it reads
            await anyio.wait_all_tasks_blocked()  # it waits for its place in the session
            runs.release(first)  # the running turn handed over: the steering prompt is admitted
            assert _state(steering) is RunState.ADMITTED
            runs.interrupt("s")  # the cancel lands before the joined work's task resumes
    assert _state(steering) is RunState.ENDED and runs.running("s") is None
    assert connection.updates[-1] == {"sessionUpdate": "state_update", "state": "idle", "stopReason": "cancelled"}
    assert [u["state"] for u in connection.updates].count("idle") == 1
