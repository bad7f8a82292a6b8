"""Every error the server names, in one tree (as httpx's `_exceptions.py` draws its own):

AcpServerError                      the root; never a cancellation (anyio's is a BaseException, and passes)
 ├── SettingsError (ValueError)     the config file cannot be used
 ├── StateFileError (OSError)       a file in the state directory that is not a regular file, or too large
 ├── ModelSpecError (ValueError)    a model spec that cannot be used                          -32602 "Invalid params: …"
 │    ├── UnknownModelError         it names no provider we have
 │    └── ScriptError               the scripted model's script cannot be run
 ├── ProviderRouteError (ValueError) a client's providers/set or disable refused          -32602 "Invalid params: …"
 ├── MissingCredentialsError        no API key, or forgotten by `logout`             -32000 "Authentication required: …"
 ├── ModelError (RuntimeError)      a provider failure meant for the user
 │    ├── KeyRefusedError           the endpoint refused the key (401, 403)
 │    └── ProviderError             the scripted model's stand-in for one
 ├── ListingError (ValueError)      a models list that is not one
 │    └── ListingTooLargeError      larger than its bound
 ├── ToolError                      a tool call failed: the model reads why, the turn goes on
 │    └── OutsideError              a path leads outside the session's directories
 ├── McpServerError                 an MCP server cannot be used
 ├── StoreUnavailable               the session store cannot be read           -32603 "cannot read the session store: …"
 │    └── ChangeNotSavedError       a change a request acknowledges was not committed
 │                                                                  -32603 "Internal error: the change was not saved: …"
 ├── NoStoreError                   sessions are not stored here (--no-store, or the store could not be opened)
 │                                                                  -32603 "Stored sessions are not available: …"
 ├── InvalidArgumentError (ValueError) a request's argument the core cannot take           -32602 "Invalid params: …"
 ├── UnknownSessionError            no open (or stored) session has the id              -32002 "unknown session: …"
 ├── SubagentSessionError           a subagent's session named where only a cancel may name it           -32602
 ├── SessionBusyError               a load or resume of a session with a prompt running                  -32600
 ├── SessionLeasedError            another replica holds the session's lease (or this one lost it)      -34001
 ├── PromptRejectedError            a prompt refused at admission                                     -32600 (or -32602)
 ├── TurnFailedError                a turn failed without a cancel                                                -32603
 ├── TransitionError (RuntimeError) a run asked for a transition its state does not allow: a bug
 ├── TranscriptError (ValueError)   a transcript file that does not follow the format
 ├── PeerGoneError                  the recorded agent stopped reading its stdin
 └── ServeSetupError (ValueError)   remote ACP cannot start as set up: a token file that is not private, no TLS off
                                    loopback

StreamAbortedError (RuntimeError)   outside the root on purpose: the scripted model's stand-in for a library's error

A number is the JSON-RPC error a request answers when the error reaches the protocol edge, given by one function
(protocol/wire_errors.py `rpc_error`, which the error boundary in jsonrpc/rpc.py asks): nothing else translates. An
error without a number that reaches the edge is a defect: logged with its traceback and answered -32603 with a short
message, never its text.

The wire's own errors stay with the wire (jsonrpc/): `RpcError`, what a request is answered, and `ClientRequestError`,
what the client answered one of ours. The private errors that never leave the module raising them (`_UnsureError`,
`_InvalidError`, `_AbandonedError`) stay there too, as does the chat client's (another program).

The lowest layer: it imports nothing, and the layers that raise or catch its errors import it. The builtin bases
(ValueError, OSError, RuntimeError) are kept, so what caught one of these by its builtin still does.
"""

from __future__ import annotations

__all__ = [
    "AcpServerError",
    "ChangeNotSavedError",
    "InvalidArgumentError",
    "KeyRefusedError",
    "ListingError",
    "ListingTooLargeError",
    "McpServerError",
    "MissingCredentialsError",
    "ModelError",
    "ModelSpecError",
    "NoStoreError",
    "OutsideError",
    "PeerGoneError",
    "PromptRejectedError",
    "ProviderError",
    "ProviderRouteError",
    "ScriptError",
    "ServeSetupError",
    "SessionBusyError",
    "SessionLeasedError",
    "SettingsError",
    "StateFileError",
    "StoreUnavailable",
    "StreamAbortedError",
    "SubagentSessionError",
    "ToolError",
    "TranscriptError",
    "TransitionError",
    "TurnFailedError",
    "UnknownModelError",
    "UnknownSessionError",
]


class AcpServerError(Exception):
    """The root of every error the server names."""


# --- settings ---


class SettingsError(AcpServerError, ValueError):
    """The config file exists but cannot be used; the message says where and why."""


class StateFileError(AcpServerError, OSError):
    """A state file that is not one: a link, a FIFO, a device, a directory, or larger than its bound."""


# --- models and their providers ---


class ModelSpecError(AcpServerError, ValueError):
    """A model spec (or the script it names) that cannot be used; the message says why. Each provider family raises
    its own kind, so the server and the CLI refuse them all without knowing any family."""


class UnknownModelError(ModelSpecError):
    """The `--model` spec names no provider we have."""


