"""A scripted editor on top of `RawClient`: it answers the server's requests to the client (permissions, terminals)
the way an editor would, on a per-test policy (now, late, or never), and records what it was asked, in order.

Tests of tools that call back into the editor need someone answering while the test watches the wire; writing that
loop once keeps each test about what it checks. Terminals are simulated, not run: `terminal/wait_for_exit` either
answers with the configured exit status or is held, as for a long-running command, until `terminal/kill` or
`terminal/release` arrives for that terminal (then it answers `SIGKILL`, as docs/interrupts.md's default client does).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from tests.support.harness import T_WAIT, RawClient

__all__ = ["NEVER", "Editor", "always", "answer_with"]

NEVER = math.inf

# Given the params of a `session/request_permission`, the optionId to select, or None to never answer.
PermissionPolicy = Callable[[dict[str, Any]], str | None]


def always(option_id: str | None) -> PermissionPolicy:
    return lambda params: option_id


def answer_with(choices: dict[str, str | None], default: str | None = "reject_once") -> PermissionPolicy:
    """Per command (the tool call's title): which option to select; others get `default`."""
    return lambda params: choices.get(params["toolCall"].get("title", ""), default)


@dataclass
class Editor:
    client: RawClient
    permission: PermissionPolicy = field(default_factory=lambda: always("allow_once"))
    # What `terminal/wait_for_exit` answers at once; None holds it until the terminal is killed or released.
    exit_status: dict[str, Any] | None = field(default_factory=lambda: {"exitCode": 0, "signal": None})
    output: str = ""
    truncated: bool = False
    # Seconds before `terminal/kill` / `terminal/release` are answered (NEVER: not at all).
    kill_delay: float = 0.0
    release_delay: float = 0.0
    # Every request the server sent to the client, in wire order.
    requests: list[dict[str, Any]] = field(default_factory=list)
    _seen: set[Any] = field(default_factory=set)
    _ended: dict[str, asyncio.Event] = field(default_factory=dict)
    _created: dict[Any, str] = field(default_factory=dict)  # terminal/create request id -> the terminal it made
    _terminal_ids: itertools.count[int] = field(default_factory=lambda: itertools.count(1))
    _tasks: set[asyncio.Task[None]] = field(default_factory=set)
    _loop: asyncio.Task[None] | None = None
    _stopped: bool = False

    async def __aenter__(self) -> Editor:
        self._loop = asyncio.create_task(self._serve())
        return self

    async def __aexit__(self, *exc: object) -> None:
        self._stopped = True
        for task in [self._loop, *self._tasks]:
            if task is not None:
                task.cancel()
        await asyncio.gather(*(t for t in [self._loop, *self._tasks] if t is not None), return_exceptions=True)

    # --- what the tests read ---

    def calls(self, method: str | None = None, terminal_id: str | None = None) -> list[dict[str, Any]]:
        return [
            r
            for r in self.requests
            if (method is None or r["method"] == method)
            and (terminal_id is None or r.get("params", {}).get("terminalId") == terminal_id)
        ]

    def terminal_methods(self, terminal_id: str) -> list[str]:
        """The terminal/* calls made for one terminal, in order, its terminal/create included."""
        methods: list[str] = []
        for request in self.requests:
            method = request["method"]
            params = request.get("params", {})
            made_here = method == "terminal/create" and self._created.get(request["id"]) == terminal_id
            if made_here or (method.startswith("terminal/") and params.get("terminalId") == terminal_id):
                methods.append(method)
        return methods

    async def wait_request(self, method: str, count: int = 1, timeout: float = T_WAIT) -> dict[str, Any]:
        """The `count`-th request with this method, once it has arrived (read off the wire, not off `requests`,
        which the answering loop fills a moment later)."""
        seen = 0

        def nth(message: dict[str, Any]) -> bool:
            nonlocal seen
            if message.get("method") == method and "id" in message:
                seen += 1  # RawClient.wait_for shows each message to the predicate once, in order
            return seen == count

        return await self.client.wait_for(nth, timeout)

    # --- the answering loop ---

    async def _serve(self) -> None:
        # Short waits and a flag, not only a cancel: on Python 3.11 `asyncio.wait_for` (inside `RawClient.wait_for`)
        # swallows a cancel that races with the awaited event, and the loop would then wait on forever.
        while not self._stopped:
            try:
                request = await self.client.wait_for(self._unseen_request, timeout=0.2)
            except TimeoutError:
                continue
            except AssertionError:  # the server closed stdout
                return
            self._seen.add(request["id"])
            self.requests.append(request)
            task = asyncio.create_task(self._answer(request))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    def _unseen_request(self, message: dict[str, Any]) -> bool:
        return "method" in message and "id" in message and message["id"] not in self._seen

    async def _answer(self, request: dict[str, Any]) -> None:
        method = request["method"]
        params = request.get("params") or {}
        terminal_id = str(params.get("terminalId"))
        result: dict[str, Any] | None
        if method == "session/request_permission":
            choice = self.permission(params)
            if choice is None:
                return
            result = {"outcome": {"outcome": "selected", "optionId": choice}}
        elif method == "terminal/create":
            created = f"term_{next(self._terminal_ids)}"
            self._created[request["id"]] = created
            result = {"terminalId": created}
        elif method == "terminal/wait_for_exit":
            if self.exit_status is None:
                await self._ended.setdefault(terminal_id, asyncio.Event()).wait()
                result = {"exitCode": None, "signal": "SIGKILL"}
            else:
                result = dict(self.exit_status)
        elif method == "terminal/output":
            result = {"output": self.output, "truncated": self.truncated}
            if self.exit_status is not None:
                result["exitStatus"] = dict(self.exit_status)
        elif method in ("terminal/kill", "terminal/release"):
            self._ended.setdefault(terminal_id, asyncio.Event()).set()
            delay = self.kill_delay if method == "terminal/kill" else self.release_delay
            if delay == NEVER:
                return
            await asyncio.sleep(delay)
            result = {}
        else:
            await self._send({"id": request["id"], "error": {"code": -32601, "message": f"Method not found: {method}"}})
            return
        await self._send({"id": request["id"], "result": result})

    async def _send(self, message: dict[str, Any]) -> None:
        # The server may already be gone (the test ended it); an answer nobody reads is no failure.
        with contextlib.suppress(ConnectionError, RuntimeError):
            await self.client.send(message)
