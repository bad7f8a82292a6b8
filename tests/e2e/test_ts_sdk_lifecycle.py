"""The unstable session lifecycle methods of ACP 2.4.0 through the official TypeScript SDK's unstable entries (issue 25
item 2): `session/set_title`, `session/status`, `session/archive`, `session/unarchive` on both versions, and
`session/fork` on v2, each advertised by its capability and each answered in the shape the SDK's own unstable zod
schemas and the official unstable JSON schemas accept.

`tests/ts_client/lifecycle_flows.mjs` runs one group (`v1` through `@agentclientprotocol/sdk/unstable`, `v2` through
`@agentclientprotocol/sdk/experimental/v2/unstable`) against a fresh server with its own store, and reports what each
step answered; the edge cases of each method are tests/e2e/test_session_lifecycle_unstable.py's.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.e2e.test_ts_sdk import assert_clean, run_stdio_script
from tests.support.harness import DEFAULT_ARGS

pytestmark = pytest.mark.timeout(60)

UNKNOWN = {"code": -32002, "data": {"sessionId": "sess_unknown"}}


def code_and_data(error: dict[str, Any]) -> dict[str, Any]:
    """An error's code and data (its message, words for a person, is only required to be there)."""
    assert isinstance(error.get("message"), str) and error["message"], error
    return {"code": error["code"], "data": error["data"]}


def run_lifecycle_flows(group: str) -> tuple[dict[str, Any], str]:
    """Run one group of lifecycle_flows.mjs in Node against a fresh server; its JSON report and stderr."""
    return run_stdio_script("lifecycle_flows.mjs", group, DEFAULT_ARGS)


def assert_title_status_and_archive(report: dict[str, Any], titled: str, archived: str) -> None:
    """What both versions answer alike: `titled` retitled, `archived` archived then unarchived, unknown ids -32002."""
    assert report["setTitle"] == {"result": {"title": "Renamed by the SDK"}}  # whitespace normalized
    assert report["statusOpen"] == {"result": {"status": "open"}}
    assert report["archive"] == {"result": {}}
    # Archiving closed it: known, not in memory.
    assert report["statusArchived"] == {"result": {"status": "saved"}}
    assert {"sessionId": titled, "title": "Renamed by the SDK", "archived": False} in report["listDefault"]
    assert archived not in [entry["sessionId"] for entry in report["listDefault"]]
    assert all(entry["archived"] is False for entry in report["listDefault"])
    assert [(entry["sessionId"], entry["archived"]) for entry in report["listOnly"]] == [(archived, True)]
    assert report["unarchive"] == {"result": {}}
    assert archived in [entry["sessionId"] for entry in report["listAfterUnarchive"]]
    assert report["close"] == {"result": {}}
    assert report["statusClosed"] == {"result": {"status": "saved"}}
    for step in ("statusUnknown", "setTitleUnknown", "archiveUnknown", "unarchiveUnknown"):
        assert report[step]["error"]["code"] == -32002, step
    assert code_and_data(report["statusUnknown"]["error"]) == UNKNOWN  # the schema: the requested id in `data`


def test_the_typescript_sdk_unstable_entry_sets_titles_checks_status_and_archives_on_v1() -> None:
    report, stderr = run_lifecycle_flows("v1")
    assert_clean(report, stderr)
    capabilities = report["initialize"]["agentCapabilities"]["sessionCapabilities"]
    assert {"title": {}, "status": {}, "archive": {}, "fork": {}, "list": {}}.items() <= capabilities.items()
    first, second = report["ids"]["first"], report["ids"]["second"]
    assert_title_status_and_archive(report, first, second)
    # An archived session is loaded only once unarchived (the schema: clients unarchive before they load).
    assert report["loadArchived"]["error"]["code"] == -32602
    assert "result" in report["loadUnarchived"]
    # The title set by the client is replayed by a load, as a title the agent chose is.
    assert "result" in report["loadTitled"]
    assert report["replayedTitles"] == ["Renamed by the SDK"]


def test_the_typescript_sdk_v2_unstable_entry_forks_sets_titles_checks_status_and_archives() -> None:
    report, stderr = run_lifecycle_flows("v2")
    assert_clean(report, stderr)
    capabilities = report["initialize"]["capabilities"]["session"]
    assert {"fork": {}, "title": {}, "status": {}, "archive": {}}.items() <= capabilities.items()
    # session/fork: v2's shape (config options and commands, no modes), the source's conversation copied.
    fork = report["fork"]["result"]
    assert set(fork) == {"sessionId", "configOptions", "availableCommands"}
    assert report["forkReplay"] == ["forked words"]
    assert code_and_data(report["forkUnknown"]["error"]) == UNKNOWN
    assert report["ids"]["fork"] == fork["sessionId"] != report["ids"]["source"]
    assert_title_status_and_archive(report, report["ids"]["source"], fork["sessionId"])
    assert report["resumeArchived"]["error"]["code"] == -32602
    assert "result" in report["resumeUnarchived"]
