"""The version table of ACP-V2.md §2 / §23 Q1, row by row, for both settings of `--protocol`."""

from __future__ import annotations

import pytest

from acp_server.jsonrpc.rpc import RpcError
from acp_server.protocol.v2.negotiation import UNSUPPORTED_PROTOCOL_VERSION, negotiate


@pytest.mark.parametrize(("requested", "answer"), [(1, 1), (2, 2), (3, 2), (65535, 2)])
def test_the_highest_served_version_at_or_below_the_request_is_chosen(requested: int, answer: int) -> None:
    assert negotiate(requested, 2) == answer


@pytest.mark.parametrize("requested", [0, -1, -65535])
def test_a_request_below_every_served_version_is_unsupported_with_its_data(requested: int) -> None:
    with pytest.raises(RpcError) as raised:
        negotiate(requested, 2)
    assert raised.value.code == UNSUPPORTED_PROTOCOL_VERSION == -32022
    assert raised.value.data == {"requested": requested, "supported": [1, 2]}


@pytest.mark.parametrize("requested", [-1, 0, 1, 2, 65535])
def test_with_v2_off_every_integer_gets_1_as_before(requested: int) -> None:
    assert negotiate(requested, 1) == 1
