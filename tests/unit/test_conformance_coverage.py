"""Keeps our tests and the acp-tck v2 requirement registry (fixtures/acp-tck/v2-requirements.json, see SOURCE.md there)
in step: every MANDATORY, CAPABILITY and ADVISORY requirement is covered by a test named after its id, or is listed in
NOT_APPLICABLE below with the reason; and no test names an id the registry does not have (a typo would otherwise
cover nothing and pass). INFORMATIONAL rows are record-only in the kit (never judged), so no test is owed for them.

A test covers an id by its name, `test_acp_<group>_<num>[_<num>…][_<group>_<num>…]_<words>` (lower case, as ruff
wants): `test_acp_close_202_cancel_208_…` covers ACP-CLOSE-202 and ACP-CANCEL-208. An id whose group is more than
one word (ACP-INFO-CANCEL-201) is named in a docstring line `Covers: ACP-INFO-CANCEL-201, ACP-…` instead. Only the
tests pytest collects count (module-level functions and methods of `Test…` classes), and not one marked skip, skipif
or xfail, nor one that can call `pytest.skip`/`pytest.xfail`: such a test may not run, so it proves nothing.

Covered is not the same as "passes acp-tck": the kit was written against an older draft of the v2 schema, and where
it and the 2.4.0 schema disagree we follow the schema. Those ids are in DEVIATIONS below, each with the reason and
the schema `$def` that decides it, and the test that holds our behaviour says so in its name (`schema_2_4_0`) and in
its docstring ("the schema wins"). Such a test may name only ids listed there, and every id listed there must have
such a test, so the table, the tests and a reader's picture of what the kit would say stay the same.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from functools import cache
from pathlib import Path
from typing import Any, NamedTuple

import orjson

ROOT = Path(__file__).resolve().parents[2]
REGISTRY_PATH = ROOT / "fixtures" / "acp-tck" / "v2-requirements.json"
TESTS = ROOT / "tests"
JUDGED = {"MANDATORY", "CAPABILITY", "ADVISORY"}
LEVELS = JUDGED | {"INFORMATIONAL"}
ID = re.compile(r"ACP(?:-[A-Z]+)+-\d{3}")
NUMBER = re.compile(r"\d{3}")
# How a test says the 2.4.0 schema wins over the kit: in its name, and in its docstring.
SCHEMA_WINS_NAME = "schema_2_4_0"
SCHEMA_WINS_DOCSTRING = "the schema wins"
# The pytest marks that can keep a test from running (or from counting when it fails).
SKIPPING_MARKS = {"skip", "skipif", "xfail"}
SKIPPING_CALLS = {"skip", "xfail", "importorskip"}

# Requirements that do not apply to acp-server, each with the reason. Only a CAPABILITY requirement for a capability
# acp-server never advertises on v2 belongs here; anything we advertise, and every MANDATORY or ADVISORY one, is owed
# a test.
NOT_APPLICABLE: dict[str, str] = {}

# Requirements whose kit verdict would be FAIL because the kit (alpha.5's schema.unstable.json) and the 2.4.0 schema
# (fixtures/acp-schema/v2/schema.json) disagree, with why the schema wins and the `$def` that decides it. Our tests
# of these assert the schema's behaviour, against the kit. Copied into fixtures/acp-tck/SOURCE.md; keep both in step.
# Batches were listed here until acp-server served them (ACP-V2.md §23 Q5, revised): ACP-BATCH-202..205 and the batch
# halves of ACP-JSONRPC-001/003/005 are held as the kit asks, by tests/e2e/test_batches.py.
DEVIATIONS: dict[str, str] = {
    "ACP-STATE-203": (
        "CAPABILITY: the kit allows five stop reasons (end_turn, max_tokens, max_turn_requests, refusal, cancelled) or "
        "a `_` one; the 2.4.0 schema defines a sixth, `error` (the `IdleStateUpdate` branch whose `stopReason` is "
        "`error`, with `ErrorStopReason`: the failure as a JSON-RPC `Error`), which a failed turn ends with "
        "(ACP-V2.md §22.7)"
    ),
}


@cache
def registry() -> dict[str, dict[str, Any]]:
    document = orjson.loads(REGISTRY_PATH.read_bytes())
    return {row["id"]: row for row in document["requirements"]}


class AmbiguousConformanceNameError(ValueError):
    """A `test_acp_…` name whose ids the reader would misread: one read further than the parser goes."""


def ids_in_name(name: str) -> list[str]:
    """The ids a test's name covers: after `test_acp_`, each group word followed by its 3-digit numbers, until the
    first word that has no number after it (the rest of the name is words). A `<word>_<nnn>` pair in those words
    raises AmbiguousConformanceNameError: it looks like an id (`test_acp_prompt_205_and_init_001`) yet would cover
    nothing."""
    if not name.startswith("test_acp_"):
        return []
    tokens = name.removeprefix("test_acp_").split("_")
    found: list[str] = []
    at = 0
    while at + 1 < len(tokens) and tokens[at].isalpha() and NUMBER.fullmatch(tokens[at + 1]):
        group = tokens[at].upper()
        at += 1
        while at < len(tokens) and NUMBER.fullmatch(tokens[at]):
            found.append(f"ACP-{group}-{tokens[at]}")
            at += 1
    for word, number in zip(tokens[at:], tokens[at + 1 :], strict=False):
        if word.isalpha() and NUMBER.fullmatch(number):
            raise AmbiguousConformanceNameError(
                f"{name}: `{word}_{number}` after the ids ({found}) would cover nothing; put every id first, with no "
                "word between them (`…_prompt_205_init_001_…`), or reword"
            )
    return found


def ids_in_docstring(docstring: str | None) -> list[str]:
    """The ids of `Covers: ID, ID` lines (`covers:` in any case); anything else on such a line is an error (returned
    as is, so it fails the registry check)."""
    found: list[str] = []
    for line in (docstring or "").splitlines():
        head, colon, rest = line.strip().partition(":")
        if colon and head.strip().lower() == "covers":
            found += [item.strip() for item in rest.split(",") if item.strip()]
    return found


class CollectedTest(NamedTuple):
    name: str
    docstring: str | None
    skipped: bool  # marked skip, skipif or xfail, or can call pytest.skip/xfail: it may not run


def _dotted(node: ast.expr) -> list[str]:
    """`pytest.mark.skipif(...)` -> ["pytest", "mark", "skipif"]; [] for anything that is not a dotted name."""
    if isinstance(node, ast.Call):
        return _dotted(node.func)
    if isinstance(node, ast.Attribute):
        head = _dotted(node.value)
        return [*head, node.attr] if head else []
    if isinstance(node, ast.Name):
        return [node.id]
    return []


def _skips(node: ast.AST | None, aliases: set[str]) -> bool:
    """Whether an expression (a decorator, a `pytestmark` value) holds a skip, skipif or xfail mark anywhere, spelled
    `….mark.skip…` or through a module-level alias of one (`needs_landlock = pytest.mark.skipif(…)`)."""
    if node is None:
        return False
    for child in ast.walk(node):
        if isinstance(child, ast.expr):
            parts = _dotted(child)
            if len(parts) >= 2 and parts[-2] == "mark" and parts[-1] in SKIPPING_MARKS:
                return True
            if isinstance(child, ast.Name) and child.id in aliases:
                return True
    return False


def _calls_skip(function: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    return any(
        isinstance(child, ast.Call) and _dotted(child.func)[-2:] in (["pytest", call] for call in SKIPPING_CALLS)
        for child in ast.walk(function)
    )


def _pytestmark(body: list[ast.stmt]) -> ast.expr | None:
    for statement in body:
        if isinstance(statement, ast.Assign) and any(
            isinstance(target, ast.Name) and target.id == "pytestmark" for target in statement.targets
        ):
            return statement.value
    return None


def _statements(body: list[ast.stmt]) -> Iterator[ast.stmt]:
    """The statements that define a module's or class's attributes: its body, and the bodies of its module-level
    `if`/`try`/`with` blocks (a def there is still an attribute), but never a function's body."""
    for statement in body:
        if isinstance(statement, ast.If | ast.With | ast.AsyncWith):
            yield from _statements(statement.body)
            yield from _statements(getattr(statement, "orelse", []))
        elif isinstance(statement, ast.Try):
            for block in (statement.body, statement.orelse, statement.finalbody):
                yield from _statements(block)
            for handler in statement.handlers:
                yield from _statements(handler.body)
        else:
            yield statement


