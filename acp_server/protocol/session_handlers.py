"""The session lifecycle: `session/new`, `load`, `resume`, `list`, `delete`, `close`, `set_mode`, `set_config_option`.

Small typed `(context, params)` handlers, registered in `handlers.METHODS`.
"""

from __future__ import annotations

import contextlib
import functools
import os
import uuid
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import anyio

from acp_server.agent.sessions.edge import CommandsAvailable, ConfigChanged, ModeChanged, TitleChanged
from acp_server.agent.sessions.options import (
    MODE_OPTION,
    MODEL_OPTION,
    PROMPT_POLICY_OPTION,
    SLASH_COMMANDS,
    parse_command,
)
from acp_server.agent.sessions.runs import Session
from acp_server.jsonrpc.rpc import ErrorCode, RpcError
from acp_server.mcp_bridge import merge_servers
from acp_server.protocol.context import Parts, RequestContext
from acp_server.protocol.discovery import announce_models_to, discover_models
from acp_server.protocol.initialize import NO_CAPABILITIES
from acp_server.protocol.options import config_options, modes
from acp_server.protocol.prompts import client_tools
from acp_server.protocol.schema import (
    CloseSessionRequest,
    DeleteSessionRequest,
    ListSessionsRequest,
    LoadSessionRequest,
    NewSessionRequest,
    SetSessionConfigOptionRequest,
    SetSessionModeRequest,
)
from acp_server.protocol.warmup import warm_up
from acp_server.settings.choices import PermissionMode, PromptPolicy

if TYPE_CHECKING:
    from acp_server.store import LoadedSession

__all__ = [
    "close_session",
    "default_prompt_policy",
    "release_session",
    "restore_session",
    "session_close",
    "session_delete",
    "session_fork",
    "session_list",
    "session_load",
    "session_new",
    "session_resume",
    "session_set_config_option",
    "session_set_mode",
]


# A session's directories, one `Path` for every session opened in the same one (a `Path` is immutable): an editor's
# sessions mostly share a project, and each would otherwise hold its own (some 300 bytes with its cached parts).
_shared_path = functools.lru_cache(maxsize=256)(Path)


async def session_new(context: RequestContext, params: NewSessionRequest) -> dict[str, Any]:
    parts = context.parts
    parts.handshake.require_initialized()
    parts.auth.require()
    _check_directories(params.cwd, params.additional_directories)
    discover_models(parts)  # a due refresh in the background, never awaited here
    await parts.models.ready()  # the cached lists, if their read (in a worker thread) is still running
    session_id = f"sess_{uuid.uuid4().hex}"
    session = Session(
        session_id,
        _shared_path(params.cwd),
        tuple(_shared_path(d) for d in params.additional_directories),
        tuple(params.mcp_servers),
        client=client_tools(parts.handshake.client_capabilities or NO_CAPABILITIES),
        mode=parts.config.permission_mode,
        model=parts.config.model,
        prompt_policy=default_prompt_policy(parts),
    )
    await parts.store.open()
    # Committed before the client learns the id, a kill -9 after the answer keeps it; a failed commit is an error and
    # the session is never registered.
    await parts.store.save(
        lambda store: store.create_session(
            session_id,
            params.cwd,
            additional_directories=params.additional_directories,
            mcp_servers=params.mcp_servers,
            mode=session.mode,
            config={MODEL_OPTION: session.model, PROMPT_POLICY_OPTION: session.prompt_policy},
        )
    )
    return {"sessionId": session_id, **_opened(context, session)}


