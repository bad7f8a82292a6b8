"""How each ACP transport becomes a connected MCP SDK client: stdio, streamable HTTP, SSE, and a server the client
offers over the ACP connection itself (`acp`, mcp_bridge/over_acp.py).

The `mcp` SDK costs about 0.6 s of imports, so it is imported only here, only when a session has MCP servers, and in
a worker thread, so the event loop keeps answering the editor meanwhile.

Two things the SDK does not give us, added around it:
- A signal that the connection is gone. Every transport's incoming stream is relayed through `_watched`, which sets
  an event when the stream ends (a stdio server exited, an HTTP stream broke), so a server that dies between calls
  is noticed at once, not at the next call.
- The stdio server's pid. The server is started through `/bin/sh -c 'echo $$ > PIDFILE; exec SERVER...'`: `exec`
  keeps the pid, and the SDK starts it in a new session, so that pid is the server's process group, which the agent
  kills at exit when a server ignores the polite shutdown (the SDK's own escalation takes seconds longer than the
  process may stay).
"""

from __future__ import annotations

import functools
import os
import shutil
import sys
import tempfile
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import AbstractAsyncContextManager, AsyncExitStack, asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio

from acp_server import __version__
from acp_server.errors import McpServerError
from acp_server.mcp_bridge.addresses import guarded_client
from acp_server.mcp_bridge.over_acp import MCP_OVER_ACP_VERSION, AcpMcpMessages, acp_transport
from acp_server.mcp_bridge.specs import ServerSpec
from acp_server.runtime.child_env import ChildEnvPolicy, child_environment

if TYPE_CHECKING:
    from mcp import Client

__all__ = ["connect", "load_sdk", "new_pidfile", "read_pid"]

_RECORD_PID_AND_EXEC = 'echo $$ > "$0"; exec "$@"'


def _import_sdk() -> None:
    import mcp.client.sse  # noqa: PLC0415 (MCP SDK: load_sdk imports it in a worker thread)
    import mcp.client.stdio  # noqa: PLC0415 (MCP SDK: load_sdk imports it in a worker thread)
    import mcp.client.streamable_http  # noqa: PLC0415, F401 (MCP SDK: load_sdk imports it in a worker thread)


async def load_sdk() -> None:
    """Import the MCP SDK without stalling the event loop (a no-op once imported)."""
    if "mcp.client.sse" not in sys.modules:
        await anyio.to_thread.run_sync(_import_sdk, abandon_on_cancel=True)


@asynccontextmanager
async def connect(
    spec: ServerSpec,
    cwd: Path,
    pidfile: Path | None = None,
    on_tools_changed: Callable[[], None] = lambda: None,
    roots: Sequence[Path] = (),
    *,
    environment: ChildEnvPolicy | None = None,
    messages: AcpMcpMessages | None = None,
) -> AsyncIterator[tuple[Client, anyio.Event]]:
    """A connected client (the MCP handshake done) and an event set if the connection is lost. Leaving the block
    shuts the server down (the SDK's shutdown: close stdin, wait, terminate the process group). A stdio server
    writes its pid to `pidfile`, when given, as it starts (see `new_pidfile`, `read_pid`). `on_tools_changed` is
    called when the server says its tool list changed (`notifications/tools/list_changed`). `roots` (the session's
    directories; its cwd when empty) answer a server that asks `roots/list`, as file-system servers of the 2025
    protocol do to learn where they may work. `environment`: the child-environment policy (runtime/child_env.py)
    applied to the MCP SDK's small default environment (HOME, PATH, ...) a stdio server gets under its own `env`;
    None leaves that default as the SDK makes it (`doctor`'s probe). `messages`: the ACP connection an `acp` server's
    `mcp/message` traffic travels on (its session's client's)."""
    await load_sdk()
    from mcp import Client  # noqa: PLC0415 (MCP SDK: loaded only for a session with an MCP server)
    from mcp.types import Implementation, ListRootsResult, Root, ToolListChangedNotification  # noqa: PLC0415 (MCP SDK: loaded only for a session with an MCP server)

    listed = ListRootsResult(roots=[Root(uri=root.as_uri(), name=root.name or str(root)) for root in roots or (cwd,)])

    async def list_roots(context: Any) -> ListRootsResult:
        await anyio.lowlevel.checkpoint()
        return listed

    async def on_message(message: Any) -> None:
        if isinstance(getattr(message, "root", message), ToolListChangedNotification):
            on_tools_changed()
        await anyio.lowlevel.checkpoint()

    lost = anyio.Event()
    async with AsyncExitStack() as stack:
        transport = await _transport(spec, cwd, stack, pidfile, environment, messages=messages)
        info = Implementation(name="acp-server", version=__version__)
        # Over ACP the binding carries one MCP revision, 2026-07-28 (its discovery, then its requests); elsewhere the
        # SDK finds the server's (`auto`: `server/discover`, else the initialize handshake).
        mode = MCP_OVER_ACP_VERSION if spec.transport == "acp" else "auto"
        client = await stack.enter_async_context(
            Client(
                _watched(transport, lost),
                client_info=info,
                message_handler=on_message,
                list_roots_callback=list_roots,
                mode=mode,
            )
        )
        yield client, lost


