"""One MCP server of one session: the task that holds its connection, its state and tools, and calls to them.

The connection lives in one long task (`run`), spawned into the ACP connection's task group, so `session/new`
answers at once while the server starts. Tool calls come from turns, which are other tasks: they only send a request
through the connected client and wait, so cancelling the turn cancels the call (the SDK then tells the server with
`notifications/cancelled`) and leaves the connection usable.

A server that fails to start, stops, or breaks never raises out of here: the link records what happened in plain
words, the next turn tells the user (see `hub.py`), and its tools answer the model with that message.
"""

from __future__ import annotations

import logging
import math
import os
import signal
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import anyio

from acp_server.errors import McpServerError, ToolError
from acp_server.mcp_bridge.over_acp import AcpMcpMessages
from acp_server.mcp_bridge.specs import ServerSpec
from acp_server.mcp_bridge.transports import connect, new_pidfile, read_pid
from acp_server.runtime.child_env import KEEP_ALL, ChildEnvPolicy

if TYPE_CHECKING:
    from mcp import Client
    from mcp.types import CallToolResult

__all__ = ["CONNECT_TIMEOUT", "RemoteTool", "ServerLink", "describe_failure", "list_remote_tools"]

log = logging.getLogger(__name__)

# How long starting a server and listing its tools may take before it counts as failed.
CONNECT_TIMEOUT = 30.0
# Pages of `tools/list` read at most, so a server whose cursor never ends cannot hold the connection.
MAX_TOOL_PAGES = 50

LinkState = Literal["connecting", "ready", "failed", "stopped"]


@dataclass(frozen=True, slots=True)
class RemoteTool:
    """A tool as the MCP server lists it."""

    name: str
    description: str
    input_schema: dict[str, Any]
    read_only: bool


