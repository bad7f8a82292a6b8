"""Drive `acp-server` with the official ACP Python SDK's client side, through a tee that checks the wire.

The raw-line harness (`tests/support/harness.py`) writes exact bytes; this module drives the ordinary flows the way an
editor built on the SDK (`agent-client-protocol`, import name `acp`) does, so a mismatch between what the server
writes and what the SDK can parse shows up as a test failure. Every line crosses a tee:

- server stdout -> `WireValidator.server_wrote` (schema per method, JSON-RPC framing) -> the SDK's StreamReader;
- SDK writes -> an `os.pipe` -> `WireValidator.client_sent` (so responses are checked against the right
  `...Response` type) -> the server's stdin.

Both directions are kept in one log of `tests.support.harness.Entry` in wire order, so the common checks C1-C4 of
docs/interrupts.md (`tests.support.harness.check_wire`) run over SDK-driven sessions. `RecordingClient` is the editor
side: it records every `session/update` and extension notification (the `_scripted/probe`s) in order, answers
`fs/read_text_file` / `fs/write_text_file` from an in-memory dict and `session/request_permission` with a
configurable option (or a per-call policy), and can hold any client method open until the test releases it. Given
`terminals=`, it also plays editor terminals: `FakeTerminal`s that execute nothing, whose output, exit status,
duration and answer delays come from a `TerminalScript` chosen per command line (`simulate_shell` understands just
`echo`, `sleep` and `exit`), so terminal tests never run a process on this machine. `spawn_sdk_agent` is the
async context manager that starts it all and, at the end, closes stdin and fails on a bad exit, a schema
violation, a C1-C4 problem, an SDK-side error log, or a red flag on the server's stderr.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import math
import os
import shlex
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

import orjson
from acp import RequestError
from acp.client.connection import ClientSideConnection
from acp.interfaces import Agent
from acp.schema import (
    AgentMessageChunk,
    AgentPlanContentUpdate,
    AgentPlanRemovedUpdate,
    AgentPlanUpdate,
    AgentThoughtChunk,
    AllowedOutcome,
    AvailableCommandsUpdate,
    ConfigOptionUpdate,
    CreateElicitationResponse,
    CreateTerminalResponse,
    CurrentModeUpdate,
    DeniedOutcome,
    ElicitationMode,
    EnvVariable,
    KillTerminalResponse,
    PermissionOption,
    ReadTextFileResponse,
    ReleaseTerminalResponse,
    RequestPermissionResponse,
    SessionInfoUpdate,
    TerminalExitStatus,
    TerminalOutputResponse,
    TextContentBlock,
    ToolCallProgress,
    ToolCallStart,
    ToolCallUpdate,
    UsageUpdate,
    UserMessageChunk,
    WaitForTerminalExitResponse,
    WriteTextFileResponse,
)

from tests.support.harness import (
    STDERR_RED_FLAGS,
    T_WAIT,
    Entry,
    StdioTransport,
    Transport,
    check_wire,
    scaled,
)
from tests.support.wire_schema import WireValidator

__all__ = [
    "EXIT_TIMEOUT",
    "NEVER",
    "ClientCall",
    "FakeTerminal",
    "Hold",
    "PermissionPolicy",
    "RecordedUpdate",
    "RecordingClient",
    "SdkAgent",
    "SessionUpdate",
    "TerminalScript",
    "WireTap",
    "simulate_shell",
    "spawn_sdk_agent",
]

_T = TypeVar("_T")

# stdin EOF -> process exit, as the brief for these tests sets it (the harness's T_EXIT is 2.5 s with GRACE 0.5).
EXIT_TIMEOUT = scaled(3.0)
# Lines up to 64 MiB are protocol (docs/acp.md); the readers get room for more so an oversized line is seen, not fatal.
LINE_LIMIT = 256 * 1024 * 1024
RED_FLAGS = tuple(
    dict.fromkeys(
        (
            "Task exception was never retrieved",
            "Attempted to exit cancel scope in a different task",
            "was never awaited",
            *STDERR_RED_FLAGS,
        )
    )
)

SessionUpdate = (
    UserMessageChunk
    | AgentMessageChunk
    | AgentThoughtChunk
    | ToolCallStart
    | ToolCallProgress
    | AgentPlanUpdate
    | AgentPlanContentUpdate
    | AgentPlanRemovedUpdate
    | AvailableCommandsUpdate
    | CurrentModeUpdate
    | ConfigOptionUpdate
    | SessionInfoUpdate
    | UsageUpdate
)


@dataclass(frozen=True)
class RecordedUpdate:
    seq: int  # arrival order among everything the client recorded
    session_id: str
    update: SessionUpdate
    meta: dict[str, Any]


@dataclass(frozen=True)
class ClientCall:
    """An agent-to-client request as the SDK dispatched it to `RecordingClient`."""

    seq: int
    method: str  # the ACP method, e.g. "fs/read_text_file"
    session_id: str | None
    params: dict[str, Any]


@dataclass
class Hold:
    """Holds one client method open: each call waits until `release()`; `entered` is set when a call arrives."""

    method: str
    entered: asyncio.Event = field(default_factory=asyncio.Event)
    calls: int = 0
    answered: int = 0  # calls that went on to answer after the release
    interrupted: int = 0  # calls the SDK cancelled while they were held (e.g. `conn.close()`)
    _released: asyncio.Event = field(default_factory=asyncio.Event)

    def release(self) -> None:
        self._released.set()

    @property
    def released(self) -> bool:
        return self._released.is_set()

    async def _wait(self) -> None:
        self.calls += 1
        self.entered.set()
        try:
            await self._released.wait()
        except asyncio.CancelledError:
            self.interrupted += 1
            raise
        self.answered += 1


# A delay or duration that never ends: a terminal that only a kill stops, an answer that never comes.
NEVER = math.inf

# Given the permission request's tool call and options: the optionId to select, or None for the `cancelled` outcome.
PermissionPolicy = Callable[[ToolCallUpdate, list[PermissionOption]], str | None]


@dataclass(frozen=True)
class TerminalScript:
    """How one fake editor terminal behaves. Nothing is executed: output, exit status and timing are made up."""

    output: str = ""
    exit_code: int | None = 0
    signal: str | None = None
    runs_for: float = 0.0  # seconds until the command ends on its own; NEVER: only a kill (or release) ends it
    exits_on_kill: bool = True  # False: a kill or release does not end it (with NEVER, wait_for_exit never answers)
    truncated: bool = False
    create_delay: float = 0.0  # seconds between starting the command and answering `terminal/create` (its id)
    kill_delay: float = 0.0  # seconds before `terminal/kill` is answered; NEVER: it is not answered at all
    release_delay: float = 0.0  # the same for `terminal/release`


def simulate_shell(command_line: str) -> TerminalScript:
    """A pretend `/bin/sh -c` that understands `echo WORDS`, `sleep SECONDS` and `exit CODE`, joined by `;`.

    Anything else "fails" with 127 and a note in the output; nothing is ever run.
    """
    output: list[str] = []
    runs_for = 0.0
    code = 0
    for part in command_line.split(";"):
        words = shlex.split(part)
        if not words:
            continue
        name, *rest = words
        if name == "echo":
            output.append(" ".join(rest) + "\n")
        elif name == "sleep":
            runs_for += float(rest[0]) if rest else 0.0
        elif name == "exit":
            code = int(rest[0]) if rest else 0
            break
        else:
            output.append(f"sh: {name}: not simulated\n")
            code = 127
    return TerminalScript(output="".join(output), exit_code=code, runs_for=runs_for)


@dataclass
class FakeTerminal:
    """One editor terminal `RecordingClient` made up for a `terminal/create`."""

    terminal_id: str
    session_id: str
    command: str
    args: list[str]
    cwd: str | None
    script: TerminalScript
    # Every terminal/* method called for this terminal, in arrival order, its terminal/create first.
    methods: list[str] = field(default_factory=lambda: ["terminal/create"])
    exit_status: TerminalExitStatus | None = None
    _exited: asyncio.Event = field(default_factory=asyncio.Event)
    _timer: asyncio.TimerHandle | None = None

    @property
    def command_line(self) -> str:
        """The line the server asked to run (`/bin/sh -c LINE`), or the bare command."""
        if self.command == "/bin/sh" and len(self.args) == 2 and self.args[0] == "-c":
            return self.args[1]
        return shlex.join([self.command, *self.args])

    @property
    def exited(self) -> bool:
        return self._exited.is_set()

    def count(self, method: str) -> int:
        return self.methods.count(method)

    def _start(self) -> None:
        if math.isfinite(self.script.runs_for):
            status = TerminalExitStatus(exit_code=self.script.exit_code, signal=self.script.signal)
            self._timer = asyncio.get_running_loop().call_later(self.script.runs_for, self._end, status)

    def _stop(self) -> None:
        """A kill or a release: the command dies, unless the script says it shrugs that off."""
        if self.script.exits_on_kill:
            self._end(TerminalExitStatus(exit_code=None, signal="SIGKILL"))

    def _end(self, status: TerminalExitStatus) -> None:
        if self._timer is not None:
            self._timer.cancel()
        if not self._exited.is_set():
            self.exit_status = status
            self._exited.set()


class RecordingClient:
    """The editor side of the SDK connection (it satisfies `acp.interfaces.Client`)."""

    def __init__(
        self,
        files: dict[str, str] | None = None,
        permission_option: str | None = "allow",
        *,
        permission_policy: PermissionPolicy | None = None,
        terminals: Callable[[str], TerminalScript] | None = None,
    ) -> None:
        self.files: dict[str, str] = dict(files or {})
        # The optionId `request_permission` selects; None answers the `cancelled` outcome. A policy, when given,
        # decides per request instead.
        self.permission_option = permission_option
        self.permission_policy = permission_policy
        # Given the command line, how a new terminal behaves; None refuses terminal/* as "method not found".
        self.terminal_scripts = terminals
        self.terminals: dict[str, FakeTerminal] = {}
        self._terminal_ids = itertools.count(1)
        self.updates: list[RecordedUpdate] = []
        self.ext_notifications: list[tuple[int, str, dict[str, Any]]] = []
        self.calls: list[ClientCall] = []
        self.agent: Agent | None = None
        self._holds: dict[str, Hold] = {}
        self._seq = itertools.count()
        self._changed = asyncio.Event()

    # --- test controls ---

    def hold(self, method: str) -> Hold:
        """Make every call of `method` (an ACP method name such as "fs/read_text_file") wait until released."""
        hold = self._holds[method] = Hold(method)
        return hold

    def unhold(self, method: str) -> None:
        """Calls of `method` that arrive from now on are answered at once (held ones stay held until released)."""
        self._holds.pop(method, None)

    def mark(self) -> int:
        """A position in the record: pass it as `since` to look only at what arrives afterwards."""
        return self._next_seq()

    async def wait_for_probe(self, event: str, timeout: float = T_WAIT, since: int = 0, **match: Any) -> dict[str, Any]:
        """The first `_scripted/probe` (at or after `since`) with this event whose params contain `match`."""
        return await self._wait(lambda: next(iter(self.probes(event, since=since, **match)), None), timeout)

    async def wait_for_call(self, method: str, timeout: float = T_WAIT, since: int = 0) -> ClientCall:
        return await self._wait(
            lambda: next((c for c in self.calls if c.method == method and c.seq >= since), None), timeout
        )

    # --- queries ---

    def probes(self, event: str | None = None, since: int = 0, **match: Any) -> list[dict[str, Any]]:
        return [
            params
            for seq, name, params in self.ext_notifications
            if seq >= since
            and name == "scripted/probe"
            and (event is None or params.get("event") == event)
            and all(params.get(k) == v for k, v in match.items())
        ]

    def session_updates(self, session_id: str | None = None, since: int = 0) -> list[SessionUpdate]:
        return [r.update for r in self.updates if r.seq >= since and (session_id is None or r.session_id == session_id)]

    def texts(self, session_id: str, since: int = 0) -> list[str]:
        """The text of every agent_message_chunk of the session, in order."""
        return [_text(u) for u in self.session_updates(session_id, since) if isinstance(u, AgentMessageChunk)]

    def thoughts(self, session_id: str, since: int = 0) -> list[str]:
        return [_text(u) for u in self.session_updates(session_id, since) if isinstance(u, AgentThoughtChunk)]

    # --- acp.interfaces.Client ---

    def on_connect(self, conn: Agent) -> None:
        self.agent = conn

    async def session_update(self, session_id: str, update: SessionUpdate, **kwargs: Any) -> None:
        # Recorded before any await: the SDK starts one task per notification in wire order, so this keeps order.
        self.updates.append(RecordedUpdate(self._next_seq(), session_id, update, dict(kwargs)))
        self._notify()

    async def request_permission(
        self, session_id: str, tool_call: ToolCallUpdate, options: list[PermissionOption], **kwargs: Any
    ) -> RequestPermissionResponse:
        await self._called(
            "session/request_permission",
            session_id,
            {"toolCall": tool_call, "options": options, **kwargs},
        )
        choice = (
            self.permission_option if self.permission_policy is None else self.permission_policy(tool_call, options)
        )
        if choice is None:
            return RequestPermissionResponse(outcome=DeniedOutcome(outcome="cancelled"))
        return RequestPermissionResponse(outcome=AllowedOutcome(outcome="selected", option_id=choice))

    async def read_text_file(
        self, session_id: str, path: str, line: int | None = None, limit: int | None = None, **kwargs: Any
    ) -> ReadTextFileResponse:
        await self._called("fs/read_text_file", session_id, {"path": path, "line": line, "limit": limit, **kwargs})
        if path not in self.files:
            raise RequestError.resource_not_found(path)
        text = self.files[path]
        if line is not None or limit is not None:
            lines = text.splitlines(keepends=True)
            start = max((line or 1) - 1, 0)
            text = "".join(lines[start : None if limit is None else start + limit])
        return ReadTextFileResponse(content=text)

    async def write_text_file(
        self, session_id: str, path: str, content: str, **kwargs: Any
    ) -> WriteTextFileResponse | None:
        await self._called("fs/write_text_file", session_id, {"path": path, "content": content, **kwargs})
        self.files[path] = content
        return WriteTextFileResponse()

    # Terminals are played by `FakeTerminal`s when the client was given `terminals=`; otherwise they are refused the
    # JSON-RPC way, like elicitation and client extension methods (the call is still recorded).

    async def create_terminal(  # noqa: PLR0917 - the signature is acp.interfaces.Client's
        self,
        session_id: str,
        command: str,
        args: list[str] | None = None,
        env: list[EnvVariable] | None = None,
        cwd: str | None = None,
        output_byte_limit: int | None = None,
        **kwargs: Any,
    ) -> CreateTerminalResponse:
        params = {"command": command, "args": args, "cwd": cwd, "outputByteLimit": output_byte_limit}
        await self._called("terminal/create", session_id, params)
        if self.terminal_scripts is None:
            raise RequestError.method_not_found("terminal/create")
        argv = list(args or [])
        terminal = FakeTerminal(f"term-{next(self._terminal_ids)}", session_id, command, argv, cwd, TerminalScript())
        terminal.script = self.terminal_scripts(terminal.command_line)
        self.terminals[terminal.terminal_id] = terminal
        terminal._start()
        self._notify()
        await _answer_after(terminal.script.create_delay)
        return CreateTerminalResponse(terminal_id=terminal.terminal_id)

    async def terminal_output(self, session_id: str, terminal_id: str, **kwargs: Any) -> TerminalOutputResponse:
        terminal = await self._terminal_call("terminal/output", session_id, terminal_id)
        return TerminalOutputResponse(
            output=terminal.script.output, truncated=terminal.script.truncated, exit_status=terminal.exit_status
        )

    async def release_terminal(
        self, session_id: str, terminal_id: str, **kwargs: Any
    ) -> ReleaseTerminalResponse | None:
        terminal = await self._terminal_call("terminal/release", session_id, terminal_id)
        terminal._stop()
        await _answer_after(terminal.script.release_delay)
        return ReleaseTerminalResponse()

    async def wait_for_terminal_exit(
        self, session_id: str, terminal_id: str, **kwargs: Any
    ) -> WaitForTerminalExitResponse:
        terminal = await self._terminal_call("terminal/wait_for_exit", session_id, terminal_id)
        await terminal._exited.wait()
        status = terminal.exit_status or TerminalExitStatus()
        return WaitForTerminalExitResponse(exit_code=status.exit_code, signal=status.signal)

    async def kill_terminal(self, session_id: str, terminal_id: str, **kwargs: Any) -> KillTerminalResponse | None:
        terminal = await self._terminal_call("terminal/kill", session_id, terminal_id)
        terminal._stop()
        await _answer_after(terminal.script.kill_delay)
        return KillTerminalResponse()

    async def create_elicitation(self, message: str, mode: ElicitationMode, **kwargs: Any) -> CreateElicitationResponse:
        await self._called("elicitation/create", None, {"message": message})
        raise RequestError.method_not_found("elicitation/create")

    async def complete_elicitation(self, elicitation_id: str, **kwargs: Any) -> None:
        self.ext_notifications.append((self._next_seq(), "elicitation/complete", {"elicitationId": elicitation_id}))
        self._notify()

    async def ext_method(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        await self._called(f"_{method}", params.get("sessionId"), params)
        raise RequestError.method_not_found(f"_{method}")

    async def ext_notification(self, method: str, params: dict[str, Any]) -> None:
        # `method` arrives without its leading underscore: "_scripted/probe" is "scripted/probe".
        self.ext_notifications.append((self._next_seq(), method, params))
        self._notify()

    # --- internals ---

    async def _terminal_call(self, method: str, session_id: str, terminal_id: str) -> FakeTerminal:
        """Record a terminal/* call against its terminal (before any hold), then let a hold keep it waiting."""
        terminal = self.terminals.get(terminal_id)
        if terminal is not None:
            terminal.methods.append(method)
        await self._called(method, session_id, {"terminalId": terminal_id})
        if self.terminal_scripts is None:
            raise RequestError.method_not_found(method)
        if terminal is None or terminal.session_id != session_id:
            raise RequestError.invalid_params({"terminalId": f"no terminal {terminal_id!r} in this session"})
        return terminal

    async def _called(self, method: str, session_id: str | None, params: dict[str, Any]) -> None:
        self.calls.append(ClientCall(self._next_seq(), method, session_id, params))
        self._notify()
        hold = self._holds.get(method)
        if hold is not None:
            await hold._wait()

    def _next_seq(self) -> int:
        return next(self._seq)

    def _notify(self) -> None:
        self._changed.set()
        self._changed = asyncio.Event()

    async def _wait(self, find: Callable[[], _T | None], timeout: float) -> _T:
        deadline = time.monotonic() + timeout
        while True:
            changed = self._changed
            found = find()
            if found is not None:
                return found
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError(
                    f"nothing matching within {timeout} s; last probes: {self.ext_notifications[-3:]}, "
                    f"last calls: {self.calls[-3:]}"
                )
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(changed.wait(), remaining)


async def _answer_after(delay: float) -> None:
    """Wait before answering; NEVER waits until the SDK cancels the handler (when the connection closes)."""
    if delay == NEVER:
        await asyncio.Event().wait()
    elif delay > 0:
        await asyncio.sleep(delay)


def _text(update: AgentMessageChunk | AgentThoughtChunk) -> str:
    content = update.content
    assert isinstance(content, TextContentBlock), f"expected text content, got {content!r}"
    return content.text


class _SdkLogRecorder(logging.Handler):
    """Collects the ERROR records the SDK (and asyncio, in this process) log while an agent is connected.

    The SDK logs and swallows what it cannot handle (a notification its router does not know, a message that does
    not parse into its models), so without this a server message the SDK rejects would go unnoticed.
    """

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


def _is_unrouted_cancel_request(record: logging.LogRecord) -> bool:
    """The SDK 0.12.1 has no handler for `$/cancel_request` (ACP lets a receiver ignore `$/` notifications); it
    logs a -32601 at ERROR and goes on. That is the SDK's documented limitation, not a server fault."""
    exc = record.exc_info[1] if record.exc_info else None
    return "method=$/cancel_request" in record.getMessage() and isinstance(exc, RequestError) and exc.code == -32601


def _is_answer_after_own_close(record: logging.LogRecord, closed_at: float) -> bool:
    """After the test closed the client's write side, the server may still send requests (terminal/kill and
    terminal/release are sent after EOF, best effort); the SDK then fails to write its answers to the pipe it closed
    itself and logs that. The client's own doing, not a server fault."""
    exc = record.exc_info[1] if record.exc_info else None
    chain: list[BaseException] = []
    while exc is not None and exc not in chain:
        chain.append(exc)
        exc = exc.__cause__ or exc.__context__
    return record.created >= closed_at and any(isinstance(e, (ConnectionError, BrokenPipeError)) for e in chain)


@dataclass
class WireTap:
    """Both directions of the wire, in order, as the test process saw them."""

    validator: WireValidator = field(default_factory=WireValidator)
    log: list[Entry] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    stderr_text: str = ""
    _seq: itertools.count[int] = field(default_factory=itertools.count)

    def record(self, direction: str, message: Any, raw: bytes) -> Entry:
        entry = Entry(next(self._seq), time.monotonic(), direction, message, raw)
        self.log.append(entry)
        return entry

    def server_messages(self, method: str | None = None) -> list[dict[str, Any]]:
        return [
            e.msg
            for e in self.log
            if e.dir == "out" and isinstance(e.msg, dict) and (method is None or e.msg.get("method") == method)
        ]

    def client_messages(self, method: str | None = None) -> list[dict[str, Any]]:
        return [
            e.msg
            for e in self.log
            if e.dir == "in" and isinstance(e.msg, dict) and (method is None or e.msg.get("method") == method)
        ]

    def response_entry(self, method: str, session_id: str | None = None, nth: int = -1) -> Entry:
        """The server's response to the `nth` client request of `method` (optionally for one session)."""
        requests = [
            m
            for m in self.client_messages(method)
            if "id" in m and (session_id is None or (m.get("params") or {}).get("sessionId") == session_id)
        ]
        request_id = requests[nth]["id"]
        return next(
            e
            for e in self.log
            if e.dir == "out" and isinstance(e.msg, dict) and "method" not in e.msg and e.msg.get("id") == request_id
        )


@dataclass
class SdkAgent:
    """A running `acp-server` with an SDK `ClientSideConnection` attached through the tee."""

    conn: ClientSideConnection
    client: RecordingClient
    process: asyncio.subprocess.Process
    wire: WireTap
    _sdk_writer: asyncio.StreamWriter
    _pumps: list[asyncio.Task[None]]
    _stderr_reader: asyncio.Task[bytes]
    _log_recorder: _SdkLogRecorder
    _closed: bool = False

    async def stats(self) -> dict[str, Any]:
        """`_acp_server/stats`, sent by the SDK's `ext_method`."""
        return await self.conn.ext_method("acp_server/stats", {})

    async def close(self) -> list[str]:
        """Close stdin (through the SDK's own pipe), wait for the exit, then close the SDK connection.

        Returns every problem found: exit status and time, schema violations, C1-C4, SDK error logs, stderr flags.
        """
        if self._closed:
            return []
        self._closed = True
        wire = self.wire
        problems: list[str] = []
        started = time.monotonic()
        closed_at = time.time()  # the log records' clock
        self._sdk_writer.close()  # EOF on the pipe: the pump closes the server's stdin
        try:
            code: int | None = await asyncio.wait_for(self.process.wait(), EXIT_TIMEOUT)
        except TimeoutError:
            code = None
            problems.append(f"the server did not exit within {EXIT_TIMEOUT} s of stdin EOF")
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, 9)
            await self.process.wait()
        took = time.monotonic() - started
        if code is not None and code != 0:
            problems.append(f"exit status {code} after stdin EOF")
        if code is not None and took > EXIT_TIMEOUT:
            problems.append(f"exit took {took:.2f} s > {EXIT_TIMEOUT} s")
        for pump in self._pumps:
            try:
                await asyncio.wait_for(pump, T_WAIT)
            except Exception as exc:
                problems.append(f"pump {pump.get_name()} failed: {exc!r}")
        # The SDK re-raises a failed write of its own answers to the pipe it already closed (see
        # _is_answer_after_own_close); nothing of the server's.
        with contextlib.suppress(ConnectionError):
            await self.conn.close()
        wire.stderr_text = (await asyncio.wait_for(self._stderr_reader, T_WAIT)).decode(errors="replace")
        logging.getLogger().removeHandler(self._log_recorder)

        problems += wire.problems
        # C1-C4 and schema violations over the whole log, and the stderr red flags (check_wire only reads these).
        problems += check_wire(wire)
        for flag in RED_FLAGS:
            if flag in wire.stderr_text and f"C6: stderr says {flag!r}" not in problems:
                problems.append(f"stderr says {flag!r}")
        for record in self._log_recorder.records:
            if not _is_unrouted_cancel_request(record) and not _is_answer_after_own_close(record, closed_at):
                logged = record.exc_info[1] if record.exc_info else None
                problems.append(f"the SDK logged an error: {record.getMessage()} ({logged!r})")
        return problems

    @property
    def sdk_ignored_cancel_requests(self) -> int:
        """How many `$/cancel_request`s the SDK received and dropped (it has no handler for them)."""
        return sum(_is_unrouted_cancel_request(r) for r in self._log_recorder.records)

    def kill(self) -> None:
        if self.process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, 9)


async def _start(
    args: tuple[str, ...],
    client: RecordingClient,
    env: dict[str, str] | None,
    cwd: str | None,
    transport_kind: type[Transport] = StdioTransport,
) -> SdkAgent:
    loop = asyncio.get_running_loop()
    transport = await transport_kind.start(args, env=env, cwd=cwd, line_limit=LINE_LIMIT)
    process = transport.process
    assert process.stderr is not None
    wire = WireTap()

    # SDK -> pipe -> tee -> server stdin. The SDK needs a real asyncio.StreamWriter; a pipe gives it one.
    read_fd, write_fd = os.pipe()
    from_sdk = asyncio.StreamReader(limit=LINE_LIMIT)
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(from_sdk), os.fdopen(read_fd, "rb", 0))
    write_transport, write_protocol = await loop.connect_write_pipe(
        asyncio.streams.FlowControlMixin, os.fdopen(write_fd, "wb", 0)
    )
    sdk_writer = asyncio.StreamWriter(write_transport, write_protocol, None, loop)
    # Server stdout -> tee -> the SDK's StreamReader (fed by hand, never touched by anything else).
    to_sdk = asyncio.StreamReader(limit=LINE_LIMIT)

    async def pump_to_server() -> None:
        try:
            while line := await from_sdk.readline():
                try:
                    message = orjson.loads(line)
                except orjson.JSONDecodeError:
                    message = None
                    wire.problems.append(f"the SDK wrote a line that is not JSON: {line[:200]!r}")
                wire.validator.client_sent(message)
                wire.record("in", message, line.rstrip(b"\n"))
                try:
                    await transport.send(line)
                except (BrokenPipeError, ConnectionResetError) as exc:
                    wire.problems.append(f"the server's stdin closed while the SDK was writing: {exc!r}")
                    return
        finally:
            await transport.close()

    async def pump_to_sdk() -> None:
        try:
            while line := await transport.receive():
                message = wire.validator.server_wrote(line)
                wire.record("out", message, line.rstrip(b"\n"))
                to_sdk.feed_data(line)
        finally:
            to_sdk.feed_eof()

    pumps = [
        asyncio.create_task(pump_to_server(), name="tee: sdk -> server"),
        asyncio.create_task(pump_to_sdk(), name="tee: server -> sdk"),
    ]
    stderr_reader = asyncio.create_task(process.stderr.read(), name="server stderr")
    recorder = _SdkLogRecorder()
    logging.getLogger().addHandler(recorder)
    conn = ClientSideConnection(client, sdk_writer, to_sdk)
    return SdkAgent(conn, client, process, wire, sdk_writer, pumps, stderr_reader, recorder)


@contextlib.asynccontextmanager
async def spawn_sdk_agent(
    *args: str,
    client: RecordingClient | None = None,
    env: dict[str, str] | None = None,
    cwd: str | None = None,
    transport: type[Transport] = StdioTransport,
) -> AsyncIterator[SdkAgent]:
    """Start `acp-server ARGS` with an SDK client attached over `transport` (stdio unless told); at exit end the
    connection and assert a clean wire and exit.

    The body's own failure wins: if it raises, the server is still shut down (and killed if need be), but the
    teardown checks are not asserted on top of it.
    """
    agent = await _start(args, client or RecordingClient(), env, cwd, transport)
    try:
        yield agent
    except BaseException:
        try:
            await agent.close()
        finally:
            agent.kill()
        raise
    problems = await agent.close()
    assert not problems, "\n".join(problems)
