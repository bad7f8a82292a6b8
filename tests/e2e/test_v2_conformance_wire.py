"""ACP v2 conformance of the wire itself, end to end over stdio: framing, the JSON-RPC envelope, notifications,
extensions, `_meta`, open enums, error objects, permissions, what we ask of the client, additional directories,
authentication descriptors and shutdown. Batches (JSON-RPC 2.0 §6: ACP-BATCH-201..205 and the batch halves of
ACP-JSONRPC-001/003/005) are tests/e2e/test_batches.py's, over every transport.

Each `test_acp_…` test holds the acp-tck v2 requirement(s) its name gives (registry src/tck/v2/requirements.py at
1314e0951863b03844fd530e0e14bd88843aabe7), judged against the 2.4.0 schema (fixtures/acp-schema/v2/schema.json).
"""

from __future__ import annotations

from collections.abc import Iterator
from functools import cache
from pathlib import Path
from typing import Any

import orjson
import pytest

from tests.conftest import StartServer
from tests.e2e.test_ask_user import QUESTION
from tests.e2e.test_v2_auth import NO_KEYS
from tests.support.fake_openai import FakeOpenAI
from tests.support.harness import DEFAULT_ARGS, T_EXIT, W_QUIET, RawClient, is_response
from tests.support.wire_schema import SCHEMA_V2_PATH

pytestmark = pytest.mark.timeout(40)


@cache
def definitions(*, unstable: bool = False) -> dict[str, Any]:
    """The 2.4.0 v2 schema's definitions; `unstable`: its unstable schema's (the unstable methods' capabilities)."""
    path = SCHEMA_V2_PATH.with_name("schema.unstable.json") if unstable else SCHEMA_V2_PATH
    defs: dict[str, Any] = orjson.loads(path.read_bytes())["$defs"]
    return defs


def defined(definition: str, field: str | None = None) -> set[str]:
    """The values an open enum of the schema defines (its `const` branches; the `other` branch has none), or, with
    `field`, the discriminator values of a tagged union."""
    values = set()
    for branch in definitions()[definition]["anyOf"]:
        holder = branch.get("properties", {}).get(field, {}) if field else branch
        if "const" in holder:
            values.add(holder["const"])
    return values


def open_enum_ok(value: Any, definition: str, field: str | None = None) -> bool:
    """Defined by the schema, or an extension (`_…`): never a value reserved for a future ACP version."""
    return isinstance(value, str) and (value in defined(definition, field) or value.startswith("_"))


@cache
def agent_to_client_methods() -> set[str]:
    """Every method the schema lets an agent send (AgentRequest, AgentNotification), plus the protocol level's."""
    found: set[str] = {"$/cancel_request"}

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            reference = node.get("$ref")
            if isinstance(reference, str):
                method = definitions()[reference.rsplit("/", 1)[1]].get("x-method")
                if method:
                    found.add(method)
            for child in node.values():
                walk(child)
        elif isinstance(node, list):
            for child in node:
                walk(child)

    walk(definitions()["AgentRequest"])
    walk(definitions()["AgentNotification"])
    return found


def outgoing(client: RawClient) -> list[bytes]:
    return [entry.raw for entry in client.log if entry.dir == "out"]


def responses(client: RawClient) -> list[dict[str, Any]]:
    return [m for m in client.received if "method" not in m]


def metas(value: Any) -> Iterator[Any]:
    """Every `_meta` value anywhere inside `value`."""
    if isinstance(value, dict):
        for key, child in value.items():
            if key == "_meta":
                yield child
            yield from metas(child)
    elif isinstance(value, list):
        for child in value:
            yield from metas(child)


# A turn that puts most of what v2 carries on the wire: a thought, text that needs escaping (line breaks, a tab,
# quotes, non-ASCII, an astral character), a plan, a command that asks permission and runs as a terminal, a question
# for the user (in the reply: this client offers no forms), and more text.
RICH_TEXT = 'h\u00e9llo "w\u00f6rld"\n\tline two \u2713 \U0001f600\r\nend'
RICH_SCRIPT: list[dict[str, Any]] = [
    {"think": "thinking\nin two lines"},
    {"say": RICH_TEXT},
    {"tool": "update_plan", "args": {"entries": [{"content": "one", "priority": "high", "status": "in_progress"}]}},
    {"tool": "run_command", "args": {"command": "printf 'out\\n'"}},
    {"tool": "ask_user", "args": QUESTION},
    {"say": "done"},
]


