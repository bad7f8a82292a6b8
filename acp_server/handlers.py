"""The ACP methods, registered by their wire names in two literal tables, and the server state they share.

Requests are small typed `(context, params)` functions; jsonrpcserver dispatches them (see `rpc.py`).
Notifications are handled inline by the reader, in arrival order, and never answered, even when invalid.
`session/prompt` is special in one way only: it is admitted in `prepare`, synchronously, when its line is read.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
from pydantic import BaseModel, ValidationError

from acp_server import __version__
from acp_server.agent import Agent, RunContext, Session
from acp_server.config import Config
from acp_server.connection import Connection
from acp_server.editor import PERMISSION_MODES
from acp_server.prompt_turn import TurnServices, execute_prompt, prompt_text
from acp_server.rpc import (
    ErrorCode,
    IncomingRequest,
    RpcError,
    dispatch,
    error_message,
    method_table,
    validation_message,
)
from acp_server.runtime.model import Provider
from acp_server.runtime.processes import ProcessTable
from acp_server.runtime.providers import MissingCredentialsError, UnknownModelError
from acp_server.runtime.providers.scripted import ScriptError
from acp_server.runtime.tools import ToolBox
from acp_server.schema import (
    AuthenticateRequest,
    CancelNotification,
    CancelRequestNotification,
    ClientCapabilities,
    CloseSessionRequest,
    InitializeRequest,
    NewSessionRequest,
    PromptRequest,
    RequestId,
    ScriptedReleaseNotification,
    SetSessionConfigOptionRequest,
    SetSessionModeRequest,
    WireModel,
)
from acp_server.session_options import (
    AVAILABLE_COMMANDS,
    MODE_OPTION,
    MODEL_OPTION,
    config_options,
    modes,
    parse_command,
)
from acp_server.slash_commands import first_title

__all__ = ["METHODS", "NOTIFICATIONS", "AcpServer", "RequestContext"]

log = logging.getLogger(__name__)

PROTOCOL_VERSION = 1
PROMPT_POLICIES = ("reject",)


class NoParams(WireModel):
    pass


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
        models: tuple[str, ...] = (),
        on_exit: Callable[[], None] = lambda: None,
    ) -> None:
        self.config = config
        self.processes = processes
        self.agent = Agent()
        self.connection = Connection(self, config.cleanup_deadline)
        self.sessions: dict[str, Session] = {}
        self.client_capabilities: ClientCapabilities | None = None
        # Prompt request id -> its run, so `$/cancel_request` can name a prompt.
        self.prompts: dict[RequestId, RunContext] = {}
        self.models = models or (config.model,)
        self._methods = method_table({**METHODS, **(TEST_METHODS if config.test_mode else {})})
        self._on_exit = on_exit
        self._open_model = open_model
        self._providers: dict[str, Provider] = {}
        # Until the default model's credentials are found: why not (ACP authentication, `authenticate` retries).
        self.auth_problem: str | None = None
        self.turns = TurnServices(config, self.agent, self.connection, self.provider_for, tools, processes)
        self.load_model()

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
        entry = NOTIFICATIONS.get(method)
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

    def exiting(self) -> None:
        self.processes.kill_all()
        self._on_exit()

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
            raise RpcError(ErrorCode.RESOURCE_NOT_FOUND, f"unknown session: {session_id}")
        return session


# --- requests ---


async def initialize(context: RequestContext, params: InitializeRequest) -> dict[str, Any]:
    # The client's capabilities were recorded in AcpServer.prepare, in reader order.
    # ACP: answer the requested version if supported, else the latest we support. We speak exactly version 1.
    return {
        "protocolVersion": PROTOCOL_VERSION,
        "agentCapabilities": {
            "loadSession": False,
            "promptCapabilities": {"image": False, "audio": False, "embeddedContext": True},
            "mcpCapabilities": {"http": False, "sse": False},
            "sessionCapabilities": {"additionalDirectories": {}, "close": {}},
            "_meta": {
                "acpServer": {
                    "promptPolicies": list(PROMPT_POLICIES),
                    "defaultPromptPolicy": PROMPT_POLICIES[0],
                    "extensionMethods": ["_acp_server/stats"],
                    "extensionNotifications": ["_scripted/release"],
                }
            },
        },
        "authMethods": _auth_methods(context.server),
        "agentInfo": {"name": "acp-server", "title": "acp-server", "version": __version__},
    }


AUTH_METHOD_ID = "api-key"


def _auth_methods(server: AcpServer) -> list[dict[str, Any]]:
    """Offered only while a key is missing: the description says exactly where to put it (ACP `agent` method)."""
    if server.auth_problem is None:
        return []
    return [{"id": AUTH_METHOD_ID, "name": "API key", "description": server.auth_problem}]


async def authenticate(context: RequestContext, params: AuthenticateRequest) -> dict[str, Any]:
    """Re-read the configuration and environment for the key. Instant, idempotent, never interactive."""
    server = context.server
    if params.method_id != AUTH_METHOD_ID:
        raise RpcError(ErrorCode.INVALID_PARAMS, f"Invalid params: methodId: unknown auth method {params.method_id!r}")
    if server.auth_problem is not None and not server.load_model():
        raise RpcError(ErrorCode.AUTH_REQUIRED, f"Authentication required: {server.auth_problem}")
    return {}


async def session_new(context: RequestContext, params: NewSessionRequest) -> dict[str, Any]:
    server = context.server
    server.require_initialized()
    server.require_model()
    directories = [params.cwd, *params.additional_directories]
    for directory in directories:
        if not Path(directory).is_absolute():
            raise RpcError(ErrorCode.INVALID_PARAMS, f"Invalid params: paths must be absolute: {directory!r}")
    session_id = f"sess_{uuid.uuid4().hex}"
    session = Session(
        session_id,
        Path(params.cwd),
        tuple(Path(d) for d in params.additional_directories),
        tuple(params.mcp_servers),
        client=server.client_capabilities or ClientCapabilities(),
        mode=server.config.permission_mode,
        model=server.config.model,
    )
    server.sessions[session_id] = session
    # The client learns the session id from the response, so the commands follow it.
    context.after.append(lambda: _announce_commands(server, session))
    return {
        "sessionId": session_id,
        "modes": modes(session),
        "configOptions": config_options(session, server.models),
    }


def _announce_commands(server: AcpServer, session: Session) -> None:
    update = {"sessionUpdate": "available_commands_update", "availableCommands": list(AVAILABLE_COMMANDS)}
    server.connection.notify("session/update", {"sessionId": session.session_id, "update": update})


def _set_mode(server: AcpServer, session: Session, mode_id: str) -> None:
    """Modes and the `mode` config option are one setting; the client hears of a change through both."""
    if mode_id not in {m.id for m in PERMISSION_MODES}:
        known = ", ".join(m.id for m in PERMISSION_MODES)
        raise RpcError(ErrorCode.INVALID_PARAMS, f"Invalid params: unknown mode {mode_id!r} ({known})")
    if session.mode == mode_id:
        return
    session.mode = mode_id
    notify = server.connection.notify
    notify(
        "session/update",
        {"sessionId": session.session_id, "update": {"sessionUpdate": "current_mode_update", "currentModeId": mode_id}},
    )
    update = {"sessionUpdate": "config_option_update", "configOptions": config_options(session, server.models)}
    notify("session/update", {"sessionId": session.session_id, "update": update})


async def session_set_config_option(context: RequestContext, params: SetSessionConfigOptionRequest) -> dict[str, Any]:
    server = context.server
    session = server.session(params.session_id)
    value = params.value
    if not isinstance(value, str):
        raise RpcError(ErrorCode.INVALID_PARAMS, f"Invalid params: value: {params.config_id} takes a string value id")
    if params.config_id == MODE_OPTION:
        _set_mode(server, session, value)
    elif params.config_id == MODEL_OPTION:
        if value not in server.models:
            raise RpcError(ErrorCode.INVALID_PARAMS, f"Invalid params: value: unknown model {value!r}")
        server.provider_for(value)  # a missing key or a bad spec is answered now, not at the next prompt
        session.model = value
    else:
        raise RpcError(ErrorCode.INVALID_PARAMS, f"Invalid params: configId: unknown option {params.config_id!r}")
    return {"configOptions": config_options(session, server.models)}


async def session_set_mode(context: RequestContext, params: SetSessionModeRequest) -> dict[str, Any]:
    """Permission modes (ACP session modes); they may change at any time, even mid-turn."""
    server = context.server
    _set_mode(server, server.session(params.session_id), params.mode_id)
    return {}


async def session_prompt(context: RequestContext, params: PromptRequest) -> dict[str, Any]:
    if context.admission_error is not None:
        raise context.admission_error
    assert context.run is not None, "a valid prompt is always admitted or refused in prepare()"
    return await execute_prompt(context.server.require_model(), context.run)


async def stats(context: RequestContext, params: NoParams) -> dict[str, Any]:
    """Live counts, so tests and users can see that nothing leaks. The request's own task is counted."""
    server = context.server
    sessions = list(server.sessions.values())
    return {
        "sessions": len(sessions),
        "runningTurns": server.agent.running_turns,
        "queuedPrompts": server.agent.queued_prompts(sessions),
        "pendingClientRequests": server.connection.pending_client_requests,
        "requestsInFlight": server.connection.requests_in_flight,
        "tasks": len(anyio.get_running_tasks()),
        "childProcesses": len(server.processes),
    }


