"""The agent's pieces a connection's dispatcher works with: the session table, the provider cache, authentication,
plug-ins."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from acp_server.agent.providers import AuthState, Credentials, ProviderCache
from acp_server.agent.sessions.runs import RunContext, RunRegistry, Session
from acp_server.agent.sessions.table import SessionTable
from acp_server.errors import MissingCredentialsError, ScriptError, UnknownModelError
from acp_server.jsonrpc.rpc import ErrorCode, RpcError
from acp_server.protocol.editor_connection import Handshake
from acp_server.protocol.plugins import Plugin, observer_of
from acp_server.protocol.prompts import prompt_input
from acp_server.protocol.schema import PromptRequest
from acp_server.protocol.wire_errors import rpc_error
from acp_server.runtime.model import Provider
from acp_server.runtime.providers.echo import EchoProvider


def make_session(name: str = "s") -> Session:
    return Session(name, Path("/tmp"), (), ())


def code_of(excinfo: pytest.ExceptionInfo[Exception]) -> int:
    """The JSON-RPC error code a request is answered with for the error (protocol/wire_errors.py)."""
    answer = rpc_error(excinfo.value)
    assert answer is not None, excinfo.value
    return int(answer.code)


async def test_the_session_table_answers_each_wrong_id_with_its_own_error() -> None:
    handshake, agent = Handshake(), RunRegistry()
    table = SessionTable(agent)
    with pytest.raises(RpcError) as before:
        handshake.require_initialized()  # what a connection asks first (EditorConnection.session)
    assert code_of(before) == ErrorCode.INVALID_REQUEST  # initialize comes first
    edge: Any = object()  # two connections, as the core sees them
    other_edge: Any = object()
    session = make_session()
    session.edge = edge
    table.add(session)
    assert table.require("s", edge) is session and "s" in table and list(table) == [session] and len(table) == 1
    assert table.attached_to(edge) == [session] and table.attached_to(other_edge) == []
    with pytest.raises(Exception) as unknown:
        table.require("nope", edge)
    assert code_of(unknown) == ErrorCode.RESOURCE_NOT_FOUND
    with pytest.raises(Exception) as foreign:
        table.require("s", other_edge)  # another connection's session: exactly as an unknown id
    assert code_of(foreign) == ErrorCode.RESOURCE_NOT_FOUND and str(foreign.value) == str(unknown.value).replace(
        "nope", "s"
    )
    child_session = make_session("child")
    child_session.edge = edge
    request = prompt_input(PromptRequest.model_validate({"sessionId": "child", "prompt": []}))
    agent.register_child(RunContext(child_session, 1, request, parent_session_id="s"))
    with pytest.raises(Exception) as child:
        table.require("child", edge)
    assert code_of(child) == ErrorCode.INVALID_PARAMS  # a subagent's session accepts only session/cancel
    session.closed = True
    with pytest.raises(Exception) as closed:
        table.require("s", edge)
    assert code_of(closed) == ErrorCode.RESOURCE_NOT_FOUND
    table.discard("s")
    assert table.get("s") is None


def test_providers_are_built_once_per_spec_and_a_bad_spec_is_the_clients_error() -> None:
    built: list[str] = []

    def open_model(spec: str) -> Provider:
        built.append(spec)
        if spec == "unknown":
            raise UnknownModelError("unknown model")
        if spec == "bad-script":
            raise ScriptError("step 0: nonsense")
        if spec == "keyless":
            raise MissingCredentialsError("set THE_KEY")
        return EchoProvider()

    providers = ProviderCache(open_model)
    assert providers.get("echo") is providers.get("echo") and built == ["echo"]
    for spec, error, code in [
        ("unknown", UnknownModelError, ErrorCode.INVALID_PARAMS),
        ("bad-script", ScriptError, ErrorCode.INVALID_PARAMS),
        ("keyless", MissingCredentialsError, ErrorCode.AUTH_REQUIRED),
    ]:
        with pytest.raises(error) as refused:
            providers.get(spec)
        assert code_of(refused) == code, spec


def test_authentication_is_required_until_a_retry_finds_the_key() -> None:
    key: dict[str, str] = {}

    def open_model(spec: str) -> Provider:
        if "key" not in key:
            raise MissingCredentialsError("set THE_KEY")
        return EchoProvider()

    auth = AuthState(ProviderCache(open_model), "echo")
    assert auth.problem == "set THE_KEY"
    credentials = Credentials(auth, whole_process=True)
    with pytest.raises(MissingCredentialsError) as refused:
        credentials.require()
    assert code_of(refused) == ErrorCode.AUTH_REQUIRED
    assert not credentials.authenticate()
    key["key"] = "found"
    assert credentials.authenticate() and credentials.problem is None and auth.problem is None
    credentials.require()


def test_a_bad_default_model_stops_the_server_at_start() -> None:
    def open_model(spec: str) -> Provider:
        raise ScriptError("cannot read script")

    with pytest.raises(ScriptError):
        AuthState(ProviderCache(open_model), "scripted:/nonexistent")


async def test_the_plugins_observers_are_told_in_registration_order() -> None:
    heard: list[tuple[str, str, dict[str, Any]]] = []
    session = make_session()
    run = RunContext(session, 1, prompt_input(PromptRequest.model_validate({"sessionId": "s", "prompt": []})))

    def observer(name: str) -> Plugin:
        return Plugin(observer=lambda run, event, fields: heard.append((name, event, fields)))

    assert observer_of([Plugin(), Plugin()]) is None
    combined = observer_of([observer("a"), Plugin(), observer("b")])
    assert combined is not None
    combined(run, "step_started", {"step": 0})
    assert heard == [("a", "step_started", {"step": 0}), ("b", "step_started", {"step": 0})]