async def rich_turn(client: RawClient, request_id: Any = None) -> str:
    """Run RICH_SCRIPT in a new session, allowing the command once; returns the session id once it is idle."""
    session_id = await client.new_session_v2()
    prompt = client.prompt_message(session_id, RICH_SCRIPT, request_id)
    prompt["params"]["prompt"] = [{"type": "text", "text": RICH_TEXT}]
    await client.send(prompt)
    asked = await client.wait_for(lambda m: m.get("method") == "session/request_permission")
    await client.send({"id": asked["id"], "result": {"outcome": {"outcome": "selected", "optionId": "allow_once"}}})
    idle = await client.idle(session_id)
    assert idle["params"]["update"]["stopReason"] == "end_turn", idle
    return session_id


# --- transport and envelope ---


async def test_acp_transport_201_002_203_every_line_out_is_one_utf8_json_rpc_object_with_no_newline_inside(
    server_v2: RawClient,
) -> None:
    """Over a turn with escapes, non-ASCII and an astral character in both directions: every line the server
    writes is strict UTF-8, ends with its one `\\n` and has no other line break, and parses as one JSON-RPC 2.0
    object: we write an array only to answer a batch (tests/e2e/test_batches.py), and this client sends none."""
    session_id = await rich_turn(server_v2, request_id="prompt-\u00e9")
    lines = outgoing(server_v2)
    assert len(lines) > 10
    for raw in lines:
        raw.decode("utf-8", errors="strict")
        assert raw.endswith(b"\n") and b"\n" not in raw[:-1] and b"\r" not in raw, raw[:200]
        message = orjson.loads(raw)
        assert isinstance(message, dict) and message["jsonrpc"] == "2.0", raw[:200]
    # The text survived the round trip unchanged: escaped on the wire, not cut at its line breaks.
    echoed = server_v2.updates(session_id, "user_message")[0]["content"]
    assert echoed == [{"type": "text", "text": RICH_TEXT}]
    assert RICH_TEXT in "".join(u["content"]["text"] for u in server_v2.updates(session_id, "agent_message_chunk"))


@pytest.mark.parametrize("request_id", [0, 7, 2**53 + 1, -3, "7", "", "id with spaces \u00e9 \U0001f600", "1.0"])
async def test_acp_jsonrpc_001_a_response_echoes_the_request_id_exactly(server_v2: RawClient, request_id: Any) -> None:
    """Integer and string ids come back with the same type and value, for a result and for an error. The kit's
    "inside a batch response array" half is tests/e2e/test_batches.py's ACP-BATCH-204 test."""
    await server_v2.request("session/list", {}, request_id=request_id)
    ok = await server_v2.wait_for(lambda m: is_response(m, request_id) and "result" in m)
    assert type(ok["id"]) is type(request_id) and ok["id"] == request_id
    await server_v2.request("nobody/knows", {}, request_id=request_id)
    failed = await server_v2.wait_for(lambda m: is_response(m, request_id) and "error" in m)
    assert type(failed["id"]) is type(request_id) and failed["id"] == request_id


async def test_acp_transport_201_schema_a_v2_request_with_id_null_is_an_invalid_request_not_a_null_id_result(
    start_server: StartServer,
) -> None:
    """The 2.4.0 schema's `RequestId` is a string or an integer and "MUST NOT be null" (unlike base JSON-RPC), and a
    result's `id` is a `RequestId`: a result with `id: null` is no v2 message at all. So a v2 request with `id: null`
    is refused as an invalid request (an error, whose id may be null), and not run: on a v2 connection, and as the
    `initialize` that would choose v2 (which then chooses nothing: a proper `initialize` follows)."""
    server = await start_server()
    v2_handshake = {"protocolVersion": 2, "info": {"name": "x", "version": "1"}, "capabilities": {}}
    await server.send({"id": None, "method": "initialize", "params": v2_handshake})
    first = await server.wait_for(lambda m: "method" not in m and m.get("id") is None)
    assert "result" not in first and first["error"]["code"] == -32600, first
    await server.initialize_v2()
    await server.write_raw(b'{"jsonrpc":"2.0","id":null,"method":"session/new","params":{"cwd":"/tmp"}}\n')
    await server.call("_acp_server/stats", {})
    refused = [m for m in responses(server) if m.get("id") is None]
    assert len(refused) == 2 and all("result" not in m for m in refused), refused
    assert refused[1]["error"]["code"] == -32600 and "id" in refused[1]["error"]["message"]
    assert (await server.stats())["sessions"] == 0  # the session/new never ran
    # v1 keeps base JSON-RPC's null id.
    v1 = await start_server()
    await v1.initialize()
    await v1.write_raw(b'{"jsonrpc":"2.0","id":null,"method":"session/list","params":{}}\n')
    assert "result" in await v1.wait_for(lambda m: "method" not in m and m.get("id") is None)


