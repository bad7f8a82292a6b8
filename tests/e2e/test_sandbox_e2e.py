"""The sandbox for local commands (runtime/sandbox.py) end to end: real servers over stdio, real `run_command`s that
try to write where they should not, and the files on disk afterwards as the proof.

The session's roots, the fake HOME and the "elsewhere" directory live under /var/tmp, never under /tmp: /tmp is the
temp directory, which workspace-write lets commands write, so a root there would prove nothing. The fallback (no
Landlock to be had) is made real by shadowing the landlockpy package on the server's PYTHONPATH with one that cannot
be imported, as on a machine where it is missing: the server must say so on stderr and run commands as before.
"""

from __future__ import annotations

import shutil
import socket
import sys
import tempfile
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import pytest

from acp_server.runtime.sandbox import NETWORK_ABI, landlock_support, mount_isolation
from tests.conftest import StartServer
from tests.support.harness import DEFAULT_ARGS, RawClient

ABI = landlock_support().abi
needs_landlock = pytest.mark.skipif(ABI < 1, reason=f"no Landlock on this machine: {landlock_support().reason}")
# Where directories outside the temp directory can be made for a test (the FHS's other temp place).
OUTSIDE_TMP = Path("/var/tmp")


@dataclass
class Places:
    root: Path  # the session's cwd
    extra: Path  # its additional directory
    home: Path  # the fake HOME the server (and so every command) gets
    elsewhere: Path  # a directory no session names
    temp: Path  # the server's temp directory (its TMPDIR)

    def env(self) -> dict[str, str]:
        # TMPDIR too, under /var/tmp: the temp directory commands may write is then ours wherever this checkout lies.
        # (A checkout under /tmp, as a CI clone may be, makes /tmp itself unwritable: it holds the launcher's code.)
        return {"HOME": str(self.home), "TMPDIR": str(self.temp)}


@pytest.fixture
def places(tmp_path: Path) -> Iterator[Places]:
    if not OUTSIDE_TMP.is_dir():
        pytest.skip(f"{OUTSIDE_TMP} does not exist: no place outside the temp directory to test in")
    base = Path(tempfile.mkdtemp(prefix="acp-sandbox-test-", dir=OUTSIDE_TMP))
    made = Places(base / "root", base / "extra", base / "home", base / "elsewhere", base / "temp")
    for path in (made.root, made.extra, made.home, made.elsewhere, made.temp):
        path.mkdir()
    (made.root / "readme.txt").write_text("kept\n")
    try:
        yield made
    finally:
        shutil.rmtree(base, ignore_errors=True)


@pytest.fixture
def etc_file() -> Iterator[Path]:
    """A file in /etc that must never come to exist (removed should a broken sandbox let a command write it)."""
    path = Path("/etc") / f"acp-sandbox-test-{uuid.uuid4().hex}"
    yield path
    path.unlink(missing_ok=True)


async def start(start_server: StartServer, places: Places, *args: str, env: dict[str, str] | None = None) -> RawClient:
    client = await start_server(*DEFAULT_ARGS, *args, env={**places.env(), **(env or {})})
    await client.initialize()
    return client


async def session_in(client: RawClient, places: Places) -> str:
    response = await client.call(
        "session/new", {"cwd": str(places.root), "additionalDirectories": [str(places.extra)], "mcpServers": []}
    )
    session_id: str = response["result"]["sessionId"]
    response = await client.call("session/set_mode", {"sessionId": session_id, "modeId": "bypass"})
    assert response.get("result") == {}, response
    return session_id


async def run_all(client: RawClient, session_id: str, commands: list[str]) -> list[tuple[int | None, str]]:
    """Each command a `run_command` of one turn, in order; (exit code, the text the model read) of each."""
    script: list[dict[str, Any]] = [{"tool": "run_command", "args": {"command": command}} for command in commands]
    response = await client.call(
        "session/prompt", client.prompt_message(session_id, [*script, {"say": "done"}])["params"]
    )
    assert response["result"] == {"stopReason": "end_turn"}, response
    finals = [
        update
        for update in client.updates(session_id, "tool_call_update")
        if update.get("status") in ("completed", "failed")
    ]
    assert len(finals) == len(commands), finals
    return [
        (
            final["rawOutput"]["exitCode"],
            "".join(c["content"]["text"] for c in final.get("content", []) if c["type"] == "content"),
        )
        for final in finals
    ]


# How a write outside the writable directories is refused: by the read-only mount namespace where the kernel lets
# commands have one (EROFS, before Landlock is asked), else by Landlock (EACCES).
REFUSAL = "Read-only file system" if mount_isolation(landlock_support().package_dir).ok else "Permission denied"


