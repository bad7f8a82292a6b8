"""What the store keeps of a v2 turn's tool call updates (acp_server/protocol/v2/updates.py `_log`): v1's update, never
naming a display terminal, which only v2 has and which is kept as records of its own."""

from __future__ import annotations

import types
from typing import Any

import pytest

from acp_server.protocol.replay import render
from acp_server.protocol.v2.updates import _log
from acp_server.runtime.model import TextOutput, ToolContentAppended

pytestmark = pytest.mark.timeout(10)


class _Log:
    def __init__(self) -> None:
        self.entries: list[Any] = []

    def append(self, entry: Any) -> None:
        self.entries.append(entry)


def test_an_item_appended_after_a_display_terminal_is_kept_without_the_terminal() -> None:
    turn_log = _Log()
    run = types.SimpleNamespace(turn_log=turn_log, parent_session_id=None)
    text = {"type": "content", "content": {"type": "text", "text": "more"}}
    v1 = {
        "sessionUpdate": "tool_call_update",
        "toolCallId": "call_1",
        "content": [{"type": "terminal", "terminalId": "term_1"}, text],
    }
    _log(run, v1, ToolContentAppended("call_1", TextOutput("more")))  # type: ignore[arg-type]
    [entry] = turn_log.entries
    assert render(entry) == {"sessionUpdate": "tool_call_update", "toolCallId": "call_1", "content": [text]}
