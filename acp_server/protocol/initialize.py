"""`initialize` read without pydantic: what a fresh process needs for its first answer (issue 14: start-up).

Importing pydantic and building its first validator was the largest part of the path to the first answer, for one
small message. `read_initialize` (v1) and `read_initialize_v2` read the params in the shapes clients send and give
None for anything they are not sure of; only then is the pydantic model (`schema.InitializeRequest`,
`v2/schema.InitializeRequestV2`) loaded, which accepts the params or gives the -32602 message a client always got.
So they accept only what the models accept (strict JSON types, camelCase keys, `_meta` and unknown fields bounded as
`bounds.py` says), and a disagreement can only cost time, never change an answer: tests/unit/protocol/
test_initialize_params.py checks both on many params, valid and not.

What `initialize` records (the client's capabilities, `Capabilities`) is a plain immutable record with the attribute
names of the model's `ClientCapabilities`, so the deferred side reads it the same way whichever reader made it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, NamedTuple

from acp_server.protocol.bounds import check_kept_value, check_meta

if TYPE_CHECKING:
    from acp_server.protocol.schema import InitializeRequest
    from acp_server.protocol.v2.schema import InitializeRequestV2

__all__ = [
    "NO_CAPABILITIES",
    "Capabilities",
    "FileSystemCapabilities",
    "InitializeParams",
    "InitializeParamsV2",
    "from_model",
    "from_model_v2",
    "read_initialize",
    "read_initialize_v2",
]


# Immutable records as `NamedTuple`s rather than frozen dataclasses: on the start-up path, where a dataclass costs
# its class several times more to make (each of its methods compiled apart).


class FileSystemCapabilities(NamedTuple):
    read_text_file: bool = False
    write_text_file: bool = False


class Capabilities(NamedTuple):
    """What the editor can do for us (ACP: anything omitted is unsupported). `session` and `elicitation` are kept as
    they came: a malformed value means "not advertised", never an error (protocol/prompts.py)."""

    fs: FileSystemCapabilities = FileSystemCapabilities()
    terminal: bool = False
    session: Any = None
    elicitation: Any = None


NO_CAPABILITIES = Capabilities()


class InitializeParams(NamedTuple):
    """v1 `initialize`, as its handler and the handshake use it."""

    protocol_version: int
    client_capabilities: Capabilities = NO_CAPABILITIES


class InitializeParamsV2(NamedTuple):
    """v2 `initialize`: its `capabilities` as they came (object markers, read leniently; ACP-V2.md §2)."""

    protocol_version: int
    capabilities: Any = None


# A protocol version the fast path takes: pydantic takes any int, but nothing real is outside these bounds, and past
# them the model decides.
_INT_BOUND = 1 << 62
# Keys that are a field's Python name rather than its wire name: the models take them too (`populate_by_name`), with
# rules of their own when both are given, so params holding one go to the model.
_PYTHON_NAMES = frozenset(
    {"protocol_version", "client_capabilities", "client_info", "meta", "read_text_file", "write_text_file"}
)
_INITIALIZE_KEYS = frozenset({"protocolVersion", "clientCapabilities", "clientInfo", "_meta"})
_INITIALIZE_V2_KEYS = frozenset({"protocolVersion", "info", "capabilities", "_meta"})
_CAPABILITY_KEYS = frozenset({"fs", "terminal", "session", "elicitation", "_meta"})
_FS_KEYS = frozenset({"readTextFile", "writeTextFile", "_meta"})
_INFO_KEYS = frozenset({"name", "version", "title", "_meta"})


class _UnsureError(Exception):
    """The fast reader cannot vouch for these params: the model decides."""


def _object(value: Any, fields: frozenset[str]) -> dict[str, Any]:
    """A wire model's object: a dict whose `_meta` passes `check_meta` and whose unknown fields are bounded (what
    `WireModel` checks for every model)."""
    if type(value) is not dict:
        raise _UnsureError
    for key, item in value.items():
        if key in _PYTHON_NAMES:
            raise _UnsureError
        if key == "_meta":
            if item is not None:
                if type(item) is not dict:
                    raise _UnsureError
                try:
                    check_meta(item)
                except ValueError:
                    raise _UnsureError from None
        elif key not in fields:
            _kept(item)
    return value


def _kept(value: Any) -> None:
    """A value kept as it came (an unknown field, a field read leniently): bounded as `bounds.py` says."""
    try:
        check_kept_value(value)
    except ValueError:
        raise _UnsureError from None


def _bool(value: Any) -> bool:
    if type(value) is not bool:
        raise _UnsureError
    return value


def _protocol_version(params: dict[str, Any]) -> int:
    version = params.get("protocolVersion")
    if type(version) is not int or not -_INT_BOUND < version < _INT_BOUND:
        raise _UnsureError
    return version


def _client_info(value: Any) -> None:
    """`clientInfo`, checked only (nothing of it is used): null, or `name` and `version` strings, `title` one or
    null."""
    if value is None:
        return
    info = _object(value, _INFO_KEYS)
    if type(info.get("name")) is not str or type(info.get("version")) is not str:
        raise _UnsureError
    if info.get("title") is not None and type(info["title"]) is not str:
        raise _UnsureError


def _capabilities(value: Any) -> Capabilities:
    capabilities = _object(value, _CAPABILITY_KEYS)
    fs = FileSystemCapabilities()
    if "fs" in capabilities:
        fs_object = _object(capabilities["fs"], _FS_KEYS)
        fs = FileSystemCapabilities(
            _bool(fs_object.get("readTextFile", False)), _bool(fs_object.get("writeTextFile", False))
        )
    session, elicitation = capabilities.get("session"), capabilities.get("elicitation")
    _kept(session)
    _kept(elicitation)
    return Capabilities(fs, _bool(capabilities.get("terminal", False)), session, elicitation)


def read_initialize(params: Any) -> InitializeParams | None:
    """v1 `initialize` params, or None when the model must decide (see the module's docstring)."""
    try:
        request = _object(params, _INITIALIZE_KEYS)
        version = _protocol_version(request)
        capabilities = _capabilities(request["clientCapabilities"]) if "clientCapabilities" in request else None
        _client_info(request.get("clientInfo"))
    except _UnsureError:
        return None
    return InitializeParams(version, capabilities or NO_CAPABILITIES)


def read_initialize_v2(params: Any) -> InitializeParamsV2 | None:
    """v2 `initialize` params, or None when the model must decide (see the module's docstring)."""
    try:
        request = _object(params, _INITIALIZE_V2_KEYS)
        version = _protocol_version(request)
        _kept(request.get("info"))  # read leniently, but a `_meta` in them is bounded as v1's are
        _kept(request.get("capabilities"))
    except _UnsureError:
        return None
    return InitializeParamsV2(version, request.get("capabilities"))


def from_model(request: InitializeRequest) -> InitializeParams:
    """What the model read, as `read_initialize` would have given it."""
    given = request.client_capabilities
    fs = FileSystemCapabilities(given.fs.read_text_file, given.fs.write_text_file)
    return InitializeParams(
        request.protocol_version, Capabilities(fs, given.terminal, given.session, given.elicitation)
    )


def from_model_v2(request: InitializeRequestV2) -> InitializeParamsV2:
    """What the v2 model read, as `read_initialize_v2` would have given it."""
    return InitializeParamsV2(request.protocol_version, request.capabilities)
