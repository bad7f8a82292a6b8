"""The agent: one per process, what every editor connected to it shares.

It owns the frozen config, the session store, the providers and authentication, the model choices (and their
discovery), the run registry and the table of open sessions, the MCP servers, the process table, the bodies of
cancellable tool calls and, once the deferred side is loaded, the turn services (the tools, the sandbox, the plug-ins'
observer). Its background work (the store's flusher and pruning, model discovery, warm-ups, titles, MCP connections)
runs in a task group of its own (`running`), which outlives every connection.

What one editor has (its JSON-RPC connection, the version it chose, its prompts by request id) is its connection's
(protocol/editor_connection.py); a session is attached to one connection (`Session.edge`), and the agent reaches
the editor only through that edge. Cheap to build: nothing heavy is imported here (tests/unit/test_architecture.py,
`test_answering_initialize_imports_nothing_heavy`); the deferred side arrives through the `DeferredSide` port.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable, Coroutine
from typing import TYPE_CHECKING, Any, Protocol

import anyio

from acp_server.agent.model_choices import ModelChoices
from acp_server.agent.providers import AuthState, ProviderCache
from acp_server.agent.sessions.leasing import SessionLeases
from acp_server.agent.sessions.owners import SessionOwners
from acp_server.agent.sessions.runs import RunRegistry
from acp_server.agent.sessions.table import SessionTable
from acp_server.agent.store_access import StoreAccess
from acp_server.mcp_bridge import McpRegistry
from acp_server.runtime.call_bodies import CallBodies
from acp_server.runtime.child_env import ChildEnvPolicy
from acp_server.runtime.model import Provider
from acp_server.runtime.processes import ProcessTable
from acp_server.settings.config import Config

if TYPE_CHECKING:
    from anyio.abc import TaskGroup

    from acp_server.agent.sessions.services import TurnMeter, TurnServices
    from acp_server.store.migration import ReadLegacy

__all__ = ["Agent", "DeferredSide"]

# How much longer than the cleanup deadline the agent's own end may take (the store's last commit, MCP shutdowns).
CLOSE_SLACK = 2.0


class DeferredSide(Protocol):
    """The deferred side of the process (the turn, its tools, the sandbox): imported after the first `initialize` is
    answered, the turn services built on first use. protocol/deferred.py `Deferred` is the one implementation."""

    @property
    def built(self) -> bool: ...

    @property
    def failed(self) -> bool: ...

    async def load(self) -> None:
        """Import the side (once); raises what every request that needs it is answered when it cannot be."""
        ...

    async def load_rest(self) -> None:
        """`load`, then the rest of the side, what only a turn needs (once); raises as `load`."""
        ...

    async def ended(self) -> None:
        """Once a load has ended (its rest too), however, without starting one."""
        ...

    def serving(self) -> contextlib.AbstractContextManager[None]:
        """Around a request the side serves: its rest loads once none is."""
        ...

    def get(self) -> TurnServices:
        """The turn services, built now if they are not yet."""
        ...


class Agent:
    """What every editor shares; one per process, built by the composition root (cli/server.py)."""

    def __init__(
        self,
        config: Config,
        *,
        open_model: Callable[[str], Provider],
        side: Callable[[Agent], DeferredSide],
        read_legacy: ReadLegacy,
        prepare_first_prompt: Callable[[], None] = lambda: None,
        start_detached: Callable[[Callable[[], Coroutine[Any, Any, None]]], None],
        owns_process: bool = False,
    ) -> None:
        """`side`: the deferred side for this agent (it builds the turn services from it); `read_legacy`: how a
        schema-1 store's v1 updates are read on upgrade; `prepare_first_prompt`: what a warm-up builds for the first
        prompt's request (its validator); `owns_process`: the agent is the whole process (the CLI), so at exit it may
        kill every descendant. All three callables are the protocol edge's, handed in so this layer knows no wire
        shape."""
        self.config = config
        self._task_group: TaskGroup | None = None
        # Set as the agent ends (`closing`): background work not begun yet is not begun.
        self.ending = False
        self._drained = False
        self._exited = False
        self.processes = ProcessTable(ChildEnvPolicy.from_config(config), adopt_orphans=owns_process)
        self.calls = CallBodies(start_detached)
        self.runs = RunRegistry()
        self.sessions = SessionTable(self.runs)
        # Which principal each session belongs to (REMOTE.md decision 4): shared by every connection.
        self.owners = SessionOwners()
        self.providers = ProviderCache(open_model)
        # Builds the default model's provider now: a bad spec or script stops the server here (the CLI exits 2).
        self.auth = AuthState(self.providers, config.model)
        self.store = StoreAccess(config, self.spawn, read_legacy, on_failure=self._store_failed)
        # Which sessions this replica runs (the PostgreSQL store's leases; nothing on SQLite), and their heartbeat.
        self.leases = SessionLeases(
            config.lease_ttl,
            self.store,
            self.runs,
            self.sessions,
            self.spawn,
            meter=lambda: self.meter,
            ending=lambda: self.ending,
        )
        # Every session's MCP servers, connected in the agent's task group (see mcp_bridge/registry.py).
        self.mcp = McpRegistry(self.spawn, ChildEnvPolicy.from_config(config), config.mcp_start_wait)
        self.side = side(self)
        # The model specs a session may pick (the `model` config option): the configured ones, the default first,
        # then what their endpoints list (model discovery); a refresh waits for the side's load.
        self.models = ModelChoices(config, self.providers, self.spawn, self.side.ended)
        self._prepare_first_prompt = prepare_first_prompt
        # Who counts turns for an operator's metrics: set by `serve` (remote/metrics.py) before anything is served,
        # so the turn services built with the first session take it; None on stdio.
        self.meter: TurnMeter | None = None

    @property
    def turns(self) -> TurnServices:
        """What a turn needs (the tools, the sandbox, ...): the deferred side, built on first use."""
        return self.side.get()

    # --- the agent's own task group ---

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[Agent]:
        """The agent's task group, open while its connections are served. On the way out the agent ends (`aclose`,
        unless the end of its one connection did that: stdio), then what still runs in it (a refresh, a warm-up, a
        title) is cancelled: the connections that needed it have ended."""
        async with anyio.create_task_group() as task_group:
            self._task_group = task_group
            try:
                yield self
            finally:
                try:
                    await self.aclose()
                finally:
                    task_group.cancel_scope.cancel()
                    self._task_group = None

    async def aclose(self) -> None:
        """The agent's end once its connections have ended: every turn cancelled and waited for (each within the
        cleanup deadline), the store's last commit, the MCP servers and the processes it started stopped. Shielded
        and bounded; nothing more once done (stdio's connection does it step by step at its own end)."""
        if self._exited:
            return
        deadline = self.config.cleanup_deadline
        with anyio.CancelScope(shield=True), anyio.move_on_after(deadline + CLOSE_SLACK):
            if not self.ending:
                self.closing(deadline)
            with anyio.move_on_after(deadline):
                for run in self.runs.current():
                    await run.wait_ended()
                await self.calls.wait_all()
            await self.drain()
        self.exiting()

    def _store_failed(self) -> None:
        """A commit of the session store failed: counted for the operator (`serve`'s /metrics) when one watches."""
        if self.meter is not None:
            self.meter.store_failed()

    def spawn(self, function: Callable[..., Coroutine[Any, Any, Any]], *args: Any) -> None:
        """Start background work the agent owns (it outlives the request, and the connection, that started it)."""
        assert self._task_group is not None, "the agent's work runs only while it is running (Agent.running)"
        self._task_group.start_soon(function, *args)

    def warm_up(self, spec: str) -> None:
        """Warm `spec`'s model in the background (agent/warmup.py), once per spec."""
        self.spawn(self._warm_up, spec)

    async def _warm_up(self, spec: str) -> None:
        # The turn services are built from the whole deferred side, whose rest may still be loading (a session opens
        # before it is): awaited here, off the response's path, counted as a warm-up like the load after
        # `initialize` (shared_methods.py), so nothing imports it all at once on the loop.
        self.providers.warm_ups_running += 1
        try:
            await self.side.load_rest()
            tools = self.turns.tools
        except Exception:  # a broken install: each request that needs the side is told (protocol/deferred.py)
            return
        finally:
            self.providers.warm_ups_running -= 1
        from acp_server.agent.warmup import warm_up  # noqa: PLC0415 (start-up: the deferred side loads after `initialize`)

        await warm_up(self.providers, tools, spec, self._prepare_first_prompt)

    # --- the end of the agent (stdio: the end of its one connection) ---

    def closing(self, wait_bound: float) -> None:
        """Every turn of every session is cancelled, and the MCP servers' shutdowns begin alongside their cleanup.
        First: a commit in progress may be what holds a turn's response (also for a store still being opened)."""
        self.ending = True
        self.store.bound_waits(wait_bound)
        self.runs.interrupt_all()
        self.calls.cancel_all()
        self.mcp.stop_all()

    async def drain(self) -> None:
        if self._drained:
            return
        self._drained = True
        store = self.store.current
        if store is not None:
            await store.aclose()  # the last commit; this process's unfinished turns become `interrupted`
        await self.mcp.wait_stopped()

    def exiting(self) -> None:
        self._exited = True
        self.processes.kill_all()
        self.mcp.kill_all()  # stdio MCP servers that ignored their closed stdin, with their process groups
