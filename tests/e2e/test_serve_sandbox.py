"""What a principal's commands can reach under `acp-server serve` (REMOTE.md decision 5), for real: the console script
on 127.0.0.1, a WebSocket editor, scripted turns whose `run_command`s try to read the server's own files, a home
directory, the session's root and the system's directories; and `serve` refusing several principals where no such
sandbox can be had.

Two ways a read is refused, each with a test: outside every directory commands may read (a token file, state
directory and HOME under /var/tmp), Landlock answers EACCES; inside one (the test harness's state directory and
token file lie under /tmp, the temp directory commands may write), the launcher lays an empty read-only tmpfs or
/dev/null over them in the command's mount namespace, so nothing of them can be read.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import acp_server
from acp_server.runtime.sandbox import landlock_support, mount_isolation
from tests.e2e.test_serve import ALICE, BOB, Editor, editor, new_session, serving
from tests.support.harness import DEFAULT_ARGS, isolated_env, scaled, server_command

pytestmark = pytest.mark.timeout(90)

SUPPORT = landlock_support()
# CI runs where Landlock is: there a missing one fails the run instead of skipping it.
needs_landlock = pytest.mark.skipif(
    SUPPORT.abi < 1 and os.environ.get("CI") != "true", reason=f"no Landlock on this machine: {SUPPORT.reason}"
)
HAS_MOUNTS = SUPPORT.abi >= 1 and mount_isolation(SUPPORT.package_dir).ok


@pytest.fixture
def outside_tmp() -> Iterator[Path]:
    """A directory outside the temp directory (which commands may read and write): under /var/tmp."""
    base = Path(tempfile.mkdtemp(prefix="acp-serve-sandbox-", dir="/var/tmp"))
    try:
        yield base
    finally:
        shutil.rmtree(base, ignore_errors=True)


async def run_commands(client: Editor, session_id: str, commands: list[str]) -> list[tuple[int | None, str]]:
    """Each command a `run_command` of one scripted turn, in order: (exit code, the text the model read) of each."""
    mode = await client.call("session/set_mode", {"sessionId": session_id, "modeId": "bypass"})
    assert mode.get("result") == {}, mode
    steps: list[dict[str, Any]] = [{"tool": "run_command", "args": {"command": command}} for command in commands]
    answer = await client.call(
        "session/prompt",
        {
            "sessionId": session_id,
            "prompt": [{"type": "text", "text": "read"}],
            "_meta": {"scripted": [*steps, {"say": "done"}]},
        },
    )
    assert answer["result"] == {"stopReason": "end_turn"}, answer
    finals = [
        m["params"]["update"]
        for m in client.received
        if m.get("method") == "session/update"
        and m["params"]["sessionId"] == session_id
        and m["params"]["update"].get("sessionUpdate") == "tool_call_update"
        and m["params"]["update"].get("status") in ("completed", "failed")
    ]
    assert len(finals) == len(commands), finals
    outcomes = []
    for final in finals:
        text = "".join(c["content"]["text"] for c in final.get("content", []) if c["type"] == "content")
        # What the command wrote, without the line the agent adds for the model (`[exit code N]`).
        outcomes.append((final["rawOutput"]["exitCode"], re.sub(r"\n?\[exit code \d+\]$", "", text)))
    return outcomes


@needs_landlock
async def test_commands_read_the_root_and_the_system_but_not_the_servers_files_or_a_home(outside_tmp: Path) -> None:
    home = outside_tmp / "home"
    home.mkdir()
    (home / "notes.txt").write_text("home-secret\n")
    state = outside_tmp / "state"
    env = {
        "HOME": str(home),
        "ACP_SERVER_STATE_DIR": str(state),
        "ACP_SERVER_LOG_FILE": str(outside_tmp / "log" / "acp-server.log"),
    }
    async with serving(outside_tmp, env=env) as server, editor(server, ALICE, "alice") as alice:
        (server.workspace / "readme.txt").write_text("root-content\n")
        session = await new_session(alice, server.workspace)
        outcomes = await run_commands(
            alice,
            session,
            [
                "cat readme.txt",
                "head -c 4 /usr/bin/env | tail -c 3 && cat /etc/passwd > /dev/null",
                f"cat {outside_tmp / 'tokens'}",
                f"ls {state}",
                f"cat {home / 'notes.txt'}",
                "ls ~",
                "wc -c < /etc/shadow",
            ],
        )
    root, system, tokens, store, notes, listing, shadow = outcomes
    if os.geteuid() == 0 and HAS_MOUNTS:  # a root server's commands could read it (CAP_DAC_OVERRIDE): covered
        assert shadow == (0, "0"), shadow
    assert root == (0, "root-content"), root
    assert system[0] == 0 and "ELF" in system[1], system
    for outcome in (tokens, store, notes, listing):
        assert outcome[0] not in (0, None) and "Permission denied" in outcome[1], outcome
    everything = "".join(text for _, text in outcomes)
    assert ALICE not in everything and BOB not in everything and "home-secret" not in everything


def _in_temp(path: Path) -> bool:
    return os.path.realpath(path).startswith(os.path.realpath(tempfile.gettempdir()) + os.sep)


@needs_landlock
async def test_the_servers_files_inside_a_readable_directory_are_hidden_from_commands(tmp_path: Path) -> None:
    # The harness's state directory and the token file (tmp_path) lie under /tmp, which commands may read and write.
    state = Path(isolated_env()["ACP_SERVER_STATE_DIR"])
    assert _in_temp(state) and _in_temp(tmp_path)
    async with (
        serving(tmp_path, env={"ACP_SERVER_STATE_DIR": str(state)}) as server,
        editor(server, ALICE, "alice") as alice,
    ):
        session = await new_session(alice, server.workspace)  # the session store is now in the state directory
        assert os.listdir(state)
        outcomes = await run_commands(
            alice,
            session,
            [
                f"cat {tmp_path / 'tokens'}",
                f"ls -A {state}",
                f"cat {state}/*",
                f"echo made > {tmp_path}/probe && cat {tmp_path}/probe",
            ],
        )
    tokens, listing, store, elsewhere = outcomes
    everything = "".join(text for _, text in outcomes)
    assert ALICE not in everything and BOB not in everything, outcomes
    if HAS_MOUNTS:
        assert tokens == (0, "(no output)"), tokens  # /dev/null, laid over the file
        assert listing == (0, "(no output)"), listing  # an empty tmpfs, laid over the directory
        if _in_temp(Path(acp_server.__file__).parent):
            # A checkout under /tmp: the launcher's own code lies there, so commands may not write in /tmp at all
            # (runtime/sandbox.py `_safe_writable`, failing closed), and the probe is refused.
            assert elsewhere[0] != 0 and "Read-only file system" in elsewhere[1], elsewhere
        else:
            assert elsewhere == (0, "made"), elsewhere  # the rest of /tmp is the commands' as before
    else:  # nothing can be laid over them here: the command is not run at all
        assert all(code == 126 for code, _ in outcomes), outcomes
    assert store[0] != 0, store


def _serve_and_stop(tmp_path: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """`serve` with alice and bob in its token file: its exit status and stderr if it refuses to start, else (it
    served) stopped by its timeout, as a run that got past the check."""
    work = tmp_path / "work"
    work.mkdir(exist_ok=True)
    tokens = tmp_path / "tokens"
    tokens.write_text(f"alice {ALICE}\nbob {BOB}\n")
    tokens.chmod(0o600)
    process = subprocess.Popen(
        server_command("serve", "--listen", "127.0.0.1:0", "--token-file", str(tokens), *DEFAULT_ARGS, *args),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, **isolated_env(), **(env or {})},
        cwd=work,
    )
    assert process.stderr is not None
    seen = ""
    try:
        for line in process.stderr:  # ends with the refusal (EOF), or at the line that says it serves
            seen += line
            if "serving ws://" in line:
                break
    finally:
        if process.poll() is None:
            process.terminate()
        process.wait(timeout=scaled(20))
        process.stderr.close()
    return subprocess.CompletedProcess(process.args, process.returncode, "", seen)


def test_serve_refuses_several_principals_without_the_sandbox_unless_they_trust_each_other(tmp_path: Path) -> None:
    refused = _serve_and_stop(tmp_path, "--sandbox", "off")
    assert refused.returncode == 2, refused
    assert "refusing to serve 2 principals" in refused.stderr and "--sandbox off" in refused.stderr, refused
    assert "--principals-trust-each-other" in refused.stderr, refused  # what to do
    assert "serving ws://" not in refused.stderr
    for args, env in (
        (("--sandbox", "off", "--principals-trust-each-other"), None),
        (("--sandbox", "off"), {"ACP_SERVER_PRINCIPALS_TRUST_EACH_OTHER": "1"}),
    ):
        served = _serve_and_stop(tmp_path, *args, env=env)
        assert "serving ws://" in served.stderr, served
