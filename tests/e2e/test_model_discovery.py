"""Model discovery end to end over real stdio: the configured endpoints' own models join the `model` option's
choices, from the cache at once or from the endpoint in the background (announced with `config_option_update`), a
chosen one is what the next prompt's request names, and an endpoint that is down, failing, silent or answering
garbage leaves the configured models, a line in the log, and a working server.

The endpoints are the loopback fakes (`tests/support/fake_openai.py`, `fake_anthropic.py`) serving their models
lists; the cache is the real file in the server's state directory.
"""

from __future__ import annotations

import asyncio
import os
import stat
import struct
import time
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal

import orjson
import pytest

from tests.conftest import StartServer
from tests.e2e.test_endpoint_timeouts import closed_port
from tests.support import fake_anthropic
from tests.support.fake_anthropic import FakeAnthropic
from tests.support.fake_openai import FakeOpenAI, ListBehaviour, Received, text_reply
from tests.support.harness import T_ACK, T_EXIT, T_WAIT, W_QUIET, RawClient, scaled

pytestmark = pytest.mark.timeout(120)

OPENAI_KEY = "sk-discovery-OPENAI-Zt8kLp4RwN7yH"
ANTHROPIC_KEY = "sk-ant-discovery-Qm3Zt8kLp4RwN7"
CONFIGURED = ["openai:fake-model", "anthropic:claude-fake"]
# A session's first listing imports the SDK in a thread: seconds on a loaded machine.
T_LISTED = scaled(30)


@pytest.fixture
def openai_endpoint() -> Iterator[FakeOpenAI]:
    with FakeOpenAI() as server:
        yield server


@pytest.fixture
def anthropic_endpoint() -> Iterator[FakeAnthropic]:
    with FakeAnthropic() as server:
        yield server


def write_config(
    tmp_path: Path, openai_url: str, anthropic_url: str | None = None, *extra: str, quick: bool = False
) -> Path:
    """`quick`: the openai endpoint's connect and first-byte timeouts are 0.5 s, so a listing gives up after 1 s."""
    lines = [
        'model = "openai:fake-model"',
        *(['models = ["anthropic:claude-fake"]'] if anthropic_url else []),
        *extra,
        "[providers.openai]",
        f'base_url = "{openai_url}"',
        *(["connect_timeout = 0.5", "first_byte_timeout = 0.5"] if quick else []),
        *(["[providers.anthropic]", f'base_url = "{anthropic_url}"'] if anthropic_url else []),
    ]
    config = tmp_path / "config.toml"
    config.write_text("\n".join(lines) + "\n")
    return config


def env_for(config: Path, state_dir: Path, log_file: Path | None = None) -> dict[str, str]:
    env = {
        "ACP_SERVER_CONFIG": str(config),
        "ACP_SERVER_STATE_DIR": str(state_dir),
        "OPENAI_API_KEY": OPENAI_KEY,
        "OPENAI_BASE_URL": "",
        "ANTHROPIC_API_KEY": ANTHROPIC_KEY,
        "ANTHROPIC_AUTH_TOKEN": "",
        "ANTHROPIC_BASE_URL": "",
    }
    if log_file is not None:
        env["ACP_SERVER_LOG_FILE"] = str(log_file)
    return env


def model_values(options: list[dict[str, Any]]) -> list[str]:
    model = next(o for o in options if o["id"] == "model")
    assert model["category"] == "model"
    return [choice["value"] for choice in model["options"]]


def option_updates(client: RawClient, session: str) -> list[dict[str, Any]]:
    return [
        m
        for m in client.received
        if m.get("method") == "session/update"
        and m["params"]["sessionId"] == session
        and m["params"]["update"]["sessionUpdate"] == "config_option_update"
    ]


async def open_session(client: RawClient, cwd: Path) -> tuple[str, dict[str, Any]]:
    await client.initialize()
    response = await client.call("session/new", {"cwd": str(cwd), "mcpServers": []})
    assert "result" in response, response
    return response["result"]["sessionId"], response


def read_if_there(path: Path) -> str:
    return path.read_text() if path.exists() else ""


async def wait_for_log(path: Path, text: str, timeout: float) -> str:
    """The log file's text once it holds `text` (the same lines as stderr, which is read only at exit)."""
    deadline = time.monotonic() + timeout
    while True:
        found = read_if_there(path)
        if text in found:
            return found
        assert time.monotonic() < deadline, f"{text!r} never reached the log:\n{found[-2000:]}"
        await asyncio.sleep(0.05)


