"""What v1's and v2's handlers do the same way, in one place so neither version's module calls the other's: the
steps of `initialize` before its answer (model discovery) and after it (the deferred side loaded, the default model
warmed), logging in and out (v1 `authenticate`/`logout`, v2 `auth/login`/`auth/logout`), and the `_acp_server/stats`
extension, served on both versions alike, and what a turn's end says when its commit failed (`not_saved`).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

import anyio

from acp_server.agent.discovery import discover_models
from acp_server.agent.providers import close_providers
from acp_server.errors import MissingCredentialsError
from acp_server.protocol.context import RequestContext
from acp_server.protocol.params import wire
from acp_server.protocol.provider_methods import auth_status_changed

if TYPE_CHECKING:
    from acp_server.agent.agent import Agent
    from acp_server.protocol.editor_connection import EditorConnection
    from acp_server.store import SessionPage

__all__ = [
    "NO_PARAMS",
    "connection_stats",
    "log_in",
    "log_out",
    "not_saved",
    "session_page",
    "stats",
    "taken_media",
    "warm_up_after_initialize",
]

log = logging.getLogger(__name__)


def not_saved() -> dict[str, Any]:
    """The `_meta` of a turn's end (v1: the prompt response; v2: its `idle`) whose commit failed: the turn happened
    as answered, but it is not stored (yet: the store retries), so a restart may not know it."""
    return {"acpServer": {"saved": False}}


# `_acp_server/stats`: no params of its own (`_meta` and unknown fields allowed, as everywhere).
NO_PARAMS = wire("NoParams")


async def taken_media(context: RequestContext) -> frozenset[str]:
    """What both versions' `initialize` does before it answers: start model discovery (the cached lists read in a
    worker thread, awaited: a short local read, off the event loop; a refresh in the background, never awaited; a
    session/new right behind offers them), and, once the answer is out, load the deferred side and warm the default
    model. Returns what any model a session may pick takes in a prompt (images, sounds): a prompt for one that does
    not is refused then."""
    agent = context.agent
    discover_models(agent)
    await agent.models.ready()
    # Once this answer is out: the deferred side loaded (protocol/deferred.py), then the default model warmed
    # (agent/warmup.py); a session on another model warms its own when it opens.
    context.after.append(lambda: agent.spawn(warm_up_after_initialize, agent))
    return frozenset().union(*(agent.config.accepts(spec) for spec in agent.models.current))


async def warm_up_after_initialize(agent: Agent) -> None:
    """Load the deferred side, then warm the default model (agent/warmup.py). Counted as a warm-up throughout
    (`_acp_server/stats`), so a test that waits for the warm-ups to end waits for the load too.

    Nothing is started once the agent is ending (stdio: its connection is shutting down). A deferred side that
    cannot be loaded is said once on stderr and ends this task alone: the connection goes on, answering each request
    that needs the side that error (protocol/deferred.py)."""
    if agent.ending:
        return
    agent.providers.warm_ups_running += 1
    try:
        await agent.side.load_rest()  # the part requests wait for, then what only a turn needs
        agent.turns  # noqa: B018 - built now, off any request's path
    except Exception as exc:  # a broken install (an RpcError naming the module); a cancel goes on as one
        log.error("%s", exc, exc_info=exc.__cause__)
        return
    finally:
        agent.providers.warm_ups_running -= 1
    if agent.ending:
        return
    agent.warm_up(agent.config.model)


def log_in(context: RequestContext) -> dict[str, Any]:
    """What v1's `authenticate` and v2's `auth/login` do once the method is known: end a logout, look for the key
    again, and let the endpoints that needed it be asked for their models."""
    agent, connection = context.agent, context.connection
    credentials = connection.credentials
    # Whether a key was missing to what asks the endpoints for their models: the process's (stdio), or the server's
    # (a remote connection's own logout hid the key from its sessions only).
    was_missing = credentials.problem is not None if connection.whole_process else agent.auth.problem is not None
    found = credentials.authenticate()
    context.after.append(lambda: auth_status_changed(connection))  # answered or refused, the status may differ
    if not found:
        raise MissingCredentialsError(credentials.problem)
    if was_missing:
        agent.models.credentials_changed()  # the endpoints that could not be asked without a key can be now
        context.after.append(lambda: discover_models(agent))
    return {}


def log_out(context: RequestContext) -> dict[str, Any]:
    """What v1's `logout` and v2's `auth/logout` do: forget the keys for this connection's sessions (and, on the
    connection that is the whole process, the process's: the dropped providers' clients are closed later)."""
    agent = context.agent
    dropped = context.connection.credentials.logout()
    connection = context.connection
    context.after.append(lambda: auth_status_changed(connection))
    if dropped:  # their clients are closed in a task of the agent, once the turns running now have ended
        running = agent.runs.current()
        deadline = agent.config.cleanup_deadline
        context.after.append(lambda: agent.spawn(close_providers, dropped, running, deadline))
    return {}


async def stats(context: RequestContext, params: object) -> dict[str, Any]:
    """Live counts, so tests and users can see that nothing leaks. The request's own task is counted. The process's
    own figures on the connection that is the whole process (stdio); on one of many, its own sessions' alone
    (`connection_stats`)."""
    agent, connection = context.agent, context.connection
    if not connection.whole_process:
        return connection_stats(connection)
    rpc = connection.rpc
    sessions = list(agent.sessions)
    return {
        "sessions": len(sessions),
        "runningTurns": agent.runs.running_turns,
        "queuedPrompts": agent.runs.queued_prompts(sessions),
        "pendingClientRequests": rpc.pending_client_requests,
        "requestsInFlight": rpc.requests_in_flight,
        "tasks": len(anyio.get_running_tasks()),
        # Background warm-ups of a model (agent/warmup.py) among those tasks: they end on their own, so a test
        # that counts tasks before and after takes its "before" once they have.
        "warmUps": agent.providers.warm_ups_running,
        "childProcesses": len(agent.processes),
        # Sessions whose MCP servers are not all shut down yet (closed sessions' servers included until they are).
        "mcpSessions": len(agent.mcp),
        **_traced_bytes(),
    }


def connection_stats(connection: EditorConnection) -> dict[str, Any]:
    """`_acp_server/stats` for one of many connections (REMOTE.md decision 10): what its own sessions have (their
    running turns, subagents' included, queued prompts, child processes and MCP servers) and its own requests; never
    a figure of the process as a whole (its tasks, its memory, warm-ups), which would tell of other connections'."""
    agent = connection.agent
    sessions = connection.sessions()
    runs = [run for run in agent.runs.current() if connection.owns(run.session)]
    session_ids = {session.session_id for session in sessions} | {run.session_id for run in runs}
    rpc = connection.rpc
    return {
        "sessions": len(sessions),
        "runningTurns": len(runs),
        "queuedPrompts": agent.runs.queued_prompts(sessions),
        "pendingClientRequests": rpc.pending_client_requests,
        "requestsInFlight": rpc.requests_in_flight,
        "childProcesses": agent.processes.started_by(session_ids),
        "mcpSessions": sum(1 for session in sessions if session.mcp is not None and not session.mcp.finished),
    }


def _traced_bytes() -> dict[str, int]:
    """`tracedBytes`: what Python holds allocated right now, when it traces allocations (`PYTHONTRACEMALLOC=1`), so
    a test (or a user) can see that what a turn allocated was let go, without collecting anything first: memory only
    the cyclic collector would free counts, since the server runs it rarely (server.GC_THRESHOLD). Absent otherwise."""
    import tracemalloc  # noqa: PLC0415 (start-up: tracemalloc only for the stats request)

    return {"tracedBytes": tracemalloc.get_traced_memory()[0]} if tracemalloc.is_tracing() else {}


def session_page(page: SessionPage) -> dict[str, Any]:
    """A `session/list` result of stored sessions, the same shape on both versions."""
    sessions = []
    for summary in page.sessions:
        entry: dict[str, Any] = {
            "sessionId": summary.session_id,
            "cwd": summary.cwd,
            "additionalDirectories": list(summary.additional_directories),
            "updatedAt": summary.updated_at,
            # Every listed session says it: both versions advertise `archive` wherever sessions are stored.
            "archived": summary.archived,
        }
        if summary.title is not None:
            entry["title"] = summary.title
        sessions.append(entry)
    result: dict[str, Any] = {"sessions": sessions}
    if page.next_cursor is not None:
        result["nextCursor"] = page.next_cursor
    return result
