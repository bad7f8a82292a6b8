"""`acp-openai-gateway` 0.1.0 from PyPI in front of a real `acp-server serve` (issue 23, item 7): both as
subprocesses on 127.0.0.1 (ports chosen by the OS), the gateway driven over its OpenAI-compatible API with httpx.

The gateway speaks the Streamable HTTP profile its own way: one ACP connection for its whole life (never a
`DELETE`), a fresh GET of the connection's stream around each `session/new` (two chats at once: two readers of that
stream) and of the session's stream around each prompt. It has no upstream-credential setting, so the token rides
in its URL (`http://alice:TOKEN@...`), which httpx sends as HTTP Basic. docs/remote.md ("Behind an
OpenAI-compatible API") records what the server does for it.

The agent is `--model echo`: the reply is the prompt's own text, so each answer is known to come from our agent and
from the right chat's session.
"""

from __future__ import annotations

import asyncio
import importlib.util
import os
import re
import signal
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx
import orjson
import pytest

from tests.e2e.test_serve import ALICE, Server, serving
from tests.support.harness import T_EXIT, T_START, T_WAIT, scaled

pytestmark = pytest.mark.timeout(90)

MODEL = "acp-server-echo"
# Longer than one echo chunk (48 characters), so a streamed answer comes in several SSE chunks.
LONG = "the quick brown fox jumps over the lazy dog and keeps running past the gateway to our agent"


def _gateway_installed() -> bool:
    if importlib.util.find_spec("acp_openai_gateway") is not None:
        return True
    if os.environ.get("CI") == "true":
        pytest.fail("acp-openai-gateway is not installed: pip install -e '.[test]' (CI must not skip this)")
    pytest.skip("acp-openai-gateway is not installed (pip install -e '.[test]')")


@asynccontextmanager
async def gateway(tmp_path: Path, server: Server) -> AsyncIterator[str]:
    """`python -m acp_openai_gateway` pointed at `server` as alice; yields its base URL."""
    _gateway_installed()
    home = tmp_path / "gateway"
    home.mkdir()  # its working directory: no stray `.env` is read
    port = server.url.split("://", 1)[1].split("/", 1)[0].rsplit(":", 1)[1]
    env = {
        **os.environ,
        "ACP_URL": f"http://alice:{ALICE}@127.0.0.1:{port}",
        "ACP_CWD": str(server.workspace),
        "GATEWAY_HOST": "127.0.0.1",
        "GATEWAY_PORT": "0",
        "MODEL_ID": MODEL,
        "SESSION_STATE_PATH": str(home / "sessions.json"),
    }
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "acp_openai_gateway",
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
        env=env,
        cwd=home,
        start_new_session=True,
    )
    assert process.stderr is not None
    seen = b""
    try:
        with anyio.fail_after(T_START * 8):
            while (found := re.search(rb"running on (http://127\.0\.0\.1:\d+)", seen)) is None:
                line = await process.stderr.readline()
                assert line, f"the gateway ended before it listened: {seen.decode(errors='replace')}"
                seen += line
        yield found.group(1).decode()
    finally:
        if process.returncode is None:
            process.send_signal(signal.SIGTERM)
            with anyio.fail_after(T_EXIT + scaled(6)):
                await process.stderr.read()
                await process.wait()


def chat(text: str, *, stream: bool = False, history: list[dict[str, str]] | None = None) -> dict[str, Any]:
    return {"model": MODEL, "stream": stream, "messages": [*(history or []), {"role": "user", "content": text}]}


async def complete(client: httpx.AsyncClient, url: str, body: dict[str, Any]) -> str:
    answer = await client.post(f"{url}/v1/chat/completions", json=body)
    assert answer.status_code == 200, answer.text
    completion = answer.json()
    assert completion["object"] == "chat.completion"
    assert completion["choices"][0]["finish_reason"] == "stop"
    assert completion["choices"][0]["message"]["role"] == "assistant"
    return str(completion["choices"][0]["message"]["content"])


async def complete_streamed(client: httpx.AsyncClient, url: str, body: dict[str, Any]) -> list[dict[str, Any]]:
    """The SSE chunks of a streamed completion, checked to end with `[DONE]` and nothing after it."""
    chunks: list[dict[str, Any]] = []
    done = False
    async with client.stream("POST", f"{url}/v1/chat/completions", json=body) as answer:
        assert answer.status_code == 200
        assert answer.headers["content-type"].startswith("text/event-stream")
        async for line in answer.aiter_lines():
            if not line.startswith("data: "):
                continue
            assert not done, f"data after [DONE]: {line}"
            if line == "data: [DONE]":
                done = True
            else:
                chunks.append(orjson.loads(line[6:]))
    assert done, "the stream ended without [DONE]"
    return chunks