async def test_acp_jsonrpc_002_error_001_every_response_is_a_result_or_an_error_with_a_one_line_message(
    server_v2: RawClient,
) -> None:
    """Successes and every kind of failure we answer: exactly one of `result`/`error`; an error has an integer code
    and a non-empty one-line string message (even when it quotes a method name holding a line break), and its
    `data`, when present, is JSON (it parsed with the line)."""
    session_id = await server_v2.new_session_v2()
    await server_v2.call("session/list", {})
    await server_v2.call("nobody/knows\nsecond line", {})  # -32601, quoting the name
    await server_v2.call("session/new", {"cwd": "relative/path"})  # -32602
    await server_v2.call("session/new", {"cwd": 5})  # -32602, a wrong type
    await server_v2.call("session/prompt", {"sessionId": "sess_nope", "prompt": []})  # -32002 with data
    await server_v2.call("session/prompt", [])  # params as an array
    await server_v2.call("initialize", {"protocolVersion": 1, "clientCapabilities": {}})  # -32600 on a v2 connection
    await server_v2.call("auth/logout", {})  # -32601: no auth methods were offered
    await server_v2.call("session/close", {"sessionId": session_id})
    for line in (
        b"{not json\n",
        b'{"jsonrpc":"2.0"}\n',
        b'"a string"\n',
        b'{"jsonrpc":"1.0","id":98,"method":"x"}\n',
    ):
        await server_v2.write_raw(line)
    marker = await server_v2.call("_acp_server/stats", {})  # everything before it has been answered
    answered = responses(server_v2)
    assert len(answered) >= 14
    codes = set()
    for response in answered:
        assert ("result" in response) != ("error" in response), response
        if "error" in response:
            error = response["error"]
            assert type(error["code"]) is int, response
            assert isinstance(error["message"], str) and error["message"].strip(), response
            assert "\n" not in error["message"] and "\r" not in error["message"], response
            assert set(error) <= {"code", "message", "data"}, response
            codes.add(error["code"])
    assert {-32700, -32600, -32601, -32602, -32002} <= codes
    assert marker in answered


async def test_acp_jsonrpc_003_ext_201_notifications_known_unknown_and_custom_get_no_response(
    server_v2: RawClient,
) -> None:
    """No response, result or error, to any notification: a cancel of a live idle session and of an unknown one, a
    `$/cancel_request` for nothing, an unknown `_` notification (ignored: ACP-EXT-201), an unknown non-`_` one, one
    with params that do not fit, one without params, one with params as an array. The server goes on: a request
    after them is answered, and the only responses are to our requests. Messages the server initiates (they carry
    `method`) are not responses."""
    session_id = await server_v2.new_session_v2()
    notifications: list[dict[str, Any]] = [
        {"method": "session/cancel", "params": {"sessionId": session_id}},
        {"method": "session/cancel", "params": {"sessionId": "sess_unknown", "_meta": {"k": 1}}},
        {"method": "session/cancel", "params": {"wrong": True}},
        {"method": "$/cancel_request", "params": {"requestId": 12345}},
        {"method": "_vendor/unknown_notification", "params": {"anything": [1, 2]}},
        {"method": "_vendor/no_params"},
        {"method": "nobody/knows", "params": {}},
        {"method": "session/update", "params": []},
    ]
    await server_v2.send(*notifications)
    # A prompt still works after them: the session was not harmed by the cancel of its idle state.
    prompt = await server_v2.prompt(session_id, [{"say": "still here"}])
    assert "result" in await server_v2.response(prompt)
    assert (await server_v2.idle(session_id))["params"]["update"]["stopReason"] == "end_turn"
    stats = await server_v2.call("_acp_server/stats", {})
    await server_v2.quiet(W_QUIET, lambda m: m.get("id") is None and "method" not in m)
    sent_ids = {orjson.dumps(e.msg["id"]) for e in server_v2.log if e.dir == "in" and "id" in (e.msg or {})}
    assert all(orjson.dumps(r["id"]) in sent_ids for r in responses(server_v2))
    assert len(responses(server_v2)) == 4  # initialize, session/new, the prompt, stats
    assert stats["result"]["sessions"] == 1


