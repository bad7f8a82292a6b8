"""The methods a v2 connection serves, by wire name (ACP-V2.md §21.1). v1-only methods (`authenticate`, `logout`,
`session/load`, `session/set_mode`, `session/fork`) are absent, so they are `-32601` on v2 (`auth/login` and
`auth/logout` replace the first two); `session/cancel`
cancels as v1's does and then answers the held prompts it withdrew (protocol/v2/withdrawals.py); `$/cancel_request` is
v2's own, acting only on a held prompt (see protocol/v2/prompt.py for what a withdrawn held prompt answers).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from acp_server.agent.sessions.runs import RunState
from acp_server.protocol.context import Handler, NotificationHandler
from acp_server.protocol.deferred import after_load, deferred
from acp_server.protocol.editor_connection import EditorConnection
from acp_server.protocol.params import INITIALIZE, wire, wire_v2
from acp_server.protocol.shared_methods import NO_PARAMS, stats
from acp_server.protocol.v2.auth import auth_login, auth_logout
from acp_server.protocol.v2.initialize import initialize_v2
from acp_server.protocol.v2.withdrawals import session_cancel_v2, withdraw

if TYPE_CHECKING:  # imported on first use (protocol/params.py)
    from acp_server.protocol.schema import CancelRequestNotification

__all__ = ["METHODS_V2", "NOTIFICATIONS_V2"]

# Where the session side's handlers live (protocol/deferred.py: loaded once `initialize` is answered).
SESSIONS = "acp_server.protocol.v2.sessions"

METHODS_V2: dict[str, Handler] = {
    "initialize": (INITIALIZE, initialize_v2),
    # In order behind the session side's requests pipelined before them (protocol/deferred.py).
    "auth/login": (wire("AuthenticateRequest"), after_load(auth_login)),
    "auth/logout": (wire("LogoutRequest"), after_load(auth_logout)),
    "session/new": (wire_v2("NewSessionRequestV2"), deferred(SESSIONS, "session_new_v2")),
    "session/prompt": (wire("PromptRequest"), deferred("acp_server.protocol.v2.prompt", "session_prompt_v2")),
    "session/set_config_option": (
        wire("SetSessionConfigOptionRequest"),
        deferred(SESSIONS, "session_set_config_option_v2"),
    ),
    "session/close": (wire("CloseSessionRequest"), deferred(SESSIONS, "session_close_v2")),
    "session/resume": (wire_v2("ResumeSessionRequestV2"), deferred(SESSIONS, "session_resume_v2")),
    "session/list": (wire("ListSessionsRequest"), deferred(SESSIONS, "session_list_v2")),
    "session/delete": (wire("DeleteSessionRequest"), deferred(SESSIONS, "session_delete_v2")),
    "tool_call/cancel": (
        wire_v2("CancelToolCallRequest"),
        deferred("acp_server.protocol.v2.cancels", "tool_call_cancel"),
    ),
    "terminal/cancel": (
        wire_v2("CancelTerminalRequest"),
        deferred("acp_server.protocol.v2.terminals", "terminal_cancel"),
    ),
    "_acp_server/stats": (NO_PARAMS, stats),
}


def cancel_request_v2(connection: EditorConnection, params: CancelRequestNotification) -> None:
    """`$/cancel_request` on v2 (§20.5, §23 Q10): it withdraws a prompt still held (QUEUED, not inserted) and
    nothing else. A prompt inserted at admission (an idle session) is already the session's work, whose only
    cancel is `session/cancel`: naming it is ignored, as is naming any other request."""
    run = connection.prompts.get(params.request_id)  # this connection's own prompts
    if run is not None and run.state is RunState.QUEUED:
        connection.agent.runs.cancel_run(run)
        withdraw(connection, run)  # answered -32800 now (protocol/v2/withdrawals.py)


NOTIFICATIONS_V2: dict[str, NotificationHandler] = {
    "session/cancel": (wire("CancelNotification"), session_cancel_v2),
    "$/cancel_request": (wire("CancelRequestNotification"), cancel_request_v2),
}
