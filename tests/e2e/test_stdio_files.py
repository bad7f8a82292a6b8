"""stdin and stdout may be regular files (a transcript piped in from disk, output captured to a file): asyncio's pipe
transports refuse those, so the server falls back to a worker thread. This checks that path end to end."""

from __future__ import annotations

import subprocess
from pathlib import Path

import orjson
import pytest

from tests.support.harness import scaled, server_command


@pytest.mark.timeout(30)
def test_server_reads_a_file_on_stdin_and_writes_a_file_on_stdout(tmp_path: Path) -> None:
    requests = [
        {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": 1}},
        {"jsonrpc": "2.0", "id": 2, "method": "session/new", "params": {"cwd": "/tmp", "mcpServers": []}},
        {"jsonrpc": "2.0", "id": 3, "method": "nope"},
    ]
    stdin = tmp_path / "in.jsonl"
    stdin.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in requests) + b"not json\n")
    stdout = tmp_path / "out.jsonl"
    with stdin.open("rb") as source, stdout.open("wb") as sink:
        done = subprocess.run(
            server_command(), check=False, stdin=source, stdout=sink, stderr=subprocess.PIPE, timeout=scaled(20)
        )
    assert done.returncode == 0
    answers = {m["id"]: m for m in map(orjson.loads, stdout.read_bytes().splitlines()) if "method" not in m}
    assert set(answers) == {1, 2, 3, None}
    assert answers[1]["result"]["protocolVersion"] == 1
    assert answers[2]["result"]["sessionId"]
    assert answers[3]["error"]["code"] == -32601
    assert answers[None]["error"]["code"] == -32700
    assert b"rejected line" in done.stderr
