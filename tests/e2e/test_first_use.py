"""What a person meets first, end to end: bare `--model scripted` plays the built-in demo (and `doctor` agrees), a
bare `acp-server` in a terminal says what it is, `chat` takes the server's flags, and the README points only at
files in the repository."""

from __future__ import annotations

import os
import pty
import re
import select
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import StartServer
from tests.e2e.test_doctor import doctor
from tests.support.harness import isolated_env, scaled, server_command

REPO = Path(__file__).resolve().parents[2]


async def test_bare_scripted_model_plays_the_built_in_demo_with_text_a_plan_and_a_tool_call(
    start_server: StartServer, tmp_path: Path
) -> None:
    (tmp_path / "notes.txt").write_text("hello\n")
    server = await start_server("--model", "scripted")
    await server.initialize()
    session = await server.new_session(str(tmp_path))
    prompt = {"sessionId": session, "prompt": [{"type": "text", "text": "show me"}]}
    assert (await server.call("session/prompt", prompt))["result"] == {"stopReason": "end_turn"}
    shown = [
        "list" if u.get("kind") == "search" else u["sessionUpdate"]
        for u in server.updates(session)
        if u["sessionUpdate"] in ("agent_thought_chunk", "agent_message_chunk", "plan")
        or (u["sessionUpdate"] == "tool_call" and u.get("kind") == "search")
    ]
    # A thought, text in several chunks, a plan, the listing, the final plan and the closing text.
    assert shown.index("agent_thought_chunk") < shown.index("agent_message_chunk") < shown.index("plan")
    assert shown.index("plan") < shown.index("list") < len(shown) - 1 - shown[::-1].index("plan")
    assert shown[-1] == "agent_message_chunk" and len(server.texts(session)) >= 3
    listing = [u for u in server.updates(session, "tool_call_update") if u.get("status") == "completed"]
    assert any("notes.txt" in str(u.get("content")) for u in listing), listing
    assert [e["status"] for e in server.updates(session, "plan")[-1]["entries"]] == ["completed"] * 3
    # The second prompt plays the demo's second turn, and so does every later one: the same answer each time.
    again = [dict(prompt), dict(prompt)]
    answers = []
    for request in again:
        before = len(server.texts(session))
        assert (await server.call("session/prompt", request))["result"] == {"stopReason": "end_turn"}
        answers.append("".join(server.texts(session)[before:]))
    assert answers[0] == answers[1] and "built-in demo" in answers[0]


def test_doctor_says_bare_scripted_plays_the_built_in_demo() -> None:
    report = doctor("--model", "scripted")
    assert report.code == 0, report.text
    assert "built-in demo" in report.line("OK   model:")
