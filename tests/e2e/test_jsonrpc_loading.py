"""jsonrpcserver loaded after the first `initialize` answer (jsonrpc/rpc.py): what a client sees does not depend on
whether it was loaded yet, what is pipelined behind that `initialize` is answered through it once the answer is out,
and an install where it cannot be loaded still answers `initialize` and tells every other request why.

tests/unit/test_architecture.py checks that the first answer is written before it is imported; these check that
nothing a client can see changed for it."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from tests.support.harness import RawClient

StartServer = Callable[..., Awaitable[RawClient]]

pytestmark = pytest.mark.timeout(60)

INITIALIZE_V1 = {"protocolVersion": 1, "clientCapabilities": {"fs": {"readTextFile": True}}}
INITIALIZE_V2 = {"protocolVersion": 2, "info": {"name": "client", "version": "1"}, "capabilities": {}}


async def _loaded(client: RawClient) -> None:
    """A request answered through jsonrpcserver (`-32601` is its answer): it is loaded from now on."""
    response = await client.call("no/such_method", {})
    assert response["error"] == {"code": -32601, "message": "Method not found: no/such_method"}, response


@pytest.mark.parametrize("params", [INITIALIZE_V1, INITIALIZE_V2], ids=["v1", "v2"])
async def test_the_first_initialize_is_answered_as_one_through_jsonrpcserver_is(
    start_server: StartServer, params: dict[str, Any]
) -> None:
    client = await start_server()
    first = await client.call("initialize", params)
    await _loaded(client)
    again = await client.call("initialize", params)
    assert "result" in first and first["result"] == again["result"], (first, again)


@pytest.mark.parametrize(
    "params",
    [{"protocolVersion": "one"}, {"clientCapabilities": {}}, {"protocolVersion": 1, "clientCapabilities": []}],
    ids=["version-a-string", "no-version", "capabilities-a-list"],
)
async def test_an_invalid_first_initialize_gets_the_error_one_through_jsonrpcserver_gets(
    start_server: StartServer, params: dict[str, Any]
) -> None:
    client = await start_server()
    first = await client.call("initialize", params)
    await _loaded(client)
    again = await client.call("initialize", params)
    assert first["error"]["code"] == -32602 and first["error"] == again["error"], (first, again)
    await client.initialize()  # and the connection goes on


async def test_a_member_named_context_is_one_more_unknown_member_before_and_after_the_load(
    start_server: StartServer,
) -> None:
    """jsonrpcserver passes the request's context as its methods' first argument: a client's `context` member once
    clashed with it (-32602 `multiple values for argument 'context'`)."""
    client = await start_server()
    params = {**INITIALIZE_V1, "context": {"any": "value"}}
    first = await client.call("initialize", params)
    await _loaded(client)
    again = await client.call("initialize", params)
    assert "result" in first and first["result"] == again["result"], (first, again)


async def test_requests_in_the_write_of_the_first_initialize_are_answered_after_it_through_jsonrpcserver(
    start_server: StartServer,
) -> None:
    client = await start_server()
    ids = [client.next_id() for _ in range(4)]
    await client.send(
        {"id": ids[0], "method": "initialize", "params": INITIALIZE_V1},
        {"id": ids[1], "method": "no/such_method", "params": {}},
        {"id": ids[2], "method": "_acp_server/stats", "params": {}},
        {"id": ids[3], "method": "session/new", "params": {"cwd": "/tmp", "mcpServers": []}},
    )
    answers = [await client.response(request_id) for request_id in ids]
    assert "result" in answers[0] and "result" in answers[2] and "result" in answers[3], answers
    assert answers[1]["error"] == {"code": -32601, "message": "Method not found: no/such_method"}
    order = [m.get("id") for m in client.received if "method" not in m]
    assert order[0] == ids[0] and len(order) == len(ids) and set(order) == set(ids), order


async def test_a_jsonrpcserver_that_cannot_be_loaded_leaves_initialize_answered_and_every_other_request_told_why(
    start_server: StartServer, tmp_path: Path
) -> None:
    # A broken install: the package is there, and importing it fails.
    (tmp_path / "jsonrpcserver").mkdir()
    (tmp_path / "jsonrpcserver" / "__init__.py").write_text('raise ImportError("a broken jsonrpcserver")\n')
    client = await start_server(env={"PYTHONPATH": str(tmp_path)})
    await client.initialize()
    for method, params in [("_acp_server/stats", {}), ("session/new", {"cwd": "/tmp", "mcpServers": []})]:
        error = (await client.call(method, params))["error"]
        assert error["code"] == -32603 and "jsonrpcserver" in error["message"], error
        assert "\n" not in error["message"], error
    code, _ = await client.close()
    assert code == 0
    assert "a broken jsonrpcserver" in client.stderr_text
