"""The deferred side, loaded after `initialize` (protocol/deferred.py): one load however many requests wait for it,
built once, a load that imports every method the start-up tables leave to it, a request for one of those methods
routed by the dispatcher once the load is over, and a side that cannot be loaded answered as such while the
connection goes on."""

from __future__ import annotations

import subprocess
import sys
import types
from pathlib import Path
from typing import Any

import anyio
import anyio.lowlevel
import pytest

from acp_server.cli.server import build_agent, connect
from acp_server.jsonrpc.rpc import ErrorCode, IncomingRequest, RpcError
from acp_server.protocol.context import RequestContext
from acp_server.protocol.deferred import Deferred, load_failure
from acp_server.protocol.dispatcher import AcpDispatcher, Version
from acp_server.protocol.shared_methods import warm_up_after_initialize
from acp_server.settings.config import Config

pytestmark = pytest.mark.timeout(30)


async def _three_steps() -> None:
    """Stand-ins for the deferred side's modules, imported a step at a time (cli/server.py `load_deferred_side`)."""
    import colorsys  # noqa: F401

    await anyio.lowlevel.checkpoint()
    import netrc  # noqa: F401

    await anyio.lowlevel.checkpoint()
    import tabnanny  # noqa: F401


async def _two_steps() -> None:
    import colorsys  # noqa: F401

    await anyio.lowlevel.checkpoint()
    import netrc  # noqa: F401


async def _one_step() -> None:
    import colorsys  # noqa: F401


async def _turn_steps() -> None:
    """Stand-ins for what only a turn needs (cli/server.py `load_turn_side`)."""
    import tabnanny  # noqa: F401

    await anyio.lowlevel.checkpoint()
    import pyclbr  # noqa: F401


async def _a_missing_module() -> None:
    import colorsys  # noqa: F401

    await anyio.lowlevel.checkpoint()
    import acp_server._no_such_module  # type: ignore[import-not-found]  # noqa: F401


