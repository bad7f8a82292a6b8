"""Speak ACP v1 or v2 over a `RawClient`, so a test that states one promise runs it in each version's wire shape.

Many invariants hold the same way on both versions and differ only in where the wire says so (ACP-V2.md §20.7): v1
answers the prompt with its stop reason when the turn ends; v2 answers it `{messageId}` when it is inserted and ends
the work with the session's `idle` `state_update` carrying the stop reason. A tool call a cancel ends is `failed` on v1
and `cancelled` on v2 (v2 has the status). Those differences live here, one small class per version, and a test
parametrized by `version` (the `acp` fixture of tests/conftest.py, ids v1/v2) reads as the promise it checks. What only
one version has (v2's `tool_call/cancel`, `terminal/cancel`, held prompts and their insertion order, the
`requires_action` state; v1's refused busy prompt) stays in single-version tests that use `RawClient` directly, or
behind an `isinstance(acp, AcpV2)` for a check only v2 can make.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any, ClassVar

from tests.support.harness import T_WAIT, RawClient

__all__ = ["VERSIONS", "Acp", "AcpV1", "AcpV2", "Turn"]


@dataclass(frozen=True)
class Turn:
    """One prompt sent: its session and request id."""

    session_id: str
    request_id: Any
    sent: float  # when its line was flushed (time.monotonic); 0 for a message not sent by `prompt`


@dataclass
class Acp:
    """The version-neutral moves of a test: open the connection, make a session, prompt, wait for the end of the work
    and read its stop reason. Subclasses say how each looks on the wire."""

    client: RawClient
    version: ClassVar[str]
    # The status a cancel leaves on a tool call it ended.
    cancelled_call_status: ClassVar[str]
    # A request the server sends the client (through the `test_client_request` tool) that the test may leave
    # unanswered, and an answer to it that comes too late to matter.
    held_request: ClassVar[dict[str, Any]]
    late_answer: ClassVar[dict[str, Any]]
    # Each session's prompts in the order they were written, and those withdrawn before they ran: on v2 a prompt's
    # work ends with the session's nth idle, n counting only the prompts that were not withdrawn.
    _prompts: defaultdict[str, list[Any]] = field(default_factory=lambda: defaultdict(list))
    _withdrawn: set[Any] = field(default_factory=set)

    async def initialize(self, capabilities: dict[str, Any] | None = None) -> dict[str, Any]:
        raise NotImplementedError

    async def new_session(self, cwd: str = "/tmp") -> str:
        raise NotImplementedError

    def session_new_params(self, cwd: str = "/tmp") -> dict[str, Any]:
        """The params of a plain `session/new` in this version (to send it by hand and time its answer)."""
        raise NotImplementedError

    def call_status(self, session_id: str, call_id: str) -> Any:
        """The status the tool call `call_id` was last shown with."""
        raise NotImplementedError

    def calls_started(self, session_id: str) -> list[dict[str, Any]]:
        """The update that showed each tool call of the session first, in order."""
        raise NotImplementedError

    def prompt_message(self, session_id: str, script: list[dict[str, Any]]) -> tuple[dict[str, Any], Turn]:
        """A prompt not yet sent (to write it together with other lines), and the turn it will be."""
        message = self.client.prompt_message(session_id, script)
        self._prompts[session_id].append(message["id"])
        return message, Turn(session_id, message["id"], 0.0)

    async def prompt(self, session_id: str, script: list[dict[str, Any]]) -> Turn:
        """Send a prompt (on its own, at once) and return its turn; `end` waits for the turn's end."""
        message, turn = self.prompt_message(session_id, script)
        sent = await self.client.send(message)
        return Turn(turn.session_id, turn.request_id, sent)

    async def prompt_with(self, params: dict[str, Any]) -> Turn:
        """Send `session/prompt` with exactly these params (a real model's prompt: no script) and return its turn."""
        session_id: str = params["sessionId"]
        request_id = self.client.next_id()
        self._prompts[session_id].append(request_id)
        sent = await self.client.send({"id": request_id, "method": "session/prompt", "params": params})
        return Turn(session_id, request_id, sent)

    def nth(self, turn: Turn) -> int:
        """Which of its session's works this turn's is (1-based), not counting prompts withdrawn before they ran."""
        ran = [r for r in self._prompts[turn.session_id] if r not in self._withdrawn]
        return ran.index(turn.request_id) + 1

    async def end(self, turn: Turn, timeout: float = T_WAIT) -> dict[str, Any]:
        """The message that ends the turn's work: v1 the prompt's response, v2 the session's idle."""
        raise NotImplementedError

    async def claimed(self, turn: Turn, timeout: float = T_WAIT) -> dict[str, Any]:
        """The answer to a prompt a cancel claimed while it waited behind the running work (I10's epoch rule): it
        never runs. v1 answers it `cancelled`; v2 withdraws it `-32800` (it was never inserted, so no idle)."""
        raise NotImplementedError

    def stop_reason(self, end: dict[str, Any]) -> Any:
        raise NotImplementedError

    def assert_stopped(self, end: dict[str, Any], reason: str) -> None:
        """The work ended with `reason`, said the way the version says it (v1: the result is exactly that)."""
        raise NotImplementedError

    def failure(self, end: dict[str, Any]) -> dict[str, Any]:
        """The error a failed work ended with (asserting it ended as a failure in this version's shape)."""
        raise NotImplementedError

    def assert_failed(self, end: dict[str, Any]) -> None:
        """The work ended with a model failure, said the way the version says it."""
        self.failure(end)

    async def stopped(self, turn: Turn, reason: str, timeout: float = T_WAIT) -> dict[str, Any]:
        """Wait for the turn's end, assert it says `reason`, and return the ending message."""
        end = await self.end(turn, timeout)
        self.assert_stopped(end, reason)
        return end