async def test_acp_jsonrpc_004_an_unknown_method_is_minus_32601(server_v2: RawClient) -> None:
    for method in ("nobody/knows", "session/nonexistent", "_vendor/unknown", "fs/read_text_file", "session/load"):
        response = await server_v2.call(method, {"sessionId": "sess_x", "path": "/tmp/x"})
        assert response["error"]["code"] == -32601, (method, response)
        assert method in response["error"]["message"]


async def test_acp_jsonrpc_005_after_every_erroneous_line_and_any_batch_the_connection_stays_usable(
    server_v2: RawClient,
) -> None:
    """Each bad line gets its error and nothing else breaks: after each one, a request is answered; at the end a
    whole turn runs. Batches included: an empty one (one -32600), one of invalid entries (an array of -32600s) and
    one holding a request (an array of its response); the kit's batch probe is tests/e2e/test_batches.py's."""
    bad_lines = [
        b"{not json\n",
        b"[]\n",
        b"[1, 2]\n",
        b'[{"jsonrpc":"2.0","id":"b1","method":"session/list","params":{}}]\n',
        b"{}\n",
        b"null\n",
        b"42\n",
        b'{"jsonrpc":"2.0","id":{"an":"object"},"method":"session/list"}\n',
        b'{"jsonrpc":"2.0","id":"m1","method":7}\n',
        b'{"jsonrpc":"2.0","id":"m2","method":"session/new","params":"string"}\n',
        b'{"jsonrpc":"2.0","id":"m3","method":"session/new","params":{"cwd":"nope"}}\n',
        b'{"jsonrpc":"2.0","id":"m4","method":"nobody/knows"}\n',
        b"\xff\xfe not utf-8\n",
        b"\n",
        b"   \n",
    ]
    for line in bad_lines:
        before = len(responses(server_v2))
        await server_v2.write_raw(line)
        check = await server_v2.call("session/list", {})
        assert "result" in check, (line, check)
        if line.strip():
            assert len(responses(server_v2)) >= before + 2, line  # the bad line got its own answer
    session_id = await server_v2.new_session_v2()
    await server_v2.response(await server_v2.prompt(session_id, [{"say": "fine"}]))
    assert (await server_v2.idle(session_id))["params"]["update"]["stopReason"] == "end_turn"


# --- extensions, _meta, open enums ---


async def test_acp_ext_202_extensions_live_under_capabilities_meta_not_as_unknown_capability_keys(
    start_server: StartServer,
) -> None:
    """Every key of `capabilities` and of `capabilities.session` is one the 2.4.0 schema defines (the session
    capabilities of the unstable methods, `fork`, `archive`, `status`, `title`, and `providers` and `auth.status`, in
    its unstable schema); ours (prompt
    policies, extension methods) are under `capabilities._meta`, and so are the extension methods we answer."""
    server = await start_server()
    result = (await server.initialize_v2())["result"]
    capabilities = result["capabilities"]
    # `providers` and `auth.status` are the unstable schema's (`providers/*`, `auth/status`), like the session ones.
    top, top_unstable = (set(definitions(unstable=u)["AgentCapabilities"]["properties"]) for u in (False, True))
    assert set(capabilities) - top == {"providers"} and "providers" in top_unstable
    auth, auth_unstable = (set(definitions(unstable=u)["AgentAuthCapabilities"]["properties"]) for u in (False, True))
    assert set(capabilities["auth"]) - auth == {"status"} and "status" in auth_unstable
    stable = set(definitions()["SessionCapabilities"]["properties"])
    unstable = set(definitions(unstable=True)["SessionCapabilities"]["properties"])
    assert set(capabilities["session"]) - stable <= unstable - stable
    assert set(capabilities["session"]) - stable == {"fork", "archive", "status", "title"}
    assert set(result) <= set(definitions()["InitializeResponse"]["properties"])
    ours = capabilities["_meta"]["acpServer"]
    assert "_acp_server/stats" in ours["extensionMethods"]
    assert "result" in await server.call("_acp_server/stats", {})


