"""Replicas behind a real load balancer (issue 24, item 3): Debian's HAProxy, with the configuration docs/deploy.md
shows (read out of the page: tests/support/haproxy.py), in front of two `acp-server serve` replicas on 127.0.0.1,
each with a state directory (and SQLite store) of its own; and the page's nginx configuration checked by `nginx -t`.

- Affinity: the official TypeScript SDK's WebSocket client, with a cookie store it owns and keeps between runs,
  lands on the same replica every time it reconnects (proved by `session/load`: only that replica's store has the
  session) and holds both cookies, HAProxy's `SRV` and the replica's own `acp_replica`.
- Redispatch: the replica it is on is killed (`kill -9`); the client reconnects with the same cookies, naming the
  dead replica, and is served by the other at once.
- Drain: a replica that gets SIGTERM while a turn runs answers `/healthz` 503, the turn ends `cancelled` within the
  cleanup deadline, a new client holding its cookies is served by the other replica, and the process exits.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import anyio
import httpx
import orjson
import pytest
from websockets.asyncio.client import connect

from tests.e2e.test_serve import ALICE, Editor, Server, new_session, serving
from tests.e2e.test_ts_sdk import CLIENT_DIR, node_with_sdk
from tests.support.haproxy import HAProxy, free_port, haproxy_config, need_binary, nginx_config, running_haproxy
from tests.support.harness import T_WAIT, scaled

pytestmark = pytest.mark.timeout(120)

BEARER = {"Authorization": f"Bearer {ALICE}"}
NAMES = ("a", "b")


def port_of(server: Server) -> int:
    port = urlsplit(server.url).port
    assert port is not None
    return port


@asynccontextmanager
async def cluster(tmp_path: Path, *extra: str) -> AsyncIterator[tuple[HAProxy, dict[str, Server], Path]]:
    """Replicas `a` and `b` (`--replica-name`, one shared workspace root, a state directory each) behind HAProxy
    with docs/deploy.md's configuration; stopped in reverse order on the way out (HAProxy first)."""
    shared = tmp_path / "shared"
    shared.mkdir()
    async with AsyncExitStack() as stack:
        replicas: dict[str, Server] = {}
        for name in NAMES:
            (tmp_path / name).mkdir()
            replicas[name] = await stack.enter_async_context(
                serving(tmp_path / name, "--replica-name", name, "--workspace-root", str(shared), *extra)
            )
        port = free_port()
        config = haproxy_config(port, {name: port_of(server) for name, server in replicas.items()})
        health = [f"http://127.0.0.1:{port_of(server)}/healthz" for server in replicas.values()]
        proxy = await stack.enter_async_context(running_haproxy(config, tmp_path, port, health))
        yield proxy, replicas, shared


async def killed(server: Server) -> None:
    """`kill -9`, and reaped."""
    server.process.kill()
    with anyio.fail_after(T_WAIT):
        await server.process.wait()


async def sdk_client(node: str, url: str, jar: Path, cwd: Path, action: str, *args: str) -> dict[str, Any]:
    """One run of tests/ts_client/remote_lb.mjs: connect through `url` with the cookies in `jar` (kept there for
    the next run), initialize, then `session/new` or `session/load`; its report."""
    env = {**os.environ, "TS_FLOW_STEP_TIMEOUT_MS": f"{T_WAIT * 1000:.0f}"}
    command = [node, str(CLIENT_DIR / "remote_lb.mjs"), url, ALICE, str(jar), action, *args]
    with anyio.fail_after(scaled(30)):
        done = await anyio.run_process(command, cwd=cwd, env=env, check=False)
    assert done.returncode == 0 and done.stdout, done.stderr.decode(errors="replace")
    report = orjson.loads(done.stdout)
    assert isinstance(report, dict)
    return report


async def test_a_client_keeping_its_cookies_stays_on_its_replica_and_moves_at_once_when_that_one_dies(
    tmp_path: Path,
) -> None:
    node = node_with_sdk()
    async with cluster(tmp_path) as (proxy, replicas, shared):
        url = f"ws://127.0.0.1:{proxy.port}/acp"
        jar = tmp_path / "cookies.json"
        first = await sdk_client(node, url, jar, shared, "new")
        assert "error" not in first, first
        home = first["cookies"]["acp_replica"]
        assert first["cookies"] == {"SRV": home, "acp_replica": home}  # HAProxy's cookie and the replica's agree
        session = first["session"]["sessionId"]
        for _ in range(3):
            again = await sdk_client(node, url, jar, shared, "load", session)
            assert again["sent"] == {"SRV": home, "acp_replica": home}
            # Loaded: the session is in the store of the replica that made it, and nowhere else.
            assert "error" not in again, again
            assert again["cookies"]["acp_replica"] == home
        (other,) = set(NAMES) - {home}
        direct = await sdk_client(node, replicas[other].url, tmp_path / "direct.json", shared, "new")
        await killed(replicas[home])
        died = time.monotonic()
        moved = await sdk_client(node, url, jar, shared, "new")
        took = time.monotonic() - died
        assert moved["sent"] == {"SRV": home, "acp_replica": home}  # it still asked for the dead one ...
        assert "error" not in moved, moved
        assert moved["cookies"] == {"SRV": other, "acp_replica": other}  # ... and was served by the other at once
    print(
        f"\nconnect+initialize through HAProxy {first['initializedMs']:.1f} ms, direct {direct['initializedMs']:.1f}"
        f" ms; kill -9 -> served by the other replica (a new node process included) {took * 1000:.0f} ms,"
        f" its connect+initialize {moved['initializedMs']:.1f} ms"
    )


