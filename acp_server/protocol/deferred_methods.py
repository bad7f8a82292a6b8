"""The methods the deferred side serves, by wire name, with their params and handlers: a plain table per version,
imported with the deferred side (cli/deferred_side.py) once `initialize` is answered (protocol/deferred.py).

The start-up tables (protocol/handlers.py, protocol/v2/handlers.py) list these methods by wire name only
(`DEFERRED_SIDE_METHODS`): the dispatcher sends a request for one here once the deferred side is loaded, the request
waiting for that load. `authenticate` and `logout` (v2: `auth/login`, `auth/logout`) are start-up code, served from
here so that they too take effect after the deferred side's requests pipelined before them (`initialize; session/new;
logout` in one write opens the session, then logs out).
"""

from __future__ import annotations

from acp_server.protocol.context import Handler
from acp_server.protocol.handlers import authenticate, logout
from acp_server.protocol.params import wire, wire_v2
from acp_server.protocol.session_handlers import (
    session_archive,
    session_close,
    session_delete,
    session_fork,
    session_list,
    session_load,
    session_new,
    session_resume,
    session_set_config_option,
    session_set_mode,
    session_set_title,
    session_status,
    session_unarchive,
)
from acp_server.protocol.v2.auth import auth_login, auth_logout
from acp_server.protocol.v2.cancels import tool_call_cancel
from acp_server.protocol.v2.sessions import (
    session_archive_v2,
    session_close_v2,
    session_delete_v2,
    session_fork_v2,
    session_list_v2,
    session_new_v2,
    session_resume_v2,
    session_set_config_option_v2,
    session_set_title_v2,
    session_status_v2,
    session_unarchive_v2,
)
from acp_server.protocol.v2.terminals import terminal_cancel

__all__ = ["DEFERRED_METHODS", "DEFERRED_METHODS_V2"]

DEFERRED_METHODS: dict[str, Handler] = {
    "authenticate": (wire("AuthenticateRequest"), authenticate),
    "logout": (wire("LogoutRequest"), logout),
    "session/new": (wire("NewSessionRequest"), session_new),
    "session/set_mode": (wire("SetSessionModeRequest"), session_set_mode),
    "session/set_config_option": (wire("SetSessionConfigOptionRequest"), session_set_config_option),
    "session/close": (wire("CloseSessionRequest"), session_close),
    "session/load": (wire("LoadSessionRequest"), session_load),
    "session/resume": (wire("LoadSessionRequest"), session_resume),
    "session/list": (wire("ListSessionsRequest"), session_list),
    "session/delete": (wire("DeleteSessionRequest"), session_delete),
    "session/fork": (wire("LoadSessionRequest"), session_fork),
    # Unstable in ACP v1 (schema.unstable.json), as `session/fork` is.
    "session/set_title": (wire("SetSessionTitleRequest"), session_set_title),
    "session/status": (wire("SessionIdRequest"), session_status),
    "session/archive": (wire("SessionIdRequest"), session_archive),
    "session/unarchive": (wire("SessionIdRequest"), session_unarchive),
}

DEFERRED_METHODS_V2: dict[str, Handler] = {
    "auth/login": (wire("AuthenticateRequest"), auth_login),
    "auth/logout": (wire("LogoutRequest"), auth_logout),
    "session/new": (wire_v2("NewSessionRequestV2"), session_new_v2),
    "session/set_config_option": (wire("SetSessionConfigOptionRequest"), session_set_config_option_v2),
    "session/close": (wire("CloseSessionRequest"), session_close_v2),
    "session/resume": (wire_v2("ResumeSessionRequestV2"), session_resume_v2),
    "session/list": (wire("ListSessionsRequest"), session_list_v2),
    "session/delete": (wire("DeleteSessionRequest"), session_delete_v2),
    # Unstable in the v2 draft (v2/schema.unstable.json).
    "session/fork": (wire_v2("ForkSessionRequestV2"), session_fork_v2),
    "session/set_title": (wire("SetSessionTitleRequest"), session_set_title_v2),
    "session/status": (wire("SessionIdRequest"), session_status_v2),
    "session/archive": (wire("SessionIdRequest"), session_archive_v2),
    "session/unarchive": (wire("SessionIdRequest"), session_unarchive_v2),
    "tool_call/cancel": (wire_v2("CancelToolCallRequest"), tool_call_cancel),
    "terminal/cancel": (wire_v2("CancelTerminalRequest"), terminal_cancel),
}
