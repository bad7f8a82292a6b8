"""`initialize` read without pydantic (protocol/initialize.py) agrees with the pydantic models it stands in for: on
every params it accepts, the model accepts them too and reads the same capabilities, and where it is unsure the
model answers exactly as before (the same -32602 message). And it does vouch for what real clients send, or the
first answer would still wait for pydantic."""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

import orjson
import pytest
from pydantic import ValidationError

from acp_server.jsonrpc.rpc import ErrorCode, RpcError, validation_message
from acp_server.protocol.initialize import (
    Capabilities,
    FileSystemCapabilities,
    from_model,
    from_model_v2,
    read_initialize,
    read_initialize_v2,
)
from acp_server.protocol.params import INITIALIZE, INITIALIZE_V2
from acp_server.protocol.schema import InitializeRequest
from acp_server.protocol.v2.schema import InitializeRequestV2


def nested(depth: int) -> Any:
    value: Any = {}
    for _ in range(depth - 1):
        value = {"a": value}
    return value


# What clients send: Zed, the official SDKs' examples, a bare client, a v2 client asking v1's questions.
REAL_CLIENTS: list[dict[str, Any]] = [
    {"protocolVersion": 1, "clientCapabilities": {}},
    {"protocolVersion": 1},
    {
        "protocolVersion": 1,
        "clientCapabilities": {
            "fs": {"readTextFile": True, "writeTextFile": True},
            "terminal": True,
            "_meta": {"terminal_output": True, "terminal-auth": True},
        },
        "clientInfo": {"name": "zed", "title": "Zed", "version": "0.200.0"},
    },
    {
        "protocolVersion": 1,
        "clientCapabilities": {
            "fs": {"readTextFile": False, "writeTextFile": False},
            "terminal": False,
            "session": {"notices": {}, "compaction": {}},
            "elicitation": {"form": {}},
            "auth": {"terminal": True},
        },
        "clientInfo": {"name": "acp-sdk-example", "version": "1.0.0", "title": None},
        "_meta": {"trace": "abc"},
    },
    {"protocolVersion": 65535, "clientCapabilities": {"fs": {}}, "clientInfo": None},
    {"protocolVersion": 2, "info": {"name": "v2-client", "version": "2.0"}, "capabilities": {"elicitation": {}}},
]
REAL_CLIENTS_V2: list[dict[str, Any]] = [
    {"protocolVersion": 2, "info": {"name": "v2-client", "version": "2.0"}, "capabilities": {"elicitation": {}}},
    {"protocolVersion": 2},
    {"protocolVersion": 2, "capabilities": None, "_meta": {"x": [1, 2]}},
    {"protocolVersion": 1, "clientCapabilities": {"fs": {"readTextFile": True}}},
]

# Each field given what it must not be, or what only the model may judge.
ODD_VALUES: list[Any] = [
    None,
    True,
    False,
    0,
    1,
    -1,
    2,
    1 << 70,
    1.0,
    "1",
    "",
    [],
    [1],
    {},
    {"a": 1},
    nested(33),
    nested(65),
    nested(70),
    {"x": "y" * (64 * 1024)},
]
KEYS = [
    "protocolVersion",
    "clientCapabilities",
    "clientInfo",
    "_meta",
    "protocol_version",
    "client_capabilities",
    "meta",
    "info",
    "capabilities",
    "extra",
]
CAPABILITY_KEYS = ["fs", "terminal", "session", "elicitation", "_meta", "auth", "read_text_file", "meta"]
FS_KEYS = ["readTextFile", "writeTextFile", "_meta", "read_text_file", "write_text_file", "other"]
INFO_KEYS = ["name", "version", "title", "_meta", "other"]


def odd_object(rng: random.Random, keys: list[str], inner: dict[str, Any]) -> Any:
    if rng.random() < 0.1:
        return rng.choice(ODD_VALUES)
    chosen = rng.sample(keys, rng.randint(0, min(4, len(keys))))
    value: dict[str, Any] = {}
    for key in chosen:
        value[key] = inner[key](rng) if key in inner and rng.random() < 0.6 else rng.choice(ODD_VALUES)
    return value


