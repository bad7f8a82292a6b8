"""Drive `acp-server` with the official ACP Python SDK's client side, through a tee that checks the wire.

The raw-line harness (`tests/harness.py`) writes exact bytes; this module drives the ordinary flows the way an
editor built on the SDK (`agent-client-protocol`, import name `acp`) does, so a mismatch between what the server
writes and what the SDK can parse shows up as a test failure. Every line crosses a tee:

- server stdout -> `WireValidator.server_wrote` (schema per method, JSON-RPC framing) -> the SDK's StreamReader;
- SDK writes -> an `os.pipe` -> `WireValidator.client_sent` (so responses are checked against the right
  `...Response` type) -> the server's stdin.

Both directions are kept in one log of `tests.harness.Entry` in wire order, so the common checks C1-C4 of
INTERRUPTS.md (`tests.harness.check_wire`) run over SDK-driven sessions too. `RecordingClient` is the editor side:
it records every `session/update` and extension notification (the `_scripted/probe`s) in order, answers
`fs/read_text_file` / `fs/write_text_file` from an in-memory dict and `session/request_permission` with a
configurable option, and can hold any client method open until the test releases it. `spawn_sdk_agent` is the
async context manager that starts it all and, at the end, closes stdin and fails on a bad exit, a schema
violation, a C1-C4 problem, an SDK-side error log, or a red flag on the server's stderr.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import os
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

from tests.harness import STDERR_RED_FLAGS, Entry, RawClient, check_wire, server_command
from tests.wire_schema import WireValidator

__all__ = [
    "EXIT_TIMEOUT",
    "ClientCall",
    "Hold",
    "RecordedUpdate",
    "RecordingClient",
    "SdkAgent",
    "SessionUpdate",
    "WireTap",
    "spawn_sdk_agent",
]

_T = TypeVar("_T")

# stdin EOF -> process exit, as the brief for these tests sets it (the harness's T_EXIT is 2.5 s with GRACE 0.5).
EXIT_TIMEOUT = 3.0
# Lines up to 64 MiB are protocol (README); the readers get room for more so an oversized line is seen, not fatal.
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


class RecordingClient:
    """The editor side of the SDK connection (it satisfies `acp.interfaces.Client`)."""

    def __init__(
        self,
        files: dict[str, str] | None = None,
        permission_option: str | None = "allow",
    ) -> None:
        self.files: dict[str, str] = dict(files or {})
        # The optionId `request_permission` selects; None answers the `cancelled` outcome.
        self.permission_option = permission_option
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

    def mark(self) -> int:
        """A position in the record: pass it as `since` to look only at what arrives afterwards."""
        return self._next_seq()

    async def wait_for_probe(self, event: str, timeout: float = 5.0, since: int = 0, **match: Any) -> dict[str, Any]:
        """The first `_scripted/probe` (at or after `since`) with this event whose params contain `match`."""
        return await self._wait(lambda: next(iter(self.probes(event, since=since, **match)), None), timeout)

    async def wait_for_call(self, method: str, timeout: float = 5.0, since: int = 0) -> ClientCall:
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
        if self.permission_option is None:
            return RequestPermissionResponse(outcome=DeniedOutcome(outcome="cancelled"))
        return RequestPermissionResponse(outcome=AllowedOutcome(outcome="selected", option_id=self.permission_option))

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

    # The server never offers terminals, elicitation or client extension methods: refuse them the JSON-RPC way, and
    # record the call so a test can see that it happened.

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
        await self._called("terminal/create", session_id, {"command": command, "args": args, "cwd": cwd})
        raise RequestError.method_not_found("terminal/create")

    async def terminal_output(self, session_id: str, terminal_id: str, **kwargs: Any) -> TerminalOutputResponse:
        await self._called("terminal/output", session_id, {"terminalId": terminal_id})
        raise RequestError.method_not_found("terminal/output")

    async def release_terminal(
        self, session_id: str, terminal_id: str, **kwargs: Any
    ) -> ReleaseTerminalResponse | None:
        await self._called("terminal/release", session_id, {"terminalId": terminal_id})
        raise RequestError.method_not_found("terminal/release")

    async def wait_for_terminal_exit(
        self, session_id: str, terminal_id: str, **kwargs: Any
    ) -> WaitForTerminalExitResponse:
        await self._called("terminal/wait_for_exit", session_id, {"terminalId": terminal_id})
        raise RequestError.method_not_found("terminal/wait_for_exit")

    async def kill_terminal(self, session_id: str, terminal_id: str, **kwargs: Any) -> KillTerminalResponse | None:
        await self._called("terminal/kill", session_id, {"terminalId": terminal_id})
        raise RequestError.method_not_found("terminal/kill")

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
                await asyncio.wait_for(pump, 5)
            except Exception as exc:
                problems.append(f"pump {pump.get_name()} failed: {exc!r}")
        await self.conn.close()
        wire.stderr_text = (await asyncio.wait_for(self._stderr_reader, 5)).decode(errors="replace")
        logging.getLogger().removeHandler(self._log_recorder)

        problems += wire.problems
        # C1-C4 and schema violations over the whole log, and the stderr red flags (check_wire only reads these).
        problems += check_wire(
            RawClient(self.process, validator=wire.validator, log=wire.log, stderr_text=wire.stderr_text)
        )
        for flag in RED_FLAGS:
            if flag in wire.stderr_text and f"C6: stderr says {flag!r}" not in problems:
                problems.append(f"stderr says {flag!r}")
        for record in self._log_recorder.records:
            if not _is_unrouted_cancel_request(record):
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
    args: tuple[str, ...], client: RecordingClient, env: dict[str, str] | None, cwd: str | None
) -> SdkAgent:
    loop = asyncio.get_running_loop()
    process = await asyncio.create_subprocess_exec(
        *server_command(*args),
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env={**os.environ, **(env or {})},
        cwd=cwd,
        limit=LINE_LIMIT,
        start_new_session=True,
    )
    assert process.stdin is not None and process.stdout is not None and process.stderr is not None
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
        stdin = process.stdin
        assert stdin is not None
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
                    stdin.write(line)
                    await stdin.drain()
                except (BrokenPipeError, ConnectionResetError) as exc:
                    wire.problems.append(f"the server's stdin closed while the SDK was writing: {exc!r}")
                    return
        finally:
            stdin.close()

    async def pump_to_sdk() -> None:
        stdout = process.stdout
        assert stdout is not None
        try:
            while line := await stdout.readline():
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
) -> AsyncIterator[SdkAgent]:
    """Start `acp-server ARGS` with an SDK client attached; at exit close stdin and assert a clean wire and exit.

    The body's own failure wins: if it raises, the server is still shut down (and killed if need be), but the
    teardown checks are not asserted on top of it.
    """
    agent = await _start(args, client or RecordingClient(), env, cwd)
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
