"""The session lifecycle, in the agent's own terms: open a new session, restore one from the store (load, resume),
fork one, list the stored ones, delete, close, archive and unarchive, title one, tell whether one is open, and change
a session's settings (mode, model, prompt policy).

Version-neutral: each function takes typed arguments (`Place`, ids, values) and the connection a session is
attached to (its `Edge`), returns a `Session` or a store page, and raises errors of the one tree (acp_server/errors:
`UnknownSessionError`, `InvalidArgumentError`, `NoStoreError`, ...). The v1 handlers (protocol/session_handlers.py)
and the v2 handlers (protocol/v2/sessions.py) each read their own wire params into these arguments and render the
result in their own shape; neither calls the other. What must follow a response (the commands, the offered models,
a warm-up) is the handler's to schedule: only it knows when its response is out.
"""

from __future__ import annotations

import contextlib
import functools
import os
import unicodedata
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import anyio

from acp_server.agent.discovery import discover_models
from acp_server.agent.sessions.edge import ConfigChanged, Edge, ModeChanged, TitleChanged, attached, provider_for
from acp_server.agent.sessions.inputs import ClientTools
from acp_server.agent.sessions.options import MODE_OPTION, MODEL_OPTION, PROMPT_POLICY_OPTION, parse_slash_command
from acp_server.agent.sessions.owners import LOCAL, Owner
from acp_server.agent.sessions.runs import Session
from acp_server.agent.sessions.slash_commands import MAX_TITLE_CHARS
from acp_server.errors import InvalidArgumentError, SessionBusyError, SessionLeasedError, UnknownSessionError
from acp_server.mcp_bridge import merge_servers
from acp_server.settings.choices import PermissionMode, PromptPolicy
from acp_server.store.records import ARCHIVE_FILTERS, OWNER_KEY, owner_in

if TYPE_CHECKING:
    from acp_server.agent.agent import Agent
    from acp_server.store import LoadedSession, SessionPage, SessionStore, SessionSummary

__all__ = [
    "Place",
    "Replay",
    "archive_session",
    "close_session",
    "delete_session",
    "fork_session",
    "list_stored",
    "mode_of",
    "new_session",
    "offered_models",
    "release_session",
    "restore_session",
    "session_status",
    "set_mode",
    "set_option",
    "set_title",
    "unarchive_session",
]


# A session's directories, one `Path` for every session opened in the same one (a `Path` is immutable): an editor's
# sessions mostly share a project, and each would otherwise hold its own (some 300 bytes with its cached parts).
_shared_path = functools.lru_cache(maxsize=256)(Path)


@dataclass(frozen=True, slots=True)
class Place:
    """Where a session works, as the client gave it: its directories (absolute paths) and its MCP servers."""

    cwd: str
    additional_directories: Sequence[str] = ()
    mcp_servers: Sequence[dict[str, Any]] = ()


# A version's rendering of a loaded session's history, sent before the session is registered (and before the
# response); it may refuse (raise) before anything is sent, and then nothing of the session changes.
Replay = Callable[["LoadedSession", Session], None]


def _check_directories(place: Place, owner: Owner = LOCAL) -> None:
    """A session's roots must be usable before anything of the session exists (registered, stored, forked): a
    client's bad path is its own error (-32602), never an internal one later, when a tool first uses it. A remote
    principal's must lie within its roots, and its MCP servers may not be commands (REMOTE.md decision 5)."""
    for where, directory in [("cwd", place.cwd), *(("additionalDirectories", d) for d in place.additional_directories)]:
        if "\0" in directory:
            raise InvalidArgumentError(f"{where}: a path cannot hold NUL: {directory!r}")
        if not Path(directory).is_absolute():
            raise InvalidArgumentError(f"paths must be absolute: {directory!r}")
        if not os.path.isdir(directory):
            raise InvalidArgumentError(f"{where}: not a directory: {directory!r}")
        owner.check_directory(where, directory)
    owner.check_servers(place.mcp_servers)


