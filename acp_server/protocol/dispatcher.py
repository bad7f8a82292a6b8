"""The ACP side of one connection behind the `Dispatcher` interface the connection calls (prepare, answer, notify,
closing, exiting): it admits prompts as their lines are read, routes requests and notifications to their handlers,
titles sessions after their first turn (the model's title, else the first prompt's first words), and winds everything
down at EOF.

The pieces it works with (the session table, the providers, authentication, the store, the run registry) are built
by the composition root (`server.py`) and handed in as `Parts`; the handlers get the same pieces, never this
object. The request handlers live in `handlers.py` (core methods) and `session_handlers.py` (the session lifecycle);
their tables are handed in too, so this module depends on no handler: the start-up side's as tables, the session
side's by wire name only (its table comes with the session side once it is loaded, `SessionSide.methods`, and a
request for one of its methods waits for that load: protocol/deferred.py).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Mapping
from typing import Any

from acp_server.agent.sessions.runs import RunState
from acp_server.errors import MissingCredentialsError, ModelSpecError, PromptRejectedError
from acp_server.jsonrpc.connection import STORE_WAIT_TIMEOUT
from acp_server.jsonrpc.rpc import (
    ErrorCode,
    IncomingRequest,
    Methods,
    RpcError,
    dispatch,
    error_message,
    method_table,
)
from acp_server.protocol.context import Handler, NotificationHandler, Parts, RequestContext
from acp_server.protocol.initialize import Capabilities
from acp_server.protocol.params import INITIALIZE, INITIALIZE_V2, wire
from acp_server.protocol.v2.negotiation import negotiate
from acp_server.protocol.v2.withdrawals import withdraw_held
from acp_server.protocol.wire_errors import rpc_error

__all__ = ["AcpDispatcher"]

log = logging.getLogger(__name__)

# v2's `RequestId` is a string or an integer and MUST NOT be null (schema 2.4.0 `$defs/RequestId`), and a v2 result's
# `id` is a `RequestId`: a request with `id: null` cannot get a result, so on v2 it is an invalid request. Base
# JSON-RPC (and so v1) allows a null id, and keeps it.
NULL_ID_V2 = "Invalid request: a v2 request id is a string or an integer, never null"
# Read as the line is read (admission), imported with the first prompt (protocol/params.py).
PROMPT = wire("PromptRequest")


class AcpDispatcher:
    """The ACP side of one connection, as the connection sees it (jsonrpc/connection.py `Dispatcher`)."""

    def __init__(
        self,
        parts: Parts,
        *,
        methods: Mapping[str, Handler],
        notifications: Mapping[str, NotificationHandler],
        methods_v2: Mapping[str, Handler] | None = None,
        notifications_v2: Mapping[str, NotificationHandler] | None = None,
        session_side_methods: Collection[str] = (),
        session_side_methods_v2: Collection[str] = (),
        on_exit: Callable[[], None] = lambda: None,
    ) -> None:
        self.parts = parts
        # Their errors are answered as the one mapping says (protocol/wire_errors.py): handlers translate nothing.
        self._methods = method_table(methods, rpc_error)
        self._notifications = notifications
        # What a connection whose `initialize` chose v2 serves (protocol/v2/handlers.py).
        self._methods_v2 = method_table(methods_v2 or methods, rpc_error)
        self._notifications_v2 = notifications_v2 or notifications
        # The methods the session side serves, by wire name, and once it is loaded their tables (v1, v2).
        self._later = frozenset(session_side_methods)
        self._later_v2 = frozenset(session_side_methods_v2)
        self._session_side_methods: tuple[Methods, Methods] | None = None
        self._on_exit = on_exit
        # What admission, release and titles use.
        self.runs = parts.runs
        self.prompts = parts.prompts
        self.connection = parts.connection
        self.sessions = parts.sessions
        self.session = parts.sessions.require
        self.provider_for = parts.providers.get

    # --- Dispatcher ---

    def prepare(self, request: IncomingRequest) -> RequestContext:
        context = RequestContext(self.parts, request.id)
        if request.id is None and self._speaks_v2(request):
            # Decided here, before a handshake could change the version; answered as it is, nothing of it runs.
            context.refused = RpcError(ErrorCode.INVALID_REQUEST, NULL_ID_V2)
            return context
        if request.method == "session/prompt" and isinstance(request.params, dict):
            self._admit(context, request.params)
        elif request.method == "initialize":
            handshake = self.parts.handshake
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
        if self.parts.handshake.v2:
            return True
        params = request.params
        requested = (
            params.get("protocolVersion") if request.method == "initialize" and isinstance(params, dict) else None
        )
        if type(requested) is not int or self.parts.handshake.client_capabilities is not None:
            return False  # no version asked for, or the connection already chose v1
        try:
            return negotiate(requested, self.parts.config.protocol) == 2
        except RpcError:
            return False

    def _handshake(self, context: RequestContext, params: dict[str, Any]) -> None:
        """Applied in reader order, so a request pipelined right behind `initialize` already sees it. The version is
        chosen before anything else is parsed: it decides what the rest of the params mean (ACP-V2.md §2)."""
        requested = params.get("protocolVersion")
        if type(requested) is not int:
            return  # the handler validates and answers -32602, naming protocolVersion
        handshake = self.parts.handshake
        try:
            version = negotiate(requested, self.parts.config.protocol)
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
            handshake.auth_problem = self.parts.auth.problem
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
        handshake.client_capabilities = initialize_request.client_capabilities
        handshake.auth_problem = self.parts.auth.problem

    def _admit(self, context: RequestContext, params: dict[str, Any]) -> None:
        try:
            prompt = PROMPT.validate(params)
        except RpcError:
            return  # the handler validates again and answers -32602
        context.validated_params = prompt
        try:
            model = self.session(prompt.session_id).model
            # The session exists, so the session side is loaded (protocol/deferred.py): these are look-ups.
            from acp_server.agent.sessions.turn import admit_prompt  # noqa: PLC0415 (start-up: the session side loads after `initialize`)
            from acp_server.protocol.prompts import check_media, prompt_command  # noqa: PLC0415 (start-up: the session side loads after `initialize`)

            accepts = self.parts.config.accepts(model)
            # An image for a model that takes none is never silently dropped: refused, naming the block and model.
            check_media(prompt, model, accepts)
            command = prompt_command(prompt, accepts)
            context.run = admit_prompt(self.parts.turns, context.request_id, prompt.session_id, command, self.session)
            if self.parts.handshake.v2:
                # The `interrupt` policy cancels what was admitted before this prompt: held prompts answer first.
                withdraw_held(self.parts, context.run.session)
        # Refused (the prompt's handler raises it, answered as protocol/wire_errors.py says): by the session's policy,
        # or by its model (a script it refuses, a missing key, a bad spec).
        except (RpcError, PromptRejectedError, MissingCredentialsError, ModelSpecError) as exc:
            context.admission_error = exc
            return
        self.prompts[context.request_id] = context.run

    async def answer(self, request: IncomingRequest, context: RequestContext) -> dict[str, Any] | None:
        if self._answered_by_withdrawal(context):
            return None
        response = await self._answer(request, context)
        return None if self._answered_by_withdrawal(context) else response

    def _answered_by_withdrawal(self, context: RequestContext) -> bool:
        """A held v2 prompt whose -32800 its cancel already sent (before or while its handler waited)."""
        withdrawn, run = self.parts.withdrawn, context.run
        if run is None or run not in withdrawn:
            return False
        withdrawn.discard(run)
        return True

    async def _answer(self, request: IncomingRequest, context: RequestContext) -> dict[str, Any]:
        if context.refused is not None:
            return error_message(request.id, context.refused.code, context.refused.message)
        v2 = self.parts.handshake.v2
        methods = self._methods_v2 if v2 else self._methods
        later = request.method in (self._later_v2 if v2 else self._later)
        if request.method.startswith("session/") and (later or request.method in methods):
            try:
                # Before params are validated: the first thing to fix is the order.
                self.parts.handshake.require_initialized()
            except RpcError as exc:
                return error_message(request.id, exc.code, exc.message)
        if request.method != "initialize":
            # Pipelined behind an `initialize`: validated and run after its answer, so nothing (not even the import
            # of a params model) comes before that answer, and nothing is answered before it.
            await self.parts.handshake.answered()
        if later:
            try:
                methods = await self._session_side(v2)
            except RpcError as exc:  # a broken install: this request is told, and the connection goes on
                return error_message(request.id, exc.code, exc.message)
        return await dispatch(request, methods, context)

    async def _session_side(self, v2: bool) -> Methods:
        """The session side's methods, once it is loaded: a request for one waits for that one load, behind the
        requests that waited before it (protocol/deferred.py), so pipelined requests take effect in order."""
        await self.parts.session_side.load()
        if self._session_side_methods is None:
            side = self.parts.session_side.get()
            self._session_side_methods = (
                method_table(side.methods, rpc_error),
                method_table(side.methods_v2, rpc_error),
            )
        return self._session_side_methods[1 if v2 else 0]

    def after_response(self, context: RequestContext) -> None:
        run = context.run
        if run is not None:
            if self.prompts.get(context.request_id) is run:
                del self.prompts[context.request_id]
            from acp_server.agent.sessions.turn import release_prompt  # noqa: PLC0415 (start-up: the session side loads after `initialize`)
            from acp_server.protocol.titles import title_session  # noqa: PLC0415 (start-up: the session side loads after `initialize`)

            first_prompt = release_prompt(self.parts.turns, run)
            if first_prompt is not None:
                self.connection.spawn(title_session, self.parts, run.session, first_prompt)
        for follow_up in context.after:
            follow_up()

    def notify(self, method: str, params: Any) -> None:
        entry = (self._notifications_v2 if self.parts.handshake.v2 else self._notifications).get(method)
        if entry is None:
            log.debug("ignored notification %s", method)
            return
        reader, handler = entry
        try:
            validated = reader.validate(params if params is not None else {})
        except RpcError as exc:
            log.warning("ignored %s: %s", method, exc.message)
            return
        handler(self.parts, validated)

    def closing(self) -> None:
        # First: a commit in progress may be what holds a turn's response. Also for a store still being opened.
        self.parts.store.bound_waits(STORE_WAIT_TIMEOUT)
        self.runs.interrupt_all()
        self.parts.calls.cancel_all()
        self.parts.mcp.stop_all()  # their shutdowns run alongside the turns' cleanup

    async def turns_ended(self) -> None:
        while running := [run for run in self.runs.current() if run.state is not RunState.ENDED]:
            # Each ends within the cleanup deadline (all were cancelled at `closing`); one that hands the session
            # over puts its successor (a steering prompt, recorded only then) in the registry for the next look.
            await running[0].wait_ended()
        # The tool calls that ignored their cancel and outlived their turns (cancelled at `closing`): waited for
        # within the same shutdown deadline as the turns, then left behind (`exiting`); they are no child of the
        # connection's task group, so `serve()` never waits for them (runtime/call_bodies.py).
        await self.parts.calls.wait_all()

    async def drain(self) -> None:
        store = self.parts.store.current
        if store is not None:
            await store.aclose()  # the last commit; this process's unfinished turns become `interrupted`
        await self.parts.mcp.wait_stopped()

    def exiting(self) -> None:
        if left := self.parts.calls.left_behind():
            log.warning("%d tool call(s) ignoring cancellation still running at exit; left behind", left)
        self.parts.processes.kill_all()
        self.parts.mcp.kill_all()  # stdio MCP servers that ignored their closed stdin, with their process groups
        self._on_exit()

    async def released(self, timeout: float) -> None:
        await self.parts.processes.release(timeout)
