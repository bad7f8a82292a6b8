"""Images in prompts end to end: `acp-server` over real stdio, the OpenAI-compatible and Anthropic providers through
their real SDKs against the loopback fakes, whose request logs show what the model was sent in its native format.

What is checked: `promptCapabilities.image` (and `audio`) follow the models offered; a pasted image reaches each
provider as its image part; a `resource_link` to an image file is read from disk beneath the session's directories
(and refused outside them, through a symbolic link too), an embedded image blob is sent too; the image is stored, so
`session/load` replays it and the model still sees it afterwards; a text-only model answers `-32602` naming itself
and the setting; an MCP tool's image result reaches the model; the scripted model says what it was shown.
"""

from __future__ import annotations

import base64
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from acp_server.runtime.attachments import MAX_IMAGE_BYTES
from tests.conftest import StartServer
from tests.support import fake_anthropic, fake_openai
from tests.support.fake_anthropic import FakeAnthropic
from tests.support.fake_openai import FakeOpenAI
from tests.support.harness import RawClient, scaled

# A 1x1 PNG.
PNG_B64 = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg=="
PNG = base64.b64decode(PNG_B64)
# A 1x1 GIF, told apart from the PNG by the model's log.
GIF = base64.b64decode("R0lGODlhAQABAIAAAAAAAP///yH5BAEAAAAALAAAAAABAAEAAAIBRAA7")
IMAGE = {"type": "image", "mimeType": "image/png", "data": PNG_B64}
MCP_SERVER = Path(__file__).resolve().parents[1] / "support" / "mcp_servers" / "stdio_server.py"
T_TURN = scaled(30)
T_MCP = scaled(40)


@pytest.fixture
def openai() -> Iterator[FakeOpenAI]:
    with FakeOpenAI() as server:
        yield server


@pytest.fixture
def anthropic() -> Iterator[FakeAnthropic]:
    with FakeAnthropic() as server:
        yield server


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    directory = tmp_path / "project"
    directory.mkdir()
    return directory


def config_env(tmp_path: Path, config: str, **extra: str) -> dict[str, str]:
    path = tmp_path / "config.toml"
    path.write_text(config)
    return {"ACP_SERVER_CONFIG": str(path), **extra}


async def openai_agent(
    start_server: StartServer, model: FakeOpenAI, tmp_path: Path, *, spec: str = "openai:fake-model", config: str = ""
) -> tuple[RawClient, dict[str, Any]]:
    env = config_env(tmp_path, config, OPENAI_API_KEY="sk-test-key", ACP_SERVER_STATE_DIR=str(tmp_path / "state"))
    client = await start_server("--model", spec, "--base-url", model.base_url, env=env)
    return client, (await client.initialize())["result"]


async def anthropic_agent(
    start_server: StartServer, model: FakeAnthropic, tmp_path: Path
) -> tuple[RawClient, dict[str, Any]]:
    env = config_env(tmp_path, "", ANTHROPIC_API_KEY="sk-ant-test", ANTHROPIC_BASE_URL=model.base_url)
    client = await start_server("--model", "anthropic:claude-fake", env=env)
    return client, (await client.initialize())["result"]


async def prompt(client: RawClient, session: str, blocks: list[dict[str, Any]]) -> dict[str, Any]:
    return await client.call("session/prompt", {"sessionId": session, "prompt": blocks}, timeout=T_TURN)


def link(path: Path, name: str | None = None) -> dict[str, Any]:
    return {"type": "resource_link", "uri": path.as_uri(), "name": name or path.name}


def prompt_capabilities(result: dict[str, Any]) -> dict[str, bool]:
    capabilities: dict[str, bool] = result["agentCapabilities"]["promptCapabilities"]
    return capabilities


async def test_image_and_audio_are_advertised_when_an_offered_model_takes_them(
    start_server: StartServer, tmp_path: Path
) -> None:
    echo = await start_server("--model", "echo")
    assert prompt_capabilities((await echo.initialize())["result"]) == {
        "image": False,
        "audio": False,
        "embeddedContext": True,
    }
    scripted = await start_server("--model", "scripted")
    assert prompt_capabilities((await scripted.initialize())["result"])["image"] is True
    assert prompt_capabilities((await scripted.initialize())["result"])["audio"] is True
    # A model the `model` option offers besides the default counts: the capability is the connection's.
    config = 'models = [{ model = "openai:llava", input = ["text", "image"] }, "anthropic:claude-x"]\n'
    offered = await start_server("--model", "echo", env=config_env(tmp_path, config))
    advertised = prompt_capabilities((await offered.initialize())["result"])
    assert (advertised["image"], advertised["audio"]) == (True, False)