DISCOVERED = [
    "openai:fake-model",
    "anthropic:claude-fake",
    "openai:qwen2.5-coder:7b",
    "openai:meta-llama/llama-3.3-70b",
    "anthropic:claude-opus-4-1",
]


def serve_lists(openai_endpoint: FakeOpenAI, anthropic_endpoint: FakeAnthropic, *, held: bool = False) -> None:
    behaviour: ListBehaviour = "held" if held else "list"
    # The configured model is listed too (no duplicate), and an embedding model is left out.
    openai_endpoint.serve_models(
        "fake-model", "qwen2.5-coder:7b", "nomic-embed-text", "meta-llama/llama-3.3-70b", behaviour=behaviour
    )
    anthropic_endpoint.serve_models("claude-fake", "claude-opus-4-1", behaviour=behaviour)


async def test_the_endpoints_models_are_announced_after_session_new_and_a_chosen_one_answers_the_prompt(
    start_server: StartServer, openai_endpoint: FakeOpenAI, anthropic_endpoint: FakeAnthropic, tmp_path: Path
) -> None:
    serve_lists(openai_endpoint, anthropic_endpoint, held=True)  # the lists wait until session/new is answered
    config = write_config(tmp_path, openai_endpoint.base_url, anthropic_endpoint.base_url)
    client = await start_server("--model", "openai:fake-model", env=env_for(config, tmp_path / "state"))
    session, created = await open_session(client, tmp_path)
    # Answered while both endpoints are still being asked: the configured models, nothing waited for.
    assert model_values(created["result"]["configOptions"]) == CONFIGURED
    assert await openai_endpoint.wait_model_list_requests(1, T_LISTED)
    assert await anthropic_endpoint.wait_model_list_requests(1, T_LISTED)
    openai_endpoint.release_models()
    anthropic_endpoint.release_models()

    update = await client.wait_for(lambda m: bool(option_updates(client, session)), T_LISTED)
    assert client.received.index(update) > client.received.index(created)
    options = update["params"]["update"]["configOptions"]
    assert model_values(options) == DISCOVERED
    assert [o["id"] for o in options] == ["model", "mode", "prompt_policy"]  # the complete list, as ACP wants
    await client.quiet(W_QUIET, lambda m: len(option_updates(client, session)) > 1)  # once, not per endpoint

    # A discovered model is chosen like a configured one, and the next prompt goes to it.
    chosen = await client.call(
        "session/set_config_option", {"sessionId": session, "configId": "model", "value": "openai:qwen2.5-coder:7b"}
    )
    model = next(o for o in chosen["result"]["configOptions"] if o["id"] == "model")
    assert model["currentValue"] == "openai:qwen2.5-coder:7b"
    openai_endpoint.script(text_reply("from ", "qwen"))
    openai_endpoint.set_default(text_reply("A title"))
    prompt = {"sessionId": session, "prompt": [{"type": "text", "text": "hello"}]}
    assert (await client.call("session/prompt", prompt, timeout=T_LISTED))["result"] == {"stopReason": "end_turn"}
    assert "".join(client.texts(session)) == "from qwen"
    assert openai_endpoint.requests[0].body["model"] == "qwen2.5-coder:7b"

    anthropic_endpoint.script(fake_anthropic.text_reply("from ", "opus"))
    anthropic_endpoint.set_default(fake_anthropic.text_reply("A title"))
    await client.call(
        "session/set_config_option",
        {"sessionId": session, "configId": "model", "value": "anthropic:claude-opus-4-1"},
    )
    assert (await client.call("session/prompt", prompt, timeout=T_LISTED))["result"] == {"stopReason": "end_turn"}
    assert "".join(client.texts(session)).endswith("from qwenfrom opus")
    assert anthropic_endpoint.requests[0].body["model"] == "claude-opus-4-1"

    # Each endpoint was asked for its list the way its provider talks to it: the same key and version headers.
    listed = openai_endpoint.model_list_requests[0]
    assert listed.path == "/v1/models" and listed.headers["authorization"] == f"Bearer {OPENAI_KEY}"
    asked = anthropic_endpoint.model_list_requests[0]
    assert asked.path.partition("?")[0] == "/v1/models"
    sent = anthropic_endpoint.requests[0].headers
    for header in ("x-api-key", "authorization", "anthropic-version"):
        assert asked.headers.get(header) == sent.get(header), header
    assert ANTHROPIC_KEY in (asked.headers.get("x-api-key", "") + asked.headers.get("authorization", ""))


