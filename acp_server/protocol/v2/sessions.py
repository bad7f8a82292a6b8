"""The v2 session methods (ACP-V2.md §4, §5): the baseline (`session/new`, `list`, `resume`, `close`) plus `delete`
and `set_config_option`: v2's params read, the session lifecycle (agent/sessions/lifecycle.py, version-neutral, the
same v1's handlers call) run, and v2's result rendered around it.

- `session/new`: `mcpServers` optional and typed (`sse` refused); the result has `configOptions` with `configId`
  and `availableCommands`, no `modes`.
- `session/list` is baseline: under `--no-store` it lists this process's open sessions (§23 Q22).
- `session/resume`: `replayFrom` omitted or null replays nothing, `{"type": "start"}` everything, before the
  response; anything else is `-32602`. Then a `state_update` snapshot of the foreground state, then the response.
  A session open on this connection with work running is resumed as it is (§23 Q12): the snapshot says `running`
  (`requires_action` while a question to the user is open), the work streams on, nothing is rebuilt; so is any
  open session under `--no-store` (§23 Q22), which has nothing to replay. Its replay, if asked, is exactly what it
  had shown when the resume began (the store's records plus what its turn logs still buffer, cut to that), so nothing
  is sent twice.
- `session/close` of an unknown or closed session succeeds (`{}`); an open one ends its work first: held prompts
  `-32800`, the running work's `idle cancelled`, then `{}`.
- Unstable (schema.unstable.json), advertised under `capabilities.session` when sessions are stored: `session/fork`
  (v1's fork, answered as v2's `session/new`), `set_title`, `status`, `archive` (an open session closed as
  `session/close` closes it) and `unarchive`.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from acp_server.agent.discovery import announce_models_to
from acp_server.agent.sessions import lifecycle
from acp_server.agent.sessions.options import SLASH_COMMANDS
from acp_server.agent.sessions.runs import Session
from acp_server.errors import InvalidArgumentError, UnknownSessionError
from acp_server.protocol.context import RequestContext
from acp_server.protocol.initialize import NO_CAPABILITIES
from acp_server.protocol.option_shapes import config_options
from acp_server.protocol.prompts import client_tools
from acp_server.protocol.schema import (
    CloseSessionRequest,
    DeleteSessionRequest,
    ListSessionsRequest,
    SessionIdRequest,
    SetSessionConfigOptionRequest,
    SetSessionTitleRequest,
)
from acp_server.protocol.shared_methods import session_page
from acp_server.protocol.v2.schema import ForkSessionRequestV2, NewSessionRequestV2, ResumeSessionRequestV2
from acp_server.protocol.v2.updates import available_commands_v2, config_options_v2, idle, requires_action, running
from acp_server.protocol.v2.withdrawals import withdraw_held
from acp_server.settings.choices import PromptPolicy

if TYPE_CHECKING:
    from acp_server.agent.sessions.inputs import ClientTools
    from acp_server.store import LoadedSession

__all__ = [
    "session_archive_v2",
    "session_close_v2",
    "session_delete_v2",
    "session_fork_v2",
    "session_list_v2",
    "session_new_v2",
    "session_resume_v2",
    "session_set_config_option_v2",
    "session_set_title_v2",
    "session_status_v2",
    "session_unarchive_v2",
]


def default_prompt_policy(context: RequestContext) -> PromptPolicy:
    """A new session's prompt policy on v2: `queue` unless one was chosen (ACP-V2.md §23 Q4)."""
    config = context.agent.config
    return config.prompt_policy if config.prompt_policy_chosen else PromptPolicy.QUEUE


def _client(context: RequestContext) -> ClientTools:
    return client_tools(context.connection.handshake.client_capabilities or NO_CAPABILITIES)


def _place(params: NewSessionRequestV2 | ResumeSessionRequestV2 | ForkSessionRequestV2) -> lifecycle.Place:
    return lifecycle.Place(params.cwd, params.additional_directories, params.mcp_servers)