def _register(agent: Agent, session: Session, edge: Edge, owner: Owner = LOCAL) -> None:
    """Register a session and attach it to the connection `edge`, then connect its MCP servers in the background
    (the response does not wait: a turn waits for them, bounded; see mcp_bridge). A remote owner's own servers
    connect only where `Owner.check_addresses` allowed (checked again at each connect: DNS rebinding)."""
    replaced = agent.sessions.get(session.session_id)
    if replaced is not None and replaced.mcp is not None:
        replaced.mcp.stop()  # a load or resume of an open session: its servers start again with the new one
    session.edge = edge
    agent.sessions.add(session)
    servers = merge_servers(agent.config.mcp_servers, session.mcp_servers)
    if servers:
        agent.processes.adopt_orphans()  # stdio MCP servers are children too: their orphans must come to us
    session.mcp = agent.mcp.open(
        servers,
        session.cwd,
        (session.cwd, *session.additional_directories),
        untrusted=session.mcp_servers if owner.remote else (),
        allowed_hosts=owner.mcp_hosts,
        messages=edge.mcp_messages,  # the servers its client offers over ACP travel on its connection
    )


def offered_models(agent: Agent, session: Session) -> tuple[str, ...]:
    """The models the session may pick now, remembered as what its client was told once it was told anything."""
    offered = agent.models.offered(session.model)
    if session.offered_models is not None:
        session.offered_models = offered
    return offered


async def new_session(
    agent: Agent,
    edge: Edge,
    place: Place,
    client: ClientTools,
    prompt_policy: PromptPolicy,
    *,
    owner: Owner = LOCAL,
) -> Session:
    """A new session, stored (committed before the client learns its id: a kill -9 after the answer keeps it; a
    failed commit is an error and the session is never registered), its lease held by this replica (PostgreSQL),
    registered and attached to `edge`. The
    connection's credentials and its limit of open sessions were checked by its handler (protocol/editor_connection.py
    `EditorConnection.opening`), as for a restore and a fork."""
    _check_directories(place, owner)
    await owner.check_addresses(place.mcp_servers)
    discover_models(agent)  # a due refresh in the background, never awaited here
    await agent.models.ready()  # the cached lists, if their read (in a worker thread) is still running
    session_id = f"sess_{uuid.uuid4().hex}"
    session = Session(
        session_id,
        _shared_path(place.cwd),
        tuple(_shared_path(d) for d in place.additional_directories),
        tuple(place.mcp_servers),
        client=client,
        mode=agent.config.permission_mode,
        model=agent.config.model,
        prompt_policy=prompt_policy,
    )
    store = await agent.store.open()
    if store is not None:
        await agent.leases.take(store, session_id)  # this replica runs it (PostgreSQL), from its first commit on
    try:
        await agent.store.save(
            lambda store: store.create_session(
                session_id,
                place.cwd,
                additional_directories=list(place.additional_directories),
                mcp_servers=list(place.mcp_servers),
                mode=session.mode,
                config={
                    MODEL_OPTION: session.model,
                    PROMPT_POLICY_OPTION: session.prompt_policy,
                    **_owned_by(owner.name),
                },
            )
        )
    except BaseException:
        await agent.leases.release(session_id)  # never answered: nobody uses it
        raise
    agent.owners.record(session_id, owner)
    _register(agent, session, edge, owner)
    return session


