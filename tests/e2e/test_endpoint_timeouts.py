"""A broken model endpoint bounds the turn: silent before its headers, silent in the middle of a reply, refusing
connections, or failing until the total bound runs out. Each case runs `acp-server` over real stdio against a real
loopback server, with small timeouts set in a real config.toml (`[providers.openai]`), and checks that the prompt is
answered with one line naming the endpoint and the setting that fired, and that the session then works again.

The time bounds are safety bounds: the acknowledgement bound plus what the configured timeouts allow.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from acp_server.errors import ModelError
from acp_server.runtime.model import Message, TurnEvent, TurnInput
from acp_server.runtime.providers.anthropic import AnthropicProvider
from acp_server.settings.checks import load_settings
from acp_server.settings.files import DEFAULT_TIMEOUTS, EndpointTimeouts, endpoint_timeouts, read_config_file
from tests.conftest import StartServer
from tests.support.fake_anthropic import FakeAnthropic
from tests.support.fake_openai import FakeOpenAI, error, silent, text_reply
from tests.support.harness import GRACE, T_ACK, RawClient

pytestmark = pytest.mark.timeout(120)

KEY = "sk-test-ENDPOINT0123456789"
# The longest wait the provider puts between two attempts (http_common._MAX_BACKOFF), for the safety bounds.
MAX_BACKOFF = 4.0
# A session's first model call imports the SDK in a thread: seconds on a loaded machine (test_providers allows 30).
T_FIRST_CALL = 30.0


@pytest.fixture
def fake_openai() -> Iterator[FakeOpenAI]:
    with FakeOpenAI() as server:
        yield server


def closed_port() -> int:
    """A loopback port nothing listens on (connecting is refused)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


async def openai_session(
    start_server: StartServer, tmp_path: Path, base_url: str, **timeouts: float
) -> tuple[RawClient, str]:
    """A server whose config.toml points `openai` at `base_url` with these timeout keys, and one session."""
    lines = ["[providers.openai]", f'base_url = "{base_url}"', *(f"{k} = {v}" for k, v in timeouts.items())]
    config = tmp_path / "config.toml"
    config.write_text("\n".join(lines) + "\n")
    env = {"OPENAI_API_KEY": KEY, "ACP_SERVER_CONFIG": str(config)}
    client = await start_server("--model", "openai:fake-model", "--cleanup-deadline", str(GRACE), env=env)
    await client.initialize()
    return client, await client.new_session(str(tmp_path))


def prompt(session_id: str, text: str) -> dict[str, Any]:
    return {"sessionId": session_id, "prompt": [{"type": "text", "text": text}]}


def bound(attempts: int, per_attempt: float) -> float:
    """How long a prompt may take at most: the SDK's import, every attempt waiting its timeout and the backoff,
    plus the acknowledgement bound. Far below what the old 600 s timeout with its retries took."""
    return T_FIRST_CALL + T_ACK + attempts * (per_attempt + MAX_BACKOFF)


async def assert_failed_with(client: RawClient, session: str, expected: str, within: float) -> None:
    response = await client.call("session/prompt", prompt(session, "hello"), timeout=within)
    assert response["error"]["code"] == -32603
    message = response["error"]["message"]
    assert "\n" not in message and KEY not in message
    assert message == f"The model failed: {expected}"


async def assert_session_works(client: RawClient, session: str, fake: FakeOpenAI) -> None:
    """The next prompt of the same session is answered by a healthy endpoint."""
    fake.script(text_reply("back ", "again"))
    fake.set_default(text_reply("A title"))  # the title request after the first completed turn
    before = len(client.texts(session))
    response = await client.call("session/prompt", prompt(session, "once more"), timeout=bound(1, T_ACK))
    assert response["result"] == {"stopReason": "end_turn"}
    assert client.texts(session)[before:] == ["back ", "again"]


async def test_endpoint_that_never_sends_headers_ends_the_turn_naming_first_byte_timeout(
    start_server: StartServer, fake_openai: FakeOpenAI, tmp_path: Path
) -> None:
    fake_openai.script(silent(), silent())
    client, session = await openai_session(
        start_server, tmp_path, fake_openai.base_url, first_byte_timeout=0.5, max_attempts=2
    )
    await assert_failed_with(
        client,
        session,
        f"the model endpoint {fake_openai.base_url} sent no response headers within 0.5 s (first_byte_timeout) "
        "(2 attempts)",
        within=bound(2, 0.5),
    )
    assert len(fake_openai.requests) == 2
    assert await fake_openai.wait_disconnect_async(T_ACK), "the abandoned request's connection stayed open"
    await assert_session_works(client, session, fake_openai)


