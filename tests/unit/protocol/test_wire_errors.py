"""The one mapping from the server's errors to JSON-RPC errors (protocol/wire_errors.py), and the boundary that uses
it (jsonrpc/rpc.py): each named error keeps the code and message it was answered with at its call site before, an
error the server does not name stays a defect (-32603, never its text), and a cancellation passes through."""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from acp_server.errors import (
    AcpServerError,
    ChangeNotSavedError,
    MissingCredentialsError,
    ModelSpecError,
    PromptRejectedError,
    ScriptError,
    StoreUnavailable,
    ToolError,
    TransitionError,
    TurnFailedError,
    UnknownModelError,
)
from acp_server.jsonrpc.rpc import ErrorCode, IncomingRequest, RpcError, dispatch, method_table
from acp_server.protocol.wire_errors import rpc_error

pytestmark = pytest.mark.timeout(30)


@pytest.mark.parametrize(
    ("error", "code", "message"),
    [
        (PromptRejectedError("busy"), ErrorCode.INVALID_REQUEST, "busy"),
        (PromptRejectedError("no images", invalid_params=True), ErrorCode.INVALID_PARAMS, "no images"),
        (TurnFailedError("The model failed: down"), ErrorCode.INTERNAL_ERROR, "The model failed: down"),
        (MissingCredentialsError("set THE_KEY"), ErrorCode.AUTH_REQUIRED, "Authentication required: set THE_KEY"),
        (UnknownModelError("no such model"), ErrorCode.INVALID_PARAMS, "Invalid params: no such model"),
        (ScriptError("step 0: nonsense"), ErrorCode.INVALID_PARAMS, "Invalid params: step 0: nonsense"),
        (StoreUnavailable("corrupt"), ErrorCode.INTERNAL_ERROR, "cannot read the session store: corrupt"),
        (ChangeNotSavedError("full"), ErrorCode.INTERNAL_ERROR, "Internal error: the change was not saved: full"),
    ],
    ids=lambda value: type(value).__name__ if isinstance(value, Exception) else None,
)
def test_each_named_error_is_answered_with_its_code_and_message(error: Exception, code: int, message: str) -> None:
    answer = rpc_error(error)
    assert answer is not None
    assert (answer.code, answer.message, answer.data) == (code, message, None)


def test_an_rpc_error_is_answered_as_it_is_and_an_unnamed_error_is_a_defect() -> None:
    refused = RpcError(ErrorCode.RESOURCE_NOT_FOUND, "unknown session: s", {"sessionId": "s"})
    assert rpc_error(refused) is refused
    for defect in (TransitionError("a bug"), ToolError("for the model"), ValueError("x"), AcpServerError("x")):
        assert rpc_error(defect) is None


def test_the_builtin_bases_are_kept() -> None:
    assert isinstance(ModelSpecError("x"), ValueError)
    assert isinstance(TransitionError("x"), RuntimeError)


class _Params:
    def validate(self, params: Any) -> Any:
        return params

    def holds(self, value: Any) -> bool:
        return False


async def _answer(raised: BaseException) -> dict[str, Any]:
    async def handler(context: Any, params: Any) -> Any:
        raise raised

    methods = method_table({"x/y": (_Params(), handler)}, rpc_error)
    request = IncomingRequest(7, "x/y", {}, {"jsonrpc": "2.0", "id": 7, "method": "x/y", "params": {}})
    return await dispatch(request, methods, object())


async def test_the_boundary_answers_a_handlers_named_error_as_the_mapping_says() -> None:
    answer = await _answer(StoreUnavailable("session store /x: corrupt"))
    assert answer == {
        "jsonrpc": "2.0",
        "id": 7,
        "error": {"code": -32603, "message": "cannot read the session store: session store /x: corrupt"},
    }


async def test_the_boundary_answers_an_unnamed_error_as_a_defect_without_its_text() -> None:
    answer = await _answer(TransitionError("secret internals"))
    assert answer["error"] == {"code": -32603, "message": "Internal error: the server failed to handle this request"}


async def test_a_cancellation_passes_through_the_boundary() -> None:
    cancelled = anyio.get_cancelled_exc_class()

    async def handler(context: Any, params: Any) -> Any:
        raise cancelled

    # The table's method itself, as jsonrpcserver calls it: nothing around it would deliver the cancel again.
    method = method_table({"x/y": (_Params(), handler)}, rpc_error).for_jsonrpcserver["x/y"]
    with pytest.raises(cancelled):
        await method(object())
