"""The agent's providers by model spec, and ACP authentication: whether the default model's key is found.

`authenticate` re-reads the configuration file and the environment for the key; `logout` forgets the keys until the
next `authenticate`, so the same `authenticate` / `logout` cycle works however the key was given. The check is per
model: a session whose model takes no key (echo, scripted) goes on working.

What a client changes is its connection's alone (shared/design/REMOTE.md, decision 10): each connection has its own
`Credentials` (kept on protocol/editor_connection.py `EditorConnection`), so a `logout` on one connection refuses
that connection's new sessions and prompts, and no other connection's, nor any turn already running. Only the
connection that is the whole process (stdio's one) forgets the process's keys at its logout: the providers built
with one are dropped (their clients closed once the turns running at the logout have ended) and none is built again
until its `authenticate`. The server's keys (its configuration and environment) only ever go to the endpoints its
operator configured: a client that routes a provider through its own gateway (`providers/set`, agent/routes.py) gets
a provider built from its own URL and headers alone, for its connection's sessions.

What the connection knows of each provider's key (`key_state`: from the environment or the configuration file, set
by the client, missing, refused by the endpoint, logged out, disabled) is what `auth/status` reports.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence

import anyio

from acp_server.agent.routes import ClientRoutes, Route
from acp_server.agent.sessions.runs import RunContext
from acp_server.errors import MissingCredentialsError
from acp_server.runtime.model import Provider
from acp_server.runtime.providers import needs_credentials, open_routed_provider

__all__ = ["LOGGED_OUT", "AuthState", "Credentials", "ProviderCache", "close_providers"]

log = logging.getLogger(__name__)

LOGGED_OUT = "logged out: authenticate again (ACP v1 `authenticate`, method api-key; v2 `auth/login`) to use the model"


class ProviderCache:
    """The provider for each model spec, built on first use and shared by every session that picks it."""

    def __init__(self, open_model: Callable[[str], Provider]) -> None:
        self._open_model = open_model
        self._providers: dict[str, Provider] = {}
        # Set by the logout of the connection that is the whole process (stdio's): no provider that takes credentials
        # is built again until its `authenticate` (a remote connection's logout is its own: `Credentials`).
        self.logged_out = False
        self._warming: set[str] = set()  # the specs whose warm-up has started (agent/warmup.py)
        self.warm_ups_running = 0  # warm-up tasks not ended yet: `_acp_server/stats` shows them apart from the rest
        # Model discovery builds its providers in a worker thread (agent/model_choices.py): each spec once.
        self._building = threading.Lock()

    def get(self, spec: str) -> Provider:
        """The spec's provider; a missing key (`MissingCredentialsError`) or a bad spec (`ModelSpecError`) is the
        client's error to fix."""
        provider = self._providers.get(spec)
        if provider is not None:
            return provider
        with self._building:
            provider = self._providers.get(spec)
            if provider is not None:
                return provider
            if self.logged_out and needs_credentials(spec):
                raise MissingCredentialsError(LOGGED_OUT)
            provider = self._open_model(spec)
            self._providers[spec] = provider
            return provider

    def forget_credentials(self) -> list[Provider]:
        """`logout`: drop every provider built with credentials, and build none again until `authenticate`. The
        dropped providers are returned for closing (`close_providers`); their specs are warmed up again when rebuilt."""
        self.logged_out = True
        dropped = [self._providers.pop(spec) for spec in list(self._providers) if needs_credentials(spec)]
        self._warming = {spec for spec in self._warming if not needs_credentials(spec)}
        return dropped

    def first_warm_up(self, spec: str) -> bool:
        """True the first time it is asked for a spec: that caller warms it up, later ones need not."""
        if spec in self._warming:
            return False
        self._warming.add(spec)
        return True

    def warm_up_failed(self, spec: str) -> None:
        """The spec's warm-up could not build its provider (a key missing): the next caller may try again."""
        self._warming.discard(spec)

    def reload(self, spec: str) -> None:
        """Build the spec's provider again, now (raises `MissingCredentialsError` while its key is missing)."""
        self._providers[spec] = self._open_model(spec)


class AuthState:
    """The server's own: whether the default model's credentials were found (at start, and at each `retry`)."""

    def __init__(self, providers: ProviderCache, default_model: str) -> None:
        self.providers = providers
        self.default_model = default_model
        self.problem: str | None = None
        self.retry()

    def retry(self) -> bool:
        """Build the default model's provider; False (with `problem`) while its key is missing. The configuration
        file is read again each time, so a key added meanwhile is found."""
        try:
            self.providers.reload(self.default_model)
        except MissingCredentialsError as exc:
            self.problem = str(exc)
            return False
        self.problem = None
        return True


