"""A real PostgreSQL server for the tests of the PostgreSQL session store (store/postgres.py), started and stopped here.

PostgreSQL refuses to run as root, and CI runs as root: as root the server runs as the `postgres` user the Debian
package creates (`runuser -u postgres --`), in a directory of its own under /tmp owned by that user (pytest's
tmp_path is a root-only 0700 directory it could not enter); as anyone else, as that user. It listens on 127.0.0.1 on
a free port (its unix socket in its own directory), trusts loopback connections, and keeps nothing past the run
(fsync off: the tests kill the server's clients, never the machine). Every wait is bounded; `stop` stops it
(`pg_ctl stop -m fast`) and removes the directory; `restart` (or `stop(remove=False)` then `start`) restarts it under
its clients. One server per pytest process (each xdist worker starts its own),
a database per test (`database`), so tests never see each other's rows.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import tempfile
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.support.harness import scaled

__all__ = ["PG_BIN", "PostgresServer", "count_rows_at", "postgres_missing", "start_postgres"]

PG_BIN = Path(os.environ.get("ACP_TEST_PG_BIN", "/usr/lib/postgresql/15/bin"))


def postgres_missing() -> str | None:
    """Why no server can be started here, or None."""
    if not (PG_BIN / "initdb").exists() or not (PG_BIN / "pg_ctl").exists():
        return f"PostgreSQL is not installed (no {PG_BIN}/initdb; apt-get install postgresql)"
    if os.geteuid() == 0:
        try:
            import pwd

            pwd.getpwnam("postgres")
        except KeyError:
            return "running as root, and there is no `postgres` user to run PostgreSQL as"
        if shutil.which("runuser") is None:
            return "running as root, and there is no runuser to run PostgreSQL as the `postgres` user"
    try:
        import psycopg  # noqa: F401
    except ImportError:
        return "psycopg is not installed (pip install -e '.[test]')"
    return None


def count_rows_at(url: str, sql: str, *params: Any) -> int:
    """A count (SQLite's `?` placeholders) read by a connection of its own, as another replica would see it."""
    import psycopg

    with psycopg.connect(url, autocommit=True, connect_timeout=int(scaled(10))) as conn:
        row = conn.execute(sql.replace("?", "%s"), params).fetchone()
    assert row is not None
    return int(row[0])


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


@dataclass
class PostgresServer:
    directory: Path
    port: int
    as_postgres: bool
    fsync: bool = False  # off for the tests (they kill clients, never the machine); on for figures (bench/)

    @property
    def admin_url(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def url(self, database: str) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/{database}"

    def database(self) -> str:
        """A new, empty database of its own; its URL."""
        import psycopg

        name = f"t_{uuid.uuid4().hex[:16]}"
        with psycopg.connect(self.admin_url, autocommit=True, connect_timeout=int(scaled(10))) as conn:
            conn.execute(f"CREATE DATABASE {name}")
        return self.url(name)

    def drop(self, url: str) -> None:
        import psycopg

        name = url.rpartition("/")[2]
        with (
            contextlib.suppress(psycopg.Error),
            psycopg.connect(self.admin_url, autocommit=True, connect_timeout=int(scaled(10))) as conn,
        ):
            conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")

    def ctl(self, *args: str, timeout: float = 30.0) -> subprocess.CompletedProcess[str]:
        return _run(self.as_postgres, [str(PG_BIN / "pg_ctl"), "-D", str(self.directory / "data"), *args], timeout)

    def start(self) -> None:
        options = f"-h 127.0.0.1 -p {self.port} -k {self.directory} -c max_connections=200"
        if not self.fsync:
            options += " -F"
        wait = str(int(scaled(30)))
        result = self.ctl(
            "-o", options, "-l", str(self.directory / "log"), "-w", "-t", wait, "start", timeout=scaled(40)
        )
        if result.returncode != 0:
            log = (
                (self.directory / "log").read_text(errors="replace")[-2000:]
                if (self.directory / "log").exists()
                else ""
            )
            raise RuntimeError(f"pg_ctl start failed: {result.stdout}{result.stderr}\n{log}")

    def restart(self) -> None:
        """Stop the server (`-m fast`: its clients' connections are ended, as a real restart does) and start it again
        on the same port and data: what replicas see when the database restarts under them."""
        self.stop(remove=False)
        self.start()

    def stop(self, *, remove: bool = True) -> None:
        self.ctl("-m", "fast", "-w", "-t", str(int(scaled(30))), "stop", timeout=scaled(40))
        if remove:
            shutil.rmtree(self.directory, ignore_errors=True)


def _run(as_postgres: bool, command: list[str], timeout: float) -> subprocess.CompletedProcess[str]:
    prefix = ["runuser", "-u", "postgres", "--"] if as_postgres else []
    return subprocess.run(
        [*prefix, *command],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        stdin=subprocess.DEVNULL,
        env={**os.environ, "LC_ALL": "C"},
    )


def start_postgres(*, fsync: bool = False) -> PostgresServer:
    """A new server, running; RuntimeError (with its log) when it cannot start. `fsync`: commits reach the disk, as
    in production (for figures; the tests leave it off)."""
    as_postgres = os.geteuid() == 0
    directory = Path(tempfile.mkdtemp(prefix="acp-test-pg-", dir="/tmp"))
    if as_postgres:
        shutil.chown(directory, "postgres", "postgres")
    directory.chmod(0o700)
    init = _run(
        as_postgres,
        [
            str(PG_BIN / "initdb"),
            "-D",
            str(directory / "data"),
            "-A",
            "trust",
            "-U",
            "postgres",
            "-E",
            "UTF8",
            "--locale=C",
            "--no-sync",
            "--no-instructions",
        ],
        scaled(60),
    )
    if init.returncode != 0:
        shutil.rmtree(directory, ignore_errors=True)
        raise RuntimeError(f"initdb failed: {init.stdout}{init.stderr}")
    for _attempt in range(3):  # the free port may be taken between the probe and the start
        server = PostgresServer(directory, _free_port(), as_postgres, fsync)
        try:
            server.start()
        except RuntimeError:
            if _attempt == 2:
                shutil.rmtree(directory, ignore_errors=True)
                raise
            continue
        return server
    raise AssertionError("unreachable")
