"""The JSON-RPC 2.0 envelope: classify each incoming line, dispatch requests, and own the error boundary.

This is the only module that imports jsonrpcserver. It is given already-parsed messages (no second parse) and a
cheap structural check instead of its import-time JSON-schema validator, and is always called with an explicit
`methods=` table and a per-request `context=`. Since that validator is never used, its import is not paid either:
the dispatcher core is loaded without the package's `__init__` (see `_without_package_init`), which was most of
start-up.

Error boundary, in one place: a method's params are read by its `Params` (which raises the -32602 `RpcError` for
invalid ones), and a pydantic `ValidationError` a handler lets out becomes -32602 too, with a one-line message
naming the field; an `RpcError` passes through as it is; any other exception is what the table's `errors` says it
is on the wire (the ACP edge hands in its one mapping, protocol/wire_errors.py), else a defect: logged with its
traceback to stderr and answered -32603 with a short message, never the exception's text. Cancellation is a
BaseException and is never caught here.

pydantic is not imported here: the first `initialize` is answered before anything loads it (issue 14: start-up).
"""

from __future__ import annotations

import importlib
import importlib.util
import logging
import re
import sys
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from enum import IntEnum
from types import ModuleType
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

import orjson

from acp_server.jsonrpc.transport import Oversized

if TYPE_CHECKING:
    from pydantic import ValidationError

__all__ = [
    "ErrorCode",
    "Handler",
    "IncomingNotification",
    "IncomingRequest",
    "IncomingResponse",
    "InvalidLine",
    "Params",
    "RpcError",
    "classify",
    "dispatch",
    "error_message",
    "method_table",
    "validation_message",
]

log = logging.getLogger(__name__)


def _without_package_init(package: str, *submodules: str) -> tuple[ModuleType, ...]:
    """Submodules of `package` loaded without running the package's `__init__`.

    jsonrpcserver's `__init__` imports `main`, which imports jsonschema and builds a JSON-schema validator at import
    time, and `server`, which imports http.server for a toy HTTP server: together more than half of the server's
    start-up, for two things it never uses (it passes its own `validator=`). Its dispatcher core (`async_dispatcher`,
    `result`) needs neither. Likewise oslash's `__init__` imports a dozen monads where the core uses one (`either`).
    The submodules are loaded under a stand-in package object (the real package's spec, not executed) that is
    dropped again at once, so a later `import jsonrpcserver` (or `oslash`) runs the real `__init__`, which reuses the
    submodules loaded here. Runs once, at this module's import, before any other thread exists.
    """
    names = tuple(f"{package}.{name}" for name in submodules)
    if package in sys.modules:  # the real package is loaded already: nothing left to save
        return tuple(importlib.import_module(name) for name in names)
    spec = importlib.util.find_spec(package)
    if spec is None or spec.submodule_search_locations is None:
        raise ImportError(f"{package} is not installed as a package")
    stand_in = importlib.util.module_from_spec(spec)
    sys.modules[package] = stand_in
    try:
        return tuple(importlib.import_module(name) for name in names)
    finally:
        if sys.modules.get(package) is stand_in:
            del sys.modules[package]


if TYPE_CHECKING:
    from jsonrpcserver.async_dispatcher import dispatch_to_response_pure
    from jsonrpcserver.result import Error, Success
    from oslash.either import Left
else:
    # oslash first: jsonrpcserver's core imports `from oslash.either import ...`, which finds the module loaded here.
    (_either,) = _without_package_init("oslash", "either")
    _dispatcher, _result = _without_package_init("jsonrpcserver", "async_dispatcher", "result")
    Left = _either.Left
    dispatch_to_response_pure = _dispatcher.dispatch_to_response_pure
    Error, Success = _result.Error, _result.Success

ContextT = TypeVar("ContextT")


class ErrorCode(IntEnum):
    PARSE_ERROR = -32700
    INVALID_REQUEST = -32600
    METHOD_NOT_FOUND = -32601
    INVALID_PARAMS = -32602
    INTERNAL_ERROR = -32603
    AUTH_REQUIRED = -32000
    RESOURCE_NOT_FOUND = -32002
    REQUEST_CANCELLED = -32800


class RpcError(Exception):
    """An error meant for the client: its code and message go on the wire as they are."""

    def __init__(self, code: ErrorCode | int, message: str, data: Any = None) -> None:
        super().__init__(message)
        self.code = int(code)
        self.message = message
        self.data = data