def refused(outcome: tuple[int | None, str], sandbox: str) -> None:
    code, text = outcome
    assert code not in (0, None), text
    assert REFUSAL in text, text
    assert f"it ran in the {sandbox} sandbox" in text, text  # the model is told why


@needs_landlock
async def test_workspace_write_lets_commands_write_only_in_the_roots_and_the_temp_directory(
    start_server: StartServer, places: Places, etc_file: Path
) -> None:
    client = await start(start_server, places)  # the default: workspace-write
    session_id = await session_in(client, places)
    outcomes = await run_all(
        client,
        session_id,
        [
            "echo made > inside.txt && cat readme.txt",
            f"mkdir {places.extra}/sub && echo made > {places.extra}/sub/f",
            f"echo made > {places.temp}/f",
            "echo evil >> ~/.bashrc",
            f"echo evil > {etc_file}",
            f"echo evil > {places.elsewhere}/f",
            # What the command starts is confined too, however it starts it.
            f"/bin/sh -c 'echo evil > {places.elsewhere}/nested' & wait $!",
            f"rm {places.root}/../home/.profile 2>&1 || touch {places.home}/.profile",
        ],
    )
    inside, extra, temp, bashrc, etc, elsewhere, nested, profile = outcomes
    assert inside[0] == 0 and "kept" in inside[1], inside
    assert (places.root / "inside.txt").read_text() == "made\n"
    assert extra[0] == 0 and (places.extra / "sub" / "f").read_text() == "made\n", extra
    assert temp[0] == 0 and (places.temp / "f").read_text() == "made\n", temp
    for outcome in (bashrc, etc, elsewhere, nested, profile):
        refused(outcome, "workspace-write")
    assert not (places.home / ".bashrc").exists()
    assert not (places.home / ".profile").exists()
    assert not await anyio.Path(etc_file).exists()
    assert list(places.elsewhere.iterdir()) == []


@needs_landlock
async def test_read_only_refuses_writes_in_the_roots_and_the_temp_directory_but_reads_everything(
    start_server: StartServer, places: Places
) -> None:
    client = await start(start_server, places, "--sandbox", "read-only")
    session_id = await session_in(client, places)
    outcomes = await run_all(
        client,
        session_id,
        [
            "cat readme.txt && echo discarded > /dev/null && ls /etc > /dev/null",
            "echo made > inside.txt",
            f"echo made > {places.temp}/f",
            "rm readme.txt",
        ],
    )
    reads, inside, temp, remove = outcomes
    assert reads[0] == 0 and "kept" in reads[1], reads
    for outcome in (inside, temp, remove):
        refused(outcome, "read-only")
    assert not (places.root / "inside.txt").exists()
    assert not (places.temp / "f").exists()
    assert (places.root / "readme.txt").read_text() == "kept\n"


@needs_landlock
async def test_a_directory_named_by_sandbox_writable_is_writable_too(start_server: StartServer, places: Places) -> None:
    cache = places.home / ".cache"
    cache.mkdir()
    client = await start(start_server, places, "--sandbox-writable", str(cache))
    session_id = await session_in(client, places)
    cached, elsewhere = await run_all(client, session_id, ["echo kept > ~/.cache/f", f"echo x > {places.elsewhere}/f"])
    assert cached[0] == 0 and (cache / "f").read_text() == "kept\n", cached
    refused(elsewhere, "workspace-write")


def _listener() -> socket.socket:
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(4)
    return listener


def _connect(port: int) -> str:
    return (
        f"{sys.executable} -c \"import socket; socket.create_connection(('127.0.0.1', {port}), 5); print('connected')\""
    )


@needs_landlock
@pytest.mark.skipif(ABI < NETWORK_ABI, reason=f"Landlock ABI {ABI} cannot refuse TCP (ABI {NETWORK_ABI} can)")
async def test_without_network_a_sandboxed_command_cannot_connect_and_with_it_it_can(
    start_server: StartServer, places: Places
) -> None:
    listener = _listener()
    try:
        port = listener.getsockname()[1]
        closed = await start(start_server, places, "--no-sandbox-network")
        (outcome,) = await run_all(closed, await session_in(closed, places), [_connect(port)])
        assert outcome[0] != 0 and "PermissionError" in outcome[1], outcome
        opened = await start(start_server, places)
        (outcome,) = await run_all(opened, await session_in(opened, places), [_connect(port)])
        assert outcome[0] == 0 and "connected" in outcome[1], outcome
    finally:
        listener.close()


