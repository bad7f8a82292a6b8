"""The session side of the server, loaded after `initialize` is answered: the start-up path answers the handshake
with the handshake's modules only.

Most of the package (the session handlers, the turn and its tools, the edge to the editor, the sandbox) is needed
by no request before the first session, so a fresh process leaves it out of the path to its first answer (issue 14:
start-up). It is imported once `initialize` is answered, while the editor gets ready to open a session, on the event
loop, a module at a time with a checkpoint after each: the loop goes on serving (and, at an EOF right behind
`initialize`, flushes the answer) between two modules, and no thread imports beside the loop's (two threads
importing the same modules can deadlock on their import locks, and an import thread left running at exit would hold
the interpreter lock while the answer is flushed). A request that needs the session side before it is loaded waits
for that one load.

A side that cannot be loaded (a broken install: a module missing or failing at import, or the turn services failing
to build) is recorded: every request that needs it is answered that error, naming the module, and the connection
goes on (`initialize` is answered, the exit at EOF is clean).

`deferred(module, name)` stands for a request handler of the session side in a method table; `after_load(function)`
for one of the start-up side that must still wait for the load, so that requests pipelined behind `initialize` take
effect in their order; `Deferred` holds a piece built from it (the turn services), made on first use.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Coroutine
from typing import Any, Generic, TypeVar

import anyio
import anyio.lowlevel

from acp_server.jsonrpc.rpc import ErrorCode, RpcError

__all__ = ["AfterLoad", "Deferred", "DeferredHandler", "after_load", "deferred"]

T = TypeVar("T")


class Deferred(Generic[T]):
    """A piece of the session side: its modules are imported once (`load`), and the piece is built on first use
    (`get`) from what `build` returns. Long-lived and one per process: the agent's (`Agent.side`).

    `modules` are imported in their order, the last one importing (with everything it needs) the whole side; the
    ones before it only cut the load into smaller steps, so the order matters for the size of each step alone."""

    def __init__(
        self, modules: tuple[str, ...], build: Callable[[], T], on_loaded: Callable[[], None] = lambda: None
    ) -> None:
        self._modules = modules
        self._build = build
        self._on_loaded = on_loaded  # once the whole side is imported (the server freezes it out of the collector)
        self._value: T | None = None
        self._imported = False
        self._loading: anyio.Event | None = None
        self._waiters = 0  # requests waiting in `load` for the load, not yet gone on
        # Why the side cannot be had (the module, the exception), once a load or the build failed: for good.
        self._failure: tuple[str, Exception] | None = None
        self._over = False  # a load has ended (imported, failed or cancelled midway), or `get` imported the side
        self._ended: anyio.Event | None = None  # what `ended` waits on, made when someone does

    @property
    def built(self) -> bool:
        return self._value is not None

    @property
    def failed(self) -> bool:
        return self._failure is not None

    async def ended(self) -> None:
        """Once a load has ended, however (or at once if one has), without starting one: for work that must not run
        beside the load (a worker thread importing a provider SDK would share modules' import locks with it)."""
        if not self._over:
            if self._ended is None:
                self._ended = anyio.Event()
            await self._ended.wait()

    def _end(self) -> None:
        self._over = True
        if self._ended is not None:
            self._ended.set()

    async def load(self) -> None:
        """Import the session side, a module at a time, once; a caller that comes while it runs waits for it (the
        waiters go on in the order they came). Raises the `RpcError` every request then answers when it failed."""
        self._raise_if_failed()
        if self._imported and not self._waiters:
            return
        if self._loading is not None:
            # Also once the side is imported, while requests that waited for it have not gone on yet: a request that
            # came after them must not overtake them (the set event's waiters are woken in order, and this wait is
            # scheduled behind them), or pipelined requests take effect, and are answered, out of order (a burst of
            # `session/new` right behind `initialize` answered its first one last).
            self._waiters += 1
            try:
                await self._loading.wait()
            finally:
                self._waiters -= 1
            self._raise_if_failed()
            return
        self._loading = anyio.Event()
        try:
            for module in self._modules:
                try:
                    importlib.import_module(module)
                except Exception as exc:  # a broken install; a cancel is not an Exception and goes on as one
                    self._failure = (module, exc)
                    self._raise_if_failed()
                await anyio.lowlevel.checkpoint()
            self._imported = True
        finally:
            self._loading.set()  # cancelled midway (a shutdown): `get` imports the rest
            self._end()
        self._on_loaded()

    def get(self) -> T:
        """The piece, built now if it is not yet (importing the session side here if `load` has not)."""
        if self._value is None:
            self._raise_if_failed()
            module = self._modules[-1]
            try:
                importlib.import_module(module)  # a dictionary look-up once `load` has run
                self._imported = True
                self._end()
                self._value = self._build()
            except Exception as exc:
                self._failure = (module, exc)
                self._end()
                self._raise_if_failed()
        assert self._value is not None
        return self._value

    def _raise_if_failed(self) -> None:
        if self._failure is not None:
            module, exc = self._failure
            message = f"the server could not load {module}: {exc}; reinstall acp-server"
            raise RpcError(ErrorCode.INTERNAL_ERROR, message) from exc


class DeferredHandler:
    """A request handler that lives on the session side: the function `name` of `module`, called once the session
    side is loaded (`Agent.side`). Its context is a `RequestContext` (protocol/context.py, which names this
    module's `Deferred`: typed `Any` here, so neither imports the other)."""

    def __init__(self, module: str, name: str) -> None:
        self.module = module
        self.__name__ = name  # what the error boundary's log names (jsonrpc/rpc.py)

    async def __call__(self, context: Any, params: Any) -> Any:
        if context.admission_error is not None:
            raise context.admission_error  # a refused prompt (the first thing its handler does), answered at once
        await context.connection.handshake.answered()  # pipelined behind `initialize`: after its answer
        await context.agent.side.load()
        function = getattr(importlib.import_module(self.module), self.__name__)
        return await function(context, params)


def deferred(module: str, name: str) -> DeferredHandler:
    """The handler `name` of `module`, on the session side (see `DeferredHandler`)."""
    return DeferredHandler(module, name)


class AfterLoad:
    """A request handler of the start-up side that still waits for the session side's load before it acts, so that
    it takes effect after the requests that came before it (`initialize; session/new; logout` in one write opens the
    session, then logs out). Its context is a `RequestContext`, as for `DeferredHandler`."""

    def __init__(self, function: Callable[[Any, Any], Coroutine[Any, Any, Any]]) -> None:
        self._function = function
        self.__name__ = function.__name__  # what the error boundary's log names (jsonrpc/rpc.py)

    async def __call__(self, context: Any, params: Any) -> Any:
        await context.connection.handshake.answered()  # pipelined behind `initialize`: after its answer
        await context.agent.side.load()
        return await self._function(context, params)


def after_load(function: Callable[[Any, Any], Coroutine[Any, Any, Any]]) -> AfterLoad:
    """`function`, called once the session side is loaded (see `AfterLoad`)."""
    return AfterLoad(function)
