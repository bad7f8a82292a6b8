"""Child sessions for the `delegate` tool: a subagent's turn, run inside the parent's tool call.

The child gets its own session id and run context (`parent_session_id` set) in the run registry, so a
`session/cancel` naming the child stops the child alone. Its turn runs in a cancel scope nested inside the parent's
turn, so cancelling the parent cancels the child, and the child's children, before the parent answers
(docs/interrupts.md I16). Clients never created the child, so it never speaks under its own id (decision 7 there): its
progress shows in the parent's `delegate` tool call, whose `_meta` names the child, and its requests to the editor go
out under the parent's session id, fenced by the parent's turn and by the `delegate` call's own fence once that call
is abandoned (a child tool that ignores the cancel must not reach the client after it: I6).
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable
from datetime import date
from pathlib import Path
from typing import TYPE_CHECKING, Any

from acp_server.agent.sessions.edge import provider_for
from acp_server.agent.sessions.inputs import Prompt
from acp_server.agent.sessions.runs import RunContext, Session
from acp_server.agent.sessions.turn_tools import tool_context, tool_ports
from acp_server.errors import ToolError
from acp_server.runtime.loop import fence_context, run_turn
from acp_server.runtime.model import (
    Message,
    ReplyStarted,
    TextDelta,
    TextOutput,
    ToolCall,
    ToolCallFinished,
    ToolCallStarted,
    ToolCallUpdated,
    ToolContentAppended,
    TurnEvent,
    TurnInput,
)
from acp_server.runtime.system_prompt import build_system_prompt
from acp_server.runtime.text_guard import redactor_for
from acp_server.runtime.tools import ToolBox, ToolContext

if TYPE_CHECKING:
    from acp_server.agent.sessions.services import TurnServices

__all__ = ["ChildSessions"]

SUBAGENT_NOTE = "You are a subagent: finish the task you were given, then reply with what the caller needs to know."


class ChildSessions:
    """The `Subagents` port of one parent turn."""

    def __init__(
        self,
        services: TurnServices,
        top: RunContext,
        parent: RunContext,
        tools: ToolBox,
        visible_call: str | None = None,
    ) -> None:
        """`top` is the client's turn (its session id and fence serve every descendant); `parent` is the run that
        calls `delegate`: the top turn itself, or a child whose own children these are. `tools` are the top turn's
        (the built-ins and the session's MCP tools). `visible_call` is the top-level `delegate` tool call the client
        sees, for a grandchild's permission questions (None at the top)."""
        self._services = services
        self._top = top
        self._parent = parent
        self._tools = tools
        self._visible_call = visible_call

    async def run(
        self,
        task: str,
        meta: dict[str, Any],
        call_id: str,
        emit: Callable[..., Awaitable[None]],
        *,
        fenced: Callable[[], bool] | None = None,
    ) -> str:
        """`fenced`: the fence of the `delegate` call this child runs in, when that call may be abandoned. The top
        turn's ports are not fenced when only that call is (`tool_call/cancel`), so the child's tools get the call's
        fence themselves: once it is up, what they ask for is refused, as in the call's own body (I6)."""
        services, top, parent = self._services, self._top, self._parent
        home = top.session
        child_id = f"sess_{uuid.uuid4().hex}"
        child_session = Session(
            child_id,
            home.cwd,
            home.additional_directories,
            (),
            client=home.client,
            mode=home.mode,
            model=home.model,
        )
        child_session.edge = home.edge  # its cancel comes from its parent's connection (RunRegistry.interrupt)
        prompt = Prompt(task, 1, lambda: [{"type": "text", "text": task}])
        child = RunContext(child_session, parent.request_id, prompt, parent_session_id=parent.session_id)
        child.start()  # admitted by its parent's `delegate` call: the work begins at once
        progress = _Progress(emit, call_id, child_id)
        await progress.announce()

        def probe(event: str, **fields: Any) -> None:
            services.probe(child, event, **fields)

        services.runs.register_child(child)
        try:
            with child.scope:
                provider = provider_for(services.providers, home, home.model)
                model_turn = provider.open_turn(
                    TurnInput(
                        session_id=child_id,
                        run_id=child.run_id,
                        turn_index=0,
                        meta=meta,
                        probe=probe,
                        session_services=child_session.services,
                        system_prompt=build_system_prompt(
                            cwd=home.cwd,
                            roots=(home.cwd, *home.additional_directories),
                            tools=self._tools.specs,
                            instructions=[(Path("(subagent)"), SUBAGENT_NOTE)],
                            today=date.today(),
                        ),
                        accepts=services.config.accepts(home.model),
                    )
                )
                # The editor knows the client's own session only; questions name the delegate call it can see.
                visible_call = self._visible_call or call_id
                ports = tool_ports(services, top, on_behalf_of=visible_call)
                grandchildren = ChildSessions(services, top, child, self._tools, visible_call)
                messages = [Message("user", task)]

                def child_tool_context(tool_call: ToolCall) -> ToolContext:
                    context = tool_context(services, top, ports, tool_call, emit=progress, subagents=grandchildren)
                    return context if fenced is None else fence_context(context, fenced)

                await run_turn(
                    model_turn,
                    messages,
                    self._tools,
                    progress,
                    tool_context=child_tool_context,
                    probe=probe,
                    max_requests=services.config.max_turn_requests,
                    redactor=redactor_for(services.config.held_secrets),
                )
            if child.scope.cancelled_caught:
                raise ToolError(f"the subagent {child_id} was cancelled")
            answer = next((m.content for m in reversed(messages) if m.role == "assistant"), "")
            await progress.finish(answer)
            return answer
        finally:
            services.runs.unregister_child(child)


class _Progress:
    """The child's turn, shown in the parent's `delegate` tool call as it goes: a line for each piece of its text,
    each tool it starts and how that ended, then its answer, each line sent once (`ToolContentAppended`)."""

    def __init__(self, emit: Callable[..., Awaitable[None]], call_id: str, child_id: str) -> None:
        self._emit = emit
        self._call_id = call_id
        self._meta = {"acpServer": {"childSessionId": child_id}}
        self._text: list[str] = []

    async def announce(self) -> None:
        await self._emit(ToolCallUpdated(self._call_id, meta=self._meta))

    async def __call__(self, event: TurnEvent) -> None:
        if isinstance(event, TextDelta):
            self._text.append(event.text)
        elif isinstance(event, ReplyStarted):
            await self._flush_text()
        elif isinstance(event, ToolCallStarted):
            await self._flush_text()
            await self._show(f"→ {event.title}")
        elif isinstance(event, ToolCallFinished):
            await self._show(f"  {'done' if event.ok else 'failed'}")

    async def finish(self, answer: str) -> None:
        self._text.clear()  # the answer is that text
        if answer:
            await self._show(answer)

    async def _flush_text(self) -> None:
        if self._text:
            text = "".join(self._text)
            self._text.clear()
            await self._show(text)

    async def _show(self, line: str) -> None:
        await self._emit(ToolContentAppended(self._call_id, TextOutput(line)))