def _check_directories(cwd: str, additional_directories: list[str]) -> None:
    """A session's roots must be usable before anything of the session exists (registered, stored, forked): a
    client's bad path is its own error (-32602), never an internal one later, when a tool first uses it."""
    for where, directory in [("cwd", cwd), *(("additionalDirectories", d) for d in additional_directories)]:
        if "\0" in directory:
            raise RpcError(ErrorCode.INVALID_PARAMS, f"Invalid params: {where}: a path cannot hold NUL: {directory!r}")
        if not Path(directory).is_absolute():
            raise RpcError(ErrorCode.INVALID_PARAMS, f"Invalid params: paths must be absolute: {directory!r}")
        if not os.path.isdir(directory):
            raise RpcError(ErrorCode.INVALID_PARAMS, f"Invalid params: {where}: not a directory: {directory!r}")


def _opened(context: RequestContext, session: Session, *, replayed: bool = False) -> dict[str, Any]:
    """Register a session and answer with its modes and options. Its commands follow the response (the client
    learns the session id from the response), except after a replay (`session/load`): there the commands and the
    title belong to the replay, before the response, and nothing follows it."""
    parts = context.parts
    replaced = parts.sessions.get(session.session_id)
    if replaced is not None and replaced.mcp is not None:
        replaced.mcp.stop()  # a load or resume of an open session: its servers start again with the new one
    parts.sessions.add(session)
    # Connected in the background: the response does not wait (a turn waits for them, bounded; see mcp_bridge).
    servers = merge_servers(parts.config.mcp_servers, session.mcp_servers)
    if servers:
        parts.processes.adopt_orphans()  # stdio MCP servers are children too: their orphans must come to us
    session.mcp = parts.mcp.open(servers, session.cwd, (session.cwd, *session.additional_directories))
    answered = parts.models.offered(session.model)
    # On v2 the commands are in the response (`availableCommands`): nothing follows a resume's answer.
    announce = not parts.handshake.v2
    if replayed:
        # The replay holds what the client is told of the session: nothing follows a load's response.
        if announce:
            _announce_commands(parts, session)
        if session.title is not None:
            parts.turns.edge.session_event(session.session_id, TitleChanged(session.title))
        session.offered_models = answered
    else:
        if announce:
            context.after.append(lambda: _announce_commands(parts, session))
        context.after.append(lambda: _offered(parts, session, answered))
    # The session's model, warmed while the person types its first prompt (protocol/warmup.py).
    context.after.append(lambda: parts.connection.spawn(warm_up, parts.providers, parts.turns.tools, session.model))
    return {"modes": modes(session.mode), "configOptions": _config_options(parts, session)}


def _config_options(parts: Parts, session: Session) -> list[dict[str, Any]]:
    """The session's options, complete; the client replaces its list with them, so they are what it was told."""
    offered = parts.models.offered(session.model)
    if session.offered_models is not None:
        session.offered_models = offered
    return config_options(session.model, session.mode, session.prompt_policy, offered)


def _offered(parts: Parts, session: Session, answered: tuple[str, ...]) -> None:
    """Once the response that opened the session is sent: it was told `answered`; a list that changed meanwhile
    follows as an update (never before the response, which is where the client learns the session id)."""
    session.offered_models = answered
    announce_models_to(parts, session)


# A version's rendering of a loaded session's history, for the session it is being restored as.
Replay = Callable[["LoadedSession", Session], list[dict[str, Any]]]


def default_prompt_policy(parts: Parts) -> PromptPolicy:
    """A new session's prompt policy: the configured one; on a v2 connection `queue` unless one was chosen
    (ACP-V2.md §23 Q4)."""
    if parts.handshake.v2 and not parts.config.prompt_policy_chosen:
        return PromptPolicy.QUEUE
    return parts.config.prompt_policy


async def _restore(context: RequestContext, params: LoadSessionRequest, *, replay: bool) -> dict[str, Any]:
    """session/load (replay first) and session/resume (no replay): rebuild the session from the store and go on."""
    from acp_server.protocol.v1.replay import replay_updates  # noqa: PLC0415 (the store and sqlite3 load only when persistence is on)

    def replay_v1(loaded: LoadedSession, session: Session) -> list[dict[str, Any]]:
        return replay_updates(loaded, notices=session.client.notices)

    return await restore_session(context, params, replay_v1 if replay else None)


