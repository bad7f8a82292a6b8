"""The `scripted` model: deterministic turns from a JSON script, for testing clients without a real model.

Plugin authors point their editor integration at `acp-server --model scripted:PATH` (or put a script in a
prompt's `_meta.scripted`) and get text, thoughts, tool calls, delays, gates that hold a turn open until released,
failures and chosen stop reasons, the same way every time. docs/guide.md ("The scripted model") documents the
format. Bare `--model scripted` plays `DEMO_TURNS`, a short built-in demo (streamed text, a thought, a plan, a tool
call), so the spec that `doctor` accepts also answers every prompt.

A gate blocks like a network read: cancellably. `gate_raise` models an HTTP client that throws its own error
when the stream is aborted, which the server must still report as `cancelled`; `abort_gate` one whose teardown is
slow, so a test can hold a cancelled turn's cleanup open for as long as it needs.
"""

from __future__ import annotations

import base64
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import orjson

from acp_server.errors import ProviderError, ScriptError, StreamAbortedError
from acp_server.runtime.model import (
    Emit,
    Message,
    ModelTurn,
    Probe,
    Reply,
    StopReason,
    TextDelta,
    ThoughtDelta,
    ToolCall,
    ToolSpec,
    TurnInput,
)

__all__ = ["DEMO_TURNS", "GATES", "GateBoard", "ScriptedProvider", "Step", "gate_board", "parse_script"]

ACTIONS = (
    "say",
    "think",
    "sleep",
    "tool",
    "gate",
    "gate_raise",
    "abort_gate",
    "fail",
    "stop",
    "after_turn_gate",
    "describe_input",
)
MODIFIERS = {
    "say": {"repeat", "every"},
    "think": {"repeat", "every"},
    "tool": {"args"},
    "gate": {"timeout"},
    "gate_raise": {"timeout"},
    "abort_gate": {"timeout"},
}
# What a script's `stop` step may end a reply with (a model's own reasons, not the loop's or a cancel's).
STOP_REASONS = (StopReason.END_TURN, StopReason.MAX_TOKENS, StopReason.REFUSAL)


# What bare `--model scripted` plays: the first prompt of a session gets the first turn, every later one the second.
# Deterministic, and harmless in any directory: the only tools it calls are the plan and a listing of the session's
# directory (reading never asks for permission).
DEMO_TURNS: tuple[list[dict[str, Any]], ...] = (
    [
        {"think": "The user is trying the built-in demo script; show what a turn can carry."},
        {"say": "Hello from acp-server's built-in demo script. "},
        {"say": "This reply streams in pieces, "},
        {"say": "the way a model's does.\n\n"},
        {
            "tool": "update_plan",
            "args": {
                "entries": [
                    {"content": "Stream a reply", "status": "completed"},
                    {"content": "Show a plan", "status": "in_progress"},
                    {"content": "List the working directory", "status": "pending"},
                ]
            },
        },
        {"say": "That was a plan. Next, a tool call that lists the working directory:\n\n"},
        {"tool": "list_files", "args": {"path": "."}},
        {
            "tool": "update_plan",
            "args": {
                "entries": [
                    {"content": "Stream a reply", "status": "completed"},
                    {"content": "Show a plan", "status": "completed"},
                    {"content": "List the working directory", "status": "completed"},
                ]
            },
        },
        {"say": "Done. Start acp-server with --model openai:MODEL or anthropic:MODEL for a real model, or with "},
        {"say": "--model scripted:PATH to play your own script."},
    ],
    [
        {"think": "A later prompt of the demo."},
        {"say": "This is the built-in demo script (--model scripted); it plays the same turns every time. "},
        {"say": "Start acp-server with a real model (--model openai:MODEL or anthropic:MODEL) to talk to one."},
    ],
)


@dataclass(frozen=True, slots=True)
class Step:
    action: str
    value: Any
    repeat: int = 1
    args: dict[str, Any] | None = None
    timeout: float | None = None
    every: float = 0.0  # seconds between repeated chunks: a model streaming at 1/every chunks/s


def parse_script(raw: Any) -> tuple[Step, ...]:
    if not isinstance(raw, list):
        raise ScriptError("a script is a list of steps")
    return tuple(_parse_step(i, step) for i, step in enumerate(raw))