async def restore_session(
    agent: Agent,
    edge: Edge,
    session_id: str,
    *,
    place: Place,
    client: ClientTools,
    default_policy: PromptPolicy,
    replay: Replay | None,
    owner: Owner = LOCAL,
) -> Session:
    """`session/load` and `session/resume`: rebuild the session from the store, send `replay(loaded, session)` (the
    version's rendering of its history) if given, then register it, attached to `edge`. Another principal's session
    is answered as an unknown one, at the point an unknown one is; one attached to another connection of the same
    principal is taken over: its running turn is cancelled as at that connection's end (REMOTE.md decision 4). One
    that another replica runs (its lease live in the PostgreSQL store) is `SessionLeasedError`; this replica holds
    its lease from before the read until no connection here uses it (agent/sessions/leasing.py)."""
    _check_directories(place, owner)
    await owner.check_addresses(place.mcp_servers)
    current = agent.sessions.get(session_id)
    # An open session's owner is known here; a stored one's is in its record (read below).
    foreign = current is not None and not agent.owners.owns(owner, session_id)
    if not foreign and current is not None and not current.closed:
        running = agent.runs.running(session_id)
        if current.edge is not None and current.edge is not edge:
            await _take_over(agent, current)
        elif running is not None:
            raise SessionBusyError("the session has a prompt running; cancel it first")
    store = await agent.store.require()
    if foreign:
        raise UnknownSessionError(session_id)
    try:
        # Its lease first (PostgreSQL), then the read: what another replica committed under its lease is all in it.
        await agent.leases.take(store, session_id)
    except SessionLeasedError:
        stored = await store.load(session_id)
        if stored is None or owner_in(stored.session.config) != owner.name:
            raise UnknownSessionError(session_id) from None  # another principal's: never said to exist
        raise
    try:
        return await _restore(
            agent,
            edge,
            store,
            session_id,
            current=current,
            place=place,
            client=client,
            default_policy=default_policy,
            replay=replay,
            owner=owner,
        )
    except BaseException:
        await agent.leases.release(session_id)  # not opened here after all (kept if a connection here has it open)
        raise


async def _restore(
    agent: Agent,
    edge: Edge,
    store: SessionStore,
    session_id: str,
    *,
    current: Session | None,
    place: Place,
    client: ClientTools,
    default_policy: PromptPolicy,
    replay: Replay | None,
    owner: Owner,
) -> Session:
    """`restore_session` once this replica holds the session's lease: read, checked, rebuilt, replayed, registered."""
    loaded = await store.load(session_id, hold=True)  # held before the read: pruning leaves it
    if loaded is None:
        raise UnknownSessionError(session_id)
    if owner_in(loaded.session.config) != owner.name:
        if current is None:
            store.release(session_id)  # nobody here has it open: the hold taken for the read goes
        raise UnknownSessionError(session_id)
    if loaded.session.archived:
        # An archived session was freed as a close frees it, and stays so: a client continues it after
        # `session/unarchive` (which "never loads or resumes"; the schema tells clients to unarchive first).
        if current is None:
            store.release(session_id)
        raise InvalidArgumentError(f"sessionId: session {session_id} is archived; unarchive it first")
    agent.owners.record(session_id, owner)
    await agent.models.ready()  # a model discovery found in the cache keeps the stored model (`accepts`)
    record = loaded.session
    stored_model = record.config.get(MODEL_OPTION)
    stored_policy = record.config.get(PROMPT_POLICY_OPTION)
    config = agent.config
    session = Session(
        record.session_id,
        _shared_path(place.cwd),
        tuple(_shared_path(d) for d in place.additional_directories),
        tuple(place.mcp_servers),
        history=list(loaded.history),
        turns_started=_turns_started(loaded),
        client=client,
        mode=_known(PermissionMode, record.mode, config.permission_mode),
        model=stored_model if isinstance(stored_model, str) and agent.models.accepts(stored_model) else config.model,
        title=record.title,
        title_requested=record.title is not None,
        prompt_policy=_known(PromptPolicy, stored_policy, default_policy),
    )
    if replay is not None:
        # The whole conversation, before the response (ACP); C3 exempts this replay from the turn rule.
        replay(loaded, session)
    _register(agent, session, edge, owner)
    return session


async def _take_over(agent: Agent, session: Session) -> None:
    """Detach `session` from the connection it is attached to, as that connection's end would: its running turn
    cancelled (answered there as cancelled) and waited for within the cleanup deadline; from now on that connection
    gets the unknown-session answer for it (its edge is no longer the session's)."""
    running = agent.runs.running(session.session_id)
    agent.runs.interrupt(session.session_id)
    session.edge = None
    if running is not None:
        with anyio.move_on_after(agent.config.cleanup_deadline + 1):
            await running.wait_ended()