class AcpV1(Acp):
    """ACP v1: the prompt's response carries the stop reason; a model failure is a JSON-RPC error."""

    version = "v1"
    cancelled_call_status = "failed"
    held_request: ClassVar[dict[str, Any]] = {"method": "fs/read_text_file", "params": {"path": "/x"}}
    late_answer: ClassVar[dict[str, Any]] = {"content": "late"}

    async def initialize(self, capabilities: dict[str, Any] | None = None) -> dict[str, Any]:
        return await self.client.initialize(capabilities)

    async def new_session(self, cwd: str = "/tmp") -> str:
        return await self.client.new_session(cwd)

    def session_new_params(self, cwd: str = "/tmp") -> dict[str, Any]:
        return {"cwd": cwd, "mcpServers": []}

    def calls_started(self, session_id: str) -> list[dict[str, Any]]:
        """v1: the `tool_call` updates."""
        return self.client.updates(session_id, "tool_call")

    def call_status(self, session_id: str, call_id: str) -> Any:
        """v1: the call's last `tool_call_update`, which must carry the status."""
        return [u for u in self.client.updates(session_id, "tool_call_update") if u["toolCallId"] == call_id][-1][
            "status"
        ]

    async def end(self, turn: Turn, timeout: float = T_WAIT) -> dict[str, Any]:
        return await self.client.response(turn.request_id, timeout)

    async def claimed(self, turn: Turn, timeout: float = T_WAIT) -> dict[str, Any]:
        answer = await self.client.response(turn.request_id, timeout)
        self.assert_stopped(answer, "cancelled")
        return answer

    def stop_reason(self, end: dict[str, Any]) -> Any:
        return end["result"]["stopReason"]

    def assert_stopped(self, end: dict[str, Any], reason: str) -> None:
        assert end.get("result") == {"stopReason": reason}, end

    def failure(self, end: dict[str, Any]) -> dict[str, Any]:
        """v1: the prompt is answered with the error, never a result."""
        assert "error" in end and "result" not in end, end
        error: dict[str, Any] = end["error"]
        return error


class AcpV2(Acp):
    """ACP v2: the prompt is answered `{messageId}` when inserted; the work ends with the session's `idle`."""

    version = "v2"
    cancelled_call_status = "cancelled"
    # v2's client has no `fs` methods unless it says so: an extension request the scripted client never answers.
    held_request: ClassVar[dict[str, Any]] = {"method": "_test/hold", "params": {}}
    late_answer: ClassVar[dict[str, Any]] = {}

    async def initialize(self, capabilities: dict[str, Any] | None = None) -> dict[str, Any]:
        return await self.client.initialize_v2(capabilities)

    async def new_session(self, cwd: str = "/tmp") -> str:
        return await self.client.new_session_v2(cwd)

    def session_new_params(self, cwd: str = "/tmp") -> dict[str, Any]:
        return {"cwd": cwd}  # v2: `mcpServers` may be left out

    def calls_started(self, session_id: str) -> list[dict[str, Any]]:
        """v2: each call's first `tool_call_update` (v2 has one upsert kind; the first one creates the call)."""
        seen: set[str] = set()
        first = []
        for update in self.client.updates(session_id, "tool_call_update"):
            if update["toolCallId"] not in seen:
                seen.add(update["toolCallId"])
                first.append(update)
        return first

    def call_status(self, session_id: str, call_id: str) -> Any:
        """v2: the status of the call's last upsert that carried one (upserts carry only what changed)."""
        return [
            u["status"]
            for u in self.client.updates(session_id, "tool_call_update")
            if u["toolCallId"] == call_id and "status" in u
        ][-1]

    def states(self, session_id: str) -> list[str]:
        """The session's `state_update` states, in wire order."""
        return [u["state"] for u in self.client.states(session_id)]

    async def inserted(self, turn: Turn, timeout: float = T_WAIT) -> dict[str, Any]:
        """The prompt's answer, which on v2 is its insertion: `{messageId}`."""
        answer = await self.client.response(turn.request_id, timeout)
        assert "messageId" in answer.get("result", {}), answer
        return answer

    async def end(self, turn: Turn, timeout: float = T_WAIT) -> dict[str, Any]:
        await self.inserted(turn, timeout)
        return await self.client.idle(turn.session_id, self.nth(turn), timeout)

    async def claimed(self, turn: Turn, timeout: float = T_WAIT) -> dict[str, Any]:
        answer = await self.client.response(turn.request_id, timeout)
        assert answer.get("error", {}).get("code") == -32800, answer
        self._withdrawn.add(turn.request_id)  # never inserted: it has no work, and no idle of its own
        return answer

    def stop_reason(self, end: dict[str, Any]) -> Any:
        return end["params"]["update"].get("stopReason")

    def assert_stopped(self, end: dict[str, Any], reason: str) -> None:
        """The idle says `reason`, and only a failure carries an error."""
        assert self.stop_reason(end) == reason and "error" not in end["params"]["update"], end

    def failure(self, end: dict[str, Any]) -> dict[str, Any]:
        """v2: the prompt was answered at insertion; the idle says `error` and carries the error."""
        assert self.stop_reason(end) == "error" and "error" in end["params"]["update"], end
        error: dict[str, Any] = end["params"]["update"]["error"]
        return error


VERSIONS: dict[str, type[Acp]] = {AcpV1.version: AcpV1, AcpV2.version: AcpV2}
