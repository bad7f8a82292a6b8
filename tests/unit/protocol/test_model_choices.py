"""`ModelChoices`, the `model` option's choices of one connection, with a lister standing in for an endpoint: the
cache and the providers are read in a worker thread, never on the event loop; a stale cached list is offered once
read and asked for again, a failed listing takes its list away (in the cache too), and one try is made per time to
live. The HTTP side is proven end to end in tests/e2e/test_model_discovery.py."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import anyio.lowlevel
import orjson
import pytest

from acp_server.agent.model_choices import ModelChoices
from acp_server.agent.providers import ProviderCache
from acp_server.errors import ModelError
from acp_server.runtime.providers.catalog import CACHE_FILENAME, LIST_TTL, ListingCache
from acp_server.settings.config import Config

pytestmark = pytest.mark.timeout(30)

ENDPOINT = "http://fake.invalid/v1"


class Lister:
    """What model discovery needs of a provider: its endpoint and its list (or a failure)."""

    def __init__(self, answers: list[tuple[str, ...] | Exception]) -> None:
        self.answers = answers
        self.asked = 0

    def models_endpoint(self) -> str:
        return ENDPOINT

    async def list_models(self) -> tuple[str, ...]:
        self.asked += 1
        answer = self.answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    def open_turn(self, turn: Any) -> Any:
        raise AssertionError("not a model call")

    def check_turn(self, meta: dict[str, Any], turn_index: int) -> str | None:
        return None


def write_cache(state: Path, models: list[str], age: float) -> None:
    state.mkdir(parents=True, exist_ok=True)
    entry = {"family": "openai", "endpoint": ENDPOINT, "fetched_at": time.time() - age, "models": models}
    (state / CACHE_FILENAME).write_bytes(orjson.dumps({"version": 1, "endpoints": [entry]}))


def spawner(group: anyio.abc.TaskGroup) -> Callable[[Callable[[], Coroutine[Any, Any, Any]]], None]:
    def spawn(function: Callable[[], Coroutine[Any, Any, Any]]) -> None:
        group.start_soon(function)

    return spawn


async def run_start(choices: ModelChoices, changes: list[tuple[str, ...]]) -> None:
    """What `initialize` and `session/new` do: start, then await the cache's read (in a worker thread)."""
    choices.start(lambda: changes.append(choices.current))
    await choices.ready()


async def test_a_stale_list_is_offered_at_once_and_dropped_when_the_endpoint_fails(tmp_path: Path) -> None:
    state = tmp_path / "state"
    write_cache(state, ["cached-model"], age=LIST_TTL + 1)
    lister = Lister([ModelError("the model endpoint is down")])
    config = Config(model="openai:configured", state_dir=str(state))
    changes: list[tuple[str, ...]] = []
    async with anyio.create_task_group() as group:
        choices = ModelChoices(config, ProviderCache(lambda spec: lister), spawner(group))
        await run_start(choices, changes)
        assert choices.current == ("openai:configured", "openai:cached-model")  # before any request
        assert choices.accepts("openai:cached-model") and not choices.accepts("openai:never-listed")
    assert lister.asked == 1
    # Each change is announced: the cached list taken, then taken away.
    assert changes == [("openai:configured", "openai:cached-model"), ("openai:configured",)]
    assert choices.outcomes["openai"] == "the model endpoint is down"
    assert orjson.loads((state / CACHE_FILENAME).read_bytes())["endpoints"] == []
    async with anyio.create_task_group() as group:
        await run_start(choices, changes)  # within the time to live of the failed try: not asked again
    assert lister.asked == 1


async def test_a_refresh_asks_the_endpoint_only_once_what_it_waits_for_has_ended(tmp_path: Path) -> None:
    # The server's refresh waits for the deferred side's load (protocol/deferred.py): the provider SDK it imports in
    # a worker thread must not be imported beside the loop's imports.
    state = tmp_path / "state"
    write_cache(state, ["cached-model"], age=LIST_TTL + 1)
    lister = Lister([("configured", "new-model")])
    config = Config(model="openai:configured", state_dir=str(state))
    loaded = anyio.Event()
    changes: list[tuple[str, ...]] = []
    async with anyio.create_task_group() as group:
        choices = ModelChoices(config, ProviderCache(lambda spec: lister), spawner(group), loaded.wait)
        await run_start(choices, changes)
        for _ in range(20):  # the refresh is started and would have asked by now
            await anyio.lowlevel.checkpoint()
        assert lister.asked == 0 and choices.current == ("openai:configured", "openai:cached-model")
        loaded.set()
    assert lister.asked == 1 and choices.current == ("openai:configured", "openai:new-model")


async def test_a_fresh_list_is_not_asked_for_and_each_change_is_announced(tmp_path: Path) -> None:
    state = tmp_path / "state"
    write_cache(state, ["cached-model"], age=1)
    lister = Lister([("configured", "new-model")])
    config = Config(model="openai:configured", state_dir=str(state))
    changes: list[tuple[str, ...]] = []
    async with anyio.create_task_group() as group:
        choices = ModelChoices(config, ProviderCache(lambda spec: lister), spawner(group))
        await run_start(choices, changes)
    assert lister.asked == 0 and changes == [("openai:configured", "openai:cached-model")]
    assert choices.offered("openai:configured") == ("openai:configured", "openai:cached-model")
    assert choices.offered("openai:gone") == ("openai:configured", "openai:cached-model", "openai:gone")

    write_cache(state, ["cached-model"], age=LIST_TTL + 1)
    async with anyio.create_task_group() as group:
        later = ModelChoices(config, ProviderCache(lambda spec: lister), spawner(group))
        await run_start(later, changes)
    assert lister.asked == 1
    assert changes[1:] == [("openai:configured", "openai:cached-model"), ("openai:configured", "openai:new-model")]


