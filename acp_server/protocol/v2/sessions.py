"""The v2 session methods (ACP-V2.md §4, §5): the baseline (`session/new`, `list`, `resume`, `close`) plus `delete`
and `set_config_option`, on v1's session lifecycle (protocol/session_handlers.py) with v2's shapes around it.

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
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from acp_server.agent.sessions.options import SLASH_COMMANDS
from acp_server.agent.sessions.runs import Session
from acp_server.jsonrpc.rpc import ErrorCode, RpcError
from acp_server.protocol.context import RequestContext
from acp_server.protocol.options import config_options
from acp_server.protocol.schema import (
    CloseSessionRequest,
    ListSessionsRequest,
    LoadSessionRequest,
    NewSessionRequest,
    SetSessionConfigOptionRequest,
)
from acp_server.protocol.session_handlers import (
    close_session,
    release_session,
    restore_session,
    session_list,
    session_new,
    session_set_config_option,
)
from acp_server.protocol.v2.schema import NewSessionRequestV2, ResumeSessionRequestV2
from acp_server.protocol.v2.updates import available_commands_v2, config_options_v2, idle, requires_action, running
from acp_server.protocol.v2.withdrawals import withdraw_held

if TYPE_CHECKING:
    from acp_server.store import LoadedSession

__all__ = [
    "session_close_v2",
    "session_list_v2",
    "session_new_v2",
    "session_resume_v2",
    "session_set_config_option_v2",
]


def _v2_result(result: dict[str, Any]) -> dict[str, Any]:
    """v1's new/resume result in v2's shape."""
    shaped = {k: v for k, v in result.items() if k not in ("modes", "configOptions")}
    shaped["configOptions"] = config_options_v2(result["configOptions"])
    shaped["availableCommands"] = available_commands_v2(SLASH_COMMANDS)
    return shaped


async def session_new_v2(context: RequestContext, params: NewSessionRequestV2) -> dict[str, Any]:
    v1 = NewSessionRequest(
        cwd=params.cwd, mcp_servers=params.mcp_servers, additional_directories=params.additional_directories
    )
    return _v2_result(await session_new(context, v1))


async def session_list_v2(context: RequestContext, params: ListSessionsRequest) -> dict[str, Any]:
    parts = context.parts
    if parts.config.store:
        return await session_list(context, params)
    if params.cursor is not None:
        raise RpcError(ErrorCode.INVALID_PARAMS, "Invalid params: cursor: not a cursor this server gave")
    sessions = []
    for session in parts.sessions:
        if session.closed or (params.cwd is not None and str(session.cwd) != params.cwd):
            continue
        entry: dict[str, Any] = {
            "sessionId": session.session_id,
            "cwd": str(session.cwd),
            "additionalDirectories": [str(d) for d in session.additional_directories],
        }
        if session.title is not None:
            entry["title"] = session.title
        sessions.append(entry)
    return {"sessions": sessions}


async def session_resume_v2(context: RequestContext, params: ResumeSessionRequestV2) -> dict[str, Any]:
    parts = context.parts
    replay_from = params.replay_from
    if replay_from is not None and replay_from.get("type") != "start":
        raise RpcError(ErrorCode.INVALID_PARAMS, f"Invalid params: replayFrom: unsupported cursor {replay_from!r}")
    v1 = LoadSessionRequest(
        session_id=params.session_id,
        cwd=params.cwd,
        mcp_servers=params.mcp_servers,
        additional_directories=params.additional_directories,
    )
    live = parts.sessions.get(params.session_id)
    if live is not None and live.closed:
        live = None
    working = live is not None and parts.runs.running(live.session_id) is not None
    if working and replay_from is not None and parts.config.store:
        assert live is not None
        return await _resume_running_with_replay(context, params, live)
    if not parts.config.store or working:
        return _resume_live(context, params, live)
    from acp_server.protocol.v2.replay import replay_updates_v2  # noqa: PLC0415 (the store and sqlite3 load only when persistence is on)

    last_stop = ["end_turn"]

    def replay(loaded: LoadedSession, session: Session) -> list[dict[str, Any]]:
        # Called before anything is sent or registered: a refusal here leaves the session as it was.
        if Path(loaded.session.cwd) != Path(params.cwd):
            raise RpcError(
                ErrorCode.INVALID_PARAMS,
                f"Invalid params: cwd: the session's working directory is {loaded.session.cwd!r} (§5.3)",
            )
        if loaded.turns:
            turn = loaded.turns[-1]
            last_stop[0] = turn.stop_reason or ("error" if turn.status == "failed" else "cancelled")
        return replay_updates_v2(loaded) if replay_from is not None else []

    result = await restore_session(context, v1, replay)
    _snapshot(context, params.session_id, last_stop[0])
    return _v2_result(result)


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
    parts = context.parts
    from acp_server.protocol.v2.replay import replay_updates_v2  # noqa: PLC0415 (the store and sqlite3 load only when persistence is on)

    work = parts.runs.running(session.session_id)
    log = None if work is None else work.turn_log
    shown = None if log is None else (log.turn_id, log.appended)
    store = await parts.store.require()
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
            parts.connection.notify("session/update", {"sessionId": session.session_id, "update": update})
    return _resume_live(context, params, session)


def _require_cwd(session: Session, params: ResumeSessionRequestV2) -> None:
    if session.cwd != Path(params.cwd):
        raise RpcError(
            ErrorCode.INVALID_PARAMS,
            f"Invalid params: cwd: the session's working directory is {str(session.cwd)!r} (§5.3)",
        )


def _resume_live(context: RequestContext, params: ResumeSessionRequestV2, session: Session | None) -> dict[str, Any]:
    """Resume the session as this connection has it open (with its work, if any, going on); nothing is replayed."""
    parts = context.parts
    if session is None:
        data = {"sessionId": params.session_id}
        raise RpcError(ErrorCode.RESOURCE_NOT_FOUND, f"unknown session: {params.session_id}", data)
    _require_cwd(session, params)
    work = parts.runs.running(session.session_id)
    if work is not None:
        # The work is not idle, and a resume ends nothing: the snapshot says so, and the work's own idle follows.
        # It waits on the user while the turn awaits an answer (its subagents ask through the turn's own ports).
        update = requires_action() if work.asking else running()
        parts.connection.notify("session/update", {"sessionId": session.session_id, "update": update})
    else:
        _snapshot(context, session.session_id, "end_turn")
    offered = parts.models.offered(session.model)
    result = {"configOptions": config_options(session.model, session.mode, session.prompt_policy, offered)}
    return _v2_result(result)


def _snapshot(context: RequestContext, session_id: str, last_stop: str) -> None:
    """The current foreground state, after any replay and before the response (the schema's MUST): `idle`, with
    the last turn's stop reason for context (§23 Q11; the schema wants a reason on every idle). It ends nothing."""
    update = idle(last_stop, None if last_stop != "error" else {"code": -32603, "message": "The last turn failed"})
    context.parts.connection.notify("session/update", {"sessionId": session_id, "update": update})


async def session_close_v2(context: RequestContext, params: CloseSessionRequest) -> dict[str, Any]:
    parts = context.parts
    parts.handshake.require_initialized()
    session = parts.sessions.get(params.session_id)
    if session is None or session.closed:
        return {}  # the schema: closing an unknown or inactive session SHOULD succeed
    parts.runs.interrupt(session.session_id)  # (close_session's own interrupt then finds nothing more to claim)
    withdraw_held(parts, session)  # §20.2: the held prompts' -32800 first, before anything of the work
    await close_session(parts, session)
    await release_session(parts, params.session_id)  # as on v1
    return {}


async def session_set_config_option_v2(
    context: RequestContext, params: SetSessionConfigOptionRequest
) -> dict[str, Any]:
    if params.type not in ("id", None):
        raise RpcError(ErrorCode.INVALID_PARAMS, f"Invalid params: type: {params.config_id} takes a value id")
    result = await session_set_config_option(context, params)
    return {"configOptions": config_options_v2(result["configOptions"])}