async def restore_session(context: RequestContext, params: LoadSessionRequest, replay: Replay | None) -> dict[str, Any]:
    """Rebuild the session from the store, send `replay(loaded)` (the version's rendering of its history) before the
    response, and go on."""
    parts = context.parts
    parts.handshake.require_initialized()
    parts.auth.require()
    _check_directories(params.cwd, params.additional_directories)
    current = parts.sessions.get(params.session_id)
    if current is not None and not current.closed and parts.runs.running(params.session_id) is not None:
        raise RpcError(ErrorCode.INVALID_REQUEST, "the session has a prompt running; cancel it first")
    store = await parts.store.require()
    loaded = await store.load(params.session_id, hold=True)  # held before the read: pruning leaves it
    if loaded is None:
        data = {"sessionId": params.session_id} if parts.handshake.v2 else None
        raise RpcError(ErrorCode.RESOURCE_NOT_FOUND, f"unknown session: {params.session_id}", data)
    await parts.models.ready()  # a model discovery found in the cache keeps the stored model (`accepts`)
    record = loaded.session
    stored_model = record.config.get(MODEL_OPTION)
    stored_policy = record.config.get(PROMPT_POLICY_OPTION)
    session = Session(
        record.session_id,
        _shared_path(params.cwd),
        tuple(_shared_path(d) for d in params.additional_directories),
        tuple(params.mcp_servers),
        history=list(loaded.history),
        turns_started=_turns_started(loaded),
        client=client_tools(parts.handshake.client_capabilities or NO_CAPABILITIES),
        mode=_known(PermissionMode, record.mode, parts.config.permission_mode),
        model=stored_model
        if isinstance(stored_model, str) and parts.models.accepts(stored_model)
        else parts.config.model,
        title=record.title,
        title_requested=record.title is not None,
        prompt_policy=_known(PromptPolicy, stored_policy, default_prompt_policy(parts)),
    )
    if replay is not None:
        # The whole conversation, before the response (ACP); C3 exempts this replay from the turn rule. The usage
        # the session last reported is in it (stored as sent); the commands and the title close it (`_opened`).
        for update in replay(loaded, session):
            parts.connection.notify("session/update", {"sessionId": session.session_id, "update": update})
    # v1's load: the commands and the title close its replay. v2's resume has no such closing (its commands are in
    # the response, its replay ends with the state snapshot).
    return _opened(context, session, replayed=replay is not None and not parts.handshake.v2)


def _turns_started(loaded: LoadedSession) -> int:
    """How many ordinary turns the stored session ran (`Session.turns_started`, which the scripted model's turn
    counter reads): a loaded, resumed or forked session goes on counting from them, not from 0."""
    return sum(1 for turn in loaded.turns if turn.ran and parse_command(turn.prompt_text) is None)


async def session_fork(context: RequestContext, params: LoadSessionRequest) -> dict[str, Any]:
    """Unstable in ACP v1: a new session that starts with a copy of another's conversation (a running turn in the
    source is copied as interrupted). Answered like session/new; the source is untouched."""
    parts = context.parts
    parts.handshake.require_initialized()
    parts.auth.require()
    _check_directories(params.cwd, params.additional_directories)  # before the copy: no half-made fork
    store = await parts.store.require()
    new_id = f"sess_{uuid.uuid4().hex}"
    copied = await store.fork(
        params.session_id,
        new_id,
        cwd=params.cwd,
        additional_directories=params.additional_directories,
        mcp_servers=params.mcp_servers,
    )
    if not copied:
        raise RpcError(ErrorCode.RESOURCE_NOT_FOUND, f"unknown session: {params.session_id}")
    restored = await _restore(context, params.model_copy(update={"session_id": new_id}), replay=False)
    return {"sessionId": new_id, **restored}


async def session_load(context: RequestContext, params: LoadSessionRequest) -> dict[str, Any]:
    return await _restore(context, params, replay=True)


