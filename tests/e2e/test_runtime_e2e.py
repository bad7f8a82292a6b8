"""The agent runtime end to end: acp-server over real stdio, driving a model served by a loopback OpenAI-compatible
server through the real `openai` SDK, with the built-in tools.

What the model is sent (system prompt, tools, tool results) is read back from the fake endpoint's request log, so
these tests check the whole loop: model -> tool call -> tool result -> model.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import StartServer
from tests.support.fake_openai import FakeOpenAI, text_reply, tool_call_reply
from tests.support.harness import RawClient, scaled
from tests.support.versions import AcpV2


@pytest.fixture
def model() -> Iterator[FakeOpenAI]:
    with FakeOpenAI() as server:
        yield server


async def agent(
    start_server: StartServer, model: FakeOpenAI, workdir: Path, *args: str, config: str = ""
) -> tuple[RawClient, str]:
    config_file = workdir.parent / "config.toml"
    config_file.write_text(config)
    env = {"OPENAI_API_KEY": "sk-test-key", "ACP_SERVER_CONFIG": str(config_file)}
    client = await start_server(
        "--model", "openai:fake-model", "--base-url", model.base_url, "--cleanup-deadline", "0.5", *args, env=env
    )
    await client.initialize()
    return client, await client.new_session(str(workdir))


def prompt(session_id: str, text: str) -> dict[str, Any]:
    return {"sessionId": session_id, "prompt": [{"type": "text", "text": text}]}


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    directory = tmp_path / "project"
    directory.mkdir()
    return directory


async def test_system_prompt_names_the_directory_the_tools_and_the_project_instructions(
    start_server: StartServer, model: FakeOpenAI, workdir: Path
) -> None:
    (workdir / "AGENTS.md").write_text("Always run the linter before you finish.\n")
    model.script(text_reply("ok"))
    client, session = await agent(start_server, model, workdir)
    assert (await client.call("session/prompt", prompt(session, "hi"), timeout=scaled(30)))["result"][
        "stopReason"
    ] == "end_turn"
    request = model.requests[0]  # (a title request may follow)
    system = request.body["messages"][0]
    assert system["role"] == "system"
    for expected in (str(workdir), "read_file", "run_command", "Always run the linter", "AGENTS.md"):
        assert expected in system["content"], expected
    offered = {tool["function"]["name"] for tool in request.body["tools"]}
    assert {"read_file", "write_file", "edit_file", "list_files", "grep", "run_command", "update_plan"} <= offered
    assert not any(name.startswith("test_") for name in offered)


async def test_a_tool_call_runs_and_its_result_goes_back_to_the_model(
    start_server: StartServer, model: FakeOpenAI, workdir: Path
) -> None:
    (workdir / "notes.txt").write_text("the secret word is plinth\n")
    model.script(
        tool_call_reply(("call_1", "read_file", ['{"pa', 'th": "notes.txt"}'])),
        text_reply("The word is ", "plinth."),
    )
    client, session = await agent(start_server, model, workdir)
    response = await client.call("session/prompt", prompt(session, "what is the word?"), timeout=scaled(30))
    assert response["result"] == {"stopReason": "end_turn"}
    started = client.updates(session, "tool_call")
    assert [(u["toolCallId"], u["kind"]) for u in started] == [("call_1", "read")]
    assert started[0]["locations"] == [{"path": str(workdir / "notes.txt")}]
    final = client.updates(session, "tool_call_update")[-1]
    assert final["status"] == "completed"
    second = model.requests[1].body["messages"]
    assert second[-2]["tool_calls"][0]["id"] == "call_1"
    assert second[-1]["role"] == "tool" and second[-1]["tool_call_id"] == "call_1"
    assert "plinth" in second[-1]["content"]
    assert "".join(client.texts(session)) == "The word is plinth."


async def test_invalid_tool_arguments_are_reported_to_the_model_not_run(
    start_server: StartServer, model: FakeOpenAI, workdir: Path
) -> None:
    model.script(
        tool_call_reply(("call_bad", "write_file", ['{"path": "x.txt", "content": "unterminated'])),
        text_reply("sorry"),
    )
    client, session = await agent(start_server, model, workdir, "--permission-mode", "bypass")
    response = await client.call("session/prompt", prompt(session, "write"), timeout=scaled(30))
    assert response["result"] == {"stopReason": "end_turn"}
    assert not (workdir / "x.txt").exists()
    assert client.updates(session, "tool_call_update")[-1]["status"] == "failed"
    feedback = model.requests[1].body["messages"][-1]
    assert feedback["role"] == "tool" and "not a valid JSON object" in feedback["content"]


async def test_a_turn_stops_at_the_model_call_limit_with_max_turn_requests(
    start_server: StartServer, model: FakeOpenAI, workdir: Path
) -> None:
    model.set_default(tool_call_reply(("call_loop", "list_files", ["{}"])))
    client, session = await agent(start_server, model, workdir, "--max-turn-requests", "3")
    response = await client.call("session/prompt", prompt(session, "loop"), timeout=scaled(30))
    assert response["result"] == {"stopReason": "max_turn_requests"}
    assert len(model.requests) == 3


async def test_provider_stop_reasons_reach_the_client(
    start_server: StartServer, model: FakeOpenAI, workdir: Path
) -> None:
    model.script(text_reply("cut", finish="length"), text_reply("no", finish="content_filter"))
    client, session = await agent(start_server, model, workdir)
    first = await client.call("session/prompt", prompt(session, "a"), timeout=scaled(30))
    second = await client.call("session/prompt", prompt(session, "b"), timeout=scaled(30))
    assert (first["result"]["stopReason"], second["result"]["stopReason"]) == ("max_tokens", "refusal")


async def test_usage_is_reported_when_the_context_window_is_configured(
    start_server: StartServer, model: FakeOpenAI, workdir: Path
) -> None:
    model.script(text_reply("hi", usage=(1200, 34)))
    client, session = await agent(start_server, model, workdir, config="[providers.openai]\ncontext_window = 128000\n")
    assert (await client.call("session/prompt", prompt(session, "hi"), timeout=scaled(30)))["result"][
        "stopReason"
    ] == "end_turn"
    assert client.updates(session, "usage_update") == [{"sessionUpdate": "usage_update", "used": 1234, "size": 128000}]


async def test_on_v2_usage_is_reported_as_on_v1_before_the_idle(
    start_server: StartServer, model: FakeOpenAI, workdir: Path
) -> None:
    """v2 renders the context usage with the shape both versions share (docs/conformance.md names this test for v2's
    `usage_update`), during the work, before its idle."""
    model.script(text_reply("hi", usage=(1200, 34)))
    config_file = workdir.parent / "config.toml"
    config_file.write_text("[providers.openai]\ncontext_window = 128000\n")
    env = {"OPENAI_API_KEY": "sk-test-key", "ACP_SERVER_CONFIG": str(config_file)}
    acp = AcpV2(await start_server("--model", "openai:fake-model", "--base-url", model.base_url, env=env))
    await acp.initialize()
    session = await acp.new_session(str(workdir))
    await acp.stopped(await acp.prompt_with(prompt(session, "hi")), "end_turn")
    updates = acp.client.updates(session)
    assert acp.client.updates(session, "usage_update") == [
        {"sessionUpdate": "usage_update", "used": 1234, "size": 128000}
    ]
    assert updates.index(acp.client.updates(session, "usage_update")[0]) < len(updates) - 1
    assert updates[-1] == {"sessionUpdate": "state_update", "state": "idle", "stopReason": "end_turn"}


async def test_the_model_sees_a_cancelled_turn_with_what_was_streamed_and_a_note(
    start_server: StartServer, model: FakeOpenAI, workdir: Path
) -> None:
    model.script(text_reply("half an ", "answer", ending="hang"), text_reply("ok"))
    client, session = await agent(start_server, model, workdir)
    first = await client.request("session/prompt", prompt(session, "first"))
    await client.wait_for(lambda _: "".join(client.texts(session)) == "half an answer", timeout=scaled(30))
    await client.cancel(session)
    assert (await client.response(first))["result"] == {"stopReason": "cancelled"}
    second = await client.call("session/prompt", prompt(session, "second"), timeout=scaled(30))
    assert second["result"]["stopReason"] == "end_turn"
    history = model.requests[1].body["messages"]
    contents = [(m["role"], m.get("content")) for m in history[1:]]
    assert contents == [
        ("user", "first"),
        ("assistant", "half an answer\n\n[cancelled]"),
        ("user", "second"),
    ]