async def test_a_warm_cache_lists_the_discovered_models_in_session_new_and_holds_no_secret(
    start_server: StartServer, openai_endpoint: FakeOpenAI, anthropic_endpoint: FakeAnthropic, tmp_path: Path
) -> None:
    serve_lists(openai_endpoint, anthropic_endpoint)
    config = write_config(tmp_path, openai_endpoint.base_url, anthropic_endpoint.base_url)
    state = tmp_path / "state"
    first = await start_server("--model", "openai:fake-model", env=env_for(config, state))
    session, _ = await open_session(first, tmp_path)
    await first.wait_for(lambda m: bool(option_updates(first, session)), T_LISTED)
    code, _ = await first.close()
    assert code == 0

    cache = state / "model-lists.json"
    text = cache.read_text()
    assert OPENAI_KEY not in text and ANTHROPIC_KEY not in text
    assert "authorization" not in text.lower() and "x-api-key" not in text.lower()
    if os.name == "posix":
        assert stat.S_IMODE(cache.stat().st_mode) == 0o600
    endpoints = {(e["family"], e["endpoint"]): e["models"] for e in orjson.loads(text)["endpoints"]}
    assert endpoints == {
        ("openai", openai_endpoint.base_url): ["fake-model", "qwen2.5-coder:7b", "meta-llama/llama-3.3-70b"],
        ("anthropic", anthropic_endpoint.base_url): ["claude-fake", "claude-opus-4-1"],
    }
    assert [p.name for p in state.iterdir() if p.name.startswith(".model-lists-")] == []  # no temporary file left

    # A new process: its first session already offers them (what `acpx --model NAME` checks), and the fresh
    # lists are not asked for again.
    second = await start_server("--model", "openai:fake-model", env=env_for(config, state))
    session, created = await open_session(second, tmp_path)
    assert model_values(created["result"]["configOptions"]) == DISCOVERED
    chosen = await second.call(
        "session/set_config_option",
        {"sessionId": session, "configId": "model", "value": "openai:meta-llama/llama-3.3-70b"},
    )
    assert "result" in chosen, chosen
    await second.quiet(W_QUIET, lambda m: bool(option_updates(second, session)))
    # Loaded again, the session keeps the discovered model it was switched to.
    loaded = await second.call("session/load", {"sessionId": session, "cwd": str(tmp_path), "mcpServers": []})
    model = next(o for o in loaded["result"]["configOptions"] if o["id"] == "model")
    assert model["currentValue"] == "openai:meta-llama/llama-3.3-70b"
    assert len(openai_endpoint.model_list_requests) == 1
    assert len(anthropic_endpoint.model_list_requests) == 1


@pytest.mark.parametrize("failure", ["down", "fail", "garbage", "hang"])
async def test_an_endpoint_that_cannot_list_leaves_the_configured_models_and_says_why(
    start_server: StartServer, openai_endpoint: FakeOpenAI, tmp_path: Path, failure: ListBehaviour | Literal["down"]
) -> None:
    if failure != "down":
        openai_endpoint.serve_models("other-model", behaviour=failure)
    url = f"http://127.0.0.1:{closed_port()}/v1" if failure == "down" else openai_endpoint.base_url
    config = write_config(tmp_path, url, None, 'models = ["openai:configured-too"]', quick=True)
    log_file = tmp_path / "acp-server.log"
    state = tmp_path / "state"
    client = await start_server("--model", "openai:fake-model", env=env_for(config, state, log_file))
    session, created = await open_session(client, tmp_path)
    configured = ["openai:fake-model", "openai:configured-too"]
    assert model_values(created["result"]["configOptions"]) == configured
    logged = await wait_for_log(log_file, "offering the configured models only", T_LISTED)
    assert OPENAI_KEY not in logged
    if failure == "hang":
        assert "did not list its models within 1 s" in logged  # connect_timeout + first_byte_timeout
        assert await openai_endpoint.wait_disconnect_async(T_WAIT), "the abandoned listing kept its connection"
    # The server works on: the configured model answers (a down endpoint is down for prompts too).
    if failure != "down":
        openai_endpoint.script(text_reply("still ", "here"))
        openai_endpoint.set_default(text_reply("A title"))
        prompt = {"sessionId": session, "prompt": [{"type": "text", "text": "hello"}]}
        assert (await client.call("session/prompt", prompt, timeout=T_LISTED))["result"] == {"stopReason": "end_turn"}
    again = await client.call("session/new", {"cwd": str(tmp_path), "mcpServers": []})
    assert model_values(again["result"]["configOptions"]) == configured
    assert option_updates(client, session) == []
    assert not (state / "model-lists.json").exists() or "other-model" not in (state / "model-lists.json").read_text()
    code, _ = await client.close()
    assert code == 0
    assert "offering the configured models only" in client.stderr_text
    assert "Traceback" not in client.stderr_text
    assert len(openai_endpoint.model_list_requests) == (0 if failure == "down" else 1)  # one try per time to live