async def session_resume(context: RequestContext, params: LoadSessionRequest) -> dict[str, Any]:
    return await _restore(context, params, replay=False)


async def session_list(context: RequestContext, params: ListSessionsRequest) -> dict[str, Any]:
    parts = context.parts
    parts.handshake.require_initialized()
    store = await parts.store.require()
    try:
        page = await store.list_sessions(cwd=params.cwd, cursor=params.cursor)
    except ValueError:
        raise RpcError(ErrorCode.INVALID_PARAMS, "Invalid params: cursor: not a cursor this server gave") from None
    sessions = []
    for summary in page.sessions:
        entry: dict[str, Any] = {
            "sessionId": summary.session_id,
            "cwd": summary.cwd,
            "additionalDirectories": list(summary.additional_directories),
            "updatedAt": summary.updated_at,
        }
        if summary.title is not None:
            entry["title"] = summary.title
        sessions.append(entry)
    result: dict[str, Any] = {"sessions": sessions}
    if page.next_cursor is not None:
        result["nextCursor"] = page.next_cursor
    return result


async def session_delete(context: RequestContext, params: DeleteSessionRequest) -> dict[str, Any]:
    """Deleted sessions leave `session/list` and cannot be loaded; an unknown id succeeds silently (ACP). A session
    open here is closed first, exactly as `session/close` would."""
    parts = context.parts
    parts.handshake.require_initialized()
    open_session = parts.sessions.get(params.session_id)
    if open_session is not None and not open_session.closed:
        await close_session(parts, open_session)
    await parts.store.open()
    await parts.store.save(lambda store: store.delete(params.session_id))  # an error if the deletion was not saved
    return {}


_Choice = TypeVar("_Choice", PermissionMode, PromptPolicy)


def _choice(choices: type[_Choice], value: object) -> _Choice | None:
    """`value` as one of the enum's members, or None when it is not one."""
    try:
        return choices(value) if isinstance(value, str) else None
    except ValueError:
        return None


def _known(choices: type[_Choice], value: object, default: _Choice) -> _Choice:
    """A stored choice, or the default for one this server does not know (any more)."""
    known = _choice(choices, value)
    return default if known is None else known


def _announce_commands(parts: Parts, session: Session) -> None:
    parts.turns.edge.session_event(session.session_id, CommandsAvailable(SLASH_COMMANDS))


def _mode(mode_id: str) -> PermissionMode:
    mode = _choice(PermissionMode, mode_id)
    if mode is None:
        known = ", ".join(PermissionMode)
        raise RpcError(ErrorCode.INVALID_PARAMS, f"Invalid params: unknown mode {mode_id!r} ({known})")
    return mode


@contextlib.asynccontextmanager
async def _changing_settings(session: Session) -> AsyncIterator[None]:
    """One settings change of the session at a time, from its store write to its change in memory: a change is
    applied only once committed (`StoreAccess.save`; a failed commit is answered an error and changes nothing), and
    the next one reads and writes the settings as the one before left them."""
    if session.settings_lock is None:
        session.settings_lock = anyio.Lock()
    async with session.settings_lock:
        yield


async def _set_mode(parts: Parts, session: Session, mode: PermissionMode) -> None:
    """Modes and the `mode` config option are one setting; the client hears of a change through both. Under
    `_changing_settings`; applied once committed."""
    if session.mode == mode:
        return
    await parts.store.save(lambda store: store.set_mode(session.session_id, mode))
    session.mode = mode
    parts.turns.edge.session_event(session.session_id, ModeChanged(mode))
    offered = parts.models.offered(session.model)
    if session.offered_models is not None:
        session.offered_models = offered
    options = ConfigChanged(session.model, session.mode, session.prompt_policy, offered)
    parts.turns.edge.session_event(session.session_id, options)