def _turns_started(loaded: LoadedSession) -> int:
    """How many ordinary turns the stored session ran (`Session.turns_started`, which the scripted model's turn
    counter reads): a loaded, resumed or forked session goes on counting from them, not from 0."""
    return sum(1 for turn in loaded.turns if turn.ran and parse_slash_command(turn.prompt_text) is None)


async def fork_session(
    agent: Agent,
    edge: Edge,
    source_id: str,
    *,
    place: Place,
    client: ClientTools,
    default_policy: PromptPolicy,
    owner: Owner = LOCAL,
) -> Session:
    """A new session that starts with a copy of another's conversation (a running turn in the source is copied as
    interrupted), restored without a replay; the source is untouched. Another principal's source is unknown."""
    _check_directories(place, owner)  # before the copy: no half-made fork
    await owner.check_addresses(place.mcp_servers)
    store = await agent.store.require()
    if not await _stored_owns(agent, owner, source_id):
        raise UnknownSessionError(source_id)
    new_id = f"sess_{uuid.uuid4().hex}"
    copied = await store.fork(
        source_id,
        new_id,
        cwd=place.cwd,
        additional_directories=list(place.additional_directories),
        mcp_servers=list(place.mcp_servers),
    )
    if not copied:
        raise UnknownSessionError(source_id)
    return await restore_session(
        agent, edge, new_id, place=place, client=client, default_policy=default_policy, replay=None, owner=owner
    )


async def list_stored(
    agent: Agent, cwd: str | None, cursor: str | None, owner: Owner = LOCAL, archived: str | None = None
) -> SessionPage:
    """A page of `owner`'s stored sessions (in `cwd`, if given), from `cursor`; archived ones as `archived` says
    (one of `ARCHIVE_FILTERS`; None is `exclude`, ACP's default; another value is refused, never read as
    `exclude`). Another principal's are left out of the page (which may then hold fewer, even none, with a cursor
    for more)."""
    archived = "exclude" if archived is None else archived
    if archived not in ARCHIVE_FILTERS:
        raise InvalidArgumentError(f"archived: unsupported filter {archived!r} ({', '.join(ARCHIVE_FILTERS)})")
    store = await agent.store.require()
    try:
        page = await store.list_sessions(cwd=cwd, cursor=cursor, archived=archived)
    except ValueError:
        raise InvalidArgumentError("cursor: not a cursor this server gave") from None
    owned = [summary for summary in page.sessions if summary.owner == owner.name]
    if len(owned) != len(page.sessions):
        page = replace(page, sessions=owned)
    return page


async def delete_session(agent: Agent, session_id: str, open_session: Session | None, owner: Owner = LOCAL) -> None:
    """Deleted sessions leave the list and cannot be loaded; an unknown id succeeds silently (ACP). A session open
    here (`open_session`, the caller's to look up) is closed first, exactly as a close would. Another principal's
    session is left alone, answered as an unknown id is: a deletion of an id that exists nowhere."""
    await agent.store.open()
    if not await _stored_owns(agent, owner, session_id):
        session_id, open_session = f"sess_{uuid.uuid4().hex}", None
    if open_session is not None and not open_session.closed:
        await close_session(agent, open_session)
    await agent.store.open()
    await agent.store.save(lambda store: store.delete(session_id))  # an error if the deletion was not saved
    await agent.leases.release(session_id)  # kept if another connection here has it open


def _open_for(agent: Agent, owner: Owner, session_id: str) -> Session | None:
    """The session, if it is open in this process (on any connection) and `owner`'s."""
    session = agent.sessions.get(session_id)
    if session is None or session.closed or not agent.owners.owns(owner, session_id):
        return None
    return session


async def _listed(agent: Agent, owner: Owner, session_id: str) -> SessionSummary:
    """The session as `session/list` shows it (archived or not), or `UnknownSessionError`: for an id stored
    nowhere, deleted, a subagent's, or another principal's (answered exactly as an unknown one)."""
    store = await agent.store.require()
    summary = await store.summary(session_id)
    if summary is None or summary.owner != owner.name:
        raise UnknownSessionError(session_id)
    return summary


