"""Run every benchmark once and print one pass/fail table, so a change's performance cost is one command away.

`python -m bench.run_all` takes under ten seconds on an idle machine. The benchmarks run one after another, never in
parallel, so they do not compete with each other for the CPU; anything else running on the machine still shows up in
the figures.
Exits 1 when a figure misses its target, so it can gate a release, but it is not a test: CI does not run it.
"""

from __future__ import annotations

import argparse
import platform
import sys
import time
from collections.abc import Sequence

from bench import cancel, cancel_tool, chunks, first_prompt, memory, provider, sessions, startup
from bench.report import Figure, format_table

__all__ = ["main"]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.run_all", description=__doc__)
    parser.add_argument("--spawns", type=int, default=20, help="startup: fresh processes (default 20)")
    parser.add_argument("--chunks", type=int, default=10_000, help="chunks: chunks per turn (default 10000)")
    parser.add_argument("--turns", type=int, default=10, help="chunks: timed turns per variant (default 10)")
    parser.add_argument("--cancels", type=int, default=100, help="cancel: timed cancels (default 100)")
    parser.add_argument(
        "--tool-cancels", type=int, default=50, help="cancel_tool: timed cancels per variant, tool running (default 50)"
    )
    parser.add_argument("--sessions", type=int, default=1000, help="memory: sessions in the burst (default 1000)")
    options = parser.parse_args(argv)

    print(f"acp-server benchmarks on Python {platform.python_version()}, {platform.machine()}, {platform.system()}")
    started = time.monotonic()
    figures: list[Figure] = []
    sections = (
        ("startup", lambda: startup.main([f"--spawns={options.spawns}"])),
        ("chunks", lambda: chunks.main([f"--chunks={options.chunks}", f"--turns={options.turns}"])),
        ("cancel", lambda: cancel.main([f"--iterations={options.cancels}"])),
        ("cancel_tool", lambda: cancel_tool.main([f"--iterations={options.tool_cancels}"])),
        ("memory", lambda: memory.main([f"--sessions={options.sessions}"])),
        ("provider", lambda: provider.main([])),
        ("first_prompt", lambda: first_prompt.main([])),
        ("sessions", lambda: sessions.main([])),
    )
    for name, bench in sections:
        print(f"\n== {name} ==")
        section_started = time.monotonic()
        figures += bench().figures()
        print(f"({name} took {time.monotonic() - section_started:.1f} s)")

    print(f"\n== summary ({time.monotonic() - started:.1f} s) ==")
    print(format_table(figures))
    failed = [f.name for f in figures if f.passed is False]
    if failed:
        print(f"\n{len(failed)} figure(s) missed the target: {', '.join(failed)}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
