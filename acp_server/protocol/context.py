"""What a handler receives: for a request, `RequestContext` (the agent, the editor's connection it came on, and the
request's own state); for a notification, the connection (its agent is `connection.agent`). Handlers never see the
dispatcher (dispatcher.py) that calls them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

# Types only: importing this module must not import the pieces (most are on the deferred side, protocol/deferred.py).
if TYPE_CHECKING:
    from acp_server.agent.agent import Agent
    from acp_server.agent.sessions.runs import RunContext
    from acp_server.jsonrpc.rpc import Params, RpcError
    from acp_server.protocol.editor_connection import EditorConnection
    from acp_server.protocol.schema import RequestId

__all__ = ["Handler", "NotificationHandler", "RequestContext"]


@dataclass(eq=False)
class RequestContext:
    """Per-request context handed to a handler through jsonrpcserver's `context=`."""

    # What every editor shares (agent/agent.py), and the editor this request came from.
    agent: Agent
    connection: EditorConnection
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
NotificationHandler = tuple["Params", Callable[["EditorConnection", Any], None]]
