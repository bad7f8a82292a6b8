"""The methods a v2 connection serves, by wire name (ACP-V2.md §21.1). v1-only methods (`authenticate`, `logout`,
`session/load`, `session/set_mode`, `session/fork`) are absent, so they are `-32601` on v2 (`auth/login` and
`auth/logout` replace the first two); `session/cancel`
is v1's cancel that then answers the held prompts it withdrew (protocol/v2/withdrawals.py); `$/cancel_request` is
v2's own, acting only on a held prompt (see protocol/v2/prompt.py for what a withdrawn held prompt answers).
"""

from __future__ import annotations

from acp_server.protocol.context import Handler, NotificationHandler
from acp_server.protocol.handlers import METHODS, NOTIFICATIONS
from acp_server.protocol.schema import (
    AuthenticateRequest,
    CloseSessionRequest,
    DeleteSessionRequest,
    ListSessionsRequest,
    LogoutRequest,
    PromptRequest,
    SetSessionConfigOptionRequest,
)
from acp_server.protocol.session_handlers import session_delete
from acp_server.protocol.v2.auth import auth_login, auth_logout
from acp_server.protocol.v2.cancels import tool_call_cancel
from acp_server.protocol.v2.prompt import cancel_request_v2, session_prompt_v2
from acp_server.protocol.v2.schema import (
    CancelTerminalRequest,
    CancelToolCallRequest,
    NewSessionRequestV2,
    ResumeSessionRequestV2,
)
from acp_server.protocol.v2.sessions import (
    session_close_v2,
    session_list_v2,
    session_new_v2,
    session_resume_v2,
    session_set_config_option_v2,
)
from acp_server.protocol.v2.terminals import terminal_cancel
from acp_server.protocol.v2.withdrawals import session_cancel_v2

__all__ = ["METHODS_V2", "NOTIFICATIONS_V2"]

METHODS_V2: dict[str, Handler] = {
    "initialize": METHODS["initialize"],
    "auth/login": (AuthenticateRequest, auth_login),
    "auth/logout": (LogoutRequest, auth_logout),
    "session/new": (NewSessionRequestV2, session_new_v2),
    "session/prompt": (PromptRequest, session_prompt_v2),
    "session/set_config_option": (SetSessionConfigOptionRequest, session_set_config_option_v2),
    "session/close": (CloseSessionRequest, session_close_v2),
    "session/resume": (ResumeSessionRequestV2, session_resume_v2),
    "session/list": (ListSessionsRequest, session_list_v2),
    "session/delete": (DeleteSessionRequest, session_delete),
    "tool_call/cancel": (CancelToolCallRequest, tool_call_cancel),
    "terminal/cancel": (CancelTerminalRequest, terminal_cancel),
    "_acp_server/stats": METHODS["_acp_server/stats"],
}

NOTIFICATIONS_V2: dict[str, NotificationHandler] = {
    **NOTIFICATIONS,
    "session/cancel": (NOTIFICATIONS["session/cancel"][0], session_cancel_v2),
    "$/cancel_request": (NOTIFICATIONS["$/cancel_request"][0], cancel_request_v2),
}