def describe_failure(exc: BaseException) -> str:
    """The innermost cause of an SDK failure (they arrive wrapped in exception groups), in one line."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return text or type(exc).__name__


async def list_remote_tools(client: Client) -> tuple[RemoteTool, ...]:
    tools: list[RemoteTool] = []
    cursor: str | None = None
    for _ in range(MAX_TOOL_PAGES):
        page = await client.list_tools(cursor=cursor)
        for tool in page.tools:
            annotations = tool.annotations
            read_only = annotations is not None and annotations.read_only_hint is True
            schema = dict(tool.input_schema) if isinstance(tool.input_schema, dict) else {"type": "object"}
            tools.append(RemoteTool(tool.name, tool.description or "", schema, read_only))
        cursor = page.next_cursor
        if cursor is None:
            break
    return tuple(tools)


class ServerLink:
    """One MCP server of a session. `run` is its connection's whole life; `stop` ends it."""

    def __init__(
        self,
        name: str,
        server_id: str,
        spec: ServerSpec | None,
        cwd: Path,
        *,
        problem: str = "",
        roots: tuple[Path, ...] = (),
        environment: ChildEnvPolicy = KEEP_ALL,
        messages: AcpMcpMessages | None = None,
    ) -> None:
        self.name = name
        # The session's client's ACP connection, which an `acp` server's traffic travels on (mcp_bridge/over_acp.py).
        self.messages = messages
        # What a stdio server's environment leaves out of the server's own (runtime/child_env.py).
        self.environment = environment
        # The server's part of its tools' names (`mcp__<server_id>__<tool>`), unique within the session.
        self.server_id = server_id
        self.spec = spec
        self.cwd = cwd
        # The session's directories, for a server that asks where it may work (`roots/list`).
        self.roots = roots or (cwd,)
        self.state: LinkState = "connecting"
        # Why the server is not usable, in words for the user and the model (set with `failed` / `stopped`).
        self.problem = problem
        self.tools: tuple[RemoteTool, ...] = ()
        self.started_at = anyio.current_time()
        # Set once connecting is over, however it ended; and once the task has ended (the server is shut down).
        self.settled = anyio.Event()
        self.finished = anyio.Event()
        # Something the user has not been told yet (a failure, a stop, a slow start).
        self.untold = False
        self.told_slow = False
        # The server said its tool list changed (`notifications/tools/list_changed`): re-read it before the next turn.
        self.tools_changed = False
        # Where a stdio server writes its pid, which is its process group: killed at exit if it outlives the
        # shutdown. Removed once the server is shut down.
        self._pidfile: Path | None = None
        self._client: Client | None = None
        self._scope = anyio.CancelScope()
        self._stopping = False

    # --- the connection's task ---

    async def run(self) -> None:
        try:
            with self._scope:
                if self.spec is None:
                    raise McpServerError(self.problem)
                if self.spec.transport == "stdio":
                    self._pidfile = new_pidfile()
                await self._serve(self.spec)
        except Exception as exc:  # any failure of the server or the SDK is this server's, never the agent's
            self._end(exc)
        finally:
            self._client = None
            if self._pidfile is not None:
                self._pidfile.unlink(missing_ok=True)
                self._pidfile = None
            self.settled.set()
            self.finished.set()

    async def _serve(self, spec: ServerSpec) -> None:
        # One scope around the whole connection (a deadline while connecting, none once ready): the SDK's task
        # groups live inside `connect`, so no scope may end between entering it and leaving it.
        with anyio.CancelScope(deadline=anyio.current_time() + CONNECT_TIMEOUT) as connecting:
            async with connect(
                spec,
                self.cwd,
                self._pidfile,
                self._on_tools_changed,
                self.roots,
                environment=self.environment,
                messages=self.messages,
            ) as (client, lost):
                tools = await list_remote_tools(client)
                connecting.deadline = math.inf
                self.tools = tools
                self._client = client
                self.state = "ready"
                self.settled.set()
                log.info("MCP server %r ready with %d tools", self.name, len(tools))
                async with anyio.create_task_group() as watchers:
                    watchers.start_soon(self._watch_tool_list, client)
                    await lost.wait()
                    watchers.cancel_scope.cancel()
                self._client = None
                if not self._stopping:
                    self._mark_stopped(f"the MCP server {self.name!r} stopped")
        if connecting.cancelled_caught:
            raise McpServerError(f"the MCP server {self.name!r} did not answer within {CONNECT_TIMEOUT:g} s")

    def _on_tools_changed(self) -> None:
        self.tools_changed = True

    async def _watch_tool_list(self, client: Client) -> None:
        """Learn that the server's tool list changed. A server of protocol 2026-07-28 or later says so on a
        `subscriptions/listen` stream; an older one sends `notifications/tools/list_changed`, which reaches
        `_on_tools_changed` through the client's message handler (see transports.connect)."""
        from mcp.client.subscriptions import ListenNotSupportedError  # noqa: PLC0415 (MCP SDK: loaded only for a session with an MCP server)

        try:
            async with client.listen(tools_list_changed=True) as subscription:
                async for _event in subscription:
                    self._on_tools_changed()
        except ListenNotSupportedError:
            return
        except Exception as exc:  # a server that cannot stream changes still serves its tools
            log.info("MCP server %r: no tool-list updates: %s", self.name, describe_failure(exc))

    def _end(self, exc: Exception) -> None:
        if self._stopping or self.state in ("failed", "stopped"):
            return  # asked to stop, or already recorded (a call saw the connection break first)
        cause = str(exc) if isinstance(exc, McpServerError) else describe_failure(exc)
        if self.state == "ready":
            self._mark_stopped(f"the MCP server {self.name!r} stopped ({cause})")
            return
        self.state = "failed"
        self.problem = (
            cause if isinstance(exc, McpServerError) else f"the MCP server {self.name!r} failed to start: {cause}"
        )
        self.untold = True
        log.warning("%s", self.problem)

    def _mark_stopped(self, problem: str) -> None:
        if self.state in ("failed", "stopped"):
            return
        self.state = "stopped"
        self.problem = problem
        self.untold = True
        self._client = None
        log.warning("%s", problem)

    # --- from turns ---

    async def refresh_tools(self) -> None:
        """Re-read the tool list after the server said it changed; cancellable. A failure keeps the old list (the
        calls themselves then say what is wrong)."""
        client = self._client
        if client is None or self.state != "ready":
            return
        self.tools_changed = False
        try:
            self.tools = await list_remote_tools(client)
        except Exception as exc:  # the server's problem, never the turn's
            log.warning("MCP server %r: cannot re-read its tools: %s", self.name, describe_failure(exc))

    async def call(self, tool: str, arguments: dict[str, Any]) -> CallToolResult:
        """Call a tool; cancellable (the server is told). Raises ToolError, in words for the model."""
        client = self._client
        if client is None or self.state != "ready":
            raise ToolError(f"{self.problem or f'the MCP server {self.name!r} is not running'}; nothing was done")
        from mcp.shared.exceptions import MCPError  # noqa: PLC0415 (MCP SDK: loaded only for a session with an MCP server)
        from mcp.types import CONNECTION_CLOSED  # noqa: PLC0415 (MCP SDK: loaded only for a session with an MCP server)

        try:
            return await client.call_tool(tool, arguments)
        except Exception as exc:
            cause: BaseException = exc
            while isinstance(cause, BaseExceptionGroup) and cause.exceptions:
                cause = cause.exceptions[0]
            if isinstance(cause, MCPError) and cause.code == CONNECTION_CLOSED:
                self._mark_stopped(f"the MCP server {self.name!r} stopped")
                self._scope.cancel()  # its connection is over: shut it down
                raise ToolError(f"the MCP server {self.name!r} stopped during the call") from None
            raise ToolError(f"the MCP server {self.name!r} failed the call: {describe_failure(exc)}") from None

    # --- ending ---

    def stop(self) -> None:
        """End the connection (the SDK's shutdown runs, shielded and bounded); nothing is reported."""
        self._stopping = True
        self._scope.cancel()

    def kill(self) -> None:
        """SIGKILL the stdio server's process group if it may still run. Synchronous: used on the way out."""
        pgid = read_pid(self._pidfile) if self._pidfile is not None and not self.finished.is_set() else None
        if pgid is None or pgid == os.getpgrp():
            return
        with suppress(ProcessLookupError, PermissionError):
            os.killpg(pgid, signal.SIGKILL)
