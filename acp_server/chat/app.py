"""`acp-server chat` entry point: start the agent, hold the conversation, always stop the agent, pick the exit code.

Exit codes: 0 when the one question ended `end_turn` (or the person left with /quit or Ctrl-D); 1 when it ended
otherwise (an error, a refusal, max tokens); 130 when Ctrl-C ended it; 2 when the agent could not be started, or
stopped, or refused the session, with the reason in plain words (and the end of the agent's stderr).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypeVar

import anyio

from acp_server.chat.agent_child import AgentChild, AgentStartError
from acp_server.chat.arguments import ChatOptions, parse_options
from acp_server.chat.render import Renderer
from acp_server.chat.rpc_client import AgentGoneError
from acp_server.chat.session import ChatError, Conversation, ExitRequestedError
from acp_server.chat.terminal import LineInput, Terminal, read_all_stdin, stdin_is_a_terminal

__all__ = ["main"]

E = TypeVar("E", bound=BaseException)

EXIT_FAILURE = 2
EXIT_INTERRUPTED = 130
# How long the agent may take to exit after its stdin closes: acp-server needs its cleanup deadline plus a second
# when a turn is running; after a second Ctrl-C the person wants out now.
STOP_GRACE = 3.0
URGENT_STOP_GRACE = 0.2


def main(argv: Sequence[str]) -> int:
    options = parse_options(argv)
    terminal = Terminal.stdout()
    try:
        return anyio.run(_chat, options, terminal, backend="asyncio")
    except KeyboardInterrupt:  # Ctrl-C before the signal receiver was in place
        terminal.write("\n")
        return EXIT_INTERRUPTED


async def _chat(options: ChatOptions, terminal: Terminal) -> int:
    renderer = Renderer(terminal)
    question = options.question
    if question is None and not stdin_is_a_terminal():
        question = (await read_all_stdin()).strip()
        if not question:
            renderer.error("acp-server chat: no question given (as an argument or on stdin)")
            return EXIT_FAILURE
    try:
        agent = await AgentChild.start(options.agent)
    except AgentStartError as exc:
        renderer.error(f"acp-server chat: {exc}")
        return EXIT_FAILURE
    conversation = Conversation(agent, renderer, LineInput())
    code, grace = EXIT_FAILURE, STOP_GRACE
    exit_request: ExitRequestedError | None = None
    failure: str | None = None
    gone = False
    try:
        async with anyio.create_task_group() as tasks:
            await tasks.start(conversation.watch_interrupts)
            tasks.start_soon(agent.drain_stderr)
            tasks.start_soon(conversation.rpc.run)
            await conversation.open(options.startup_timeout)
            code = await (conversation.one_shot(question) if question is not None else conversation.repl())
            conversation.rpc.closing()
            tasks.cancel_scope.cancel()
    except* ExitRequestedError as group:
        exit_request = _first(group, ExitRequestedError)
    except* ChatError as group:
        failure = str(_first(group, ChatError))
    except* AgentGoneError:
        gone = True
    finally:
        conversation.rpc.closing()
        if exit_request is not None and exit_request.urgent:
            grace = URGENT_STOP_GRACE
        if gone and exit_request is None:
            await agent.wait_exit(1.0)  # so the report can say how it ended, and in its own words
            await agent.finish_stderr(0.5)
        await agent.stop(grace)
    if exit_request is not None:
        return exit_request.code
    if gone:
        failure = _gone_report(agent, conversation.started)
    if failure is not None:
        renderer.error(f"acp-server chat: {failure}")
        return EXIT_FAILURE
    return code


def _first(group: BaseExceptionGroup[BaseException], kind: type[E]) -> E:
    for exc in group.exceptions:
        if isinstance(exc, BaseExceptionGroup):
            return _first(exc, kind)
        if isinstance(exc, kind):
            return exc
    raise AssertionError("except* matched a group without the kind it matched")


def _gone_report(agent: AgentChild, started: bool) -> str:
    status = agent.returncode
    how = "" if status is None else f" (killed by signal {-status})" if status < 0 else f" (exit status {status})"
    what = "stopped unexpectedly" if started else "exited before the session started"
    report = f"the agent {what}{how}"
    tail = agent.stderr_tail()
    if tail:
        report += "; it said:\n" + "\n".join(f"  {line}" for line in tail.splitlines())
    return report
