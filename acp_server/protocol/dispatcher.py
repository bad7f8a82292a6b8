"""The ACP side of one connection: its sessions, the client's capabilities, the providers, and the agent's run
registry, behind the `Dispatcher` interface the connection calls (prepare, answer, notify, closing, exiting).

The request handlers themselves live in `handlers.py` (core methods) and `session_handlers.py` (the session
lifecycle); the composition root hands their tables in, so this module depends on no handler.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio
from pydantic import BaseModel, ValidationError

from acp_server.jsonrpc.connection import Connection
from acp_server.jsonrpc.rpc import (
    ErrorCode,
    IncomingRequest,
    RpcError,
    dispatch,
    error_message,
    method_table,
    validation_message,
)
from acp_server.mcp_bridge import McpRegistry
from acp_server.protocol.schema import ClientCapabilities, InitializeRequest, PromptRequest, RequestId
from acp_server.runtime.child_env import ChildEnvPolicy
from acp_server.runtime.model import Provider
from acp_server.runtime.processes import ProcessTable
from acp_server.runtime.providers import MissingCredentialsError, UnknownModelError
from acp_server.runtime.providers.scripted import ScriptError
from acp_server.runtime.tools import ToolBox
from acp_server.sessions.options import parse_command
from acp_server.sessions.runs import Agent, RunContext, Session
from acp_server.sessions.services import TurnServices
from acp_server.sessions.slash_commands import first_title
from acp_server.sessions.turn import prompt_text
from acp_server.settings.config import Config

if TYPE_CHECKING:
    from acp_server.store import SessionStore

__all__ = ["AcpServer", "Handler", "NotificationHandler", "RequestContext"]

log = logging.getLogger(__name__)

Handler = tuple[type[BaseModel], Any]
NotificationHandler = tuple[type[BaseModel], Callable[["AcpServer", Any], None]]


@dataclass(eq=False)
class RequestContext:
    """Per-request context handed to a handler through jsonrpcserver's `context=`."""

    server: AcpServer
    request_id: RequestId
    validated_params: BaseModel | None = None
    run: RunContext | None = None
    admission_error: RpcError | None = None
    # Run once the response is queued (e.g. session-scoped updates that must follow the response).
    after: list[Callable[[], None]] = field(default_factory=list)


