"""Spawn -> `initialize` response latency: how long an editor waits before it can open a session.

Each sample spawns a fresh `acp-server`, writes `initialize` at once (the pipe holds it until the server reads) and
stops the clock when the response line is read, so interpreter start-up and every import are included, as an editor
sees them; the server's resident memory (VmRSS) is read right then, before the provider warm-up that the answer
starts has done anything that counts. It also times, in this process, reading the settings when there is no config
file (every start-up does it), and runs one more server under `python -X importtime` to show where the time goes:
the import self-time of each package (acp_server by layer), largest first, with its share of the total. The import
times are inflated by the measurement itself; read them as proportions. The server's CPU time (all its threads, from
/proc) is read with its memory: on a busy machine the wall time mostly measures the wait for a core, so compare CPU
figures across changes. Both are read a moment after the answer, when the server may have begun loading its
deferred side (protocol/deferred.py), so they lean high by that moment's work. `--protocol 2` opens every connection
as an ACP v2 client (its figures are named `v2 startup: ...`; the settings and import figures do not depend on the
version and are left to the v1 run). Each spawn then sends `session/new` as soon as the answer is read, as editors
do, and times its answer from the spawn too (`first session/new`), with the CPU time then: the deferred side loads in
between. Run alone: `python -m bench.startup [--spawns N] [--breakdown N] [--protocol 2]`.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from bench.report import Figure, format_table, versioned
from bench.wire import PROTOCOLS, Server, WireError, percentile, process_cpu_ns
from tests.support.harness import isolated_env

__all__ = ["StartupResult", "main", "run"]

TARGET_MEDIAN_MS = 150.0
TARGET_RSS_MB = 35.0  # resident after `initialize`, before any provider warm-up
TARGET_NO_CONFIG_MS = 5.0  # finding no config file must cost a start-up almost nothing
INITIALIZE = b'{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":1,"clientCapabilities":{}}}\n'
_IMPORT_LINE = re.compile(r"import time:\s+(\d+) \|\s+\d+ \| (\s*)(\S+)")


@dataclass(frozen=True, slots=True)
class StartupResult:
    samples_ms: list[float]
    exit_codes: list[int]
    no_config_ms: float | None = None  # settings read with no config file, per start-up
    rss_mb: list[float] = field(default_factory=list)  # per spawn, when the answer was read
    cpu_ms: list[float] = field(default_factory=list)  # per spawn, the server's CPU time when the answer was read
    # (package, self-time ms) of one `-X importtime` start-up, largest first
    imports: list[tuple[str, float]] = field(default_factory=list)
    protocol: int = 1
    # per spawn: spawn -> the answer to a `session/new` sent as soon as the `initialize` answer was read (what an
    # editor does), and the server's CPU time then: the deferred side (protocol/deferred.py) loads in between
    first_new_ms: list[float] = field(default_factory=list)
    first_new_cpu_ms: list[float] = field(default_factory=list)

    @property
    def median_ms(self) -> float:
        return statistics.median(self.samples_ms)

    @property
    def min_ms(self) -> float:
        return min(self.samples_ms)

    @property
    def rss_median_mb(self) -> float:
        return statistics.median(self.rss_mb)

    @property
    def p90_ms(self) -> float:
        return percentile(self.samples_ms, 90)

    def figures(self) -> list[Figure]:
        def name(text: str) -> str:
            return versioned(text, self.protocol)

        return [
            Figure(name("startup: spawn -> initialize, median"), self.median_ms, "ms", "<=", TARGET_MEDIAN_MS),
            Figure(name("startup: min"), self.min_ms, "ms"),
            Figure(name("startup: p90"), self.p90_ms, "ms"),
            *(
                [Figure(name("startup: RSS after initialize, median"), self.rss_median_mb, "MB", "<=", TARGET_RSS_MB)]
                if self.rss_mb
                else []
            ),
            *(
                [Figure(name("startup: CPU to initialize, median"), statistics.median(self.cpu_ms), "ms")]
                if self.cpu_ms
                else []
            ),
            *(
                [
                    Figure(
                        name("startup: spawn -> first session/new, median"), statistics.median(self.first_new_ms), "ms"
                    ),
                    Figure(
                        name("startup: CPU to first session/new, median"),
                        statistics.median(self.first_new_cpu_ms),
                        "ms",
                    ),
                ]
                if self.first_new_ms
                else []
            ),
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


def import_breakdown(args: Sequence[str] = ("--model", "scripted")) -> list[tuple[str, float]]:
    """Import self-time per package (acp_server per layer) of one start-up to the `initialize` answer, in ms.

    Only what was imported before the answer was read counts: once it is out, the server goes on to load its deferred
    side (protocol/deferred.py), which is no part of start-up. stderr goes to a file, whose size when the answer is
    read marks where start-up's lines end."""
    command = [sys.executable, "-X", "importtime", "-m", "acp_server", *args]
    env = {**os.environ, **isolated_env()}
    with tempfile.TemporaryFile() as stderr:
        process = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=stderr, env=env)
        assert process.stdin is not None and process.stdout is not None
        try:
            process.stdin.write(INITIALIZE)
            process.stdin.flush()
            answer = process.stdout.readline()
            boundary = os.fstat(stderr.fileno()).st_size
        finally:
            process.kill()
            process.wait(timeout=60)
            process.stdin.close()
            process.stdout.close()
        stderr.seek(0)
        text = stderr.read(boundary).decode(errors="replace")
    if b'"protocolVersion":1' not in answer:
        raise WireError(f"no initialize answer under -X importtime: {text[-2000:]!r}")
    totals: Counter[str] = Counter()
    for line in text.splitlines():
        match = _IMPORT_LINE.match(line)
        if match:
            parts = match.group(3).split(".")
            totals[".".join(parts[:2]) if parts[0] == "acp_server" else parts[0]] += int(match.group(1))
    return [(name, us / 1000) for name, us in totals.most_common()]


