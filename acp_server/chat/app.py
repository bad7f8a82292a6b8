"""`acp-server chat` entry point: start the agent, hold the conversation, always stop the agent, pick the exit code.

Exit codes: 0 when the one question ended `end_turn` (or the person left with /quit or Ctrl-D); 1 when it ended
otherwise (an error, a refusal, max tokens); 130 when Ctrl-C ended it; 2 when the agent could not be started, or
stopped, or refused the session, with the reason in plain words (and the end of the agent's stderr).

With `--connect URL` the agent is a remote `acp-server serve` (chat/remote.py) and the same conversation runs over a
WebSocket. A dropped connection is not the end there: the server cancelled the turn that was running (a disconnect is
that connection's EOF, REMOTE.md decision 6) and kept the session, so the chat says so, reconnects (its cookies
sent back, for a balancer's affinity), takes the session up again and goes on at the prompt. A one-shot question has
nothing to go on with: a drop ends it with status 2.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import TYPE_CHECKING, TypeVar

import anyio

from acp_server.chat.agent_child import AgentChild, AgentStartError
from acp_server.chat.arguments import ChatOptions, parse_options
from acp_server.chat.render import Renderer
from acp_server.chat.rpc_client import AgentGoneError
from acp_server.chat.session import ChatError, Conversation, ExitRequestedError
from acp_server.chat.terminal import LineInput, Terminal, read_all_stdin, stdin_is_a_terminal

if TYPE_CHECKING:
    from acp_server.chat.remote import RemoteAgent, WebSocketPipe

__all__ = ["main"]

E = TypeVar("E", bound=BaseException)

EXIT_FAILURE = 2
EXIT_INTERRUPTED = 130
# How long the agent may take to exit after its stdin closes: acp-server needs its cleanup deadline plus a second
# when a turn is running; after a second Ctrl-C the person wants out now.
STOP_GRACE = 3.0
URGENT_STOP_GRACE = 0.2
# --connect: how long the WebSocket close may take at the end; the longest wait between two reconnection tries.
CLOSE_WAIT = 1.0
RECONNECT_MAX_DELAY = 2.0


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
    if options.connect is not None:
        return await _chat_remote(options, renderer, question)
    try:
        agent = await AgentChild.start(options.agent)
    except AgentStartError as exc:
        renderer.error(f"acp-server chat: {exc}")
        return EXIT_FAILURE
    conversation = Conversation(renderer, LineInput(), agent.stdin, agent.stdout, os.getcwd())
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


class _Link:
    """A `--connect` chat's agent and its current connection: replaced on every reconnect, closed once at the end."""

    def __init__(self, agent: RemoteAgent, pipe: WebSocketPipe) -> None:
        self.agent = agent
        self.pipe = pipe


async def _chat_remote(options: ChatOptions, renderer: Renderer, question: str | None) -> int:
    try:
        import websockets  # noqa: PLC0415, F401 (only --connect needs it: an extra)
    except ImportError:
        from acp_server.chat.remote import INSTALL_HINT  # noqa: PLC0415

        renderer.error(f"acp-server chat: {INSTALL_HINT}")
        return EXIT_FAILURE
    from acp_server.chat.remote import ConnectError, RemoteAgent, read_token  # noqa: PLC0415 (only for --connect)

    assert options.connect is not None
    try:
        token = read_token(options.token_file, os.environ)
    except ValueError as exc:
        renderer.error(f"acp-server chat: {exc}")
        return EXIT_FAILURE
    agent = RemoteAgent(options.connect, token)
    try:
        link = _Link(agent, await agent.connect(options.startup_timeout))
    except ConnectError as exc:
        renderer.error(f"acp-server chat: {exc}")
        return EXIT_FAILURE
    conversation = Conversation(renderer, LineInput(), link.pipe.stdin, link.pipe.stdout, options.cwd or os.getcwd())
    code = EXIT_FAILURE
    exit_request: ExitRequestedError | None = None
    failure: str | None = None
    try:
        async with anyio.create_task_group() as tasks:
            await tasks.start(conversation.watch_interrupts)
            code = await _converse_remotely(conversation, link, options, question, renderer)
            tasks.cancel_scope.cancel()
    except* ExitRequestedError as group:
        exit_request = _first(group, ExitRequestedError)
    except* ChatError as group:
        failure = str(_first(group, ChatError))
    finally:
        conversation.rpc.closing()
        await link.pipe.close(CLOSE_WAIT)  # a normal close: the server ends this connection as at stdin EOF
    if exit_request is not None:
        return exit_request.code
    if failure is not None:
        renderer.error(f"acp-server chat: {failure}")
        return EXIT_FAILURE
    return code


async def _converse_remotely(
    conversation: Conversation,
    link: _Link,
    options: ChatOptions,
    question: str | None,
    renderer: Renderer,
) -> int:
    """The conversation, over as many connections as it takes: each drop is followed by a reconnection and the
    session taken up again, until the person leaves (or a one-shot question is lost with its connection)."""
    first = True
    lost_since: float | None = None  # when the session was last lost and not yet taken up again
    while True:
        try:
            async with anyio.create_task_group() as tasks:
                tasks.start_soon(conversation.rpc.run)
                if first:
                    await conversation.open(options.startup_timeout)
                else:
                    await conversation.reopen(options.startup_timeout)
                    lost_since = None
                    renderer.notice("reconnected: the session goes on")
                code = await (conversation.one_shot(question) if question is not None else conversation.repl(first))
                conversation.rpc.closing()
                tasks.cancel_scope.cancel()
            return code
        except* AgentGoneError:
            pass  # the connection dropped: below, outside the handler (it may wait, and raise)
        renderer.end_stream()
        if not conversation.started:
            raise ChatError("the server closed the connection before the session started")
        if question is not None:
            raise ChatError("the connection to the agent was lost during the turn")
        if conversation.turn_open:
            conversation.turn_open = False
            renderer.notice("connection lost: the running turn was cancelled by the server")
        renderer.notice("connection lost; reconnecting…")
        await link.pipe.close(CLOSE_WAIT)
        if lost_since is None:
            lost_since = anyio.current_time()
        else:  # a new connection dropped before the session was taken up: no quicker than a failed try, and bounded
            if anyio.current_time() - lost_since > options.reconnect_timeout:
                raise ChatError(f"could not take the session up again within {options.reconnect_timeout:g} s")
            await anyio.sleep(RECONNECT_MAX_DELAY)
        link.pipe = await _reconnect(link.agent, options)
        conversation.reattach(link.pipe.stdin, link.pipe.stdout)
        first = False


async def _reconnect(agent: RemoteAgent, options: ChatOptions) -> WebSocketPipe:
    """A new connection within `--reconnect-timeout`, trying again after a growing pause (a restarting server
    refuses for a while, a draining one answers 503); ChatError when the time is up or trying cannot help."""
    from acp_server.chat.remote import ConnectError  # noqa: PLC0415 (loaded already: this is --connect)

    delay = 0.1
    last = "no try was made"
    with anyio.move_on_after(options.reconnect_timeout):
        while True:
            try:
                return await agent.connect(options.startup_timeout)
            except ConnectError as exc:
                if exc.final:
                    raise ChatError(f"cannot reconnect: {exc}") from None
                last = str(exc)
            await anyio.sleep(delay)
            delay = min(delay * 2, RECONNECT_MAX_DELAY)
    raise ChatError(f"could not reconnect within {options.reconnect_timeout:g} s: {last}")


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
