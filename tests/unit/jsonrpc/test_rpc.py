"""jsonrpcserver through its public API (jsonrpc/rpc.py): what a process's first `initialize` gets, answered before
jsonrpcserver is loaded, is what jsonrpcserver answers, for every outcome of the error boundary."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import jsonrpcserver  # noqa: F401 - loaded, as it is once a server has answered its first `initialize`
import pytest
from pydantic import BaseModel

from acp_server.jsonrpc import rpc
from acp_server.jsonrpc.rpc import ErrorCode, IncomingRequest, RpcError, dispatch, method_table

pytestmark = pytest.mark.timeout(30)

INTERNAL = "Internal error: the server failed to handle this request"


class _Count(BaseModel):
    n: int


class _Params:
    """Reads `{"n": int, ...}` (other members kept), as a method table's params do."""

    def validate(self, params: Any) -> Any:
        if not isinstance(params, dict) or type(params.get("n")) is not int:
            raise RpcError(ErrorCode.INVALID_PARAMS, "Invalid params: n: an integer is required")
        return params

    def holds(self, value: Any) -> bool:
        return False


class _Context:
    validated_params = None


async def _echo(context: Any, params: dict[str, Any]) -> Any:
    return {"params": params}


async def _refuse_with_data(context: Any, params: dict[str, Any]) -> Any:
    raise RpcError(ErrorCode.RESOURCE_NOT_FOUND, "Resource not found: s1", {"uri": "s1"})


async def _refuse(context: Any, params: dict[str, Any]) -> Any:
    raise RpcError(ErrorCode.INVALID_REQUEST, "Invalid request: not now")


async def _fail(context: Any, params: dict[str, Any]) -> Any:
    raise RuntimeError("secret internal detail")


async def _let_validation_error_out(context: Any, params: dict[str, Any]) -> Any:
    return _Count.model_validate({"n": "many"})


TABLE = method_table(
    {
        "echo": (_Params(), _echo),
        "refuse_with_data": (_Params(), _refuse_with_data),
        "refuse": (_Params(), _refuse),
        "fail": (_Params(), _fail),
        "validation": (_Params(), _let_validation_error_out),
    }
)


def _error(code: int, message: str, **data: Any) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": 7, "error": {"code": code, "message": message, **data}}


CASES = [
    ("echo", {"n": 1}, {"jsonrpc": "2.0", "id": 7, "result": {"params": {"n": 1}}}),
    # A member named as the methods' first argument is one more member, never a clash with it.
    ("echo", {"n": 1, "context": 2}, {"jsonrpc": "2.0", "id": 7, "result": {"params": {"n": 1, "context": 2}}}),
    ("echo", None, _error(-32602, "Invalid params: n: an integer is required")),
    ("echo", {}, _error(-32602, "Invalid params: n: an integer is required")),
    ("refuse_with_data", {"n": 1}, _error(-32002, "Resource not found: s1", data={"uri": "s1"})),
    ("refuse", {"n": 1}, _error(-32600, "Invalid request: not now")),
    ("fail", {"n": 1}, _error(-32603, INTERNAL)),
    (
        "validation",
        {"n": 1},
        _error(-32602, "Invalid params: n: Input should be a valid integer, unable to parse string as an integer"),
    ),
]


@pytest.mark.parametrize(("method", "params", "expected"), CASES, ids=[f"{m}-{p}" for m, p, _ in CASES])
async def test_a_request_answered_before_jsonrpcserver_loads_gets_what_jsonrpcserver_answers(
    method: str, params: Any, expected: dict[str, Any]
) -> None:
    message: dict[str, Any] = {"jsonrpc": "2.0", "id": 7, "method": method}
    if params is not None:
        message["params"] = params
    request = IncomingRequest(7, method, params, message)
    # Through jsonrpcserver (imported by this module: only a process's first `initialize` is answered without it).
    assert await dispatch(request, TABLE, _Context()) == expected
    # Without it: the method's error boundary, called as `dispatch` calls it at start-up.
    assert await rpc._answer_directly(request, TABLE.calls[method], _Context()) == expected


async def test_an_unknown_method_is_method_not_found_naming_it() -> None:
    request = IncomingRequest("a", "no/such", {}, {"jsonrpc": "2.0", "id": "a", "method": "no/such", "params": {}})
    error = {"code": -32601, "message": "Method not found: no/such"}
    assert await dispatch(request, TABLE, _Context()) == {"jsonrpc": "2.0", "id": "a", "error": error}


_LOAD = """
import sys, anyio
from acp_server.cli.server import build_server
from acp_server.settings.config import Config

async def main():
    agent, _, _ = build_server(Config(model="scripted"))
    built_without = "jsonrpcserver" not in sys.modules
    await agent.side.load()  # what the `initialize` answer starts in the background
    return built_without, "jsonrpcserver" in sys.modules

print(anyio.run(main))
"""


def test_the_background_load_after_initialize_imports_jsonrpcserver_for_the_requests_that_follow() -> None:
    """A server is built without jsonrpcserver; the load its first `initialize` answer starts imports it, so the
    requests after that answer do not import it on their own path."""
    command = [sys.executable, "-W", "ignore::DeprecationWarning", "-c", _LOAD]
    result = subprocess.run(command, capture_output=True, text=True, timeout=25, check=False)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "(True, True)"
