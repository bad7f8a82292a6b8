"""What `logout` does to the providers (agent/providers.py): those that take a key are dropped and their clients
closed once the turns running at the logout have ended, their specs are warmed up again when rebuilt, and the
prompt check is per model (one that takes no key is never refused)."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from acp_server.agent.providers import AuthState, Credentials, ProviderCache, close_providers
from acp_server.agent.sessions.runs import RunRegistry, Session
from acp_server.errors import MissingCredentialsError
from acp_server.jsonrpc.rpc import ErrorCode
from acp_server.protocol.prompts import prompt_input
from acp_server.protocol.schema import PromptRequest
from acp_server.protocol.wire_errors import rpc_error
from acp_server.runtime.model import Provider
from acp_server.runtime.providers import open_provider

pytestmark = pytest.mark.timeout(30)

SPEC = "openai:gpt-4o"


def providers() -> ProviderCache:
    def open_model(spec: str) -> Provider:
        # A port nothing listens on: building the client connects nowhere.
        return open_provider(
            spec, default_model=SPEC, base_url="http://127.0.0.1:9/v1", env={"OPENAI_API_KEY": "sk-test-not-real"}
        )

    return ProviderCache(open_model)


async def test_logout_drops_the_keyed_providers_keeps_the_offline_ones_and_warms_the_rebuilt_ones_again() -> None:
    cache = providers()
    openai, echo = cache.get(SPEC), cache.get("echo")
    assert cache.first_warm_up(SPEC) and cache.first_warm_up("echo")
    assert not cache.first_warm_up(SPEC)
    assert cache.forget_credentials() == [openai]
    assert cache.get("echo") is echo
    with pytest.raises(MissingCredentialsError) as refused:
        cache.get(SPEC)
    assert rpc_error(refused.value).code == ErrorCode.AUTH_REQUIRED
    cache.logged_out = False  # what `authenticate` does
    assert cache.get(SPEC) is not openai
    assert cache.first_warm_up(SPEC)  # the rebuilt provider is warmed up too
    assert not cache.first_warm_up("echo")


async def test_after_logout_only_prompts_on_a_model_that_takes_a_key_are_refused() -> None:
    cache = providers()
    auth = Credentials(AuthState(cache, SPEC), whole_process=True)
    auth.require_for(SPEC)
    auth.logout()
    for spec in ("echo", "scripted"):
        auth.require_for(spec)
    with pytest.raises(MissingCredentialsError) as refused:
        auth.require_for(SPEC)
    answer = rpc_error(refused.value)
    assert answer.code == ErrorCode.AUTH_REQUIRED and "authenticate" in answer.message
    with pytest.raises(MissingCredentialsError):
        auth.require()  # session/new on the default model
    assert auth.authenticate()
    auth.require_for(SPEC)


async def test_a_logout_on_one_of_many_connections_is_that_connections_alone() -> None:
    cache = providers()
    auth = AuthState(cache, SPEC)
    openai = cache.get(SPEC)
    mine, other = Credentials(auth, whole_process=False), Credentials(auth, whole_process=False)
    assert mine.logout() == []  # the providers the other connections use are left as they are
    with pytest.raises(MissingCredentialsError):
        mine.require_for(SPEC)
    with pytest.raises(MissingCredentialsError):
        mine.require()
    other.require_for(SPEC)
    other.require()
    assert cache.get(SPEC) is openai
    assert mine.authenticate()
    mine.require_for(SPEC)
    assert cache.get(SPEC) is openai  # the server holds the key: nothing rebuilt for the others


async def test_the_dropped_clients_are_closed_once_the_turns_running_at_logout_have_ended() -> None:
    cache = providers()
    provider = cache.get(SPEC)
    await provider.warm()  # type: ignore[attr-defined]
    client = provider._client  # type: ignore[attr-defined]
    session = Session("s", Path("/tmp"), (), ())
    request = PromptRequest.model_validate({"sessionId": "s", "prompt": []})
    run = RunRegistry().admit(session, 1, prompt_input(request))
    dropped = cache.forget_credentials()
    async with anyio.create_task_group() as tasks:
        tasks.start_soon(close_providers, dropped, [run], 5.0)
        await anyio.wait_all_tasks_blocked()
        assert not client.is_closed()  # the turn may still be streaming through it
        run.end()
    assert client.is_closed()


async def test_a_cancelled_close_task_still_closes_the_clients() -> None:
    cache = providers()
    provider = cache.get(SPEC)
    await provider.warm()  # type: ignore[attr-defined]
    client = provider._client  # type: ignore[attr-defined]
    session = Session("s", Path("/tmp"), (), ())
    request = PromptRequest.model_validate({"sessionId": "s", "prompt": []})
    run = RunRegistry().admit(session, 1, prompt_input(request))
    async with anyio.create_task_group() as tasks:
        tasks.start_soon(close_providers, cache.forget_credentials(), [run], 5.0)
        await anyio.wait_all_tasks_blocked()
        tasks.cancel_scope.cancel()  # the connection shutting down
    assert client.is_closed()