def _normalized_title(title: str) -> str:
    """A client's title as stored: its whitespace runs (line breaks too) one space, other control characters (an
    escape sequence's ESC, say) left out, trimmed, at most `MAX_TITLE_CHARS` (as `/title`'s): it is shown in lists and
    terminals. Empty after that is the client's error."""
    printable = "".join(ch for ch in " ".join(title.split()) if unicodedata.category(ch) != "Cc")
    normalized = printable.strip()[:MAX_TITLE_CHARS].rstrip()
    if not normalized:
        raise InvalidArgumentError("title: empty (after trimming its whitespace)")
    return normalized


async def set_title(agent: Agent, session_id: str, title: str, owner: Owner = LOCAL) -> str:
    """`session/set_title`: the title stored (committed before this returns) and, for a session open here, held and
    announced to its connection; what was stored is returned. No generated title replaces it afterwards: an open
    session holds it from before the commit (a model title arriving meanwhile sees a title and stays out), and a
    stored one is restored with `title_requested` set."""
    normalized = _normalized_title(title)
    await _listed(agent, owner, session_id)
    session = _open_for(agent, owner, session_id)
    previous = None if session is None else session.title
    if session is not None:
        session.title, session.title_requested = normalized, True
    try:
        await agent.store.save(lambda store: store.set_title(session_id, normalized))
    except BaseException:
        if session is not None and session.title == normalized:
            session.title = previous  # not stored: the client was told it failed
        raise
    edge = None if session is None else attached(session)
    if edge is not None:
        edge.session_event(session_id, TitleChanged(normalized))
    return normalized


async def session_status(agent: Agent, session_id: str, owner: Owner = LOCAL) -> str:
    """`session/status`, without side effects: `open` when the session is in memory here (on any connection),
    `saved` when it is only stored (an archived one too: it is known, and resumable once unarchived)."""
    if _open_for(agent, owner, session_id) is not None:
        return "open"
    if session_id in agent.sessions and not agent.owners.owns(owner, session_id):
        raise UnknownSessionError(session_id)
    await _listed(agent, owner, session_id)
    return "saved"


# What a version does to close a session it archives (v2 answers the held prompts first); given the open session.
Close = Callable[[Session], Awaitable[None]]


async def archive_session(agent: Agent, session_id: str, close: Close, owner: Owner = LOCAL) -> None:
    """`session/archive`: the session leaves the default `session/list` and cannot be loaded or resumed until it
    is unarchived; its id and history stay. The flag is committed first (a failed commit changes nothing), then a
    session open here is closed by `close` as `session/close` would (its work cancelled, its resources freed). An
    archived session archives again silently."""
    await _listed(agent, owner, session_id)
    await agent.store.save(lambda store: store.set_archived(session_id, True))
    session = _open_for(agent, owner, session_id)
    if session is not None:
        await close(session)


async def unarchive_session(agent: Agent, session_id: str, owner: Owner = LOCAL) -> None:
    """`session/unarchive`: back in the default `session/list`, loadable again; it loads or resumes nothing."""
    await _listed(agent, owner, session_id)
    await agent.store.save(lambda store: store.set_archived(session_id, False))


def _owned_by(name: str) -> dict[str, str]:
    """What a session's stored config says of its owner: nothing for `local` (stdio's sessions, as before)."""
    return {} if name == LOCAL.name else {OWNER_KEY: name}


async def _stored_owns(agent: Agent, owner: Owner, session_id: str) -> bool:
    """Whether `session_id` is not another principal's: as the open session's owner says, else its stored record
    (an id stored nowhere is nobody's: it gets the unknown id's answer anyway)."""
    if session_id in agent.sessions:
        return agent.owners.owns(owner, session_id)
    store = agent.store.current
    loaded = None if store is None else await store.load(session_id)
    return loaded is None or owner_in(loaded.session.config) == owner.name


