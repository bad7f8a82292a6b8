"""The real model providers against loopback servers that speak the providers' own streaming wire formats.

Each test drives `OpenAIProvider` or `AnthropicProvider` through the official SDK over real HTTP to
`tests/support/fake_openai.py` / `tests/support/fake_anthropic.py`, so SSE framing, chunked bodies, the retries and the
closing of the connection on a cancel are the real code paths. The last tests run `acp-server` itself against the
fake endpoint.
"""

from __future__ import annotations

import gzip
import socket
import subprocess
import sys
import threading
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import anyio
import orjson
import pytest

from acp_server.errors import ModelError
from acp_server.runtime.model import (
    INVALID_ARGUMENTS,
    Message,
    Reply,
    StopReason,
    TextDelta,
    ThoughtDelta,
    ToolCall,
    ToolSpec,
    TurnEvent,
    TurnInput,
    UsageReported,
)
from acp_server.runtime.providers.anthropic import AnthropicProvider
from acp_server.runtime.providers.openai import OpenAIProvider
from acp_server.settings.files import EndpointTimeouts
from tests.conftest import StartServer
from tests.support import fake_anthropic as anth
from tests.support.fake_openai import (
    FakeOpenAI,
    chunk,
    error,
    raw_reply,
    reasoning_reply,
    refusal_reply,
    text_reply,
    tool_call_reply,
)
from tests.support.harness import T_ACK, RawClient, scaled

SECRET = "sk-test-SECRET0123456789"
SYSTEM = "You are a careful coding agent."
TOOL = ToolSpec(
    "read_file", "Read a file.", {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}
)


@pytest.fixture
def fake_openai() -> Iterator[FakeOpenAI]:
    with FakeOpenAI() as server:
        yield server


@pytest.fixture
def fake_anthropic() -> Iterator[anth.FakeAnthropic]:
    with anth.FakeAnthropic() as server:
        yield server


@pytest.fixture
async def openai_provider(fake_openai: FakeOpenAI) -> AsyncIterator[OpenAIProvider]:
    provider = OpenAIProvider(
        "fake-model", api_key=SECRET, base_url=fake_openai.base_url, timeouts=EndpointTimeouts(attempts=3)
    )
    yield provider
    await _close_client(provider)


@pytest.fixture
async def anthropic_provider(fake_anthropic: anth.FakeAnthropic) -> AsyncIterator[AnthropicProvider]:
    provider = AnthropicProvider(
        "claude-fake", api_key=SECRET, base_url=fake_anthropic.base_url, timeouts=EndpointTimeouts(attempts=3)
    )
    yield provider
    await _close_client(provider)


async def _close_client(provider: OpenAIProvider | AnthropicProvider) -> None:
    # The server keeps its client for the process's life; a test closes it so no socket outlives its event loop.
    client = await provider.client()
    await client.close()


def turn_input(system_prompt: str = SYSTEM) -> TurnInput:
    return TurnInput("sess_1", 1, 0, {}, lambda *args, **kwargs: None, system_prompt=system_prompt)


class Recorder:
    """The `emit` a turn reports through; keeps every event."""

    def __init__(self) -> None:
        self.events: list[TurnEvent] = []

    async def __call__(self, event: TurnEvent) -> None:
        self.events.append(event)

    def texts(self) -> list[str]:
        return [e.text for e in self.events if isinstance(e, TextDelta)]

    def thoughts(self) -> list[str]:
        return [e.text for e in self.events if isinstance(e, ThoughtDelta)]

    def usage(self) -> list[UsageReported]:
        return [e for e in self.events if isinstance(e, UsageReported)]


async def respond(
    provider: OpenAIProvider | AnthropicProvider,
    messages: list[Message] | None = None,
    tools: tuple[ToolSpec, ...] = (),
    recorder: Recorder | None = None,
) -> Reply:
    turn = provider.open_turn(turn_input())
    return await turn.respond(messages or [Message("user", "hello")], tools, recorder or Recorder())


async def failure(provider: OpenAIProvider | AnthropicProvider, recorder: Recorder | None = None) -> str:
    with pytest.raises(ModelError) as caught:
        await respond(provider, recorder=recorder)
    message = str(caught.value)
    assert "\n" not in message and "Traceback" not in message
    assert SECRET not in message and "SECRET" not in message
    return message


