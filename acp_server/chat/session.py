"""One conversation with an agent: the ACP handshake, prompt turns, and what Ctrl-C means at each moment.

Ctrl-C has three meanings, decided by the state of the turn (never by a timer): at the idle prompt it exits; while a
turn runs it prints "cancelling…" at once (before the agent has said anything), closes any open permission question
and sends `session/cancel`, and the turn ends when the agent says it was cancelled (below); pressed again while that
is awaited, it exits at once. The agent runs in its own process group, so only this client hears the terminal's
SIGINT, and the agent hears about it only through the protocol.

This client advertises no file system and no terminal capability: the agent reads, edits and runs commands itself,
in the session's directory, and asks permission here (and, on v2, asks its questions as forms).

Versions: `initialize` asks for ACP 2 and the agent's answer decides (ACP-V2.md §2). The end of a turn differs:

- on 1 (an agent that speaks only v1, or acp-server `--protocol 1`) the prompt's response is the end of the turn and
  carries its stop reason (`cancelled` after a cancel); an error response is a failed turn, except `-32800` to a
  turn we cancelled: v1 defines it too (Request cancelled, for `$/cancel_request` and the agent's own cancellation,
  ACP-REFERENCE.md §8b, and I20 allows it as a cancelled prompt's answer), so it says our cancel took effect;
- on 2 the prompt is answered when the message is inserted (`{messageId}`), maybe only after earlier work ends (a
  held prompt), and the turn ends with an `idle` `state_update`, its stop reason `end_turn` when it gives none (an
  `error` stop reason carries the failure). Only an idle that can be this turn's counts: one read after the
  prompt's response, or after a `running` seen since the prompt went out. An idle before both is the earlier
  work's end, or a repeated snapshot that the schema says MUST NOT count as a new completion. An error response
  means nothing was inserted; `-32800` to a cancelled turn is a held prompt withdrawn by the cancel, so the turn
  ends cancelled. The updates go through `v2.V2Updates` to the shared renderer, and a cancel is the same
  `session/cancel`.
"""

from __future__ import annotations

import signal
from dataclasses import dataclass, field
from typing import Any

import anyio
from anyio.abc import ByteReceiveStream, ByteSendStream, TaskStatus

from acp_server import __version__
from acp_server.chat.permissions import Questions
from acp_server.chat.render import Renderer
from acp_server.chat.rpc_client import ResponseError, RpcClient
from acp_server.chat.terminal import LineInput
from acp_server.chat.v2 import V2Updates

__all__ = ["ChatError", "Conversation", "ExitRequestedError"]

PROTOCOL_VERSION = 2  # the newest this client speaks; it asks for it, and speaks 1 to an agent that answers 1
SUPPORTED_VERSIONS = (1, 2)
AUTH_REQUIRED = -32000
METHOD_NOT_FOUND = -32601
# Request cancelled. After our cancel it is the cancel taking effect: on v2 a held prompt withdrawn (ACP-V2.md §20.1);
# on v1 an agent that answers the cancelled prompt with the generic cancellation error instead of `cancelled`.
REQUEST_CANCELLED = -32800
EXIT_INTERRUPTED = 130  # what a shell reports for a program ended by Ctrl-C
QUIT_COMMANDS = ("/quit", "/exit")


class ExitRequestedError(Exception):
    """The person asked to leave (Ctrl-C); `urgent` when a cancel was already under way and they pressed again."""

    def __init__(self, code: int, urgent: bool = False) -> None:
        super().__init__(f"exit {code}")
        self.code = code
        self.urgent = urgent


class ChatError(Exception):
    """The conversation cannot start or go on; the message says why in plain words."""


@dataclass
class _Turn:
    session_id: str
    cancelling: bool = False
    # v2 only: the turn ends with an `idle` state update, not with the prompt's response.
    ended: anyio.Event = field(default_factory=anyio.Event)
    running: bool = False  # a `running` or `requires_action` was read since the prompt was sent
    answered: bool = False  # the prompt's response was read (set by the reader, in the order of the wire)
    stop_reason: str = "end_turn"
    error: str | None = None


