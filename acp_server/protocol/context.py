"""What a handler receives: the pieces of the connection's ACP side it may use (`Parts`), and for a request, the
request's own context. Handlers never see the dispatcher (dispatcher.py) that calls them.

`server.py`, the composition root, builds the pieces once per connection; each has one job.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

# Types only: importing this module must not import the pieces (most are on the session side, protocol/deferred.py).
if TYPE_CHECKING:
    from acp_server.agent.sessions.runs import RunContext, RunRegistry
    from acp_server.agent.sessions.services import TurnServices
    from acp_server.jsonrpc.connection import Connection
    from acp_server.jsonrpc.rpc import Params, RpcError
    from acp_server.mcp_bridge import McpRegistry
    from acp_server.protocol.deferred import Deferred
    from acp_server.protocol.model_choices import ModelChoices
    from acp_server.protocol.providers import AuthState, ProviderCache
    from acp_server.protocol.schema import RequestId
    from acp_server.protocol.session_table import Handshake, SessionTable
    from acp_server.protocol.store_access import StoreAccess
    from acp_server.runtime.call_bodies import CallBodies
    from acp_server.runtime.processes import ProcessTable
    from acp_server.settings.config import Config

__all__ = ["Handler", "NotificationHandler", "Parts", "RequestContext", "SessionSide"]


@dataclass(frozen=True, slots=True, eq=False)
class SessionSide:
    """What the session side gives a connection once it is loaded (protocol/deferred.py), built on first use by the
    composition root's second half (cli/session_side.py): the turn services, and the methods it serves on each
    version (protocol/session_methods.py), which the dispatcher routes to."""

    turns: TurnServices
    methods: Mapping[str, Handler]
    methods_v2: Mapping[str, Handler]


@dataclass(frozen=True, slots=True, eq=False)
class Parts:
    """One connection's ACP side, in pieces; long-lived, built by `server.py`."""

    config: Config
    connection: Connection
    handshake: Handshake
    sessions: SessionTable
    # The run registry: session id -> its running turn (sessions/runs.py).
    runs: RunRegistry
    # Prompt request id -> its run, so `$/cancel_request` can name a prompt (kept by the dispatcher's admission).
    prompts: dict[RequestId, RunContext]
    providers: ProviderCache
    auth: AuthState
    store: StoreAccess
    # Every session's MCP servers, owned by the connection's task group (see mcp_bridge/registry.py).
    mcp: McpRegistry
    processes: ProcessTable
    # The bodies of cancellable tool calls, by session (abandoned ones may outlive their turn): runtime/call_bodies.py.
    calls: CallBodies
    # What a turn needs (the edge to the editor, the tools, ...) and the session lifecycle's methods: the session
    # side, loaded once `initialize` is answered and built on first use (`turns`).
    session_side: Deferred[SessionSide]
    # The model specs a session may pick (the `model` config option): the configured ones, the default first, then
    # what their endpoints list (model discovery).
    models: ModelChoices
    # The notifications beyond ACP's that this server handles (advertised in `initialize`).
    extension_notifications: tuple[str, ...] = ()
    # Held v2 prompts a cancel withdrew and answered itself, at once (protocol/v2/withdrawals.py): their
    # own request handlers send nothing more (the dispatcher drops their answer). Kept by the run itself (identity),
    # not by its request id: the client chooses ids, and another request may carry the same one while the withdrawn
    # prompt's handler has yet to look (its answer would be dropped, and the withdrawn one answered twice).
    withdrawn: set[RunContext] = field(default_factory=set)

    @property
    def turns(self) -> TurnServices:
        return self.session_side.get().turns


@dataclass(eq=False)
class RequestContext:
    """Per-request context handed to a handler through jsonrpcserver's `context=`."""

    parts: Parts
    request_id: RequestId
    # The params, when the dispatcher read them already as the line was read (`initialize`, `session/prompt`).
    validated_params: Any = None
    run: RunContext | None = None
    # Why admission refused the prompt, raised by its handler (answered as protocol/wire_errors.py says).
    admission_error: Exception | None = None
    # Refused before any handler (a v2 request with id null): the answer is this error, nothing of the request runs.
    refused: RpcError | None = None
    # Run once the response is queued (e.g. session-scoped updates that must follow the response).
    after: list[Callable[[], None]] = field(default_factory=list)


# A method table's entry: how the method's params are read (protocol/params.py), and its handler.
Handler = tuple["Params", Any]
NotificationHandler = tuple["Params", Callable[[Parts, Any], None]]
