"""The busy-sessions curve as a picture: cancel latency and chunks/s against the number of sessions streaming.

People would rather look at a curve than read forty numbers. matplotlib is optional (`pip install 'acp-server[bench]'`):
without it `plot` writes nothing and says why, and the benchmarks still run.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

__all__ = ["plot_scale"]


def plot_scale(levels: Mapping[str, Sequence[Mapping[str, Any]]], path: Path) -> str:
    """Draw each provider's levels (bench.scale `Level.as_dict()`s) into a PNG at `path`; what was done, in words."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return "plot skipped: matplotlib is not installed (pip install 'acp-server[bench]')"
    drawn = {name: rows for name, rows in levels.items() if rows}
    if not drawn:
        return "plot skipped: no busy-session levels were measured"
    figure, (latency, throughput, cpu) = plt.subplots(1, 3, figsize=(15, 4.5))
    for name, rows in drawn.items():
        sessions = [row["sessions"] for row in rows]
        latency.plot(sessions, [row["cancel_p50_ms"] for row in rows], "o-", label=f"{name} p50")
        latency.plot(sessions, [row["cancel_p99_ms"] for row in rows], "s--", label=f"{name} p99")
        throughput.plot(sessions, [row["chunks_per_s"] for row in rows], "o-", label=f"{name} measured")
        ideal = [row["sessions"] * row["rate_per_session"] for row in rows]
        throughput.plot(sessions, ideal, ":", color="grey", label=f"{name}: every session at its rate")
        cpu.plot(sessions, [row["cpu_us_per_chunk"] for row in rows], "o-", label=name)
    latency.set(title="session/cancel -> cancelled", xlabel="busy sessions", ylabel="ms", xscale="log", yscale="log")
    throughput.set(title="chunks/s delivered", xlabel="busy sessions", ylabel="chunks/s", xscale="log", yscale="log")
    cpu.set(title="server CPU per chunk", xlabel="busy sessions", ylabel="µs", xscale="log")
    for axes in (latency, throughput, cpu):
        axes.grid(True, which="both", alpha=0.3)
        axes.legend(fontsize="small")
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=100)
    plt.close(figure)
    return f"plot written: {path}"
