"""Text that is not valid Unicode never poisons a session, end to end over real stdio.

A model endpoint that streams a lone surrogate, or an emoji as two surrogate escapes in two chunks (as some proxies
do), gets its turn streamed (the emoji joined, the lone half as U+FFFD), stored, and the next prompt of the session
works. A client line whose JSON holds a lone surrogate escape, which orjson refuses, is repaired and answered by its
id like any other request.
"""

from __future__ import annotations

import sqlite3
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import StartServer
from tests.support.fake_openai import FakeOpenAI, chunk, raw_reply, text_reply
from tests.support.harness import RawClient

pytestmark = pytest.mark.timeout(60)

EMOJI = "\U0001f600"  # 😀, which JSON writes as the pair "\ud83d\ude00"


@pytest.fixture
def model() -> Iterator[FakeOpenAI]:
    with FakeOpenAI() as server:
        yield server


def content_chunk(escaped: str) -> str:
    """A chunk written by hand, so its content can hold JSON escapes exactly as given (a lone `\\ud83d`)."""
    return (
        '{"id":"chatcmpl-fake","object":"chat.completion.chunk","created":1700000000,"model":"fake-model",'
        f'"choices":[{{"index":0,"delta":{{"content":"{escaped}"}},"logprobs":null,"finish_reason":null}}]}}'
    )


def prompt(session_id: str, text: str) -> dict[str, Any]:
    return {"sessionId": session_id, "prompt": [{"type": "text", "text": text}]}


def stored_updates(state: Path) -> str:
    db = sqlite3.connect(state / "sessions.sqlite3")
    try:
        rows = [row[0] for row in db.execute("SELECT data FROM updates ORDER BY seq")]
    finally:
        db.close()
    return "".join((row if row[:1] == b"[" else zlib.decompress(row)).decode() for row in rows)


async def test_lone_and_split_surrogates_from_the_model_stream_are_stored_and_the_next_prompt_works(
    start_server: StartServer, model: FakeOpenAI, tmp_path: Path
) -> None:
    model.script(
        raw_reply(
            [
                chunk({"role": "assistant", "content": ""}),
                content_chunk("smile "),
                content_chunk("\\ud83d"),  # the emoji's first half ends this chunk ...
                content_chunk("\\ude00 and a lone "),  # ... and its second half starts the next
                content_chunk("\\udc00"),
                content_chunk(" end"),
                chunk({}, "stop"),
            ]
        )
    )
    model.set_default(text_reply("still here"))  # the session's title, and the next prompt
    state = tmp_path / "state"
    env = {"OPENAI_API_KEY": "sk-test-key", "ACP_SERVER_STATE_DIR": str(state)}
    client = await start_server("--model", "openai:fake-model", "--base-url", model.base_url, env=env)
    await client.initialize()
    session = await client.new_session(str(tmp_path))
    expected = f"smile {EMOJI} and a lone \ufffd end"
    first = await client.call("session/prompt", prompt(session, "hi"), timeout=30)
    assert first["result"] == {"stopReason": "end_turn"}
    assert "".join(client.texts(session)) == expected
    assert EMOJI in stored_updates(state) and "\ufffd" in stored_updates(state)
    second = await client.call("session/prompt", prompt(session, "again"), timeout=30)
    assert second["result"] == {"stopReason": "end_turn"}, second
    assert "".join(client.texts(session)) == expected + "still here"
    # The second prompt's model call: the session's title is asked for in a request of its own, which may come last.
    [history] = [
        r.body["messages"] for r in model.requests if {"role": "user", "content": "again"} in r.body["messages"]
    ]
    assert {"role": "assistant", "content": expected} in history


async def test_a_request_with_a_lone_surrogate_escape_is_repaired_and_answered_by_its_id(server: RawClient) -> None:
    line = (
        b'{"jsonrpc":"2.0","id":42,"method":"session/new","params":{"cwd":"/tmp","mcpServers":[],'
        b'"_meta":{"note":"half \\ud800 of it, and a whole \\ud83d\\ude00"}}}\n'
    )
    await server.write_raw(line)
    response = await server.response(42)
    assert "result" in response, response
    assert isinstance(response["result"]["sessionId"], str)
    # The connection goes on as before.
    assert "result" in await server.call("session/new", {"cwd": "/tmp", "mcpServers": []})
