"""Composition root: build the agent (one per process: what every editor shares) with its plug-ins, and the
connection of each editor (`connect`: the JSON-RPC connection, the editor's ACP side and its dispatcher, with the
method tables of both protocol versions), and serve lines or stdio.

`serve(source, sink, config)` is the seam tests and embedders use; `serve_stdio(config)` is what the CLI runs. Both
serve exactly one connection on one agent (stdio is the transport with exactly one); `build_agent` and `connect`
serve any number (tests/integration/test_two_connections.py runs two on one agent).
"""

from __future__ import annotations

import gc
import logging
import os
import signal
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from anyio.lowlevel import checkpoint

from acp_server.agent.agent import Agent
from acp_server.agent.providers import close_providers
from acp_server.agent.sessions.owners import LOCAL, Owner
from acp_server.jsonrpc.connection import Connection
from acp_server.jsonrpc.rpc import load_jsonrpcserver
from acp_server.jsonrpc.transport import LineSink, LineSource, open_stdio, start_detached
from acp_server.protocol.deferred import Deferred
from acp_server.protocol.dispatcher import AcpDispatcher, Version
from acp_server.protocol.editor_connection import EditorConnection, EditorConnections
from acp_server.protocol.handlers import DEFERRED_SIDE_METHODS, METHODS, NOTIFICATIONS
from acp_server.protocol.plugins import Plugin
from acp_server.protocol.testmode.gates import GATES
from acp_server.protocol.v2.handlers import DEFERRED_SIDE_METHODS_V2, METHODS_V2, NOTIFICATIONS_V2
from acp_server.protocol.v2.withdrawals import admitted_v2
from acp_server.protocol.wire_errors import rpc_error_v2
from acp_server.runtime.model import Provider
from acp_server.runtime.providers import open_provider
from acp_server.runtime.text_guard import GuardedProvider, redactor_for
from acp_server.settings.config import Config

if TYPE_CHECKING:
    from acp_server.agent.sessions.edge import Edge
    from acp_server.agent.sessions.services import TurnServices
    from acp_server.protocol.context import Handler
    from acp_server.store import TurnEntry
    from acp_server.transcripts.record import Recorder

__all__ = [
    "Served",
    "build_agent",
    "build_server",
    "connect",
    "load_deferred_side",
    "load_turn_side",
    "serve",
    "serve_stdio",
]

log = logging.getLogger(__name__)

# After the protocol has shut down, how long the process may take to unwind before it exits regardless. Work that
# ignores cancellation sits in shielded scopes that no task group can end; leaving the process is the only way.
EXIT_UNWIND_SECONDS = 0.4
# What an editor (or a terminal, or a supervisor) sends to stop the agent: each is a clean shutdown, as at stdin EOF.
STOP_SIGNALS = (signal.SIGTERM, signal.SIGHUP, signal.SIGINT)
# The cyclic garbage collector's first-generation threshold (CPython's default is 700 allocations). Every streamed
# chunk allocates a few short-lived containers (a coroutine step, a future, the update's dicts) that reference
# counting frees within the loop's iteration; at the default, a collection runs every few hundred chunks and, through
# its older generations, keeps walking every live session's objects, so its cost grows with the number of sessions
# (bench/scale.py: a third of the CPU at 1,000 busy sessions). At this threshold the short-lived objects are mostly
# gone before a collection looks at them; cycles (a cancelled task's traceback) are still collected, but late: a quiet
# session may go hundreds of turns without a collection, so nothing large may hang on a cycle, or memory grows with
# every turn (a model call's request body did: issue 20, item 4, tests/e2e/test_model_call_memory.py).
GC_THRESHOLD = 50_000


