"""The deferred side of the server, loaded after `initialize` is answered: the start-up path answers the handshake
with the handshake's modules only.

Most of the package (the session handlers, the turn and its tools, the edge to the editor, the sandbox) is needed
by no request before the first session, so a fresh process leaves it out of the path to its first answer (issue 14:
start-up). It is imported once `initialize` is answered, while the editor gets ready to open a session, on the event
loop, by a function of plain imports with a checkpoint after each (cli/server.py `load_deferred_side`): the loop goes
on serving (and, at an EOF right behind `initialize`, flushes the answer) between two steps, and no thread imports
beside the loop's (two threads importing the same modules can deadlock on their import locks, and an import thread
left running at exit would hold the interpreter lock while the answer is flushed).

It loads in two parts: first what its requests need (the session methods, the edge to the editor), which a request
waits for; then the rest, what only a turn needs (the tools, the turn: `load_rest`), in the background task that
started the load, once those requests are answered (`serving`), and before the warm-ups that build the turn services
(with the sandbox). A `session/new` right behind `initialize` is then answered without waiting for the turn's modules.

The methods it serves are in its own tables (protocol/deferred_methods.py), imported with it; the start-up tables
list them by wire name only (`DEFERRED_SIDE_METHODS` in protocol/handlers.py and protocol/v2/handlers.py), and the
dispatcher sends a request for one to the deferred side's table once the load is over, the request waiting for that
one load (`Deferred.load`). The waiters go on in the order they came, so requests pipelined behind `initialize` take
effect in their order.

A side that cannot be loaded (a broken install: a module missing or failing at import, or the turn services failing
to build) is recorded: every request that needs it is answered that error, naming the module, and the connection
goes on (`initialize` is answered, the exit at EOF is clean).
"""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable, Iterator
from types import TracebackType
from typing import Generic, TypeVar

import anyio
import anyio.lowlevel

from acp_server.jsonrpc.rpc import ErrorCode, RpcError

__all__ = ["Deferred", "load_failure"]

T = TypeVar("T")