async def test_no_discovery_without_an_endpoint_family_or_when_turned_off(tmp_path: Path) -> None:
    lister = Lister([])
    for config in (
        Config(model="echo", models=("scripted",), state_dir=str(tmp_path)),
        Config(model="openai:m", model_discovery=False, state_dir=str(tmp_path)),
    ):
        async with anyio.create_task_group() as group:
            choices = ModelChoices(config, ProviderCache(lambda spec: lister), spawner(group))
            choices.start(lambda: None)
        assert choices.current == choices.configured
    assert lister.asked == 0
    assert not (tmp_path / CACHE_FILENAME).exists()


async def test_credentials_found_during_a_refresh_start_another_after_it(tmp_path: Path) -> None:
    held, first_asked = anyio.Event(), anyio.Event()
    asked: list[int] = []

    class HeldLister(Lister):
        async def list_models(self) -> tuple[str, ...]:
            asked.append(len(asked))
            if len(asked) == 1:
                first_asked.set()
                await held.wait()
                raise ModelError("the model endpoint answered 401: the key was refused")  # asked with the old key
            return ("m", "other")

    lister = HeldLister([])
    config = Config(model="openai:m", state_dir=str(tmp_path))
    async with anyio.create_task_group() as group:
        choices = ModelChoices(config, ProviderCache(lambda spec: lister), spawner(group))
        choices.start(lambda: None)
        await first_asked.wait()
        choices.credentials_changed()  # the running refresh may have asked without the new key
        choices.start(lambda: None)  # a refresh runs: nothing more now
        held.set()
    assert asked == [0, 1]
    assert choices.current == ("openai:m", "openai:other")


async def test_the_cache_and_the_providers_are_read_in_a_worker_thread_and_ready_waits_for_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    state = tmp_path / "state"
    write_cache(state, ["cached-model"], age=1)
    lister = Lister([])
    readers: list[threading.Thread] = []
    real_load = ListingCache.load

    def load(cache: ListingCache) -> Any:
        readers.append(threading.current_thread())
        return real_load(cache)

    def open_model(spec: str) -> Any:
        readers.append(threading.current_thread())  # a provider may read the configuration file for its key
        return lister

    monkeypatch.setattr(ListingCache, "load", load)
    config = Config(model="openai:configured", state_dir=str(state))
    changes: list[tuple[str, ...]] = []
    async with anyio.create_task_group() as group:
        choices = ModelChoices(config, ProviderCache(open_model), spawner(group))
        choices.start(lambda: changes.append(choices.current))
        # Nothing was read on the event loop: `start` only started the read.
        assert readers == [] and choices.current == ("openai:configured",)
        await choices.ready()
        offered: tuple[str, ...] = choices.current  # (mypy narrowed it above)
        assert offered == ("openai:configured", "openai:cached-model")
        await choices.ready()  # once read, at once
    assert len(readers) == 2 and threading.main_thread() not in readers
    assert lister.asked == 0 and changes == [("openai:configured", "openai:cached-model")]


async def test_the_refresh_every_time_to_live_sends_each_key_to_its_own_providers_endpoint_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Issue 20 item 1, the 10-minute refresh: built as the server builds its providers (server.build_server's
    # open_model), `--base-url` reaches the default model's provider only, at start and at every refresh after.
    from acp_server.runtime.providers import open_provider
    from tests.support.fake_anthropic import FakeAnthropic
    from tests.support.fake_openai import FakeOpenAI

    openai_key, anthropic_key = "sk-refresh-OPENAI-0123456789", "sk-ant-refresh-0123456789"
    with FakeOpenAI() as flagged, FakeAnthropic() as anthropic:
        flagged.serve_models("qwen", "qwen-big")
        anthropic.serve_models("claude-fake", "claude-opus")
        config_file = tmp_path / "config.toml"
        config_file.write_text(
            f'[providers.anthropic]\napi_key = "{anthropic_key}"\nbase_url = "{anthropic.base_url}"\n'
        )
        env = {"ACP_SERVER_CONFIG": str(config_file), "OPENAI_API_KEY": openai_key}
        config = Config(
            model="openai:qwen", models=("anthropic:claude-fake",), base_url=flagged.base_url, state_dir=str(tmp_path)
        )
        opened: list[Any] = []

        def open_model(spec: str) -> Any:
            provider = open_provider(spec, default_model=config.model, base_url=config.base_url, env=env)
            opened.append(provider)
            return provider

        later = time.time()
        monkeypatch.setattr(time, "time", lambda: later)
        listed = anyio.Event()
        try:
            async with anyio.create_task_group() as group:
                choices = ModelChoices(config, ProviderCache(open_model), spawner(group))
                choices.start(listed.set)
                with anyio.fail_after(30):
                    await listed.wait()  # the first refresh has ended: both lists are in
                listed_too = ("openai:qwen-big", "anthropic:claude-opus")
                assert choices.current == ("openai:qwen", "anthropic:claude-fake", *listed_too)
                later += LIST_TTL + 1  # ten minutes on: the lists are stale and asked for again
                choices.start(listed.set)
        finally:
            for provider in opened:
                await provider.aclose()
        for server, key, count in ((flagged, openai_key, 2), (anthropic, anthropic_key, 2)):
            assert len(server.model_list_requests) == count
            for request in server.model_list_requests:
                sent = " ".join(request.headers.values())
                assert key in sent and (openai_key if key == anthropic_key else anthropic_key) not in sent