def streamed_text(chunks: list[dict[str, Any]]) -> str:
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant"}
    assert chunks[-1]["choices"][0]["finish_reason"] == "stop"
    assert all(chunk["object"] == "chat.completion.chunk" for chunk in chunks)
    return "".join(chunk["choices"][0]["delta"].get("content", "") for chunk in chunks)


@asynccontextmanager
async def both(tmp_path: Path) -> AsyncIterator[tuple[httpx.AsyncClient, str]]:
    async with (
        serving(tmp_path, "--model", "echo") as server,
        gateway(tmp_path, server) as url,
        httpx.AsyncClient(timeout=T_WAIT * 4) as client,
    ):
        yield client, url


async def test_the_gateway_lists_the_model_and_answers_a_chat_from_our_agent(tmp_path: Path) -> None:
    async with both(tmp_path) as (client, url):
        models = (await client.get(f"{url}/v1/models")).json()
        assert [model["id"] for model in models["data"]] == [MODEL]
        assert await complete(client, url, chat("hello from an OpenAI client")) == "hello from an OpenAI client"


async def test_a_streamed_chat_comes_as_sse_chunks_ending_with_done(tmp_path: Path) -> None:
    async with both(tmp_path) as (client, url):
        chunks = await complete_streamed(client, url, chat(LONG, stream=True))
        assert streamed_text(chunks) == LONG
        assert sum(1 for chunk in chunks if chunk["choices"][0]["delta"].get("content")) >= 2  # streamed, not one


async def test_chats_one_after_another_continue_their_session_and_start_new_ones(tmp_path: Path) -> None:
    async with both(tmp_path) as (client, url):
        first = await complete(client, url, chat("first question"))
        assert first == "first question"
        # The same conversation continued: the gateway finds its session and sends only the new message.
        history = [{"role": "user", "content": "first question"}, {"role": "assistant", "content": first}]
        assert streamed_text(await complete_streamed(client, url, chat("second", stream=True, history=history))) == (
            "second"
        )
        # A new conversation after those: a new session on the same ACP connection.
        assert await complete(client, url, chat("another conversation")) == "another conversation"
        assert streamed_text(await complete_streamed(client, url, chat(LONG, stream=True))) == LONG


async def test_two_chats_at_once_each_get_their_own_answer(tmp_path: Path) -> None:
    async with both(tmp_path) as (client, url):
        answers: dict[str, str] = {}

        async def plain(text: str) -> None:
            answers[text] = await complete(client, url, chat(text))

        async def streamed(text: str) -> None:
            answers[text] = streamed_text(await complete_streamed(client, url, chat(text, stream=True)))

        for _ in range(3):  # new sessions at once: two readers of the connection's stream at the same time
            answers.clear()
            async with anyio.create_task_group() as group:
                group.start_soon(plain, f"alpha {LONG}")
                group.start_soon(streamed, f"beta {LONG}")
            assert answers == {f"alpha {LONG}": f"alpha {LONG}", f"beta {LONG}": f"beta {LONG}"}


async def test_after_its_idle_connection_expired_the_gateway_reconnects_and_the_conversation_goes_on(
    tmp_path: Path,
) -> None:
    # The gateway never DELETEs its connection: a quiet one ends by --http-idle-timeout like any dead peer's, and its
    # sessions stay. 0.1.0 notices at its next prompt (refused: 404) and answers that one chat with the error; then
    # it makes a new connection and loads the conversation's session there (a new conversation before that gets a
    # 500 from it: docs/remote.md says so).
    idle = scaled(1)  # long enough for the requests of one chat in a row on a loaded machine
    async with (
        serving(tmp_path, "--model", "echo", "--http-idle-timeout", f"{idle:g}") as server,
        gateway(tmp_path, server) as url,
        httpx.AsyncClient(timeout=T_WAIT * 4) as client,
    ):
        assert await complete(client, url, chat("one")) == "one"
        await anyio.sleep(idle * 2)  # the expiry comes within 1.25 times the bound
        history = [{"role": "user", "content": "one"}, {"role": "assistant", "content": "one"}]
        assert "prompt rejected (404)" in await complete(client, url, chat("two", history=history))
        assert await complete(client, url, chat("two", history=history)) == "two"  # on a new connection
        assert streamed_text(await complete_streamed(client, url, chat("fresh", stream=True))) == "fresh"
