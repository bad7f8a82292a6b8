"""A short run of the seeded stress script (bench/stress.py): ten sessions streaming at once with random cancels,
replacements, queued, rejected and steering prompts, subagents and permission questions answered now, late or
never; every message checked against the schema and the wire rules, and nothing left behind at the end."""

from __future__ import annotations

import os
from types import SimpleNamespace
from typing import Any, cast

import pytest

from bench.stress import crossed_sessions, run
from tests.support.harness import RawClient


@pytest.mark.timeout(120)
async def test_a_randomized_busy_workload_keeps_every_promise_and_leaks_nothing() -> None:
    seed = int(os.environ.get("ACP_TEST_RANDOM_SEED", "3"))
    result = await run(sessions=10, rounds=4, seed=seed, validate=True)
    assert result.problems == []
    assert result.prompts >= 40
    assert result.cancel_ms, "the run cancelled nothing"
    if seed == 3:  # the default seed gives a session the steer policy (the run then hands over at least once)
        assert result.hand_overs > 0


def chunk_for(session: str, text: str) -> dict[str, Any]:
    update = {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": text}}
    return {"method": "session/update", "params": {"sessionId": session, "update": update}}


def test_the_stress_check_catches_a_reply_shown_under_another_session() -> None:
    received = [chunk_for("a", "s0r1.0 "), chunk_for("b", "s1r1.0 "), chunk_for("b", "s0r1.1 ")]
    client = cast(RawClient, SimpleNamespace(received=received))
    assert crossed_sessions(client, ["a", "b"]) == ["b was sent 's0r1.1 '"]


@pytest.mark.timeout(120)
async def test_the_randomized_busy_workload_on_acp_v2_keeps_every_promise_and_leaks_nothing() -> None:
    """The same workload on a v2 connection: prompts answered at insertion or withdrawn (-32800), each session's
    work ending with its idle, the v2 wire checks (turn output only between running and idle) and schema."""
    seed = int(os.environ.get("ACP_TEST_RANDOM_SEED", "3"))
    result = await run(sessions=6, rounds=3, seed=seed, validate=True, protocol=2)
    assert result.problems == []
    assert result.prompts >= 18
