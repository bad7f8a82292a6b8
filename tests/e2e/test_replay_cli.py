"""`acp-server replay FILE -- AGENT_CMD...` and `assert_replays`, run as a user would, against acp-server itself.

Every transcript the project holds must replay with exit 0 through the command too (not only through the tests'
own raw client), and an altered transcript must fail with a diff that names what was altered. The agent is always
a real `acp-server` subprocess started by the replay command.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest

from acp_server.transcripts.format import Line, Transcript, dump_transcript, load_transcript
from acp_server.transcripts.testing import assert_replays
from tests.support.harness import isolated_env, scaled, server_command
from tests.support.transcripts import TRANSCRIPT_DIR, server_args
from tests.support.transcripts import run_replay_command as replay

TRANSCRIPTS = sorted(TRANSCRIPT_DIR.glob("*.jsonl"))


def agent_command(transcript: Transcript) -> list[str]:
    return server_command(*server_args(transcript))


def edited(path: Path, tmp_path: Path, edit: Any) -> Path:
    """A copy of a transcript with `edit(json text of a line) -> json text` applied to every line."""
    transcript = load_transcript(path)
    lines = [
        Line(**{**vars(line), "msg": orjson.loads(edit(orjson.dumps(line.msg).decode()))}) for line in transcript.lines
    ]
    copy = tmp_path / f"edited_{path.name}"
    copy.write_bytes(dump_transcript(Transcript(lines, transcript.args, transcript.timeout, copy.name)))
    return copy


# How long a replay that is meant to mismatch waits for each expected output: short, but a scaled safety bound, so
# the parts that do match have arrived by then on a loaded machine.
MISMATCH_WAIT = scaled(1.0)


def scaled_wait(path: Path) -> tuple[str, str]:
    """The transcript's own wait, scaled for a loaded machine (a replay that must match waits for its output)."""
    return ("--timeout", f"{scaled(load_transcript(path).timeout):g}")


@pytest.mark.timeout(60)
@pytest.mark.parametrize("path", TRANSCRIPTS, ids=[path.stem for path in TRANSCRIPTS])
def test_every_project_transcript_replays_through_the_command(path: Path) -> None:
    result = replay(str(path), *scaled_wait(path), "--", *agent_command(load_transcript(path)))
    assert result.returncode == 0, result.stderr
    assert f"{path.name}: match" in result.stderr
    assert result.stdout == ""


def test_an_altered_transcript_fails_with_a_diff_naming_the_difference(tmp_path: Path) -> None:
    original = TRANSCRIPT_DIR / "i01_cancel_during_gate.jsonl"
    altered = edited(
        original, tmp_path, lambda text: text.replace('"stopReason":"cancelled"', '"stopReason":"end_turn"')
    )
    result = replay(str(altered), "--timeout", str(MISMATCH_WAIT), "--", *agent_command(load_transcript(original)))
    assert result.returncode == 1, result.stderr
    assert "MISMATCH" in result.stderr
    assert '-← [session $session1] {"id":10,"jsonrpc":"2.0","result":{"stopReason":"end_turn"}}' in result.stderr
    assert '+← [session $session1] {"id":10,"jsonrpc":"2.0","result":{"stopReason":"cancelled"}}' in result.stderr


def test_replay_goes_on_after_a_difference_and_reports_every_one(tmp_path: Path) -> None:
    original = TRANSCRIPT_DIR / "echo_conversation.jsonl"

    def two_changes(text: str) -> str:
        text = text.replace('"title":"Hello there, this is a somewhat"', '"title":"A wrong title"')
        return text.replace('"id":4,"result":{"stopReason":"end_turn"}', '"id":4,"result":{"stopReason":"max_tokens"}')

    altered = edited(original, tmp_path, two_changes)
    lenient = replay(str(altered), "--timeout", str(MISMATCH_WAIT), "--", *agent_command(load_transcript(original)))
    assert lenient.returncode == 1
    assert '"title":"A wrong title"' in lenient.stderr
    assert '+← [session $session1] {"id":4,"jsonrpc":"2.0","result":{"stopReason":"end_turn"}}' in lenient.stderr
    assert f"note: waited {MISMATCH_WAIT} s for the output expected before sending" in lenient.stderr
    strict = replay(
        str(altered), "--strict", "--timeout", str(MISMATCH_WAIT), "--", *agent_command(load_transcript(original))
    )
    assert strict.returncode == 1
    assert f"gave up after {MISMATCH_WAIT} s" in strict.stderr
    assert '+← [session $session1] {"id":4' not in strict.stderr, "strict: the second prompt was never sent"


