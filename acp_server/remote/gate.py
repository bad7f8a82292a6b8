"""The door of every request (REMOTE.md decisions 2 and 3): the Host and Origin allow-lists and the token presented.

Pure functions over a request's headers, so each rule is plain to read and test, and the same for the WebSocket
profile and (later) Streamable HTTP. `Host` and `Origin` stop DNS rebinding, where a web page the user visits drives
an agent on the user's own loopback: a page's requests carry its Origin, and a rebound name arrives as its Host.

A token may come three ways: `Authorization: Bearer TOKEN`; HTTP Basic with the token as the password (what httpx
sends for `http://principal:TOKEN@host/`: the user name is not checked, the token says who it is); or, for browsers,
which cannot set headers on a WebSocket, the subprotocols `acp` and `acp.bearer.TOKEN`, of which the server selects
`acp` only, never echoing the token.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Iterable, Sequence

__all__ = [
    "BEARER_SUBPROTOCOL",
    "SUBPROTOCOL",
    "allowed_hosts",
    "header",
    "host_allowed",
    "origin_allowed",
    "presented_token",
]

SUBPROTOCOL = "acp"
BEARER_SUBPROTOCOL = "acp.bearer."
# What a Host header may always be, besides the listen address (decision 3).
LOOPBACK_NAMES = ("localhost", "127.0.0.1", "[::1]")

Headers = Iterable[tuple[bytes, bytes]]


def header(headers: Headers, name: bytes) -> bytes | None:
    """The first value of a header (names are lower case in ASGI)."""
    for key, value in headers:
        if key == name:
            return value
    return None


def _host_name(value: str) -> str:
    """A Host value or a listen host without its port, lower case; IPv6 addresses in brackets."""
    value = value.strip().lower()
    if value.startswith("["):
        return value[: value.find("]") + 1] if "]" in value else value
    if value.count(":") > 1:  # a bare IPv6 address (a listen host)
        return f"[{value}]"
    return value.partition(":")[0]


def allowed_hosts(listen_host: str, extra: Sequence[str]) -> frozenset[str]:
    """The Host names served: the listen address, the loopback names, and `--allow-host`."""
    return frozenset(_host_name(name) for name in (listen_host, *LOOPBACK_NAMES, *extra) if name.strip())


def host_allowed(value: bytes | None, allowed: frozenset[str]) -> bool:
    """A request without a Host header (HTTP/1.0) is refused too: it could be anything."""
    if value is None:
        return False
    try:
        return _host_name(value.decode("ascii")) in allowed
    except UnicodeDecodeError:
        return False


def origin_allowed(value: bytes | None, allowed: frozenset[str]) -> bool:
    """No Origin header: not a browser page, allowed. Else exactly one of `--allow-origin` (case aside, no trailing
    slash); `null` (a sandboxed frame, a file:// page) only if listed."""
    if value is None:
        return True
    try:
        origin = value.decode("ascii").strip().rstrip("/").lower()
    except UnicodeDecodeError:
        return False
    return origin in allowed


def normalise_origins(origins: Sequence[str]) -> frozenset[str]:
    return frozenset(origin.strip().rstrip("/").lower() for origin in origins if origin.strip())


def presented_token(headers: Headers, subprotocols: Sequence[str] = ()) -> str | None:
    """The token a request carries, or None. The Authorization header first; a WebSocket's `acp.bearer.` subprotocol
    only when there is none."""
    authorization = header(headers, b"authorization")
    if authorization is not None:
        scheme, _, credentials = authorization.decode("latin-1").strip().partition(" ")
        credentials = credentials.strip()
        if scheme.lower() == "bearer":
            return credentials or None
        if scheme.lower() == "basic":
            try:
                decoded = base64.b64decode(credentials, validate=True).decode("utf-8")
            except (binascii.Error, UnicodeDecodeError, ValueError):
                return None
            _, colon, password = decoded.partition(":")
            return password if colon and password else None
        return None
    for offered in subprotocols:
        if offered.startswith(BEARER_SUBPROTOCOL):
            return offered[len(BEARER_SUBPROTOCOL) :] or None
    return None