def _parse_step(index: int, raw: Any) -> Step:
    where = f"step {index}"
    if not isinstance(raw, dict):
        raise ScriptError(f'{where}: a step is an object such as {{"say": "hi"}}')
    actions = [key for key in raw if key in ACTIONS]
    if len(actions) != 1:
        raise ScriptError(f"{where}: needs exactly one of {', '.join(ACTIONS)}")
    action = actions[0]
    extra = set(raw) - {action} - MODIFIERS.get(action, set())
    if extra:
        raise ScriptError(f"{where}: unexpected key(s) {', '.join(sorted(extra))}")
    value = raw[action]
    expected: type | tuple[type, ...] = (int, float) if action == "sleep" else str
    if not isinstance(value, expected) or isinstance(value, bool):
        raise ScriptError(f"{where}: {action!r} takes a {'number' if action == 'sleep' else 'string'}")
    if action == "stop" and value not in STOP_REASONS:
        raise ScriptError(f"{where}: stop takes one of {', '.join(STOP_REASONS)}")
    repeat = raw.get("repeat", 1)
    if not isinstance(repeat, int) or isinstance(repeat, bool) or repeat < 1:
        raise ScriptError(f"{where}: repeat takes a positive integer")
    args = raw.get("args", {})
    if not isinstance(args, dict):
        raise ScriptError(f"{where}: args takes an object")
    timeout = raw.get("timeout")
    if timeout is not None and (not isinstance(timeout, (int, float)) or isinstance(timeout, bool)):
        raise ScriptError(f"{where}: timeout takes a number of seconds")
    every = raw.get("every", 0.0)
    if not isinstance(every, (int, float)) or isinstance(every, bool) or every < 0:
        raise ScriptError(f"{where}: every takes a number of seconds")
    return Step(action, value, repeat, args, None if timeout is None else float(timeout), float(every))


class GateBoard:
    """The named gates of one session. `_scripted/release` opens them.

    A release that arrives before its gate is reached is remembered until the session's running turn ends, so a
    client need not race the model; a release for a turn that has ended is dropped, leaving nothing behind.
    """

    def __init__(self) -> None:
        self._waiting: dict[str, anyio.Event] = {}
        self._early: set[str] = set()

    def release(self, gate: str) -> None:
        event = self._waiting.pop(gate, None)
        if event is None:
            self._early.add(gate)
        else:
            event.set()

    def turn_ended(self) -> None:
        """The session's running turn has ended: releases that arrived early are forgotten."""
        self._early.clear()

    async def wait(self, gate: str, timeout: float | None) -> None:
        if gate in self._early:
            self._early.discard(gate)
            return
        event = self._waiting.setdefault(gate, anyio.Event())
        try:
            with anyio.move_on_after(timeout if timeout is not None else float("inf")):
                await event.wait()
        finally:
            if self._waiting.get(gate) is event:
                del self._waiting[gate]


# The key of a session's gate board among its session services (`TurnInput.session_services`).
GATES = "gates"


def gate_board(session_services: dict[str, Any]) -> GateBoard:
    """The session's gate board, made on first use: by its first gate, or by a release that arrives before it."""
    board = session_services.get(GATES)
    if board is None:
        board = session_services[GATES] = GateBoard()
    assert isinstance(board, GateBoard)
    return board


class ScriptedProvider:
    """Scripts come from a prompt's `_meta.scripted`, else from the file given as `scripted:PATH`.

    The file holds either a list of steps (used for every prompt) or `{"turns": [[...], [...]]}`: the n-th prompt of
    a session plays turn n, and the last turn repeats.
    """

    # No model to ask: titles are the first words of the first prompt.
    offline = True

    def __init__(self, default_turns: Sequence[tuple[Step, ...]]) -> None:
        self._default_turns = tuple(default_turns)
        # The script checked at admission is played moments later: keep the last parse (keyed by the very object).
        self._last_parsed: tuple[object, tuple[Step, ...]] | None = None

    @classmethod
    def demo(cls) -> ScriptedProvider:
        """Bare `--model scripted`: the built-in demo turns."""
        return cls([parse_script(turn) for turn in DEMO_TURNS])

    @classmethod
    def from_file(cls, path: Path) -> ScriptedProvider:
        try:
            raw = orjson.loads(path.read_bytes())
        except (OSError, orjson.JSONDecodeError) as exc:
            raise ScriptError(f"cannot read script {path}: {exc}") from exc
        turns = raw.get("turns") if isinstance(raw, dict) else [raw]
        if not isinstance(turns, list) or not turns:
            raise ScriptError(f'{path}: expected a list of steps or {{"turns": [[...], ...]}}')
        return cls([parse_script(turn) for turn in turns])

    def _script(self, meta: dict[str, Any], turn_index: int) -> tuple[Step, ...]:
        if "scripted" in meta:
            raw = meta["scripted"]
            if self._last_parsed is not None and self._last_parsed[0] is raw:
                return self._last_parsed[1]
            steps = parse_script(raw)
            self._last_parsed = (raw, steps)
            return steps
        if not self._default_turns:
            raise ScriptError(
                "the scripted model has no script: pass one as params._meta.scripted or start with --model "
                "scripted:PATH"
            )
        return self._default_turns[min(turn_index, len(self._default_turns) - 1)]

    def check_turn(self, meta: dict[str, Any], turn_index: int) -> str | None:
        try:
            self._script(meta, turn_index)
        except ScriptError as exc:
            return f"invalid script: {exc}"
        return None

    def open_turn(self, turn: TurnInput) -> ModelTurn:
        return _ScriptedTurn(self._script(turn.meta, turn.turn_index), turn, gate_board(turn.session_services))


