"""Fixtures: a raw-line client per test whose whole wire log is checked at teardown (schema, C1-C4, C6, exit)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Sequence

import pytest

from tests.support.harness import LONG_GRACE_ARGS, T_EXIT, TIME_SCALE, RawClient, check_wire

StartServer = Callable[..., Awaitable[RawClient]]


@pytest.hookimpl(trylast=True)
def pytest_configure(config: pytest.Config) -> None:
    """pytest-timeout's per-test timeout (the `timeout` ini) is a bound like any other: scaled by
    ACP_TEST_TIME_SCALE. trylast: pytest-timeout has read the ini by then."""
    config.addinivalue_line(
        "markers",
        "at_once: the test tells 'at once' from 'at the cleanup deadline': its server gets LONG_GRACE, far above T_ACK",
    )
    if getattr(config, "_env_timeout", None):
        config._env_timeout *= TIME_SCALE  # type: ignore[attr-defined]


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """A test's own `@pytest.mark.timeout(N)` scales too: a scaled copy goes first, where pytest-timeout looks."""
    for item in items:
        marker = item.get_closest_marker("timeout")
        if marker is not None and marker.args:
            item.add_marker(pytest.mark.timeout(marker.args[0] * TIME_SCALE, **marker.kwargs), append=False)


@pytest.fixture
async def start_server() -> AsyncIterator[StartServer]:
    """Start `acp-server` processes; at teardown each is closed (stdin EOF) and its whole wire log is checked."""
    clients: list[RawClient] = []

    async def start(
        *args: str, env: dict[str, str] | None = None, cwd: str | None = None, command: Sequence[str] | None = None
    ) -> RawClient:
        client = await RawClient.start(*args, env=env, cwd=cwd, command=command)
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


def server_args(request: pytest.FixtureRequest) -> tuple[str, ...]:
    """The default server, or with `@pytest.mark.at_once` one whose cleanup deadline is LONG_GRACE: then an answer
    within T_ACK can only be "at once", never the deadline, however big ACP_TEST_TIME_SCALE is."""
    return LONG_GRACE_ARGS if request.node.get_closest_marker("at_once") else ()


@pytest.fixture
async def server(start_server: StartServer, request: pytest.FixtureRequest) -> RawClient:
    """A scripted, test-mode server that has been initialized."""
    client = await start_server(*server_args(request))
    await client.initialize()
    return client


@pytest.fixture
async def server_v2(start_server: StartServer, request: pytest.FixtureRequest) -> RawClient:
    """A scripted, test-mode server whose connection speaks ACP v2."""
    client = await start_server(*server_args(request))
    await client.initialize_v2()
    return client
