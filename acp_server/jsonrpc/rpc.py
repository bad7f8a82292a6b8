"""The JSON-RPC 2.0 envelope: classify each incoming line, dispatch requests, and own the error boundary.

A line holding a JSON array is a batch (JSON-RPC 2.0 §6): `classify` splits it into its entries, each classified
as a line of its own would be (an entry that is no object is its own -32600 with `id: null`), so the connection
admits them one by one, in order, exactly as separate lines (jsonrpc/connection.py). jsonrpcserver is only ever
handed one request: it would answer `[17, true, null]` with one error. An empty array is one -32600, and so is an
array of more than MAX_BATCH_ENTRIES entries (nothing of it runs). `is_batch` tells a batch from a message without
parsing it, for a transport that does not serve batches (the Streamable HTTP profile answers them 501).

This is the only module that imports jsonrpcserver, and it uses only its public API: requests are dispatched by
`async_dispatch_to_serializable` with its documented keyword arguments, an explicit `methods=` table, a per-request
`context=`, `deserializer=` handing over the message `classify` already parsed (no second parse) and `validator=` a
cheap envelope check in place of its JSON-schema validator; a method answers with its `Success` / `Error` results.

jsonrpcserver is not imported at start-up: its package `__init__` imports jsonschema and builds a JSON-schema
validator, and imports http.server for a toy HTTP server, which would be most of the path to the first answer.
So a process's first `initialize` is answered before it is loaded, as it is answered before pydantic is (issue 14:
start-up): while jsonrpcserver is not loaded, `dispatch` answers an `initialize` by calling that method's error
boundary itself (`_answer_directly`), the boundary the method jsonrpcserver calls runs, with the same response
(tests/unit/jsonrpc/test_rpc.py). jsonrpcserver is then imported once that answer is out, first thing in the
background load of the deferred side (`load_jsonrpcserver`, from cli/server.py `load_deferred_side`); any other request
that comes before the load reached it imports it where it is dispatched, once the answer queued before it has been
handed to the writer.

Error boundary, in one place (`_boundary`): a method's params are read by its `Params` (which raises the -32602
`RpcError` for invalid ones), and a pydantic `ValidationError` a handler lets out becomes -32602 too, with a
one-line message naming the field; an `RpcError` passes through as it is; any other exception is what the table's
`errors` says it is on the wire (the ACP edge hands in its one mapping, protocol/wire_errors.py), else a defect:
logged with its traceback to stderr and answered -32603 with a short message, never the exception's text.
Cancellation is a BaseException and is never caught here.

pydantic is not imported here: the first `initialize` is answered before anything loads it (issue 14: start-up).
"""

from __future__ import annotations

import logging
import re
import sys
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from enum import IntEnum
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

import anyio.lowlevel
import orjson

from acp_server.jsonrpc.transport import Oversized

if TYPE_CHECKING:
    from pydantic import ValidationError

__all__ = [
    "MAX_BATCH_ENTRIES",
    "ErrorCode",
    "Handler",
    "IncomingBatch",
    "IncomingNotification",
    "IncomingRequest",
    "IncomingResponse",
    "InvalidLine",
    "Methods",
    "Params",
    "RpcError",
    "classify",
    "classify_message",
    "dispatch",
    "error_message",
    "is_batch",
    "load_jsonrpcserver",
    "method_table",
    "validation_message",
]

log = logging.getLogger(__name__)

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

# The most entries a batch may hold: one line's admission stays bounded (each entry is classified and admitted on the
# reader, synchronously), and so does the array its answers wait in. Past it the whole batch is one -32600.
MAX_BATCH_ENTRIES = 100


@dataclass(frozen=True, slots=True)
class IncomingBatch:
    """A JSON array of 1 to MAX_BATCH_ENTRIES entries, each classified as a line of its own would be, in order."""

    entries: tuple[Incoming, ...]


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


def is_batch(data: bytes) -> bool:
    """Whether a message's text is a JSON array (a JSON-RPC batch), by its first byte that is not JSON whitespace:
    no parse, so a transport that refuses batches can tell one at the door."""
    return data.lstrip(b" \t\r\n")[:1] == b"["


