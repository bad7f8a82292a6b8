"""Held v2 prompts withdrawn by a cancel are answered by the cancel itself, at once (ACP-V2.md §7, §20.1, §20.2).

§20.1 orders what a cancel sends: first each held prompt's `-32800`, in the order the prompts were received, then
`$/cancel_request` for the work's pending requests to the client, its final updates and `idle cancelled`. A held
prompt's own request handler (protocol/v2/prompt.py) would answer only once its task next runs, which leaves the
order to task scheduling. So every cancel that claims held prompts (`session/cancel`, `session/close`, a prompt under
the `interrupt` policy, `$/cancel_request` naming one) calls `withdraw_held` right after the claim, synchronously:
the answers are queued in the session's admission order before anything of the cancelled work can be, and the
dispatcher drops what the withdrawn prompts' handlers return later (`EditorConnection.withdrawn`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from acp_server.agent.sessions.runs import RunContext, Session
from acp_server.jsonrpc.rpc import ErrorCode, error_message
from acp_server.protocol.editor_connection import EditorConnection

if TYPE_CHECKING:  # imported on first use (protocol/params.py)
    from acp_server.protocol.schema import CancelNotification

__all__ = ["WITHDRAWN", "admitted_v2", "session_cancel_v2", "withdraw", "withdraw_held"]

WITHDRAWN = "Request cancelled: the prompt was withdrawn before it was inserted"


def withdraw_held(connection: EditorConnection, session: Session) -> None:
    """Answer `-32800` now, in the order received, every prompt of `session` a cancel claimed while it was held
    (never inserted) and that is not answered yet."""
    for run in connection.agent.runs.withdrawn(session):
        withdraw(connection, run)


def withdraw(connection: EditorConnection, run: RunContext) -> None:
    """One prompt: answered `-32800` now if a cancel claimed it while it was held and it is still unanswered."""
    if not run.withdrawn or connection.prompts.get(run.request_id) is not run:
        return  # not claimed, inserted (answered `{messageId}`), or answered already
    del connection.prompts[run.request_id]  # answered: `$/cancel_request` no longer names it
    connection.withdrawn.add(run)
    # `respond`: out of band, yet into its batch's array if the prompt came in a batch (jsonrpc/connection.py).
    connection.rpc.respond(error_message(run.request_id, ErrorCode.REQUEST_CANCELLED, WITHDRAWN))


def admitted_v2(connection: EditorConnection, run: RunContext) -> None:
    """What v2's admission adds (protocol/dispatcher.py `Version.admitted`): the `interrupt` policy cancels what
    was admitted before this prompt, and the held prompts among it answer first."""
    withdraw_held(connection, run.session)


def session_cancel_v2(connection: EditorConnection, params: CancelNotification) -> None:
    """`session/cancel` on v2: the running work and every prompt admitted before it are cancelled (of this
    connection's sessions only, as on v1), then the held prompts answered, before anything of the work."""
    runs = connection.agent.runs
    run = runs.running(params.session_id)
    if run is None or not connection.owns(run.session):
        return
    runs.interrupt(params.session_id)
    withdraw_held(connection, run.session)
