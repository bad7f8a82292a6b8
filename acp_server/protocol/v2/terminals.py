"""Local commands as agent-owned display terminals on a v2 connection (ACP-V2.md §10, §20.4, §23 Q8/Q9).

v2 has no client terminals: every `run_command` runs locally (runtime/local_commands.py, a process group of its own)
and is shown as a terminal: the tool call's content anchors it (`{"type": "terminal", "terminalId"}`), a
`terminal_update` announces it (command, cwd, size, `capabilities.cancel`), each piece of output is a
`terminal_output_chunk` (independently base64), and its end is a `terminal_update` with `exitStatus` and the controls
cleared — before the turn's `idle` even when a cancel stops it, and even when the cleanup deadline seals the turn
before the command is dead (the seal then kills the group and sends the end; a process still being spawned then is
killed the moment it runs, and its end says so). `terminal/cancel` stops the process
group alone (SIGTERM, then SIGKILL), at once or, when it comes while the process is still being spawned, the moment it
runs: the command reports how it died and the tool call finishes as a failed command; the turn goes on.

Past the output limit the runner keeps the tail (what the model reads), and the client is resynced to it with an
`output` snapshot (§23 Q8): when the limit is first passed, whenever its bytes would hold twice the limit, and at the
end if more was dropped since, so it ends with exactly the tail kept; chunks append between. The terminal's end, as
sent (command, cwd, that tail, exit status), is kept in the turn's log, so a v2 replay shows it as one upsert (§5.3).
"""

from __future__ import annotations

import base64
import signal
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from anyio.abc import Process

from acp_server.agent.sessions.runs import RunContext
from acp_server.errors import ToolError
from acp_server.jsonrpc.connection import Connection
from acp_server.protocol.context import RequestContext
from acp_server.protocol.store_log import record_terminal_end
from acp_server.protocol.v2.cancels import not_running
from acp_server.protocol.v2.schema import CancelTerminalRequest
from acp_server.runtime.local_commands import OUTPUT_LIMIT, LocalCommandRunner, OutputTail
from acp_server.runtime.ports import CommandResult
from acp_server.runtime.processes import ProcessTable
from acp_server.runtime.sandbox import Sandbox, Unconfined

__all__ = ["TERMINAL_SIZE", "TerminalRunner", "terminal_cancel"]

# The size a terminal is announced with (§10 item 2). The command has no tty, so nothing sets a size for it: a
# program that asks assumes the VT100 / POSIX default of 80 columns by 24 rows, and the client renders at that.
TERMINAL_SIZE = {"cols": 80, "rows": 24}


