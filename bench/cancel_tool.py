"""Stop latency with a tool running: from the `session/cancel` write to the read of the `cancelled` response.

`bench.cancel` times a turn parked inside the model; users mostly press Stop while a tool runs, where the cancel must
also unwind the tool, close its tool call (`failed`) and, for a command, kill the process group first
(docs/interrupts.md I5, bound `T_ack`). Two variants, one process and one session each, reused across iterations:

- `test_sleep`: the test-mode tool `{"tool": "test_sleep", "args": {"s": 30}}`; the clock starts once the
  `tool_started` probe has been read, so the tool body is really running;
- `run_command`: `sleep 30` as a local child process (the client offers no terminal) in the `bypass` mode. There is
  no probe for the process, so the benchmark waits for the tool call's `in_progress` update, then (from /proc) for
  the `sleep` itself in the command's process group, then a short settle: `in_progress` is sent before the process
  is spawned, and a cancel that lands while the server is still spawning it measures something else (and, at the
  time of writing, leaks the `sleep`). Afterwards it counts the command processes still alive, which must be none.

The clock starts just before the cancel is written (not after the write returns: on a busy machine the writer can
be preempted right after the write, while the server already answers, which would understate the latency).
Run alone: `python -m bench.cancel_tool [--iterations N]`.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from bench.report import Figure, format_table
from bench.wire import Server, WireError, percentile
from tests.support.harness import processes

__all__ = ["CancelToolResult", "main", "run"]

# docs/interrupts.md I5: cancel during a cooperative tool -> response within T_ack (250 ms); the p99 is held to it.
TARGET_P99_MS = 250.0
WARM_UP = 3
TOOL_SECONDS = 30
CHILD_WAIT_S = 5.0
# After the `sleep` shows up, how long the server gets to finish its side of the spawn before the cancel.
SPAWN_SETTLE_S = 0.02


@dataclass(frozen=True, slots=True)
class CancelToolResult:
    test_sleep_ms: list[float]  # cancel -> cancelled while `test_sleep 30` runs
    run_command_ms: list[float]  # cancel -> cancelled while a local `sleep 30` runs (empty when skipped)
    stats_after: list[dict[str, Any]]  # `_acp_server/stats` of each server once its iterations have finished
    processes_left: int = 0  # command processes (the `sleep`s) still alive after their cancels; must be 0

    def figures(self) -> list[Figure]:
        figures: list[Figure] = []
        for label, samples in (("test_sleep", self.test_sleep_ms), ("run_command sleep 30", self.run_command_ms)):
            if not samples:
                continue
            figures += [
                Figure(f"cancel -> cancelled, {label} running, median", statistics.median(samples), "ms"),
                Figure(
                    f"cancel -> cancelled, {label} running, p99",
                    percentile(samples, 99),
                    "ms",
                    "<=",
                    TARGET_P99_MS,
                ),
            ]
        if self.run_command_ms:
            figures.append(
                Figure("cancel run_command: processes left running", self.processes_left, "processes", "<=", 0)
            )
        return figures


def _prompt(session_id: str, script: list[dict[str, Any]]) -> dict[str, Any]:
    return {"sessionId": session_id, "prompt": [{"type": "text", "text": "bench"}], "_meta": {"scripted": script}}


def _tool_started(request_id: int) -> Callable[[dict[str, Any]], bool]:
    def matches(message: dict[str, Any]) -> bool:
        if message.get("method") != "_scripted/probe":
            return False
        params = message["params"]
        return bool(params.get("event") == "tool_started" and params.get("prompt") == request_id)

    return matches


def _in_progress(session_id: str) -> Callable[[dict[str, Any]], bool]:
    def matches(message: dict[str, Any]) -> bool:
        if message.get("method") != "session/update" or message["params"]["sessionId"] != session_id:
            return False
        update = message["params"]["update"]
        return bool(update.get("sessionUpdate") == "tool_call_update" and update.get("status") == "in_progress")

    return matches


def _children(pid: int) -> list[int]:
    """Live (not zombie) processes whose parent is `pid`."""
    return [p for p, ppid, _, state, _ in processes() if ppid == pid and state != "Z"]


def _live_in_groups(groups: set[int]) -> list[int]:
    return [p for p, _, pgid, state, _ in processes() if pgid in groups and state != "Z"]


def _wait_for_sleep(server: Server) -> int:
    """The process group of the running command, once its `sleep` runs (the shell is the group leader)."""
    deadline = time.monotonic() + CHILD_WAIT_S
    while True:
        table = processes()
        shells = {p for p, ppid, _, state, _ in table if ppid == server.pid and state != "Z"}
        if any(pgid in shells and name == "sleep" and state != "Z" for _, _, pgid, state, name in table):
            time.sleep(SPAWN_SETTLE_S)
            return next(iter(shells))
        if time.monotonic() > deadline:
            raise WireError(f"run_command started no `sleep` within {CHILD_WAIT_S} s")
        time.sleep(0.001)


def _check_cancelled(response: dict[str, Any], label: str, index: int) -> None:
    if response.get("result") != {"stopReason": "cancelled"}:
        raise WireError(f"{label} iteration {index}: expected cancelled, got {response}")


def _time_cancels(
    server: Server, script: list[dict[str, Any]], iterations: int, label: str, wait_running: Callable[[int, str], None]
) -> tuple[list[float], dict[str, Any]]:
    server.initialize()
    session_id = server.new_session()
    cancel = {"method": "session/cancel", "params": {"sessionId": session_id}}
    samples: list[float] = []
    for index in range(WARM_UP + iterations):
        request_id, _ = server.request("session/prompt", _prompt(session_id, script))
        wait_running(request_id, session_id)
        t_cancel = time.perf_counter_ns()
        server.send(cancel)
        response, t_read = server.response(request_id)
        _check_cancelled(response, label, index)
        if index >= WARM_UP:
            samples.append((t_read - t_cancel) / 1e6)
    return samples, server.call("_acp_server/stats", {})


def run(iterations: int = 50, commands: bool = True) -> CancelToolResult:
    """`iterations` timed cancels with `test_sleep` running, then (unless `commands` is false) with `run_command`."""
    stats: list[dict[str, Any]] = []
    with Server.spawn("--model", "scripted", "--test-mode") as server:
        sleeping = [{"tool": "test_sleep", "args": {"s": TOOL_SECONDS}}]

        def tool_started(request_id: int, session_id: str) -> None:
            server.wait_for(_tool_started(request_id))

        test_sleep_ms, after = _time_cancels(server, sleeping, iterations, "test_sleep", tool_started)
        stats.append(after)
    run_command_ms: list[float] = []
    left: list[int] = []
    if commands:
        groups: set[int] = set()
        with Server.spawn("--model", "scripted", "--test-mode", "--permission-mode", "bypass") as server:
            command = [{"tool": "run_command", "args": {"command": f"sleep {TOOL_SECONDS}"}}]

            def process_running(request_id: int, session_id: str) -> None:
                server.wait_for(_in_progress(session_id))
                groups.add(_wait_for_sleep(server))

            run_command_ms, after = _time_cancels(server, command, iterations, "run_command", process_running)
            stats.append(after)
            left = _live_in_groups(groups)
        for pid in left:  # ours: the benchmark's own commands, which the server failed to stop
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
    return CancelToolResult(test_sleep_ms, run_command_ms, stats, len(left))


def main(argv: Sequence[str] | None = None) -> CancelToolResult:
    parser = argparse.ArgumentParser(prog="python -m bench.cancel_tool", description=__doc__)
    parser.add_argument("--iterations", type=int, default=50, help="timed cancels per variant (default 50)")
    parser.add_argument("--no-commands", action="store_true", help="skip the run_command variant")
    options = parser.parse_args(argv)
    result = run(options.iterations, commands=not options.no_commands)
    for label, samples in (("test_sleep", result.test_sleep_ms), ("run_command", result.run_command_ms)):
        if samples:
            ordered = sorted(samples)
            print(
                f"cancel_tool: {label}: {len(ordered)} cancels; fastest {ordered[0]:.2f} ms; slowest five: "
                + ", ".join(f"{s:.2f}" for s in ordered[-5:])
                + " ms"
            )
    print(f"cancel_tool: server stats afterwards: {result.stats_after}")
    print(format_table(result.figures()))
    return result


if __name__ == "__main__":
    main()