# --- classification of incoming lines ---


@dataclass(frozen=True, slots=True)
class IncomingRequest:
    id: int | str | None
    method: str
    params: Any
    message: dict[str, Any]


@dataclass(frozen=True, slots=True)
class IncomingNotification:
    method: str
    params: Any


@dataclass(frozen=True, slots=True)
class IncomingResponse:
    id: Any
    result: Any
    error: dict[str, Any] | None


@dataclass(frozen=True, slots=True)
class InvalidLine:
    """A line that gets an error response and nothing else."""

    code: ErrorCode
    message: str
    id: int | str | None = None


Incoming = IncomingRequest | IncomingNotification | IncomingResponse | InvalidLine


def _valid_id(value: Any) -> bool:
    return value is None or isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool))


# In JSON text: an escaped backslash (skipped, so what follows it is no escape), a surrogate pair written as two
# escapes (kept), or any other surrogate escape (a lone one, which orjson refuses).
_SURROGATE_ESCAPE = re.compile(
    rb"\\\\|\\u[dD][89abAB][0-9a-fA-F]{2}\\u[dD][c-fC-F][0-9a-fA-F]{2}|(\\u[dD][89a-fA-F][0-9a-fA-F]{2})"
)


def _repair_lone_surrogates(line: bytes) -> bytes:
    """The line with every lone surrogate escape (`\\ud800`) replaced by U+FFFD's (`\\ufffd`); pairs are kept. Some
    clients and proxies cut text between the two halves of a character; the rest of the message is still good."""
    return _SURROGATE_ESCAPE.sub(lambda m: b"\\ufffd" if m.group(1) else m.group(0), line)


def _loads(line: bytes) -> Any:
    try:
        return orjson.loads(line)
    except orjson.JSONDecodeError:
        if b"\\u" not in line:
            raise
        repaired = _repair_lone_surrogates(line)
        if repaired == line:
            raise
        return orjson.loads(repaired)


def classify(line: bytes | Oversized) -> Incoming:
    if isinstance(line, Oversized):
        return InvalidLine(ErrorCode.INVALID_REQUEST, f"Invalid request: message of {line.size} bytes is too large")
    try:
        message = _loads(line)
    except orjson.JSONDecodeError as exc:
        return InvalidLine(ErrorCode.PARSE_ERROR, f"Parse error: {str(exc).splitlines()[0]}")
    if not isinstance(message, dict):
        kind = "a batch" if isinstance(message, list) else f"a JSON {type(message).__name__}"
        return InvalidLine(ErrorCode.INVALID_REQUEST, f"Invalid request: expected one request object, got {kind}")
    raw_id = message.get("id")
    echo_id = raw_id if _valid_id(raw_id) else None
    if "method" not in message:
        if "id" in message and ("result" in message or "error" in message):
            error = message.get("error")
            return IncomingResponse(raw_id, message.get("result"), error if isinstance(error, dict) else None)
        return InvalidLine(ErrorCode.INVALID_REQUEST, "Invalid request: no method", echo_id)
    method = message["method"]
    if message.get("jsonrpc") != "2.0":
        return InvalidLine(ErrorCode.INVALID_REQUEST, 'Invalid request: "jsonrpc" must be "2.0"', echo_id)
    if not isinstance(method, str):
        return InvalidLine(ErrorCode.INVALID_REQUEST, "Invalid request: method must be a string", echo_id)
    params = message.get("params")
    if "id" not in message:
        return IncomingNotification(method, params)
    if not _valid_id(raw_id):
        return InvalidLine(ErrorCode.INVALID_REQUEST, "Invalid request: id must be a string, an integer or null")
    if params is not None and not isinstance(params, (dict, list)):
        return InvalidLine(ErrorCode.INVALID_REQUEST, "Invalid request: params must be an object", raw_id)
    return IncomingRequest(raw_id, method, params, message)


# --- dispatch ---


class Params(Protocol):
    """How a method reads its params: `validate` gives what its handler is given, or raises the `RpcError` the
    client gets (-32602); `holds` says whether a value is one `validate` gave, so params read already (the dispatcher
    reads some as their line is read) are not read again."""

    def validate(self, params: Any) -> Any: ...

    def holds(self, value: Any) -> bool: ...


Handler = Callable[[ContextT, Any], Awaitable[Any]]
JsonRpcMethod = Callable[..., Awaitable[Any]]
# What an error a handler lets out is on the wire: its `RpcError`, or None for a defect.
Errors = Callable[[Exception], RpcError | None]


