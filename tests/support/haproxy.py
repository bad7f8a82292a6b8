"""A real HAProxy (Debian's package) in front of `acp-server serve` replicas, for the tests of issue 24: the
configuration is the one docs/deploy.md shows (read out of the page, so the page and the tests cannot drift), with
its listen address and its servers' addresses replaced by free loopback ports.

`haproxy_config(...)` gives the text; `running_haproxy(...)` starts it in the foreground (`-db`), waits (bounded)
until it accepts connections and every server it was given is up by its health check, and stops it on the way out
(SIGTERM, then SIGKILL). Also `nginx_config` for `nginx -t`. Where the binary is missing the test is skipped, and
fails under `CI=true` (`.ci/run` installs both).
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import anyio
import anyio.abc
import httpx
import pytest

from tests.support.harness import T_START, T_WAIT, scaled

__all__ = [
    "DEPLOY_DOC",
    "HAProxy",
    "deploy_block",
    "free_port",
    "haproxy_config",
    "need_binary",
    "nginx_config",
    "running_haproxy",
]

DEPLOY_DOC = Path(__file__).resolve().parents[2] / "docs" / "deploy.md"


def need_binary(name: str) -> str:
    """The path of `name` (also looked for in /usr/sbin, where Debian puts haproxy and nginx), else a skip that
    says how to install it; under CI=true a failure (`.ci/run` installs it, so a missing one is a broken run)."""
    found = shutil.which(name) or shutil.which(name, path="/usr/sbin:/sbin")
    if found is None:
        why = f"`{name}` is not installed: apt-get install {name} (.ci/run does)"
        if os.environ.get("CI") == "true":
            pytest.fail(why)
        pytest.skip(why)
    assert found is not None
    return found


def free_port() -> int:
    """A port free on 127.0.0.1 now (the kernel's pick)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def deploy_block(first_line: str) -> str:
    """The fenced block of docs/deploy.md whose first line is `first_line` (its file's name in a comment)."""
    text = DEPLOY_DOC.read_text()
    for block in re.findall(r"^```[a-z]*\n(.*?)^```$", text, flags=re.MULTILINE | re.DOTALL):
        if block.startswith(first_line + "\n"):
            return str(block)
    raise AssertionError(f"docs/deploy.md has no block starting {first_line!r}")


def haproxy_config(listen_port: int, servers: Mapping[str, int]) -> str:
    """docs/deploy.md's HAProxy configuration, listening on 127.0.0.1:`listen_port` without TLS (the page's `bind`
    line replaced), its servers by name at 127.0.0.1 and the given ports. Every server the page names must be given
    one, and nothing else is changed."""
    text = deploy_block("# /etc/haproxy/haproxy.cfg")
    text, binds = re.subn(r"(?m)^(\s*)bind .*$", rf"\g<1>bind 127.0.0.1:{listen_port}", text)
    assert binds == 1, "the page's HAProxy configuration should have one bind line"
    named: list[str] = []

    def server(match: re.Match[str]) -> str:
        name = match.group(2)
        named.append(name)
        return f"{match.group(1)}server {name} 127.0.0.1:{servers[name]}{match.group(3)}"

    text = re.sub(r"(?m)^(\s*)server (\S+) \S+(.*)$", server, text)
    assert sorted(named) == sorted(servers), f"the page names servers {named}, the test has {sorted(servers)}"
    return text


def nginx_config(scratch: Path, certificate: Path, key: Path) -> str:
    """A whole nginx.conf around docs/deploy.md's `conf.d/acp.conf` (nginx includes conf.d files in its `http`
    block), with what `nginx -t` touches (the pid file, the logs, the temporary directories) under `scratch`, and
    the page's certificate and key replaced by the given ones."""
    site = deploy_block("# /etc/nginx/conf.d/acp.conf")
    site, certificates = re.subn(r"(?m)^(\s*ssl_certificate)(\s+)\S+;$", rf"\g<1>\g<2>{certificate};", site)
    site, keys = re.subn(r"(?m)^(\s*ssl_certificate_key)(\s+)\S+;$", rf"\g<1>\g<2>{key};", site)
    assert certificates == keys == 1
    temp = {name: scratch / name for name in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi")}
    for path in temp.values():
        path.mkdir(exist_ok=True)
    return (
        f"pid {scratch / 'nginx.pid'};\n"
        f"error_log {scratch / 'error.log'};\n"
        "events {}\n"
        "http {\n"
        f"    access_log {scratch / 'access.log'};\n"
        f"    client_body_temp_path {temp['client_body']};\n"
        f"    proxy_temp_path {temp['proxy']};\n"
        f"    fastcgi_temp_path {temp['fastcgi']};\n"
        f"    uwsgi_temp_path {temp['uwsgi']};\n"
        f"    scgi_temp_path {temp['scgi']};\n"
        f"{site}"
        "}\n"
    )


@dataclass(slots=True)
class HAProxy:
    """A running HAProxy: where it listens (http://127.0.0.1:PORT), its process, what it logged."""

    port: int
    process: anyio.abc.Process
    log: bytearray

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


async def _servers_up(health: list[str]) -> bool:
    async with httpx.AsyncClient(trust_env=False, timeout=scaled(1.0)) as client:
        for url in health:
            try:
                if (await client.get(url)).status_code != 200:
                    return False
            except httpx.HTTPError:
                return False
    return True


@asynccontextmanager
async def running_haproxy(config: str, scratch: Path, port: int, health: Sequence[str] = ()) -> AsyncIterator[HAProxy]:
    """HAProxy with `config` (checked first with `haproxy -c`) in the foreground, listening on `port` (the config's);
    ready once it accepts connections and each URL of `health` (the servers' `/healthz` through nothing) answers,
    plus a health-check interval, so its checks have seen them up. Stopped on the way out, whatever happened."""
    binary = need_binary("haproxy")
    path = scratch / "haproxy.cfg"
    path.write_text(config)
    with anyio.fail_after(T_WAIT):
        checked = await anyio.run_process([binary, "-c", "-f", str(path)], check=False)
    assert checked.returncode == 0, checked.stdout.decode() + checked.stderr.decode()
    log = bytearray()
    process = await anyio.open_process(
        [binary, "-db", "-f", str(path)], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
    )

    async def collect() -> None:
        assert process.stdout is not None
        async for data in process.stdout:
            log.extend(data)

    try:
        async with anyio.create_task_group() as group:
            group.start_soon(collect)
            with anyio.fail_after(T_START * 8):
                while True:
                    assert process.returncode is None, f"haproxy ended: {log.decode(errors='replace')}"
                    try:
                        stream = await anyio.connect_tcp("127.0.0.1", port)
                    except OSError:
                        await anyio.sleep(0.02)
                        continue
                    await stream.aclose()
                    break
                while not await _servers_up(list(health)):  # noqa: ASYNC110 - other processes' health: no event
                    await anyio.sleep(0.05)
            # The config's checks run every second (`inter 1s`) and a server starts up (`rise` counts from there):
            # give them a round so the first request finds every server up.
            await anyio.sleep(1.2)
            try:
                yield HAProxy(port, process, log)
            finally:
                group.cancel_scope.cancel()
    finally:
        with anyio.CancelScope(shield=True):
            if process.returncode is None:
                process.send_signal(signal.SIGTERM)
                with anyio.move_on_after(T_WAIT):
                    await process.wait()
                if process.returncode is None:
                    process.kill()
                    await process.wait()