async def test_discovery_turned_off_asks_no_endpoint(
    start_server: StartServer, openai_endpoint: FakeOpenAI, tmp_path: Path
) -> None:
    openai_endpoint.serve_models("fake-model", "other-model")
    config = write_config(tmp_path, openai_endpoint.base_url, None, "model_discovery = false")
    client = await start_server("--model", "openai:fake-model", env=env_for(config, tmp_path / "state"))
    session, created = await open_session(client, tmp_path)
    assert model_values(created["result"]["configOptions"]) == ["openai:fake-model"]
    await client.quiet(W_QUIET, lambda m: bool(option_updates(client, session)))
    assert openai_endpoint.model_list_requests == []
    refused = await client.call(
        "session/set_config_option", {"sessionId": session, "configId": "model", "value": "openai:other-model"}
    )
    assert refused["error"]["code"] == -32602


async def test_a_listing_in_flight_delays_neither_a_cancel_nor_the_exit(
    start_server: StartServer, openai_endpoint: FakeOpenAI, tmp_path: Path
) -> None:
    openai_endpoint.serve_models("fake-model", "other-model", behaviour="held")  # never released
    config = write_config(tmp_path, openai_endpoint.base_url, None, 'models = ["openai:fake-model"]')
    client = await start_server(
        "--model", "scripted", "--test-mode", "--cleanup-deadline", "10", env=env_for(config, tmp_path / "state")
    )
    session, created = await open_session(client, tmp_path)
    assert model_values(created["result"]["configOptions"]) == ["scripted", "openai:fake-model"]
    assert await openai_endpoint.wait_model_list_requests(1, T_LISTED)
    prompt = await client.prompt(session, [{"say": "a"}, {"gate": "g1"}, {"say": "b"}])
    await client.probe("gate_reached", sessionId=session, gate="g1")
    sent = await client.cancel(session)
    response = await client.response(prompt)
    assert response["result"] == {"stopReason": "cancelled"}
    assert client.arrival_time(response) - sent <= T_ACK  # at once, far below the 10 s cleanup deadline
    code, took = await client.close()  # the listing is still held: it is abandoned, not awaited
    assert code == 0 and took <= T_EXIT
    assert option_updates(client, session) == []


async def test_an_endpoint_asked_without_a_key_is_asked_again_once_authenticate_finds_one(
    start_server: StartServer, anthropic_endpoint: FakeAnthropic, tmp_path: Path
) -> None:
    anthropic_endpoint.serve_models("claude-fake", "claude-opus-4-1")
    config = tmp_path / "config.toml"
    table = f'[providers.anthropic]\nbase_url = "{anthropic_endpoint.base_url}"\n'
    config.write_text(table)
    env = {**env_for(config, tmp_path / "state"), "ANTHROPIC_API_KEY": ""}
    client = await start_server("--model", "anthropic:claude-fake", env=env)
    await client.initialize()
    refused = await client.call("session/new", {"cwd": str(tmp_path), "mcpServers": []})
    assert refused["error"]["code"] == -32000
    config.write_text(table + f'api_key = "{ANTHROPIC_KEY}"\n')
    assert "result" in await client.call("authenticate", {"methodId": "api-key"})
    created = await client.call("session/new", {"cwd": str(tmp_path), "mcpServers": []})
    session = created["result"]["sessionId"]

    def offered() -> list[str]:
        updates = option_updates(client, session)
        latest = updates[-1]["params"]["update"] if updates else created["result"]
        return model_values(latest["configOptions"])

    await client.wait_for(lambda m: offered() == ["anthropic:claude-fake", "anthropic:claude-opus-4-1"], T_LISTED)
    assert len(anthropic_endpoint.model_list_requests) == 1  # not before the key was there
    assert ANTHROPIC_KEY not in (tmp_path / "state" / "model-lists.json").read_text()