class _ScriptedTurn:
    """The script cursor of one turn: each model call plays steps until a tool call or the end."""

    def __init__(self, steps: tuple[Step, ...], turn: TurnInput, gates: GateBoard) -> None:
        self._steps = steps
        self._position = 0
        self._turn = turn
        self._gates = gates
        self._probe: Probe = turn.probe
        self._messages: Sequence[Message] = ()  # the conversation of the current model call (describe_input)

    async def respond(self, messages: Sequence[Message], tools: Sequence[ToolSpec], emit: Emit) -> Reply:
        self._messages = messages
        text: list[str] = []
        while self._position < len(self._steps):
            index, step = self._position, self._steps[self._position]
            self._position += 1
            if step.action == "after_turn_gate":
                continue  # played by settle()
            self._probe("step_started", step=index, action=step.action)
            reason = "cancelled"
            try:
                reply = await self._play(index, step, emit, text)
                reason = "completed"
            except ProviderError:
                reason = "failed"
                raise
            finally:
                self._probe("step_exited", step=index, reason=reason)
            if reply is not None:
                return reply
        return Reply("".join(text))

    async def _describe(self, messages: Sequence[Message], emit: Emit, text: list[str]) -> None:
        """`describe_input`: say what the model was shown besides text, one line each, so a client can check that
        its images (sounds) arrived: `image image/png 8 bytes from the user` (or `from the tool call ID`)."""
        lines = [
            f"{m.kind} {m.mime_type} {len(base64.b64decode(m.data))} bytes from "
            + ("the user" if message.role == "user" else f"the tool call {message.tool_call_id}")
            for message in messages
            for m in message.media
            if m.kind in self._turn.accepts
        ]
        said = "\n".join(lines) or "no media"
        text.append(said)
        await emit(TextDelta(said))

    async def _play(self, index: int, step: Step, emit: Emit, text: list[str]) -> Reply | None:
        action = step.action
        if action == "describe_input":
            await self._describe(self._messages, emit, text)
        elif action in ("say", "think"):
            event = TextDelta(step.value) if action == "say" else ThoughtDelta(step.value)
            every = step.every
            for count in range(step.repeat):
                if every and count:
                    await anyio.sleep(every)  # paced like a model's stream: cancellable between chunks
                await emit(event)
            if action == "say":
                text.append(step.value * step.repeat)
        elif action == "sleep":
            await anyio.sleep(step.value)
        elif action == "gate":
            self._probe("gate_reached", gate=step.value)
            await self._gates.wait(step.value, step.timeout)
        elif action == "gate_raise":
            self._probe("gate_reached", gate=step.value)
            try:
                await self._gates.wait(step.value, step.timeout)
            except anyio.get_cancelled_exc_class():
                # Deliberately turns the abort into a library error: the server must still answer `cancelled`.
                raise StreamAbortedError("stream aborted while reading the response") from None
        elif action == "abort_gate":
            try:
                await anyio.sleep_forever()  # a stream that only an abort ends
            finally:
                # The abort's teardown (closing the connection), shielded from the cancel, held until the gate opens.
                with anyio.CancelScope(shield=True):
                    self._probe("gate_reached", gate=step.value)
                    await self._gates.wait(step.value, step.timeout)
        elif action == "fail":
            raise ProviderError(step.value)
        elif action == "stop":
            return Reply("".join(text), (), StopReason(step.value))
        elif action == "tool":
            call = ToolCall(f"call_{uuid.uuid4().hex[:16]}", step.value, dict(step.args or {}))
            return Reply("".join(text), (call,))
        return None

    async def settle(self) -> None:
        for step in self._steps:
            if step.action == "after_turn_gate":
                self._probe("gate_reached", gate=step.value)
                await self._gates.wait(step.value, step.timeout)
                self._probe("settled")