def cookie_header(cookies: dict[str, str]) -> str:
    return "; ".join(f"{name}={value}" for name, value in cookies.items())


def set_cookies(response_headers: Any) -> dict[str, str]:
    """The cookies a response set: name -> value."""
    jar: dict[str, str] = {}
    for value in response_headers.get_all("set-cookie"):
        name, _, rest = value.partition("=")
        jar[name.strip()] = rest.split(";", 1)[0].strip()
    return jar


@asynccontextmanager
async def lb_editor(url: str, cookies: dict[str, str]) -> AsyncIterator[tuple[Editor, dict[str, str]]]:
    """An initialized editor through the balancer, sending `cookies`; the cookies its upgrade set."""
    headers = {**BEARER, **({"Cookie": cookie_header(cookies)} if cookies else {})}
    async with connect(url, proxy=None, additional_headers=headers) as ws, anyio.create_task_group() as group:
        assert ws.response is not None
        client = Editor(ws, "through haproxy")
        group.start_soon(client.read)
        answer = await client.call("initialize", {"protocolVersion": 1, "clientCapabilities": {}})
        assert answer["result"]["protocolVersion"] == 1
        try:
            yield client, set_cookies(ws.response.headers)
        finally:
            await ws.close()
            with anyio.fail_after(T_WAIT):
                await client.closed.wait()
            assert client.validator.violations == [], client.validator.violations


async def test_a_draining_replica_cancels_its_turn_and_new_clients_go_to_the_other(tmp_path: Path) -> None:
    deadline = scaled(2.0)
    async with (
        cluster(tmp_path, "--cleanup-deadline", f"{deadline:g}") as (proxy, replicas, shared),
        httpx.AsyncClient(trust_env=False) as http,
    ):
        url = f"ws://127.0.0.1:{proxy.port}/acp"
        async with lb_editor(url, {}) as (alice, cookies):
            home = cookies["acp_replica"]
            assert cookies == {"SRV": home, "acp_replica": home}
            (other,) = set(NAMES) - {home}
            draining = replicas[home]
            session = await new_session(alice, shared)
            assert "result" in await alice.call("session/set_mode", {"sessionId": session, "modeId": "bypass"})
            command = "trap '' TERM; echo up > stubborn; sleep 3171"
            stubborn = {"tool": "run_command", "args": {"command": command, "timeout_s": 600}}
            running = await alice.request(
                "session/prompt",
                {"sessionId": session, "prompt": [{"type": "text", "text": "x"}], "_meta": {"scripted": [stubborn]}},
            )
            with anyio.fail_after(T_WAIT):
                # The turn's command runs, deaf to SIGTERM (a file another process writes: no event to wait on).
                while not (shared / "stubborn").exists():  # noqa: ASYNC110
                    await anyio.sleep(0.01)
            draining.process.send_signal(signal.SIGTERM)
            signalled = time.monotonic()
            healthz = f"http://127.0.0.1:{port_of(draining)}/healthz"
            with anyio.fail_after(T_WAIT):
                while (health := await http.get(healthz)).status_code == 200:  # noqa: ASYNC110 - another process
                    await anyio.sleep(0.01)
            assert health.status_code == 503
            # A new client still holding the draining replica's cookies: HAProxy retries its refused (503) upgrade on
            # the other replica, or has seen the health check fail and sends it there at once.
            async with lb_editor(url, cookies) as (newcomer, moved):
                assert moved == {"SRV": other, "acp_replica": other}
                assert (await newcomer.call("session/list", {}))["result"]["sessions"] == []  # b's own store
            answer = await alice.response(running, deadline + scaled(1.0))
            assert answer["result"]["stopReason"] == "cancelled"
            with anyio.fail_after(deadline + 1.0 + scaled(2.0)):
                assert await draining.process.wait() == 0
            exited = time.monotonic() - signalled
    print(f"\nSIGTERM -> the draining replica exited in {exited * 1000:.0f} ms (cleanup deadline {deadline:g} s)")


def test_the_nginx_configuration_of_the_deploy_page_passes_nginx_t(tmp_path: Path) -> None:
    nginx = need_binary("nginx")
    certificate, key = tmp_path / "acp.crt", tmp_path / "acp.key"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=acp.example.com",
         "-keyout", str(key), "-out", str(certificate)],
        capture_output=True,
        check=True,
        timeout=T_WAIT,
    )  # fmt: skip
    config = tmp_path / "nginx.conf"
    config.write_text(nginx_config(tmp_path, certificate, key))
    # `-e`: nginx opens its error log before it reads the configuration; `-g 'user ...'` since a root nginx would
    # switch to a `nobody` that cannot read the scratch directory.
    user = "root" if os.geteuid() == 0 else None
    command = [nginx, "-t", "-c", str(config), "-p", str(tmp_path), "-e", str(tmp_path / "error.log")]
    if user is not None:
        command += ["-g", f"user {user};"]
    done = subprocess.run(command, capture_output=True, timeout=T_WAIT, check=False)
    said = done.stderr.decode(errors="replace")
    assert done.returncode == 0, said
    assert "syntax is ok" in said and "test is successful" in said, said
