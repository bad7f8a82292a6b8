"""Spawn -> `initialize` response latency: how long an editor waits before it can open a session.

Each sample spawns a fresh `acp-server`, writes `initialize` at once (the pipe holds it until the server reads) and
stops the clock when the response line is read, so interpreter start-up and every import are included, as an editor
sees them. It also times, in this process, reading the settings when there is no config file (every start-up does
it). Run alone: `python -m bench.startup [--spawns N]`.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from bench.report import Figure, format_table
from bench.wire import Server, WireError, percentile

__all__ = ["StartupResult", "main", "run"]

TARGET_MEDIAN_MS = 250.0
TARGET_NO_CONFIG_MS = 5.0  # finding no config file must cost a start-up almost nothing


@dataclass(frozen=True, slots=True)
class StartupResult:
    samples_ms: list[float]
    exit_codes: list[int]
    no_config_ms: float | None = None  # settings read with no config file, per start-up

    @property
    def median_ms(self) -> float:
        return statistics.median(self.samples_ms)

    @property
    def min_ms(self) -> float:
        return min(self.samples_ms)

    @property
    def p90_ms(self) -> float:
        return percentile(self.samples_ms, 90)

    def figures(self) -> list[Figure]:
        return [
            Figure("startup: spawn -> initialize, median", self.median_ms, "ms", "<=", TARGET_MEDIAN_MS),
            Figure("startup: min", self.min_ms, "ms"),
            Figure("startup: p90", self.p90_ms, "ms"),
            *(
                [Figure("startup: settings with no config file", self.no_config_ms, "ms", "<=", TARGET_NO_CONFIG_MS)]
                if self.no_config_ms is not None
                else []
            ),
        ]


def time_no_config_file(loads: int = 100) -> float:
    """Milliseconds per settings load when the config file does not exist (what most start-ups do)."""
    from acp_server.settings.command_line import load

    with tempfile.TemporaryDirectory() as directory:
        env = {"ACP_SERVER_CONFIG": str(Path(directory) / "missing" / "config.toml")}
        load([], env=env)
        started = time.perf_counter()
        for _ in range(loads):
            load([], env=env)
        return (time.perf_counter() - started) * 1000 / loads


def run(spawns: int = 20, args: Sequence[str] = ("--model", "scripted")) -> StartupResult:
    samples: list[float] = []
    codes: list[int] = []
    for _ in range(spawns):
        server = Server.spawn(*args)
        try:
            response, t_read = server.initialize()
        finally:
            codes.append(server.close())
        if response.get("result", {}).get("protocolVersion") != 1:
            raise WireError(f"unexpected initialize answer: {response}")
        samples.append((t_read - server.t_spawn_ns) / 1e6)
    return StartupResult(samples, codes, time_no_config_file())


def main(argv: Sequence[str] | None = None) -> StartupResult:
    parser = argparse.ArgumentParser(prog="python -m bench.startup", description=__doc__)
    parser.add_argument("--spawns", type=int, default=20, help="number of fresh processes (default 20)")
    options = parser.parse_args(argv)
    result = run(options.spawns)
    print(f"startup: {len(result.samples_ms)} spawns, samples (ms): {', '.join(f'{s:.0f}' for s in result.samples_ms)}")
    if any(result.exit_codes):
        print(f"startup: WARNING non-zero exit codes after stdin EOF: {result.exit_codes}")
    print(format_table(result.figures()))
    return result


if __name__ == "__main__":
    main()
