"""The connection's providers by model spec, and ACP authentication: whether the default model's key is found.

`authenticate` re-reads the configuration file and the environment for the key; `logout` forgets every key this
process holds (the providers built with one are dropped, and their clients closed once the turns running at the
logout have ended) until the next `authenticate`, so the same `authenticate` / `logout` cycle works however the key
was given. The check is per model: a session whose model takes no key (echo, scripted) goes on working.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence

import anyio

from acp_server.agent.sessions.runs import RunContext
from acp_server.errors import MissingCredentialsError
from acp_server.runtime.model import Provider
from acp_server.runtime.providers import needs_credentials

__all__ = ["LOGGED_OUT", "AuthState", "ProviderCache", "close_providers"]

log = logging.getLogger(__name__)

LOGGED_OUT = "logged out: authenticate again (ACP v1 `authenticate`, method api-key; v2 `auth/login`) to use the model"


class ProviderCache:
    """The provider for each model spec, built on first use and shared by every session that picks it."""

    def __init__(self, open_model: Callable[[str], Provider]) -> None:
        self._open_model = open_model
        self._providers: dict[str, Provider] = {}
        # Set by `logout`: no provider that takes credentials is built again until `authenticate`.
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
    """Until the default model's credentials are found: why not (ACP authentication; `authenticate` retries)."""

    def __init__(self, providers: ProviderCache, default_model: str) -> None:
        self._providers = providers
        self._default_model = default_model
        self.problem: str | None = None
        self.retry()

    def authenticate(self) -> bool:
        """ACP `authenticate`: end a logout, and look for the key again if it is missing (or was forgotten)."""
        self._providers.logged_out = False
        return self.problem is None or self.retry()

    def logout(self) -> list[Provider]:
        """ACP `logout`: forget the keys; where the default model takes one, new sessions need `authenticate` again,
        and so do prompts of a session whose model takes one (`require_for`). The dropped providers, to close."""
        dropped = self._providers.forget_credentials()
        if needs_credentials(self._default_model):
            self.problem = LOGGED_OUT
        return dropped

    def retry(self) -> bool:
        """Build the default model's provider; False (with `problem`) while its key is missing. The configuration
        file is read again each time, so a key added meanwhile is found."""
        try:
            self._providers.reload(self._default_model)
        except MissingCredentialsError as exc:
            self.problem = str(exc)
            return False
        self.problem = None
        return True

    def require(self) -> None:
        """For what uses the default model (session/new, load, fork): refused while its key is missing."""
        if self.problem is not None:
            raise MissingCredentialsError(self.problem)

    def require_for(self, spec: str) -> None:
        """For a prompt on a session's model: a model that takes no key is never refused; one that does is while
        the default's key is missing or after a logout (until `authenticate`)."""
        if not needs_credentials(spec):
            return
        if self._providers.logged_out:
            raise MissingCredentialsError(LOGGED_OUT)
        self.require()


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