async def session_close(context: RequestContext, params: CloseSessionRequest) -> dict[str, Any]:
    """ACP: cancel ongoing work "as if session/cancel had been called", then free the session. Its prompts are
    answered (`cancelled`) before this response; the id is refused from the moment the close is read."""
    server = context.server
    session = server.session(params.session_id)
    session.closed = True
    runs = [run for run in (server.agent.running(session.session_id), *session.waiting) if run is not None]
    server.agent.interrupt(session.session_id)
    for scope in list(session.background):
        scope.cancel()
    # Each run answers within the cleanup deadline; a little slack for the hand-over between them.
    with anyio.move_on_after(server.config.cleanup_deadline + 1):
        for run in runs:
            await run.ended.wait()
    server.sessions.pop(session.session_id, None)
    return {}


METHODS: dict[str, tuple[type[BaseModel], Any]] = {
    "initialize": (InitializeRequest, initialize),
    "authenticate": (AuthenticateRequest, authenticate),
    "session/new": (NewSessionRequest, session_new),
    "session/prompt": (PromptRequest, session_prompt),
    "session/set_mode": (SetSessionModeRequest, session_set_mode),
    "session/set_config_option": (SetSessionConfigOptionRequest, session_set_config_option),
    "session/close": (CloseSessionRequest, session_close),
    "_acp_server/stats": (NoParams, stats),
}