def collected_tests(tree: ast.Module) -> Iterator[CollectedTest]:
    """The test functions pytest collects from a module (its default `test` and `Test` prefixes): module-level
    functions, and methods of `Test…` classes (nested ones too) that have no `__init__`; never a function defined
    inside another, nor a method of any other class."""
    aliases = {
        target.id
        for statement in _statements(tree.body)
        if isinstance(statement, ast.Assign) and _skips(statement.value, set())
        for target in statement.targets
        if isinstance(target, ast.Name) and target.id != "pytestmark"
    }

    def walk(body: list[ast.stmt], skipped: bool) -> Iterator[CollectedTest]:
        skipped = skipped or _skips(_pytestmark(body), aliases)
        for statement in _statements(body):
            if isinstance(statement, ast.FunctionDef | ast.AsyncFunctionDef) and statement.name.startswith("test"):
                marked = any(_skips(decorator, aliases) for decorator in statement.decorator_list)
                yield CollectedTest(
                    statement.name, ast.get_docstring(statement), skipped or marked or _calls_skip(statement)
                )
            elif isinstance(statement, ast.ClassDef) and statement.name.startswith("Test"):
                if any(isinstance(s, ast.FunctionDef) and s.name == "__init__" for s in statement.body):
                    continue  # pytest collects no test from a class with an __init__
                marked = any(_skips(decorator, aliases) for decorator in statement.decorator_list)
                yield from walk(statement.body, skipped or marked)

    yield from walk(tree.body, False)


