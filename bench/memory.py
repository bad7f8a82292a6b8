"""Memory: the server's resident size after start-up, and what each idle session adds.

An editor may keep a server for a whole workday and open a session per chat, so an idle session must stay small.
VmRSS is read from /proc after `initialize`; then a few warm-up sessions are opened (the first `session/new` pays for
lazy imports and validator builds, which belong to start-up, not to the session), and then N `session/new` requests
are written in one pipelined burst. The growth in VmRSS across the burst, divided by N, is the per-session figure.
`_acp_server/stats` confirms the server holds all of them. Run alone: `python -m bench.memory [--sessions N]`.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from dataclasses import dataclass

from bench.report import Figure, format_table
from bench.wire import Server, WireError

__all__ = ["MemoryResult", "main", "run"]

TARGET_KB_PER_SESSION = 20.0
WARM_UP = 10


@dataclass(frozen=True, slots=True)
class MemoryResult:
    sessions: int
    rss_start_kb: int  # after initialize
    rss_warm_kb: int  # after the warm-up sessions
    rss_after_kb: int  # after the burst

    @property
    def kb_per_session(self) -> float:
        return (self.rss_after_kb - self.rss_warm_kb) / self.sessions

    def figures(self) -> list[Figure]:
        return [
            Figure("memory: RSS after initialize", self.rss_start_kb / 1024, "MiB"),
            Figure(
                f"memory: RSS per idle session (x{self.sessions})",
                self.kb_per_session,
                "KB",
                "<=",
                TARGET_KB_PER_SESSION,
            ),
        ]


def run(sessions: int = 1000) -> MemoryResult:
    with Server.spawn("--model", "scripted") as server:
        server.initialize()
        rss_start = server.rss_kb()
        for _ in range(WARM_UP):
            server.new_session()
        rss_warm = server.rss_kb()
        params = {"cwd": "/tmp", "mcpServers": []}
        burst = [server.request_message("session/new", params) for _ in range(sessions)]
        server.send(*(message for _, message in burst))
        session_ids = set()
        for request_id, _ in burst:
            response, _ = server.response(request_id, timeout=60)
            if "result" not in response:
                raise WireError(f"session/new failed: {response}")
            session_ids.add(response["result"]["sessionId"])
        rss_after = server.rss_kb()
        held = server.call("_acp_server/stats", {})["sessions"]
    if len(session_ids) != sessions or held != WARM_UP + sessions:
        raise WireError(f"{len(session_ids)} distinct session ids, server holds {held}; expected {sessions}")
    return MemoryResult(sessions, rss_start, rss_warm, rss_after)


def main(argv: Sequence[str] | None = None) -> MemoryResult:
    parser = argparse.ArgumentParser(prog="python -m bench.memory", description=__doc__)
    parser.add_argument("--sessions", type=int, default=1000, help="sessions in the pipelined burst (default 1000)")
    options = parser.parse_args(argv)
    result = run(options.sessions)
    print(
        f"memory: VmRSS {result.rss_start_kb} KB after initialize, {result.rss_warm_kb} KB after {WARM_UP} warm-up "
        f"sessions, {result.rss_after_kb} KB after {result.sessions} more"
    )
    print(format_table(result.figures()))
    return result


if __name__ == "__main__":
    main()
