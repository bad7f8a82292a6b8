"""Secrets stay out of tools, end to end: acp-server over real stdio, a model on a loopback OpenAI-compatible server,
real `/bin/sh` commands and a real SQLite store.

A command sees the server's environment without the secrets the server holds (its provider keys, the keys and MCP
secrets of config.toml) and without what `[tools] env_deny` names, while the user's own tokens pass. The exact values
the server holds are redacted from tool output and model text on the wire, in the store and in what the model is sent,
also when a value arrives split across two streamed chunks.
"""

from __future__ import annotations

import contextlib
import sqlite3
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import StartServer
from tests.support.fake_openai import FakeOpenAI, text_reply, tool_call_reply
from tests.support.harness import RawClient

pytestmark = pytest.mark.timeout(60)

KEY = "sk-test-provider-key-0123456789abcdef"  # the server's own provider key (OPENAI_API_KEY)
CONFIG_KEY = "sk-ant-from-the-config-file-0123456789"  # a key the config file holds
MCP_SECRET = "mcp-header-secret-0123456789"  # an MCP server's secret header in the config file
USER_TOKEN = "ghp_the_users_own_github_token_0123"  # the user's own tools need it: it passes
AWS_SECRET = "aws-the-users-own-secret-0123456789"
REDACTED = "[redacted]"


@pytest.fixture
def model() -> Iterator[FakeOpenAI]:
    with FakeOpenAI() as server:
        yield server


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    directory = tmp_path / "project"
    directory.mkdir()
    return directory


async def agent(start_server: StartServer, model: FakeOpenAI, tmp_path: Path) -> RawClient:
    config = tmp_path / "config.toml"
    config.write_text(
        f'[providers.anthropic]\napi_key = "{CONFIG_KEY}"\n'
        # Refused at once (nothing listens on port 9): the session goes on without it; its header is a secret.
        f'[mcp_servers.remote]\ntype = "http"\nurl = "http://127.0.0.1:9/mcp"\n'
        f'headers = {{ Authorization = "{MCP_SECRET}" }}\n'
        '[tools]\nenv_deny = ["DENIED_*", "EXACT_DENIED"]\n'
    )
    env = {
        "OPENAI_API_KEY": KEY,
        "ACP_SERVER_CONFIG": str(config),
        "ACP_SERVER_STATE_DIR": str(tmp_path / "state"),
        "ACP_SERVER_LOG_FILE": str(tmp_path / "acp-server.log"),
        # The same secrets under other names: found by value.
        "COPY_OF_THE_KEY": KEY,
        "COPY_OF_THE_CONFIG_KEY": CONFIG_KEY,
        "COPY_OF_THE_MCP_SECRET": MCP_SECRET,
        "GITHUB_TOKEN": USER_TOKEN,
        "AWS_SECRET_ACCESS_KEY": AWS_SECRET,
        "DENIED_BY_PREFIX": "denied-value-one",
        "EXACT_DENIED": "denied-value-two",
        "ACP_TEST_PLAIN": "plain-value",
    }
    client = await start_server(
        "--model",
        "openai:fake-model",
        "--base-url",
        model.base_url,
        "--permission-mode",
        "bypass",
        "--cleanup-deadline",
        "0.5",
        env=env,
    )
    await client.initialize()
    return client


def prompt(session_id: str, text: str) -> dict[str, Any]:
    return {"sessionId": session_id, "prompt": [{"type": "text", "text": text}]}


def tool_texts(client: RawClient, session_id: str) -> str:
    """Every text a tool call showed the client."""
    return "\n".join(
        c["content"]["text"]
        for u in client.updates(session_id, "tool_call_update")
        for c in u.get("content", [])
        if c["type"] == "content"
    )


def reply_text(client: RawClient, session_id: str) -> str:
    """The model's last reply as the client saw it (not the agent's own notices, which are messages of their own)."""
    chunks = client.updates(session_id, "agent_message_chunk")
    last = chunks[-1]["messageId"]
    return "".join(u["content"]["text"] for u in chunks if u["messageId"] == last)


def tool_results_sent(model: FakeOpenAI) -> list[str]:
    """Every tool result the model was sent."""
    return [m["content"] for r in model.requests for m in r.body.get("messages", []) if m.get("role") == "tool"]


def _as_text(value: Any) -> str:
    if not isinstance(value, bytes):
        return str(value)
    data: bytes = value
    if data[:1] not in (b"[", b"{"):  # JSON is stored as is, or compressed
        with contextlib.suppress(zlib.error):
            data = zlib.decompress(data)
    return data.decode("utf-8", errors="replace")