def sent_keys(requests: list[Received]) -> set[str]:
    """The known keys found in any header of these requests."""
    return {key for r in requests for key in (OPENAI_KEY, ANTHROPIC_KEY) if any(key in v for v in r.headers.values())}


@pytest.mark.parametrize("default", ["openai", "anthropic"])
async def test_a_key_goes_only_to_its_own_providers_endpoint_whatever_base_url_says(
    start_server: StartServer,
    openai_endpoint: FakeOpenAI,
    anthropic_endpoint: FakeAnthropic,
    tmp_path: Path,
    default: str,
) -> None:
    # Issue 20 item 1: `--model openai:qwen --base-url URL` sent Anthropic's listing, with its key, to URL (as
    # `GET /v1/v1/models`). `--base-url` is the default model's endpoint; each other provider keeps its own.
    serve_lists(openai_endpoint, anthropic_endpoint)
    flagged, other = (
        (openai_endpoint, anthropic_endpoint) if default == "openai" else (anthropic_endpoint, openai_endpoint)
    )
    own_key, other_key = (OPENAI_KEY, ANTHROPIC_KEY) if default == "openai" else (ANTHROPIC_KEY, OPENAI_KEY)
    model, listed = ("openai:fake-model", "anthropic:claude-fake")
    if default == "anthropic":
        model, listed = listed, model
    other_family = listed.partition(":")[0]
    config = tmp_path / "config.toml"
    config.write_text(
        f'models = ["{listed}"]\n[providers.{other_family}]\nbase_url = "{other.base_url}"\napi_key = "{other_key}"\n'
    )
    env = env_for(config, tmp_path / "state")
    env["OPENAI_API_KEY" if default == "openai" else "ANTHROPIC_API_KEY"] = own_key
    env["ANTHROPIC_API_KEY" if default == "openai" else "OPENAI_API_KEY"] = ""
    client = await start_server("--model", model, "--base-url", flagged.base_url, env=env)
    session, _ = await open_session(client, tmp_path)
    assert await flagged.wait_model_list_requests(1, T_LISTED)
    await client.wait_for(lambda m: bool(option_updates(client, session)), T_LISTED)
    await client.quiet(W_QUIET, lambda m: len(option_updates(client, session)) > 1)  # both listings are in

    # The flagged endpoint saw its own provider's listing only, with its own key: never the other's key or path.
    assert sent_keys(flagged.model_list_requests + flagged.requests) == {own_key}
    assert [r.path.partition("?")[0] for r in flagged.model_list_requests] == ["/v1/models"]
    # The other provider's listing went to its own endpoint, with its own key.
    assert sent_keys(other.model_list_requests + other.requests) == {other_key}
    assert len(other.model_list_requests) == 1


