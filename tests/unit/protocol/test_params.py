"""The method tables name their params models (protocol/params.py): every name is a real model, a model is imported
only when a message needs it, one reader per model, and a model that cannot be imported is answered as the deferred
side's would be."""

from __future__ import annotations

import subprocess
import sys
from types import ModuleType

import pytest
from pydantic import BaseModel

from acp_server.jsonrpc.rpc import ErrorCode, RpcError
from acp_server.protocol.deferred_methods import DEFERRED_METHODS, DEFERRED_METHODS_V2
from acp_server.protocol.handlers import METHODS, NOTIFICATIONS
from acp_server.protocol.params import FastParams, WireParams, wire, wire_v2
from acp_server.protocol.testmode.gates import GATES
from acp_server.protocol.v2.handlers import METHODS_V2, NOTIFICATIONS_V2


@pytest.mark.timeout(30)
def test_every_method_table_names_a_model_that_exists() -> None:
    tables = (
        METHODS,
        NOTIFICATIONS,
        METHODS_V2,
        NOTIFICATIONS_V2,
        DEFERRED_METHODS,
        DEFERRED_METHODS_V2,
        GATES.methods,
        GATES.notifications,
    )
    readers = [reader for table in tables for reader, _ in table.values()]
    assert readers
    for reader in readers:
        named = reader.model if isinstance(reader, FastParams) else reader
        assert isinstance(named, WireParams), reader
        assert issubclass(named.model, BaseModel), reader


@pytest.mark.timeout(30)
def test_a_model_that_cannot_be_imported_is_an_internal_error_naming_its_module() -> None:
    def no_such_schema() -> ModuleType:
        import acp_server.protocol.no_such_schema  # type: ignore[import-not-found]

        return acp_server.protocol.no_such_schema  # type: ignore[no-any-return]

    missing = WireParams(no_such_schema, "PromptRequest")
    with pytest.raises(RpcError) as excinfo:
        missing.validate({"sessionId": "s", "prompt": []})
    assert excinfo.value.code == ErrorCode.INTERNAL_ERROR
    assert "acp_server.protocol.no_such_schema" in excinfo.value.message and "reinstall" in excinfo.value.message
    assert not missing.holds(object())


@pytest.mark.timeout(30)
def test_invalid_params_are_the_models_one_line_message() -> None:
    with pytest.raises(RpcError) as excinfo:
        wire("PromptRequest").validate({"sessionId": 1, "prompt": []})
    assert excinfo.value.code == ErrorCode.INVALID_PARAMS
    assert excinfo.value.message == "Invalid params: sessionId: Input should be a valid string"


@pytest.mark.timeout(60)
def test_a_model_is_imported_with_the_first_message_that_needs_it() -> None:
    code = (
        "import sys\n"
        "from acp_server.protocol.handlers import NOTIFICATIONS\n"
        "reader = NOTIFICATIONS['session/cancel'][0]\n"
        "before = 'acp_server.protocol.schema' in sys.modules, reader.holds(object())\n"
        "read = reader.validate({'sessionId': 's'})\n"
        "print(before, 'acp_server.protocol.schema' in sys.modules, reader.holds(read))\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=50)
    assert result.stdout.split() == ["(False,", "False)", "True", "True"]


def test_each_model_has_one_reader_so_what_admission_read_is_not_read_again() -> None:
    """The dispatcher reads a prompt as its line is read, and the method table's reader knows it for its own."""
    assert wire("PromptRequest") is wire("PromptRequest") is METHODS["session/prompt"][0]
    assert wire_v2("CancelToolCallRequest") is DEFERRED_METHODS_V2["tool_call/cancel"][0]
    read = wire("PromptRequest").validate({"sessionId": "s", "prompt": []})
    assert METHODS_V2["session/prompt"][0].holds(read)
