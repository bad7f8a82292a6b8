"""The v1 session methods: `session/new`, `load`, `resume`, `fork`, `list`, `delete`, `close`, `set_mode`,
`set_config_option`, and the unstable `set_title`, `status`, `archive`, `unarchive`, served by the deferred side
(`deferred_methods.DEFERRED_METHODS`).

Each reads its v1 params, calls the session lifecycle (agent/sessions/lifecycle.py, version-neutral) and renders
the v1 result: `modes` and `configOptions`, and after the response the session's commands and its offered models
(on `session/load` the replay holds them, before the response). v2 has its own (protocol/v2/sessions.py).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from acp_server.agent.discovery import announce_models_to
from acp_server.agent.sessions import lifecycle
from acp_server.agent.sessions.edge import SlashCommandsAvailable, TitleChanged
from acp_server.agent.sessions.options import SLASH_COMMANDS
from acp_server.agent.sessions.runs import Session
from acp_server.errors import InvalidArgumentError, UnknownSessionError
from acp_server.jsonrpc.rpc import ErrorCode, RpcError
from acp_server.protocol.context import RequestContext
from acp_server.protocol.initialize import NO_CAPABILITIES
from acp_server.protocol.option_shapes import config_options, modes
from acp_server.protocol.prompts import client_tools
from acp_server.protocol.schema import (
    CloseSessionRequest,
    DeleteSessionRequest,
    ListSessionsRequest,
    LoadSessionRequest,
    NewSessionRequest,
    SessionIdRequest,
    SetSessionConfigOptionRequest,
    SetSessionModeRequest,
    SetSessionTitleRequest,
)
from acp_server.protocol.shared_methods import session_page

if TYPE_CHECKING:
    from acp_server.agent.sessions.inputs import ClientTools
    from acp_server.store import LoadedSession

__all__ = [
    "session_archive",
    "session_close",
    "session_delete",
    "session_fork",
    "session_list",
    "session_load",
    "session_new",
    "session_resume",
    "session_set_config_option",
    "session_set_mode",
    "session_set_title",
    "session_status",
    "session_unarchive",
]


def _client(context: RequestContext) -> ClientTools:
    return client_tools(context.connection.handshake.client_capabilities or NO_CAPABILITIES)


def _place(params: NewSessionRequest | LoadSessionRequest) -> lifecycle.Place:
    return lifecycle.Place(params.cwd, params.additional_directories, params.mcp_servers)


async def session_new(context: RequestContext, params: NewSessionRequest) -> dict[str, Any]:
    connection = context.connection
    connection.handshake.require_initialized()
    agent = context.agent
    policy = agent.config.prompt_policy
    with connection.opening():
        session = await lifecycle.new_session(
            agent, connection.edge, _place(params), _client(context), policy, owner=connection.principal
        )
    return {"sessionId": session.session_id, **_opened(context, session)}


def _opened(context: RequestContext, session: Session, *, replayed: bool = False) -> dict[str, Any]:
    """Answer with the session's modes and options. Its commands follow the response (the client learns the session
    id from the response), except after a replay (`session/load`): there the commands and the title belong to the
    replay, before the response, and nothing follows it."""
    agent = context.agent
    answered = agent.models.offered(session.model)
    edge = context.connection.edge
    if replayed:
        # The replay holds what the client is told of the session: nothing follows a load's response.
        edge.session_event(session.session_id, SlashCommandsAvailable(SLASH_COMMANDS))
        if session.title is not None:
            edge.session_event(session.session_id, TitleChanged(session.title))
        session.offered_models = answered
    else:
        context.after.append(lambda: edge.session_event(session.session_id, SlashCommandsAvailable(SLASH_COMMANDS)))
        context.after.append(lambda: _offered(context, session, answered))
    # The session's model, warmed while the person types its first prompt (agent/warmup.py).
    context.after.append(lambda: agent.warm_up(session.model))
    return {"modes": modes(session.mode), "configOptions": _config_options(context, session)}


def _config_options(context: RequestContext, session: Session) -> list[dict[str, Any]]:
    """The session's options, complete; the client replaces its list with them, so they are what it was told."""
    offered = lifecycle.offered_models(context.agent, session)
    return config_options(session.model, session.mode, session.prompt_policy, offered)


def _offered(context: RequestContext, session: Session, answered: tuple[str, ...]) -> None:
    """Once the response that opened the session is sent: it was told `answered`; a list that changed meanwhile
    follows as an update (never before the response, which is where the client learns the session id)."""
    session.offered_models = answered
    announce_models_to(context.agent, session)


async def _restore(context: RequestContext, params: LoadSessionRequest, *, replay: bool) -> Session:
    """session/load (replay first) and session/resume (no replay): rebuild the session from the store and go on."""
    from acp_server.protocol.v1.replay import replay_updates  # noqa: PLC0415 (the store and sqlite3 load only when persistence is on)

    connection = context.connection
    connection.handshake.require_initialized()
    notify = connection.rpc.notify

    def replay_v1(loaded: LoadedSession, session: Session) -> None:
        # The usage the session last reported is in it (stored as sent); the commands and the title close it.
        for update in replay_updates(loaded, notices=session.client.notices):
            notify("session/update", {"sessionId": session.session_id, "update": update})

    agent = context.agent
    with connection.opening(params.session_id):
        return await lifecycle.restore_session(
            agent,
            connection.edge,
            params.session_id,
            place=_place(params),
            client=_client(context),
            default_policy=agent.config.prompt_policy,
            replay=replay_v1 if replay else None,
            owner=connection.principal,
        )