class Conversation:
    def __init__(
        self, renderer: Renderer, lines: LineInput, send: ByteSendStream, receive: ByteReceiveStream, cwd: str
    ) -> None:
        self.rpc = self._rpc(send, receive)
        self.started = False  # the session exists: a failure from now on is "stopped", not "did not start"
        self.cwd = cwd  # the session's directory, on the agent's machine
        self._replaying = False  # a reload's replay of what was already shown: not drawn again
        # A turn began and has not come to its end here: when the connection drops, that turn is lost with it.
        self.turn_open = False
        self._renderer = renderer
        self._lines = lines
        self._questions = Questions(renderer, lines)
        self._session_id: str | None = None
        self._agent_name = "the agent"
        self._turn: _Turn | None = None
        self._v2: V2Updates | None = None  # set when the agent answered `initialize` with version 2

    def _rpc(self, send: ByteSendStream, receive: ByteReceiveStream) -> RpcClient:
        return RpcClient(send, receive, self._on_request, self._on_notification)

    def reattach(self, send: ByteSendStream, receive: ByteReceiveStream) -> None:
        """A new connection to the agent (`--connect` after a drop): `reopen` loads the session on it."""
        self.rpc = self._rpc(send, receive)
        self._turn = None
        self._questions.cancel_all()  # a question of the lost connection can no longer be answered

    # --- Ctrl-C ---

    async def watch_interrupts(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        with anyio.open_signal_receiver(signal.SIGINT) as signals:
            task_status.started()
            async for _ in signals:
                await self._interrupted()

    async def _interrupted(self) -> None:
        turn = self._turn
        if turn is None:
            self._renderer.end_stream()
            self._renderer.write("\n")
            # Before the session exists the person has given up waiting for the agent: no grace for it either.
            raise ExitRequestedError(EXIT_INTERRUPTED, urgent=not self.started)
        if turn.cancelling:
            self._renderer.notice("exiting")
            raise ExitRequestedError(EXIT_INTERRUPTED, urgent=True)
        turn.cancelling = True
        self._renderer.notice("cancelling…")
        self._questions.cancel_all()
        await self.rpc.notify("session/cancel", {"sessionId": turn.session_id})

    # --- the agent's messages ---

    def _on_notification(self, method: str, params: Any) -> None:
        if not isinstance(params, dict):
            return
        if method == "session/update" and params.get("sessionId") == self._session_id and not self._replaying:
            update = params.get("update")
            if self._v2 is None:
                self._renderer.update(update)
            elif isinstance(update, dict) and update.get("sessionUpdate") == "state_update":
                self._state(update)
            else:
                self._v2.show(update)
        elif method == "$/cancel_request":
            self._questions.withdraw(params.get("requestId"))

    def _state(self, update: dict[str, Any]) -> None:
        """v2's foreground state: the `idle` that can be this turn's ends it (see the module docstring). Before the
        prompt's response and any `running`, an idle is the end of earlier work or a repeated snapshot, whatever
        stop reason it carries; after either, any idle is the end, `end_turn` when it names no stop reason (the
        reason is only a SHOULD, and a prompt joined to running work never sees a `running` of its own)."""
        turn = self._turn
        if turn is None or turn.ended.is_set():
            return
        state = update.get("state")
        if state in ("running", "requires_action"):
            turn.running = True
        elif state == "idle" and (turn.running or turn.answered):
            stop = update.get("stopReason")
            turn.stop_reason = stop if isinstance(stop, str) else "end_turn"
            error = update.get("error")
            if turn.stop_reason == "error":
                message = error.get("message") if isinstance(error, dict) else None
                turn.error = message if isinstance(message, str) and message else "the agent's turn failed"
            turn.ended.set()

    async def _on_request(self, method: str, params: Any, request_id: Any) -> Any:
        if method == "session/request_permission":
            if self._v2 is not None:
                params = self._v2.permission(params)
            return await self._questions.ask(params, request_id)
        if method == "elicitation/create" and self._v2 is not None:  # forms are advertised on v2 only
            return await self._questions.ask_form(params, request_id)
        raise ResponseError(METHOD_NOT_FOUND, f"this client does not offer {method}")

    # --- the conversation ---

    async def open(self, timeout: float = 30.0) -> None:
        """`initialize`, then `session/new` in the current directory, within `timeout` seconds: an agent that never
        answers is reported, not waited for until Ctrl-C."""
        with anyio.move_on_after(timeout) as waiting:
            await self._open()
        if waiting.cancelled_caught:
            raise ChatError(f"the agent did not open a session within {timeout:g} s (is it an ACP agent on stdio?)")

    async def _open(self) -> None:
        try:
            init = await self.rpc.request("initialize", _initialize_params())
        except ResponseError as exc:
            raise ChatError(f"the agent refused to initialize: {exc.message}") from None
        init = init if isinstance(init, dict) else {}
        version = init.get("protocolVersion")
        if type(version) is not int or version not in SUPPORTED_VERSIONS:
            raise ChatError(f"the agent speaks ACP version {version!r}; this client speaks 1 and 2")
        if version == 2:
            self._v2 = V2Updates(self._renderer)
        info = init.get("info" if version == 2 else "agentInfo")
        if isinstance(info, dict):
            self._agent_name = str(info.get("title") or info.get("name") or self._agent_name)
        try:
            session = await self.rpc.request("session/new", {"cwd": self.cwd, "mcpServers": []})
        except ResponseError as exc:
            if exc.code == AUTH_REQUIRED:
                raise ChatError(_auth_advice(init.get("authMethods"))) from None
            raise ChatError(f"the agent could not start a session: {exc.message}") from None
        if not isinstance(session, dict) or not isinstance(session.get("sessionId"), str):
            raise ChatError("the agent answered session/new without a session id")
        self._session_id = session["sessionId"]
        self.started = True

    async def reopen(self, timeout: float) -> None:
        """On a new connection: `initialize` again, then take the session up where the lost connection left it.
        v2 resumes it without a replay; v1 loads it, and the replay (all of it: v1 has no other way) is not drawn
        again. The version may differ from the last connection's (another replica, an upgrade)."""
        with anyio.move_on_after(timeout) as waiting:
            await self._reopen()
        if waiting.cancelled_caught:
            raise ChatError(f"the agent did not reload the session within {timeout:g} s")

    async def _reopen(self) -> None:
        assert self._session_id is not None
        try:
            init = await self.rpc.request("initialize", _initialize_params())
        except ResponseError as exc:
            raise ChatError(f"the agent refused to initialize: {exc.message}") from None
        version = init.get("protocolVersion") if isinstance(init, dict) else None
        if type(version) is not int or version not in SUPPORTED_VERSIONS:
            raise ChatError(f"the agent speaks ACP version {version!r}; this client speaks 1 and 2")
        self._v2 = V2Updates(self._renderer) if version == 2 else None
        params = {"sessionId": self._session_id, "cwd": self.cwd, "mcpServers": []}
        self._replaying = True
        try:
            await self.rpc.request("session/resume" if version == 2 else "session/load", params)
        except ResponseError as exc:
            raise ChatError(f"the agent could not reload the session: {exc.message}") from None
        finally:
            self._replaying = False

    async def turn(self, text: str) -> str | None:
        """One prompt turn; its stop reason, or None when the agent answered with an error."""
        assert self._session_id is not None
        turn = self._turn = _Turn(self._session_id)
        self.turn_open = True
        self._questions.turn_started()

        def answered() -> None:
            turn.answered = True

        try:
            result = await self.rpc.request(
                "session/prompt",
                {"sessionId": self._session_id, "prompt": [{"type": "text", "text": text}]},
                on_answer=answered,
            )
            if self._v2 is not None:
                # Answered on insertion ({messageId}); the work goes on until its `idle`.
                await turn.ended.wait()
        except ResponseError as exc:  # nothing was inserted (v2), or the turn failed (v1)
            self.turn_open = False  # answered: the turn came to its end
            if turn.cancelling and exc.code == REQUEST_CANCELLED:
                self._renderer.turn_end("cancelled")  # our cancel took effect (v2: a held prompt, nothing ran)
                return "cancelled"
            self._renderer.error(f"error: {exc.message}")
            return None
        finally:
            self._turn = None
        self.turn_open = False
        if self._v2 is not None:
            if turn.error is not None:
                self._renderer.error(f"error: {turn.error}")
                return None
            stop = turn.stop_reason
        else:
            reason = result.get("stopReason") if isinstance(result, dict) else None
            stop = reason if isinstance(reason, str) else "end_turn"
        self._renderer.turn_end(stop)
        return stop

    async def one_shot(self, text: str) -> int:
        stop = await self.turn(text)
        if stop == "end_turn":
            return 0
        return EXIT_INTERRUPTED if stop == "cancelled" else 1

    async def repl(self, greet: bool = True) -> int:
        style = self._renderer.style
        if greet:
            self._renderer.line(
                style.paint(
                    f"Chatting with {self._agent_name} in {self.cwd}. /quit or Ctrl-D leaves; Ctrl-C cancels a turn.",
                    "dim",
                )
            )
        while True:
            self._renderer.prompt()
            line = await self._lines.next_line()
            if line is None:
                self._renderer.write("\n")
                return 0
            text = line.strip()
            if text in QUIT_COMMANDS:
                return 0
            if text:
                await self.turn(text)


def _initialize_params() -> dict[str, Any]:
    """Asks for version 2 in both shapes: v2's `info` and `capabilities` for an agent that answers 2, and v1's
    `clientInfo` and `clientCapabilities` for one that answers 1 (each version's schema lets the other's keys be).
    No client files or terminals (v1); on v2, forms (`elicitation.form`: the agent may ask a question as a form,
    answered a field a line), never URL mode. v1 stays as it was: no elicitation."""
    info = {"name": "acp-server-chat", "title": "acp-server chat", "version": __version__}
    return {
        "protocolVersion": PROTOCOL_VERSION,
        "info": info,
        "capabilities": {"elicitation": {"form": {}}},
        "clientInfo": info,
        "clientCapabilities": {"fs": {"readTextFile": False, "writeTextFile": False}, "terminal": False},
    }


def _auth_advice(methods: Any) -> str:
    lines = ["the agent needs you to sign in before it can start a session"]
    for method in methods if isinstance(methods, list) else []:
        if isinstance(method, dict):
            detail = method.get("description") or method.get("name") or method.get("methodId") or method.get("id")
            lines.append(f"  {detail}")
    return "\n".join(lines)