class Credentials:
    """One connection's view of the model credentials (REMOTE.md decision 10): why its sessions cannot use the
    default model's key (`problem`: the server's finding when the connection began, then its own `authenticate`'s,
    or its own `logout`), and whether it logged out. Per connection, so one client's logout is no other's.

    `whole_process`: the connection is the process's only one (stdio): its logout forgets the process's keys too
    (the providers built with one are dropped, and none is built again until its `authenticate`)."""

    def __init__(self, auth: AuthState, *, whole_process: bool) -> None:
        self._auth = auth
        self._whole_process = whole_process
        self.problem = auth.problem
        self.logged_out = False
        # The providers whose key an endpoint refused (401, 403) on this connection, until its next `authenticate`
        # (or, for a routed one, its next `providers/set`).
        self.refused: set[str] = set()
        # Its client's gateways (`providers/set`), in memory only.
        self.routes = ClientRoutes(_open_routed)
        # The `auth/status` last reported to the connection (answered or sent): an update goes out only on a change.
        self.reported: dict[str, object] | None = None

    @property
    def default_family(self) -> str:
        return self._auth.default_model.partition(":")[0]

    def key_state(self, family: str, server_has_key: bool) -> str:
        """What this connection knows of `family`'s key: `disabled`, `refused`, `logged_out`, `client` (its own
        gateway), `server` (the server holds one) or `missing`."""
        if family in self.routes.disabled:
            return "disabled"
        if family in self.refused:
            return "refused"
        if self.logged_out:
            return "logged_out"
        if self.routes.routed(family):
            return "client"
        return "server" if server_has_key else "missing"

    def authenticate(self) -> bool:
        """ACP `authenticate`: end this connection's logout, and look for the key again if it is missing to it. A
        connection that is not the whole process needs no new look while the server holds the key: the providers
        the others use are left as they are."""
        self.logged_out = False
        self.refused = {family for family in self.refused if self.routes.routed(family)}
        if self._whole_process:
            self._auth.providers.logged_out = False
        if self.problem is None:
            return True
        if not self._whole_process and self._auth.problem is None:
            self.problem = None
            return True
        found = self._auth.retry()
        self.problem = self._auth.problem
        return found

    def logout(self) -> list[Provider]:
        """ACP `logout`: where the default model takes a key, this connection's new sessions need `authenticate`
        again, and so do its prompts on a model that takes one (`require_for`). The whole process's connection
        also drops the providers built with a key: returned, to close."""
        self.logged_out = True
        if needs_credentials(self._auth.default_model):
            self.problem = LOGGED_OUT
        return self._auth.providers.forget_credentials() if self._whole_process else []

    def require(self) -> None:
        """For what uses the default model (session/new, load, fork): refused while its key is missing (a provider
        the client routes through its gateway needs none of the server's) or its provider is disabled."""
        family = self.default_family
        if family in self.routes.disabled:
            self.routes.provider(self._auth.default_model)  # raises, saying why
        if self.routes.routed(family) and not self.logged_out:
            return
        if self.problem is not None:
            raise MissingCredentialsError(self.problem)

    def require_for(self, spec: str) -> None:
        """For a prompt on a session's model: a model that takes no key is never refused; one that does is while
        the default's key is missing or after a logout (until `authenticate`)."""
        if not needs_credentials(spec):
            return
        if self.logged_out:
            raise MissingCredentialsError(LOGGED_OUT)
        family = spec.partition(":")[0]
        if family in self.routes.disabled:
            self.routes.provider(spec)  # raises, saying why
        if self.routes.routed(family):
            return
        self.require()


def _open_routed(spec: str, route: Route) -> Provider:
    return open_routed_provider(spec, base_url=route.base_url, headers=dict(route.headers))


async def close_providers(dropped: Sequence[Provider], running: Sequence[RunContext], deadline: float) -> None:
    """After a logout, in a task of the connection: once the turns that were running then have ended (one may be
    streaming through a dropped provider), close the dropped providers' clients, each within `deadline` seconds.
    Cancelled at shutdown, it still closes them (shielded, bounded)."""
    try:
        for run in running:
            await run.wait_ended()
    finally:
        with anyio.CancelScope(shield=True), anyio.move_on_after(deadline):
            for provider in dropped:
                close = getattr(provider, "aclose", None)  # the HTTP providers; the offline ones hold nothing
                if close is None:
                    continue
                try:
                    await close()
                except Exception as exc:  # a client that fails to close is gone either way
                    log.debug("closing %r after logout failed: %s", provider, exc)