class ScriptError(ModelSpecError):
    """A script that cannot be run, with the step at fault."""


class ProviderRouteError(AcpServerError, ValueError):
    """A client's `providers/set` or `providers/disable` the server refuses (an unknown provider id, an apiType it
    does not support); the message says why."""


class MissingCredentialsError(AcpServerError):
    """The provider needs an API key that is nowhere to be found (or `logout` forgot it); the message tells the user
    what to do."""


class ModelError(AcpServerError, RuntimeError):
    """A provider failure whose message is meant for the user (endpoint unreachable, model failed mid-stream)."""


class KeyRefusedError(ModelError):
    """The model endpoint refused the key it was given (401 or 403): the connection's `auth/status` says so."""


class ProviderError(ModelError):
    """The scripted stand-in for a provider failing mid-turn (`fail` step)."""


class StreamAbortedError(RuntimeError):
    """What `gate_raise` throws when aborted: a library error, not a cancellation. Outside `AcpServerError` on
    purpose: it stands in for an error the server does not name."""


class ListingError(AcpServerError, ValueError):
    """The endpoint answered, but not with a models list."""


class ListingTooLargeError(ListingError):
    """The answer is larger than MAX_LIST_BYTES, as sent or once decompressed: it is not read further."""


# --- tools ---


class ToolError(AcpServerError):
    """A failure the model should read (bad path, missing file, refused permission): the tool call ends `failed`
    with this message, and the turn goes on."""


class OutsideError(ToolError):
    """The path, or a symbolic link on its way, leads outside the session's directories."""


class McpServerError(AcpServerError):
    """An MCP server cannot be used; the message says why in plain words, naming the server."""


# --- the session store ---


class StoreUnavailable(AcpServerError):  # noqa: N818 - the name the server's design uses
    """The store cannot be used (unreadable, corrupt, not ours, newer schema). Its file is left exactly as it was."""


class ChangeNotSavedError(StoreUnavailable):
    """A change a request acknowledges could not be committed (a full disk, say): the request is answered with this,
    never success, and the change is not saved later either."""


class NoStoreError(AcpServerError):
    """Sessions are not stored in this process (`--no-store`, or the store could not be opened): what needs the
    store (load, resume, fork, list) cannot be done. The message says why."""


# --- sessions and their turns ---


class InvalidArgumentError(AcpServerError, ValueError):
    """An argument of a request that the core cannot take (a relative path, an unknown mode, a cursor this server
    never gave); the message names the argument first (`cwd: not a directory: ...`)."""


class UnknownSessionError(AcpServerError):
    """No session with this id is open here (for a connection: none attached to it), or stored (load, resume)."""

    def __init__(self, session_id: str) -> None:
        super().__init__(f"unknown session: {session_id}")
        self.session_id = session_id


class SubagentSessionError(AcpServerError):
    """A subagent's session id named by a request other than a cancel: clients never created child sessions
    (docs/interrupts.md, decision 7)."""


class SessionBusyError(AcpServerError):
    """A load or resume of a session that has a prompt running."""


class SessionLeasedError(AcpServerError):
    """The session runs on another replica (the PostgreSQL store's lease, docs/postgres.md "Leases"): another live
    replica holds its lease until `expires_at` (seconds since the epoch, the database's clock), `remaining` seconds
    from when it was asked. `lost`: this replica held the lease and lost it (it could not renew it in time, or another
    replica took the session over); when the lease now ends is not known then (`expires_at` None)."""

    def __init__(
        self, session_id: str, expires_at: float | None = None, remaining: float | None = None, *, lost: bool = False
    ) -> None:
        if lost:
            message = (
                f"session {session_id}: this replica lost its lease (another replica may run it now); load it again"
            )
        else:
            message = (
                f"session {session_id} is in use on another replica; try again once it is released or its lease expires"
            )
        super().__init__(message)
        self.session_id = session_id
        self.expires_at = expires_at
        self.remaining = remaining
        self.lost = lost


class PromptRejectedError(AcpServerError):
    """A prompt refused at admission: by the `reject` policy (`invalid_params` False: the edge answers an invalid
    request), or because its model cannot run it (True: invalid params). `message` is meant for the user."""

    def __init__(self, message: str, *, invalid_params: bool = False) -> None:
        super().__init__(message)
        self.message = message
        self.invalid_params = invalid_params


class TurnFailedError(AcpServerError):
    """The turn failed without a cancel: its prompt is answered with an error (the protocol edge says which), never
    with a stop reason. `message` is meant for the user."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class TransitionError(AcpServerError, RuntimeError):
    """A lifecycle transition asked of a run in a state it does not leave that way: a bug, never a race."""


# --- transcripts (the recording and replay tools) ---


class TranscriptError(AcpServerError, ValueError):
    """A transcript file that does not follow the format, with the line at fault."""


class PeerGoneError(AcpServerError):
    """The agent stopped reading its stdin."""


# --- remote ACP (the transport room, acp_server/remote) ---


class ServeSetupError(AcpServerError, ValueError):
    """Remote ACP cannot start as set up: a token file that is not a private regular file or holds a bad line, a
    listen address off loopback without TLS, a certificate without its key. The message says what to change."""