def test_answers_go_to_the_agents_requests_by_method_and_order_whatever_ids_were_recorded(tmp_path: Path) -> None:
    """The transcript's agent numbered its requests 100 and 101; this one numbers them its own way."""
    original = TRANSCRIPT_DIR / "rec_client_request.jsonl"
    assert '"id":"$req1"' in original.read_text()
    renumbered = edited(original, tmp_path, lambda text: text.replace('"$req1"', "100").replace('"$req2"', "101"))
    assert '"id":100,"method":"fs/read_text_file"' in renumbered.read_text().replace('"jsonrpc":"2.0",', "")
    result = replay(str(renumbered), *scaled_wait(original), "--", *agent_command(load_transcript(original)))
    assert result.returncode == 0, result.stderr


@pytest.mark.parametrize(
    ("args", "complaint"),
    [
        ([str(TRANSCRIPT_DIR / "bad_input.jsonl")], "the agent command goes after --"),
        ([str(TRANSCRIPT_DIR / "bad_input.jsonl"), "--"], "the agent command goes after --"),
        (["/nonexistent/t.jsonl", "--", "acp-server"], "No such file"),
        ([str(TRANSCRIPT_DIR / "bad_input.jsonl"), "--", "/nonexistent/agent"], "cannot start '/nonexistent/agent'"),
        ([str(TRANSCRIPT_DIR / "bad_input.jsonl"), "--path", "relative=x", "--", "acp-server"], "--path takes OLD=NEW"),
        ([str(TRANSCRIPT_DIR / "bad_input.jsonl"), "--bogus", "--", "acp-server"], "unrecognized arguments"),
    ],
    ids=["no-separator", "no-command", "no-transcript", "no-agent", "bad-path", "bad-flag"],
)
def test_usage_and_start_errors_exit_2(args: list[str], complaint: str) -> None:
    result = replay(*args)
    assert result.returncode == 2, result.stderr
    assert complaint in result.stderr


def test_a_transcript_that_does_not_parse_exits_2(tmp_path: Path) -> None:
    broken = tmp_path / "broken.jsonl"
    broken.write_text('{"dir":"in","msg":{}}\n{"dir":"sideways"}\n')
    result = replay(str(broken), "--", "acp-server")
    assert result.returncode == 2
    assert 'broken.jsonl:2: expected an object with "dir"' in result.stderr


def test_an_agent_that_exits_at_once_is_a_start_error() -> None:
    result = replay(str(TRANSCRIPT_DIR / "bad_input.jsonl"), "--", "sh", "-c", "exit 3")
    assert result.returncode == 2
    assert "exited with status 3 before writing anything" in result.stderr


# --- the pytest helper ---


def test_assert_replays_passes_on_a_project_transcript(monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in isolated_env().items():
        monkeypatch.setenv(name, value)
    path = TRANSCRIPT_DIR / "echo_conversation.jsonl"
    outcome = assert_replays(path, server_command("--model", "echo"), timeout=scaled(load_transcript(path).timeout))
    assert outcome.ok and outcome.actual == outcome.expected


def test_assert_replays_fails_with_the_diff(monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in isolated_env().items():
        monkeypatch.setenv(name, value)
    path = TRANSCRIPT_DIR / "echo_conversation.jsonl"
    # The same transcript against the wrong agent: the scripted model answers differently from echo.
    with pytest.raises(AssertionError) as failure:
        assert_replays(path, server_command("--model", "scripted"), strict=True, timeout=scaled(1))
    assert "echo_conversation.jsonl does not replay against" in str(failure.value)
    assert '"currentValue":"echo"' in str(failure.value)