async def test_listed_and_cached_ids_pass_one_filter_before_they_are_offered(
    start_server: StartServer, openai_endpoint: FakeOpenAI, anthropic_endpoint: FakeAnthropic, tmp_path: Path
) -> None:
    # Issue 20 item 9: ids with C1 controls were offered from an endpoint, and the cache's ids were not filtered
    # at all (a non-text entry was offered as `openai:{'a': 1}`).
    anthropic_endpoint.serve_models("claude-fake", "claude\u009b31m", "next\u0085line", "claude-good", "a\u2028b")
    openai_endpoint.serve_models("fake-model", "cached-good", "csi\u009b2J", "rtl\u202egpt", "x" * 201)
    config = write_config(tmp_path, openai_endpoint.base_url, anthropic_endpoint.base_url)
    state = tmp_path / "state"
    state.mkdir()
    bad: list[Any] = ["bidi\u202eevil", "c1\u0085", "x" * 10_000, {"a": 1}, 7, "line\u2028sep"]
    entry = {"family": "openai", "endpoint": openai_endpoint.base_url, "fetched_at": time.time()}
    entry["models"] = [*bad, "cached-good"]
    (state / "model-lists.json").write_bytes(orjson.dumps({"version": 1, "endpoints": [entry]}))
    client = await start_server("--model", "openai:fake-model", env=env_for(config, state))
    session, created = await open_session(client, tmp_path)
    assert model_values(created["result"]["configOptions"]) == [*CONFIGURED, "openai:cached-good"]
    update = await client.wait_for(lambda m: bool(option_updates(client, session)), T_LISTED)
    offered = model_values(update["params"]["update"]["configOptions"])
    assert offered == [*CONFIGURED, "openai:cached-good", "anthropic:claude-good"]
    # What was kept for the next process passed the filter too.
    kept = orjson.loads((state / "model-lists.json").read_bytes())["endpoints"]
    assert sorted(name for e in kept for name in e["models"]) == [
        "cached-good",
        "claude-fake",
        "claude-good",
        "fake-model",
    ]


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="POSIX: links and FIFOs")
@pytest.mark.parametrize("kind", ["fifo", "link"])
async def test_a_cache_file_that_is_a_fifo_or_a_link_is_ignored_and_initialize_is_answered(
    start_server: StartServer, openai_endpoint: FakeOpenAI, tmp_path: Path, kind: str
) -> None:
    # Issue 20 item 10: with model-lists.json a FIFO, `initialize` was never answered (the cache's read blocked).
    openai_endpoint.serve_models("fake-model", "listed-model", behaviour="held")
    config = write_config(tmp_path, openai_endpoint.base_url)
    state = tmp_path / "state"
    state.mkdir()
    cache = state / "model-lists.json"
    target = tmp_path / "elsewhere.json"
    if kind == "fifo":
        os.mkfifo(cache)
    else:
        entry = {"family": "openai", "endpoint": openai_endpoint.base_url, "fetched_at": time.time()}
        target.write_bytes(orjson.dumps({"version": 1, "endpoints": [{**entry, "models": ["linked-model"]}]}))
        cache.symlink_to(target)
    log_file = tmp_path / "acp-server.log"
    client = await start_server("--model", "openai:fake-model", env=env_for(config, state, log_file))
    assert "result" in await client.initialize()
    session, created = await open_session(client, tmp_path)
    assert model_values(created["result"]["configOptions"]) == ["openai:fake-model"]  # the link was not followed
    reason = "a FIFO" if kind == "fifo" else "a symbolic link, not followed"
    await wait_for_log(log_file, f"model lists: cannot read {cache} ({reason})", T_WAIT)
    # The listing goes on; its list is written as a regular file in the name's place, the link's target untouched.
    openai_endpoint.release_models()
    update = await client.wait_for(lambda m: bool(option_updates(client, session)), T_LISTED)
    assert model_values(update["params"]["update"]["configOptions"]) == ["openai:fake-model", "openai:listed-model"]
    code, _ = await client.close()
    assert code == 0
    assert stat.S_ISREG(cache.lstat().st_mode) and "listed-model" in cache.read_text()
    if kind == "link":
        assert "linked-model" in target.read_text() and "listed-model" not in target.read_text()


def gzip_bomb(head: bytes, tail: bytes, spaces_mib: int) -> bytes:
    """A gzip body inflating to `head`, `spaces_mib` MiB of spaces, then `tail`, at about 1/1000 of that on the wire.
    Built from one compressed MiB repeated (each ends in a full flush, so every copy decodes alike): cheap to make."""
    compressor = zlib.compressobj(9, zlib.DEFLATED, -zlib.MAX_WBITS)
    block = b" " * (1 << 20)
    first = compressor.compress(head) + compressor.flush(zlib.Z_FULL_FLUSH)
    middle = compressor.compress(block) + compressor.flush(zlib.Z_FULL_FLUSH)
    last = compressor.compress(tail) + compressor.flush()
    crc = zlib.crc32(head)
    for _ in range(spaces_mib):
        crc = zlib.crc32(block, crc)
    crc = zlib.crc32(tail, crc)
    size = (len(head) + (spaces_mib << 20) + len(tail)) & 0xFFFFFFFF
    header = b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x02\xff"
    return header + first + middle * spaces_mib + last + struct.pack("<II", crc, size)