class TerminalRunner:
    """The turn's `CommandRunner` on v2: a local runner whose commands are shown as display terminals."""

    def __init__(
        self,
        connection: Connection,
        run: RunContext,
        processes: ProcessTable,
        deadline: Callable[[], float],
        *,
        sandbox: Sandbox | Unconfined | None = None,
        roots: tuple[Path, ...] = (),
    ) -> None:
        """`sandbox` and `roots`: the local runner's confinement, as on v1."""
        self._connection = connection
        self._run = run
        self._processes = processes
        self._deadline = deadline
        self._sandbox = sandbox
        self._roots = roots

    def _message(self, update: dict[str, Any]) -> dict[str, Any]:
        # A subagent's command is shown in its parent's session (children never speak under their own id).
        session_id = self._run.parent_session_id or self._run.session_id
        return {"jsonrpc": "2.0", "method": "session/update", "params": {"sessionId": session_id, "update": update}}

    async def run(
        self,
        command: str,
        cwd: Path,
        timeout: float | None,
        on_terminal: Callable[[str], Awaitable[None]],
    ) -> CommandResult:
        run, connection = self._run, self._connection
        if isinstance(self._sandbox, Unconfined) and self._sandbox.refuse:
            raise ToolError(self._sandbox.reason)  # before any terminal is shown: nothing will run
        terminal_id = f"term_{uuid.uuid4().hex}"
        await on_terminal(terminal_id)  # the tool call's content anchors the terminal first
        announced = {
            "sessionUpdate": "terminal_update",
            "terminalId": terminal_id,
            "command": command,
            "cwd": str(cwd),
            "size": dict(TERMINAL_SIZE),
            "capabilities": {"cancel": {}},
        }
        await connection.send_fenced(self._message(announced), run)
        started: list[Process] = []
        stop_asked: list[bool] = []  # a `terminal/cancel` came; it may come before the process runs (§20.4)
        # `runner.run` has not returned: a terminal ended before its process started is then being spawned (the
        # spawn is shielded, so it completes), not one whose spawn failed or never began.
        spawning = [True]
        sealed: list[bool] = []  # `_seal` ended the terminal while the process was being spawned

        def stop() -> None:
            stop_asked.append(True)
            if started and started[0].returncode is None:
                connection.spawn(self._processes.terminate, started[0])

        def on_started(process: Process) -> None:
            started.append(process)
            if sealed:
                # The turn was sealed while this was being spawned, and its end already said SIGKILL: killed the
                # moment it runs, group and all, like a running one (a polite stop, bounded by the passed deadline,
                # would be SIGTERM alone, which a command may ignore and outlive the turn).
                self._processes.kill(process)
            elif stop_asked:  # cancelled while it was being spawned: it is stopped the moment it runs
                connection.spawn(self._processes.terminate, process)

        tail = OutputTail()  # what the runner keeps, and the model reads: the client is resynced to it
        synced = [0]  # `tail.dropped` when the client's bytes were last replaced by a snapshot

        async def snapshot() -> None:
            synced[0] = tail.dropped
            update = {"sessionUpdate": "terminal_update", "terminalId": terminal_id, "output": _data(tail.data)}
            await connection.send_fenced(self._message(update), run)

        async def output(piece: bytes) -> None:
            # `tail` holds the piece already. Past the limit the client gets the tail kept, at once and then each
            # time its bytes would hold twice the limit (so they stay bounded); between, chunks append to it.
            dropped = tail.dropped
            if dropped > synced[0] and (synced[0] == 0 or dropped - synced[0] >= OUTPUT_LIMIT):
                await snapshot()
                return
            chunk = {
                "sessionUpdate": "terminal_output_chunk",
                "terminalId": terminal_id,
                "data": base64.b64encode(piece).decode("ascii"),
            }
            await connection.send_fenced(self._message(chunk), run)

        runner = LocalCommandRunner(
            self._processes,
            self._deadline,
            self._sandbox,
            self._roots,
            on_output=output,
            on_started=on_started,
            output=tail,
        )

        def end() -> None:
            # The terminal's one final update. Synchronous, so a cancelled command's exit is queued before its turn's
            # idle, like every final update: at the command's end, or from `_seal` if the cleanup deadline sealed
            # the turn first. A group still running then (its stop was cut short) is killed, and says so.
            if run.terminal_ends.pop(terminal_id, None) is None:
                return
            if not started and spawning[0]:
                sealed.append(True)  # killed the moment it runs (`on_started`)
            killed = bool(sealed) or (bool(started) and started[0].returncode is None)
            if killed and started:
                self._processes.kill(started[0])
            if not run.fenced:
                exited = _exited(terminal_id, started, killed)
                status = exited["exitStatus"]  # what the client was sent, kept so a replay shows it (§5.3)
                record_terminal_end(
                    run, terminal_id, command, cwd, tail.data, status.get("exitCode"), status.get("signal")
                )
                connection.notify("session/update", self._message(exited)["params"])

        run.terminal_stops[terminal_id] = stop
        run.terminal_ends[terminal_id] = end
        try:
            result = await runner.run(command, cwd, timeout, on_terminal)
            if tail.dropped > synced[0]:
                await snapshot()  # the client ends with exactly the tail the model reads
            return result
        finally:
            spawning[0] = False
            run.terminal_stops.pop(terminal_id, None)
            end()


def _data(output: bytes | bytearray) -> dict[str, Any]:
    """A `TerminalOutput` snapshot: the bytes, base64."""
    return {"data": base64.b64encode(output).decode("ascii")}


def _exited(terminal_id: str, started: list[Process], killed: bool) -> dict[str, Any]:
    status: dict[str, Any] = {"signal": "SIGKILL"} if killed else {}
    code = started[0].returncode if started else None
    if code is not None and code < 0:
        try:
            status["signal"] = signal.Signals(-code).name
        except ValueError:
            status["signal"] = str(-code)
    elif code is not None:
        status["exitCode"] = code
    return {"sessionUpdate": "terminal_update", "terminalId": terminal_id, "exitStatus": status, "capabilities": None}


async def terminal_cancel(context: RequestContext, params: CancelTerminalRequest) -> dict[str, Any]:
    """`terminal/cancel`: `{}` on acceptance, then the process group is stopped (after the answer is queued)."""
    context.connection.session(params.session_id, even_if_lost=True)  # this connection's own sessions only: else -32002
    stop = context.agent.runs.terminal_stop(params.session_id, params.terminal_id)
    if stop is None:
        raise not_running("terminalId", f"terminal {params.terminal_id!r}")
    context.after.append(stop)
    return {}
