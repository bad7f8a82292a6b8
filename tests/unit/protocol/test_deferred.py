"""The session side, loaded after `initialize` (protocol/deferred.py): one load however many requests wait for it,
built once, a load that imports every module the method tables defer to, and a side that cannot be loaded answered
as such while the connection goes on."""

from __future__ import annotations

import subprocess
import sys
import types
from typing import Any

import anyio
import anyio.lowlevel
import pytest

from acp_server.jsonrpc.rpc import ErrorCode, RpcError
from acp_server.protocol.deferred import Deferred, after_load, deferred
from acp_server.protocol.editor_connection import Handshake
from acp_server.protocol.shared_methods import warm_up_after_initialize

pytestmark = pytest.mark.timeout(30)


async def test_requests_that_come_while_the_session_side_loads_wait_for_that_one_load(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Stand-ins for the session side's modules, not imported yet: the load imports them one per step.
    for module in ("colorsys", "netrc", "tabnanny"):
        monkeypatch.delitem(sys.modules, module, raising=False)
    built: list[str] = []

    def build() -> str:
        built.append("turns")
        return "turns"

    side = Deferred(("colorsys", "netrc", "tabnanny"), build)
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
    side = Deferred(("colorsys", "netrc"), lambda: "turns")
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
    """What the warm-up and a deferred handler use of the `Agent`, `turns` built from the session side as there."""

    @property
    def turns(self) -> Any:
        return self.side.get()

    def warm_up(self, spec: str) -> None:
        self.warmed.append(spec)


def _agent(side: Deferred[Any], *, ending: bool = False) -> Any:
    return _Agent(
        providers=types.SimpleNamespace(warm_ups_running=0),
        side=side,
        ending=ending,
        config=types.SimpleNamespace(model="scripted"),
        warmed=[],
    )


def _context(agent: Any) -> Any:
    """A request's context: the agent, and the connection it came on (its handshake)."""
    return types.SimpleNamespace(
        agent=agent, connection=types.SimpleNamespace(handshake=Handshake()), admission_error=None
    )


async def test_a_session_side_that_cannot_be_imported_leaves_the_connection_serving_and_each_request_told_why(
    caplog: pytest.LogCaptureFixture,
) -> None:
    side: Deferred[Any] = Deferred(("colorsys", "acp_server._no_such_module"), lambda: "turns")
    agent = _agent(side)
    context = _context(agent)
    expected = (
        "the server could not load acp_server._no_such_module: No module named 'acp_server._no_such_module'; "
        "reinstall acp-server"
    )
    async with anyio.create_task_group() as tg:  # stands for the connection's task group
        tg.start_soon(warm_up_after_initialize, agent)
        # A request that came while the side loads waits for that load, and is told why it failed.
        with pytest.raises(RpcError) as waited:
            await deferred("acp_server.protocol.session_handlers", "session_new")(context, {})
    assert agent.providers.warm_ups_running == 0
    assert (waited.value.code, waited.value.message) == (ErrorCode.INTERNAL_ERROR, expected)
    # Said once on stderr, by the warm-up.
    assert [r.getMessage() for r in caplog.records if r.levelname == "ERROR"] == [expected]
    # Later requests, the ones that wait for the load before acting, and the pieces built from it: the same answer.
    for later in (deferred("acp_server.protocol.session_handlers", "session_list"), after_load(_never_called)):
        with pytest.raises(RpcError) as raised:
            await later(context, {})
        assert (raised.value.code, raised.value.message) == (ErrorCode.INTERNAL_ERROR, expected)
    with pytest.raises(RpcError) as built:
        side.get()
    assert built.value.message == expected
    await side.ended()  # the load is over, failed: nothing waits for it


async def _never_called(context: Any, params: Any) -> Any:
    raise AssertionError("a request that needs the loaded side ran without it")


async def test_turn_services_that_fail_to_build_leave_the_connection_serving_and_each_request_told_why() -> None:
    def build() -> str:
        raise ValueError("no sandbox")

    side: Deferred[Any] = Deferred(("colorsys",), build)
    agent = _agent(side)
    async with anyio.create_task_group() as tg:
        tg.start_soon(warm_up_after_initialize, agent)
    assert side.failed and agent.providers.warm_ups_running == 0
    with pytest.raises(RpcError) as raised:
        await deferred("acp_server.protocol.session_handlers", "session_new")(_context(agent), {})
    assert raised.value.message == "the server could not load colorsys: no sandbox; reinstall acp-server"


async def test_the_warm_up_starts_nothing_once_the_input_has_ended() -> None:
    # initialize, then EOF (or a stop signal): the agent (stdio: its one connection) is ending when the warm-up
    # would begin.
    side: Deferred[Any] = Deferred(("colorsys",), lambda: "turns")
    await warm_up_after_initialize(_agent(side, ending=True))
    assert not side.built and not side.failed
    with anyio.move_on_after(0.05) as waiting:
        await side.ended()  # no load began
    assert waiting.cancelled_caught


async def test_what_waits_for_the_load_to_end_goes_on_once_it_has_and_the_loaded_hook_runs_once() -> None:
    loaded: list[str] = []
    side: Deferred[Any] = Deferred(("colorsys", "netrc"), lambda: "turns", lambda: loaded.append("frozen"))
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
import sys
from acp_server.protocol.deferred import DeferredHandler
from acp_server.protocol.handlers import METHODS
from acp_server.protocol.v2.handlers import METHODS_V2
from acp_server.cli.server import SESSION_SIDE

deferred = {h.module for _, h in (*METHODS.values(), *METHODS_V2.values()) if isinstance(h, DeferredHandler)}
before = sorted(m for m in deferred if m in sys.modules)
for module in SESSION_SIDE:
    __import__(module)
after = sorted(m for m in deferred if m not in sys.modules)
handlers = [h for _, h in (*METHODS.values(), *METHODS_V2.values()) if isinstance(h, DeferredHandler)]
missing = [h.__name__ for h in handlers if not callable(getattr(sys.modules[h.module], h.__name__, None))]
print(len(deferred), before, after, missing)
"""


def test_loading_the_session_side_imports_every_module_a_method_table_defers_to() -> None:
    result = subprocess.run([sys.executable, "-c", _TABLES], capture_output=True, text=True, timeout=25, check=False)
    assert result.returncode == 0, result.stderr
    count, rest = result.stdout.split(" ", 1)
    # Not loaded by the tables themselves, all loaded by the session side, and each names a real handler.
    assert int(count) >= 5 and rest.strip() == "[] [] []"


_FREEZE = """
import gc, sys, anyio
from acp_server.cli.server import build_server
from acp_server.settings.config import Config

async def main(owns_process):
    agent, connection, dispatcher = build_server(Config(model="scripted"), owns_process=owns_process)
    gc.freeze()  # what the CLI's start-up does (server._tune_gc)
    frozen = gc.get_freeze_count()
    await agent.side.load()
    return "acp_server.cli.session_side" in sys.modules, gc.get_freeze_count() > frozen

print(anyio.run(main, sys.argv[1] == "owns"))
"""


@pytest.mark.parametrize(("owns", "frozen"), [("owns", True), ("embedded", False)])
def test_the_session_side_is_frozen_out_of_the_collectors_sight_like_start_up_when_the_server_owns_the_process(
    owns: str, frozen: bool
) -> None:
    command = [sys.executable, "-c", _FREEZE, owns]
    result = subprocess.run(command, capture_output=True, text=True, timeout=25, check=False)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == f"(True, {frozen})"


async def test_a_request_pipelined_behind_initialize_waits_for_its_answer_before_it_loads_or_acts() -> None:
    """An `auth/login` read right behind `initialize` once ran (and started the session side's load) while the
    `initialize` handler still awaited the models list: it found no authentication offered, and was answered first.
    What waits for the load now waits for every `initialize` read before it to be answered."""
    side: Deferred[Any] = Deferred(("colorsys",), lambda: "turns")
    context = _context(_agent(side))
    handshake = context.connection.handshake
    handshake.initialize_read()
    acted: list[str] = []

    async def login(context: Any, params: Any) -> str:
        acted.append("login")
        return "ok"

    async with anyio.create_task_group() as tg:
        tg.start_soon(after_load(login), context, {})
        for _ in range(20):
            await anyio.lowlevel.checkpoint()
        assert acted == [] and not side.failed and not side._imported, "it acted before initialize was answered"
        handshake.initialize_answered()
    assert acted == ["login"]
    await handshake.answered()  # nothing unanswered: at once