def _result(context: RequestContext, session: Session) -> dict[str, Any]:
    """A session as v2 answers `new` and `resume`: its config options and its commands (no `modes`; the commands are
    in the response, so nothing follows it but a changed model list)."""
    offered = lifecycle.offered_models(context.agent, session)
    options = config_options(session.model, session.mode, session.prompt_policy, offered)
    return {"configOptions": config_options_v2(options), "availableCommands": available_commands_v2(SLASH_COMMANDS)}


def _opened(context: RequestContext, session: Session) -> dict[str, Any]:
    """Answer for a session just registered: after the response, a model list that changed meanwhile, and the
    session's model warmed while the person types (agent/warmup.py)."""
    agent = context.agent
    answered = agent.models.offered(session.model)

    def offered() -> None:
        session.offered_models = answered
        announce_models_to(agent, session)

    context.after.append(offered)
    context.after.append(lambda: agent.warm_up(session.model))
    return _result(context, session)


async def session_new_v2(context: RequestContext, params: NewSessionRequestV2) -> dict[str, Any]:
    connection = context.connection
    connection.handshake.require_initialized()
    policy = default_prompt_policy(context)
    with connection.opening():
        session = await lifecycle.new_session(
            context.agent, connection.edge, _place(params), _client(context), policy, owner=connection.principal
        )
    return {"sessionId": session.session_id, **_opened(context, session)}


async def session_fork_v2(context: RequestContext, params: ForkSessionRequestV2) -> dict[str, Any]:
    """A new session that starts with a copy of another's conversation (the lifecycle's fork, as v1's), answered
    as `session/new` is: its id, config options and commands; the source is untouched."""
    connection = context.connection
    connection.handshake.require_initialized()
    with connection.opening():  # a slot of the connection's limit, its credentials checked, as for session/new
        session = await lifecycle.fork_session(
            context.agent,
            connection.edge,
            params.session_id,
            place=_place(params),
            client=_client(context),
            default_policy=default_prompt_policy(context),
            owner=connection.principal,
        )
    return {"sessionId": session.session_id, **_opened(context, session)}


async def session_list_v2(context: RequestContext, params: ListSessionsRequest) -> dict[str, Any]:
    context.connection.handshake.require_initialized()
    if context.agent.config.store:
        return session_page(
            await lifecycle.list_stored(
                context.agent, params.cwd, params.cursor, context.connection.principal, params.archived
            )
        )
    if params.cursor is not None:
        raise InvalidArgumentError("cursor: not a cursor this server gave")
    sessions = []
    for session in context.connection.sessions():
        if session.closed or (params.cwd is not None and str(session.cwd) != params.cwd):
            continue
        entry = {
            "sessionId": session.session_id,
            "cwd": str(session.cwd),
            "additionalDirectories": [str(d) for d in session.additional_directories],
        }
        if session.title is not None:
            entry["title"] = session.title
        sessions.append(entry)
    return {"sessions": sessions}


async def session_resume_v2(context: RequestContext, params: ResumeSessionRequestV2) -> dict[str, Any]:
    agent, connection = context.agent, context.connection
    connection.handshake.require_initialized()
    replay_from = params.replay_from
    if replay_from is not None and replay_from.get("type") != "start":
        raise InvalidArgumentError(f"replayFrom: unsupported cursor {replay_from!r}")
    live = agent.sessions.get(params.session_id)
    if live is not None and (live.closed or not connection.owns(live) or agent.leases.lost(live.session_id)):
        live = None  # a session whose lease this replica lost is resumed as a stored one: its lease taken again
    working = live is not None and agent.runs.running(live.session_id) is not None
    if working and replay_from is not None and agent.config.store:
        assert live is not None
        return await _resume_running_with_replay(context, params, live)
    if not agent.config.store or working:
        return _resume_live(context, params, live)
    from acp_server.protocol.v2.replay import replay_updates_v2  # noqa: PLC0415 (the store and sqlite3 load only when persistence is on)

    last_stop = ["end_turn"]
    notify = connection.rpc.notify

    def replay(loaded: LoadedSession, session: Session) -> None:
        # Called before anything is sent or registered: a refusal here leaves the session as it was.
        if Path(loaded.session.cwd) != Path(params.cwd):
            raise InvalidArgumentError(f"cwd: the session's working directory is {loaded.session.cwd!r} (§5.3)")
        if loaded.turns:
            turn = loaded.turns[-1]
            last_stop[0] = turn.stop_reason or ("error" if turn.status == "failed" else "cancelled")
        for update in replay_updates_v2(loaded) if replay_from is not None else []:
            notify("session/update", {"sessionId": session.session_id, "update": update})

    with connection.opening(params.session_id):
        session = await lifecycle.restore_session(
            agent,
            connection.edge,
            params.session_id,
            place=_place(params),
            client=_client(context),
            default_policy=default_prompt_policy(context),
            replay=replay,
            owner=connection.principal,
        )
    result = _opened(context, session)
    _snapshot(context, params.session_id, last_stop[0])
    return result


