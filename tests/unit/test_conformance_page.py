"""docs/conformance.md cannot drift: it is what tests/support/conformance_page.py writes from the four official
schemas, the server's own method tables and renderers, and the small map of the tests that prove each row. These
fail when the committed page differs from that (the message says the one command that rewrites it), when a test the
page names does not exist (or may not run), and when something the server implements has no test named for it.
"""

from __future__ import annotations

import ast
import difflib
from functools import cache

import pytest

from tests.support import conformance_page as page
from tests.unit.test_conformance_coverage import collected_tests

REGENERATE = f"run `{page.COMMAND}` and commit docs/conformance.md"


@cache
def collected_in(path: str) -> dict[str, bool]:
    """The tests pytest collects from one file, each with whether it may not run (skip, skipif, xfail)."""
    source = page.ROOT / path
    if not source.is_file():
        return {}
    return {test.name: test.skipped for test in collected_tests(ast.parse(source.read_text()))}


def test_the_committed_conformance_page_is_what_the_generator_writes() -> None:
    committed = page.PAGE.read_text() if page.PAGE.is_file() else ""
    generated = page.render()
    if committed != generated:
        diff = difflib.unified_diff(
            committed.splitlines(), generated.splitlines(), "docs/conformance.md", "generated", lineterm=""
        )
        pytest.fail(f"docs/conformance.md is out of date: {REGENERATE}\n" + "\n".join(list(diff)[:40]))


def test_every_test_the_page_names_exists_and_always_runs() -> None:
    named = {**{str(k): v for k, v in page.PROOFS.items()}, **{str(k): v for k, v in page.UPDATE_PROOFS.items()}}
    missing = [f"{row}: {path}::{name}" for row, (path, name) in named.items() if name not in collected_in(path)]
    assert not missing, "tests/support/conformance_page.py names tests that do not exist:\n" + "\n".join(missing)
    skipped = [f"{row}: {path}::{name}" for row, (path, name) in named.items() if collected_in(path)[name]]
    assert not skipped, "a test that may be skipped proves nothing; name another:\n" + "\n".join(skipped)


def test_every_implemented_method_and_sent_update_has_a_test() -> None:
    untested = [f"PROOFS {key}" for key, _ in page.implemented_rows() if key not in page.PROOFS]
    untested += [f"UPDATE_PROOFS {key}" for key in page.sent_updates() if key not in page.UPDATE_PROOFS]
    assert not untested, (
        "implemented without a test on the conformance page: add each to tests/support/conformance_page.py, then "
        f"{REGENERATE}:\n" + "\n".join(untested)
    )


def test_no_test_is_named_for_what_the_server_does_not_implement() -> None:
    """A row that stops being implemented (or a key with a typo) must not keep a test that seems to prove it."""
    stale = [f"PROOFS {key}" for key in page.PROOFS if key not in dict(page.implemented_rows())]
    stale += [f"UPDATE_PROOFS {key}" for key in page.UPDATE_PROOFS if key not in page.sent_updates()]
    assert not stale, "tests/support/conformance_page.py names tests for rows not implemented:\n" + "\n".join(stale)


def test_the_counts_are_those_of_the_schemas_and_the_deliberate_gaps_stay_gaps() -> None:
    """The schemas the page counts are the four 2.4.0 ones (25, 38, 18 and 31 methods), and what acp-server leaves
    out on purpose (`elicitation/complete`, `proxy/*`) is never counted as implemented."""
    sizes = {
        (version, stability): len(page.schema_methods(version, stability)) for version, stability, _ in page.SCHEMAS
    }
    assert sizes == {(1, "stable"): 25, (1, "unstable"): 38, (2, "stable"): 18, (2, "unstable"): 31}
    deliberate = {"elicitation/complete", "proxy/initialize", "proxy/successor"}
    assert not [row for row in page.schema_rows() if row.method in deliberate and page.implemented(row)]