async def test_acp_meta_001_a_prompt_carrying_meta_runs_normally(server_v2: RawClient) -> None:
    """`_meta` on the prompt request, with W3C trace keys and a vendor key we do not know, and on a content block:
    the prompt is accepted and the turn ends `end_turn` with its reply."""
    session_id = await server_v2.new_session_v2()
    message = server_v2.prompt_message(session_id, [{"say": "traced"}])
    message["params"]["_meta"].update(
        {"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", "vendor.example/x": {"y": [1]}}
    )
    message["params"]["prompt"] = [{"type": "text", "text": "go", "_meta": {"block": True}}]
    await server_v2.send(message)
    assert "messageId" in (await server_v2.response(message["id"]))["result"]
    assert (await server_v2.idle(session_id))["params"]["update"]["stopReason"] == "end_turn"
    assert server_v2.texts(session_id) == ["traced"]


async def test_acp_meta_201_every_meta_the_server_emits_is_an_object_or_null(server_v2: RawClient) -> None:
    """Over the initialize, a rich turn, a resume with replay and the session methods: every `_meta` anywhere in
    what the server wrote is a JSON object or null. The initialize's own `_meta` is there, so the check is not
    vacuous."""
    session_id = await rich_turn(server_v2)
    await server_v2.call("session/resume", {"sessionId": session_id, "cwd": "/tmp", "replayFrom": {"type": "start"}})
    await server_v2.call("session/list", {})
    await server_v2.call("session/close", {"sessionId": session_id})
    found = [value for message in server_v2.received for value in metas(message)]
    assert found, "no _meta was emitted at all"
    assert all(value is None or isinstance(value, dict) for value in found), [
        v for v in found if not (v is None or isinstance(v, dict))
    ]


async def test_acp_enum_201_202_every_open_enum_value_we_emit_is_defined_or_an_extension(
    server_v2: RawClient,
) -> None:
    """Tool kinds and statuses, plan entry priorities and statuses (201); the `sessionUpdate` discriminator, the
    foreground `state` and tool-call content types (202): each value is one the 2.4.0 schema defines, or begins with
    `_`, never a value reserved for a future ACP version. The turn covers each site, and every value it shows is
    also one the kit's older draft defines (2.4.0 adds only the tool status `paused`, which we never send). Stop
    reasons are not an ENUM site in the kit: ACP-STATE-203 judges them (and there `error` is a deviation)."""
    session_id = await rich_turn(server_v2)
    updates = server_v2.updates(session_id)
    calls = [u for u in updates if u["sessionUpdate"] == "tool_call_update"]
    plans = [u["plan"] for u in updates if u["sessionUpdate"] == "plan_update"]
    kinds = [c["kind"] for c in calls if "kind" in c]
    statuses = [c["status"] for c in calls if "status" in c]
    entries = [e for p in plans for e in p.get("entries", [])]
    contents = [item for c in calls for item in c.get("content") or []]
    states = [u for u in updates if u["sessionUpdate"] == "state_update"]
    assert kinds and statuses and entries and contents and states
    assert all(open_enum_ok(k, "ToolKind") for k in kinds), kinds
    assert all(open_enum_ok(s, "ToolCallStatus") for s in statuses), statuses
    assert all(open_enum_ok(e["priority"], "PlanEntryPriority") for e in entries), entries
    assert all(open_enum_ok(e["status"], "PlanEntryStatus") for e in entries), entries
    assert all(open_enum_ok(u["sessionUpdate"], "SessionUpdate", "sessionUpdate") for u in updates)
    assert all(open_enum_ok(s["state"], "StateUpdate", "state") for s in states), states
    assert all(open_enum_ok(item["type"], "ToolCallContent", "type") for item in contents), contents
    assert "paused" not in statuses  # the one value here the kit's draft lacks: sending it would deviate


async def test_acp_enum_203_an_extension_permission_outcome_is_tolerated(server_v2: RawClient) -> None:
    """The client answers a permission question with a `_`-prefixed outcome (an open enum it may extend): no crash,
    the turn reaches its idle with a defined stop reason, the command is not run as if allowed, and the connection
    goes on."""
    session_id = await server_v2.new_session_v2()
    prompt = await server_v2.prompt(session_id, [{"tool": "run_command", "args": {"command": "printf ran"}}])
    assert "result" in await server_v2.response(prompt)
    asked = await server_v2.wait_for(lambda m: m.get("method") == "session/request_permission")
    await server_v2.send({"id": asked["id"], "result": {"outcome": {"outcome": "_vendor/deferred", "why": "x"}}})
    idle = await server_v2.idle(session_id)
    assert idle["params"]["update"]["stopReason"] in {"end_turn", "cancelled", "refusal"}
    terminals = server_v2.updates(session_id, "terminal_update") + server_v2.updates(
        session_id, "terminal_output_chunk"
    )
    assert terminals == []  # the command never ran: an outcome we cannot read is no approval
    again = await server_v2.prompt(session_id, [{"say": "alive"}])
    assert "result" in await server_v2.response(again)
    assert (await server_v2.idle(session_id, 2))["params"]["update"]["stopReason"] == "end_turn"


