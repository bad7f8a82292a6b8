"""When a v2 chat turn ends (`chat.session.Conversation`): the `idle` that is this turn's, not an earlier one.

On v2 the prompt's response only says the message was inserted, and the turn ends with an `idle` state update.
Which idle is the turn's depends on the order of the wire: before the response and before any `running`, an idle is
the earlier work's end (a held prompt is answered only once that work is idle) or a repeated snapshot, which the
schema says MUST NOT count as a completion. The agent here is scripted, line by line, on the real `RpcClient`.
What a `-32800` answer to the prompt means is checked here on v1 too (the cancel taking effect only after ours).
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any, cast

import anyio
import pytest
from anyio.abc import TaskGroup

from acp_server.chat.agent_child import AgentChild
from acp_server.chat.render import Renderer
from acp_server.chat.session import Conversation
from acp_server.chat.terminal import LineInput
from tests.support.harness import scaled
from tests.unit.chat.fakes import Keyboard, Screen, ScriptedAgent, answer, refuse, update

SESSION = "s1"


@dataclass
class Chat:
    conversation: Conversation
    agent: ScriptedAgent
    screen: Screen
    tasks: TaskGroup


@dataclass
class Outcome:
    """A turn run in the background: what it returned, once it has."""

    result: list[Any] = field(default_factory=list)
    done: anyio.Event = field(default_factory=anyio.Event)


@asynccontextmanager
async def v2_chat(version: int = 2) -> AsyncIterator[Chat]:
    """A conversation with the scripted agent, past `initialize` (answered `version`) and `session/new`."""
    agent, screen, keyboard = ScriptedAgent(), Screen(), Keyboard()
    child = cast(AgentChild, agent)
    conversation = Conversation(Renderer(screen), cast(LineInput, keyboard), child.stdin, child.stdout, os.getcwd())
    try:
        with anyio.fail_after(scaled(10)):  # a safety bound: a turn that never ends fails here, not at the timeout
            async with anyio.create_task_group() as tasks:
                tasks.start_soon(conversation.rpc.run)
                async with anyio.create_task_group() as opening:
                    opening.start_soon(conversation.open)
                    initialize = await agent.read()
                    await agent.write(answer(initialize, {"protocolVersion": version, "info": {"name": "scripted"}}))
                    await agent.write(answer(await agent.read(), {"sessionId": SESSION}))
                yield Chat(conversation, agent, screen, tasks)
                conversation.rpc.closing()
                tasks.cancel_scope.cancel()
    finally:
        await agent.close()
        keyboard.close()


async def prompted(chat: Chat, text: str = "go", *, one_shot: bool = False) -> tuple[Outcome, dict[str, Any]]:
    """A turn started in the background, and its `session/prompt` as the agent read it."""
    outcome = Outcome()

    async def run() -> None:
        run_it = chat.conversation.one_shot if one_shot else chat.conversation.turn
        outcome.result.append(await run_it(text))
        outcome.done.set()

    chat.tasks.start_soon(run)
    prompt = await chat.agent.read()
    assert prompt["method"] == "session/prompt"
    return outcome, prompt


def state(name: str, stop_reason: str | None = None) -> dict[str, Any]:
    fields: dict[str, Any] = {"sessionUpdate": "state_update", "state": name}
    if stop_reason is not None:
        fields["stopReason"] = stop_reason
    return update(SESSION, fields)


def said(text: str, message_id: str = "m1") -> dict[str, Any]:
    chunk = {"sessionUpdate": "agent_message_chunk", "messageId": message_id, "content": {"type": "text", "text": text}}
    return update(SESSION, chunk)


INSERTED = {"messageId": "u1"}


async def test_an_idle_with_a_stop_reason_before_running_and_the_response_does_not_end_the_turn() -> None:
    async with v2_chat() as chat:
        outcome, prompt = await prompted(chat)
        # The earlier work's end (cancelled), then this prompt's work, answered late.
        await chat.agent.write(state("idle", "cancelled"), state("running"), said("mine"), state("idle", "end_turn"))
        await chat.agent.write(answer(prompt, INSERTED))
        await outcome.done.wait()
        assert outcome.result == ["end_turn"]
        assert "mine" in chat.screen.out
        assert "cancelled" not in chat.screen.out


async def test_a_bare_idle_read_right_after_the_response_ends_the_turn() -> None:
    async with v2_chat() as chat:
        outcome, prompt = await prompted(chat)
        # Joined to work already running: no `running` of its own, and the idle names no stop reason (a SHOULD).
        # One read: the idle is handled before the turn's task resumes from the response.
        await chat.agent.write(answer(prompt, INSERTED), said("joined"), state("idle"))
        await anyio.wait_all_tasks_blocked()
        assert outcome.done.is_set()
        assert outcome.result == ["end_turn"]


async def test_running_then_idle_then_a_late_response_ends_the_turn_at_the_response() -> None:
    async with v2_chat() as chat:
        outcome, prompt = await prompted(chat)
        await chat.agent.write(state("running"), said("quick"), state("idle", "end_turn"))
        await anyio.wait_all_tasks_blocked()
        assert not outcome.done.is_set()  # the prompt is not answered yet
        await chat.agent.write(answer(prompt, INSERTED))
        await outcome.done.wait()
        assert outcome.result == ["end_turn"]


async def test_a_held_prompt_answered_after_the_earlier_works_idle_does_not_end_on_that_idle() -> None:
    async with v2_chat() as chat:
        outcome, prompt = await prompted(chat)
        # Held: the earlier work goes idle, then this prompt is inserted and answered, then it runs.
        await chat.agent.write(state("idle", "end_turn"), answer(prompt, INSERTED))
        await anyio.wait_all_tasks_blocked()
        assert not outcome.done.is_set()
        await chat.agent.write(state("running"), said("my answer"))
        await anyio.wait_all_tasks_blocked()
        assert not outcome.done.is_set()
        await chat.agent.write(state("idle", "refusal"))
        await outcome.done.wait()
        assert outcome.result == ["refusal"]
        assert chat.screen.out.index("my answer") < chat.screen.out.index("stopped: refusal")


async def test_ctrl_c_on_a_held_prompt_withdrawn_with_32800_ends_the_turn_cancelled_and_exits_130() -> None:
    async with v2_chat() as chat:
        outcome, prompt = await prompted(chat, one_shot=True)
        await chat.conversation._interrupted()  # Ctrl-C
        assert (await chat.agent.read())["method"] == "session/cancel"
        await chat.agent.write(refuse(prompt, -32800, "the prompt was cancelled before it was inserted"))
        await outcome.done.wait()
        assert outcome.result == [130]
        assert chat.screen.out.endswith("cancelled\n")
        assert "error" not in chat.screen.err


async def test_on_v1_a_32800_to_the_prompt_after_ctrl_c_is_the_cancel_taking_effect_and_exits_130() -> None:
    """v1 defines -32800 too (Request cancelled: `$/cancel_request`, the agent's own cancellation; INTERRUPTS.md I20
    allows it as a cancelled prompt's answer): after our `session/cancel` it says the cancel took effect."""
    async with v2_chat(version=1) as chat:
        outcome, prompt = await prompted(chat, one_shot=True)
        await chat.conversation._interrupted()  # Ctrl-C
        assert (await chat.agent.read())["method"] == "session/cancel"
        await chat.agent.write(refuse(prompt, -32800, "Request cancelled"))
        await outcome.done.wait()
        assert outcome.result == [130]
        assert chat.screen.out.endswith("cancelled\n")
        assert "error" not in chat.screen.err


@pytest.mark.parametrize("version", [1, 2])
async def test_a_32800_to_a_prompt_nobody_cancelled_is_reported_as_the_agent_s_error(version: int) -> None:
    """Without our Ctrl-C, -32800 is the agent cancelling on its own (a timeout, a shutdown): an error, exit 1."""
    async with v2_chat(version=version) as chat:
        outcome, prompt = await prompted(chat, one_shot=True)
        await chat.agent.write(refuse(prompt, -32800, "Request cancelled: shutting down"))
        await outcome.done.wait()
        assert outcome.result == [1]
        assert "error: Request cancelled: shutting down" in chat.screen.err
