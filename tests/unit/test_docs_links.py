"""The documentation holds together: every relative Markdown link in the README, `docs/` and the other Markdown files
of the repository names a file that exists, every `#anchor` names a heading of its page (by GitHub's slug rules),
every `docs/` page is reachable from the README's table, and the README stays short enough to read in five minutes.

The README used to hold everything (954 lines); its content moved to `docs/` (issue 22, item 7), and links between
pages are what a reader follows from there, so a renamed heading or a moved page must fail here, not on GitHub.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from functools import cache
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
README_MAX_LINES = 300

# The Markdown a reader opens in the repository; vendored copies of other projects' files (fixtures/acp-schema/,
# fixtures/acp-tck/) are theirs, but they are ours to keep linking correctly too, so they are included.
DOCUMENTS = sorted(
    {REPO / "README.md"}
    | set((REPO / "docs").glob("*.md"))
    | set((REPO / "bench").glob("*.md"))
    | set((REPO / "fixtures").glob("**/*.md"))
    | set((REPO / "tests" / "mutations").glob("*.md"))
)

FENCE = re.compile(r"^\s*(```|~~~)")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
# An inline link or image, `[text](target "title")`, and a reference definition, `[name]: target`.
INLINE_LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]*)>?(?:\s+\"[^\"]*\")?\s*\)")
REFERENCE = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s|$)")
CODE_SPAN = re.compile(r"(`+).*?\1")
SCHEME = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:|^//")


def prose_lines(text: str) -> Iterator[str]:
    """The lines outside fenced code blocks (a `#` comment in a shell or TOML block is no heading)."""
    fenced = False
    for line in text.splitlines():
        if FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            yield line


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: the rendered text, lowercased, punctuation removed (letters, digits, `_`, `-`
    and spaces stay), each space a `-`."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link's text stays, its target goes
    text = re.sub(r"<[^>]+>", "", text).replace("`", "").replace("*", "")
    return re.sub(r"[^\w\- ]", "", text.strip().lower()).replace(" ", "-")


@cache
def anchors(path: Path) -> frozenset[str]:
    """Every anchor a page has: one per heading, a repeated slug numbered `-1`, `-2`, ... as GitHub does."""
    seen: dict[str, int] = {}
    found: set[str] = set()
    for line in prose_lines(path.read_text(encoding="utf-8")):
        match = HEADING.match(line)
        if not match:
            continue
        base = slug(match.group(2))
        count = seen.get(base, 0)
        seen[base] = count + 1
        found.add(base if count == 0 else f"{base}-{count}")
    return frozenset(found)


def links(text: str) -> Iterator[str]:
    """The targets of a page's Markdown links, outside code blocks and code spans."""
    for line in prose_lines(text):
        reference = REFERENCE.match(line)
        if reference:
            yield reference.group(1)
            continue
        yield from INLINE_LINK.findall(CODE_SPAN.sub("", line))


def broken_links(path: Path, root: Path = REPO) -> list[str]:
    """What is wrong with each relative link of one page: a missing file, a target outside `root` (the repository),
    or an anchor that no heading of its page makes."""
    problems: list[str] = []
    for target in links(path.read_text(encoding="utf-8")):
        if SCHEME.match(target):
            continue  # a web address (or mailto:): not ours to check offline
        file_part, _, anchor = target.partition("#")
        resolved = (path.parent / file_part).resolve() if file_part else path
        if not resolved.is_relative_to(root) or not resolved.exists():
            problems.append(f"{target}: no such file in the repository")
        elif anchor and (resolved.suffix != ".md" or anchor not in anchors(resolved)):
            problems.append(f"{target}: no heading makes #{anchor} in {resolved.relative_to(root)}")
    return problems


def test_the_slug_follows_githubs_rules_for_code_punctuation_and_repeats(tmp_path: Path) -> None:
    assert slug("Checking the set-up: `acp-server doctor`") == "checking-the-set-up-acp-server-doctor"
    assert slug("ACP v2 (draft) beside v1") == "acp-v2-draft-beside-v1"
    assert slug("I1 — A cancel is routed; **other** sessions_x") == "i1--a-cancel-is-routed-other-sessions_x"
    page = tmp_path / "page.md"
    page.write_text("# Notes\n\n```sh\n# not a heading\n```\n\n## Notes\n\n## [Linked](x.md) heading\n")
    assert anchors(page) == {"notes", "notes-1", "linked-heading"}


def test_a_broken_file_or_anchor_is_reported_and_code_is_not_read_as_links(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text(
        "# Top\n\n[ok](#top) [web](https://example.com/#x) `[in code](missing.md)`\n\n"
        "```md\n[in a block](other.md)\n```\n\n[gone](missing.md) [bad anchor](#nowhere) [self](page.md#top)\n"
        "[outside](../elsewhere.md) [other page](sub/other.md#there)\n"
    )
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "other.md").write_text("# Here\n")
    (tmp_path.parent / "elsewhere.md").touch()
    problems = [problem.split(":")[0] for problem in broken_links(page, root=tmp_path)]
    assert problems == ["missing.md", "#nowhere", "../elsewhere.md", "sub/other.md#there"]


@pytest.mark.parametrize("document", DOCUMENTS, ids=lambda path: str(path.relative_to(REPO)))
def test_every_relative_link_and_anchor_resolves(document: Path) -> None:
    assert broken_links(document) == []


def test_every_docs_page_is_in_the_readmes_table() -> None:
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    table = readme.split("## Read more", 1)[1]
    pages = sorted(path.relative_to(REPO).as_posix() for path in (REPO / "docs").glob("*.md"))
    assert {"docs/guide.md", "docs/configuration.md", "docs/acp.md", "docs/development.md"} <= set(pages)
    for page in pages:
        assert f"]({page})" in table, f"the README's 'Read more' table does not list {page}"


def test_the_readme_reads_in_five_minutes() -> None:
    lines = (REPO / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) < README_MAX_LINES, f"README.md has {len(lines)} lines; move detail into docs/"