def classify(line: bytes | Oversized) -> Incoming | IncomingBatch:
    if isinstance(line, Oversized):
        return InvalidLine(ErrorCode.INVALID_REQUEST, f"Invalid request: message of {line.size} bytes is too large")
    try:
        message = _loads(line)
    except orjson.JSONDecodeError as exc:
        return InvalidLine(ErrorCode.PARSE_ERROR, f"Parse error: {str(exc).splitlines()[0]}")
    if isinstance(message, list):
        if not message:
            return InvalidLine(ErrorCode.INVALID_REQUEST, "Invalid request: an empty batch")
        if len(message) > MAX_BATCH_ENTRIES:
            return InvalidLine(
                ErrorCode.INVALID_REQUEST,
                f"Invalid request: a batch holds at most {MAX_BATCH_ENTRIES} messages, this one {len(message)}",
            )
        return IncomingBatch(tuple(classify_message(entry, "a request object as a batch entry") for entry in message))
    return classify_message(message)


def _kind(value: Any) -> str:
    return "an array" if isinstance(value, list) else f"a JSON {type(value).__name__}"


def classify_message(message: Any, expected: str = "one request object") -> Incoming:
    """One parsed JSON-RPC message: a line's, or one entry of a batch (`expected` says which, in the error)."""
    if not isinstance(message, dict):
        return InvalidLine(ErrorCode.INVALID_REQUEST, f"Invalid request: expected {expected}, got {_kind(message)}")
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
# A method behind its error boundary: (context, named params) -> the result, or raises the `RpcError` answered.
Call = Callable[[Any, dict[str, Any]], Awaitable[Any]]
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


def _boundary(params: Params, handler: Handler[Any], errors: Errors) -> Call:
    """The handler behind the error boundary (see the module's docstring): what it returns, or the `RpcError` the
    client gets for whatever went wrong."""

    async def call(context: Any, named: dict[str, Any]) -> Any:
        try:
            validated = getattr(context, "validated_params", None)
            read = validated if validated is not None and params.holds(validated) else params.validate(named)
            return await handler(context, read)
        except RpcError:
            raise
        except Exception as exc:  # cancellation is a BaseException: it passes
            answer = errors(exc)
            if answer is not None:
                raise answer from None
            message = _invalid_params(exc)
            if message is not None:
                raise RpcError(ErrorCode.INVALID_PARAMS, message) from None
            log.exception("internal error in %s", getattr(handler, "__name__", "handler"))
            raise RpcError(
                ErrorCode.INTERNAL_ERROR, "Internal error: the server failed to handle this request"
            ) from None

    return call


def _jsonrpcserver_method(call: Call) -> JsonRpcMethod:
    """`call` as a jsonrpcserver method: its outcome as a `Success` or an `Error` result. `context` is positional
    only, so a client's param of that name is one more named param, never a clash with it."""

    async def method(context: Any, /, **named: Any) -> Any:
        # Only jsonrpcserver calls this, so it is loaded: a look-up.
        from jsonrpcserver import Error, Success  # noqa: PLC0415 (start-up: loaded after the first `initialize` answer)

        try:
            return Success(await call(context, named))
        except RpcError as exc:
            return Error(exc.code, exc.message, exc.data) if exc.data is not None else Error(exc.code, exc.message)

    return method


class Methods:
    """A method table in the two forms `dispatch` uses: jsonrpcserver's `methods=` dict, and each method's error
    boundary for what is answered before jsonrpcserver is loaded (the first `initialize`). A plain class, not a
    dataclass: it is made on the start-up path."""

    __slots__ = ("calls", "for_jsonrpcserver")

    def __init__(self, calls: dict[str, Call]) -> None:
        self.calls = calls
        self.for_jsonrpcserver = {name: _jsonrpcserver_method(call) for name, call in calls.items()}

    def __contains__(self, method: str) -> bool:
        return method in self.calls


def method_table(table: Mapping[str, tuple[Params, Handler[Any]]], errors: Errors = _no_errors) -> Methods:
    """Turn `{"wire/method": (params, handler)}` into the `Methods` `dispatch` takes; `errors` says what an error its
    handlers let out is on the wire (see the error boundary above)."""
    return Methods({name: _boundary(params, handler, errors) for name, (params, handler) in table.items()})


def error_message(request_id: Any, code: int, message: str, data: Any = None) -> dict[str, Any]:
    """An error response. The message is made one line here, for every error: it may quote the client's own
    input (a method name, a session id), which can hold line breaks."""
    if not message.isprintable():
        message = " ".join(message.splitlines())
    error: dict[str, Any] = {"code": code, "message": message}
    if data is not None:
        error["data"] = data
    return {"jsonrpc": "2.0", "id": request_id, "error": error}


