"""The v2 prompt lifecycle (ACP-V2.md §6, §7, §23 Q2/Q4/Q14): `session/prompt` is answered the moment the prompt is
inserted, and the work is reported by `state_update`s.

Admission is v1's (AcpDispatcher.prepare, in reader order; the session's prompt policy applies). A prompt admitted
behind running work is *held* (the run registry's QUEUED) until the work ends; a cancel that claims it first
(`session/cancel`, `$/cancel_request` naming it, `session/close`) withdraws it: `-32800`, nothing inserted, no echo.
Otherwise it is inserted: the response `{messageId}` goes out, then the `user_message` echo and `running`; the turn
runs in a task the connection owns, and ends with `idle` and its stop reason — `error` with the error for a failure
(never a response error once the message is in) — which is the last thing sent for the work: the turn is sealed by
then. Only then does the session pass to the next held prompt.
"""

from __future__ import annotations

import logging
import uuid
from typing import Any

from acp_server.agent.sessions.runs import RunContext, RunState
from acp_server.agent.sessions.turn import commit_prompt, execute_prompt, execute_unjoined_steer, release_prompt
from acp_server.agent.titles import title_session
from acp_server.errors import TurnFailedError
from acp_server.jsonrpc.rpc import ErrorCode, RpcError
from acp_server.protocol.context import RequestContext
from acp_server.protocol.editor_connection import EditorConnection
from acp_server.protocol.schema import PromptRequest
from acp_server.protocol.shared_methods import not_saved
from acp_server.protocol.v2.updates import idle, running, user_message
from acp_server.protocol.v2.withdrawals import WITHDRAWN
from acp_server.protocol.wire_errors import rpc_error
from acp_server.runtime.model import StopReason

__all__ = ["session_prompt_v2"]

log = logging.getLogger(__name__)


async def session_prompt_v2(context: RequestContext, params: PromptRequest) -> dict[str, Any]:
    if context.admission_error is not None:
        raise context.admission_error
    run = context.run
    assert run is not None, "a valid prompt is always admitted or refused in prepare()"
    connection = context.connection
    connection.credentials.require_for(run.session.model)  # a model that takes no key is never refused
    if run.steers and run.state is RunState.QUEUED:
        return await _insert_now(context, run)
    await run.wait_until(lambda: run.state is not RunState.QUEUED)  # held while the session's work runs
    if run.withdrawn:
        # Claimed while it was held, before it was inserted: withdrawn. The dispatcher releases it once this error
        # is queued. (A prompt inserted, at admission or at its hand-over, and cancelled at once is answered, and its
        # work ends `idle cancelled`.)
        # (Its cancel has normally answered it already, at once: then the dispatcher drops this answer.)
        raise RpcError(ErrorCode.REQUEST_CANCELLED, WITHDRAWN)
    message_id = f"msg_{uuid.uuid4().hex}"
    run.prompt.message_id = message_id  # the store keeps it, so a replay shows the id this response returns
    # The answer acknowledges the message by its id: it is committed first (a kill -9 right after loses nothing).
    answer = await _acknowledged(connection, run, message_id)
    # Inserted: the request is answered now, the work is this module's from here on (not the dispatcher's).
    context.run = None
    if connection.prompts.get(context.request_id) is run:
        del connection.prompts[context.request_id]  # `$/cancel_request` no longer names it (§23 Q10)
    context.after.append(lambda: _insert(connection, run, message_id))
    return answer


async def _acknowledged(connection: EditorConnection, run: RunContext, message_id: str) -> dict[str, Any]:
    """The answer to an inserted prompt, once its message is committed (the turn's record opened now); a commit that
    failed says so (`saved: false`, as a turn's end does), the message kept for the store's next flush."""
    answer: dict[str, Any] = {"messageId": message_id}
    if not await commit_prompt(connection.agent.turns, run):
        answer["_meta"] = not_saved()
    return answer


async def _insert_now(context: RequestContext, run: RunContext) -> dict[str, Any]:
    """`steer` (§7 insert now): the prompt joins the running work at once. It is answered and echoed now, and the
    work stays `running`: the core hands the turn over to it at the next model-call boundary, and the one `idle` is
    the joined work's. A cancel before the hand-over ends the joined work (one `idle cancelled`)."""
    connection = context.connection
    message_id = f"msg_{uuid.uuid4().hex}"
    run.prompt.message_id = message_id
    answer = await _acknowledged(connection, run, message_id)
    context.run = None
    if connection.prompts.get(context.request_id) is run:
        del connection.prompts[context.request_id]

    def joined() -> None:
        update = user_message(message_id, run.prompt.blocks())
        connection.rpc.notify("session/update", {"sessionId": run.session_id, "update": update})
        connection.rpc.spawn(_joined_work, connection, run)

    context.after.append(joined)
    return answer


async def _joined_work(connection: EditorConnection, run: RunContext) -> None:
    """A steering prompt's part of the work, once the running turn hands over to it."""
    await run.wait_until(lambda: run.state is not RunState.QUEUED)
    if run.withdrawn:
        # Cancelled with the work it joined, before the hand-over: that work's `idle cancelled` has ended it, so
        # nothing more is sent for it, but its message is kept (recorded after that work's). Cancelled after the
        # hand-over, the work is its own (the predecessor sent no idle): the normal path below ends it with `idle
        # cancelled`.
        turns = connection.agent.turns
        try:
            await execute_unjoined_steer(turns, run)
        finally:
            release_prompt(turns, run)
        return
    # Repeated snapshots are idempotent: after a predecessor that failed (its idle sent) this starts the work again.
    connection.rpc.notify("session/update", {"sessionId": run.session_id, "update": running()})
    await _work(connection, run)


def _insert(connection: EditorConnection, run: RunContext, message_id: str) -> None:
    """Right after the response is queued: the echo, `running`, and the work in a task of the connection's."""
    session_id = run.session_id
    notify = connection.rpc.notify
    notify("session/update", {"sessionId": session_id, "update": user_message(message_id, run.prompt.blocks())})
    notify("session/update", {"sessionId": session_id, "update": running()})
    connection.rpc.spawn(_work, connection, run)


async def _work(connection: EditorConnection, run: RunContext) -> None:
    agent = connection.agent
    try:
        error: dict[str, Any] | None = None
        try:
            stop: str = await execute_prompt(agent.turns, run)
        except TurnFailedError as exc:  # no response to answer: its error goes in the `idle`, as the mapping says
            failed = rpc_error(exc)
            stop, error = "error", {"code": failed.code, "message": failed.message}
        except Exception:  # a defect past the turn's own handling: the work still ends, as an error (not a crash)
            log.exception("session %s: the v2 turn failed", run.session_id)
            message = "Internal error: the turn failed; see the server log"
            stop, error = "error", {"code": int(ErrorCode.INTERNAL_ERROR), "message": message}
        # Sealed by now (execute_prompt returns or raises only after `_seal`): nothing of the work follows this idle.
        # Unless a steering prompt carries the work on (it was inserted, §7): then the idle is the joined work's.
        if not (stop == StopReason.END_TURN and agent.runs.hand_over_due(run.session)):
            update = idle(stop, error)
            if not run.saved:  # as v1's prompt response: the commit of the turn's end failed
                update["_meta"] = not_saved()
            connection.rpc.notify("session/update", {"sessionId": run.session_id, "update": update})
    finally:
        first_prompt = release_prompt(agent.turns, run)  # also when the connection's shutdown cancels this task
    if first_prompt is not None:
        agent.spawn(title_session, agent, run.session, first_prompt)
