"""Held v2 prompts withdrawn by a cancel are answered by the cancel itself, at once (ACP-V2.md §7, §20.1, §20.2).

§20.1 orders what a cancel sends: first each held prompt's `-32800`, in the order the prompts were received, then
`$/cancel_request` for the work's pending requests to the client, its final updates and `idle cancelled`. A held
prompt's own request handler (protocol/v2/prompt.py) would answer only once its task next runs, which leaves the
order to task scheduling. So every cancel that claims held prompts (`session/cancel`, `session/close`, a prompt under
the `interrupt` policy, `$/cancel_request` naming one) calls `withdraw_held` right after the claim, synchronously:
the answers are queued in the session's admission order before anything of the cancelled work can be, and the
dispatcher drops what the withdrawn prompts' handlers return later (`Parts.withdrawn`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from acp_server.agent.sessions.runs import RunContext, Session
from acp_server.jsonrpc.rpc import ErrorCode, error_message
from acp_server.protocol.context import Parts

if TYPE_CHECKING:  # imported on first use (protocol/params.py)
    from acp_server.protocol.schema import CancelNotification

__all__ = ["WITHDRAWN", "session_cancel_v2", "withdraw", "withdraw_held"]

WITHDRAWN = "Request cancelled: the prompt was withdrawn before it was inserted"


def withdraw_held(parts: Parts, session: Session) -> None:
    """Answer `-32800` now, in the order received, every prompt of `session` a cancel claimed while it was held
    (never inserted) and that is not answered yet."""
    for run in parts.runs.withdrawn(session):
        withdraw(parts, run)


def withdraw(parts: Parts, run: RunContext) -> None:
    """One prompt: answered `-32800` now if a cancel claimed it while it was held and it is still unanswered."""
    if not run.withdrawn or parts.prompts.get(run.request_id) is not run:
        return  # not claimed, inserted (answered `{messageId}`), or answered already
    del parts.prompts[run.request_id]  # answered: `$/cancel_request` no longer names it
    parts.withdrawn.add(run)
    parts.connection.send(error_message(run.request_id, ErrorCode.REQUEST_CANCELLED, WITHDRAWN))


def session_cancel_v2(parts: Parts, params: CancelNotification) -> None:
    """`session/cancel` on v2: v1's cancel (the running work and every prompt admitted before it), then the held
    prompts' answers, before anything of the work."""
    run = parts.runs.running(params.session_id)
    parts.runs.interrupt(params.session_id)
    if run is not None:
        withdraw_held(parts, run.session)
