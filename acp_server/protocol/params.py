"""How the method tables name each method's params: a pydantic model of the wire schema by its class name
(`WireParams`), its module imported and the model built when the first message of that method is read, not when the
tables are.

A fresh process answers `initialize` before it has read anything else, and pydantic (its import, then its first
validator build with the plug-in loader it runs) was the largest part of that path (issue 14: start-up). So the
tables hold class names, `initialize` is read without pydantic (`initialize.py`, `INITIALIZE`), and pydantic is first
imported with the deferred side (protocol/deferred.py), or by the first message that needs a model: the schema
modules are imported by a plain import in `_schema` and `_schema_v2`, the functions that first need them.

Each is a `Params` (jsonrpc/rpc.py): `validate` gives what the handler is given, or raises the -32602 `RpcError`
(the message names the first bad field, as it always has).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from types import ModuleType
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from acp_server.jsonrpc.rpc import ErrorCode, RpcError, validation_message
from acp_server.protocol.deferred import load_failure
from acp_server.protocol.initialize import (
    InitializeParams,
    InitializeParamsV2,
    from_model,
    from_model_v2,
    read_initialize,
    read_initialize_v2,
)

if TYPE_CHECKING:
    from pydantic import BaseModel

__all__ = ["INITIALIZE", "INITIALIZE_V2", "FastParams", "WireParams", "wire", "wire_v2"]

T = TypeVar("T")


def _schema() -> ModuleType:
    from acp_server.protocol import schema  # noqa: PLC0415 (start-up: pydantic and the models load after `initialize`)

    return schema


def _schema_v2() -> ModuleType:
    from acp_server.protocol.v2 import schema  # noqa: PLC0415 (start-up: pydantic and the models load after `initialize`)

    return schema


class WireParams:
    """A params model named by its class in a schema module (`schema` imports that module); long-lived and shared
    (one per model, `wire`, `wire_v2`: a method table's entry and the dispatcher's admission read the same one),
    holding only the class once it is imported."""

    __slots__ = ("_model", "name", "schema")

    def __init__(self, schema: Callable[[], ModuleType], name: str) -> None:
        self.schema = schema
        self.name = name
        self._model: type[BaseModel] | None = None

    def __repr__(self) -> str:
        return f"WireParams({self.name})"

    @property
    def model(self) -> type[BaseModel]:
        if self._model is None:
            try:
                model: type[BaseModel] = getattr(self.schema(), self.name)
            except Exception as exc:  # a broken install, answered as the deferred side's would be (deferred.py)
                raise RpcError(ErrorCode.INTERNAL_ERROR, load_failure(exc)) from exc
            self._model = model
        return self._model

    def validate(self, params: Any) -> Any:
        from pydantic import ValidationError  # noqa: PLC0415 (start-up: pydantic loads after `initialize`)

        model = self.model
        try:
            return model.model_validate(params)
        except ValidationError as exc:
            raise RpcError(ErrorCode.INVALID_PARAMS, validation_message(exc)) from None

    def holds(self, value: Any) -> bool:
        # A value of the model is one this reader gave (there is one reader per model): until it has read one, no
        # need to import the model to know.
        return self._model is not None and isinstance(value, self._model)


class FastParams(Generic[T]):
    """Params read by a plain function (`read`) where it can vouch for them, else by the model, whose result
    `convert` turns into what `read` gives: either way the handler gets a `T`, and invalid params get the model's
    message."""

    __slots__ = ("_convert", "_kind", "_read", "model")

    def __init__(
        self, kind: type[T], read: Callable[[Any], T | None], model: WireParams, convert: Callable[[Any], T]
    ) -> None:
        self._kind = kind
        self._read = read
        self.model = model
        self._convert = convert

    def __repr__(self) -> str:
        return f"FastParams({self.model!r})"

    def validate(self, params: Any) -> T:
        fast = self._read(params)
        return fast if fast is not None else self._convert(self.model.validate(params))

    def holds(self, value: Any) -> bool:
        return isinstance(value, self._kind)


@functools.cache
def wire(name: str) -> WireParams:
    """The reader of a model of `schema.py`, one per model."""
    return WireParams(_schema, name)


@functools.cache
def wire_v2(name: str) -> WireParams:
    """The reader of a model of `v2/schema.py`, one per model."""
    return WireParams(_schema_v2, name)


INITIALIZE = FastParams(InitializeParams, read_initialize, wire("InitializeRequest"), from_model)
INITIALIZE_V2 = FastParams(InitializeParamsV2, read_initialize_v2, wire_v2("InitializeRequestV2"), from_model_v2)