@cache
def all_tests() -> tuple[tuple[str, CollectedTest], ...]:
    """Every collected test under tests/, as (`file::function`, test)."""
    found = []
    for path in sorted(TESTS.rglob("test_*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        found += [(f"{path.relative_to(ROOT)}::{test.name}", test) for test in collected_tests(tree)]
    return tuple(found)


def ids_of(test: CollectedTest) -> list[str]:
    return ids_in_name(test.name) + ids_in_docstring(test.docstring)


def says_the_schema_wins(test: CollectedTest) -> tuple[bool, bool]:
    """(its name says so, its docstring says so)."""
    prose = " ".join((test.docstring or "").split()).lower()
    return SCHEMA_WINS_NAME in test.name, SCHEMA_WINS_DOCSTRING in prose


def coverage(deviating: bool = False) -> dict[str, list[str]]:
    """Every id some test that runs names, with the tests (`file::function`) that name it; with `deviating`, only
    the tests that say the 2.4.0 schema wins."""
    covered: dict[str, list[str]] = {}
    for where, test in all_tests():
        if test.skipped or (deviating and not all(says_the_schema_wins(test))):
            continue
        for requirement in ids_of(test):
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
    assert ids_in_name("test_acp_batch_202_schema_2_4_0_gets_one_minus_32600") == ["ACP-BATCH-202"]
    assert ids_in_name("test_acp_server_streams_a_reply") == []
    assert ids_in_name("test_init_201_is_not_a_conformance_name") == []
    docstring = "Why.\n\nCovers: ACP-INFO-CANCEL-201, ACP-CANCEL-205\nMore words: not ids."
    assert ids_in_docstring(docstring) == ["ACP-INFO-CANCEL-201", "ACP-CANCEL-205"]


def test_an_id_after_a_joining_word_fails_loudly_instead_of_covering_nothing() -> None:
    for name in ("test_acp_prompt_205_and_init_001", "test_acp_prompt_205_holds_and_init_001_too"):
        try:
            ids_in_name(name)
        except AmbiguousConformanceNameError as error:
            assert "init_001" in str(error), error
        else:
            raise AssertionError(f"{name} was read without complaint")


def test_a_covers_line_is_read_in_any_case() -> None:
    docstring = "Why.\n\ncovers: ACP-INFO-CANCEL-201\n  COVERS : ACP-CANCEL-205\ncovered: not a covers line"
    assert ids_in_docstring(docstring) == ["ACP-INFO-CANCEL-201", "ACP-CANCEL-205"]


def _collected(source: str) -> dict[str, bool]:
    return {test.name: test.skipped for test in collected_tests(ast.parse(source))}


def test_only_tests_pytest_collects_are_read() -> None:
    source = """
def test_module_level(): pass
async def test_async_module_level(): pass
def helper():
    def test_nested_in_a_function(): pass
class Helper:
    def test_in_a_class_pytest_ignores(self): pass
class TestGroup:
    def test_method(self):
        def test_nested_in_a_method(): pass
    class TestInner:
        def test_inner_method(self): pass
class TestWithInit:
    def __init__(self): pass
    def test_never_collected(self): pass
if True:
    def test_under_an_if(): pass
"""
    assert _collected(source) == {
        "test_module_level": False,
        "test_async_module_level": False,
        "test_method": False,
        "test_inner_method": False,
        "test_under_an_if": False,
    }


def test_a_skipped_or_xfailed_test_covers_nothing() -> None:
    source = """
import pytest
needs_landlock = pytest.mark.skipif(True, reason="x")
@pytest.mark.skip
def test_skip(): pass
@pytest.mark.skipif(True, reason="x")
def test_skipif(): pass
@pytest.mark.xfail(strict=True)
def test_xfail(): pass
@needs_landlock
def test_alias(): pass
@pytest.mark.parametrize("x", [1, pytest.param(2, marks=pytest.mark.skip)])
def test_a_skipped_case(x): pass
def test_skips_itself():
    if True:
        pytest.skip("no")
@pytest.mark.timeout(5)
def test_runs(): pass
@pytest.mark.skip
class TestSkipped:
    def test_in_a_skipped_class(self): pass
class TestMarked:
    pytestmark = [pytest.mark.xfail]
    def test_in_a_marked_class(self): pass
"""
    assert _collected(source) == {
        "test_skip": True,
        "test_skipif": True,
        "test_xfail": True,
        "test_alias": True,
        "test_a_skipped_case": True,
        "test_skips_itself": True,
        "test_runs": False,
        "test_in_a_skipped_class": True,
        "test_in_a_marked_class": True,
    }
    module_marked = "import pytest\npytestmark = [pytest.mark.timeout(9), pytest.mark.skipif(True, reason='x')]\n"
    assert _collected(module_marked + "def test_any(): pass\n") == {"test_any": True}


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


def test_a_test_says_the_schema_wins_in_its_name_and_its_docstring_or_in_neither() -> None:
    halves = {where: said for where, test in all_tests() if len(set(said := says_the_schema_wins(test))) == 2}
    assert not halves, (
        f"say it in both (`{SCHEMA_WINS_NAME}` in the name, {SCHEMA_WINS_DOCSTRING!r} in the docstring), or in "
        f"neither: (name, docstring) = {halves}"
    )


def test_a_test_where_the_schema_wins_names_only_listed_deviations() -> None:
    unlisted = {requirement: tests for requirement, tests in coverage(True).items() if requirement not in DEVIATIONS}
    assert not unlisted, (
        f"tests that say the 2.4.0 schema wins over the kit name ids DEVIATIONS does not list (list each with why, or "
        f"split the test so the deviating assertion stands alone): {unlisted}"
    )


def test_every_listed_deviation_is_judged_and_held_by_a_test_that_says_the_schema_wins() -> None:
    deviating = coverage(True)
    for requirement, reason in DEVIATIONS.items():
        assert registry()[requirement]["level"] in JUDGED, requirement
        assert requirement not in NOT_APPLICABLE, requirement
        assert reason.split(":")[0].split(",")[0] == registry()[requirement]["level"], (requirement, reason)
    unheld = sorted(requirement for requirement in DEVIATIONS if requirement not in deviating)
    assert not unheld, f"DEVIATIONS lists ids no running test says the schema wins for: {unheld}"


# The kit's batch requirements (JSON-RPC 2.0 §6), served as it asks since ACP-V2.md §23 Q5 was revised.
BATCH_REQUIREMENTS = (
    "ACP-BATCH-201",
    "ACP-BATCH-202",
    "ACP-BATCH-203",
    "ACP-BATCH-204",
    "ACP-BATCH-205",
    "ACP-JSONRPC-001",
    "ACP-JSONRPC-003",
    "ACP-JSONRPC-005",
)


def test_the_batch_requirements_are_held_as_the_kit_asks_by_the_batch_tests() -> None:
    """Each is covered by tests/e2e/test_batches.py (run over every transport), and none is a deviation any more."""
    covered, deviating = coverage(), coverage(True)
    for requirement in BATCH_REQUIREMENTS:
        assert any(test.startswith("tests/e2e/test_batches.py::") for test in covered.get(requirement, [])), requirement
        assert requirement not in DEVIATIONS and requirement not in deviating, requirement
