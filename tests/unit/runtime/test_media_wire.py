"""How a conversation with images (and sounds) is written for each provider: `wire_messages` of the OpenAI-compatible
and Anthropic providers, for a model that takes the media and for one that does not (a session switched to a
text-only model, a tool's image on such a model), where every medium must still be named, never silently dropped.
"""

from __future__ import annotations

from acp_server.runtime.model import Media, Message, ToolCall
from acp_server.runtime.providers import anthropic, openai

IMAGE = Media("image", "image/png", "iVBORw0KGgo=")
SOUND = Media("audio", "audio/mpeg", "SUQz")
VISION = frozenset({"text", "image"})
ALL = frozenset({"text", "image", "audio"})
TEXT = frozenset({"text"})


def two_tools_with_images() -> list[Message]:
    calls = (ToolCall("c1", "shot", {}), ToolCall("c2", "shot", {}))
    return [
        Message("user", "look"),
        Message("assistant", "", calls),
        Message("tool", "first", tool_call_id="c1", media=(IMAGE,)),
        Message("tool", "second", tool_call_id="c2", media=(IMAGE,)),
        Message("assistant", "done"),
    ]


def test_openai_user_images_and_sounds_are_content_parts_after_the_text() -> None:
    (user,) = openai.wire_messages("", [Message("user", "hi", media=(IMAGE, SOUND))], ALL)
    assert user == {
        "role": "user",
        "content": [
            {"type": "text", "text": "hi"},
            {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}},
            {"type": "input_audio", "input_audio": {"data": "SUQz", "format": "mp3"}},
        ],
    }


def test_openai_tool_images_follow_all_the_tool_messages_of_the_step_in_one_user_message() -> None:
    wire = openai.wire_messages("", two_tools_with_images(), VISION)
    assert [m["role"] for m in wire] == ["user", "assistant", "tool", "tool", "user", "assistant"]
    assert all(isinstance(m["content"], str) for m in wire[2:4])
    image = {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}}
    assert wire[4]["content"] == [
        {"type": "text", "text": "The tool call c1 returned:"},
        image,
        {"type": "text", "text": "The tool call c2 returned:"},
        image,
    ]


def test_openai_media_a_model_does_not_take_are_named_in_the_text_and_nothing_else_is_sent() -> None:
    wire = openai.wire_messages("", [*two_tools_with_images(), Message("user", "and this", media=(IMAGE,))], TEXT)
    assert all(isinstance(m["content"], str | None) for m in wire)
    assert [m["role"] for m in wire] == ["user", "assistant", "tool", "tool", "assistant", "user"]
    assert "[image (image/png, about 9 bytes) not shown: the model takes no image]" in wire[2]["content"]
    assert wire[5]["content"] == "and this\n[image (image/png, about 9 bytes) not shown: the model takes no image]"


def test_anthropic_images_are_base64_blocks_in_the_user_turn_and_inside_tool_results() -> None:
    wire = anthropic.wire_messages([*two_tools_with_images(), Message("user", "and", media=(IMAGE,))], VISION)
    block = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}}
    results = wire[2]["content"]
    assert results[0] == {
        "type": "tool_result",
        "tool_use_id": "c1",
        "content": [{"type": "text", "text": "first"}, block],
    }
    assert results[1]["content"] == [{"type": "text", "text": "second"}, block]
    assert wire[-1]["content"] == [{"type": "text", "text": "and"}, block]


def test_anthropic_never_sends_a_sound_and_names_it_instead() -> None:
    (user,) = anthropic.wire_messages([Message("user", "hear", media=(SOUND, IMAGE))], ALL)
    assert user["content"][0]["text"] == "hear\n[audio (audio/mpeg, about 3 bytes) not shown: the model takes no audio]"
    assert [b["type"] for b in user["content"]] == ["text", "image"]