def _json_data(data: Any) -> Any:
    """An error's `data` if it is a JSON value, else None (no `data` on the wire)."""
    return data if isinstance(data, (dict, list, str, int, float, bool)) else None


def _check_envelope(message: Any) -> Any:
    """jsonrpcserver's `validator=`: raising refuses the request (-32600). `classify` has checked the envelope
    already, answering each fault with its own message, so this only restates what it let through, at a fraction of
    the cost of jsonrpcserver's default JSON-schema validator."""
    if not isinstance(message, dict) or message.get("jsonrpc") != "2.0" or not isinstance(message.get("method"), str):
        raise ValueError("not a JSON-RPC 2.0 request")
    return message


async def load_jsonrpcserver() -> None:
    """Import jsonrpcserver on the event loop in three steps, a checkpoint after each, so the loop goes on serving
    between them: its package imports http.server (a toy HTTP server) and jsonschema (its default validator), which
    are most of it. The first steps of the deferred side's load (cli/server.py `load_deferred_side`)."""
    import http.server  # noqa: PLC0415, F401 (start-up: a step of the deferred side's load, after `initialize`)

    await anyio.lowlevel.checkpoint()
    import jsonschema  # noqa: PLC0415, F401 (start-up: a step of the deferred side's load, after `initialize`)

    await anyio.lowlevel.checkpoint()
    import jsonrpcserver  # noqa: PLC0415, F401 (start-up: a step of the deferred side's load, after `initialize`)


async def _answer_directly(request: IncomingRequest, call: Call, context: Any) -> dict[str, Any]:
    """What jsonrpcserver answers a request to a method it has, without it: the method's error boundary called with
    the named params (jsonrpcserver passes an object's members, and none for absent or null params)."""
    try:
        result = await call(context, request.params if isinstance(request.params, dict) else {})
    except RpcError as exc:
        return error_message(request.id, exc.code, exc.message, _json_data(exc.data))
    return {"jsonrpc": "2.0", "id": request.id, "result": result}


async def dispatch(request: IncomingRequest, methods: Methods, context: Any) -> dict[str, Any]:
    """Run one request through jsonrpcserver and return the response message."""
    if isinstance(request.params, list) and request.method in methods:
        # Every ACP method takes named params; jsonrpcserver would pass an array (even an empty one) positionally.
        return error_message(request.id, ErrorCode.INVALID_PARAMS, "Invalid params: expected an object, got an array")
    if "jsonrpcserver" not in sys.modules:
        call = methods.calls.get(request.method) if request.method == "initialize" else None
        if call is not None:
            return await _answer_directly(request, call, context)  # start-up: see the module's docstring
        # Imported here, on the loop, for a request that came before the background load reached it: first let the
        # writer take what is queued (the `initialize` answer), so the import does not hold it back.
        await anyio.lowlevel.checkpoint()
    try:
        import jsonrpcserver  # noqa: PLC0415 (start-up: loaded after the first `initialize` answer)
    except Exception as exc:  # a broken install: this request is told, and the connection goes on
        log.error("cannot load jsonrpcserver: %s", exc, exc_info=exc)
        message = f"Internal error: the server could not load jsonrpcserver: {exc}; reinstall acp-server"
        return error_message(request.id, ErrorCode.INTERNAL_ERROR, message)
    response = await jsonrpcserver.async_dispatch_to_serializable(
        "",  # the request's text: unused, `deserializer` hands over the message `classify` parsed
        methods=methods.for_jsonrpcserver,
        context=context,
        deserializer=lambda _: request.message,
        validator=_check_envelope,
    )
    # One request in, so one response out (a list only answers a batch, and a batch's entries come one by one).
    assert isinstance(response, dict)
    error = response.get("error")
    if error is None:
        return {"jsonrpc": "2.0", "id": request.id, "result": response["result"]}
    if error["code"] == ErrorCode.METHOD_NOT_FOUND:
        return error_message(request.id, error["code"], f"Method not found: {request.method}")
    # jsonrpcserver leaves `data` out when a result has none.
    return error_message(request.id, error["code"], error["message"], _json_data(error.get("data")))
