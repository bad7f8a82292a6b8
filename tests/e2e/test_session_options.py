"""Config options (model, mode), slash commands and titles, end to end over stdio.

`/compact` and titles are checked against the loopback OpenAI-compatible model, so the model is really asked and
what it answers is what the session uses.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import StartServer
from tests.support.fake_openai import FakeOpenAI, error, text_reply
from tests.support.harness import RawClient, scaled


def updates_of(client: RawClient, session: str, kind: str) -> list[dict[str, Any]]:
    return client.updates(session, kind)


def option(options: list[dict[str, Any]], option_id: str) -> dict[str, Any]:
    return next(o for o in options if o["id"] == option_id)


async def test_new_session_offers_model_and_mode_options_and_announces_commands(server: RawClient) -> None:
    created = await server.call("session/new", {"cwd": "/tmp", "mcpServers": []})
    result = created["result"]
    session = result["sessionId"]
    assert option(result["configOptions"], "model")["category"] == "model"
    mode = option(result["configOptions"], "mode")
    assert mode["category"] == "mode" and mode["currentValue"] == result["modes"]["currentModeId"] == "default"
    assert [o["value"] for o in mode["options"]] == [m["id"] for m in result["modes"]["availableModes"]]
    announced = await server.wait_for(
        lambda m: m.get("params", {}).get("update", {}).get("sessionUpdate") == "available_commands_update"
    )
    assert announced["params"]["sessionId"] == session
    names = [c["name"] for c in announced["params"]["update"]["availableCommands"]]
    assert names == ["clear", "compact", "title"]
    assert server.received.index(announced) > server.received.index(created)


async def test_mode_option_and_session_modes_stay_in_sync(server: RawClient) -> None:
    session = await server.new_session()
    answer = await server.call(
        "session/set_config_option", {"sessionId": session, "configId": "mode", "value": "accept_edits"}
    )
    assert option(answer["result"]["configOptions"], "mode")["currentValue"] == "accept_edits"
    assert [o["id"] for o in answer["result"]["configOptions"]] == ["model", "mode", "prompt_policy"]  # complete
    await server.wait_for(lambda m: bool(updates_of(server, session, "current_mode_update")))
    assert updates_of(server, session, "current_mode_update")[-1]["currentModeId"] == "accept_edits"
    assert (await server.call("session/set_mode", {"sessionId": session, "modeId": "read_only"}))["result"] == {}
    await server.wait_for(lambda m: len(updates_of(server, session, "config_option_update")) == 2)
    latest = updates_of(server, session, "config_option_update")[-1]["configOptions"]
    assert option(latest, "mode")["currentValue"] == "read_only"


@pytest.mark.parametrize(
    ("config_id", "value"),
    [("mode", "yolo"), ("nope", "x"), ("model", "openai:not-configured"), ("mode", True)],
    ids=["unknown-mode", "unknown-option", "unknown-model", "boolean-value"],
)
async def test_bad_config_option_changes_are_invalid_params_and_change_nothing(
    server: RawClient, config_id: str, value: Any
) -> None:
    session = await server.new_session()
    params: dict[str, Any] = {"sessionId": session, "configId": config_id, "value": value}
    if isinstance(value, bool):
        params["type"] = "boolean"
    answer = await server.call("session/set_config_option", params)
    assert answer["error"]["code"] == -32602, answer
    assert updates_of(server, session, "config_option_update") == []


async def test_model_option_switches_the_sessions_model(start_server: StartServer, tmp_path: Path) -> None:
    config = tmp_path / "config.toml"
    config.write_text('models = ["echo"]\n')
    server = await start_server("--model", "scripted", "--test-mode", env={"ACP_SERVER_CONFIG": str(config)})
    await server.initialize()
    created = await server.call("session/new", {"cwd": str(tmp_path), "mcpServers": []})
    session = created["result"]["sessionId"]
    assert [o["value"] for o in option(created["result"]["configOptions"], "model")["options"]] == ["scripted", "echo"]
    answer = await server.call(
        "session/set_config_option", {"sessionId": session, "configId": "model", "value": "echo"}
    )
    assert option(answer["result"]["configOptions"], "model")["currentValue"] == "echo"
    prompt = {"sessionId": session, "prompt": [{"type": "text", "text": "echo me"}]}
    assert (await server.call("session/prompt", prompt))["result"] == {"stopReason": "end_turn"}
    assert "".join(server.texts(session)) == "echo me"


async def test_title_command_names_the_session(server: RawClient) -> None:
    session = await server.new_session()
    prompt = {"sessionId": session, "prompt": [{"type": "text", "text": "/title  Refactor the parser "}]}
    assert (await server.call("session/prompt", prompt))["result"] == {"stopReason": "end_turn"}
    assert updates_of(server, session, "session_info_update") == [
        {"sessionUpdate": "session_info_update", "title": "Refactor the parser"}
    ]
    assert "Title set" in "".join(server.texts(session))


async def test_offline_models_title_a_session_with_its_first_words_after_the_first_turn(
    start_server: StartServer,
) -> None:
    server = await start_server("--model", "echo")
    await server.initialize()
    session = await server.new_session()
    prompt = {"sessionId": session, "prompt": [{"type": "text", "text": "please fix the flaky login test today"}]}
    response = await server.call("session/prompt", prompt)
    titled = await server.wait_for(
        lambda m: m.get("params", {}).get("update", {}).get("sessionUpdate") == "session_info_update"
    )
    assert server.received.index(response) < server.received.index(titled), "a title never delays the response"
    assert updates_of(server, session, "session_info_update")[0]["title"] == "please fix the flaky login test"
    await server.call("session/prompt", {**prompt, "prompt": [{"type": "text", "text": "and again"}]})
    assert len(updates_of(server, session, "session_info_update")) == 1  # once


@pytest.fixture
def model() -> Iterator[FakeOpenAI]:
    with FakeOpenAI() as server:
        yield server


async def openai_session(start_server: StartServer, model: FakeOpenAI, tmp_path: Path) -> tuple[RawClient, str]:
    env = {"OPENAI_API_KEY": "sk-test", "ACP_SERVER_CONFIG": str(tmp_path / "absent.toml")}
    client = await start_server("--model", "openai:fake", "--base-url", model.base_url, env=env)
    await client.initialize()
    return client, await client.new_session(str(tmp_path))


def ask(session: str, text: str) -> dict[str, Any]:
    return {"sessionId": session, "prompt": [{"type": "text", "text": text}]}


async def test_a_real_model_writes_the_title(start_server: StartServer, model: FakeOpenAI, tmp_path: Path) -> None:
    model.script(text_reply("Sure, done."), text_reply('"Parser Refactoring Plan"'))
    client, session = await openai_session(start_server, model, tmp_path)
    assert (await client.call("session/prompt", ask(session, "plan the parser refactor"), timeout=scaled(30)))["result"]
    await client.wait_for(lambda m: bool(updates_of(client, session, "session_info_update")), timeout=scaled(10))
    assert updates_of(client, session, "session_info_update")[0]["title"] == "Parser Refactoring Plan"
    title_request = model.requests[1].body["messages"]
    assert "title" in title_request[0]["content"].lower()
    assert title_request[-1] == {"role": "user", "content": "plan the parser refactor"}


async def test_clear_forgets_the_conversation(start_server: StartServer, model: FakeOpenAI, tmp_path: Path) -> None:
    model.script(text_reply("first answer"), text_reply("title"), text_reply("fresh answer"))
    client, session = await openai_session(start_server, model, tmp_path)
    await client.call("session/prompt", ask(session, "remember the number 42"), timeout=scaled(30))
    assert await model.wait_requests(2, timeout=scaled(10))  # the title request
    assert (await client.call("session/prompt", ask(session, "/clear"), timeout=scaled(30)))["result"][
        "stopReason"
    ] == "end_turn"
    await client.call("session/prompt", ask(session, "what was the number?"), timeout=scaled(30))
    history = model.requests[2].body["messages"]
    assert [m["role"] for m in history] == ["system", "user"]
    assert history[-1]["content"] == "what was the number?"


async def test_compact_has_the_model_summarise_and_continues_from_the_summary(
    start_server: StartServer, model: FakeOpenAI, tmp_path: Path
) -> None:
    model.script(
        text_reply("We are renaming Foo to Bar in src/."),
        text_reply("title"),
        text_reply("Summary: ", "rename Foo to Bar in src/; nothing done yet."),
        text_reply("continuing"),
    )
    client, session = await openai_session(start_server, model, tmp_path)
    await client.call("session/prompt", ask(session, "rename Foo to Bar everywhere in src/"), timeout=scaled(30))
    assert await model.wait_requests(2, timeout=scaled(10))
    response = await client.call("session/prompt", ask(session, "/compact"), timeout=scaled(30))
    assert response["result"] == {"stopReason": "end_turn"}
    summary_request = model.requests[2].body["messages"]
    assert "summarise" in summary_request[-1]["content"].lower()
    assert "rename Foo to Bar everywhere in src/" in [m.get("content") for m in summary_request]
    shown = "".join(client.texts(session))
    assert "rename Foo to Bar in src/; nothing done yet." in shown and "Compacted 2 messages" in shown
    await client.call("session/prompt", ask(session, "go on"), timeout=scaled(30))
    history = model.requests[3].body["messages"]
    assert [m["role"] for m in history] == ["system", "user", "assistant", "user"]
    assert "rename Foo to Bar in src/; nothing done yet." in history[1]["content"]


async def test_closing_a_session_cancels_its_title_request(
    start_server: StartServer, model: FakeOpenAI, tmp_path: Path
) -> None:
    model.script(text_reply("done"), text_reply("A title that never", ending="hang"))
    client, session = await openai_session(start_server, model, tmp_path)
    await client.call("session/prompt", ask(session, "do the thing"), timeout=scaled(30))
    assert await model.wait_requests(2, timeout=scaled(10))  # the title request is open
    assert (await client.call("session/close", {"sessionId": session}))["result"] == {}
    assert await model.wait_disconnect_async(scaled(2.0)), "the title request was not cancelled with its session"
    assert updates_of(client, session, "session_info_update") == []


async def test_a_nearly_full_context_is_compacted_before_the_next_call_and_the_user_sees_it(
    start_server: StartServer, model: FakeOpenAI, tmp_path: Path
) -> None:
    config = tmp_path / "config.toml"
    config.write_text("[providers.openai]\ncontext_window = 1000\n")
    model.script(
        text_reply("long answer", usage=(880, 20)),  # 90% of the window
        text_reply("title"),
        text_reply("Summary: the user asked for a long answer."),
        text_reply("fresh reply"),
    )
    env = {"OPENAI_API_KEY": "sk-test", "ACP_SERVER_CONFIG": str(config)}
    client = await start_server("--model", "openai:fake", "--base-url", model.base_url, env=env)
    await client.initialize()
    session = await client.new_session(str(tmp_path))
    await client.call("session/prompt", ask(session, "tell me everything"), timeout=scaled(30))
    assert await model.wait_requests(2, timeout=scaled(10))
    response = await client.call("session/prompt", ask(session, "and now?"), timeout=scaled(30))
    assert response["result"] == {"stopReason": "end_turn"}
    summary_request = model.requests[2].body["messages"]
    assert "summarise" in summary_request[-1]["content"].lower()
    continued = model.requests[3].body["messages"]
    assert [m["role"] for m in continued] == ["system", "user", "assistant", "user"]
    assert "the user asked for a long answer" in continued[1]["content"]
    assert continued[-1]["content"] == "and now?"
    assert any("Context compacted" in text for text in client.texts(session))


async def test_a_context_overflow_error_compacts_and_retries_once(
    start_server: StartServer, model: FakeOpenAI, tmp_path: Path
) -> None:
    model.script(
        text_reply("first"),
        text_reply("title"),
        error(400, "This model's maximum context length is 8192 tokens."),
        text_reply("Summary of it all."),
        text_reply("answered after compaction"),
    )
    client, session = await openai_session(start_server, model, tmp_path)
    await client.call("session/prompt", ask(session, "one"), timeout=scaled(30))
    assert await model.wait_requests(2, timeout=scaled(10))
    response = await client.call("session/prompt", ask(session, "two"), timeout=scaled(30))
    assert response["result"] == {"stopReason": "end_turn"}
    assert "answered after compaction" in "".join(client.texts(session))
    assert "Summary of it all." in model.requests[4].body["messages"][1]["content"]
