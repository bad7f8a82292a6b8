"""The `model` option's choices in this process: the configured specs first, then the models each configured
endpoint lists (model discovery), so a user picks one in the editor, or with `acpx --model NAME`, without editing
`config.toml`.

The lists come from the disk cache (`runtime/providers/catalog.py`), read in a worker thread once per process
(and after `authenticate`), never on the event loop: `initialize` and `session/new` await that short local read if
it is still running, so a new session's response already offers them. They are asked for again in the background,
in a task the agent owns, when one is older than its time to live: `initialize` and `session/new` never wait
for an endpoint, and a cancel never waits for a listing or for the cache. A
list that changed is announced to the open sessions (`on_change`, a `config_option_update` each). An endpoint that
is down, slow or answers garbage costs a line on stderr and its list: the configured models are offered alone.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable, Coroutine
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio

from acp_server.agent.providers import ProviderCache
from acp_server.errors import MissingCredentialsError, ModelError, ModelSpecError
from acp_server.settings.config import Config

if TYPE_CHECKING:
    from acp_server.runtime.providers.catalog import Listing, ListingCache

__all__ = ["ModelChoices"]

log = logging.getLogger(__name__)

Spawn = Callable[[Callable[[], Coroutine[Any, Any, Any]]], None]
DISCOVERABLE = ("openai", "anthropic")


class ModelChoices:
    """What the `model` option offers in this process (`current`), and the background refresh of its lists."""

    def __init__(
        self,
        config: Config,
        providers: ProviderCache,
        spawn: Spawn,
        refresh_after: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        # What a refresh waits for before it asks (the deferred side's load, protocol/deferred.py): its provider SDK
        # is imported in a worker thread, which must not run beside the loop's imports.
        self._refresh_after = refresh_after
        self.configured: tuple[str, ...] = tuple(dict.fromkeys([config.model, *config.models]))
        self.current = self.configured
        self._config = config
        self._providers = providers
        self._spawn = spawn
        # The first configured spec of each family that lists models: its provider asks the endpoint.
        self._families: dict[str, str] = {}
        if config.model_discovery:
            for spec in self.configured:
                family, _, name = spec.partition(":")
                if family in DISCOVERABLE and name:
                    self._families.setdefault(family, spec)
        # (family, endpoint) -> its list, the cached ones included; the family's endpoint, once known.
        self._listings: dict[tuple[str, str], Listing] = {}
        self._endpoints: dict[str, str] = {}
        self._cache: ListingCache | None = None
        self._loaded = False
        self._loading: anyio.Event | None = None  # set once the cached lists are read (`_load`)
        self._load_again = False  # credentials changed while they were read: read again after
        self._refreshing = False
        self._attempted_at: float | None = None
        self._again = False  # credentials changed while a refresh ran: start another after it
        # What the last refresh found per family: a count, or why there is none (for logs and tests).
        self.outcomes: dict[str, str] = {}

    def offered(self, model: str) -> tuple[str, ...]:
        """The choices for a session on `model`: its own model stays listed even when an endpoint stopped listing
        it (its `currentValue` must be one of the options)."""
        return self.current if model in self.current else (*self.current, model)

    def accepts(self, spec: str) -> bool:
        """Whether a stored session's model can be kept: offered, or of a family whose list is not known yet."""
        family = spec.partition(":")[0]
        return spec in self.current or (family in self._families and not self._loaded_family(family))

    def _loaded_family(self, family: str) -> bool:
        endpoint = self._endpoints.get(family)
        return endpoint is not None and (family, endpoint) in self._listings

    def start(self, on_change: Callable[[], None]) -> None:
        """Read the cached lists (in a worker thread, a task the agent owns: the disk is never read on the
        event loop) and refresh in the background when one is due. Called at `initialize` and at each
        `session/new`, which then await `ready` (the short local read, never the network); at most one refresh
        runs, and one is tried at most once per time to live."""
        if not self._families:
            return
        if not self._loaded:
            if self._loading is not None:  # read again after `authenticate` while a read runs: once it ends
                self._load_again = True
                return
            self._loaded = True
            self._loading = anyio.Event()
            self._spawn(lambda: self._load(on_change))
            return  # the load decides whether a refresh is due
        self._maybe_refresh(on_change)

    async def ready(self) -> None:
        """Once the cached lists are read (at once if they are): a new session offers them."""
        if self._loading is not None:
            await self._loading.wait()

    def _maybe_refresh(self, on_change: Callable[[], None]) -> None:
        from acp_server.runtime.providers.catalog import LIST_TTL  # noqa: PLC0415 (start-up: the catalog loads with an HTTP provider, not before)

        now = time.time()
        if self._refreshing or (self._attempted_at is not None and now - self._attempted_at < LIST_TTL):
            return
        stale = [
            family
            for family, endpoint in self._endpoints.items()
            if (listing := self._listings.get((family, endpoint))) is None or not listing.fresh(now)
        ]
        if stale or len(self._endpoints) < len(self._families):
            self._refreshing = True
            self._attempted_at = now
            self._spawn(lambda: self._refresh(on_change))

    def credentials_changed(self) -> None:
        """A key was found (`authenticate`): the endpoints that had none are asked at the next `start`, or at the
        end of the refresh running now (which may have asked before the key was there)."""
        self._attempted_at = None
        self._loaded = False  # their endpoints, and what the cache holds for them, are read again
        self._again = self._refreshing

    async def _load(self, on_change: Callable[[], None]) -> None:
        """The endpoints and the cached lists, read in a worker thread (the providers may read the configuration
        file for a key, the cache is a file); the choices are updated here, on the loop."""
        from acp_server.runtime.providers.catalog import merge_choices  # noqa: PLC0415 (start-up: the catalog loads with an HTTP provider, not before)

        before = self.current
        try:
            try:
                endpoints, cache, listings = await anyio.to_thread.run_sync(self._read)
            except Exception:  # a cache is optional: the configured models are offered, the refresh still runs
                log.warning("model discovery: cannot read the cached lists", exc_info=True)
                endpoints, cache, listings = {}, None, {}
            self._endpoints.update(endpoints)
            self._cache = cache
            if cache is not None:
                self._listings = listings
            self.current = merge_choices(self.configured, self._ordered())
        finally:  # a cancelled read (the agent ends) releases its waiters too
            loading, self._loading = self._loading, None
            if loading is not None:
                loading.set()
        if self.current != before:  # read again after `authenticate`: open sessions hear of it
            on_change()
        if self._load_again:
            self._load_again = False
            self._loaded = False
            self.start(on_change)
        else:
            self._maybe_refresh(on_change)

    def _read(self) -> tuple[dict[str, str], ListingCache | None, dict[tuple[str, str], Listing]]:
        """In a worker thread: each family's endpoint (its provider, built if need be) and the cache's lists."""
        from acp_server.runtime.providers.catalog import CACHE_FILENAME, ListingCache  # noqa: PLC0415 (start-up: the catalog loads with an HTTP provider, not before)

        endpoints: dict[str, str] = {}
        for family, spec in self._families.items():
            endpoint = self._endpoint_of(spec)
            if endpoint is not None:
                endpoints[family] = endpoint
        if not self._config.store:  # --no-store: nothing is written, the lists are kept in memory only
            return endpoints, None, {}
        from acp_server.store.sqlite_file import default_state_dir  # noqa: PLC0415 (the store and sqlite3 load only when persistence is on)

        directory = Path(self._config.state_dir) if self._config.state_dir else default_state_dir()
        cache = ListingCache(directory / CACHE_FILENAME)
        cached = cache.load()
        return endpoints, cache, {key: cached[key] for key in endpoints.items() if key in cached}

    def _endpoint_of(self, spec: str) -> str | None:
        inner = self._lister(spec)
        return None if inner is None else str(inner.models_endpoint())

    def _lister(self, spec: str) -> Any:
        """The spec's HTTP provider (which knows its endpoint, key and headers), or None without credentials."""
        try:
            provider = self._providers.get(spec)
        except (MissingCredentialsError, ModelSpecError) as exc:
            self.outcomes[spec.partition(":")[0]] = _why(exc)
            return None
        inner = getattr(provider, "inner", provider)
        return inner if hasattr(inner, "list_models") else None

    def _ordered(self) -> list[Listing]:
        return [self._listings[key] for key in self._endpoints.items() if key in self._listings]

    async def _refresh(self, on_change: Callable[[], None]) -> None:
        """Ask every endpoint at once (one slow endpoint delays no other's list), then keep and announce."""
        from acp_server.runtime.providers.catalog import merge_choices  # noqa: PLC0415 (start-up: the catalog loads with an HTTP provider, not before)

        dropped: list[tuple[str, str]] = []
        try:
            if self._refresh_after is not None:
                await self._refresh_after()
            async with anyio.create_task_group() as listing:
                for family, spec in self._families.items():
                    listing.start_soon(self._list, family, spec, dropped)
            if self._cache is not None:
                cache, listings = self._cache, dict(self._listings)
                await anyio.to_thread.run_sync(lambda: cache.update(listings, dropped))
        finally:
            self._refreshing = False
        merged = merge_choices(self.configured, self._ordered())
        if merged != self.current:
            self.current = merged
            on_change()
        if self._again:
            self._again = False
            self.start(on_change)

    async def _list(self, family: str, spec: str, dropped: list[tuple[str, str]]) -> None:
        from acp_server.runtime.providers.catalog import Listing  # noqa: PLC0415 (start-up: the catalog loads with an HTTP provider, not before)

        lister = self._lister(spec)
        if lister is None:
            log.info("model discovery: %s: %s", family, self.outcomes.get(family, "no endpoint"))
            return
        endpoint = str(lister.models_endpoint())
        self._endpoints[family] = endpoint
        try:
            models: tuple[str, ...] = await lister.list_models()
        except Exception as exc:  # a ModelError line, or anything unforeseen: a list is a nicety
            self.outcomes[family] = str(exc) or type(exc).__name__
            if self._listings.pop((family, endpoint), None) is not None:
                dropped.append((family, endpoint))
            log.warning(
                "model discovery: %s; offering the configured models only",
                self.outcomes[family],
                exc_info=not _expected(exc),
            )
            return
        self.outcomes[family] = f"{len(models)} models listed by {endpoint}"
        self._listings[family, endpoint] = Listing(family, endpoint, models, time.time())
        log.info("model discovery: %s", self.outcomes[family])


def _why(exc: MissingCredentialsError | ModelSpecError) -> str:
    """Why a family lists nothing, in the words a prompt on it is answered (protocol/wire_errors.py)."""
    if isinstance(exc, MissingCredentialsError):
        return f"Authentication required: {exc}"
    return f"Invalid params: {exc}"


def _expected(exc: Exception) -> bool:

    return isinstance(exc, ModelError)