async def scripted_raise(context: RequestContext, params: NoParams) -> dict[str, Any]:
    """Test mode only: a handler that fails unexpectedly, to prove the error boundary keeps internals private."""
    raise RuntimeError("secret internal detail /etc/passwd")


TEST_METHODS: dict[str, tuple[type[BaseModel], Any]] = {"_scripted/raise": (NoParams, scripted_raise)}


# --- notifications ---


def session_cancel(server: AcpServer, params: CancelNotification) -> None:
    server.agent.interrupt(params.session_id)


def cancel_request(server: AcpServer, params: CancelRequestNotification) -> None:
    run = server.prompts.get(params.request_id)
    if run is not None:
        server.agent.cancel_run(run)
    # Every other request of ours answers at once, so there is nothing else to cancel: ignored, as ACP allows.


def scripted_release(server: AcpServer, params: ScriptedReleaseNotification) -> None:
    session = server.sessions.get(params.session_id)
    if session is not None:
        session.gates.release(params.gate)


NOTIFICATIONS: dict[str, tuple[type[BaseModel], Callable[[AcpServer, Any], None]]] = {
    "session/cancel": (CancelNotification, session_cancel),
    "$/cancel_request": (CancelRequestNotification, cancel_request),
    "_scripted/release": (ScriptedReleaseNotification, scripted_release),
}