def peak_rss_mib(pid: int) -> float:
    """The process's peak resident memory (VmHWM), in MiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmHWM")


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads the server's peak memory from /proc")
@pytest.mark.parametrize("answer", ["oversized", "gzip-bomb"])
async def test_a_models_list_too_large_as_sent_or_once_inflated_is_refused_and_the_server_stays_responsive(
    start_server: StartServer, openai_endpoint: FakeOpenAI, tmp_path: Path, answer: str
) -> None:
    # Issue 20 item 7: a 50 MB /models answer took the server to 634 MB and stalled every session; a 199 KiB gzip
    # body inflating to 200 MB took it to 462 MB. The list is bounded (8 MiB, as sent and once inflated), and what
    # is inflated and parsed is, in a worker thread.
    if answer == "oversized":  # 12 MiB of plain JSON: half a million entries, a valid list but for its size
        entries = b",".join(b'{"id": "big-model-%06d"}' % n for n in range(480_000))
        openai_endpoint.serve_models_bytes(b'{"object": "list", "data": [' + entries + b"]}")
        said = "it is larger than 8 MiB, so it was not read"
    else:  # 200 MiB once inflated, about 200 KiB sent: a valid list with one model, and spaces
        bomb = gzip_bomb(b'{"data": [{"id": "bomb-model"}]', b"}", 200)
        assert len(bomb) < 256 * 1024
        openai_endpoint.serve_models_bytes(bomb, "gzip")
        said = "it is larger than 8 MiB once decompressed, so it was not read"
    config = write_config(tmp_path, openai_endpoint.base_url, None, 'models = ["openai:configured-too"]')
    log_file = tmp_path / "acp-server.log"
    client = await start_server("--model", "openai:fake-model", env=env_for(config, tmp_path / "state", log_file))
    session, created = await open_session(client, tmp_path)
    configured = ["openai:fake-model", "openai:configured-too"]
    assert model_values(created["result"]["configOptions"]) == configured
    logged = await wait_for_log(log_file, "offering the configured models only", T_LISTED)
    assert f"answered /models, but {said}" in logged
    # Responsive, with the same choices, and its memory never held the list: the peak is far below the 200 MiB the
    # bomb inflates to (the server's own, SDK included, is some 100 MiB).
    again = await client.call("session/new", {"cwd": str(tmp_path), "mcpServers": []})
    assert model_values(again["result"]["configOptions"]) == configured
    await client.quiet(W_QUIET, lambda m: bool(option_updates(client, session)))
    peak = peak_rss_mib(client.process.pid)
    assert peak < 160, f"the server's memory peaked at {peak:.0f} MiB"
    assert len(openai_endpoint.model_list_requests) == 1


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads the server's peak memory from /proc")
async def test_a_models_list_refused_with_a_gzip_bomb_is_reported_and_the_server_stays_small_and_responsive(
    start_server: StartServer, openai_endpoint: FakeOpenAI, tmp_path: Path
) -> None:
    # Issue 20 item 7, the error side: for a status >= 400 the SDK reads the whole body before raising, unbounded and
    # on the event loop; a 404 whose gzip body inflated to 400 MB took the server's memory up by some 430 MB. An
    # error body is read at most 64 KiB, as sent and once inflated, and the failure is reported as any other.
    bomb = gzip_bomb(b'{"error": {"message": "fake server: no models here", "type": "not_found"', b"}}", 200)
    assert len(bomb) < 256 * 1024
    openai_endpoint.serve_models_bytes(bomb, "gzip", status=404)
    config = write_config(tmp_path, openai_endpoint.base_url, None, 'models = ["openai:configured-too"]')
    log_file = tmp_path / "acp-server.log"
    client = await start_server("--model", "openai:fake-model", env=env_for(config, tmp_path / "state", log_file))
    session, created = await open_session(client, tmp_path)
    configured = ["openai:fake-model", "openai:configured-too"]
    assert model_values(created["result"]["configOptions"]) == configured
    logged = await wait_for_log(log_file, "offering the configured models only", T_LISTED)
    assert "the model endpoint answered 404" in logged and "no models here" in logged, logged[-2000:]
    assert OPENAI_KEY not in logged
    again = await client.call("session/new", {"cwd": str(tmp_path), "mcpServers": []})
    assert model_values(again["result"]["configOptions"]) == configured
    assert option_updates(client, session) == []
    peak = peak_rss_mib(client.process.pid)
    assert peak < 160, f"the server's memory peaked at {peak:.0f} MiB"
    code, _ = await client.close()
    assert code == 0
    assert "Traceback" not in client.stderr_text
    assert len(openai_endpoint.model_list_requests) == 1
