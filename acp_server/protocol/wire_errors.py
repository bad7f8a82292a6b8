"""The one place an error of the server's tree (acp_server/errors) becomes the JSON-RPC error a request is answered.

Handlers and the services under them raise what went wrong in their own words (`StoreUnavailable`,
`MissingCredentialsError`, ...) and translate nothing; the error boundary (jsonrpc/rpc.py, handed `rpc_error` by the
dispatcher) asks here what each is on the wire. What is not here is a defect there: logged with its traceback and
answered -32603 with a short message. The codes and messages are the wire's, asserted by the end-to-end tests: change
them here or nowhere.
"""

from __future__ import annotations

from typing import overload

from acp_server.errors import (
    ChangeNotSavedError,
    InvalidArgumentError,
    MissingCredentialsError,
    ModelSpecError,
    NoStoreError,
    PromptRejectedError,
    SessionBusyError,
    StoreUnavailable,
    SubagentSessionError,
    TurnFailedError,
    UnknownSessionError,
)
from acp_server.jsonrpc.rpc import ErrorCode, RpcError

__all__ = ["rpc_error", "rpc_error_v2"]


# The errors named here: for one of these the answer is never None.
Named = (
    RpcError
    | PromptRejectedError
    | TurnFailedError
    | MissingCredentialsError
    | ModelSpecError
    | StoreUnavailable
    | NoStoreError
    | InvalidArgumentError
    | SubagentSessionError
    | UnknownSessionError
    | SessionBusyError
)


@overload
def rpc_error(exc: Named) -> RpcError: ...


@overload
def rpc_error(exc: Exception) -> RpcError | None: ...


def rpc_error(exc: Exception) -> RpcError | None:
    """The JSON-RPC error `exc` is answered with, or None for one the server does not name (a defect)."""
    if isinstance(exc, RpcError):
        return exc
    if isinstance(exc, PromptRejectedError):
        # The `reject` policy refuses a request that is valid in itself; a model that cannot run it, its params.
        return RpcError(ErrorCode.INVALID_PARAMS if exc.invalid_params else ErrorCode.INVALID_REQUEST, exc.message)
    if isinstance(exc, TurnFailedError):
        return RpcError(ErrorCode.INTERNAL_ERROR, exc.message)
    if isinstance(exc, MissingCredentialsError):
        return RpcError(ErrorCode.AUTH_REQUIRED, f"Authentication required: {exc}")
    if isinstance(exc, ModelSpecError):
        return RpcError(ErrorCode.INVALID_PARAMS, f"Invalid params: {exc}")
    if isinstance(exc, ChangeNotSavedError):  # before its base: the change a request acknowledges, not a read
        return RpcError(ErrorCode.INTERNAL_ERROR, f"Internal error: the change was not saved: {exc}")
    if isinstance(exc, StoreUnavailable):
        return RpcError(ErrorCode.INTERNAL_ERROR, f"cannot read the session store: {exc}")
    if isinstance(exc, NoStoreError):
        return RpcError(ErrorCode.INTERNAL_ERROR, f"Stored sessions are not available: {exc}")
    if isinstance(exc, (InvalidArgumentError, SubagentSessionError)):
        return RpcError(ErrorCode.INVALID_PARAMS, f"Invalid params: {exc}")
    if isinstance(exc, UnknownSessionError):
        return RpcError(ErrorCode.RESOURCE_NOT_FOUND, str(exc))  # v1 has no data for it (v2 does: `rpc_error_v2`)
    if isinstance(exc, SessionBusyError):
        return RpcError(ErrorCode.INVALID_REQUEST, str(exc))
    return None


@overload
def rpc_error_v2(exc: Named) -> RpcError: ...


@overload
def rpc_error_v2(exc: Exception) -> RpcError | None: ...


def rpc_error_v2(exc: Exception) -> RpcError | None:
    """As `rpc_error`, in v2's words where they differ: an unknown session carries `SessionNotFoundErrorData`."""
    if isinstance(exc, UnknownSessionError):
        return RpcError(ErrorCode.RESOURCE_NOT_FOUND, str(exc), {"sessionId": exc.session_id})
    return rpc_error(exc)