def odd_params(rng: random.Random) -> Any:
    """Params near the valid ones: most fields of the right kind, some not."""

    def good_string(rng: random.Random) -> Any:
        return rng.choice(["zed", "", "x" * 10])

    def fs(rng: random.Random) -> Any:
        return odd_object(
            rng, FS_KEYS, {"readTextFile": lambda r: r.choice([True, False]), "writeTextFile": lambda r: True}
        )

    def capabilities(rng: random.Random) -> Any:
        return odd_object(
            rng,
            CAPABILITY_KEYS,
            {"fs": fs, "terminal": lambda r: r.choice([True, False]), "session": lambda r: {"notices": {}}},
        )

    def info(rng: random.Random) -> Any:
        return odd_object(rng, INFO_KEYS, {"name": good_string, "version": good_string, "title": good_string})

    params = odd_object(
        rng,
        KEYS,
        {
            "protocolVersion": lambda r: r.choice([1, 2, 0, 65535]),
            "clientCapabilities": capabilities,
            "clientInfo": info,
            "capabilities": capabilities,
        },
    )
    if isinstance(params, dict) and rng.random() < 0.7:
        params["protocolVersion"] = rng.choice([1, 2])
    return params


def model_reads(model: type[InitializeRequest] | type[InitializeRequestV2], params: Any) -> Any:
    """What the model makes of the params: its instance, or the -32602 message."""
    try:
        return model.model_validate(params)
    except ValidationError as exc:
        return validation_message(exc)


def _check(
    params: Any,
    fast_reader: Callable[[Any], Any],
    model: type[InitializeRequest] | type[InitializeRequestV2],
    record_of: Callable[[Any], Any],
    reader: Any,
) -> bool:
    """The fast reader and the model agree on `params`; whether the fast reader vouched for them."""
    fast = fast_reader(params)
    expected = model_reads(model, params)
    if fast is not None:
        assert isinstance(expected, model), (params, expected)
        assert fast == record_of(expected), params
    try:
        read = reader.validate(params)
    except RpcError as exc:
        assert exc.code == ErrorCode.INVALID_PARAMS and exc.message == expected, params
    else:
        assert isinstance(expected, model) and read == record_of(expected), params
    return fast is not None


def check_v1(params: Any) -> bool:
    return _check(params, read_initialize, InitializeRequest, from_model, INITIALIZE)


def check_v2(params: Any) -> bool:
    return _check(params, read_initialize_v2, InitializeRequestV2, from_model_v2, INITIALIZE_V2)


@pytest.mark.timeout(30)
@pytest.mark.parametrize("params", REAL_CLIENTS)
def test_what_real_clients_send_is_read_without_the_model_and_as_the_model_reads_it(params: dict[str, Any]) -> None:
    assert check_v1(params)


@pytest.mark.timeout(30)
@pytest.mark.parametrize("params", REAL_CLIENTS_V2)
def test_what_real_v2_clients_send_is_read_without_the_model_and_as_the_model_reads_it(
    params: dict[str, Any],
) -> None:
    assert check_v2(params)


@pytest.mark.timeout(30)
def test_the_capabilities_read_are_the_ones_advertised() -> None:
    read = read_initialize(REAL_CLIENTS[2])
    assert read is not None and read.protocol_version == 1
    assert read.client_capabilities == Capabilities(FileSystemCapabilities(True, True), True, None, None)
    session = read_initialize(REAL_CLIENTS[3])
    assert session is not None and session.client_capabilities.session == {"notices": {}, "compaction": {}}
    assert session.client_capabilities.elicitation == {"form": {}}