# --- what we ask of the client ---


async def test_acp_perm_201_a_permission_request_is_well_formed_and_a_selected_answer_ends_in_idle(
    server_v2: RawClient,
) -> None:
    """`sessionId` of the prompted session, a non-empty `title`, a non-empty `options` list whose every option has
    `optionId`, `name` and a defined `kind`; after a `selected` answer the turn reaches idle `end_turn`."""
    session_id = await server_v2.new_session_v2()
    await server_v2.prompt(session_id, [{"tool": "run_command", "args": {"command": "true"}}, {"say": "ok"}])
    asked = await server_v2.wait_for(lambda m: m.get("method") == "session/request_permission")
    params = asked["params"]
    assert params["sessionId"] == session_id
    assert isinstance(params["title"], str) and params["title"]
    assert params["options"]
    for option in params["options"]:
        assert option["optionId"] and option["name"], option
        assert open_enum_ok(option["kind"], "PermissionOptionKind"), option
    choice = params["options"][0]["optionId"]
    await server_v2.send({"id": asked["id"], "result": {"outcome": {"outcome": "selected", "optionId": choice}}})
    assert (await server_v2.idle(session_id))["params"]["update"]["stopReason"] == "end_turn"


async def test_acp_clientcap_201_202_without_elicitation_nothing_is_elicited_and_every_method_is_the_clients(
    server_v2: RawClient,
) -> None:
    """The client advertised no `capabilities.elicitation`: a turn that asks the user a question sends no
    `elicitation/create` (the question goes into the reply), and every method the server sends in a turn with a
    permission question is one the 2.4.0 schema gives the agent (AgentRequest, AgentNotification, `$/…`) or an
    extension (`_…`): no `fs/*`, no `terminal/*`."""
    session_id = await rich_turn(server_v2)
    sent = [m["method"] for m in server_v2.received if "method" in m]
    assert "elicitation/create" not in sent
    assert "session/request_permission" in sent
    known = agent_to_client_methods()
    assert {"session/update", "session/request_permission", "elicitation/create"} <= known
    assert "fs/read_text_file" not in known and "terminal/create" not in known
    assert all(method in known or method.startswith("_") for method in sent), sorted(set(sent) - known)
    assert any("Which branch" in text for text in server_v2.texts(session_id))


# --- additional directories ---


async def test_acp_adddirs_201_202_additional_directories_are_accepted_on_new_and_resume(
    server_v2: RawClient, tmp_path: Path
) -> None:
    """An absolute additional directory is accepted by `session/new` and by `session/resume` (matching the
    session's own cwd), and the session lists it; a relative one is refused as such."""
    extra = tmp_path / "extra"
    extra.mkdir()
    created = await server_v2.call("session/new", {"cwd": str(tmp_path), "additionalDirectories": [str(extra)]})
    session_id = created["result"]["sessionId"]
    [listed] = [
        s for s in (await server_v2.call("session/list", {}))["result"]["sessions"] if s["sessionId"] == session_id
    ]
    assert listed["additionalDirectories"] == [str(extra)]
    resumed = await server_v2.call(
        "session/resume", {"sessionId": session_id, "cwd": str(tmp_path), "additionalDirectories": [str(tmp_path)]}
    )
    assert "result" in resumed, resumed
    refused = await server_v2.call("session/new", {"cwd": str(tmp_path), "additionalDirectories": ["relative"]})
    assert refused["error"]["code"] == -32602 and "absolute" in refused["error"]["message"]


# --- authentication ---


@pytest.fixture
def model() -> Iterator[FakeOpenAI]:
    with FakeOpenAI() as server:
        yield server


async def keyless(start_server: StartServer, config: Path) -> RawClient:
    """A server whose default model (the official OpenAI API) has no key: it offers authentication."""
    return await start_server("--model", "openai:fake-model", env={**NO_KEYS, "ACP_SERVER_CONFIG": str(config)})