def new_pidfile() -> Path:
    """An empty file for a stdio server's pid; the caller removes it."""
    handle, name = tempfile.mkstemp(prefix="acp-server-mcp-", suffix=".pid")
    os.close(handle)
    return Path(name)


def read_pid(pidfile: Path) -> int | None:
    """The pid a stdio server wrote, once it has started; None before that. Synchronous: used on the way out."""
    try:
        return int(pidfile.read_text().strip())
    except (OSError, ValueError):
        return None


async def _transport(
    spec: ServerSpec,
    cwd: Path,
    stack: AsyncExitStack,
    pidfile: Path | None,
    environment: ChildEnvPolicy | None,
    *,
    messages: AcpMcpMessages | None = None,
) -> AbstractAsyncContextManager[Any]:
    if spec.transport == "acp":
        if messages is None:  # a config file's entry, or `doctor`: no client connection to carry it
            raise McpServerError(
                f"the MCP server {spec.name!r} is the client's (acp), and no ACP client offers it here"
            )
        return acp_transport(messages, spec.acp_id)
    if spec.transport == "stdio":
        from mcp.client.stdio import StdioServerParameters, get_default_environment, stdio_client  # noqa: PLC0415 (MCP SDK: loaded only for a session with an MCP server)

        # Not the server's whole environment: the SDK's small default one (HOME, PATH, SHELL, TERM, USER), as the
        # child-environment policy allows it, with the server's own `env` (the editor's or the file's) on top.
        base = child_environment(environment, get_default_environment()) if environment is not None else {}
        env = {**base, **spec.env}
        cwd = Path(spec.cwd) if spec.cwd is not None else cwd
        executable = _find_executable(spec, env.get("PATH") or get_default_environment().get("PATH", ""), cwd)
        command, args = executable, list(spec.args)
        if pidfile is not None:
            command, args = "/bin/sh", ["-c", _RECORD_PID_AND_EXEC, str(pidfile), executable, *spec.args]
        return stdio_client(StdioServerParameters(command=command, args=args, env=env, cwd=str(cwd)))
    allowed = spec.allowed_hosts
    if spec.transport == "sse":
        from mcp.client.sse import sse_client  # noqa: PLC0415 (MCP SDK: loaded only for a session with an MCP server)

        if allowed is not None:  # a remote client's: connected only where addresses.py allows
            return sse_client(
                spec.url,
                headers=dict(spec.headers) or None,
                httpx_client_factory=functools.partial(guarded_client, allowed),
            )
        return sse_client(spec.url, headers=dict(spec.headers) or None)
    from mcp.client.streamable_http import streamable_http_client  # noqa: PLC0415 (MCP SDK: loaded only for a session with an MCP server)

    if allowed is not None:
        guarded = await stack.enter_async_context(guarded_client(allowed, dict(spec.headers)))
        return streamable_http_client(spec.url, http_client=guarded)
    if not spec.headers:
        return streamable_http_client(spec.url)
    import httpx2  # noqa: PLC0415 (httpx2: only for an HTTP MCP server with headers)

    # The SDK takes headers only through a client of our own; these are its default timeouts.
    http = await stack.enter_async_context(
        httpx2.AsyncClient(headers=dict(spec.headers), timeout=httpx2.Timeout(30.0, read=300.0))
    )
    return streamable_http_client(spec.url, http_client=http)


def _find_executable(spec: ServerSpec, path: str, cwd: Path) -> str:
    """The command as a path, so a missing one is reported in words, not as a shell's exit status 127."""
    command = spec.command
    if "/" in command:
        candidate = cwd / command
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return str(candidate)
    else:
        found = shutil.which(command, path=path)
        if found is not None:
            return found
    raise McpServerError(f"cannot start the MCP server {spec.name!r}: command not found: {command}")


@asynccontextmanager
async def _watched(transport: AbstractAsyncContextManager[Any], lost: anyio.Event) -> AsyncIterator[Any]:
    """The transport's streams, with the incoming one relayed so that its end sets `lost`."""
    async with transport as (incoming, outgoing):
        send, receive = anyio.create_memory_object_stream[Any](0)

        async def relay() -> None:
            try:
                async with send:
                    async for item in incoming:
                        await send.send(item)
            except (anyio.ClosedResourceError, anyio.BrokenResourceError):
                pass  # the client side closed first: we are shutting down
            finally:
                lost.set()

        async with anyio.create_task_group() as relays:
            relays.start_soon(relay)
            try:
                yield receive, outgoing
            finally:
                relays.cancel_scope.cancel()
                receive.close()
