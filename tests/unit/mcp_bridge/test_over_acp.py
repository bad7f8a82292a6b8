"""MCP-over-ACP's transport without an agent around it (mcp_bridge/over_acp.py): what the client's `mcp/message`
answers become for the MCP SDK (a result wins over an error, a carrier with neither or a result that is no object is
the binding's -33002, an outer ACP error keeps its code), how requests are named on the connection, and where the
client's notifications go. The ACP connection is a function here (`send`): the end-to-end runs are
tests/e2e/test_mcp_over_acp.py and tests/e2e/test_ts_sdk_mcp.py."""

from __future__ import annotations

from typing import Any

import anyio
import mcp_types as types
import pytest
from mcp.shared.message import SessionMessage

from acp_server.mcp_bridge.over_acp import BACKEND_FAILED, AcpMcpMessages, acp_transport

pytestmark = pytest.mark.timeout(30)


class ClientError(Exception):
    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def exchange(answer: Any, request_id: int | str = 1) -> tuple[Any, list[dict[str, Any]]]:
    """One MCP request through the transport whose client answers `answer` (raised when an exception): the SDK
    message that comes back, and the `mcp/message` params the client was sent."""
    sent: list[dict[str, Any]] = []

    async def send(params: dict[str, Any]) -> Any:
        sent.append(params)
        await anyio.lowlevel.checkpoint()
        if isinstance(answer, Exception):
            raise answer
        return answer

    async def run() -> Any:
        async with acp_transport(AcpMcpMessages(send), "srv") as (incoming, outgoing):
            request = types.JSONRPCRequest(jsonrpc="2.0", id=request_id, method="tools/list", params={"_meta": {}})
            await outgoing.send(SessionMessage(request))
            with anyio.fail_after(5):
                return (await incoming.receive()).message

    return anyio.run(run), sent


def test_a_result_becomes_the_inner_response_and_wins_over_an_error() -> None:
    reply, sent = exchange({"result": {"tools": []}, "error": {"code": 1, "message": "ignored"}})
    assert isinstance(reply, types.JSONRPCResponse) and reply.id == 1 and reply.result == {"tools": []}
    assert sent == [{"serverId": "srv", "requestId": "1:1", "method": "tools/list", "params": {"_meta": {}}}]


def test_an_inner_error_is_the_mcp_error_as_the_client_gave_it() -> None:
    reply, _ = exchange({"error": {"code": -32602, "message": "bad", "data": {"x": 1}}})
    assert isinstance(reply, types.JSONRPCError) and reply.error.code == -32602 and reply.error.data == {"x": 1}


@pytest.mark.parametrize(
    ("answer", "words"),
    [
        ({}, "carries no MCP outcome"),
        ({"error": {"code": "1", "message": "not an int code"}}, "carries no MCP outcome"),
        ({"result": None}, "not an MCP result"),
        ({"result": [1]}, "not an MCP result"),
        ("text", "carries no MCP outcome"),
    ],
)
def test_an_answer_without_a_usable_outcome_is_the_bindings_backend_failure(answer: Any, words: str) -> None:
    reply, _ = exchange(answer)
    assert isinstance(reply, types.JSONRPCError) and reply.id == 1
    assert reply.error.code == BACKEND_FAILED and words in reply.error.message


def test_an_outer_acp_error_keeps_its_code_and_words() -> None:
    reply, _ = exchange(ClientError(-33001, "MCP server registration unavailable"))
    assert isinstance(reply, types.JSONRPCError)
    assert (reply.error.code, reply.error.message) == (-33001, "MCP server registration unavailable")


def test_a_string_request_id_is_kept_and_an_integer_one_numbered_by_transport() -> None:
    _, sent = exchange({"result": {}}, "listen-7")
    assert sent[0]["requestId"] == "listen-7"
    messages = AcpMcpMessages(lambda params: anyio.lowlevel.checkpoint())
    assert [messages.transport_number() for _ in range(2)] == [1, 2]


def test_a_notification_reaches_only_the_request_in_flight_it_names() -> None:
    messages = AcpMcpMessages(lambda params: anyio.lowlevel.checkpoint())
    got: list[tuple[str, Any]] = []
    unroute = messages.route("srv", "1:1", lambda method, params: got.append((method, params)))
    assert messages.received("srv", "1:1", "notifications/progress", {"progress": 1})
    assert not messages.received("srv", "1:2", "notifications/progress", None)
    assert not messages.received("other", "1:1", "notifications/progress", None)
    unroute()
    assert not messages.received("srv", "1:1", "notifications/progress", None)
    assert got == [("notifications/progress", {"progress": 1})] and len(messages) == 0