async def test_endpoint_silent_after_its_first_chunk_ends_the_turn_naming_chunk_timeout(
    start_server: StartServer, fake_openai: FakeOpenAI, tmp_path: Path
) -> None:
    fake_openai.script(text_reply("one", ending="hang"))
    client, session = await openai_session(start_server, tmp_path, fake_openai.base_url, chunk_timeout=0.5)
    await assert_failed_with(
        client,
        session,
        f"the model endpoint {fake_openai.base_url} sent nothing for 0.5 s in the middle of its reply (chunk_timeout)",
        within=bound(1, 0.5),
    )
    assert client.texts(session) == ["one"]  # what streamed before the silence was shown
    assert len(fake_openai.requests) == 1  # a reply that has started is never asked for again
    assert await fake_openai.wait_disconnect_async(T_ACK), "the silent reply's connection stayed open"
    await assert_session_works(client, session, fake_openai)


async def test_endpoint_refusing_connections_ends_the_turn_after_the_configured_attempts(
    start_server: StartServer, tmp_path: Path
) -> None:
    port = closed_port()
    url = f"http://127.0.0.1:{port}/v1"
    client, session = await openai_session(start_server, tmp_path, url, connect_timeout=0.5, max_attempts=2)
    await assert_failed_with(
        client, session, f"cannot reach the model endpoint {url}: connection refused (2 attempts)", within=bound(2, 0.5)
    )
    with FakeOpenAI(port) as fake:  # the endpoint comes up: the same session carries on
        await assert_session_works(client, session, fake)


async def test_endpoint_that_never_accepts_the_connection_ends_the_turn_naming_connect_timeout(
    start_server: StartServer, tmp_path: Path
) -> None:
    # A listener whose backlog (0) is taken by one connection that is never accepted: the kernel drops the SYNs of
    # any other, so connecting hangs, as it does to a host that drops packets.
    with socket.socket() as listener, socket.socket() as filler:
        listener.bind(("127.0.0.1", 0))
        listener.listen(0)
        port = listener.getsockname()[1]
        filler.connect(("127.0.0.1", port))
        url = f"http://127.0.0.1:{port}/v1"
        client, session = await openai_session(start_server, tmp_path, url, connect_timeout=0.5, max_attempts=2)
        await assert_failed_with(
            client,
            session,
            f"the model endpoint {url} did not accept a connection within 0.5 s (connect_timeout) (2 attempts)",
            within=bound(2, 0.5),
        )
    with FakeOpenAI(port) as fake:  # the endpoint comes up: the same session carries on
        await assert_session_works(client, session, fake)


async def test_total_timeout_caps_the_attempts_of_one_model_call(
    start_server: StartServer, fake_openai: FakeOpenAI, tmp_path: Path
) -> None:
    fake_openai.set_default(silent())
    client, session = await openai_session(
        start_server, tmp_path, fake_openai.base_url, first_byte_timeout=0.5, total_timeout=1.5, max_attempts=10
    )
    response = await client.call("session/prompt", prompt(session, "hello"), timeout=bound(1, 1.5))
    message = response["error"]["message"]
    # Either the bound cut an attempt short, or it left no time for another one: both say so.
    assert message.startswith(f"The model failed: the model endpoint {fake_openai.base_url} ")
    assert "1.5 s" in message and "total_timeout" in message
    assert 1 <= len(fake_openai.requests) <= 3  # far fewer than max_attempts: the total bound stopped them


async def test_total_timeout_ends_a_call_whose_single_attempt_outlasts_it(
    start_server: StartServer, fake_openai: FakeOpenAI, tmp_path: Path
) -> None:
    fake_openai.script(silent())
    client, session = await openai_session(
        start_server, tmp_path, fake_openai.base_url, first_byte_timeout=60, total_timeout=0.5
    )
    await assert_failed_with(
        client,
        session,
        f"the model endpoint {fake_openai.base_url} did not finish its reply within 0.5 s (total_timeout)",
        within=bound(1, 0.5),
    )
    await assert_session_works(client, session, fake_openai)