@pytest.mark.timeout(30)
@pytest.mark.parametrize(
    "params",
    [
        {"protocolVersion": "1"},
        {"protocolVersion": True},
        {"protocolVersion": 1.0},
        {},
        {"protocolVersion": 1, "clientCapabilities": None},
        {"protocolVersion": 1, "clientCapabilities": {"terminal": "yes"}},
        {"protocolVersion": 1, "clientCapabilities": {"fs": {"readTextFile": 1}}},
        {"protocolVersion": 1, "clientInfo": {"name": "x"}},
        {"protocolVersion": 1, "clientInfo": {"name": "x", "version": "1", "title": 5}},
        {"protocolVersion": 1, "clientInfo": {"name": "x", "version": None}},
        {"protocolVersion": 1, "clientCapabilities": {"fs": None}},
        {"protocolVersion": 1, "_meta": nested(33)},
        {"protocolVersion": 1, "clientCapabilities": {"_meta": {"x": "y" * (64 * 1024)}}},
        {"protocolVersion": 1, "extra": [nested(65)]},
        {"protocol_version": 1},
        {"protocolVersion": 1, "meta": {}},
        [1],
        None,
    ],
)
def test_what_the_fast_reader_does_not_vouch_for_gets_the_models_answer(params: Any) -> None:
    assert read_initialize(params) is None
    check_v1(params)
    check_v2(params)


@pytest.mark.timeout(60)
def test_on_thousands_of_params_near_the_valid_ones_the_fast_readers_agree_with_the_models() -> None:
    rng = random.Random(14)
    vouched_v1 = vouched_v2 = 0
    for _ in range(3000):
        params = odd_params(rng)
        vouched_v1 += check_v1(params)
        vouched_v2 += check_v2(params)
    # Both kinds were met: params the fast readers read, and params they left to the model.
    assert 100 < vouched_v1 < 2900 and 100 < vouched_v2 < 2900, (vouched_v1, vouched_v2)


def meta_in(version: int, place: str, meta: dict[str, Any]) -> dict[str, Any]:
    """`initialize` params of `version` with `meta` as the `_meta` of its capabilities, of the client's info, of a
    capability kept as it came (`session`) or of an unknown field's object."""
    capabilities: dict[str, Any] = {"_meta": meta} if place == "capabilities" else {}
    if place == "session":
        capabilities["session"] = {"_meta": meta}
    if place == "unknown":
        capabilities["future"] = [{"_meta": meta}]
    info: dict[str, Any] = {"name": "x", "version": "1", **({"_meta": meta} if place == "info" else {})}
    if version == 1:
        return {"protocolVersion": 1, "clientCapabilities": capabilities, "clientInfo": info}
    return {"protocolVersion": 2, "capabilities": capabilities, "info": info}


@pytest.mark.timeout(30)
@pytest.mark.parametrize("meta", [nested(33), nested(40), {"x": "y" * (64 * 1024)}, {"x": "y" * 70_000}])
@pytest.mark.parametrize("place", ["capabilities", "info", "session", "unknown"])
@pytest.mark.parametrize("version", [1, 2])
def test_a_meta_past_the_bounds_anywhere_in_initialize_is_invalid_params_on_both_versions(
    version: int, place: str, meta: dict[str, Any]
) -> None:
    """Issue 20, item 11: the fast reader leaves it to the model, which refuses it (-32602 naming `_meta`)."""
    params = meta_in(version, place, meta)
    fast_reader, reader = (read_initialize, INITIALIZE) if version == 1 else (read_initialize_v2, INITIALIZE_V2)
    assert fast_reader(params) is None
    with pytest.raises(RpcError) as refused:
        reader.validate(params)
    assert refused.value.code == ErrorCode.INVALID_PARAMS and "_meta" in refused.value.message
    check_v1(params) if version == 1 else check_v2(params)


@pytest.mark.timeout(30)
@pytest.mark.parametrize("place", ["capabilities", "info", "session", "unknown"])
@pytest.mark.parametrize("version", [1, 2])
def test_a_meta_at_the_bounds_anywhere_in_initialize_is_read_without_the_model(version: int, place: str) -> None:
    at_limits: dict[str, Any] = {"a": nested(31), "pad": ""}
    at_limits["pad"] = "y" * (64 * 1024 - len(orjson.dumps(at_limits)))
    params = meta_in(version, place, at_limits)
    assert check_v1(params) if version == 1 else check_v2(params)