async def load_deferred_side() -> None:
    """The part of the deferred side (protocol/deferred.py) its requests wait for, imported once `initialize` is
    answered, a step at a time with a checkpoint after each, so the loop goes on serving between two steps: the
    deferred side's method tables (the session methods) and the edge each connection builds with its first session;
    the steps before them, in the order they are needed, only cut the load into steps of a few milliseconds each.
    jsonrpcserver comes first: every request but a process's first `initialize` is dispatched through it
    (jsonrpc/rpc.py, in three steps of its own). pydantic comes next (the wire models, protocol/params.py), in three
    steps: it is the largest part. What only a turn needs is `load_turn_side`, imported after this."""
    await load_jsonrpcserver()
    await checkpoint()
    import pydantic_core  # noqa: PLC0415, F401 (start-up: a step of the deferred side's load)

    await checkpoint()
    import pydantic.main  # noqa: PLC0415, F401 (start-up: a step of the deferred side's load)

    await checkpoint()
    import acp_server.protocol.schema  # noqa: PLC0415 (start-up: a step of the deferred side's load)

    await checkpoint()
    import acp_server.store  # noqa: PLC0415 (start-up: a step of the deferred side's load)

    await checkpoint()
    import acp_server.agent.sessions.lifecycle  # noqa: PLC0415 (start-up: a step of the deferred side's load)

    await checkpoint()
    import acp_server.protocol.editor  # noqa: PLC0415 (start-up: a step of the deferred side's load)

    await checkpoint()
    import acp_server.protocol.v1.updates  # noqa: PLC0415 (start-up: a step of the deferred side's load)

    await checkpoint()
    import acp_server.protocol.v2.updates  # noqa: PLC0415 (start-up: a step of the deferred side's load)

    await checkpoint()
    import acp_server.protocol.acp_edge  # noqa: PLC0415 (start-up: a step of the deferred side's load)

    await checkpoint()
    import acp_server.protocol.session_handlers  # noqa: PLC0415 (start-up: a step of the deferred side's load)

    await checkpoint()
    import acp_server.protocol.deferred_methods  # noqa: PLC0415, F401 (start-up: the last step of the deferred side's load)


async def load_turn_side() -> None:
    """The rest of the deferred side: what only a turn needs (the tools, the turn), imported as
    `load_deferred_side` is, after it, while the requests that waited for it are served (protocol/deferred.py
    `load_rest`): `acp_server.cli.deferred_side`, the last, imports all of it."""
    import acp_server.runtime.tools  # noqa: PLC0415 (start-up: a step of the deferred side's load)

    await checkpoint()
    import acp_server.runtime.tools.files  # noqa: PLC0415 (start-up: a step of the deferred side's load)

    await checkpoint()
    import acp_server.runtime.tools.commands  # noqa: PLC0415 (start-up: a step of the deferred side's load)

    await checkpoint()
    import acp_server.runtime.tools.ask  # noqa: PLC0415 (start-up: a step of the deferred side's load)

    await checkpoint()
    import acp_server.runtime.loop  # noqa: PLC0415 (start-up: a step of the deferred side's load)

    await checkpoint()
    import acp_server.agent.sessions.turn  # noqa: PLC0415 (start-up: a step of the deferred side's load)

    await checkpoint()
    import acp_server.protocol.v2.prompt  # noqa: PLC0415 (start-up: a step of the deferred side's load)

    await checkpoint()
    import acp_server.cli.deferred_side  # noqa: PLC0415, F401 (start-up: the last step of the deferred side's load)


@dataclass(frozen=True, slots=True)
class Served:
    """What every connection of one agent is served: each version's method tables (the plug-ins' methods added to
    both) and the editors connected now."""

    v1: Version
    v2: Version
    extension_notifications: tuple[str, ...]
    editors: EditorConnections


def _read_legacy(update: Any) -> TurnEntry | None:
    """A schema-1 store's v1 update read as a record, on upgrade (protocol/v1/legacy.py): imported only then."""
    from acp_server.protocol.v1.legacy import entry_of  # noqa: PLC0415 (the store and sqlite3 load only when persistence is on)

    return entry_of(update)


def _deferred_methods() -> Mapping[str, Handler]:
    """The deferred side's v1 methods (`Version.later_methods`), asked for once it is loaded: a look-up then."""
    from acp_server.protocol.deferred_methods import DEFERRED_METHODS  # noqa: PLC0415 (start-up: the deferred side loads after `initialize`)

    return DEFERRED_METHODS


def _deferred_methods_v2() -> Mapping[str, Handler]:
    """The deferred side's v2 methods, as `_deferred_methods`."""
    from acp_server.protocol.deferred_methods import DEFERRED_METHODS_V2  # noqa: PLC0415 (start-up: the deferred side loads after `initialize`)

    return DEFERRED_METHODS_V2