async def test_sandbox_off_runs_commands_with_the_users_rights_as_before(
    start_server: StartServer, places: Places
) -> None:
    client = await start(start_server, places, "--sandbox", "off")
    session_id = await session_in(client, places)
    outcomes = await run_all(client, session_id, ["echo mine >> ~/.bashrc", f"echo mine > {places.elsewhere}/f"])
    assert [code for code, _ in outcomes] == [0, 0], outcomes
    assert (places.home / ".bashrc").read_text() == "mine\n"
    assert (places.elsewhere / "f").read_text() == "mine\n"
    assert all("sandbox" not in text for _, text in outcomes)


def no_landlock_env(tmp_path: Path) -> dict[str, str]:
    """A PYTHONPATH on which landlockpy cannot be imported, as where it is not installed."""
    shadow = tmp_path / "shadow"
    (shadow / "landlockpy").mkdir(parents=True)
    (shadow / "landlockpy" / "__init__.py").write_text('raise ImportError("landlockpy is not installed here")\n')
    return {"PYTHONPATH": str(shadow)}


async def test_where_no_sandbox_is_possible_the_server_says_so_at_start_and_runs_commands_as_before(
    start_server: StartServer, places: Places, tmp_path: Path
) -> None:
    client = await start(start_server, places, env=no_landlock_env(tmp_path))
    session_id = await session_in(client, places)
    outcomes = await run_all(client, session_id, [f"echo mine > {places.elsewhere}/f"])
    assert outcomes[0][0] == 0, outcomes
    assert (places.elsewhere / "f").read_text() == "mine\n"
    assert (
        "NOT sandboxed: it ran with the user's full rights (the landlockpy package cannot be imported"
        in (outcomes[0][1])
    )  # the model is told, so it does not take the writes it makes for confined ones
    code, _ = await client.close()
    assert code == 0
    assert "no sandbox for commands: the landlockpy package cannot be imported" in client.stderr_text
    assert "local commands run with the user's full rights" in client.stderr_text


@pytest.mark.parametrize(
    ("args", "env"),
    [(["--sandbox", "workspace-write"], {}), ([], {"ACP_SERVER_SANDBOX": "read-only"})],
    ids=["flag", "variable"],
)
async def test_a_sandbox_asked_for_by_name_that_cannot_be_had_refuses_commands_and_the_server_keeps_serving(
    start_server: StartServer, places: Places, tmp_path: Path, args: list[str], env: dict[str, str]
) -> None:
    client = await start(start_server, places, *args, env={**no_landlock_env(tmp_path), **env})
    session_id = await session_in(client, places)
    for attempt in ("first", "second"):  # the connection and the session keep working after a refusal
        response = await client.call(
            "session/prompt",
            client.prompt_message(
                session_id,
                [{"tool": "run_command", "args": {"command": f"echo {attempt} > {places.elsewhere}/f"}}, {"say": "ok"}],
            )["params"],
        )
        assert response["result"] == {"stopReason": "end_turn"}, response
    finals = [u for u in client.updates(session_id, "tool_call_update") if u.get("status") in ("completed", "failed")]
    assert [final["status"] for final in finals] == ["failed", "failed"], finals
    text = "".join(c["content"]["text"] for c in finals[0].get("content", []) if c["type"] == "content")
    assert "sandbox was asked for but cannot be had: the landlockpy package cannot be imported" in text, text
    assert "no command is run" in text, text
    assert not (places.elsewhere / "f").exists()
    code, _ = await client.close()
    assert code == 0
    assert "run_command refuses every command" in client.stderr_text


async def test_on_v2_a_refused_command_shows_no_terminal_and_the_tool_call_says_why(
    start_server: StartServer, tmp_path: Path
) -> None:
    server = await start_server(*DEFAULT_ARGS, "--sandbox", "read-only", env=no_landlock_env(tmp_path))
    await server.initialize_v2()
    session_id = await server.new_session_v2()
    response = await server.call(
        "session/set_config_option", {"sessionId": session_id, "configId": "mode", "type": "id", "value": "bypass"}
    )
    assert "result" in response, response
    await server.prompt(session_id, [{"tool": "run_command", "args": {"command": f"touch {tmp_path}/ran"}}])
    await server.idle(session_id)
    assert server.updates(session_id, "terminal_update") == []  # nothing ran, so no terminal was shown
    finals = [u for u in server.updates(session_id, "tool_call_update") if u.get("status") in ("completed", "failed")]
    assert [final["status"] for final in finals] == ["failed"], finals
    assert "the read-only sandbox was asked for but cannot be had" in str(finals[0]), finals
    assert not (tmp_path / "ran").exists()