async def _resume_running_with_replay(
    context: RequestContext, params: ResumeSessionRequestV2, session: Session
) -> dict[str, Any]:
    """§23 Q12 with `replayFrom`: replay exactly what the session had shown when the resume began, then resume it as
    it is. Reading the store awaits (a flush, then a read), and the work streams on meanwhile: what it sends then
    goes to this connection live, and is committed or buffered by the time of the read. So the running turn's
    record count is noted first, before any await, and the store's committed records plus what the turn logs still
    buffer are cut to it (turns begun meanwhile left out): the replay is what was shown before, each record once,
    and everything after it has streamed or streams live. From the cut to the response nothing awaits."""
    _require_cwd(session, params)
    agent = context.agent
    from acp_server.protocol.v2.replay import replay_updates_v2  # noqa: PLC0415 (the store and sqlite3 load only when persistence is on)

    work = agent.runs.running(session.session_id)
    log = None if work is None else work.turn_log
    shown = None if log is None else (log.turn_id, log.appended)
    store = await agent.store.require()
    loaded = await store.load(session.session_id)
    if session.closed:
        return await session_resume_v2(context, params)  # closed meanwhile: resumed as any closed session is
    if loaded is not None:
        pending = store.pending_entries(session.session_id)
        turns = []
        for turn in loaded.turns:
            entries = [*turn.entries, *pending.get(turn.turn_id, ())]
            if shown is not None and turn.turn_id == shown[0]:
                # As it was then: its end, if it came meanwhile, went live.
                turns.append(
                    replace(
                        turn, entries=entries[: shown[1]], status="running", stop_reason=None, error=None, ended_at=None
                    )
                )
                break  # a turn after it began during the read: it streams live
            turns.append(replace(turn, entries=entries))
        for update in replay_updates_v2(replace(loaded, turns=turns)):
            context.connection.rpc.notify("session/update", {"sessionId": session.session_id, "update": update})
    return _resume_live(context, params, session)


def _require_cwd(session: Session, params: ResumeSessionRequestV2) -> None:
    if session.cwd != Path(params.cwd):
        raise InvalidArgumentError(f"cwd: the session's working directory is {str(session.cwd)!r} (§5.3)")


def _resume_live(context: RequestContext, params: ResumeSessionRequestV2, session: Session | None) -> dict[str, Any]:
    """Resume the session as this connection has it open (with its work, if any, going on); nothing is replayed."""
    if session is None:
        raise UnknownSessionError(params.session_id)
    _require_cwd(session, params)
    work = context.agent.runs.running(session.session_id)
    if work is not None:
        # The work is not idle, and a resume ends nothing: the snapshot says so, and the work's own idle follows.
        # It waits on the user while the turn awaits an answer (its subagents ask through the turn's own ports).
        update = requires_action() if work.asking else running()
        context.connection.rpc.notify("session/update", {"sessionId": session.session_id, "update": update})
    else:
        _snapshot(context, session.session_id, "end_turn")
    offered = context.agent.models.offered(session.model)
    options = config_options(session.model, session.mode, session.prompt_policy, offered)
    return {"configOptions": config_options_v2(options), "availableCommands": available_commands_v2(SLASH_COMMANDS)}