async def test_a_pasted_image_reaches_the_openai_model_as_a_data_url_part(
    start_server: StartServer, openai: FakeOpenAI, tmp_path: Path, workdir: Path
) -> None:
    openai.script(fake_openai.text_reply("a red dot"))
    client, initialized = await openai_agent(start_server, openai, tmp_path)
    assert prompt_capabilities(initialized)["image"] is True  # the documented default for OpenAI-compatible models
    session = await client.new_session(str(workdir))
    answer = await prompt(client, session, [{"type": "text", "text": "what is this?"}, IMAGE])
    assert answer["result"] == {"stopReason": "end_turn"}
    user = openai.requests[0].body["messages"][-1]
    assert user["content"][0] == {"type": "text", "text": "what is this?\n[image: image/png]"}
    assert fake_openai.images_sent(openai.requests[0]) == [("user", "image/png", PNG)]
    assert "".join(client.texts(session)) == "a red dot"


async def test_a_sound_reaches_an_openai_model_set_to_take_audio_and_a_malformed_block_is_refused(
    start_server: StartServer, openai: FakeOpenAI, tmp_path: Path, workdir: Path
) -> None:
    openai.script(fake_openai.text_reply("a beep"))
    config = 'models = [{ model = "openai:gpt-audio", input = ["text", "audio"] }]\n'
    client, initialized = await openai_agent(start_server, openai, tmp_path, spec="openai:gpt-audio", config=config)
    assert prompt_capabilities(initialized) == {"image": False, "audio": True, "embeddedContext": True}
    session = await client.new_session(str(workdir))
    sound = {"type": "audio", "mimeType": "audio/mpeg", "data": base64.b64encode(b"ID3beep").decode()}
    for bad, why in (
        ({**sound, "data": "not base64!"}, "prompt.1: data is not base64"),
        ({**sound, "mimeType": "image/png"}, "prompt.1: mimeType 'image/png' is not an audio type"),
        (IMAGE, "prompt.1: image content is not supported by the model openai:gpt-audio"),
    ):
        refused = await prompt(client, session, [{"type": "text", "text": "hear"}, bad])
        assert refused["error"]["code"] == -32602 and why in refused["error"]["message"], refused
    assert openai.requests == []
    assert (await prompt(client, session, [{"type": "text", "text": "hear"}, sound]))["result"][
        "stopReason"
    ] == "end_turn"
    assert fake_openai.images_sent(openai.requests[0]) == [("user", "mp3", b"ID3beep")]


async def test_a_pasted_image_reaches_the_anthropic_model_as_a_base64_block(
    start_server: StartServer, anthropic: FakeAnthropic, tmp_path: Path, workdir: Path
) -> None:
    anthropic.script(fake_anthropic.text_reply("a red dot"))
    client, initialized = await anthropic_agent(start_server, anthropic, tmp_path)
    assert prompt_capabilities(initialized)["image"] is True
    assert prompt_capabilities(initialized)["audio"] is False  # the Messages API takes no audio
    session = await client.new_session(str(workdir))
    answer = await prompt(client, session, [{"type": "text", "text": "what is this?"}, IMAGE])
    assert answer["result"] == {"stopReason": "end_turn"}
    (user,) = anthropic.requests[0].body["messages"]
    assert user["content"] == [
        {"type": "text", "text": "what is this?\n[image: image/png]"},
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PNG_B64}},
    ]
    assert fake_anthropic.images_sent(anthropic.requests[0]) == [("user", "image/png", PNG)]
    svg = {"type": "image", "mimeType": "image/svg+xml", "data": base64.b64encode(b"<svg/>").decode()}
    refused = await prompt(client, session, [svg])
    assert refused["error"]["code"] == -32602 and "PNG, JPEG, GIF and WebP" in refused["error"]["message"]
    assert not any("image/svg+xml" in str(r.body) for r in anthropic.requests)  # (a title request may follow)