async def test_cancel_while_waiting_for_headers_answers_cancelled_not_an_error(
    start_server: StartServer, fake_openai: FakeOpenAI, tmp_path: Path
) -> None:
    fake_openai.script(silent())
    client, session = await openai_session(start_server, tmp_path, fake_openai.base_url, first_byte_timeout=60)
    request = await client.request("session/prompt", prompt(session, "hello"))
    assert await fake_openai.wait_requests(1, timeout=bound(1, T_ACK))
    await client.cancel(session)
    response = await client.response(request, timeout=T_ACK)
    assert response["result"] == {"stopReason": "cancelled"}
    await assert_session_works(client, session, fake_openai)


async def test_retry_after_longer_than_the_time_left_ends_the_call_at_once(
    start_server: StartServer, fake_openai: FakeOpenAI, tmp_path: Path
) -> None:
    fake_openai.script(error(503, "overloaded", kind="server_error", retry_after_ms=30_000))
    client, session = await openai_session(start_server, tmp_path, fake_openai.base_url, total_timeout=10)
    await assert_failed_with(
        client,
        session,
        "the model endpoint answered 503: overloaded (1 attempt; no time left for another within 10 s, total_timeout)",
        within=bound(1, T_ACK),
    )
    assert len(fake_openai.requests) == 1


async def test_anthropic_shares_the_bounds_a_silent_endpoint_names_first_byte_timeout() -> None:
    with FakeAnthropic() as fake:
        fake.script(silent())
        timeouts = EndpointTimeouts(first_byte=0.3, attempts=1)
        provider = AnthropicProvider("claude-fake", api_key=KEY, base_url=fake.base_url, timeouts=timeouts)
        turn = provider.open_turn(TurnInput("sess_1", 1, 0, {}, lambda *args, **kwargs: None, system_prompt="x"))

        async def ignore(event: TurnEvent) -> None:
            return None

        try:
            with pytest.raises(ModelError) as caught:
                await turn.respond([Message("user", "hello")], (), ignore)
        finally:
            await (await provider.client()).close()
    expected = f"the model endpoint {fake.base_url} sent no response headers within 0.3 s (first_byte_timeout)"
    assert str(caught.value) == expected


# --- the config file's keys ---


def test_timeout_keys_are_read_per_provider(tmp_path: Path) -> None:
    config = tmp_path / "config.toml"
    config.write_text(
        "[providers.openai]\nconnect_timeout = 3\nfirst_byte_timeout = 45.5\nchunk_timeout = 30\n"
        "total_timeout = 600\nmax_attempts = 1\n[providers.anthropic]\nchunk_timeout = 7\n"
    )
    document = read_config_file(config)
    assert endpoint_timeouts("openai", document) == EndpointTimeouts(3.0, 45.5, 30.0, 600.0, 1)
    assert endpoint_timeouts("anthropic", document) == EndpointTimeouts(between_chunks=7.0)
    assert load_settings(config).problems == ()


def test_defaults_are_what_a_user_would_pick() -> None:
    assert EndpointTimeouts(connect=10, first_byte=120, between_chunks=120, total=300, attempts=3) == DEFAULT_TIMEOUTS


def test_unusable_timeout_values_are_reported_and_keep_their_defaults(tmp_path: Path) -> None:
    config = tmp_path / "config.toml"
    config.write_text(
        '[providers.openai]\nconnect_timeout = "fast"\nfirst_byte_timeout = 0\nchunk_timeout = -1\n'
        "total_timeout = true\nmax_attempts = 11\n"
    )
    assert endpoint_timeouts("openai", read_config_file(config)) == DEFAULT_TIMEOUTS
    problems = {p.key: p.message for p in load_settings(config).problems}
    assert problems == {
        "providers.openai.connect_timeout": "expected a number, found text; ignored (the default, 10, applies)",
        "providers.openai.first_byte_timeout": (
            "expected a number of seconds above zero, found 0; ignored (the default, 120, applies)"
        ),
        "providers.openai.chunk_timeout": (
            "expected a number of seconds above zero, found -1; ignored (the default, 120, applies)"
        ),
        "providers.openai.total_timeout": "expected a number, found true/false; ignored (the default, 300, applies)",
        "providers.openai.max_attempts": (
            "expected a whole number from 1 to 10, found 11; ignored (the default, 3, applies)"
        ),
    }