def validation_message(exc: ValidationError) -> str:
    """One line naming the first bad field, e.g. `Invalid params: protocolVersion: Input should be ...`."""
    first = exc.errors()[0]
    where = ".".join(str(part) for part in first["loc"]) or "params"
    more = f" (and {exc.error_count() - 1} more)" if exc.error_count() > 1 else ""
    text = first["msg"].removeprefix("Value error, ")  # our own validators' words (schema.py), said plainly
    return f"Invalid params: {where}: {text}{more}"


def _invalid_params(exc: Exception) -> str | None:
    """The -32602 message for a pydantic `ValidationError`, else None. Without importing pydantic: while
    pydantic_core is not loaded, no such error can exist."""
    core = sys.modules.get("pydantic_core")
    if core is not None and isinstance(exc, core.ValidationError):
        return validation_message(exc)
    return None


def _no_errors(exc: Exception) -> RpcError | None:
    return None


def _error(exc: RpcError) -> Any:
    return Error(exc.code, exc.message, exc.data) if exc.data is not None else Error(exc.code, exc.message)


def _adapt(params: Params, handler: Handler[Any], errors: Errors) -> JsonRpcMethod:
    async def method(context: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            validated = getattr(context, "validated_params", None)
            read = validated if validated is not None and params.holds(validated) else params.validate(kwargs)
            return Success(await handler(context, read))
        except RpcError as exc:
            return _error(exc)
        except Exception as exc:  # cancellation is a BaseException: it passes
            answer = errors(exc)
            if answer is not None:
                return _error(answer)
            message = _invalid_params(exc)
            if message is not None:
                return Error(ErrorCode.INVALID_PARAMS, message)
            log.exception("internal error in %s", getattr(handler, "__name__", "handler"))
            return Error(ErrorCode.INTERNAL_ERROR, "Internal error: the server failed to handle this request")

    return method


def method_table(
    table: Mapping[str, tuple[Params, Handler[Any]]], errors: Errors = _no_errors
) -> dict[str, JsonRpcMethod]:
    """Turn `{"wire/method": (params, handler)}` into jsonrpcserver's `methods=` dict; `errors` says what an error
    its handlers let out is on the wire (see the error boundary above)."""
    return {name: _adapt(params, handler, errors) for name, (params, handler) in table.items()}


def error_message(request_id: Any, code: int, message: str, data: Any = None) -> dict[str, Any]:
    """An error response. The message is made one line here, for every error: it may quote the client's own
    input (a method name, a session id), which can hold line breaks."""
    if not message.isprintable():
        message = " ".join(message.splitlines())
    error: dict[str, Any] = {"code": code, "message": message}
    if data is not None:
        error["data"] = data
    return {"jsonrpc": "2.0", "id": request_id, "error": error}


def _identity(response: Any) -> Any:
    return response


def _structural_check(message: Any) -> Any:
    # `classify` already checked the envelope; jsonrpcserver's own jsonschema validator would redo it slowly.
    return message


async def dispatch(request: IncomingRequest, methods: dict[str, JsonRpcMethod], context: Any) -> dict[str, Any]:
    """Run one request through jsonrpcserver and return the response message."""
    if isinstance(request.params, list) and request.method in methods:
        # Every ACP method takes named params; jsonrpcserver would pass an array (even an empty one) positionally.
        return error_message(request.id, ErrorCode.INVALID_PARAMS, "Invalid params: expected an object, got an array")
    # What jsonrpcserver's `async_dispatch_to_response` does, minus its default arguments' imports (see above).
    response = await dispatch_to_response_pure(
        deserializer=lambda _: request.message,
        validator=_structural_check,
        methods=methods,
        context=context,
        post_process=_identity,
        request="",
    )
    if isinstance(response, Left):
        error = response._error
        if error.code == ErrorCode.METHOD_NOT_FOUND:
            return error_message(request.id, error.code, f"Method not found: {request.method}")
        data = getattr(error, "data", None)
        # jsonrpcserver marks "no data" with a sentinel object of its own: only JSON values are data.
        json_data = data if isinstance(data, (dict, list, str, int, float, bool)) else None
        return error_message(request.id, error.code, error.message, json_data)
    # One request in, so one response out (jsonrpcserver returns lists only for batches, which classify refuses).
    success: Any = response
    return {"jsonrpc": "2.0", "id": request.id, "result": success._value.result}