def _prepare_first_prompt() -> None:
    """What a warm-up builds for the first prompt on the wire: its request model's validator (agent/warmup.py)."""
    from acp_server.protocol.schema import PromptRequest  # noqa: PLC0415 (start-up: pydantic loads after `initialize`)

    PromptRequest.model_rebuild()  # the deferred model's validator, now; nothing when it is built already


def build_agent(config: Config, *, owns_process: bool = False) -> tuple[Agent, Served]:
    """The agent for a configuration, with its plug-ins, and what its connections are served. `owns_process`: the
    agent is the whole process (the CLI), so at exit it may kill every descendant."""
    editors = EditorConnections()
    # The scripted model's gates are a product feature (docs/guide.md); the rest of the test machinery is for tests
    # only.
    plugins: list[Plugin] = [GATES]
    if config.test_mode:
        from acp_server.protocol.testmode.mode import test_mode  # noqa: PLC0415 (test mode only)

        plugins.append(test_mode(editors))

    redactor = redactor_for(config.held_secrets)

    def open_model(spec: str) -> Provider:
        # Every model call's text comes out valid Unicode and without the secrets the server holds.
        return GuardedProvider(open_provider(spec, default_model=config.model, base_url=config.base_url), redactor)

    methods = {**METHODS}
    notifications = {**NOTIFICATIONS}
    methods_v2 = {**METHODS_V2}
    notifications_v2 = {**NOTIFICATIONS_V2}
    for plugin in plugins:
        taken = methods.keys() | DEFERRED_SIDE_METHODS | methods_v2.keys() | DEFERRED_SIDE_METHODS_V2
        replaced = (plugin.methods.keys() & taken) | (plugin.notifications.keys() & notifications.keys())
        if replaced:
            raise ValueError(f"a plug-in may not replace {', '.join(sorted(replaced))}")
        methods.update(plugin.methods)
        notifications.update(plugin.notifications)
        methods_v2.update(plugin.methods)  # extensions (`_…`) are the same on both versions
        notifications_v2.update(plugin.notifications)

    def side(agent: Agent) -> Deferred[TurnServices]:
        def build_turns() -> TurnServices:
            from acp_server.cli.deferred_side import build_turns  # noqa: PLC0415 (start-up: the deferred side loads after `initialize`)

            return build_turns(agent, plugins)

        # The turn services and the rest of the deferred side: loaded once `initialize` is answered. What start-up
        # froze out of the collector's sight (`_tune_gc`) is frozen again with the deferred side, for the same reason.
        return Deferred(load_deferred_side, build_turns, gc.freeze if owns_process else lambda: None, load_turn_side)

    agent = Agent(
        config,
        open_model=open_model,
        side=side,
        read_legacy=_read_legacy,
        prepare_first_prompt=_prepare_first_prompt,
        start_detached=start_detached,
        owns_process=owns_process,
    )
    served = Served(
        v1=Version(methods, notifications, later=DEFERRED_SIDE_METHODS, later_methods=_deferred_methods),
        v2=Version(
            methods_v2,
            notifications_v2,
            rpc_error_v2,
            admitted_v2,
            later=DEFERRED_SIDE_METHODS_V2,
            later_methods=_deferred_methods_v2,
        ),
        extension_notifications=tuple(method for method in notifications if method.startswith("_")),
        editors=editors,
    )
    return agent, served


def _edge(editor: EditorConnection) -> Edge:
    """The editor's connection as the core's `Edge`, in the version it negotiated, with the sandbox the turn
    services hold (asked for by a turn's tools: a session opens before the turn services are built): built with its
    first session, once the deferred side is loaded."""
    from acp_server.protocol.acp_edge import AcpEdge  # noqa: PLC0415 (start-up: the deferred side loads after `initialize`)
    from acp_server.protocol.provider_methods import key_refused  # noqa: PLC0415 (start-up: with the edge, as above)

    agent = editor.agent
    return AcpEdge(
        editor.rpc,
        agent.config,
        agent.processes,
        editor.handshake,
        lambda: agent.turns.sandbox,
        routed=editor.credentials.routes.provider,
        key_refused=lambda spec: key_refused(editor, spec),
        mcp_messages=editor.mcp_messages,
    )


