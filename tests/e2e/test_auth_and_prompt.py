"""Authentication when a provider's key is missing, and prompt content as editors send it.

The server must start without a key, say exactly where to put one, refuse sessions with -32000 until it is found,
and pick it up through `authenticate` without a restart. Prompt blocks are never silently dropped.
"""

from __future__ import annotations

from pathlib import Path

from tests.conftest import StartServer

NO_KEYS = {"OPENAI_API_KEY": "", "OPENAI_BASE_URL": "", "ANTHROPIC_API_KEY": "", "ANTHROPIC_AUTH_TOKEN": ""}


def clean_env(config: Path) -> dict[str, str]:
    return {**NO_KEYS, "ACP_SERVER_CONFIG": str(config)}


async def test_missing_key_is_offered_as_authentication_and_picked_up_without_restart(
    start_server: StartServer, tmp_path: Path
) -> None:
    config = tmp_path / "config.toml"
    server = await start_server("--model", "openai:gpt-test", env=clean_env(config))
    initialized = await server.initialize()
    methods = initialized["result"]["authMethods"]
    assert [m["id"] for m in methods] == ["api-key"]
    assert "OPENAI_API_KEY" in methods[0]["description"] and str(config) in methods[0]["description"]
    refused = await server.call("session/new", {"cwd": str(tmp_path), "mcpServers": []})
    assert refused["error"]["code"] == -32000
    assert "OPENAI_API_KEY" in refused["error"]["message"]
    still = await server.call("authenticate", {"methodId": "api-key"})
    assert still["error"]["code"] == -32000
    config.write_text('[providers.openai]\napi_key = "sk-test-not-real"\n')
    assert (await server.call("authenticate", {"methodId": "api-key"}))["result"] == {}
    assert (await server.call("authenticate", {"methodId": "api-key"}))["result"] == {}  # idempotent
    created = await server.call("session/new", {"cwd": str(tmp_path), "mcpServers": []})
    assert created["result"]["sessionId"]
    await server.close()
    assert server.stderr_text is not None
    assert "sk-test-not-real" not in server.stderr_text
    assert not any(b"sk-test-not-real" in entry.raw for entry in server.log if entry.dir == "out")


async def test_unknown_auth_method_is_invalid_params(start_server: StartServer, tmp_path: Path) -> None:
    server = await start_server("--model", "openai:gpt-test", env=clean_env(tmp_path / "none.toml"))
    await server.initialize()
    answer = await server.call("authenticate", {"methodId": "password"})
    assert answer["error"]["code"] == -32602


async def test_a_local_endpoint_needs_no_key(start_server: StartServer, tmp_path: Path) -> None:
    server = await start_server(
        "--model", "openai:llama3", "--base-url", "http://127.0.0.1:9/v1", env=clean_env(tmp_path / "none.toml")
    )
    assert (await server.initialize())["result"]["authMethods"] == []
    assert "result" in await server.call("session/new", {"cwd": str(tmp_path), "mcpServers": []})


async def test_key_from_the_environment_variable_named_in_the_config_file(
    start_server: StartServer, tmp_path: Path
) -> None:
    config = tmp_path / "config.toml"
    config.write_text('[providers.anthropic]\napi_key_env = "MY_CLAUDE_KEY"\n')
    env = {**clean_env(config), "MY_CLAUDE_KEY": "sk-ant-test"}
    server = await start_server("--model", "anthropic:claude-test", env=env)
    assert (await server.initialize())["result"]["authMethods"] == []


async def test_a_broken_config_file_is_reported_and_left_untouched(start_server: StartServer, tmp_path: Path) -> None:
    config = tmp_path / "config.toml"
    config.write_text("[providers.openai\napi_key = ")
    before = config.read_bytes()
    server = await start_server("--model", "openai:gpt-test", env=clean_env(config))
    methods = (await server.initialize())["result"]["authMethods"]
    assert str(config) in methods[0]["description"]
    assert config.read_bytes() == before


async def test_echo_and_scripted_models_need_no_authentication(start_server: StartServer) -> None:
    for args in (("--model", "echo"), ("--model", "scripted")):
        server = await start_server(*args, env=NO_KEYS)
        assert (await server.initialize())["result"]["authMethods"] == []


async def test_image_prompt_is_refused_naming_the_block_and_nothing_runs(start_server: StartServer) -> None:
    server = await start_server("--model", "echo")
    await server.initialize()
    session = await server.new_session()
    blocks = [{"type": "text", "text": "look"}, {"type": "image", "data": "iVBORw0KGgo=", "mimeType": "image/png"}]
    answer = await server.call("session/prompt", {"sessionId": session, "prompt": blocks})
    assert answer["error"]["code"] == -32602
    assert "prompt.1" in answer["error"]["message"] and "image" in answer["error"]["message"]
    assert server.texts(session) == []


async def test_links_and_embedded_context_reach_the_model(start_server: StartServer) -> None:
    server = await start_server("--model", "echo")
    await server.initialize()
    session = await server.new_session()
    blocks = [
        {"type": "text", "text": "explain"},
        {"type": "resource_link", "uri": "file:///work/src/app%20main.py", "name": "app main.py"},
        {"type": "resource", "resource": {"uri": "file:///work/notes.md", "text": "NOTE BODY", "mimeType": "text/md"}},
    ]
    answer = await server.call("session/prompt", {"sessionId": session, "prompt": blocks})
    assert answer["result"] == {"stopReason": "end_turn"}
    echoed = "".join(server.texts(session))
    assert "/work/src/app main.py" in echoed and "read_file" in echoed
    assert "NOTE BODY" in echoed and "file:///work/notes.md" in echoed


def test_permission_mode_ids_agree_between_the_cli_and_the_editor() -> None:
    from acp_server.agent.sessions.options import PERMISSION_MODES
    from acp_server.settings.command_line import PERMISSION_MODE_IDS

    assert tuple(m.value for m in PERMISSION_MODES) == PERMISSION_MODE_IDS
