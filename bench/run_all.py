"""Run every benchmark once and write the results: one JSON file, a short markdown table and the busy-sessions plot.

`python -m bench.run_all [--out bench/results]` runs the benchmarks one after another, never in parallel, so they do
not compete with each other for the CPU; anything else running on the machine still shows up in the figures (see
bench/README.md for what each figure means and which are indicative on a shared machine). It writes, in `--out`:
- `results.json`: the machine, every figure (name, value, unit, target, pass/fail) and the busy-session levels;
- `results.md`: the same figures as a markdown table;
- `scale.png`: cancel latency, chunks/s and CPU per chunk against the number of busy sessions (with the optional
  `bench` extra, matplotlib; without it the plot is skipped and the run says so).
Start-up, chunks/s and cancel latency run for both protocol versions, v1 then v2 (sections `startup_v2`, `chunks_v2`,
`cancel_v2`), so the v2 figures (named `v2 ...`; v1's keep their names) sit beside v1's.
`remote` (bench/remote.py) sets remote ACP's figures (WebSocket, and Streamable HTTP once served) beside stdio's.
`--quick` shrinks every benchmark to a few iterations (tests/e2e/test_bench_smoke.py runs it so bench stays runnable).
Exits 1 when a figure misses its target, so it can gate a release, but it is not a test: CI does not run it.
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import orjson

from bench import cancel, cancel_tool, chunks, first_prompt, memory, provider, remote, scale, sessions, startup, stress
from bench.plot import plot_scale
from bench.report import Figure, format_table

__all__ = ["main", "markdown_table"]

DEFAULT_OUT = Path(__file__).parent / "results"


def markdown_table(figures: Sequence[Figure]) -> str:
    rows = ["| figure | value | target | result |", "| --- | ---: | --- | --- |"]
    rows += [f"| {f.name} | {f.value_text()} | {f.target_text()} | {f.verdict()} |" for f in figures]
    return "\n".join(rows) + "\n"


def _figure(figure: Figure) -> dict[str, Any]:
    return {
        "name": figure.name,
        "value": figure.value,
        "unit": figure.unit,
        "op": figure.op,
        "target": figure.target,
        "passed": figure.passed,
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.run_all", description=__doc__)
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="where the results go (default bench/results)")
    parser.add_argument("--quick", action="store_true", help="a few iterations of everything (CI smoke run)")
    parser.add_argument("--spawns", type=int, default=20, help="startup: fresh processes (default 20)")
    parser.add_argument("--chunks", type=int, default=10_000, help="chunks: chunks per turn (default 10000)")
    parser.add_argument("--turns", type=int, default=10, help="chunks: timed turns per variant (default 10)")
    parser.add_argument("--cancels", type=int, default=100, help="cancel: timed cancels (default 100)")
    parser.add_argument(
        "--tool-cancels", type=int, default=50, help="cancel_tool: timed cancels per variant, tool running (default 50)"
    )
    parser.add_argument("--sessions", type=int, default=1000, help="memory and stress: sessions (default 1000)")
    parser.add_argument(
        "--levels", default=",".join(map(str, scale.LEVELS)), help="scale: busy-session counts (default %(default)s)"
    )
    parser.add_argument("--openai-levels", default="1,10,50", help="scale on the openai path (default %(default)s)")
    parser.add_argument("--seconds", type=float, default=5.0, help="scale: measured window per level (default 5)")
    parser.add_argument("--only", default="", help="run only these sections, comma-separated (default: all)")
    options = parser.parse_args(argv)
    if options.quick:  # a few iterations of everything, unless given on the command line
        small: dict[str, object] = {
            "spawns": 2,
            "chunks": 500,
            "turns": 1,
            "cancels": 3,
            "tool_cancels": 2,
            "sessions": 20,
        }
        small |= {"levels": "1,5", "openai_levels": "1,5", "seconds": 0.5}
        for name, value in small.items():
            if getattr(options, name) == parser.get_default(name):
                setattr(options, name, value)

    def levels(text: str) -> list[int]:
        return [int(n) for n in text.split(",") if n]

    q = options.quick
    print(f"acp-server benchmarks on Python {platform.python_version()}, {platform.machine()}, {platform.system()}")
    started = time.monotonic()
    figures: list[Figure] = []
    scales: dict[str, list[dict[str, Any]]] = {}

    def scaled(provider_name: str, spec: str) -> scale.ScaleResult:
        result = scale.run(levels(spec), seconds=options.seconds, provider=provider_name)
        scales[provider_name] = [level.as_dict() for level in result.levels]
        return result

    startup_args = [f"--spawns={options.spawns}"]
    chunks_args = [f"--chunks={options.chunks}", f"--turns={options.turns}"]
    cancel_args = [f"--iterations={options.cancels}", *(["--streaming=2"] if q else [])]
    sections: tuple[tuple[str, Callable[[], Any]], ...] = (
        ("startup", lambda: startup.main(startup_args)),
        ("startup_v2", lambda: startup.main([*startup_args, "--protocol=2", "--breakdown=0"])),
        ("chunks", lambda: chunks.main(chunks_args)),
        ("chunks_v2", lambda: chunks.main([*chunks_args, "--protocol=2"])),
        ("cancel", lambda: cancel.main(cancel_args)),
        ("cancel_v2", lambda: cancel.main([*cancel_args, "--protocol=2"])),
        ("cancel_tool", lambda: cancel_tool.main([f"--iterations={options.tool_cancels}"])),
        ("memory", lambda: memory.main([f"--sessions={options.sessions}"])),
        ("provider", lambda: provider.main(["--chunks=500", "--turns=1", "--cancels=2"] if q else [])),
        ("first_prompt", lambda: first_prompt.main(["--spawns=2", "--warm=3"] if q else [])),
        ("sessions", lambda: sessions.main(["--news=5", "--messages=20", "--chunks=500"] if q else [])),
        ("stress", lambda: stress.main([f"--sessions={options.sessions}", "--rounds=1" if q else "--rounds=2"])),
        ("scale", lambda: scaled("scripted", options.levels)),
        ("scale_openai", lambda: scaled("openai", options.openai_levels)),
        ("remote", lambda: remote.main(["--http", *(["--quick"] if q else [])])),
    )
    only = {name for name in options.only.split(",") if name}
    unknown = only - {name for name, _ in sections}
    if unknown:
        parser.error(f"unknown section(s): {', '.join(sorted(unknown))}")
    for name, bench in sections:
        if only and name not in only:
            continue
        print(f"\n== {name} ==", flush=True)
        section_started = time.monotonic()
        figures += bench().figures()
        print(f"({name} took {time.monotonic() - section_started:.1f} s)", flush=True)

    print(f"\n== summary ({time.monotonic() - started:.1f} s) ==")
    print(format_table(figures))
    out: Path = options.out
    out.mkdir(parents=True, exist_ok=True)
    result = {
        "when": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "python": platform.python_version(),
        "machine": platform.machine(),
        "system": platform.system(),
        "cpus": os.cpu_count(),
        "load_average": os.getloadavg(),
        "quick": q,
        "seconds": time.monotonic() - started,
        "figures": [_figure(f) for f in figures],
        "scale": scales,
    }
    (out / "results.json").write_bytes(orjson.dumps(result, option=orjson.OPT_INDENT_2))
    (out / "results.md").write_text(markdown_table(figures))
    print(f"\nresults written: {out / 'results.json'}, {out / 'results.md'}")
    print(plot_scale(scales, out / "scale.png"))
    failed = [f.name for f in figures if f.passed is False]
    if failed:
        print(f"\n{len(failed)} figure(s) missed the target: {', '.join(failed)}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
