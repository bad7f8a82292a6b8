"""`run_abandonable` (runtime/call_stops.py): a cancellable call that ignores its own cancel is abandoned at the cancel
plus the grace, and its fence is up from then on; one that cooperates ends at once; a cancel of the turn reaches the
body. Driven on anyio's clock with a `CallBodies` standing in for the connection's."""

from __future__ import annotations

import math
from typing import Any

import anyio
import pytest

from acp_server.jsonrpc.transport import start_detached
from acp_server.runtime.call_bodies import CallBodies
from acp_server.runtime.call_stops import Abandonment, CallStop, run_abandonable

pytestmark = pytest.mark.timeout(10)

GRACE = 0.2


def _bodies() -> CallBodies:
    return CallBodies(start_detached)


async def test_a_body_ignoring_its_cancel_is_abandoned_at_the_deadline_and_reports_its_late_end() -> None:
    late: list[tuple[str, dict[str, Any]]] = []
    stop = CallStop(GRACE)

    async def stubborn() -> str:
        with anyio.CancelScope(shield=True):
            await anyio.sleep(GRACE * 10)
        return "done"

    bodies = CallBodies(start_detached)
    async with anyio.create_task_group() as tg:
        tg.start_soon(_cancel_soon, stop)
        began = anyio.current_time()
        result = await run_abandonable(
            stubborn, stop, _owned_by(bodies), lambda: math.inf, on_late_end=lambda e, **f: late.append((e, f))
        )
        waited = anyio.current_time() - began
        assert result is None and stop.abandoned
        assert GRACE <= waited < GRACE * 10  # at the deadline, not at the body's end
        assert late == []  # the body still runs
        assert bodies.lingering("s") == 1
    await bodies.close("s", GRACE * 20)  # it ignores this cancel too: waited for until it ends, within the bound
    assert late == [("tool_exited", {"reason": "completed"})]
    assert bodies.lingering("s") == 0


async def test_a_cooperating_body_ends_at_its_cancel_and_is_not_abandoned() -> None:
    stop = CallStop(GRACE)

    async def cooperating() -> str:
        await anyio.sleep(30)
        return "never"

    async with anyio.create_task_group() as tg:
        tg.start_soon(_cancel_soon, stop)
        result = await run_abandonable(cooperating, stop, _owned_by(_bodies()), lambda: math.inf, on_late_end=_none)
    assert result is None and not stop.abandoned


async def test_a_cancel_of_the_turn_reaches_the_body_and_its_failure_is_raised_where_it_is_awaited() -> None:
    stop = CallStop(GRACE)
    reached: list[bool] = []

    async def body() -> str:
        try:
            await anyio.sleep(30)
        except anyio.get_cancelled_exc_class():
            reached.append(True)
            raise
        return "never"

    with anyio.move_on_after(0.05):
        await run_abandonable(body, stop, _owned_by(_bodies()), lambda: math.inf, on_late_end=_none)
    assert reached == [True] and not stop.abandoned

    async def failing() -> str:
        raise ValueError("broken")

    with pytest.raises(ValueError, match="broken"):
        await run_abandonable(failing, CallStop(GRACE), _owned_by(_bodies()), lambda: math.inf, on_late_end=_none)


def _owned_by(bodies: CallBodies) -> Abandonment:
    """The test's `CallBodies` owns the bodies' tasks (session "s"), as the connection's does in the server."""
    return Abandonment(bodies, "s", GRACE)


async def _cancel_soon(stop: CallStop) -> None:
    await anyio.sleep(0.02)
    stop.cancel()


def _none(event: str, **fields: Any) -> None:
    raise AssertionError(f"no late end expected: {event} {fields}")
