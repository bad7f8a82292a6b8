"""Keeps our tests and the acp-tck v2 requirement registry (fixtures/acp-tck/v2-requirements.json, see SOURCE.md there)
in step: every MANDATORY, CAPABILITY and ADVISORY requirement is covered by a test named after its id, or is listed in
NOT_APPLICABLE below with the reason; and no test names an id the registry does not have (a typo would otherwise
cover nothing and pass). INFORMATIONAL rows are record-only in the kit (never judged), so no test is owed for them.

A test covers an id by its name, `test_acp_<group>_<num>[_<num>…][_<group>_<num>…]_<words>` (lower case, as ruff
wants): `test_acp_close_202_cancel_208_…` covers ACP-CLOSE-202 and ACP-CANCEL-208. An id whose group is more than
one word (ACP-INFO-CANCEL-201) is named in a docstring line `Covers: ACP-INFO-CANCEL-201, ACP-…` instead.
"""

from __future__ import annotations

import ast
import re
from functools import cache
from pathlib import Path
from typing import Any

import orjson

ROOT = Path(__file__).resolve().parents[2]
REGISTRY_PATH = ROOT / "fixtures" / "acp-tck" / "v2-requirements.json"
TESTS = ROOT / "tests"
JUDGED = {"MANDATORY", "CAPABILITY", "ADVISORY"}
LEVELS = JUDGED | {"INFORMATIONAL"}
ID = re.compile(r"ACP(?:-[A-Z]+)+-\d{3}")

# Requirements that do not apply to acp-server, each with the reason. Only a CAPABILITY requirement for a capability
# acp-server never advertises on v2 belongs here; anything we advertise, and every MANDATORY or ADVISORY one, is owed
# a test.
NOT_APPLICABLE: dict[str, str] = {}


@cache
def registry() -> dict[str, dict[str, Any]]:
    document = orjson.loads(REGISTRY_PATH.read_bytes())
    return {row["id"]: row for row in document["requirements"]}


def ids_in_name(name: str) -> list[str]:
    """The ids a test's name covers: after `test_acp_`, each group word followed by its 3-digit numbers, until the
    first word that has no number after it (the rest of the name is words)."""
    if not name.startswith("test_acp_"):
        return []
    tokens = name.removeprefix("test_acp_").split("_")
    found: list[str] = []
    at = 0
    while at + 1 < len(tokens) and tokens[at].isalpha() and re.fullmatch(r"\d{3}", tokens[at + 1]):
        group = tokens[at].upper()
        at += 1
        while at < len(tokens) and re.fullmatch(r"\d{3}", tokens[at]):
            found.append(f"ACP-{group}-{tokens[at]}")
            at += 1
    return found


def ids_in_docstring(docstring: str | None) -> list[str]:
    """The ids of `Covers: ID, ID` lines; anything else on such a line is an error (returned as is, so it fails the
    registry check)."""
    found: list[str] = []
    for line in (docstring or "").splitlines():
        head, colon, rest = line.strip().partition(":")
        if colon and head == "Covers":
            found += [item.strip() for item in rest.split(",") if item.strip()]
    return found


def coverage() -> dict[str, list[str]]:
    """Every id some test under tests/ names, with the tests (`file::function`) that name it."""
    covered: dict[str, list[str]] = {}
    for path in sorted(TESTS.rglob("test_*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name.startswith("test_"):
                where = f"{path.relative_to(ROOT)}::{node.name}"
                for requirement in ids_in_name(node.name) + ids_in_docstring(ast.get_docstring(node)):
                    covered.setdefault(requirement, []).append(where)
    return covered


def test_the_registry_is_well_formed() -> None:
    rows = orjson.loads(REGISTRY_PATH.read_bytes())["requirements"]
    assert len(rows) == len(registry()), "duplicate ids"
    for row in rows:
        assert ID.fullmatch(row["id"]), row
        assert row["level"] in LEVELS, row
        assert row["summary"].strip() and "\n" not in row["summary"], row
        assert (row["capability"] is not None) == (row["level"] == "CAPABILITY"), row


def test_names_and_covers_lines_are_read_as_ids() -> None:
    name = "test_acp_close_202_cancel_208_close_ends_the_work_and_held_prompts_before_its_answer"
    assert ids_in_name(name) == ["ACP-CLOSE-202", "ACP-CANCEL-208"]
    assert ids_in_name("test_acp_list_201_202_close_201_delete_201") == [
        "ACP-LIST-201",
        "ACP-LIST-202",
        "ACP-CLOSE-201",
        "ACP-DELETE-201",
    ]
    assert ids_in_name("test_acp_init_003_a_request_above_2_gets_2") == ["ACP-INIT-003"]
    assert ids_in_name("test_acp_server_streams_a_reply") == []
    assert ids_in_name("test_init_201_is_not_a_conformance_name") == []
    docstring = "Why.\n\nCovers: ACP-INFO-CANCEL-201, ACP-CANCEL-205\nMore words: not ids."
    assert ids_in_docstring(docstring) == ["ACP-INFO-CANCEL-201", "ACP-CANCEL-205"]


def test_every_id_a_test_names_is_in_the_registry() -> None:
    unknown = {requirement: tests for requirement, tests in coverage().items() if requirement not in registry()}
    assert not unknown, f"tests name ids the acp-tck registry does not have (typos?): {unknown}"


def test_every_judged_requirement_is_covered_by_a_test_named_after_it() -> None:
    """Or it is a CAPABILITY requirement listed as not applicable, with its reason, that no test covers."""
    covered = coverage()
    for requirement, reason in NOT_APPLICABLE.items():
        assert registry()[requirement]["level"] == "CAPABILITY" and reason.strip(), requirement
        assert requirement not in covered, f"{requirement} is covered by {covered[requirement]}: drop it here"
    owed = sorted(
        requirement
        for requirement, row in registry().items()
        if row["level"] in JUDGED and requirement not in covered and requirement not in NOT_APPLICABLE
    )
    assert not owed, f"{len(owed)} acp-tck v2 requirements have no test named after them: {owed}"
