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

`deferred(module, name)` stands for a request handler of the session side in a method table; `Deferred` holds a
piece built from it (the turn services), made on first use.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any, Generic, TypeVar

import anyio
import anyio.lowlevel

__all__ = ["Deferred", "DeferredHandler", "deferred"]

T = TypeVar("T")


class Deferred(Generic[T]):
    """A piece of the session side: its modules are imported once (`load`), and the piece is built on first use
    (`get`) from what `build` returns. Long-lived and per connection, like the pieces it stands among.

    `modules` are imported in their order, the last one importing (with everything it needs) the whole side; the
    ones before it only cut the load into smaller steps, so the order matters for the size of each step alone."""

    def __init__(self, modules: tuple[str, ...], build: Callable[[], T]) -> None:
        self._modules = modules
        self._build = build
        self._value: T | None = None
        self._imported = False
        self._loading: anyio.Event | None = None

    @property
    def built(self) -> bool:
        return self._value is not None

    async def load(self) -> None:
        """Import the session side, a module at a time, once; a caller that comes while it runs waits for it."""
        if self._imported:
            return
        if self._loading is not None:
            await self._loading.wait()
            return
        self._loading = anyio.Event()
        try:
            for module in self._modules:
                importlib.import_module(module)
                await anyio.lowlevel.checkpoint()
            self._imported = True
        finally:
            self._loading.set()  # cancelled midway (a shutdown): `get` imports the rest

    def get(self) -> T:
        """The piece, built now if it is not yet (importing the session side here if `load` has not)."""
        if self._value is None:
            importlib.import_module(self._modules[-1])  # a dictionary look-up once `load` has run
            self._imported = True
            self._value = self._build()
        return self._value


class DeferredHandler:
    """A request handler that lives on the session side: the function `name` of `module`, called once the session
    side is loaded (`Parts.session_side`). Its context is a `RequestContext` (protocol/context.py, which names this
    module's `Deferred`: typed `Any` here, so neither imports the other)."""

    def __init__(self, module: str, name: str) -> None:
        self.module = module
        self.__name__ = name  # what the error boundary's log names (jsonrpc/rpc.py)

    async def __call__(self, context: Any, params: Any) -> Any:
        if context.admission_error is not None:
            raise context.admission_error  # a refused prompt (the first thing its handler does), answered at once
        await context.parts.session_side.load()
        function = getattr(importlib.import_module(self.module), self.__name__)
        return await function(context, params)


def deferred(module: str, name: str) -> DeferredHandler:
    """The handler `name` of `module`, on the session side (see `DeferredHandler`)."""
    return DeferredHandler(module, name)