async def test_a_linked_image_file_is_read_beneath_the_session_directories_and_an_embedded_blob_is_sent(
    start_server: StartServer, openai: FakeOpenAI, tmp_path: Path, workdir: Path
) -> None:
    (workdir / "shot.png").write_bytes(PNG)
    (workdir / "named.gif").write_bytes(GIF)  # the bytes decide the type, not the name
    (workdir / "notes.png").write_text("not an image at all\n")
    outside = tmp_path / "secret.png"
    outside.write_bytes(PNG)
    (workdir / "sneaky.png").symlink_to(outside)
    (workdir / "huge.png").write_bytes(PNG + bytes(MAX_IMAGE_BYTES))
    openai.script(fake_openai.text_reply("seen"))
    client, _ = await openai_agent(start_server, openai, tmp_path)
    session = await client.new_session(str(workdir))
    embedded = {"type": "resource", "resource": {"uri": "file:///x/dot.png", "mimeType": "image/png", "blob": PNG_B64}}
    blocks = [
        {"type": "text", "text": "compare"},
        link(workdir / "shot.png"),
        {**link(workdir / "named.gif"), "mimeType": "image/png"},
        link(workdir / "notes.png"),
        link(outside),
        link(workdir / "sneaky.png"),
        link(workdir / "huge.png"),
        embedded,
    ]
    assert (await prompt(client, session, blocks))["result"] == {"stopReason": "end_turn"}
    request = openai.requests[0]
    assert fake_openai.images_sent(request) == [
        ("user", "image/png", PNG),
        ("user", "image/gif", GIF),
        ("user", "image/png", PNG),
    ]
    text = request.body["messages"][-1]["content"][0]["text"]
    assert f"[The user attached the image {workdir / 'shot.png'} (shot.png)]" in text
    assert f"[The image {workdir / 'notes.png'} is not shown: " in text and "not a PNG, JPEG, GIF or WebP" in text
    assert f"[The image {outside} is not shown: " in text
    assert f"[The image {workdir / 'sneaky.png'} is not shown: " in text
    assert text.count("outside the session's directories") == 2
    assert (
        f"[The image {workdir / 'huge.png'} is not shown: " in text and f"larger than {MAX_IMAGE_BYTES} bytes" in text
    )
    assert "[The user attached the image file:///x/dot.png (image/png)]" in text


async def test_a_stored_image_is_replayed_by_session_load_and_the_model_still_sees_it(
    start_server: StartServer, openai: FakeOpenAI, tmp_path: Path, workdir: Path
) -> None:
    openai.script(fake_openai.text_reply("a red dot"))
    first, _ = await openai_agent(start_server, openai, tmp_path)
    session = await first.new_session(str(workdir))
    blocks = [{"type": "text", "text": "remember this"}, IMAGE]
    assert (await prompt(first, session, blocks))["result"] == {"stopReason": "end_turn"}
    await first.close()

    openai.script(fake_openai.text_reply("still a red dot"))
    second, initialized = await openai_agent(start_server, openai, tmp_path)
    assert initialized["agentCapabilities"]["loadSession"] is True
    start = len(second.received)
    loaded = await second.call("session/load", {"sessionId": session, "cwd": str(workdir), "mcpServers": []})
    assert "result" in loaded, loaded
    replayed = [
        m["params"]["update"]
        for m in second.received[start:]
        if m.get("method") == "session/update" and m["params"]["update"]["sessionUpdate"] == "user_message_chunk"
    ]
    assert [u["content"] for u in replayed] == blocks
    assert (await prompt(second, session, [{"type": "text", "text": "and now?"}]))["result"]["stopReason"] == "end_turn"
    later = next(r for r in openai.requests if r.body["messages"][-1].get("content") == "and now?")
    assert fake_openai.images_sent(later) == [("user", "image/png", PNG)]


async def test_an_image_for_a_text_only_model_is_refused_naming_the_model_and_the_setting(
    start_server: StartServer, openai: FakeOpenAI, tmp_path: Path, workdir: Path
) -> None:
    openai.script(fake_openai.text_reply("fine"))
    config = 'models = [{ model = "openai:llama3", input = ["text"] }]\n'
    client, initialized = await openai_agent(start_server, openai, tmp_path, spec="openai:llama3", config=config)
    assert prompt_capabilities(initialized)["image"] is False
    session = await client.new_session(str(workdir))
    refused = await prompt(client, session, [{"type": "text", "text": "look"}, IMAGE])
    assert refused["error"]["code"] == -32602
    message = refused["error"]["message"]
    assert "prompt.1" in message and "openai:llama3" in message and 'input = ["text", "image"]' in message
    assert openai.requests == [] and client.texts(session) == []
    # A linked image is no reason to refuse: the model is told of the file as text instead.
    (workdir / "shot.png").write_bytes(PNG)
    answer = await prompt(client, session, [{"type": "text", "text": "look"}, link(workdir / "shot.png")])
    assert answer["result"] == {"stopReason": "end_turn"}
    assert fake_openai.images_sent(openai.requests[0]) == []
    assert "read it with read_file" in openai.requests[0].body["messages"][-1]["content"]


def mcp_server() -> dict[str, Any]:
    return {"name": "srv", "command": sys.executable, "args": [str(MCP_SERVER), "srv"], "env": []}


