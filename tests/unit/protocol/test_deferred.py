"""The session side, loaded after `initialize` (protocol/deferred.py): one load however many requests wait for it,
built once, and a load that imports every module the method tables defer to."""

from __future__ import annotations

import subprocess
import sys

import anyio
import anyio.lowlevel
import pytest

from acp_server.protocol.deferred import Deferred

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


_TABLES = """
import sys
from acp_server.protocol.deferred import DeferredHandler
from acp_server.protocol.handlers import METHODS
from acp_server.protocol.v2.handlers import METHODS_V2
from acp_server.server import SESSION_SIDE

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