async def session_load(context: RequestContext, params: LoadSessionRequest) -> dict[str, Any]:
    return _opened(context, await _restore(context, params, replay=True), replayed=True)


async def session_resume(context: RequestContext, params: LoadSessionRequest) -> dict[str, Any]:
    return _opened(context, await _restore(context, params, replay=False))


async def session_fork(context: RequestContext, params: LoadSessionRequest) -> dict[str, Any]:
    """Unstable in ACP v1: a new session that starts with a copy of another's conversation (a running turn in the
    source is copied as interrupted). Answered like session/new; the source is untouched."""
    connection = context.connection
    connection.handshake.require_initialized()
    agent = context.agent
    with connection.opening():
        session = await lifecycle.fork_session(
            agent,
            connection.edge,
            params.session_id,
            place=_place(params),
            client=_client(context),
            default_policy=agent.config.prompt_policy,
            owner=connection.principal,
        )
    return {"sessionId": session.session_id, **_opened(context, session)}


async def session_list(context: RequestContext, params: ListSessionsRequest) -> dict[str, Any]:
    context.connection.handshake.require_initialized()
    return session_page(
        await lifecycle.list_stored(
            context.agent, params.cwd, params.cursor, context.connection.principal, params.archived
        )
    )


async def session_delete(context: RequestContext, params: DeleteSessionRequest) -> dict[str, Any]:
    """Deleted sessions leave `session/list` and cannot be loaded; an unknown id succeeds silently (ACP). A session
    open on this connection is closed first, exactly as `session/close` would."""
    connection = context.connection
    connection.handshake.require_initialized()
    open_session = context.agent.sessions.get(params.session_id)
    if open_session is not None and not connection.owns(open_session):
        open_session = None
    await lifecycle.delete_session(context.agent, params.session_id, open_session, connection.principal)
    return {}


async def session_set_mode(context: RequestContext, params: SetSessionModeRequest) -> dict[str, Any]:
    """Permission modes (ACP session modes); they may change at any time, even mid-turn."""
    session = context.connection.session(params.session_id)
    await lifecycle.set_mode(context.agent, session, lifecycle.mode_of(params.mode_id))
    return {}


async def session_set_config_option(context: RequestContext, params: SetSessionConfigOptionRequest) -> dict[str, Any]:
    session = context.connection.session(params.session_id)
    value = params.value
    if not isinstance(value, str):
        raise InvalidArgumentError(f"value: {params.config_id} takes a string value id")
    await lifecycle.set_option(context.agent, session, params.config_id, value)
    return {"configOptions": _config_options(context, session)}


async def session_close(context: RequestContext, params: CloseSessionRequest) -> dict[str, Any]:
    """ACP: cancel ongoing work "as if session/cancel had been called", then free the session. Its prompts are
    answered (`cancelled`) before this response; the id is refused from the moment the close is read."""
    agent = context.agent
    await lifecycle.close_session(agent, context.connection.session(params.session_id, even_if_lost=True))
    await lifecycle.release_session(agent, params.session_id)
    return {}


# --- unstable in ACP v1 (schema.unstable.json), advertised under `sessionCapabilities` when sessions are stored ---


async def session_set_title(context: RequestContext, params: SetSessionTitleRequest) -> dict[str, Any]:
    """Any session `session/list` would show this principal, open or not; answered with the title as stored."""
    connection = context.connection
    connection.handshake.require_initialized()
    stored = await lifecycle.set_title(context.agent, params.session_id, params.title, connection.principal)
    return {"title": stored}


async def session_status(context: RequestContext, params: SessionIdRequest) -> dict[str, Any]:
    """`open` or `saved`, changing nothing. An unknown id is -32002 with the id in `data`, as the schema asks of
    this method (v1's other unknown-session answers carry none)."""
    connection = context.connection
    connection.handshake.require_initialized()
    try:
        status = await lifecycle.session_status(context.agent, params.session_id, connection.principal)
    except UnknownSessionError as exc:
        raise RpcError(ErrorCode.RESOURCE_NOT_FOUND, str(exc), {"sessionId": exc.session_id}) from None
    return {"status": status}


async def session_archive(context: RequestContext, params: SessionIdRequest) -> dict[str, Any]:
    """Hidden from the default list, loaded and resumed no more until unarchived; a session open here is closed
    first as `session/close` closes it (its prompts answered `cancelled` before this response)."""
    connection = context.connection
    connection.handshake.require_initialized()
    agent = context.agent

    async def close(session: Session) -> None:
        await lifecycle.close_session(agent, session)
        await lifecycle.release_session(agent, session.session_id)

    await lifecycle.archive_session(agent, params.session_id, close, connection.principal)
    return {}


async def session_unarchive(context: RequestContext, params: SessionIdRequest) -> dict[str, Any]:
    connection = context.connection
    connection.handshake.require_initialized()
    await lifecycle.unarchive_session(context.agent, params.session_id, connection.principal)
    return {}