@pytest.mark.parametrize("terminal", [False, True], ids=["no-terminal-auth", "terminal-auth"])
async def test_acp_auth_201_202_206_207_auth_methods_are_unique_typed_and_terminal_only_when_offered(
    start_server: StartServer, tmp_path: Path, terminal: bool
) -> None:
    """Offered methods have unique `methodId`s (201) and a `type` the schema defines or an extension (206). We offer
    no `terminal` method whether or not the client advertised `capabilities.auth.terminal` (202; with no terminal
    entry, 207's per-entry `args`/`env` rules have nothing to judge: the kit SKIPs it then, and this checks any
    that appeared)."""
    capabilities: dict[str, Any] = {"auth": {"terminal": {}}} if terminal else {}
    server = await keyless(start_server, tmp_path / "config.toml")
    methods = (await server.initialize_v2(capabilities))["result"]["authMethods"]
    assert methods, "a missing key offers a method"
    ids = [m["methodId"] for m in methods]
    assert len(ids) == len(set(ids))
    assert all(open_enum_ok(m["type"], "AuthMethod", "type") for m in methods), methods
    terminals = [m for m in methods if m["type"] == "terminal"]
    if not terminal:
        assert terminals == []
    for entry in terminals:
        assert all(isinstance(arg, str) for arg in entry.get("args", [])), entry
        names = [variable["name"] for variable in entry.get("env", [])]
        assert all(isinstance(v["value"], str) for v in entry.get("env", [])) and len(names) == len(set(names))


async def test_acp_auth_203_204_login_with_an_advertised_method_then_session_new_and_logout_succeed(
    start_server: StartServer, tmp_path: Path, model: FakeOpenAI
) -> None:
    """The advertised (`agent`) method: `auth/login` is served (never -32601), and once the key is there it
    succeeds and `session/new` no longer fails with -32000 (204); `auth/logout` answers a schema-valid `{}` (203,
    the harness checks every result against the schema)."""
    config = tmp_path / "config.toml"
    server = await keyless(start_server, config)
    [method] = (await server.initialize_v2())["result"]["authMethods"]
    assert method["type"] == "agent"
    early = await server.call("auth/login", {"methodId": method["methodId"]})
    assert early["error"]["code"] == -32000  # served, only the key is still missing
    config.write_text(f'[providers.openai]\napi_key = "sk-test-not-real"\nbase_url = "{model.base_url}"\n')
    assert (await server.call("auth/login", {"methodId": method["methodId"]}))["result"] == {}
    assert "sessionId" in (await server.call("session/new", {"cwd": str(tmp_path)}))["result"]
    assert (await server.call("auth/logout", {}))["result"] == {}


async def test_acp_auth_205_with_no_auth_methods_session_new_never_asks_for_authentication(
    start_server: StartServer, tmp_path: Path, model: FakeOpenAI
) -> None:
    """`authMethods: []` (the scripted model needs no key; an OpenAI model whose key is configured): `session/new`
    succeeds, never -32000."""
    scripted = await start_server()
    assert (await scripted.initialize_v2())["result"]["authMethods"] == []
    assert "result" in await scripted.call("session/new", {"cwd": "/tmp"})
    config = tmp_path / "config.toml"
    config.write_text(f'[providers.openai]\napi_key = "sk-test-not-real"\nbase_url = "{model.base_url}"\n')
    keyed = await keyless(start_server, config)
    assert (await keyed.initialize_v2())["result"]["authMethods"] == []
    assert "result" in await keyed.call("session/new", {"cwd": str(tmp_path)})


# --- shutdown ---


async def test_acp_shutdown_001_closing_stdin_ends_the_server_without_a_signal(start_server: StartServer) -> None:
    """With an idle session and a turn held open at a gate, closing stdin alone ends the process, exit status 0,
    within the exit bound, and the held turn never goes on (ACP-V2.md §20.6: no message is owed to a closed pipe)."""
    server = await start_server(*DEFAULT_ARGS)
    await server.initialize_v2()
    await server.new_session_v2()
    busy = await server.new_session_v2()
    prompt = await server.prompt(busy, [{"gate": "g"}, {"say": "never"}])
    assert "result" in await server.response(prompt)
    await server.probe("gate_reached", sessionId=busy, gate="g")
    code, took = await server.close()
    assert code == 0 and took <= T_EXIT
    assert "never" not in server.texts(busy)
