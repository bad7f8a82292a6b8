"""The session lifecycle methods: `session/new`, `session/set_mode`, `session/set_config_option`, `session/close`.

Small typed `(context, params)` handlers, registered in `handlers.METHODS`.
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import anyio

from acp_server.agent import Session
from acp_server.dispatcher import AcpServer, RequestContext
from acp_server.editor import PERMISSION_MODES
from acp_server.rpc import ErrorCode, RpcError
from acp_server.schema import (
    ClientCapabilities,
    CloseSessionRequest,
    NewSessionRequest,
    SetSessionConfigOptionRequest,
    SetSessionModeRequest,
)
from acp_server.session_options import AVAILABLE_COMMANDS, MODE_OPTION, MODEL_OPTION, config_options, modes

__all__ = ["session_close", "session_new", "session_set_config_option", "session_set_mode"]


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
