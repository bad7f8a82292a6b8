"""`_scripted/release` and the session's gate board: an early release is kept until the running turn ends."""

from __future__ import annotations

from pathlib import Path

import anyio

from acp_server.agent.sessions.runs import RunContext, RunRegistry, Session
from acp_server.protocol.prompts import prompt_input
from acp_server.protocol.schema import PromptRequest
from acp_server.protocol.testmode.gate_params import ScriptedReleaseNotification
from acp_server.protocol.testmode.gates import GATES as GATES_PLUGIN
from acp_server.runtime.providers.scripted import GATES, gate_board


class _Agent:
    """The two pieces of the agent the release handler uses."""

    def __init__(self, sessions: dict[str, Session], runs: RunRegistry) -> None:
        self.sessions = sessions
        self.runs = runs


class _Editor:
    """The editor's connection the release came on: its agent; every session here is its own."""

    def __init__(self, sessions: dict[str, Session], runs: RunRegistry) -> None:
        self.agent = _Agent(sessions, runs)

    @staticmethod
    def owns(session: Session) -> bool:
        return True


def release(editor: _Editor, session_id: str, gate: str) -> None:
    _, handler = GATES_PLUGIN.notifications["_scripted/release"]
    params = ScriptedReleaseNotification.model_validate({"sessionId": session_id, "gate": gate})
    handler(editor, params)  # type: ignore[arg-type]  # a stand-in with just what the handler reads


async def test_an_early_release_opens_its_gate_until_the_running_turn_ends() -> None:
    agent, session = RunRegistry(), Session("s", Path("/tmp"), (), ())
    editor = _Editor({"s": session}, agent)
    run = agent.admit(session, 1, prompt_input(PromptRequest.model_validate({"sessionId": "s", "prompt": []})))
    release(editor, "s", "g")  # before any gate board exists: made for it
    assert GATES in session.services
    with anyio.fail_after(1):
        await gate_board(session.services).wait("g", None)  # the early release opened it
    release(editor, "s", "late")
    agent.release(run)  # the turn ended: its early releases are forgotten
    with anyio.move_on_after(0.05) as waited:
        await gate_board(session.services).wait("late", None)
    assert waited.cancelled_caught


async def test_a_release_finds_a_subagents_session_in_the_run_registry() -> None:
    agent, child = RunRegistry(), Session("child", Path("/tmp"), (), ())
    request = prompt_input(PromptRequest.model_validate({"sessionId": "child", "prompt": []}))
    agent.register_child(RunContext(child, 1, request, parent_session_id="s"))
    release(_Editor({}, agent), "child", "g")
    with anyio.fail_after(1):
        await gate_board(child.services).wait("g", None)
    release(_Editor({}, agent), "gone", "g")  # no such session: nothing happens