def connect(
    agent: Agent,
    served: Served,
    on_exit: Callable[[], None] = lambda: None,
    *,
    ends_agent: bool = False,
    principal: Owner = LOCAL,
    max_sessions: int | None = None,
) -> tuple[Connection, AcpDispatcher]:
    """One editor's connection to `agent`: the JSON-RPC connection and the ACP side it serves, in the version its
    `initialize` will choose. `ends_agent`: the connection's end is the agent's (stdio's one connection, which is
    the whole process: its logout forgets the process's keys, its statistics are the process's); `principal`: who it
    acts for (stdio: `local`); `max_sessions`: how many sessions it may have open at once (None: no limit)."""
    rpc = Connection(agent.config.cleanup_deadline)
    editor = EditorConnection(
        agent,
        rpc,
        _edge,
        served.extension_notifications,
        principal,
        whole_process=ends_agent,
        max_sessions=max_sessions,
    )
    served.editors.add(editor)

    def exiting() -> None:
        served.editors.discard(editor)  # its end: no longer one of the agent's editors
        # Its client's gateways end with it (REMOTE.md decision 10): their clients are closed once its turns have
        # ended, in the agent's task group while the agent runs on (stdio's one connection ends the process).
        dropped = editor.credentials.routes.forget()
        if dropped and not ends_agent and not agent.ending:
            agent.spawn(close_providers, dropped, editor.running(), agent.config.cleanup_deadline)
        on_exit()

    dispatcher = AcpDispatcher(agent, editor, v1=served.v1, v2=served.v2, on_exit=exiting, ends_agent=ends_agent)
    return rpc, dispatcher


def build_server(
    config: Config, on_exit: Callable[[], None] = lambda: None, *, owns_process: bool = False
) -> tuple[Agent, Connection, AcpDispatcher]:
    """The agent and its one connection (stdio's): the connection's end is the agent's."""
    agent, served = build_agent(config, owns_process=owns_process)
    rpc, dispatcher = connect(agent, served, on_exit, ends_agent=True)
    return agent, rpc, dispatcher


async def serve(source: LineSource, sink: LineSink, config: Config) -> None:
    agent, connection, dispatcher = build_server(config)
    async with agent.running():
        await connection.serve(dispatcher, source, sink)


def _arm_exit_watchdog(before_exit: Callable[[], None] = lambda: None) -> None:
    def leave() -> None:
        log.warning("abandoned work still running at exit; leaving without it")
        before_exit()
        logging.shutdown()
        os._exit(0)

    timer = threading.Timer(EXIT_UNWIND_SECONDS, leave)
    timer.daemon = True
    timer.start()


def _open_recorder(path: str) -> Recorder:
    from acp_server.transcripts.record import Recorder  # noqa: PLC0415 (only when recording a transcript)

    try:
        return Recorder.open(path)
    except OSError as exc:
        log.error("cannot record to %s: %s", path, exc)
        raise SystemExit(2) from None


def _tune_gc() -> None:
    """For a process this server owns: what start-up imported (modules, classes, schemas: never garbage) is moved out
    of the collector's sight, and the first generation's threshold raised (GC_THRESHOLD)."""
    gc.freeze()
    _, middle, old = gc.get_threshold()
    gc.set_threshold(GC_THRESHOLD, middle, old)


async def serve_stdio(config: Config) -> None:
    _tune_gc()
    recorder = _open_recorder(config.record) if config.record is not None else None
    before_exit = recorder.flush if recorder is not None else lambda: None
    try:
        agent, connection, dispatcher = build_server(
            config, on_exit=lambda: _arm_exit_watchdog(before_exit), owns_process=True
        )
        async with (
            agent.running(),
            open_stdio(config.max_line_bytes, connection.input_closed, STOP_SIGNALS) as (stdin_lines, stdout_sink),
        ):
            if recorder is None:
                await connection.serve(dispatcher, stdin_lines, stdout_sink)
            else:
                await connection.serve(dispatcher, recorder.source(stdin_lines), recorder.sink(stdout_sink))
    finally:
        if recorder is not None:
            recorder.close()