async def test_requests_that_come_while_the_deferred_side_loads_wait_for_that_one_load(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Stand-ins for the deferred side's modules, not imported yet: the load imports them one per step.
    for module in ("colorsys", "netrc", "tabnanny"):
        monkeypatch.delitem(sys.modules, module, raising=False)
    built: list[str] = []

    def build() -> str:
        built.append("turns")
        return "turns"

    side = Deferred(_three_steps, build)
    waited: list[tuple[str, bool]] = []

    async def request(name: str) -> None:
        await side.load()
        waited.append((name, "tabnanny" in sys.modules))  # the whole side is there when a request goes on

    async with anyio.create_task_group() as tg:
        tg.start_soon(side.load)  # the load started once `initialize` is answered
        await anyio.lowlevel.checkpoint()  # it has imported its first module and yielded
        assert "colorsys" in sys.modules and "tabnanny" not in sys.modules
        tg.start_soon(request, "session/new")
        tg.start_soon(request, "session/list")
    assert sorted(waited) == [("session/list", True), ("session/new", True)]
    assert side.get() == "turns" and side.get() == "turns" and built == ["turns"]  # built on first use, once
    await side.load()  # loaded: returns at once


async def test_a_request_that_comes_once_the_load_ends_goes_on_after_those_that_waited_for_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Pipelined requests go on in the order they came: one that arrives between the load's end and the wake-up of
    the requests that waited for it does not overtake them (a burst of session/new behind initialize answered its
    first one last)."""
    for module in ("colorsys", "netrc"):
        monkeypatch.delitem(sys.modules, module, raising=False)
    side = Deferred(_two_steps, lambda: "turns")
    went_on: list[str] = []

    async def request(name: str) -> None:
        await side.load()
        went_on.append(name)

    async def third_once_the_last_module_is_in() -> None:
        # Started in the loop iteration in which the load imports its last module: its first step runs after the
        # load has ended but before "second", woken by that end, goes on (as a line read in that iteration does).
        while "netrc" not in sys.modules:
            await anyio.lowlevel.checkpoint()
        tg.start_soon(request, "third")

    async with anyio.create_task_group() as tg:
        tg.start_soon(side.load)  # the warm-up's load
        await anyio.lowlevel.checkpoint()
        tg.start_soon(request, "second")  # waits for the load
        tg.start_soon(third_once_the_last_module_is_in)
    assert went_on == ["second", "third"]


class _Agent(types.SimpleNamespace):
    """What the warm-up uses of the `Agent`."""

    @property
    def turns(self) -> Any:
        return self.side.get()


class _AnyParams:
    """Params read as they come (a `Params`, jsonrpc/rpc.py)."""

    def validate(self, params: Any) -> Any:
        return params

    def holds(self, value: Any) -> bool:
        return False


async def _never_called(context: Any, params: Any) -> Any:
    raise AssertionError("a request that needs the loaded side ran without it")


def _dispatcher(side: Deferred[Any], handler: Any = _never_called) -> AcpDispatcher:
    """An editor's dispatcher on an agent whose deferred side is `side`, serving `x/later` (v1) from that side with
    `handler`."""
    agent, served = build_agent(Config(model="scripted"))
    agent.side = side
    _, built = connect(agent, served)
    later = Version({}, {}, later=frozenset({"x/later"}), later_methods=lambda: {"x/later": (_AnyParams(), handler)})
    return AcpDispatcher(agent, built.connection, v1=later)


async def _ask(dispatcher: AcpDispatcher, method: str = "x/later") -> dict[str, Any] | None:
    """A request for `method`, answered as the connection would have it answered."""
    request = IncomingRequest(1, method, {}, {"jsonrpc": "2.0", "id": 1, "method": method, "params": {}})
    return await dispatcher.answer(request, RequestContext(dispatcher.agent, dispatcher.connection, 1))


async def test_a_deferred_side_that_cannot_be_imported_leaves_the_connection_serving_and_each_request_told_why(
    caplog: pytest.LogCaptureFixture,
) -> None:
    side: Deferred[Any] = Deferred(_a_missing_module, lambda: "turns")
    dispatcher = _dispatcher(side)
    agent = dispatcher.agent
    expected = (
        "the server could not load acp_server._no_such_module: No module named 'acp_server._no_such_module'; "
        "reinstall acp-server"
    )
    async with anyio.create_task_group() as tg:  # stands for the connection's task group
        tg.start_soon(warm_up_after_initialize, agent)
        # A request that came while the side loads waits for that load, and is told why it failed.
        waited = await _ask(dispatcher)
    assert agent.providers.warm_ups_running == 0
    assert waited == {"jsonrpc": "2.0", "id": 1, "error": {"code": ErrorCode.INTERNAL_ERROR, "message": expected}}
    # Said once on stderr, by the warm-up.
    assert [r.getMessage() for r in caplog.records if r.levelname == "ERROR"] == [expected]
    # Later requests, and the pieces built from it: the same answer; a start-up method is served as ever.
    assert await _ask(dispatcher) == waited
    with pytest.raises(RpcError) as built:
        side.get()
    assert built.value.message == expected
    await side.ended()  # the load is over, failed: nothing waits for it


async def test_a_module_that_fails_as_it_is_imported_is_the_one_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "acp_test_broken_step.py").write_text('raise RuntimeError("a broken module")\n')
    monkeypatch.syspath_prepend(str(tmp_path))

    async def load() -> None:
        await _one_step()
        import acp_test_broken_step  # type: ignore[import-not-found]  # noqa: F401

    side: Deferred[Any] = Deferred(load, lambda: "turns")
    with pytest.raises(RpcError) as raised:
        await side.load()
    expected = "the server could not load acp_test_broken_step: a broken module; reinstall acp-server"
    assert (raised.value.code, raised.value.message) == (ErrorCode.INTERNAL_ERROR, expected)
    assert load_failure(ValueError("no sandbox")) == (
        "the server could not load the deferred side: no sandbox; reinstall acp-server"
    )


async def test_turn_services_that_fail_to_build_leave_the_connection_serving_and_each_request_told_why() -> None:
    def build() -> Any:
        raise ValueError("no sandbox")

    side: Deferred[Any] = Deferred(_one_step, build)
    dispatcher = _dispatcher(side)
    async with anyio.create_task_group() as tg:
        tg.start_soon(warm_up_after_initialize, dispatcher.agent)
    assert side.failed and dispatcher.agent.providers.warm_ups_running == 0
    answer = await _ask(dispatcher)
    assert answer is not None
    assert answer["error"]["message"] == "the server could not load the deferred side: no sandbox; reinstall acp-server"


async def test_the_warm_up_starts_nothing_once_the_input_has_ended() -> None:
    # initialize, then EOF (or a stop signal): the agent (stdio: its one connection) is ending when the warm-up
    # would begin.
    side: Deferred[Any] = Deferred(_one_step, lambda: "turns")
    agent: Any = _Agent(side=side, ending=True, providers=types.SimpleNamespace(warm_ups_running=0))
    await warm_up_after_initialize(agent)
    assert not side.built and not side.failed
    with anyio.move_on_after(0.05) as waiting:
        await side.ended()  # no load began
    assert waiting.cancelled_caught


async def test_what_waits_for_the_load_to_end_goes_on_once_it_has_and_the_loaded_hook_runs_once() -> None:
    loaded: list[str] = []
    side: Deferred[Any] = Deferred(_two_steps, lambda: "turns", lambda: loaded.append("frozen"))
    order: list[str] = []

    async def after_the_load() -> None:
        await side.ended()  # never starts the load itself
        order.append("refresh")

    async with anyio.create_task_group() as tg:
        tg.start_soon(after_the_load)
        await anyio.lowlevel.checkpoint()
        assert order == [] and loaded == []
        await side.load()
        order.append("loaded")
    assert order == ["loaded", "refresh"] and loaded == ["frozen"]
    await side.load()
    await side.ended()
    assert loaded == ["frozen"]


_TABLES = """
import sys, anyio
from acp_server.protocol.handlers import METHODS, DEFERRED_SIDE_METHODS
from acp_server.protocol.v2.handlers import METHODS_V2, DEFERRED_SIDE_METHODS_V2
from acp_server.cli.server import load_deferred_side

TABLES = "acp_server.protocol.deferred_methods"
before = TABLES in sys.modules
anyio.run(load_deferred_side)
loaded = TABLES in sys.modules
from acp_server.protocol.deferred_methods import DEFERRED_METHODS, DEFERRED_METHODS_V2

same = DEFERRED_METHODS.keys() == DEFERRED_SIDE_METHODS, DEFERRED_METHODS_V2.keys() == DEFERRED_SIDE_METHODS_V2
apart = not METHODS.keys() & DEFERRED_SIDE_METHODS, not METHODS_V2.keys() & DEFERRED_SIDE_METHODS_V2
print(before, loaded, *same, *apart, len(DEFERRED_METHODS) >= 5 and len(DEFERRED_METHODS_V2) >= 5)
"""


def test_loading_the_deferred_side_imports_tables_that_serve_exactly_the_methods_the_start_up_tables_leave_it() -> None:
    result = subprocess.run([sys.executable, "-c", _TABLES], capture_output=True, text=True, timeout=25, check=False)
    assert result.returncode == 0, result.stderr
    # Not loaded by the start-up tables, loaded by the deferred side, and naming each method the start-up side
    # leaves to it (and none it serves itself).
    assert result.stdout.split() == ["False", *["True"] * 6]


_FREEZE = """
import gc, sys, anyio
from acp_server.cli.server import build_server
from acp_server.settings.config import Config

async def main(owns_process):
    agent, connection, dispatcher = build_server(Config(model="scripted"), owns_process=owns_process)
    gc.freeze()  # what the CLI's start-up does (server._tune_gc)
    frozen = gc.get_freeze_count()
    await agent.side.load()  # what requests wait for: the turn's modules are not in yet, nor is anything frozen
    part = "acp_server.cli.deferred_side" in sys.modules, gc.get_freeze_count() > frozen
    await agent.side.load_rest()
    return part, ("acp_server.cli.deferred_side" in sys.modules, gc.get_freeze_count() > frozen)

print(anyio.run(main, sys.argv[1] == "owns"))
"""


@pytest.mark.parametrize(("owns", "frozen"), [("owns", True), ("embedded", False)])
def test_the_deferred_side_is_frozen_out_of_the_collectors_sight_like_start_up_when_the_server_owns_the_process(
    owns: str, frozen: bool
) -> None:
    command = [sys.executable, "-c", _FREEZE, owns]
    result = subprocess.run(command, capture_output=True, text=True, timeout=25, check=False)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == f"((False, False), (True, {frozen}))"


async def test_a_request_pipelined_behind_initialize_waits_for_its_answer_once_then_for_the_load_then_acts(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An `auth/login` read right behind `initialize` once ran (and started the deferred side's load) while the
    `initialize` handler still awaited the models list: it found no authentication offered, and was answered first.
    What waits for the load now waits for every `initialize` read before it to be answered, once (the dispatcher
    alone waits: the `tool_call/cancel` path once awaited it twice, issue 22 item 3)."""
    acted: list[str] = []

    async def login(context: Any, params: Any) -> str:
        acted.append("login")
        return "ok"

    side: Deferred[Any] = Deferred(_one_step, lambda: "turns")
    dispatcher = _dispatcher(side, login)
    handshake = dispatcher.connection.handshake
    waits: list[str] = []
    answered = handshake.answered

    async def counted() -> None:
        waits.append("answered")
        await answered()

    monkeypatch.setattr(handshake, "answered", counted)
    handshake.initialize_read()
    answers: list[dict[str, Any] | None] = []

    async def ask() -> None:
        answers.append(await _ask(dispatcher))

    async with anyio.create_task_group() as tg:
        tg.start_soon(ask)
        for _ in range(20):
            await anyio.lowlevel.checkpoint()
        assert acted == [] and not side.failed and not side._imported, "it acted before initialize was answered"
        handshake.initialize_answered()
    assert acted == ["login"] and answers == [{"jsonrpc": "2.0", "id": 1, "result": "ok"}]
    assert waits == ["answered"]
    await handshake.answered()  # nothing unanswered: at once


async def test_requests_go_on_once_their_part_is_loaded_and_the_rest_loads_after_them_before_the_load_ends(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A `session/new` right behind `initialize` waits for the session methods, not for the turn's modules (the
    tools): those load after it, and what waits for the load to end (a thread importing a provider SDK, the
    collector's freeze) waits for them too."""
    for module in ("colorsys", "netrc", "tabnanny", "pyclbr"):
        monkeypatch.delitem(sys.modules, module, raising=False)
    loaded: list[str] = []
    side: Deferred[Any] = Deferred(_two_steps, lambda: "turns", lambda: loaded.append("frozen"), _turn_steps)
    order: list[str] = []

    async def request() -> None:
        await side.load()
        order.append(f"request ({'with' if 'tabnanny' in sys.modules else 'without'} the rest)")

    async def after_the_load() -> None:
        await side.ended()
        order.append(f"ended ({'with' if 'pyclbr' in sys.modules else 'without'} the rest)")

    async with anyio.create_task_group() as tg:
        tg.start_soon(after_the_load)
        tg.start_soon(side.load_rest)  # the background task started once `initialize` is answered
        await anyio.lowlevel.checkpoint()
        tg.start_soon(request)
        tg.start_soon(side.load_rest)  # a session's warm-up: waits for the one load of the rest
    assert order == ["request (without the rest)", "ended (with the rest)"]
    assert loaded == ["frozen"]
    await side.load_rest()
    assert loaded == ["frozen"] and side.get() == "turns"


async def test_a_rest_that_cannot_be_loaded_is_told_to_every_request_after_it() -> None:
    side: Deferred[Any] = Deferred(_one_step, lambda: "turns", rest=_a_missing_module)
    await side.load()
    with pytest.raises(RpcError) as raised:
        await side.load_rest()
    assert "acp_server._no_such_module" in raised.value.message
    with pytest.raises(RpcError):
        await side.load()  # the next session/new is told, as for a failed load
    await side.ended()


_PARTS = """
import sys, anyio
from acp_server.cli.server import load_deferred_side, load_turn_side

TURN = "acp_server.runtime.tools", "acp_server.agent.sessions.turn", "acp_server.runtime.loop"
TURN += ("acp_server.cli.deferred_side",)
SESSIONS = "acp_server.protocol.deferred_methods", "acp_server.protocol.acp_edge"
anyio.run(load_deferred_side)
first = [module in sys.modules for module in (*SESSIONS, *TURN)]
anyio.run(load_turn_side)
print(*first, all(module in sys.modules for module in TURN))
"""


def test_the_part_of_the_deferred_side_requests_wait_for_leaves_out_what_only_a_turn_needs() -> None:
    result = subprocess.run([sys.executable, "-c", _PARTS], capture_output=True, text=True, timeout=25, check=False)
    assert result.returncode == 0, result.stderr
    # The session methods and the edge first; the tools, the turn and its loop after them.
    assert result.stdout.split() == ["True", "True", "False", "False", "False", "False", "True"]


async def test_the_rest_waits_until_the_requests_that_waited_for_the_load_are_answered(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A step of the rest between two of a `session/new`'s steps would hold the loop while the store's worker thread
    waits for it: the rest begins once the requests the side serves are answered."""
    for module in ("colorsys", "netrc", "tabnanny", "pyclbr"):
        monkeypatch.delitem(sys.modules, module, raising=False)
    side: Deferred[Any] = Deferred(_two_steps, lambda: "turns", rest=_turn_steps)
    store_done = anyio.Event()
    seen: list[str] = []

    async def session_new() -> None:
        await side.load()
        with side.serving():
            await store_done.wait()  # the store's commit, in its worker thread
            seen.append(f"answered ({'with' if 'tabnanny' in sys.modules else 'without'} the rest)")

    async with anyio.create_task_group() as tg:
        tg.start_soon(side.load_rest)
        await anyio.lowlevel.checkpoint()
        tg.start_soon(session_new)
        for _ in range(10):
            await anyio.lowlevel.checkpoint()
        assert "tabnanny" not in sys.modules and not seen
        store_done.set()
    assert seen == ["answered (without the rest)"] and "pyclbr" in sys.modules
