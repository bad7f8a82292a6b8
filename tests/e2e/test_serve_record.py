"""`acp-server serve --record DIR`: one transcript per connection, in stdio's format, replayable, never with a token.

A real `serve` (tests/e2e/test_serve.py's `serving`), two editors over WebSocket speaking v1 and v2, then the files
checked as a person would use them: named with each connection's `Acp-Connection-Id`, private, free of tokens, and
replayed by `acp-server replay` against a stdio acp-server (tests/e2e/test_replay_cli.py's way) to a match.
"""

from __future__ import annotations

import functools
import os
import stat
import subprocess
from pathlib import Path
from typing import Any

import anyio
import pytest

from tests.e2e.test_serve import ALICE, BOB, Editor, editor, new_session, serving
from tests.support.harness import DEFAULT_ARGS, T_WAIT, isolated_env, scaled, server_command
from tests.support.transcripts import run_replay_command

pytestmark = pytest.mark.timeout(90)


async def one_turn(client: Editor, cwd: Path, version: int, text: str) -> None:
    session = await new_session(client, cwd)
    params: dict[str, Any] = {
        "sessionId": session,
        "prompt": [{"type": "text", "text": text}],
        "_meta": {"scripted": [{"say": "heard you"}]},
    }
    answer = await client.call("session/prompt", params)
    if version == 1:
        assert answer["result"] == {"stopReason": "end_turn"}
        return
    await client.wait_for(
        lambda m: (
            m.get("method") == "session/update"
            and m["params"]["update"].get("sessionUpdate") == "state_update"
            and m["params"]["update"].get("state") == "idle"
        ),
        T_WAIT,
    )


def connection_id(client: Editor) -> str:
    assert client.ws.response is not None
    return str(client.ws.response.headers["Acp-Connection-Id"])


async def test_serve_record_writes_one_private_transcript_per_connection_that_replays_and_holds_no_token(
    tmp_path: Path,
) -> None:
    recordings = tmp_path / "transcripts"
    ids = []
    async with serving(tmp_path, "--record", str(recordings)) as server:
        async with editor(server, ALICE, "alice", 1) as alice:
            ids.append(connection_id(alice))
            # A client that writes its own token into a message: the transcript still never holds it.
            await one_turn(alice, server.workspace, 1, f"my token is {ALICE}")
        async with editor(server, BOB, "bob", 2) as bob:
            ids.append(connection_id(bob))
            await one_turn(bob, server.workspace, 2, "hello from v2")
    files = sorted(recordings.iterdir())
    assert sorted(path.name for path in files) == sorted(f"{one}.jsonl" for one in ids)
    assert stat.S_IMODE(recordings.stat().st_mode) == 0o700
    for path in files:
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        data = path.read_bytes()
        assert ALICE.encode() not in data and BOB.encode() not in data
        assert b"authorization" not in data.lower()
        assert b'"eof":true' in data.splitlines()[-1], "the connection's close is its EOF"
        replay = (str(path), "--timeout", f"{scaled(5):g}", "--", *server_command(*DEFAULT_ARGS))
        replayed = await anyio.to_thread.run_sync(functools.partial(run_replay_command, *replay))
        assert replayed.returncode == 0, replayed.stderr
        assert f"{path.name}: match" in replayed.stderr
    assert b"[redacted]" in (recordings / f"{ids[0]}.jsonl").read_bytes()


def test_serve_record_refuses_a_path_that_is_not_a_directory(tmp_path: Path) -> None:
    taken = tmp_path / "a-file"
    taken.write_text("")
    tokens = tmp_path / "tokens"
    tokens.write_text(f"alice {ALICE}\n")
    tokens.chmod(0o600)
    result = subprocess.run(
        server_command("serve", "--listen", "127.0.0.1:0", "--token-file", str(tokens), "--record", str(taken)),
        capture_output=True,
        text=True,
        env={**os.environ, **isolated_env()},
        cwd=tmp_path,
        stdin=subprocess.DEVNULL,
        timeout=scaled(20),
        check=False,
    )
    assert result.returncode == 2, result
    assert "--record" in result.stderr and "not a directory" in result.stderr