def closed_port() -> int:
    """A loopback port nothing listens on."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


# --- OpenAI: streaming ---


async def test_openai_streams_each_content_chunk_as_a_text_delta(
    openai_provider: OpenAIProvider, fake_openai: FakeOpenAI
) -> None:
    fake_openai.script(text_reply("Hel", "lo, ", "world"))
    recorder = Recorder()
    reply = await respond(openai_provider, recorder=recorder)
    assert recorder.texts() == ["Hel", "lo, ", "world"]
    assert reply == Reply("Hello, world", (), StopReason.END_TURN)


async def test_openai_request_carries_system_prompt_history_tool_results_and_tools(
    openai_provider: OpenAIProvider, fake_openai: FakeOpenAI
) -> None:
    fake_openai.script(text_reply("done"))
    call = ToolCall("call_1", "read_file", {"path": "a.py"})
    history = [
        Message("user", "read a.py"),
        Message("assistant", "", (call,)),
        Message("tool", "print('hi')", tool_call_id="call_1"),
    ]
    await respond(openai_provider, history, (TOOL,))
    [request] = fake_openai.requests
    assert request.path == "/v1/chat/completions"
    assert request.headers["authorization"] == f"Bearer {SECRET}"
    body = request.body
    assert body["model"] == "fake-model"
    assert body["stream"] is True
    assert body["stream_options"] == {"include_usage": True}
    assert body["messages"] == [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": "read a.py"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "call_1", "type": "function", "function": {"name": "read_file", "arguments": '{"path":"a.py"}'}}
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "print('hi')"},
    ]
    assert body["tools"] == [
        {
            "type": "function",
            "function": {"name": TOOL.name, "description": TOOL.description, "parameters": TOOL.parameters},
        }
    ]


async def test_openai_request_leaves_out_an_empty_system_prompt_and_tool_list(
    openai_provider: OpenAIProvider, fake_openai: FakeOpenAI
) -> None:
    fake_openai.script(text_reply("ok"))
    await openai_provider.open_turn(turn_input(system_prompt="")).respond([Message("user", "hi")], (), Recorder())
    body = fake_openai.requests[0].body
    assert body["messages"] == [{"role": "user", "content": "hi"}]
    assert "tools" not in body


@pytest.mark.parametrize("field", ["reasoning_content", "reasoning"])
async def test_openai_reasoning_deltas_become_thoughts_before_the_text(
    openai_provider: OpenAIProvider, fake_openai: FakeOpenAI, field: str
) -> None:
    fake_openai.script(reasoning_reply(["Let me ", "think."], ["Answer."], field=field))
    recorder = Recorder()
    reply = await respond(openai_provider, recorder=recorder)
    assert [type(e).__name__ for e in recorder.events] == ["ThoughtDelta", "ThoughtDelta", "TextDelta"]
    assert recorder.thoughts() == ["Let me ", "think."]
    assert reply.text == "Answer."  # thoughts are shown, never part of the reply text


async def test_openai_reasoning_sent_under_both_names_is_shown_once(
    openai_provider: OpenAIProvider, fake_openai: FakeOpenAI
) -> None:
    both = {"content": None, "reasoning_content": "Hmm.", "reasoning": "Hmm."}
    fake_openai.script(raw_reply([chunk({"role": "assistant"}), chunk(both), chunk({"content": "Yes."}, "stop")]))
    recorder = Recorder()
    await respond(openai_provider, recorder=recorder)
    assert recorder.thoughts() == ["Hmm."]
    assert recorder.texts() == ["Yes."]


@pytest.mark.parametrize("interleave", [False, True], ids=["one-after-the-other", "interleaved"])
async def test_openai_reassembles_two_tool_calls_whose_arguments_are_split_across_chunks(
    openai_provider: OpenAIProvider, fake_openai: FakeOpenAI, interleave: bool
) -> None:
    fake_openai.script(
        tool_call_reply(
            ("call_a", "read_file", ['{"pa', 'th": "src/', 'main.py"}']),
            ("call_b", "grep", ['{"pattern"', ': "TODO", "max": 3}']),
            text="Looking.",
            interleave=interleave,
        )
    )
    reply = await respond(openai_provider, tools=(TOOL,))
    assert reply.text == "Looking."
    assert reply.stop_reason == "end_turn"  # tool calls present: the loop runs them and continues
    assert reply.tool_calls == (
        ToolCall("call_a", "read_file", {"path": "src/main.py"}),
        ToolCall("call_b", "grep", {"pattern": "TODO", "max": 3}),
    )


async def test_openai_tool_call_fragments_without_index_are_assembled_by_id(
    openai_provider: OpenAIProvider, fake_openai: FakeOpenAI
) -> None:
    fragments = [
        {"id": "call_a", "type": "function", "function": {"name": "read_file", "arguments": '{"path":'}},
        {"function": {"arguments": ' "x"}'}},
        {"id": "call_b", "type": "function", "function": {"name": "read_file", "arguments": '{"path": "y"}'}},
    ]
    chunks = [chunk({"role": "assistant"}), *(chunk({"tool_calls": [f]}) for f in fragments), chunk({}, "tool_calls")]
    fake_openai.script(raw_reply(chunks))
    reply = await respond(openai_provider, tools=(TOOL,))
    assert reply.tool_calls == (
        ToolCall("call_a", "read_file", {"path": "x"}),
        ToolCall("call_b", "read_file", {"path": "y"}),
    )


@pytest.mark.parametrize(
    ("fragments", "arguments"),
    [
        (['{"path": "a.py"', ", oops"], {INVALID_ARGUMENTS: '{"path": "a.py", oops'}),
        (["[1, 2]"], {INVALID_ARGUMENTS: "[1, 2]"}),
        (['"just a string"'], {INVALID_ARGUMENTS: '"just a string"'}),
        ([], {}),
    ],
    ids=["broken-json", "array", "string", "no-arguments"],
)
async def test_openai_tool_call_arguments_that_are_not_a_json_object_are_marked_not_fatal(
    openai_provider: OpenAIProvider, fake_openai: FakeOpenAI, fragments: list[str], arguments: dict[str, Any]
) -> None:
    fake_openai.script(tool_call_reply(("call_x", "read_file", fragments)))
    reply = await respond(openai_provider, tools=(TOOL,))
    assert reply.tool_calls == (ToolCall("call_x", "read_file", arguments),)


async def test_openai_sends_marked_invalid_arguments_back_as_an_empty_object(
    openai_provider: OpenAIProvider, fake_openai: FakeOpenAI
) -> None:
    fake_openai.script(text_reply("ok"))
    bad = ToolCall("call_x", "read_file", {INVALID_ARGUMENTS: "{oops"})
    history = [
        Message("user", "go"),
        Message("assistant", "", (bad,)),
        Message("tool", "error: invalid arguments", tool_call_id="call_x"),
    ]
    await respond(openai_provider, history, (TOOL,))
    assistant = fake_openai.requests[0].body["messages"][2]
    assert assistant["tool_calls"][0]["function"]["arguments"] == "{}"


@pytest.mark.parametrize(
    ("reply", "stop"),
    [
        (text_reply("cut sh", finish="length"), "max_tokens"),
        (text_reply("", finish="content_filter"), "refusal"),
        (refusal_reply("I can't ", "help with that."), "refusal"),
        (text_reply("fine", finish="stop"), "end_turn"),
    ],
    ids=["length", "content-filter", "refusal-delta", "stop"],
)
async def test_openai_finish_reasons_map_to_acp_stop_reasons(
    openai_provider: OpenAIProvider, fake_openai: FakeOpenAI, reply: Any, stop: str
) -> None:
    fake_openai.script(reply)
    assert (await respond(openai_provider)).stop_reason == stop


async def test_openai_refusal_text_reaches_the_user(openai_provider: OpenAIProvider, fake_openai: FakeOpenAI) -> None:
    fake_openai.script(refusal_reply("I can't ", "help with that."))
    recorder = Recorder()
    reply = await respond(openai_provider, recorder=recorder)
    assert recorder.texts() == ["I can't ", "help with that."]
    assert reply.text == "I can't help with that."


async def test_openai_usage_is_reported_against_the_context_window(fake_openai: FakeOpenAI) -> None:
    provider = OpenAIProvider("fake-model", api_key=SECRET, base_url=fake_openai.base_url, context_window=128_000)
    fake_openai.script(text_reply("hi", usage=(1200, 34)))
    recorder = Recorder()
    await respond(provider, recorder=recorder)
    assert recorder.usage() == [UsageReported(used=1234, size=128_000)]
    await _close_client(provider)


async def test_openai_usage_is_not_reported_without_a_known_context_window(
    openai_provider: OpenAIProvider, fake_openai: FakeOpenAI
) -> None:
    fake_openai.script(text_reply("hi", usage=(1200, 34)))
    recorder = Recorder()
    await respond(openai_provider, recorder=recorder)
    assert recorder.usage() == []


# --- OpenAI: failures ---


async def test_openai_401_is_one_line_naming_the_status_without_the_key(
    openai_provider: OpenAIProvider, fake_openai: FakeOpenAI
) -> None:
    # The real API quotes (part of) the key back; that must not reach the editor.
    fake_openai.script(error(401, f"Incorrect API key provided: {SECRET}. You can find your API key at the dashboard."))
    message = await failure(openai_provider)
    assert message.startswith("the model endpoint answered 401: Incorrect API key provided: [redacted].")
    assert len(fake_openai.requests) == 1  # an authentication failure is not retried


@pytest.mark.parametrize(
    ("first", "min_seconds"),
    [(error(429, "Rate limit reached", kind="rate_limit_error", retry_after_ms=5), 0.0), (error(500, "boom"), 0.2)],
    ids=["429-with-retry-after", "500-with-the-backoff"],
)
async def test_openai_rate_limits_and_server_errors_are_retried_then_succeed(
    openai_provider: OpenAIProvider, fake_openai: FakeOpenAI, first: Any, min_seconds: float
) -> None:
    fake_openai.script(first, text_reply("recovered"))
    started = time.monotonic()
    reply = await respond(openai_provider)
    assert reply.text == "recovered"
    assert [r.headers.get("x-stainless-retry-count") for r in fake_openai.requests] == ["0", "1"]
    assert time.monotonic() - started >= min_seconds  # the 500 waited for the backoff


async def test_openai_gives_up_after_its_retries_with_the_last_status(fake_openai: FakeOpenAI) -> None:
    provider = OpenAIProvider(
        "fake-model", api_key=SECRET, base_url=fake_openai.base_url, timeouts=EndpointTimeouts(attempts=2)
    )
    fake_openai.script(*[error(503, "overloaded", kind="server_error", retry_after_ms=1)] * 2)
    assert await failure(provider) == "the model endpoint answered 503: overloaded (2 attempts)"
    assert len(fake_openai.requests) == 2
    await _close_client(provider)


async def test_openai_unreachable_endpoint_names_the_endpoint_and_the_cause() -> None:
    url = f"http://127.0.0.1:{closed_port()}/v1"
    provider = OpenAIProvider("fake-model", api_key=SECRET, base_url=url, timeouts=EndpointTimeouts(attempts=1))
    assert await failure(provider) == f"cannot reach the model endpoint {url}: connection refused"
    await _close_client(provider)


async def test_openai_missing_api_key_is_a_model_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    provider = OpenAIProvider("fake-model", api_key="", base_url=f"http://127.0.0.1:{closed_port()}/v1")
    message = await failure(provider)
    assert message.startswith("cannot set up the openai client: ")
    assert "api_key" in message


@pytest.mark.parametrize(
    ("reply", "expected"),
    [
        (text_reply("x", ending="drop"), "the model stream broke off: peer closed connection"),
        (raw_reply([chunk({"content": "x"}), "{not json"]), "the model stream broke off: the endpoint sent data that"),
        (
            raw_reply([chunk({"content": "x"}), {"error": {"message": "backend overloaded", "type": "server_error"}}]),
            "the model endpoint reported an error: backend overloaded",
        ),
        (raw_reply([chunk({"content": "x"})]), "the model stream ended before the reply was complete"),
    ],
    ids=["dropped-connection", "malformed-sse", "error-event", "no-finish"],
)
async def test_openai_stream_that_fails_midway_is_a_model_error(
    openai_provider: OpenAIProvider, fake_openai: FakeOpenAI, reply: Any, expected: str
) -> None:
    fake_openai.script(reply)
    recorder = Recorder()
    message = await failure(openai_provider, recorder)
    assert message.startswith(expected)
    assert recorder.texts() == ["x"]  # what streamed before the failure was still shown


# --- cancellation ---


async def _cancel_mid_stream(
    provider: OpenAIProvider | AnthropicProvider, server: FakeOpenAI | anth.FakeAnthropic
) -> None:
    """Cancel the scope around respond() while the server holds the stream open; the provider must let the
    cancellation through (not an error) and the server must see the connection closed within a second."""
    second_chunk = anyio.Event()
    cancelled_at: list[float] = []
    outcome: list[str] = []

    async def emit(event: TurnEvent) -> None:
        if isinstance(event, TextDelta) and event.text == "two":
            second_chunk.set()

    async def turn() -> None:
        try:
            await provider.open_turn(turn_input()).respond([Message("user", "go")], (), emit)
            outcome.append("returned")
        except anyio.get_cancelled_exc_class():
            outcome.append("cancelled")
            raise
        except BaseException as exc:
            outcome.append(f"raised {type(exc).__name__}: {exc}")
            raise

    with anyio.CancelScope() as scope:
        async with anyio.create_task_group() as group:
            group.start_soon(turn)
            await second_chunk.wait()
            await anyio.sleep(0.05)  # the provider is now parked in a network read
            cancelled_at.append(time.monotonic())
            scope.cancel()
    assert scope.cancelled_caught
    assert outcome == ["cancelled"]
    assert await server.wait_disconnect_async(T_ACK), "the server never saw the connection close"
    assert server.disconnects[0] - cancelled_at[0] < T_ACK


async def test_openai_cancel_mid_stream_closes_the_connection_and_raises_cancellation(
    openai_provider: OpenAIProvider, fake_openai: FakeOpenAI
) -> None:
    fake_openai.script(text_reply("one", "two", ending="hang"))
    await _cancel_mid_stream(openai_provider, fake_openai)


async def test_openai_provider_serves_the_next_turn_after_a_cancel(
    openai_provider: OpenAIProvider, fake_openai: FakeOpenAI
) -> None:
    fake_openai.script(text_reply("one", "two", ending="hang"), text_reply("again"))
    await _cancel_mid_stream(openai_provider, fake_openai)
    assert (await respond(openai_provider)).text == "again"


async def test_openai_cancel_while_waiting_to_retry_is_a_cancellation_not_an_error(
    openai_provider: OpenAIProvider, fake_openai: FakeOpenAI
) -> None:
    fake_openai.script(error(500, "boom"))  # the provider then waits about half a second before retrying
    outcome: list[str] = []

    async def turn() -> None:
        try:
            await respond(openai_provider)
        except anyio.get_cancelled_exc_class():
            outcome.append("cancelled")
            raise
        except BaseException as exc:
            outcome.append(type(exc).__name__)
            raise

    with anyio.CancelScope() as scope:
        async with anyio.create_task_group() as group:
            group.start_soon(turn)
            assert await fake_openai.wait_requests(1, timeout=scaled(10))
            scope.cancel()
    assert outcome == ["cancelled"]
    assert len(fake_openai.requests) == 1


async def test_openai_turns_of_one_provider_share_one_client_and_its_connection(
    openai_provider: OpenAIProvider, fake_openai: FakeOpenAI
) -> None:
    fake_openai.script(text_reply("first"), text_reply("second"))
    assert (await respond(openai_provider)).text == "first"
    assert (await respond(openai_provider)).text == "second"
    first, second = fake_openai.requests
    assert first.client_port == second.client_port  # the second turn reused the first turn's kept-alive connection


# --- laziness ---


@pytest.mark.timeout(60)
def test_importing_the_providers_does_not_import_their_sdks() -> None:
    code = (
        "import sys, acp_server.runtime.providers.openai, acp_server.runtime.providers.anthropic;"
        "print(','.join(m for m in ('openai', 'anthropic', 'httpx2') if m in sys.modules))"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == ""


# --- Anthropic ---


async def test_anthropic_streams_text_thinking_and_reassembled_tool_calls(
    anthropic_provider: AnthropicProvider, fake_anthropic: anth.FakeAnthropic
) -> None:
    fake_anthropic.script(
        anth.message_reply(
            anth.block("thinking", "The user ", "wants a file."),
            anth.block("text", "Reading ", "it."),
            anth.block("tool_use", '{"pa', 'th": "a', '.py"}', call_id="toolu_1", name="read_file"),
            anth.block("tool_use", "", call_id="toolu_2", name="list_files"),
            stop_reason="tool_use",
        )
    )
    recorder = Recorder()
    reply = await respond(anthropic_provider, tools=(TOOL,), recorder=recorder)
    assert recorder.thoughts() == ["The user ", "wants a file."]
    assert recorder.texts() == ["Reading ", "it."]
    assert reply == Reply(
        "Reading it.",
        (ToolCall("toolu_1", "read_file", {"path": "a.py"}), ToolCall("toolu_2", "list_files", {})),
        StopReason.END_TURN,
    )


async def test_anthropic_invalid_tool_input_json_is_marked_not_fatal(
    anthropic_provider: AnthropicProvider, fake_anthropic: anth.FakeAnthropic
) -> None:
    fake_anthropic.script(
        anth.message_reply(anth.block("tool_use", '{"path": ', "nope}", call_id="toolu_1", name="read_file"))
    )
    reply = await respond(anthropic_provider, tools=(TOOL,))
    assert reply.tool_calls == (ToolCall("toolu_1", "read_file", {INVALID_ARGUMENTS: '{"path": nope}'}),)


async def test_anthropic_request_carries_system_tools_and_merged_tool_results(
    anthropic_provider: AnthropicProvider, fake_anthropic: anth.FakeAnthropic
) -> None:
    fake_anthropic.script(anth.text_reply("ok"))
    calls = (ToolCall("toolu_1", "read_file", {"path": "a.py"}), ToolCall("toolu_2", "read_file", {"path": "b.py"}))
    history = [
        Message("user", "read both"),
        Message("assistant", "Sure.", calls),
        Message("tool", "A", tool_call_id="toolu_1"),
        Message("tool", "B", tool_call_id="toolu_2"),
    ]
    await respond(anthropic_provider, history, (TOOL,))
    [request] = fake_anthropic.requests
    assert request.path == "/v1/messages"
    body = request.body
    assert body["model"] == "claude-fake"
    assert body["max_tokens"] == 8192
    assert body["stream"] is True
    assert body["system"] == SYSTEM
    assert body["tools"] == [{"name": TOOL.name, "description": TOOL.description, "input_schema": TOOL.parameters}]
    assert body["messages"] == [
        {"role": "user", "content": [{"type": "text", "text": "read both"}]},
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "Sure."},
                {"type": "tool_use", "id": "toolu_1", "name": "read_file", "input": {"path": "a.py"}},
                {"type": "tool_use", "id": "toolu_2", "name": "read_file", "input": {"path": "b.py"}},
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "toolu_1", "content": "A"},
                {"type": "tool_result", "tool_use_id": "toolu_2", "content": "B"},
            ],
        },
    ]


@pytest.mark.parametrize(
    ("stop_reason", "stop"),
    [("max_tokens", "max_tokens"), ("refusal", "refusal"), ("end_turn", "end_turn"), ("stop_sequence", "end_turn")],
)
async def test_anthropic_stop_reasons_map_to_acp_stop_reasons(
    anthropic_provider: AnthropicProvider, fake_anthropic: anth.FakeAnthropic, stop_reason: str, stop: str
) -> None:
    fake_anthropic.script(anth.text_reply("text", stop_reason=stop_reason))
    assert (await respond(anthropic_provider)).stop_reason == stop


async def test_anthropic_usage_counts_cached_input_and_output(fake_anthropic: anth.FakeAnthropic) -> None:
    provider = AnthropicProvider(
        "claude-fake", api_key=SECRET, base_url=fake_anthropic.base_url, context_window=200_000
    )
    fake_anthropic.script(anth.message_reply(anth.block("text", "hi"), usage=(100, 42), cached_input=900))
    recorder = Recorder()
    await respond(provider, recorder=recorder)
    assert recorder.usage() == [UsageReported(used=1042, size=200_000)]
    await _close_client(provider)


async def test_anthropic_401_is_one_line_without_the_key(
    anthropic_provider: AnthropicProvider, fake_anthropic: anth.FakeAnthropic
) -> None:
    fake_anthropic.script(anth.error(401, f"invalid x-api-key {SECRET}", kind="authentication_error"))
    assert await failure(anthropic_provider) == "the model endpoint answered 401: invalid x-api-key [redacted]"


async def test_anthropic_overloaded_is_retried_then_succeeds(
    anthropic_provider: AnthropicProvider, fake_anthropic: anth.FakeAnthropic
) -> None:
    fake_anthropic.script(
        anth.error(529, "Overloaded", kind="overloaded_error", retry_after_ms=5), anth.text_reply("ok")
    )
    assert (await respond(anthropic_provider)).text == "ok"
    assert len(fake_anthropic.requests) == 2


@pytest.mark.parametrize(
    ("reply", "expected"),
    [
        (anth.text_reply("x", ending="drop"), "the model stream broke off: peer closed connection"),
        (anth.stream_error_reply(["x"], "Overloaded"), "the model endpoint reported an error: Overloaded"),
        (
            anth.message_reply(anth.block("text", "x"), complete=False),
            "the model stream ended before the reply was complete",
        ),
    ],
    ids=["dropped-connection", "error-event", "no-message-stop"],
)
async def test_anthropic_stream_that_fails_midway_is_a_model_error(
    anthropic_provider: AnthropicProvider, fake_anthropic: anth.FakeAnthropic, reply: Any, expected: str
) -> None:
    fake_anthropic.script(reply)
    recorder = Recorder()
    assert (await failure(anthropic_provider, recorder)).startswith(expected)
    assert recorder.texts() == ["x"]


async def test_anthropic_unreachable_endpoint_names_the_endpoint_and_the_cause() -> None:
    url = f"http://127.0.0.1:{closed_port()}"
    provider = AnthropicProvider("claude-fake", api_key=SECRET, base_url=url, timeouts=EndpointTimeouts(attempts=1))
    assert await failure(provider) == f"cannot reach the model endpoint {url}: connection refused"
    await _close_client(provider)


async def test_anthropic_cancel_mid_stream_closes_the_connection_and_raises_cancellation(
    anthropic_provider: AnthropicProvider, fake_anthropic: anth.FakeAnthropic
) -> None:
    fake_anthropic.script(anth.text_reply("one", "two", ending="hang"))
    await _cancel_mid_stream(anthropic_provider, fake_anthropic)


async def test_anthropic_without_any_credentials_is_a_model_error(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, fake_anthropic: anth.FakeAnthropic
) -> None:
    for variable in ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN"):
        monkeypatch.delenv(variable, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))  # no credential files either
    provider = AnthropicProvider("claude-fake", base_url=fake_anthropic.base_url)
    message = await failure(provider)
    assert message.startswith("the model client is not configured: ")
    assert fake_anthropic.requests == []
    await _close_client(provider)


async def test_anthropic_without_its_sdk_says_how_to_install_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "anthropic", None)  # what `import anthropic` sees when it is not installed
    provider = AnthropicProvider("claude-fake", api_key=SECRET)
    assert await failure(provider) == "the anthropic provider needs: pip install 'acp-server[anthropic]'"


# --- acp-server itself against the fake endpoint ---


async def _openai_server(start_server: StartServer, fake: FakeOpenAI, tmp_path: Path) -> tuple[RawClient, str]:
    env = {"OPENAI_API_KEY": SECRET, "ACP_SERVER_CONFIG": str(tmp_path / "absent.toml")}
    client = await start_server("--model", "openai:fake-model", "--base-url", fake.base_url, env=env)
    await client.initialize()
    return client, await client.new_session(str(tmp_path))


def _prompt(session_id: str, text: str) -> dict[str, Any]:
    return {"sessionId": session_id, "prompt": [{"type": "text", "text": text}]}


async def test_acp_server_streams_an_openai_model_reply_to_the_editor(
    start_server: StartServer, fake_openai: FakeOpenAI, tmp_path: Path
) -> None:
    fake_openai.script(text_reply("Hello ", "from ", "the model."))
    client, session = await _openai_server(start_server, fake_openai, tmp_path)
    response = await client.call("session/prompt", _prompt(session, "hi there"), timeout=scaled(30))
    assert response["result"] == {"stopReason": "end_turn"}
    assert client.texts(session) == ["Hello ", "from ", "the model."]
    request = fake_openai.requests[0]  # (a title request may follow)
    messages = request.body["messages"]
    assert messages[0]["role"] == "system" and messages[0]["content"]  # the server's system prompt comes first
    assert messages[-1] == {"role": "user", "content": "hi there"}


async def test_acp_server_cancel_closes_the_model_connection_and_answers_cancelled(
    start_server: StartServer, fake_openai: FakeOpenAI, tmp_path: Path
) -> None:
    fake_openai.script(text_reply("one", "two", ending="hang"))
    client, session = await _openai_server(start_server, fake_openai, tmp_path)
    prompt = await client.request("session/prompt", _prompt(session, "go"))
    await client.wait_for(lambda _: client.texts(session) == ["one", "two"], timeout=scaled(30))
    cancelled_at = time.monotonic()
    await client.cancel(session)
    response = await client.response(prompt)
    assert response["result"] == {"stopReason": "cancelled"}
    assert await fake_openai.wait_disconnect_async(T_ACK), "the model endpoint never saw the connection close"
    assert fake_openai.disconnects[0] - cancelled_at < T_ACK


async def test_acp_server_answers_a_model_failure_with_one_line_and_no_key(
    start_server: StartServer, fake_openai: FakeOpenAI, tmp_path: Path
) -> None:
    fake_openai.script(error(401, f"Incorrect API key provided: {SECRET}."))
    client, session = await _openai_server(start_server, fake_openai, tmp_path)
    response = await client.call("session/prompt", _prompt(session, "hi"), timeout=scaled(30))
    assert response["error"]["code"] == -32603
    message = response["error"]["message"]
    assert message == "The model failed: the model endpoint answered 401: Incorrect API key provided: [redacted]."
    code, _ = await client.close()
    assert code == 0
    assert "SECRET" not in client.stderr_text  # nor in the server's log


@pytest.mark.parametrize("family", ["openai", "anthropic"])
async def test_a_models_list_is_read_within_its_bound_and_parsed_in_a_worker_thread(
    fake_openai: FakeOpenAI,
    fake_anthropic: anth.FakeAnthropic,
    family: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Issue 20 item 7: the list was read whole and parsed on the event loop.
    from acp_server.runtime.providers import http_common
    from acp_server.runtime.providers.catalog import decode_listing

    server: FakeOpenAI | anth.FakeAnthropic = fake_openai if family == "openai" else fake_anthropic
    provider: OpenAIProvider | AnthropicProvider = (
        OpenAIProvider("m", api_key=SECRET, base_url=server.base_url)
        if family == "openai"
        else AnthropicProvider("m", api_key=SECRET, base_url=server.base_url)
    )
    decoded_in: list[threading.Thread] = []

    def decode(raw: bytes, encoding: str) -> tuple[str, ...]:
        decoded_in.append(threading.current_thread())
        return decode_listing(raw, encoding)

    monkeypatch.setattr(http_common, "decode_listing", decode, raising=False)  # (absent before: never called)
    try:
        body = orjson.dumps(server.models_body(["model-a", "model-b"]))
        server.serve_models_bytes(gzip.compress(body), "gzip")
        assert await provider.list_models() == ("model-a", "model-b")
        assert decoded_in and threading.main_thread() not in decoded_in
        assert server.model_list_requests[0].headers["accept-encoding"] == "gzip"
        server.serve_models_bytes(b"{" * (8 * 1024 * 1024 + 1))
        with pytest.raises(ModelError, match="larger than 8 MiB, so it was not read"):
            await provider.list_models()
        assert len(decoded_in) == 1  # refused while it was read: never parsed
    finally:
        await _close_client(provider)
