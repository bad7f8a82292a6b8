"""How the method tables name each method's params: a pydantic model by its module and class (`WireParams`),
imported and built when the first message of that method is read, not when the tables are.

A fresh process answers `initialize` before it has read anything else, and pydantic (its import, then its first
validator build with the plug-in loader it runs) was the largest part of that path (issue 14: start-up). So the
tables hold names, `initialize` is read without pydantic (`initialize.py`, `INITIALIZE`), and pydantic is first
imported with the session side (protocol/deferred.py), or by the first message that needs a model.

Each is a `Params` (jsonrpc/rpc.py): `validate` gives what the handler is given, or raises the -32602 `RpcError`
(the message names the first bad field, as it always has).
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from acp_server.jsonrpc.rpc import ErrorCode, RpcError, validation_message
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

SCHEMA = "acp_server.protocol.schema"
SCHEMA_V2 = "acp_server.protocol.v2.schema"


class WireParams:
    """A params model named by its module and class; long-lived and shared (a method table's entry), holding only
    the class once it is imported."""

    __slots__ = ("_model", "module", "name")

    def __init__(self, module: str, name: str) -> None:
        self.module = module
        self.name = name
        self._model: type[BaseModel] | None = None

    def __repr__(self) -> str:
        return f"WireParams({self.module}.{self.name})"

    @property
    def model(self) -> type[BaseModel]:
        if self._model is None:
            try:
                model: type[BaseModel] = getattr(importlib.import_module(self.module), self.name)
            except Exception as exc:  # a broken install, answered as the session side's would be (deferred.py)
                message = f"the server could not load {self.module}: {exc}; reinstall acp-server"
                raise RpcError(ErrorCode.INTERNAL_ERROR, message) from exc
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
        # A value of the model exists only once its module is imported: until then, no need to import it to know.
        if self._model is None and self.module not in sys.modules:
            return False
        return isinstance(value, self.model)


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


def wire(name: str) -> WireParams:
    """A model of `schema.py`."""
    return WireParams(SCHEMA, name)


def wire_v2(name: str) -> WireParams:
    """A model of `v2/schema.py`."""
    return WireParams(SCHEMA_V2, name)


INITIALIZE = FastParams(InitializeParams, read_initialize, wire("InitializeRequest"), from_model)
INITIALIZE_V2 = FastParams(InitializeParamsV2, read_initialize_v2, wire_v2("InitializeRequestV2"), from_model_v2)
