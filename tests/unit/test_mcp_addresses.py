"""The address rule for a remote client's HTTP and SSE MCP servers (mcp_bridge/addresses.py, REMOTE.md decision 5):
which addresses are refused, that every address a name resolves to is checked, and that the HTTP client connects
only to an address it checked in the same step, so a name that resolves elsewhere between the session's check and
the connect (DNS rebinding) reaches nothing. A real listener on 127.0.0.1 stands for what must not be reached; the
resolver is the only thing replaced (no DNS server of our own)."""

from __future__ import annotations

import ipaddress
import re
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import pytest
from anyio.abc import SocketStream

from acp_server.errors import McpServerError
from acp_server.mcp_bridge.addresses import check_url, guarded_client, refused_address, resolve_checked

pytestmark = pytest.mark.timeout(30)

REFUSED = [
    "127.0.0.1",
    "127.8.9.10",
    "0.0.0.0",
    "10.0.0.1",
    "172.16.5.4",
    "192.168.1.1",
    "169.254.169.254",
    "100.64.0.1",
    "::1",
    "::",
    "fe80::1",
    "fd00::1",
    "::ffff:127.0.0.1",
    "::ffff:10.0.0.1",
    "224.0.0.1",
]
ALLOWED = ["8.8.8.8", "93.184.215.14", "2001:4860:4860::8888", "::ffff:8.8.8.8"]


@pytest.mark.parametrize("address", REFUSED)
def test_loopback_private_link_local_and_unspecified_addresses_are_refused(address: str) -> None:
    assert refused_address(ipaddress.ip_address(address))


@pytest.mark.parametrize("address", ALLOWED)
def test_global_addresses_are_allowed(address: str) -> None:
    assert not refused_address(ipaddress.ip_address(address))


def _resolving(monkeypatch: pytest.MonkeyPatch, *answers: list[str]) -> list[str]:
    """The resolver answers each call with the next list of addresses (the last one again after that); returns the
    names it was asked for."""
    asked: list[str] = []

    async def getaddrinfo(host: str, port: int, **kwargs: Any) -> list[tuple[Any, ...]]:
        await anyio.lowlevel.checkpoint()
        asked.append(host)
        found = answers[min(len(asked), len(answers)) - 1]
        family = {4: socket.AF_INET, 6: socket.AF_INET6}
        return [(family[ipaddress.ip_address(a).version], socket.SOCK_STREAM, 6, "", (a, port)) for a in found]

    monkeypatch.setattr(anyio, "getaddrinfo", getaddrinfo)
    return asked


async def test_every_address_a_name_resolves_to_is_checked(monkeypatch: pytest.MonkeyPatch) -> None:
    _resolving(monkeypatch, ["93.184.215.14", "10.0.0.7"])
    with pytest.raises(McpServerError, match=r"10\.0\.0\.7.*--allow-mcp-host mcp\.example\.com"):
        await check_url("https://mcp.example.com/mcp", ())


async def test_a_literal_address_and_an_allowed_host(monkeypatch: pytest.MonkeyPatch) -> None:
    asked = _resolving(monkeypatch, ["127.0.0.1"])
    with pytest.raises(McpServerError, match=re.escape("169.254.169.254")):
        await check_url("http://169.254.169.254/latest/", ())
    await check_url("http://internal.example:8080/mcp", ("internal.example",))  # named by the operator
    await check_url("http://[::1]:9/mcp", ("::1",))
    assert asked == []  # neither a literal nor an allowed name is looked up
    assert await resolve_checked("Internal.Example.", 80, ("internal.example",)) == ["Internal.Example."]


async def test_a_name_that_does_not_resolve_passes_the_session_check(monkeypatch: pytest.MonkeyPatch) -> None:
    async def failing(host: str, port: int, **kwargs: Any) -> list[tuple[Any, ...]]:
        await anyio.lowlevel.checkpoint()
        raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")

    monkeypatch.setattr(anyio, "getaddrinfo", failing)
    await check_url("http://nowhere.invalid/mcp", ())  # the connect checks again, and fails in words
    with pytest.raises(McpServerError, match="cannot resolve"):
        await resolve_checked("nowhere.invalid", 80, ())


class _Listener:
    """A real HTTP listener on 127.0.0.1 that counts the connections it accepts and answers each with `ok`."""

    def __init__(self) -> None:
        self.accepted = 0

    async def handle(self, stream: SocketStream) -> None:
        self.accepted += 1
        async with stream:
            await stream.receive()
            await stream.send(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok")


@asynccontextmanager
async def listening() -> AsyncIterator[tuple[_Listener, int]]:
    made = _Listener()
    server = await anyio.create_tcp_listener(local_host="127.0.0.1")
    port = server.extra(anyio.abc.SocketAttribute.local_port)
    async with server, anyio.create_task_group() as group:
        group.start_soon(server.serve, made.handle)
        yield made, port
        group.cancel_scope.cancel()


async def test_a_name_that_rebinds_to_loopback_after_the_check_is_never_connected_to(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async with listening() as (served, port):
        await _rebound(monkeypatch, served, port)


async def _rebound(monkeypatch: pytest.MonkeyPatch, served: _Listener, port: int) -> None:
    url = f"http://rebind.example:{port}/mcp"
    # The session's check sees a global address; the connect's own look-up, loopback (where our listener waits).
    asked = _resolving(monkeypatch, ["93.184.215.14"], ["127.0.0.1"])
    await check_url(url, ())
    async with guarded_client(()) as client:
        with pytest.raises(McpServerError, match=re.escape("127.0.0.1")):
            await client.get(url)
    assert asked == ["rebind.example", "rebind.example"]  # the connect resolved and checked again
    assert served.accepted == 0


async def test_an_allowed_host_is_connected_to() -> None:
    async with listening() as (served, port):
        await _allowed(served, port)


async def _allowed(served: _Listener, port: int) -> None:
    async with guarded_client(("127.0.0.1",)) as client:
        answer = await client.get(f"http://127.0.0.1:{port}/mcp")
    assert answer.text == "ok"
    assert served.accepted == 1
    async with guarded_client(()) as client:
        with pytest.raises(McpServerError, match=re.escape("--allow-mcp-host 127.0.0.1")):
            await client.get(f"http://127.0.0.1:{port}/mcp")
    assert served.accepted == 1
