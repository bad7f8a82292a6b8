"""The client's answers to the server's own requests are matched by JSON id type and value, never by Python equality.

Python says `True == 1 == 1.0`, so a pending table keyed by plain values lets `"id": true` answer request 1: with a
permission request, that is a write the user never allowed. These tests play the editor over real stdio and answer a
`session/request_permission` with look-alike ids first.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.conftest import StartServer
from tests.support.harness import RawClient

QUIET = 0.5  # how long "nothing happens" waits
ALLOW = {"outcome": {"outcome": "selected", "optionId": "allow_once"}}


async def asked_permission(client: RawClient) -> dict[str, Any]:
    return await client.wait_for(lambda m: m.get("method") == "session/request_permission" and "id" in m)


async def test_look_alike_ids_never_answer_a_permission_request_and_the_right_id_does(
    start_server: StartServer, tmp_path: Path
) -> None:
    client = await start_server()
    await client.initialize()
    session = await client.new_session(str(tmp_path))
    target = tmp_path / "a.txt"
    prompt = await client.prompt(session, [{"tool": "write_file", "args": {"path": "a.txt", "content": "hi\n"}}])
    asked = await asked_permission(client)
    request_id = asked["id"]
    # The server's first request: id 1, the one `true` and `1.0` equal in Python.
    assert request_id == 1 and type(request_id) is int
    for look_alike in (True, 1.0, "1", [1], {"id": 1}, 424242):
        await client.send({"id": look_alike, "result": ALLOW})
    await client.quiet(QUIET, lambda m: m.get("id") == prompt and "method" not in m)
    assert not target.exists(), "a response with a look-alike id allowed the write"
    # The connection still works, and the turn is still waiting for the real answer.
    assert "result" in await client.call("session/set_mode", {"sessionId": session, "modeId": "default"})
    assert target.exists() is False
    await client.send({"id": request_id, "result": ALLOW})
    response = await client.response(prompt)
    assert response["result"] == {"stopReason": "end_turn"}
    assert target.read_text() == "hi\n"
    code, _ = await client.close()
    assert code == 0
    ignored = [line for line in client.stderr_text.splitlines() if "ignored a response to no pending request" in line]
    assert len(ignored) == 6, client.stderr_text
    for shown in ("id true", "id 1.0", 'id "1"', "id [1]", 'id {"id":1}', "id 424242"):
        assert any(line.endswith(shown + ")") for line in ignored), (shown, ignored)


async def test_the_answer_to_a_withdrawn_permission_request_is_expected_and_a_stray_one_still_warns(
    start_server: StartServer, tmp_path: Path
) -> None:
    client = await start_server()
    await client.initialize()
    session = await client.new_session(str(tmp_path))
    prompt = await client.prompt(session, [{"tool": "write_file", "args": {"path": "a.txt", "content": "hi\n"}}])
    asked = await asked_permission(client)
    await client.cancel(session)
    withdrawn = await client.wait_for(lambda m: m.get("method") == "$/cancel_request")
    assert withdrawn["params"] == {"requestId": asked["id"]}
    assert (await client.response(prompt))["result"] == {"stopReason": "cancelled"}
    # What the v1 spec asks of the client once the turn is cancelled: answer the question `cancelled`.
    await client.send({"id": asked["id"], "result": {"outcome": {"outcome": "cancelled"}}})
    await client.send({"id": 424242, "result": ALLOW})  # never sent: a stray
    assert "result" in await client.call("session/set_mode", {"sessionId": session, "modeId": "default"})
    code, _ = await client.close()
    assert code == 0
    warnings = [line for line in client.stderr_text.splitlines() if " WARNING " in line]
    assert not [line for line in warnings if f"(id {asked['id']})" in line], warnings
    assert [line for line in warnings if "ignored a response to no pending request (id 424242)" in line], warnings
    assert not (tmp_path / "a.txt").exists()
