"""The connection's providers by model spec, and ACP authentication: whether the default model's key is found.

`authenticate` re-reads the configuration file and the environment for the key; `logout` forgets every key this
process holds (the providers built with one are dropped) until the next `authenticate`, so the same
`authenticate` / `logout` cycle works however the key was given.
"""

from __future__ import annotations

from collections.abc import Callable

from acp_server.jsonrpc.rpc import ErrorCode, RpcError
from acp_server.runtime.model import ModelSpecError, Provider
from acp_server.runtime.providers import MissingCredentialsError, needs_credentials

__all__ = ["LOGGED_OUT", "AuthState", "ProviderCache"]

LOGGED_OUT = "logged out: authenticate again (ACP v1 `authenticate`, method api-key; v2 `auth/login`) to use the model"


class ProviderCache:
    """The provider for each model spec, built on first use and shared by every session that picks it."""

    def __init__(self, open_model: Callable[[str], Provider]) -> None:
        self._open_model = open_model
        self._providers: dict[str, Provider] = {}
        # Set by `logout`: no provider that takes credentials is built again until `authenticate`.
        self.logged_out = False
        self._warming: set[str] = set()  # the specs whose warm-up has started (protocol/warmup.py)

    def get(self, spec: str) -> Provider:
        """The spec's provider; a missing key or a bad spec is the client's error to fix."""
        provider = self._providers.get(spec)
        if provider is None:
            if self.logged_out and needs_credentials(spec):
                raise RpcError(ErrorCode.AUTH_REQUIRED, f"Authentication required: {LOGGED_OUT}")
            try:
                provider = self._open_model(spec)
            except MissingCredentialsError as exc:
                raise RpcError(ErrorCode.AUTH_REQUIRED, f"Authentication required: {exc}") from None
            except ModelSpecError as exc:
                raise RpcError(ErrorCode.INVALID_PARAMS, f"Invalid params: {exc}") from None
            self._providers[spec] = provider
        return provider

    def forget_credentials(self) -> None:
        """`logout`: drop every provider built with credentials, and build none again until `authenticate`."""
        self.logged_out = True
        for spec in [spec for spec in self._providers if needs_credentials(spec)]:
            del self._providers[spec]

    def first_warm_up(self, spec: str) -> bool:
        """True the first time it is asked for a spec: that caller warms it up, later ones need not."""
        if spec in self._warming:
            return False
        self._warming.add(spec)
        return True

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

    def logout(self) -> None:
        """ACP `logout`: forget the keys; where the default model takes one, sessions and prompts need
        `authenticate` again (an offline model or none that takes credentials is not affected)."""
        self._providers.forget_credentials()
        if needs_credentials(self._default_model):
            self.problem = LOGGED_OUT

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
        if self.problem is not None:
            raise RpcError(ErrorCode.AUTH_REQUIRED, f"Authentication required: {self.problem}")
