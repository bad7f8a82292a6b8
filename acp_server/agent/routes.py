"""Where one connection's model traffic goes when its client routes it through its own gateway (ACP unstable
`providers/set` and `providers/disable`, RFD "Configurable LLM Providers").

A client names one of our provider ids (`openai`, `anthropic`: runtime/providers `ROUTED_FAMILIES`), a base URL and
the headers to send; the connection's sessions on that family's models then use a provider built from those alone
(runtime/providers `open_routed_provider`). What it sets is its connection's (REMOTE.md decision 10): kept here, on
the connection's `Credentials`, in memory only, never stored or handed to a command. A key the server holds never goes
to a URL a client set: the routed provider is built without it. The URL must be `https`, or name a host the operator
allowed (`--allow-provider-host`); on stdio, whose one connection is the machine's own user, plain `http` to a
loopback address is allowed too (a local gateway or model server).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from urllib.parse import urlsplit

from acp_server.errors import MissingCredentialsError
from acp_server.errors import ProviderRouteError as RouteError
from acp_server.runtime.model import Provider
from acp_server.runtime.providers import ROUTED_FAMILIES

__all__ = ["ClientRoutes", "Route", "RouteError", "base_url_problem"]


@dataclass(frozen=True, slots=True)
class Route:
    """A client's gateway for one provider id: its protocol, base URL and headers (the headers may hold its key)."""

    api_type: str
    base_url: str
    headers: tuple[tuple[str, str], ...]


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def base_url_problem(url: str, allowed_hosts: tuple[str, ...], *, loopback_http: bool) -> str | None:
    """Why a client may not send model traffic to `url` (None: it may): decision 10's rule above."""
    try:
        parts = urlsplit(url)
        host = (parts.hostname or "").lower()
    except ValueError:
        return f"baseUrl {url!r} is not a URL"
    if parts.scheme not in ("http", "https") or not host:
        return f"baseUrl {url!r} must be an absolute http or https URL"
    if parts.username is not None or parts.password is not None:
        return "baseUrl must not carry credentials: send them in headers"
    if parts.scheme == "https" or host in allowed_hosts or (loopback_http and _loopback(host)):
        return None
    return f"baseUrl {url!r} must be https, unless the server is started with --allow-provider-host {host}"


class ClientRoutes:
    """One connection's routing: the gateways its client set and the providers it disabled, and the providers
    built for them (per model spec, made on first use and dropped when the route changes)."""

    def __init__(self, open_routed: Callable[[str, Route], Provider]) -> None:
        self._open_routed = open_routed
        self.routes: dict[str, Route] = {}
        self.disabled: set[str] = set()
        self._built: dict[str, Provider] = {}

    def set(self, provider_id: str, api_type: str, base_url: str, headers: Mapping[str, str]) -> list[Provider]:
        """`providers/set`: replaces the provider's whole configuration; the providers built for the old one are
        returned, to close."""
        _known(provider_id)
        if api_type != provider_id:
            raise RouteError(f"apiType {api_type!r} is not one provider {provider_id!r} supports ({provider_id!r})")
        self.routes[provider_id] = Route(api_type, base_url, tuple(headers.items()))
        self.disabled.discard(provider_id)
        return self._drop(provider_id)

    def disable(self, provider_id: str) -> list[Provider]:
        """`providers/disable`: the connection's sessions use no model of that provider until it is set again."""
        _known(provider_id)
        self.routes.pop(provider_id, None)
        self.disabled.add(provider_id)
        return self._drop(provider_id)

    def routed(self, family: str) -> bool:
        return family in self.routes

    def provider(self, spec: str) -> Provider | None:
        """The provider for `spec` on this connection when its client routes or disabled that provider (None: the
        agent's own serves it). A disabled one refuses (`MissingCredentialsError`)."""
        family = spec.partition(":")[0]
        if family in self.disabled:
            raise MissingCredentialsError(
                f"provider {family!r} is disabled on this connection (providers/disable); providers/set it to use it"
            )
        route = self.routes.get(family)
        if route is None:
            return None
        provider = self._built.get(spec)
        if provider is None:
            provider = self._built[spec] = self._open_routed(spec, route)
        return provider

    def forget(self) -> list[Provider]:
        """At the connection's end: its routes (and the keys in their headers) are gone from memory; the providers
        built for them are returned, to close."""
        self.routes.clear()
        self.disabled.clear()
        built, self._built = list(self._built.values()), {}
        return built

    def secrets(self) -> list[str]:
        """Every header value the client set: what the transcript's redactor must not let through."""
        return [value for route in self.routes.values() for _, value in route.headers]

    def _drop(self, family: str) -> list[Provider]:
        dropped = [spec for spec in self._built if spec.partition(":")[0] == family]
        return [self._built.pop(spec) for spec in dropped]


def _known(provider_id: str) -> None:
    if provider_id not in ROUTED_FAMILIES:
        raise RouteError(f"unknown providerId {provider_id!r}: expected one of {', '.join(ROUTED_FAMILIES)}")
