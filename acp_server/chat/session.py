"""One conversation with an agent: the ACP handshake, prompt turns, and what Ctrl-C means at each moment.

Ctrl-C has three meanings, decided by the state of the turn (never by a timer): at the idle prompt it exits; while a
turn runs it prints "cancelling…" at once (before the agent has said anything), closes any open permission question
and sends `session/cancel`, and the turn ends when the agent answers the prompt `cancelled`; pressed again while
that answer is awaited, it exits at once. The agent runs in its own process group, so only this client hears the
terminal's SIGINT, and the agent hears about it only through the protocol.

This client advertises no file system and no terminal capability: the agent reads, edits and runs commands itself,
in the session's directory, and asks permission here.
"""

from __future__ import annotations

import os
import signal
from dataclasses import dataclass
from typing import Any

import anyio
from anyio.abc import TaskStatus

from acp_server import __version__
from acp_server.chat.agent_process import AgentProcess
from acp_server.chat.permissions import Questions
from acp_server.chat.render import Renderer
from acp_server.chat.rpc_client import ResponseError, RpcClient
from acp_server.chat.terminal import LineInput

__all__ = ["ChatError", "Conversation", "ExitRequestedError"]

PROTOCOL_VERSION = 1
AUTH_REQUIRED = -32000
METHOD_NOT_FOUND = -32601
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


class Conversation:
    def __init__(self, agent: AgentProcess, renderer: Renderer, lines: LineInput) -> None:
        self.rpc = RpcClient(agent.stdin, agent.stdout, self._on_request, self._on_notification)
        self.started = False  # the session exists: a failure from now on is "stopped", not "did not start"
        self._renderer = renderer
        self._lines = lines
        self._questions = Questions(renderer, lines)
        self._session_id: str | None = None
        self._agent_name = "the agent"
        self._turn: _Turn | None = None

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
        if method == "session/update" and params.get("sessionId") == self._session_id:
            self._renderer.update(params.get("update"))
        elif method == "$/cancel_request":
            self._questions.withdraw(params.get("requestId"))

    async def _on_request(self, method: str, params: Any, request_id: Any) -> Any:
        if method == "session/request_permission":
            return await self._questions.ask(params, request_id)
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
            init = await self.rpc.request(
                "initialize",
                {
                    "protocolVersion": PROTOCOL_VERSION,
                    "clientCapabilities": {"fs": {"readTextFile": False, "writeTextFile": False}, "terminal": False},
                    "clientInfo": {"name": "acp-server-chat", "title": "acp-server chat", "version": __version__},
                },
            )
        except ResponseError as exc:
            raise ChatError(f"the agent refused to initialize: {exc.message}") from None
        init = init if isinstance(init, dict) else {}
        if init.get("protocolVersion") != PROTOCOL_VERSION:
            raise ChatError(
                f"the agent speaks ACP version {init.get('protocolVersion')!r}; this client speaks {PROTOCOL_VERSION}"
            )
        info = init.get("agentInfo")
        if isinstance(info, dict):
            self._agent_name = str(info.get("title") or info.get("name") or self._agent_name)
        try:
            session = await self.rpc.request("session/new", {"cwd": os.getcwd(), "mcpServers": []})
        except ResponseError as exc:
            if exc.code == AUTH_REQUIRED:
                raise ChatError(_auth_advice(init.get("authMethods"))) from None
            raise ChatError(f"the agent could not start a session: {exc.message}") from None
        if not isinstance(session, dict) or not isinstance(session.get("sessionId"), str):
            raise ChatError("the agent answered session/new without a session id")
        self._session_id = session["sessionId"]
        self.started = True

    async def turn(self, text: str) -> str | None:
        """One prompt turn; its stop reason, or None when the agent answered with an error."""
        assert self._session_id is not None
        self._turn = _Turn(self._session_id)
        self._questions.turn_started()
        try:
            result = await self.rpc.request(
                "session/prompt", {"sessionId": self._session_id, "prompt": [{"type": "text", "text": text}]}
            )
        except ResponseError as exc:
            self._renderer.error(f"error: {exc.message}")
            return None
        finally:
            self._turn = None
        stop = result.get("stopReason") if isinstance(result, dict) else None
        stop = stop if isinstance(stop, str) else "end_turn"
        self._renderer.turn_end(stop)
        return stop

    async def one_shot(self, text: str) -> int:
        stop = await self.turn(text)
        if stop == "end_turn":
            return 0
        return EXIT_INTERRUPTED if stop == "cancelled" else 1

    async def repl(self) -> int:
        style = self._renderer.style
        self._renderer.line(
            style.paint(
                f"Chatting with {self._agent_name} in {os.getcwd()}. /quit or Ctrl-D leaves; Ctrl-C cancels a turn.",
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


def _auth_advice(methods: Any) -> str:
    lines = ["the agent needs you to sign in before it can start a session"]
    for method in methods if isinstance(methods, list) else []:
        if isinstance(method, dict):
            detail = method.get("description") or method.get("name") or method.get("id")
            lines.append(f"  {detail}")
    return "\n".join(lines)