def store_text(tmp_path: Path) -> str:
    """Everything the session store holds, as text (blobs decompressed where they are)."""
    parts: list[str] = []
    db = sqlite3.connect(tmp_path / "state" / "sessions.sqlite3")
    try:
        tables = [row[0] for row in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
        for table in tables:
            for row in db.execute(f"SELECT * FROM {table}"):
                parts += [_as_text(value) for value in row]
    finally:
        db.close()
    return "\n".join(parts)


async def test_a_command_sees_neither_the_servers_secrets_nor_denied_variables_but_the_users_tokens(
    start_server: StartServer, model: FakeOpenAI, tmp_path: Path, workdir: Path
) -> None:
    model.script(tool_call_reply(("call_env", "run_command", ['{"command": "env"}'])))
    model.set_default(text_reply("done"))  # the reply after the command, and the session's title
    client = await agent(start_server, model, tmp_path)
    session = await client.new_session(str(workdir))
    response = await client.call("session/prompt", prompt(session, "show the environment"), timeout=30)
    assert response["result"] == {"stopReason": "end_turn"}
    shown = tool_texts(client, session)
    [sent, *_] = tool_results_sent(model)
    for output in (shown, sent):
        assert "ACP_TEST_PLAIN=plain-value" in output  # the command did run and print its environment
        for secret in (KEY, CONFIG_KEY, MCP_SECRET, "denied-value-one", "denied-value-two"):
            assert secret not in output
        for name in ("OPENAI_API_KEY", "COPY_OF_THE_KEY", "COPY_OF_THE_CONFIG_KEY", "COPY_OF_THE_MCP_SECRET"):
            assert f"{name}=" not in output
        assert "DENIED_BY_PREFIX=" not in output and "EXACT_DENIED=" not in output
        # Not the server's own: the user's tools get them.
        assert f"GITHUB_TOKEN={USER_TOKEN}" in output
        assert f"AWS_SECRET_ACCESS_KEY={AWS_SECRET}" in output


async def test_a_key_in_tool_output_and_in_a_streamed_reply_is_redacted_on_the_wire_in_the_store_and_for_the_model(
    start_server: StartServer, model: FakeOpenAI, tmp_path: Path, workdir: Path
) -> None:
    (workdir / "notes.txt").write_text(f"the key is {KEY}\nand the other is {CONFIG_KEY}\n")
    half = len(KEY) // 2
    model.script(
        tool_call_reply(("call_read", "read_file", ['{"path": "notes.txt"}'])),
        # The key split across two chunks, and one that starts in the last characters of a chunk.
        text_reply(f"Your key is {KEY[:half]}", f"{KEY[half:]}, the other {CONFIG_KEY[:1]}", f"{CONFIG_KEY[1:]}."),
    )
    model.set_default(text_reply("ok"))  # the session's title, and the next prompt
    client = await agent(start_server, model, tmp_path)
    session = await client.new_session(str(workdir))
    first = await client.call("session/prompt", prompt(session, "read notes.txt"), timeout=30)
    assert first["result"] == {"stopReason": "end_turn"}
    assert reply_text(client, session) == f"Your key is {REDACTED}, the other {REDACTED}."
    shown = tool_texts(client, session)
    assert f"the key is {REDACTED}" in shown and f"the other is {REDACTED}" in shown
    second = await client.call("session/prompt", prompt(session, "and now?"), timeout=30)
    assert second["result"] == {"stopReason": "end_turn"}
    wire = b"".join(entry.raw for entry in client.log if entry.dir == "out")
    sent_to_model = [r.body for r in model.requests]
    # The second prompt's call, found by its message: the title's own request may come after it.
    [history] = [b["messages"] for b in sent_to_model if b["messages"][-1] == {"role": "user", "content": "and now?"}]
    assert any(
        m["role"] == "assistant" and m["content"] == f"Your key is {REDACTED}, the other {REDACTED}." for m in history
    )
    assert any(m["role"] == "tool" and f"the key is {REDACTED}" in m["content"] for m in history)
    stored = store_text(tmp_path)
    assert REDACTED in stored
    log = (tmp_path / "acp-server.log").read_text() if (tmp_path / "acp-server.log").exists() else ""
    for secret in (KEY, CONFIG_KEY):
        assert secret.encode() not in wire
        assert secret not in str(sent_to_model)
        assert secret not in stored
        assert secret not in log


URL_PASSWORD = "hunter2-Zq9xV7wPlain"  # a password in --base-url: no key's shape, found by where it is


@pytest.mark.parametrize("family", ["openai", "anthropic"])
async def test_a_password_in_the_base_url_never_reaches_stderr_or_the_log_file_at_debug(
    start_server: StartServer, tmp_path: Path, workdir: Path, family: str
) -> None:
    # Issue 20 item 8: at debug, the SDK's request log wrote `http://user:PASS@host/v1` in clear, on stderr and in
    # the log file. Every record, from every logger (httpx, openai, anthropic), is redacted by the handlers.
    from tests.support import fake_anthropic
    from tests.support.fake_anthropic import FakeAnthropic

    log_file = tmp_path / "acp-server.log"
    with FakeOpenAI() if family == "openai" else FakeAnthropic() as endpoint:
        endpoint.serve_models("fake-model", "other-model")
        reply = text_reply("hello") if family == "openai" else fake_anthropic.text_reply("hello")
        endpoint.set_default(reply)
        url = endpoint.base_url.replace("http://", f"http://someone:{URL_PASSWORD}@")
        env = {
            "OPENAI_API_KEY": KEY,
            "ANTHROPIC_API_KEY": CONFIG_KEY,
            "ACP_SERVER_STATE_DIR": str(tmp_path / "state"),
            "ACP_SERVER_LOG_FILE": str(log_file),
        }
        client = await start_server(
            "--model", f"{family}:fake-model", "--base-url", url, "--log-level", "debug", env=env
        )
        await client.initialize()
        session = await client.new_session(str(workdir))
        assert (await client.call("session/prompt", prompt(session, "hi"), timeout=30))["result"]["stopReason"]
        await client.wait_for(lambda m: len(endpoint.model_list_requests) > 0, 30)
        code, _ = await client.close()
    assert code == 0
    logged = log_file.read_text()
    assert URL_PASSWORD not in client.stderr_text
    assert URL_PASSWORD not in logged
    assert "HTTP Request" in logged and "someone:[REDACTED]@127.0.0.1" in logged  # the SDK's debug lines are there