def format_breakdown(imports: Sequence[tuple[str, float]], top: int = 25) -> str:
    total = sum(ms for _, ms in imports) or 1.0
    lines = [f"import self-time by package (-X importtime, one start-up; total {total:.0f} ms):"]
    lines += [f"  {ms:7.1f} ms {100 * ms / total:5.1f}%  {name}" for name, ms in imports[:top]]
    ours = sum(ms for name, ms in imports if name.startswith("acp_server"))
    lines.append(f"  acp_server itself: {ours:.1f} ms ({100 * ours / total:.0f}%)")
    return "\n".join(lines)


def run(
    spawns: int = 20, args: Sequence[str] = ("--model", "scripted"), breakdown: bool = True, protocol: int = 1
) -> StartupResult:
    """`spawns` fresh servers, each opened in `protocol`; on v2 only the spawn and RSS figures (the rest is v1's)."""
    samples: list[float] = []
    codes: list[int] = []
    rss: list[float] = []
    cpu: list[float] = []
    first_new: list[float] = []
    first_new_cpu: list[float] = []
    for _ in range(spawns):
        server = Server.spawn(*args)
        try:
            _, t_read = server.initialize(protocol)  # a WireError unless the server agreed on `protocol`
            rss.append(server.rss_kb() / 1024)
            cpu.append(process_cpu_ns(server.pid) / 1e6)
            params = {"cwd": "/tmp", "mcpServers": []} if protocol == 1 else {"cwd": "/tmp"}
            response, t_new = server.response(server.request("session/new", params)[0])
            if "sessionId" not in response.get("result", {}):
                raise WireError(f"session/new failed: {response}")
            first_new.append((t_new - server.t_spawn_ns) / 1e6)
            first_new_cpu.append(process_cpu_ns(server.pid) / 1e6)
        finally:
            codes.append(server.close())
        samples.append((t_read - server.t_spawn_ns) / 1e6)
    if protocol != 1:
        return StartupResult(
            samples, codes, None, rss, cpu, protocol=protocol, first_new_ms=first_new, first_new_cpu_ms=first_new_cpu
        )
    imports = import_breakdown(args) if breakdown else []
    return StartupResult(
        samples, codes, time_no_config_file(), rss, cpu, imports, first_new_ms=first_new, first_new_cpu_ms=first_new_cpu
    )


def main(argv: Sequence[str] | None = None) -> StartupResult:
    parser = argparse.ArgumentParser(prog="python -m bench.startup", description=__doc__)
    parser.add_argument("--spawns", type=int, default=20, help="number of fresh processes (default 20)")
    parser.add_argument("--breakdown", type=int, default=25, help="packages shown in the import breakdown (0: none)")
    parser.add_argument("--protocol", type=int, choices=PROTOCOLS, default=1, help="ACP version spoken (default 1)")
    options = parser.parse_args(argv)
    result = run(options.spawns, breakdown=options.breakdown > 0, protocol=options.protocol)
    samples = ", ".join(f"{s:.0f}" for s in result.samples_ms)
    print(f"{versioned('startup', result.protocol)}: {len(result.samples_ms)} spawns, samples (ms): {samples}")
    if result.imports:
        print(format_breakdown(result.imports, options.breakdown))
    if any(result.exit_codes):
        print(f"startup: WARNING non-zero exit codes after stdin EOF: {result.exit_codes}")
    print(format_table(result.figures()))
    return result


if __name__ == "__main__":
    main()