async def close_session(agent: Agent, session: Session) -> None:
    """Cancel the session's work as a cancel would, wait for its prompts to be answered (bounded), stop what it
    started, and free it. The id is refused from the moment it is marked closed."""
    session.closed = True
    runs = [run for run in (agent.runs.running(session.session_id), *session.waiting) if run is not None]
    agent.runs.interrupt(session.session_id)
    for scope in list(session.background):
        scope.cancel()
    deadline = agent.config.cleanup_deadline
    # Each run answers within the cleanup deadline; a little slack for the hand-over between them.
    with anyio.move_on_after(deadline + 1):
        for run in runs:
            await run.wait_ended()
    # Its tool calls that ignored their cancel and outlived their turn: cancelled again, waited for (shielded, at
    # most the cleanup deadline), then left behind, logged; nothing of them reaches the client in any case.
    await agent.calls.close(session.session_id, deadline)
    if session.mcp is not None:
        await session.mcp.aclose(deadline)
    agent.sessions.discard(session.session_id)


async def release_session(agent: Agent, session_id: str) -> None:
    """After a close: this process holds the session no longer (pruning may remove it again), committed before the
    response so a prune that follows sees it. Not an error when that commit fails: what the client is told, that
    the session is closed, holds in this process whatever the store did, and a hold left in the store is only
    bookkeeping (released with this process's lease once it is gone); the store retries it with its next flush.
    Its lease (PostgreSQL) goes too, so another replica may load it at once."""
    store = agent.store.current
    if store is not None:
        store.release(session_id)
        await store.flush()
    await agent.leases.release(session_id)  # another replica may load it now (PostgreSQL)


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


def mode_of(mode_id: str) -> PermissionMode:
    """The permission mode a client named, or the error it gets for an unknown one."""
    mode = _choice(PermissionMode, mode_id)
    if mode is None:
        known = ", ".join(PermissionMode)
        raise InvalidArgumentError(f"unknown mode {mode_id!r} ({known})")
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


async def set_mode(agent: Agent, session: Session, mode: PermissionMode) -> None:
    """Permission modes (ACP session modes); they may change at any time, even mid-turn."""
    async with _changing_settings(session):
        await _set_mode(agent, session, mode)


async def _set_mode(agent: Agent, session: Session, mode: PermissionMode) -> None:
    """Modes and the `mode` config option are one setting; the client hears of a change through both. Under
    `_changing_settings`; applied once committed."""
    if session.mode == mode:
        return
    await agent.store.save(lambda store: store.set_mode(session.session_id, mode))
    session.mode = mode
    edge = attached(session)
    if edge is None:
        return
    edge.session_event(session.session_id, ModeChanged(mode))
    offered = offered_models(agent, session)
    edge.session_event(session.session_id, ConfigChanged(session.model, session.mode, session.prompt_policy, offered))


async def set_option(agent: Agent, session: Session, config_id: str, value: str) -> None:
    """A config option's new value (`mode`, `model`, `prompt_policy`), committed before it is applied."""
    if config_id == MODE_OPTION:
        mode = mode_of(value)
        async with _changing_settings(session):
            await _set_mode(agent, session, mode)
    elif config_id == MODEL_OPTION:
        async with _changing_settings(session):
            if value not in agent.models.offered(session.model):
                raise InvalidArgumentError(f"value: unknown model {value!r}")
            # A missing key or a bad spec is answered now, not at the next prompt; a model of a provider the client
            # routes through its gateway (`providers/set`) needs no key of the server's.
            provider_for(agent.providers.get, session, value)
            await _save_options(agent, session, value, session.prompt_policy)
            session.model = value
    elif config_id == PROMPT_POLICY_OPTION:
        policy = _choice(PromptPolicy, value)
        if policy is None:
            raise InvalidArgumentError(f"value: unknown prompt policy {value!r}")
        async with _changing_settings(session):
            await _save_options(agent, session, session.model, policy)
            session.prompt_policy = policy
    else:
        raise InvalidArgumentError(f"configId: unknown option {config_id!r}")


async def _save_options(agent: Agent, session: Session, model: str, policy: PromptPolicy) -> None:
    """The session's stored option values as they will be, committed (an error when not) before they are applied."""
    options = {MODEL_OPTION: model, PROMPT_POLICY_OPTION: policy, **_owned_by(agent.owners.name_of(session.session_id))}
    await agent.store.save(lambda store: store.set_config(session.session_id, options))