class AcpServer:
    """The ACP side of one connection: its sessions, the client's capabilities, and the agent's run registry."""

    def __init__(
        self,
        config: Config,
        open_model: Callable[[str], Provider],
        tools: ToolBox,
        processes: ProcessTable,
        *,
        methods: Mapping[str, Handler],
        notifications: Mapping[str, NotificationHandler],
        models: tuple[str, ...] = (),
        on_exit: Callable[[], None] = lambda: None,
    ) -> None:
        self.config = config
        self.processes = processes
        self.agent = Agent()
        self.connection = Connection(self, config.cleanup_deadline)
        # Every session's MCP servers, owned by the connection's task group (see mcp_bridge/registry.py).
        self.mcp = McpRegistry(self.connection.spawn, ChildEnvPolicy.from_config(config), config.mcp_start_wait)
        self.sessions: dict[str, Session] = {}
        self.client_capabilities: ClientCapabilities | None = None
        # Prompt request id -> its run, so `$/cancel_request` can name a prompt.
        self.prompts: dict[RequestId, RunContext] = {}
        self.models = models or (config.model,)
        self._methods = method_table(methods)
        self._notifications = notifications
        self._on_exit = on_exit
        self._open_model = open_model
        self._providers: dict[str, Provider] = {}
        # Until the default model's credentials are found: why not (ACP authentication, `authenticate` retries).
        self.auth_problem: str | None = None
        self.turns = TurnServices(
            config, self.agent, self.connection, self.provider_for, tools, processes, lambda: self.store
        )
        # The session store: opened on first need (never on the `initialize` path); why not, if it cannot be.
        self.store: SessionStore | None = None
        self.store_problem: str | None = None if config.store else "sessions are not stored (--no-store)"
        self._store_tried = not config.store
        self._store_lock = anyio.Lock()
        self.load_model()

    async def open_store(self) -> SessionStore | None:
        """The session store, opened once (in a worker thread) with its flusher started. A store that cannot be
        opened is reported and left untouched; the server keeps serving sessions without persistence."""
        async with self._store_lock:
            if not self._store_tried:
                self._store_tried = True
                from acp_server.protocol.replay import entry_of
                from acp_server.store import STORE_FILENAME, SessionStore, StoreUnavailable, default_state_dir

                directory = Path(self.config.state_dir) if self.config.state_dir else default_state_dir()
                try:
                    # A store written before the turn records (schema 1) holds v1 updates: it is upgraded by reading
                    # them as this edge reads the updates it logs.
                    path = directory / STORE_FILENAME
                    self.store = await anyio.to_thread.run_sync(lambda: SessionStore.open(path, read_legacy=entry_of))
                except StoreUnavailable as exc:
                    self.store_problem = f"the session store is unavailable: {exc}"
                    log.error("%s; sessions will not be saved", self.store_problem)
                else:
                    self.connection.spawn(self.store.run_flusher)
        return self.store

    async def require_store(self) -> SessionStore:
        store = await self.open_store()
        if store is None:
            raise RpcError(ErrorCode.INTERNAL_ERROR, f"Stored sessions are not available: {self.store_problem}")
        return store

    def provider_for(self, spec: str) -> Provider:
        """The provider for a model spec, built on first use and shared by every session that picks it."""
        provider = self._providers.get(spec)
        if provider is None:
            try:
                provider = self._open_model(spec)
            except MissingCredentialsError as exc:
                raise RpcError(ErrorCode.AUTH_REQUIRED, f"Authentication required: {exc}") from None
            except (UnknownModelError, ScriptError) as exc:
                raise RpcError(ErrorCode.INVALID_PARAMS, f"Invalid params: {exc}") from None
            self._providers[spec] = provider
        return provider

    def load_model(self) -> bool:
        """Build the default model's provider; False (with `auth_problem`) while its key is missing. The
        configuration file is read again each time, so a key added meanwhile is found."""
        try:
            self._providers[self.config.model] = self._open_model(self.config.model)
        except MissingCredentialsError as exc:
            self.auth_problem = str(exc)
            return False
        self.auth_problem = None
        return True

    def require_model(self) -> TurnServices:
        if self.auth_problem is not None:
            raise RpcError(ErrorCode.AUTH_REQUIRED, f"Authentication required: {self.auth_problem}")
        return self.turns

    # --- Dispatcher ---

    def prepare(self, request: IncomingRequest) -> RequestContext:
        context = RequestContext(self, request.id)
        if request.method == "session/prompt" and isinstance(request.params, dict):
            self._admit(context, request.params)
        elif request.method == "initialize" and isinstance(request.params, dict):
            # Applied in reader order, so a request pipelined right behind `initialize` already sees it.
            try:
                initialize_request = InitializeRequest.model_validate(request.params)
            except ValidationError:
                return context  # the handler validates again and answers -32602
            context.validated_params = initialize_request
            self.client_capabilities = initialize_request.client_capabilities
        return context

    def _admit(self, context: RequestContext, params: dict[str, Any]) -> None:
        try:
            prompt = PromptRequest.model_validate(params)
        except ValidationError:
            return  # the handler validates again and answers -32602
        context.validated_params = prompt
        try:
            for index, block in enumerate(prompt.prompt):
                if block.type in ("image", "audio"):
                    # Not advertised (promptCapabilities), and never silently dropped: refused, naming the block.
                    raise RpcError(
                        ErrorCode.INVALID_PARAMS,
                        f"Invalid params: prompt.{index}: {block.type} content is not supported by this model",
                    )
            session = self.session(prompt.session_id)
            is_command = len(prompt.prompt) == 1 and parse_command(prompt_text(prompt)) is not None
            problem = (
                None
                if is_command
                else self.provider_for(session.model).check_turn(prompt.meta or {}, session.turns_started)
            )
            if problem is not None:
                raise RpcError(ErrorCode.INVALID_PARAMS, problem)
            context.run = self.agent.admit(session, context.request_id, prompt)
        except RpcError as exc:
            context.admission_error = exc
            return
        self.prompts[context.request_id] = context.run

    async def answer(self, request: IncomingRequest, context: RequestContext) -> dict[str, Any]:
        if request.method.startswith("session/") and request.method in self._methods:
            try:
                self.require_initialized()  # before params are validated: the first thing to fix is the order
            except RpcError as exc:
                return error_message(request.id, exc.code, exc.message)
        return await dispatch(request, self._methods, context)

    def after_response(self, context: RequestContext) -> None:
        run = context.run
        if run is not None:
            if self.prompts.get(context.request_id) is run:
                del self.prompts[context.request_id]
            self.agent.finish(run)
            session = run.session
            text = prompt_text(run.request)
            # After the first ordinary (not slash-command) turn that completes, once.
            wants_title = session.title is None and not session.title_requested and parse_command(text) is None
            if run.outcome == "end_turn" and wants_title:
                session.title_requested = True
                self.connection.spawn(self._title_session, session, text)
        for follow_up in context.after:
            follow_up()

    async def _title_session(self, session: Session, first_prompt: str) -> None:
        """In the background, after the first turn: never delays a response; cancelled with the session."""
        with anyio.CancelScope() as scope:
            session.background.add(scope)
            try:
                title = await first_title(self.provider_for(session.model), session.session_id, first_prompt)
            except Exception as exc:  # a title is a nicety: log and move on (cancellation is not caught here)
                log.warning("session %s: no title: %s", session.session_id, exc)
                return
            finally:
                session.background.discard(scope)
            if session.title is None and session.session_id in self.sessions:
                session.title = title
                self.turns.announce_title(session, title)

    def notify(self, method: str, params: Any) -> None:
        entry = self._notifications.get(method)
        if entry is None:
            log.debug("ignored notification %s", method)
            return
        model, handler = entry
        try:
            validated = model.model_validate(params if params is not None else {})
        except ValidationError as exc:
            log.warning("ignored %s: %s", method, validation_message(exc))
            return
        handler(self, validated)

    def closing(self) -> None:
        self.agent.interrupt_all()
        self.mcp.stop_all()  # their shutdowns run alongside the turns' cleanup

    async def drain(self) -> None:
        if self.store is not None:
            await self.store.aclose()  # the last commit; this process's unfinished turns become `interrupted`
        await self.mcp.wait_stopped()

    def exiting(self) -> None:
        self.processes.kill_all()
        self.mcp.kill_all()  # stdio MCP servers that ignored their closed stdin, with their process groups
        self._on_exit()

    async def released(self, timeout: float) -> None:
        await self.processes.release(timeout)

    # --- shared lookups ---

    def require_initialized(self) -> None:
        if self.client_capabilities is None:
            raise RpcError(
                ErrorCode.INVALID_REQUEST,
                "Invalid request: the connection is not initialized; send initialize first",
            )

    def session(self, session_id: str) -> Session:
        self.require_initialized()
        session = self.sessions.get(session_id)
        if session is None or session.closed:
            running = self.agent.running(session_id)
            if running is not None and running.parent_session_id is not None:
                # INTERRUPTS.md 6.7: clients never created child sessions; they may only cancel them.
                raise RpcError(
                    ErrorCode.INVALID_PARAMS, "Invalid params: a subagent's session accepts only session/cancel"
                )
            raise RpcError(ErrorCode.RESOURCE_NOT_FOUND, f"unknown session: {session_id}")
        return session
