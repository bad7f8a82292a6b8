"""Fixtures: a raw-line client per test whose whole wire log is checked at teardown (schema, C1-C4, C6, exit)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable

import pytest

from tests.harness import T_EXIT, RawClient, check_wire

StartServer = Callable[..., Awaitable[RawClient]]


@pytest.fixture
async def start_server() -> AsyncIterator[StartServer]:
    """Start `acp-server` processes; at teardown each is closed (stdin EOF) and its whole wire log is checked."""
    clients: list[RawClient] = []

    async def start(*args: str, env: dict[str, str] | None = None, cwd: str | None = None) -> RawClient:
        client = await RawClient.start(*args, env=env, cwd=cwd)
        clients.append(client)
        return client

    yield start
    problems: list[str] = []
    for client in clients:
        if client.process.returncode is None:
            try:
                code, took = await client.close()
            except AssertionError as exc:
                problems.append(str(exc))
                continue
            if code != 0:
                problems.append(f"exit status {code} after stdin EOF")
            if took > T_EXIT:
                problems.append(f"exit took {took:.2f} s > {T_EXIT} s")
        problems += check_wire(client)
    assert not problems, "\n".join(problems)


@pytest.fixture
async def server(start_server: StartServer) -> RawClient:
    """A scripted, test-mode server that has been initialized."""
    client = await start_server()
    await client.initialize()
    return client
