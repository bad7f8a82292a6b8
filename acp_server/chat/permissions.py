"""The agent's questions answered at the keyboard: permission requests, and (on ACP v2) forms.

ACP: after sending `session/cancel` the client MUST answer every pending `session/request_permission` with
`{"outcome": "cancelled"}`. So each open question runs in its own cancel scope: a cancel of the turn (Ctrl-C) or
the agent withdrawing the request (`$/cancel_request`) closes it and it is answered `cancelled` (a form: the
`cancel` action). Questions are asked one at a time (a subagent may ask while another question is on screen); the
next waits its turn, and one withdrawn while it waits (or before its request is even served) is never shown. A form
(`elicitation/create`, form mode) is asked a field a line (see `forms`); when stdin has ended nobody can answer, and
it is declined, as a permission is refused.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import anyio

from acp_server.chat.forms import Field, fields_of, hint, parse
from acp_server.chat.render import Renderer
from acp_server.chat.terminal import LineInput

__all__ = ["Questions"]

CANCELLED: dict[str, Any] = {"outcome": {"outcome": "cancelled"}}
FORM_CANCELLED: dict[str, Any] = {"action": "cancel"}
FORM_DECLINED: dict[str, Any] = {"action": "decline"}
T = TypeVar("T")
# Shortcuts beside the numbers: y picks the first option that allows once, n the first that rejects once.
SHORTCUTS = {"y": "allow_once", "n": "reject_once"}


class Questions:
    def __init__(self, renderer: Renderer, lines: LineInput) -> None:
        self._renderer = renderer
        self._lines = lines
        self._one_at_a_time = anyio.Lock()
        self._open: dict[object, anyio.CancelScope] = {}
        # Withdrawn before they were shown (waiting their turn, or not yet served): each is dropped when its
        # question comes up. A withdrawal too late for its answer stays unused (the agent's ids do not come back).
        self._withdrawn: set[object] = set()
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
        else:
            self._withdrawn.add(_key(request_id))

    async def ask(self, params: Any, request_id: object) -> dict[str, Any]:
        params = params if isinstance(params, dict) else {}
        options = [o for o in params.get("options", []) if isinstance(o, dict) and "optionId" in o]
        if not options:
            return CANCELLED

        async def choose() -> dict[str, Any]:
            self._renderer.permission_question(params.get("toolCall"), options)
            return await self._choose(options)

        chosen = await self._asking(request_id, choose)
        if chosen is None:
            return CANCELLED
        self._renderer.line(self._renderer.style.paint(f"  → {chosen.get('name', chosen['optionId'])}", "dim"))
        return {"outcome": {"outcome": "selected", "optionId": chosen["optionId"]}}

    async def ask_form(self, params: Any, request_id: object) -> dict[str, Any]:
        """`elicitation/create`: a form's fields typed one a line. Only form mode is advertised; anything else, and
        a form this client cannot ask, is declined."""
        params = params if isinstance(params, dict) else {}
        fields = fields_of(params.get("requestedSchema")) if params.get("mode") == "form" else None
        if fields is None:
            self._renderer.line(
                self._renderer.style.paint("  (the agent asked a question this client cannot show)", "dim")
            )
            return FORM_DECLINED

        async def fill() -> dict[str, Any] | None:
            self._renderer.form_question(str(params.get("message") or ""))
            return await self._fill(fields)

        answered = await self._asking(request_id, fill)
        if answered is None:
            return FORM_CANCELLED
        content = answered.get("content")
        if content is None:
            return FORM_DECLINED  # stdin has ended: nobody can answer
        return {"action": "accept", "content": content}

    async def _asking(self, request_id: object, interact: Callable[[], Awaitable[T]]) -> T | None:
        """Run one question's interaction in its turn and its own cancel scope; None when it was cancelled or
        withdrawn (or the turn was being cancelled before it could be shown)."""
        async with self._one_at_a_time:
            if _key(request_id) in self._withdrawn:
                self._withdrawn.discard(_key(request_id))
                return None
            if self._cancelling:
                return None
            with anyio.CancelScope() as scope:
                self._open[_key(request_id)] = scope
                try:
                    self._lines.discard_typed_ahead()
                    result = await interact()
                finally:
                    del self._open[_key(request_id)]
            if scope.cancelled_caught:
                self._renderer.line(self._renderer.style.paint("  (question withdrawn)", "dim"))
                return None
        return result

    async def _fill(self, fields: list[Field]) -> dict[str, Any]:
        """{"content": the answers} or {"content": None} when stdin ended before the form was done."""
        content: dict[str, Any] = {}
        for field in fields:
            while True:
                self._renderer.ask_field(field.label, field.description, hint(field))
                line = await self._lines.next_line()
                self._renderer.answered()
                if line is None:
                    self._renderer.line("")
                    return {"content": None}
                ok, value = parse(field, line)
                if ok:
                    break
            if value is not None:
                content[field.name] = value
        return {"content": content}

    async def _choose(self, options: list[dict[str, Any]]) -> dict[str, Any]:
        while True:
            self._renderer.ask(len(options))
            line = await self._lines.next_line()
            self._renderer.answered()
            if line is None:
                return await self._nobody_to_answer(options)
            answer = line.strip().lower()
            if answer.isdecimal() and 1 <= int(answer) <= len(options):  # not isdigit: int("²") raises
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