async def test_an_mcp_tool_image_goes_back_to_the_openai_model_in_a_user_message_after_the_tool_message(
    start_server: StartServer, openai: FakeOpenAI, tmp_path: Path, workdir: Path
) -> None:
    openai.script(
        fake_openai.tool_call_reply(("call_1", "mcp__srv__mixed", ["{}"])),
        fake_openai.text_reply("a picture"),
    )
    client, _ = await openai_agent(start_server, openai, tmp_path)
    opened = await client.call("session/new", {"cwd": str(workdir), "mcpServers": [mcp_server()]})
    session = opened["result"]["sessionId"]
    answer = await client.call(
        "session/prompt", {"sessionId": session, "prompt": [{"type": "text", "text": "draw"}]}, timeout=T_MCP
    )
    assert answer["result"] == {"stopReason": "end_turn"}
    second = openai.requests[1]
    *_, assistant, tool, user = second.body["messages"]
    assert assistant["tool_calls"][0]["id"] == "call_1"
    assert tool["role"] == "tool" and tool["tool_call_id"] == "call_1"
    assert "[image: image/png, about 9 bytes]" in tool["content"] and "not shown" not in tool["content"]
    assert user["content"][0] == {"type": "text", "text": "The tool call call_1 returned:"}
    assert fake_openai.images_sent(second) == [("user", "image/png", base64.b64decode("iVBORw0KGgo="))]


async def test_an_mcp_tool_image_goes_back_to_the_anthropic_model_inside_the_tool_result(
    start_server: StartServer, anthropic: FakeAnthropic, tmp_path: Path, workdir: Path
) -> None:
    anthropic.script(
        fake_anthropic.message_reply(
            fake_anthropic.block("tool_use", "{}", call_id="toolu_1", name="mcp__srv__mixed"), stop_reason="tool_use"
        ),
        fake_anthropic.text_reply("a picture"),
    )
    client, _ = await anthropic_agent(start_server, anthropic, tmp_path)
    opened = await client.call("session/new", {"cwd": str(workdir), "mcpServers": [mcp_server()]})
    session = opened["result"]["sessionId"]
    answer = await client.call(
        "session/prompt", {"sessionId": session, "prompt": [{"type": "text", "text": "draw"}]}, timeout=T_MCP
    )
    assert answer["result"] == {"stopReason": "end_turn"}
    second = anthropic.requests[1]
    assert fake_anthropic.images_sent(second) == [
        ("tool_result toolu_1", "image/png", base64.b64decode("iVBORw0KGgo="))
    ]
    (result,) = [b for b in second.body["messages"][-1]["content"] if b["type"] == "tool_result"]
    assert result["content"][0]["type"] == "text" and "a picture follows" in result["content"][0]["text"]


async def test_the_scripted_model_takes_images_and_sounds_and_says_what_it_was_shown(
    start_server: StartServer, workdir: Path
) -> None:
    client = await start_server("--model", "scripted")
    await client.initialize()
    session = await client.new_session(str(workdir))
    (workdir / "shot.png").write_bytes(PNG)
    sound = {"type": "audio", "mimeType": "audio/wav", "data": base64.b64encode(b"RIFF0000WAVE").decode()}
    blocks = [{"type": "text", "text": "look"}, IMAGE, link(workdir / "shot.png"), sound]
    params = {"sessionId": session, "prompt": blocks, "_meta": {"scripted": [{"describe_input": "media"}]}}
    answer = await client.call("session/prompt", params, timeout=T_TURN)
    assert answer["result"] == {"stopReason": "end_turn"}
    assert "".join(client.texts(session)).splitlines() == [
        f"image image/png {len(PNG)} bytes from the user",
        f"image image/png {len(PNG)} bytes from the user",
        "audio audio/wav 12 bytes from the user",
    ]


