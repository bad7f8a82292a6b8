"""A recorded transcript as a regression test in a few lines, for pytest or any test runner.

    from acp_server.transcripts.testing import assert_replays

    def test_my_session():
        assert_replays("fixtures/transcripts/my_session.jsonl", ["acp-server", "--model", "scripted"])

`assert_replays` runs the agent, replays the transcript's client side (as `acp-server replay` does) and raises
AssertionError with the normalised diff when the agent's side differs. It is synchronous (it runs its own event
loop), so call it from an ordinary test function, not from inside a running event loop.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import anyio

from acp_server.transcripts.engine import Outcome
from acp_server.transcripts.format import load_transcript
from acp_server.transcripts.replay_peer import replay_command

__all__ = ["assert_replays"]


def assert_replays(
    transcript: str | Path,
    command: Sequence[str],
    *,
    paths: Mapping[str, str] | None = None,
    timeout: float | None = None,
    strict: bool = False,
    env: Mapping[str, str] | None = None,
    cwd: str | Path | None = None,
) -> Outcome:
    """Replay `transcript` against a fresh `command` and fail unless the agent's side matches. `paths` maps the
    recording's directories to the ones to use now; `env` replaces the agent's environment."""
    __tracebackhide__ = True  # pytest shows the caller's line, not this one
    loaded = load_transcript(transcript)

    async def run() -> Outcome:
        outcome, _ = await replay_command(
            loaded, command, timeout=timeout, strict=strict, paths=paths, env=env, cwd=None if cwd is None else str(cwd)
        )
        return outcome

    outcome = anyio.run(run, backend="asyncio")
    if not outcome.ok:
        raise AssertionError(f"{transcript} does not replay against {' '.join(command)}:\n{outcome.report()}")
    return outcome
