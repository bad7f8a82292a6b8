"""Where a remote client's HTTP or SSE MCP server may point (shared/design/REMOTE.md, decision 5).

Why it exists: under `acp-server serve` the agent connects to the MCP servers a client names, from the server's
machine. Left alone, a client could make it reach what only that machine reaches: a service on its loopback, the
private network behind it, a cloud's metadata address (169.254.169.254). So a client's server may name only hosts
whose every address is global, unless the operator names the host with `--allow-mcp-host`. MCP servers from the
config file are the operator's and are not checked.

Checked twice, by the same rule: when the session is made (`check_url`: a refusal is the client's -32602, naming the
rule), and at every TCP connect (`GuardedBackend`: the HTTP client's network backend resolves the name, checks every
address, and connects to an address it checked). The second closes DNS rebinding, where the name resolves to a
public address for the first check and to 127.0.0.1 for the connect: no connection is ever made to an address that
was not checked in the same step. TLS still verifies the certificate against the URL's name (SNI too).
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import anyio

from acp_server.errors import McpServerError

if TYPE_CHECKING:
    import httpcore2
    import httpx2

__all__ = ["check_url", "guarded_client", "refused_address", "resolve_checked"]

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address


def refused_address(address: IPAddress) -> bool:
    """Whether a client's MCP server may not be reached at `address`: anything not global (loopback, private,
    link-local, unique-local, shared address space, unspecified, reserved; an IPv4-mapped one as its IPv4)."""
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    return not address.is_global or address.is_multicast


def _name(host: str) -> str:
    return host.strip("[]").lower().rstrip(".")


def _refusal(host: str, address: IPAddress) -> McpServerError:
    return McpServerError(
        f"{host} is (or resolves to) {address}, a loopback, private or link-local address: a client's MCP server "
        f"may not point there unless the server is started with --allow-mcp-host {_name(host)}"
    )


async def resolve_checked(host: str, port: int, allowed: Iterable[str]) -> list[str]:
    """The addresses to connect to for `host`, every one of them checked; McpServerError naming the rule when one is
    refused. A host in `allowed` is not checked (returned as is, resolved by the connect)."""
    name = _name(host)
    if name in allowed:
        return [host]
    try:
        addresses: list[IPAddress] = [ipaddress.ip_address(name)]
    except ValueError:
        try:
            found = await anyio.getaddrinfo(name, port, type=socket.SOCK_STREAM)
        except OSError as exc:
            raise McpServerError(f"cannot resolve {host}: {exc}") from None
        # Without the IPv6 scope ("%eth0"): the address is what is checked.
        addresses = list(dict.fromkeys(ipaddress.ip_address(str(info[4][0]).partition("%")[0]) for info in found))
    for address in addresses:
        if refused_address(address):
            raise _refusal(host, address)
    return [str(address) for address in addresses]


async def check_url(url: str, allowed: Iterable[str]) -> None:
    """McpServerError when `url`'s host is, or resolves to, an address a client's MCP server may not use. A name that
    does not resolve (now) passes: the connect checks again, and fails in words."""
    try:
        parts = urlsplit(url)
        host, port = parts.hostname, parts.port
    except ValueError as exc:
        raise McpServerError(f"not a usable URL: {exc}") from None
    if not host:
        raise McpServerError(f"no host in {url!r}")
    try:
        await resolve_checked(host, port or (443 if parts.scheme == "https" else 80), allowed)
    except McpServerError as exc:
        if str(exc).startswith("cannot resolve"):
            return
        raise


def _backend(allowed: frozenset[str]) -> httpcore2.AsyncNetworkBackend:
    import httpcore2  # noqa: PLC0415 (only for a remote client's HTTP MCP server)

    class GuardedBackend(httpcore2.AsyncNetworkBackend):
        """httpcore's anyio backend, connecting only to addresses `resolve_checked` let through."""

        def __init__(self) -> None:
            self._inner = httpcore2.AnyIOBackend()

        async def connect_tcp(
            self,
            host: str,
            port: int,
            timeout: float | None = None,
            local_address: str | None = None,
            socket_options: Iterable[Any] | None = None,
        ) -> httpcore2.AsyncNetworkStream:
            failure: Exception | None = None
            for address in await resolve_checked(host, port, allowed):
                try:
                    return await self._inner.connect_tcp(address, port, timeout, local_address, socket_options)
                except httpcore2.ConnectError as exc:  # the next checked address, as a resolver's connect would
                    failure = exc
            raise failure or httpcore2.ConnectError(f"no address for {host}")

        async def connect_unix_socket(
            self, path: str, timeout: float | None = None, socket_options: Iterable[Any] | None = None
        ) -> httpcore2.AsyncNetworkStream:
            raise httpcore2.ConnectError("a client's MCP server may not be reached over a Unix socket")

        async def sleep(self, seconds: float) -> None:
            await self._inner.sleep(seconds)

    return GuardedBackend()


def guarded_client(
    allowed: Sequence[str],
    headers: dict[str, str] | None = None,
    timeout: httpx2.Timeout | None = None,
    auth: httpx2.Auth | None = None,
) -> httpx2.AsyncClient:
    """An HTTP client (the MCP SDK's shape: `McpHttpClientFactory`) that connects only where `resolve_checked`
    allows, and never through a proxy from the environment (which would connect for it, unchecked)."""
    import httpcore2  # noqa: PLC0415 (only for a remote client's HTTP MCP server)
    import httpx2  # noqa: PLC0415 (only for a remote client's HTTP MCP server)

    transport = httpx2.AsyncHTTPTransport(trust_env=False)
    # httpx2's transport takes no network backend; its pool does. The same pool it builds, with ours.
    transport._pool = httpcore2.AsyncConnectionPool(
        ssl_context=httpx2.create_ssl_context(trust_env=False), network_backend=_backend(frozenset(allowed))
    )
    return httpx2.AsyncClient(
        transport=transport,
        trust_env=False,
        headers=headers,
        timeout=timeout if timeout is not None else httpx2.Timeout(30.0, read=300.0),
        auth=auth,
    )