@pytest.mark.parametrize("version", [1, 2])
async def test_an_image_of_exactly_the_bound_decoded_is_taken_and_one_byte_more_is_refused_as_too_large(
    start_server: StartServer, workdir: Path, version: int
) -> None:
    """The bound is on the decoded bytes, not on the padded base64 length: 5 MiB + 1 byte encodes to as many
    characters as 5 MiB (no padding against one `=`), and was taken."""
    client = await start_server("--model", "scripted")
    if version == 1:
        await client.initialize()
        session = await client.new_session(str(workdir))
    else:
        await client.initialize_v2()
        session = await client.new_session_v2(str(workdir))

    def params(size: int) -> dict[str, Any]:
        data = base64.b64encode(PNG + bytes(size - len(PNG))).decode()
        image = {"type": "image", "mimeType": "image/png", "data": data}
        script = {"scripted": [{"describe_input": "media"}]}
        return {"sessionId": session, "prompt": [{"type": "text", "text": "look"}, image], "_meta": script}

    over = await client.call("session/prompt", params(MAX_IMAGE_BYTES + 1), timeout=T_TURN)
    why = f"prompt.1: data is too large: about {MAX_IMAGE_BYTES + 1} bytes, at most {MAX_IMAGE_BYTES} are sent"
    assert over["error"]["code"] == -32602 and why in over["error"]["message"], over
    exact = await client.call("session/prompt", params(MAX_IMAGE_BYTES), timeout=T_TURN)
    if version == 1:
        assert exact["result"] == {"stopReason": "end_turn"}, exact
    else:
        assert "result" in exact, exact
        await client.idle(session, timeout=T_TURN)
    said = "".join(u["content"]["text"] for u in client.updates(session, "agent_message_chunk"))
    assert said.splitlines() == [f"image image/png {MAX_IMAGE_BYTES} bytes from the user"]


async def test_media_the_endpoint_would_refuse_is_refused_naming_the_block_and_the_session_goes_on(
    start_server: StartServer, openai: FakeOpenAI, tmp_path: Path, workdir: Path
) -> None:
    openai.script(fake_openai.text_reply("still here"), fake_openai.text_reply("a title"))
    client, _ = await openai_agent(start_server, openai, tmp_path)
    session = await client.new_session(str(workdir))
    svg = {"type": "resource", "resource": {"uri": "file:///x/a.svg", "mimeType": "image/svg+xml", "blob": "PHN2Zy8+"}}
    not_png = {"type": "resource", "resource": {"uri": "file:///x/b.png", "mimeType": "image/png", "blob": "R0lGODlh"}}
    huge = {**IMAGE, "data": base64.b64encode(PNG + bytes(MAX_IMAGE_BYTES)).decode()}
    for bad, why in (
        (svg, "prompt.1: embedded resource: mimeType 'image/svg+xml': the models take PNG, JPEG, GIF and WebP"),
        (not_png, "prompt.1: embedded resource: data is not a image/png image (its bytes are image/gif)"),
        (huge, f"prompt.1: data is too large: about {len(PNG) + MAX_IMAGE_BYTES} bytes, at most {MAX_IMAGE_BYTES}"),
    ):
        refused = await prompt(client, session, [{"type": "text", "text": "look"}, bad])
        assert refused["error"]["code"] == -32602 and why in refused["error"]["message"], refused
    assert openai.requests == []
    # Nothing of the refused prompts was kept: the next turn is sent without them, and answered.
    answer = await prompt(client, session, [{"type": "text", "text": "and now?"}])
    assert answer["result"] == {"stopReason": "end_turn"}
    request = openai.requests[0]
    assert request.body["messages"][-1]["content"] == "and now?"
    assert fake_openai.images_sent(request) == []
    assert "svg" not in str(request.body) and "R0lGODlh" not in str(request.body)


async def test_an_mcp_tool_image_the_endpoint_would_refuse_reaches_the_model_as_a_placeholder_and_the_next_turn_works(
    start_server: StartServer, openai: FakeOpenAI, tmp_path: Path, workdir: Path
) -> None:
    openai.script(
        fake_openai.tool_call_reply(("call_1", "mcp__srv__svg", ["{}"])),
        fake_openai.text_reply("no picture"),
        fake_openai.text_reply("a title"),  # the session's title request, after its first turn
        fake_openai.text_reply("next turn"),
    )
    client, _ = await openai_agent(start_server, openai, tmp_path)
    opened = await client.call("session/new", {"cwd": str(workdir), "mcpServers": [mcp_server()]})
    session = opened["result"]["sessionId"]
    answer = await client.call(
        "session/prompt", {"sessionId": session, "prompt": [{"type": "text", "text": "draw"}]}, timeout=T_MCP
    )
    assert answer["result"] == {"stopReason": "end_turn"}
    second = openai.requests[1]
    assert fake_openai.images_sent(second) == []
    tool = second.body["messages"][-1]
    assert tool["role"] == "tool" and tool["tool_call_id"] == "call_1"
    assert "a drawing follows" in tool["content"]
    assert "[image: image/svg+xml, about 6 bytes, not shown: mimeType 'image/svg+xml'" in tool["content"]
    again = await prompt(client, session, [{"type": "text", "text": "again"}])
    assert again.get("result") == {"stopReason": "end_turn"}, again
    third = next(r for r in openai.requests if r.body["messages"][-1].get("content") == "again")
    assert fake_openai.images_sent(third) == [] and "image/svg+xml" in str(third.body["messages"])
