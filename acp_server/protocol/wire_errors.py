"""The one place an error of the server's tree (acp_server/errors) becomes the JSON-RPC error a request is answered.

Handlers and the services under them raise what went wrong in their own words (`StoreUnavailable`,
`MissingCredentialsError`, ...) and translate nothing; the error boundary (jsonrpc/rpc.py, handed `rpc_error` by the
dispatcher) asks here what each is on the wire. What is not here is a defect there: logged with its traceback and
answered -32603 with a short message. The codes and messages are the wire's, asserted by the end-to-end tests: change
them here or nowhere.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, overload

from acp_server.errors import (
    ChangeNotSavedError,
    InvalidArgumentError,
    MissingCredentialsError,
    ModelSpecError,
    NoStoreError,
    PromptRejectedError,
    SessionBusyError,
    SessionLeasedError,
    StoreUnavailable,
    SubagentSessionError,
    TurnFailedError,
    UnknownSessionError,
)
from acp_server.jsonrpc.rpc import ErrorCode, RpcError

__all__ = ["SESSION_LEASED", "rpc_error", "rpc_error_v2"]

# Our own code (docs/postgres.md "Leases"): the session runs on another replica. Outside JSON-RPC's reserved range
# (-32768 to -32000, of which ACP takes -32000 to -32099) and the MCP-over-ACP binding's -33000s: acp-server's own
# codes are -34000 and below.
SESSION_LEASED = -34001


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
    | SessionLeasedError
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
    if isinstance(exc, SessionLeasedError):
        return RpcError(SESSION_LEASED, str(exc), leased_data(exc))
    return None


def leased_data(exc: SessionLeasedError) -> dict[str, Any]:
    """The lease error's `data`: the session, and when the lease that holds it ends (ISO 8601 UTC, milliseconds, and
    seconds from the answer, both by the database's clock), or `lost: true` for one this replica lost."""
    data: dict[str, Any] = {"sessionId": exc.session_id}
    if exc.expires_at is not None:
        when = datetime.fromtimestamp(exc.expires_at, UTC)
        data["expiresAt"] = when.isoformat(timespec="milliseconds").replace("+00:00", "Z")
    if exc.remaining is not None:
        data["expiresInSeconds"] = round(max(exc.remaining, 0.0), 3)
    if exc.lost:
        data["lost"] = True
    return data


@overload
def rpc_error_v2(exc: Named) -> RpcError: ...


@overload
def rpc_error_v2(exc: Exception) -> RpcError | None: ...


def rpc_error_v2(exc: Exception) -> RpcError | None:
    """As `rpc_error`, in v2's words where they differ: an unknown session carries `SessionNotFoundErrorData`."""
    if isinstance(exc, UnknownSessionError):
        return RpcError(ErrorCode.RESOURCE_NOT_FOUND, str(exc), {"sessionId": exc.session_id})
    return rpc_error(exc)