class Deferred(Generic[T]):
    """The deferred side: imported once (`load`, the composition root's step-wise import), and built on first use
    (`get`) from what `build` returns. Long-lived and one per process: the agent's (`Agent.side`).

    `build` imports what it builds from with a plain import: after a load that is a look-up; after a load cut short
    (a shutdown) it imports the rest at once."""

    def __init__(
        self,
        load: Callable[[], Awaitable[None]],
        build: Callable[[], T],
        on_loaded: Callable[[], None] = lambda: None,
        rest: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        """`load`: what the side's requests wait for; `rest`: what only `build` needs, imported after it
        (`load_rest`), so a request is not held back by it."""
        self._load = load
        self._build = build
        self._on_loaded = on_loaded  # once the whole side is imported (the server freezes it out of the collector)
        self._rest = rest
        self._rest_started = False
        self._serving = 0  # requests the side is serving now (`serving`)
        self._quiet: anyio.Event | None = None  # set when the last of them is answered, made when the rest waits
        self._piece: T | None = None
        self._imported = False
        self._loading: anyio.Event | None = None
        self._waiters = 0  # requests waiting in `load` for the load, not yet gone on
        # Why the side cannot be had (what every request that needs it is answered, and the exception), once a load
        # or the build failed: for good.
        self._failure: tuple[str, Exception] | None = None
        self._over = False  # a load has ended (imported, failed or cancelled midway), or `get` imported the side
        self._ended: anyio.Event | None = None  # what `ended` waits on, made when someone does

    @property
    def built(self) -> bool:
        return self._piece is not None

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
        """Import the deferred side, once; a caller that comes while it runs waits for it (the waiters go on in the
        order they came). Raises the `RpcError` every request then answers when it failed."""
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
            await self._load()
            self._imported = True
        except Exception as exc:  # a broken install; a cancel is not an Exception and goes on as one
            self._failure = (load_failure(exc), exc)
            self._raise_if_failed()
        finally:
            self._loading.set()  # cancelled midway (a shutdown): `get` imports the rest
            if self._rest is None or not self._imported:
                self._end()  # else the load ends with its rest (`load_rest`)
        if self._rest is None:
            self._on_loaded()

    async def load_rest(self) -> None:
        """`load`, then the rest of the side (what only `build` needs: the turn's modules), once, a step at a time
        on the loop like `load`; a caller that comes while it runs waits for it. Requests wait for `load` alone:
        the rest loads once they are answered (a `session/new` right behind `initialize` is not held back by the
        tools, and no step of it runs while they are served: `serving`), and `ended` waits for it too. Raises as `load`
        when it failed."""
        await self.load()
        if self._rest is None:
            return
        if self._rest_started:
            await self.ended()
            self._raise_if_failed()
            return
        self._rest_started = True
        try:
            # The requests that waited for `load` go on first, and are answered before the rest begins: a step of it
            # between two of theirs would hold the loop while their worker threads (the store's) wait for it.
            await anyio.lowlevel.checkpoint()
            while self._serving:
                if self._quiet is None:
                    self._quiet = anyio.Event()
                await self._quiet.wait()
            await self._rest()
        except Exception as exc:  # a broken install; a cancel is not an Exception and goes on as one
            self._failure = (load_failure(exc), exc)
            self._raise_if_failed()
        finally:
            self._end()
        self._on_loaded()

    @contextlib.contextmanager
    def serving(self) -> Iterator[None]:
        """Around a request the side serves, from its dispatch to its answer: the rest waits for none to be served
        (`load_rest`)."""
        self._serving += 1
        try:
            yield
        finally:
            self._serving -= 1
            if not self._serving and self._quiet is not None:
                self._quiet.set()
                self._quiet = None

    def get(self) -> T:
        """The piece, built now if it is not yet (importing the deferred side here if `load` has not)."""
        if self._piece is None:
            self._raise_if_failed()
            try:
                self._piece = self._build()
            except Exception as exc:
                self._failure = (load_failure(exc), exc)
                self._end()
                self._raise_if_failed()
            self._imported = True
            self._end()
        assert self._piece is not None
        return self._piece

    def _raise_if_failed(self) -> None:
        if self._failure is not None:
            message, exc = self._failure
            raise RpcError(ErrorCode.INTERNAL_ERROR, message) from exc


def load_failure(exc: Exception) -> str:
    """What a request that needs what failed to load is answered (-32603), naming the module that failed
    (`failed_module`), or the deferred side when no import failed (its build). The answer still says "the session
    side", as it did before the deferred side had its name: a message clients have seen is not changed by a rename."""
    return f"the server could not load {failed_module(exc) or 'the deferred side'}: {exc}; reinstall acp-server"


def failed_module(exc: Exception) -> str | None:
    """The module whose import raised `exc`: the one found missing; else the one named by the innermost import
    statement on the way out (the module whose body raised, or whose finder or loader did before any of it ran);
    else the innermost module whose body raised. None when no import failed."""
    if isinstance(exc, ImportError) and exc.name:
        return exc.name
    entries: list[TracebackType] = []
    entry = exc.__traceback__
    while entry is not None:
        entries.append(entry)
        entry = entry.tb_next
    import ast  # noqa: PLC0415 (a broken install only: what failed is told)
    import linecache  # noqa: PLC0415 (a broken install only: what failed is told)

    for entry in reversed(entries):
        line = linecache.getline(entry.tb_frame.f_code.co_filename, entry.tb_lineno).strip()
        try:
            statement = ast.parse(line).body
        except SyntaxError:  # a statement over several lines
            continue
        if statement and isinstance(statement[0], ast.Import):
            return statement[0].names[0].name
        if statement and isinstance(statement[0], ast.ImportFrom) and statement[0].module and not statement[0].level:
            return statement[0].module
    for entry in reversed(entries):
        if entry.tb_frame.f_code.co_name == "<module>":
            return str(entry.tb_frame.f_globals.get("__name__"))
    return None