async def session_set_config_option(context: RequestContext, params: SetSessionConfigOptionRequest) -> dict[str, Any]:
    parts = context.parts
    session = parts.sessions.require(params.session_id)
    value = params.value
    if not isinstance(value, str):
        raise RpcError(ErrorCode.INVALID_PARAMS, f"Invalid params: value: {params.config_id} takes a string value id")
    if params.config_id == MODE_OPTION:
        mode = _mode(value)
        async with _changing_settings(session):
            await _set_mode(parts, session, mode)
    elif params.config_id == MODEL_OPTION:
        async with _changing_settings(session):
            if value not in parts.models.offered(session.model):
                raise RpcError(ErrorCode.INVALID_PARAMS, f"Invalid params: value: unknown model {value!r}")
            parts.providers.get(value)  # a missing key or a bad spec is answered now, not at the next prompt
            await _save_options(parts, session, value, session.prompt_policy)
            session.model = value
    elif params.config_id == PROMPT_POLICY_OPTION:
        policy = _choice(PromptPolicy, value)
        if policy is None:
            raise RpcError(ErrorCode.INVALID_PARAMS, f"Invalid params: value: unknown prompt policy {value!r}")
        async with _changing_settings(session):
            await _save_options(parts, session, session.model, policy)
            session.prompt_policy = policy
    else:
        raise RpcError(ErrorCode.INVALID_PARAMS, f"Invalid params: configId: unknown option {params.config_id!r}")
    return {"configOptions": _config_options(parts, session)}


async def _save_options(parts: Parts, session: Session, model: str, policy: PromptPolicy) -> None:
    """The session's stored option values as they will be, committed (an error when not) before they are applied."""
    options = {MODEL_OPTION: model, PROMPT_POLICY_OPTION: policy}
    await parts.store.save(lambda store: store.set_config(session.session_id, options))


async def session_set_mode(context: RequestContext, params: SetSessionModeRequest) -> dict[str, Any]:
    """Permission modes (ACP session modes); they may change at any time, even mid-turn."""
    parts = context.parts
    session = parts.sessions.require(params.session_id)
    mode = _mode(params.mode_id)
    async with _changing_settings(session):
        await _set_mode(parts, session, mode)
    return {}


async def session_close(context: RequestContext, params: CloseSessionRequest) -> dict[str, Any]:
    """ACP: cancel ongoing work "as if session/cancel had been called", then free the session. Its prompts are
    answered (`cancelled`) before this response; the id is refused from the moment the close is read."""
    parts = context.parts
    await close_session(parts, parts.sessions.require(params.session_id))
    await release_session(parts, params.session_id)
    return {}


async def release_session(parts: Parts, session_id: str) -> None:
    """After a close: this process holds the session no longer (pruning may remove it again), committed before the
    response so a prune that follows sees it. Not an error when that commit fails: what the client is told, that
    the session is closed, holds in this process whatever the store did, and a hold left in the store is only
    bookkeeping (released with this process's lease once it is gone); the store retries it with its next flush."""
    store = parts.store.current
    if store is not None:
        store.release(session_id)
        await store.flush()


async def close_session(parts: Parts, session: Session) -> None:
    session.closed = True
    runs = [run for run in (parts.runs.running(session.session_id), *session.waiting) if run is not None]
    parts.runs.interrupt(session.session_id)
    for scope in list(session.background):
        scope.cancel()
    # Each run answers within the cleanup deadline; a little slack for the hand-over between them.
    with anyio.move_on_after(parts.config.cleanup_deadline + 1):
        for run in runs:
            await run.wait_ended()
    # Its tool calls that ignored their cancel and outlived their turn: cancelled again, waited for (shielded, at
    # most the cleanup deadline), then left behind, logged; nothing of them reaches the client in any case.
    await parts.calls.close(session.session_id, parts.config.cleanup_deadline)
    if session.mcp is not None:
        await session.mcp.aclose(parts.config.cleanup_deadline)
    parts.sessions.discard(session.session_id)