def _snapshot(context: RequestContext, session_id: str, last_stop: str) -> None:
    """The current foreground state, after any replay and before the response (the schema's MUST): `idle`, with
    the last turn's stop reason for context (§23 Q11; the schema wants a reason on every idle). It ends nothing."""
    update = idle(last_stop, None if last_stop != "error" else {"code": -32603, "message": "The last turn failed"})
    context.connection.rpc.notify("session/update", {"sessionId": session_id, "update": update})


async def session_close_v2(context: RequestContext, params: CloseSessionRequest) -> dict[str, Any]:
    agent, connection = context.agent, context.connection
    connection.handshake.require_initialized()
    session = agent.sessions.get(params.session_id)
    if session is None or session.closed or not connection.owns(session):
        return {}  # the schema: closing an unknown or inactive session SHOULD succeed
    agent.runs.interrupt(session.session_id)  # (close_session's own interrupt then finds nothing more to claim)
    withdraw_held(connection, session)  # §20.2: the held prompts' -32800 first, before anything of the work
    await lifecycle.close_session(agent, session)
    await lifecycle.release_session(agent, params.session_id)  # as on v1
    return {}


async def session_delete_v2(context: RequestContext, params: DeleteSessionRequest) -> dict[str, Any]:
    """As v1's: the session leaves the list and cannot be resumed; an unknown id succeeds; one open on this
    connection is closed first."""
    connection = context.connection
    connection.handshake.require_initialized()
    open_session = context.agent.sessions.get(params.session_id)
    if open_session is not None and not connection.owns(open_session):
        open_session = None
    await lifecycle.delete_session(context.agent, params.session_id, open_session, connection.principal)
    return {}


async def session_set_config_option_v2(
    context: RequestContext, params: SetSessionConfigOptionRequest
) -> dict[str, Any]:
    if params.type not in ("id", None):
        raise InvalidArgumentError(f"type: {params.config_id} takes a value id")
    session = context.connection.session(params.session_id)
    value = params.value
    if not isinstance(value, str):
        raise InvalidArgumentError(f"value: {params.config_id} takes a string value id")
    await lifecycle.set_option(context.agent, session, params.config_id, value)
    offered = lifecycle.offered_models(context.agent, session)
    options = config_options(session.model, session.mode, session.prompt_policy, offered)
    return {"configOptions": config_options_v2(options)}


async def session_set_title_v2(context: RequestContext, params: SetSessionTitleRequest) -> dict[str, Any]:
    """Any session `session/list` would show this principal, open or not; answered with the title as stored."""
    connection = context.connection
    connection.handshake.require_initialized()
    stored = await lifecycle.set_title(context.agent, params.session_id, params.title, connection.principal)
    return {"title": stored}


async def session_status_v2(context: RequestContext, params: SessionIdRequest) -> dict[str, Any]:
    """`open` or `saved`, changing nothing; an unknown id is -32002 with the id in `data` (v2's answer for one)."""
    connection = context.connection
    connection.handshake.require_initialized()
    return {"status": await lifecycle.session_status(context.agent, params.session_id, connection.principal)}


async def session_archive_v2(context: RequestContext, params: SessionIdRequest) -> dict[str, Any]:
    """Hidden from the default list, resumed no more until unarchived; a session open here is closed first as
    `session/close` closes it (on this connection its held prompts answered -32800 first)."""
    agent, connection = context.agent, context.connection
    connection.handshake.require_initialized()

    async def close(session: Session) -> None:
        if connection.owns(session):
            agent.runs.interrupt(session.session_id)
            withdraw_held(connection, session)
        await lifecycle.close_session(agent, session)
        await lifecycle.release_session(agent, session.session_id)

    await lifecycle.archive_session(agent, params.session_id, close, connection.principal)
    return {}


async def session_unarchive_v2(context: RequestContext, params: SessionIdRequest) -> dict[str, Any]:
    connection = context.connection
    connection.handshake.require_initialized()
    await lifecycle.unarchive_session(context.agent, params.session_id, connection.principal)
    return {}
