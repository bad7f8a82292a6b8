"""Fixtures: a raw-line client per test whose whole wire log is checked at teardown (schema, C1-C4, C6, exit), over
the transport the test is run over (`transport`: stdio, or each of `TRANSPORTS` under `every_transport`)."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence

import pytest

from tests.support.harness import LONG_GRACE_ARGS, T_EXIT, TIME_SCALE, TRANSPORTS, RawClient, Transport, check_wire
from tests.support.postgres import PostgresServer, postgres_missing, start_postgres
from tests.support.versions import VERSIONS, Acp

StartServer = Callable[..., Awaitable[RawClient]]


@pytest.hookimpl(trylast=True)
def pytest_configure(config: pytest.Config) -> None:
    """pytest-timeout's per-test timeout (the `timeout` ini) is a bound like any other: scaled by
    ACP_TEST_TIME_SCALE. trylast: pytest-timeout has read the ini by then."""
    config.addinivalue_line(
        "markers",
        "every_transport: run each test that reaches a server over every transport in TRANSPORTS (ids: their names)",
    )
    config.addinivalue_line(
        "markers",
        "at_once: the test tells 'at once' from 'at the cleanup deadline': its server gets LONG_GRACE, far above T_ACK",
    )
    if getattr(config, "_env_timeout", None):
        config._env_timeout *= TIME_SCALE  # type: ignore[attr-defined]


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """`@pytest.mark.every_transport` (on a test or a module): each test whose servers come from these fixtures
    (`start_server`, `server`, `server_v2`, `acp`) runs once per transport. A test that starts its process by hand is
    about stdio itself and is left alone. Adding a transport to `TRANSPORTS` runs them over it without a copy."""
    if metafunc.definition.get_closest_marker("every_transport") and "transport" in metafunc.fixturenames:
        metafunc.parametrize("transport", list(TRANSPORTS), indirect=True)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """A test's own `@pytest.mark.timeout(N)` scales too: a scaled copy goes first, where pytest-timeout looks."""
    for item in items:
        marker = item.get_closest_marker("timeout")
        if marker is not None and marker.args:
            item.add_marker(pytest.mark.timeout(marker.args[0] * TIME_SCALE, **marker.kwargs), append=False)


@pytest.fixture
def transport(request: pytest.FixtureRequest) -> type[Transport]:
    """How this test's servers are reached: the parametrized one under `every_transport`, else stdio."""
    name: str = getattr(request, "param", "stdio")
    return TRANSPORTS[name]


@pytest.fixture
async def start_server(transport: type[Transport]) -> AsyncIterator[StartServer]:
    """Start `acp-server` processes; at teardown each one's connection is ended (stdio: stdin EOF), its exit awaited
    and its whole wire log checked."""
    clients: list[RawClient] = []

    async def start(
        *args: str, env: dict[str, str] | None = None, cwd: str | None = None, command: Sequence[str] | None = None
    ) -> RawClient:
        client = await RawClient.start(*args, env=env, cwd=cwd, command=command, transport=transport)
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


@pytest.fixture(params=list(VERSIONS))
def version(request: pytest.FixtureRequest) -> str:
    """The protocol version a test speaks (ids v1/v2): one test function for a promise both versions make."""
    name: str = request.param
    return name


@pytest.fixture
async def acp(start_server: StartServer, version: str, request: pytest.FixtureRequest) -> Acp:
    """A scripted, test-mode server initialized in `version`, behind that version's adapter (tests/support/versions.py).
    Its raw client is `acp.client`; the teardown checks the wire in that version's reading."""
    speaker = VERSIONS[version](await start_server(*server_args(request)))
    await speaker.initialize()
    return speaker


# The session store's backends (acp_server/store/): the embedded SQLite file, and PostgreSQL for replicas.
STORE_BACKENDS = ("sqlite", "postgres")


@pytest.fixture(scope="session")
def postgres() -> Iterator[PostgresServer]:
    """A real PostgreSQL server for this pytest process (each xdist worker starts its own), stopped and removed at
    the end (tests/support/postgres.py). Skipped where PostgreSQL is not installed, except under CI=true: there a
    missing PostgreSQL fails the tests that need it."""
    missing = postgres_missing()
    if missing is not None:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"CI=true and {missing}")
        pytest.skip(missing)
    server = start_postgres()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(params=STORE_BACKENDS)
def store_backend(request: pytest.FixtureRequest) -> str:
    """The session store's backend a test runs on (ids sqlite/postgres): one test for a promise both keep."""
    name: str = request.param
    return name


@pytest.fixture
def store_url(store_backend: str, request: pytest.FixtureRequest) -> Iterator[str | None]:
    """None for SQLite (the file in the state directory); for PostgreSQL the URL of a new database of this test's own,
    dropped after it. The server is started only for a test that runs on PostgreSQL."""
    if store_backend == "sqlite":
        yield None
        return
    server: PostgresServer = request.getfixturevalue("postgres")
    url = server.database()
    try:
        yield url
    finally:
        server.drop(url)
