"""Permission requests answered at the keyboard.

ACP: after sending `session/cancel` the client MUST answer every pending `session/request_permission` with
`{"outcome": "cancelled"}`. So each open question runs in its own cancel scope: a cancel of the turn (Ctrl-C) or
the agent withdrawing the request (`$/cancel_request`) closes it and it is answered `cancelled`. Questions are
asked one at a time (a subagent may ask while another question is on screen); the next waits its turn.
"""

from __future__ import annotations

from typing import Any

import anyio

from acp_server.chat.render import Renderer
from acp_server.chat.terminal import LineInput

__all__ = ["Questions"]

CANCELLED: dict[str, Any] = {"outcome": {"outcome": "cancelled"}}
# Shortcuts beside the numbers: y picks the first option that allows once, n the first that rejects once.
SHORTCUTS = {"y": "allow_once", "n": "reject_once"}


class Questions:
    def __init__(self, renderer: Renderer, lines: LineInput) -> None:
        self._renderer = renderer
        self._lines = lines
        self._one_at_a_time = anyio.Lock()
        self._open: dict[object, anyio.CancelScope] = {}
        self._cancelling = False

    def turn_started(self) -> None:
        self._cancelling = False

    def cancel_all(self) -> None:
        """The turn is being cancelled: every open question, and any still waiting to be shown, answers cancelled."""
        self._cancelling = True
        for scope in self._open.values():
            scope.cancel()

    def withdraw(self, request_id: object) -> None:
        scope = self._open.get(_key(request_id))
        if scope is not None:
            scope.cancel()

    async def ask(self, params: Any, request_id: object) -> dict[str, Any]:
        params = params if isinstance(params, dict) else {}
        options = [o for o in params.get("options", []) if isinstance(o, dict) and "optionId" in o]
        if not options:
            return CANCELLED
        async with self._one_at_a_time:
            if self._cancelling:
                return CANCELLED
            with anyio.CancelScope() as scope:
                self._open[_key(request_id)] = scope
                try:
                    self._renderer.permission_question(params.get("toolCall"), options)
                    self._lines.discard_typed_ahead()
                    chosen = await self._choose(options)
                finally:
                    del self._open[_key(request_id)]
            if scope.cancelled_caught:
                self._renderer.line(self._renderer.style.paint("  (question withdrawn)", "dim"))
                return CANCELLED
        self._renderer.line(self._renderer.style.paint(f"  → {chosen.get('name', chosen['optionId'])}", "dim"))
        return {"outcome": {"outcome": "selected", "optionId": chosen["optionId"]}}

    async def _choose(self, options: list[dict[str, Any]]) -> dict[str, Any]:
        while True:
            self._renderer.ask(len(options))
            line = await self._lines.next_line()
            if line is None:
                return await self._nobody_to_answer(options)
            answer = line.strip().lower()
            if answer.isdigit() and 1 <= int(answer) <= len(options):
                return options[int(answer) - 1]
            if answer in SHORTCUTS and (choice := _by_kind(options, SHORTCUTS[answer])) is not None:
                return choice

    async def _nobody_to_answer(self, options: list[dict[str, Any]]) -> dict[str, Any]:
        """stdin has ended, so nobody can answer: refuse rather than allow anything unseen."""
        self._renderer.line("")
        refusal = _by_kind(options, "reject_once") or _by_kind(options, "reject_always")
        while refusal is None:
            await anyio.sleep_forever()  # the agent offered no way to say no: wait for a cancel
        return refusal


def _by_kind(options: list[dict[str, Any]], kind: str) -> dict[str, Any] | None:
    return next((o for o in options if o.get("kind") == kind), None)


def _key(request_id: object) -> object:
    # Ids 1 and "1" are different requests.
    return (type(request_id).__name__, request_id)
