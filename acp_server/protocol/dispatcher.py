"""The ACP side of one editor's connection behind the `Dispatcher` interface the JSON-RPC connection calls
(prepare, answer, notify, closing, exiting): it admits prompts as their lines are read, routes requests and
notifications to the handlers of the version the connection negotiated, titles sessions after their first turn (the
model's title, else the first prompt's first words), and winds the connection down at its end.

It works with the agent (what every editor shares, agent/agent.py) and the editor's connection (what this one has,
protocol/editor_connection.py); the handlers get the same two, never this object. The version is chosen once per
connection, by `initialize`: from then on the connection is served that version's `Version` (its method tables,
what admission adds, how the errors are worded), and no handler asks which version it speaks. The request handlers
live in `handlers.py`, `session_handlers.py` and `v2/`; their tables are handed in, so this module depends on no
handler: the start-up side's as tables, the deferred side's by wire name only (`Version.later`; their table comes
once the deferred side is loaded, `Version.later_methods`, and a request for one of them waits for that load:
protocol/deferred.py).

At its end a connection cancels only its own sessions' turns (`closing`); the agent's own end (its store, its
processes) comes with the end of the last connection of a process that has one (stdio: `ends_agent`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from acp_server.agent.sessions.runs import RunContext, RunState
from acp_server.errors import (
    MissingCredentialsError,
    ModelSpecError,
    PromptRejectedError,
    SessionLeasedError,
    SubagentSessionError,
    UnknownSessionError,
)
from acp_server.jsonrpc.connection import STORE_WAIT_TIMEOUT
from acp_server.jsonrpc.rpc import ErrorCode, IncomingRequest, RpcError, dispatch, error_message, method_table
from acp_server.protocol.context import Handler, NotificationHandler, RequestContext
from acp_server.protocol.editor_connection import EditorConnection
from acp_server.protocol.initialize import NO_CAPABILITIES, Capabilities
from acp_server.protocol.params import INITIALIZE, INITIALIZE_V2, wire
from acp_server.protocol.v2.negotiation import negotiate
from acp_server.protocol.wire_errors import rpc_error

if TYPE_CHECKING:
    from acp_server.agent.agent import Agent
    from acp_server.jsonrpc.rpc import Methods

__all__ = ["AcpDispatcher", "Version"]

log = logging.getLogger(__name__)

# v2's `RequestId` is a string or an integer and MUST NOT be null (schema 2.4.0 `$defs/RequestId`), and a v2 result's
# `id` is a `RequestId`: a request with `id: null` cannot get a result, so on v2 it is an invalid request. Base
# JSON-RPC (and so v1) allows a null id, and keeps it.
NULL_ID_V2 = "Invalid request: a v2 request id is a string or an integer, never null"
# Read as the line is read (admission), imported with the first prompt (protocol/params.py).
PROMPT = wire("PromptRequest")


@dataclass(frozen=True, slots=True)
class Version:
    """What a connection that negotiated one protocol version is served: its method tables (the errors its handlers
    let out worded by `errors`, protocol/wire_errors.py) and what its admission adds once a prompt is admitted (v2:
    the held prompts an `interrupt` withdrew are answered at once, protocol/v2/withdrawals.py)."""

    methods: Mapping[str, Handler]
    notifications: Mapping[str, NotificationHandler]
    errors: Callable[[Exception], RpcError | None] = rpc_error
    admitted: Callable[[EditorConnection, RunContext], None] = lambda connection, run: None
    # The methods the deferred side serves, by wire name (`later`), and their table, which comes with the deferred
    # side once it is loaded (`later_methods`: the composition root's plain import of protocol/deferred_methods.py).
    later: frozenset[str] = frozenset()
    later_methods: Callable[[], Mapping[str, Handler]] = dict


class AcpDispatcher:
    """The ACP side of one editor's connection, as the JSON-RPC connection sees it (jsonrpc/connection.py
    `Dispatcher`)."""

    def __init__(
        self,
        agent: Agent,
        connection: EditorConnection,
        *,
        v1: Version,
        v2: Version | None = None,
        on_exit: Callable[[], None] = lambda: None,
        ends_agent: bool = True,
    ) -> None:
        """`ends_agent`: this connection's end is the agent's (stdio, the transport with exactly one connection):
        at its end the agent's store is closed and its processes are killed too."""
        self.agent = agent
        self.connection = connection
        self._v1 = (method_table(v1.methods, v1.errors), v1)
        # What a connection whose `initialize` chose v2 serves (protocol/v2/handlers.py).
        self._v2 = (method_table(v2.methods, v2.errors), v2) if v2 is not None else self._v1
        # The version served: v1 until an `initialize` chooses v2 (`_handshake`), then that one for good.
        self._methods: Methods
        self._methods, self._version = self._v1
        # Each version's deferred-side table, once the deferred side is loaded and a request for it came.
        self._later_tables: dict[int, Methods] = {}
        self._on_exit = on_exit
        self._ends_agent = ends_agent

    # --- Dispatcher ---

    def prepare(self, request: IncomingRequest) -> RequestContext:
        context = RequestContext(self.agent, self.connection, request.id)
        if request.id is None and self._speaks_v2(request):
            # Decided here, before a handshake could change the version; answered as it is, nothing of it runs.
            context.refused = RpcError(ErrorCode.INVALID_REQUEST, NULL_ID_V2)
            return context
        if request.method == "session/prompt" and isinstance(request.params, dict):
            self._admit(context, request.params)
        elif request.method == "initialize":
            handshake = self.connection.handshake
            handshake.initialize_read()
            context.after.append(handshake.initialize_answered)  # first: what waits for it goes on
            if isinstance(request.params, dict):
                try:
                    self._handshake(context, request.params)
                except BaseException:  # answered -32603 by the connection, with no response to run `after`
                    handshake.initialize_answered()
                    raise
        return context

    def _speaks_v2(self, request: IncomingRequest) -> bool:
        """Whether this request is one of a v2 connection: the connection speaks v2, or it is the `initialize` that
        will choose v2."""
        handshake = self.connection.handshake
        if handshake.v2:
            return True
        params = request.params
        requested = (
            params.get("protocolVersion") if request.method == "initialize" and isinstance(params, dict) else None
        )
        if type(requested) is not int or handshake.client_capabilities is not None:
            return False  # no version asked for, or the connection already chose v1
        try:
            return negotiate(requested, self.agent.config.protocol) == 2
        except RpcError:
            return False

    def _handshake(self, context: RequestContext, params: dict[str, Any]) -> None:
        """Applied in reader order, so a request pipelined right behind `initialize` already sees it. The version is
        chosen before anything else is parsed: it decides what the rest of the params mean (ACP-V2.md §2)."""
        requested = params.get("protocolVersion")
        if type(requested) is not int:
            return  # the handler validates and answers -32602, naming protocolVersion
        handshake = self.connection.handshake
        try:
            version = negotiate(requested, self.agent.config.protocol)
            # The version is chosen once per connection: after a handshake (either way) another one is refused;
            # the same one is answered again as before.
            if version != handshake.version and (handshake.v2 or handshake.client_capabilities is not None):
                raise RpcError(
                    ErrorCode.INVALID_REQUEST,
                    f"Invalid request: this connection already speaks ACP v{handshake.version}",
                )
        except RpcError as exc:
            context.admission_error = exc
            return
        if version == 2:
            try:
                initialize_v2 = INITIALIZE_V2.validate(params)
            except RpcError:
                return
            handshake.version = 2
            self._methods, self._version = self._v2  # chosen once: this connection is served v2 from now on
            handshake.auth_problem = self.connection.credentials.problem
            # Once offered, `auth/*` stay served for the connection: a client that logged in and sends `initialize`
            # again (answered as before) may still log out.
            handshake.auth_offered = handshake.auth_offered or handshake.auth_problem is not None
            # v2 has no client files or terminals; its elicitation markers are v1's (`{}` advertises a mode). Notices
            # and compactions need no client capability in v2 (ACP-V2.md §18): every v2 client is shown them as such.
            offered = initialize_v2.capabilities if isinstance(initialize_v2.capabilities, dict) else {}
            handshake.client_capabilities = Capabilities(
                session={"notices": {}, "compaction": {}}, elicitation=offered.get("elicitation")
            )
            return
        try:
            initialize_request = INITIALIZE.validate(params)
        except RpcError:
            return  # the handler validates again and answers -32602
        context.validated_params = initialize_request
        capabilities = initialize_request.client_capabilities
        if self.connection.principal.remote:
            # A remote client's files and terminals are on its own machine: the agent works on the server's, with its
            # own tools, within the principal's roots (REMOTE.md decision 5).
            capabilities = capabilities._replace(fs=NO_CAPABILITIES.fs, terminal=False)
        handshake.client_capabilities = capabilities
        handshake.auth_problem = self.connection.credentials.problem

    def _admit(self, context: RequestContext, params: dict[str, Any]) -> None:
        try:
            prompt = PROMPT.validate(params)
        except RpcError:
            return  # the handler validates again and answers -32602
        context.validated_params = prompt
        connection = self.connection
        try:
            session = connection.session(prompt.session_id)  # this connection's own sessions only
            # The session exists, so the deferred side is loaded (protocol/deferred.py): these are look-ups.
            from acp_server.agent.sessions.turn import admit_prompt  # noqa: PLC0415 (start-up: the deferred side loads after `initialize`)
            from acp_server.protocol.prompts import check_media, prompt_input  # noqa: PLC0415 (start-up: the deferred side loads after `initialize`)

            accepts = self.agent.config.accepts(session.model)
            # An image for a model that takes none is never silently dropped: refused, naming the block and model.
            check_media(prompt, session.model, accepts)
            context.run = admit_prompt(
                self.agent.turns,
                context.request_id,
                prompt.session_id,
                prompt_input(prompt, accepts),
                connection.session,
            )
            self._version.admitted(connection, context.run)
        # Refused (the prompt's handler raises it, answered as protocol/wire_errors.py says): by the session's policy,
        # or by its model (a script it refuses, a missing key, a bad spec), or an id this connection has not open.
        except (
            RpcError,
            PromptRejectedError,
            MissingCredentialsError,
            ModelSpecError,
            UnknownSessionError,
            SubagentSessionError,
            SessionLeasedError,
        ) as exc:
            context.admission_error = exc
            return
        connection.prompts[context.request_id] = context.run

    async def answer(self, request: IncomingRequest, context: RequestContext) -> dict[str, Any] | None:
        if self._answered_by_withdrawal(context):
            return None
        response = await self._answer(request, context)
        return None if self._answered_by_withdrawal(context) else response

    def _answered_by_withdrawal(self, context: RequestContext) -> bool:
        """A held v2 prompt whose -32800 its cancel already sent (before or while its handler waited)."""
        withdrawn, run = self.connection.withdrawn, context.run
        if run is None or run not in withdrawn:
            return False
        withdrawn.discard(run)
        return True

    async def _answer(self, request: IncomingRequest, context: RequestContext) -> dict[str, Any]:
        if context.refused is not None:
            return error_message(request.id, context.refused.code, context.refused.message)
        methods, version = self._methods, self._version
        handshake = self.connection.handshake
        later = request.method in version.later
        if request.method.startswith("session/") and (later or request.method in methods):
            try:
                # Before params are validated: the first thing to fix is the order.
                handshake.require_initialized()
            except RpcError as exc:
                return error_message(request.id, exc.code, exc.message)
        if request.method != "initialize":
            # Pipelined behind an `initialize`: validated and run after its answer, so nothing (not even the import
            # of a params model) comes before that answer, and nothing is answered before it.
            await handshake.answered()
            # The tables of the version that `initialize` chose.
            methods, version = self._methods, self._version
            later = request.method in version.later
        if later:
            try:
                methods = await self._deferred_side(version)
            except RpcError as exc:  # a broken install: this request is told, and the connection goes on
                return error_message(request.id, exc.code, exc.message)
            with self.agent.side.serving():  # the rest of the side loads once no such request is served
                return await dispatch(request, methods, context)
        return await dispatch(request, methods, context)

    async def _deferred_side(self, version: Version) -> Methods:
        """The deferred side's methods of `version`, once it is loaded: a request for one waits for that one load,
        behind the requests that waited before it (protocol/deferred.py), so pipelined requests take effect in
        order."""
        await self.agent.side.load()
        table = self._later_tables.get(id(version))
        if table is None:
            table = self._later_tables[id(version)] = method_table(version.later_methods(), version.errors)
        return table

    def after_response(self, context: RequestContext) -> None:
        run = context.run
        if run is not None:
            prompts = self.connection.prompts
            if prompts.get(context.request_id) is run:
                del prompts[context.request_id]
            from acp_server.agent.sessions.turn import release_prompt  # noqa: PLC0415 (start-up: the deferred side loads after `initialize`)
            from acp_server.agent.titles import title_session  # noqa: PLC0415 (start-up: the deferred side loads after `initialize`)

            first_prompt = release_prompt(self.agent.turns, run)
            if first_prompt is not None:
                self.agent.spawn(title_session, self.agent, run.session, first_prompt)
        for follow_up in context.after:
            follow_up()

    def notify(self, method: str, params: Any) -> None:
        entry = self._version.notifications.get(method)
        if entry is None:
            log.debug("ignored notification %s", method)
            return
        reader, handler = entry
        try:
            validated = reader.validate(params if params is not None else {})
        except RpcError as exc:
            log.warning("ignored %s: %s", method, exc.message)
            return
        handler(self.connection, validated)

    # --- the connection's end (and, for stdio's one connection, the agent's) ---

    def closing(self) -> None:
        agent = self.agent
        if self._ends_agent:
            agent.closing(STORE_WAIT_TIMEOUT)  # every turn: all are this connection's
            return
        # Only this editor's sessions: their turns are cancelled as at EOF, their servers stopped; the sessions
        # themselves stay in the store, for another connection to load (REMOTE.md decision 6).
        for session in self.connection.sessions():
            agent.runs.interrupt(session.session_id)
            if session.mcp is not None:
                session.mcp.stop()

    async def turns_ended(self) -> None:
        while running := [run for run in self._running() if run.state is not RunState.ENDED]:
            # Each ends within the cleanup deadline (all were cancelled at `closing`); one that hands the session
            # over puts its successor (a steering prompt, recorded only then) in the registry for the next look.
            await running[0].wait_ended()
        if self._ends_agent:
            # The tool calls that ignored their cancel and outlived their turns (cancelled at `closing`): waited for
            # within the same shutdown deadline as the turns, then left behind (`exiting`); they are no child of the
            # connection's task group, so `serve()` never waits for them (runtime/call_bodies.py).
            await self.agent.calls.wait_all()

    def _running(self) -> list[RunContext]:
        return self.agent.runs.current() if self._ends_agent else self.connection.running()

    async def drain(self) -> None:
        if self._ends_agent:
            await self.agent.drain()
            return
        agent = self.agent
        for session in self.connection.sessions():  # detached: a later connection may load them again
            await agent.calls.close(session.session_id, agent.config.cleanup_deadline)
            if agent.sessions.get(session.session_id) is session:  # not one another connection loaded meanwhile
                agent.sessions.discard(session.session_id)
            session.edge = None
            # No connection here uses it now: its lease goes (PostgreSQL), for another replica to load it at once.
            await agent.leases.release(session.session_id)

    def exiting(self) -> None:
        if self._ends_agent:
            if left := self.agent.calls.left_behind():
                log.warning("%d tool call(s) ignoring cancellation still running at exit; left behind", left)
            self.agent.exiting()
        self._on_exit()

    async def released(self, timeout: float) -> None:
        if self._ends_agent:
            await self.agent.processes.release(timeout)
