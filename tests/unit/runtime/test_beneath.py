"""Unit tests of `runtime.beneath` (opening files beneath the session's roots without following links out of them)
and of `paths.wire`/`unwire` (file names that are not UTF-8), against real temporary directories.

The race itself is tested end to end in `test_file_tools_e2e.py`; here are the rules of the walk one by one: links
inside the roots are followed, links out are refused wherever they sit, `..` in a link target is resolved against
real directories, loops end, and writes replace a name rather than write through it.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from acp_server.errors import OutsideError, ToolError
from acp_server.runtime import beneath
from acp_server.runtime.paths import unwire, wire


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    (tmp_path / "ws").mkdir()
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "secret").write_text("TOP SECRET\n")
    return tmp_path / "ws"


def test_a_link_inside_the_roots_is_followed(ws: Path) -> None:
    (ws / "sub").mkdir()
    (ws / "sub" / "real.txt").write_text("inside\n")
    (ws / "alias.txt").symlink_to("sub/real.txt")
    (ws / "dir").symlink_to("sub", target_is_directory=True)
    (ws / "sub" / "up").symlink_to("../alias.txt")  # `..` in a target, resolved against the real directory
    for name in ("alias.txt", "dir/real.txt", "sub/up", "dir/up"):
        assert beneath.read_bytes(ws / name, (ws,)) == b"inside\n", name
    assert beneath.checked_path(ws / "dir" / "up", (ws,)) == ws / "sub" / "real.txt"


def test_a_read_with_a_size_limit_refuses_a_larger_file_and_returns_one_that_fits(ws: Path) -> None:
    (ws / "big").write_bytes(b"x" * 11)
    (ws / "fits").write_bytes(b"x" * 10)
    assert beneath.read_bytes(ws / "fits", (ws,), max_bytes=10) == b"x" * 10
    with pytest.raises(ToolError, match="larger than 10 bytes"):
        beneath.read_bytes(ws / "big", (ws,), max_bytes=10)


def test_a_link_leading_out_is_refused_as_the_last_component_or_on_the_way(ws: Path) -> None:
    (ws / "file").symlink_to("../outside/secret")
    (ws / "dir").symlink_to("../outside", target_is_directory=True)
    (ws / "abs").symlink_to(ws.parent / "outside" / "secret")
    (ws / "hop").symlink_to("file")  # a link to a link that leads out
    for name in ("file", "dir/secret", "abs", "hop"):
        with pytest.raises(OutsideError, match="outside the session's directories"):
            beneath.read_bytes(ws / name, (ws,))
        with pytest.raises(OutsideError):
            beneath.write_bytes(ws / name, (ws,), b"pwned")
        with pytest.raises(OutsideError):
            beneath.checked_path(ws / name, (ws,))
    assert (ws.parent / "outside" / "secret").read_text() == "TOP SECRET\n"
    assert sorted(p.name for p in (ws.parent / "outside").iterdir()) == ["secret"]


def test_a_link_to_another_root_is_followed(ws: Path) -> None:
    (ws.parent / "outside" / "secret").write_text("shared\n")
    (ws / "other").symlink_to("../outside", target_is_directory=True)
    assert beneath.read_bytes(ws / "other" / "secret", (ws, ws.parent / "outside")) == b"shared\n"


def test_a_link_loop_ends_with_an_error(ws: Path) -> None:
    (ws / "a").symlink_to("b")
    (ws / "b").symlink_to("a")
    with pytest.raises(ToolError, match="too many levels of symbolic links"):
        beneath.read_bytes(ws / "a", (ws,))


def test_a_write_replaces_a_hard_link_instead_of_writing_through_it(ws: Path) -> None:
    secret = ws.parent / "outside" / "secret"
    os.link(secret, ws / "x")
    beneath.write_bytes(ws / "x", (ws,), b"new\n")
    assert (ws / "x").read_bytes() == b"new\n"
    assert secret.read_text() == "TOP SECRET\n"


def test_a_write_keeps_the_permission_bits_and_makes_missing_directories(ws: Path) -> None:
    script = ws / "run.sh"
    script.write_text("old\r\n")
    script.chmod(0o750)
    beneath.write_bytes(script, (ws,), b"new\r\n")
    assert script.read_bytes() == b"new\r\n"
    assert stat.S_IMODE(script.stat().st_mode) == 0o750
    beneath.write_bytes(ws / "a" / "b" / "c.txt", (ws,), b"deep\n")
    assert (ws / "a" / "b" / "c.txt").read_bytes() == b"deep\n"
    assert sorted(p.name for p in ws.iterdir()) == ["a", "run.sh"]  # no temporary file left behind


def test_a_write_through_a_link_inside_lands_in_its_target(ws: Path) -> None:
    (ws / "real.txt").write_text("old\n")
    (ws / "alias.txt").symlink_to("real.txt")
    beneath.write_bytes(ws / "alias.txt", (ws,), b"new\n")
    assert (ws / "alias.txt").is_symlink()
    assert (ws / "real.txt").read_text() == "new\n"


def test_reading_what_is_not_a_regular_file_is_refused(ws: Path) -> None:
    os.mkfifo(ws / "pipe")
    (ws / "dir").mkdir()
    with pytest.raises(ToolError, match="not a regular file"):
        beneath.read_bytes(ws / "pipe", (ws,))
    with pytest.raises(ToolError, match="is a directory"):
        beneath.read_bytes(ws / "dir", (ws,))
    with pytest.raises(ToolError, match="no such file"):
        beneath.read_bytes(ws / "missing", (ws,))


def test_exists_tells_a_missing_file_from_one_that_is_there(ws: Path) -> None:
    (ws / "f").write_text("x")
    (ws / "dangling").symlink_to("nowhere")
    assert beneath.exists(ws / "f", (ws,))
    assert beneath.exists(ws / "dangling", (ws,))
    assert not beneath.exists(ws / "nope", (ws,))
    assert not beneath.exists(ws / "no" / "dir" / "f", (ws,))


@pytest.mark.parametrize(
    ("name", "shown"),
    [
        (os.fsdecode(b"caf\xe9.txt"), "caf\\xe9.txt"),
        ("café.txt", "café.txt"),
        ("a\\x41b", "a\\x5cx41b"),  # a backslash that reads as an escape is escaped itself
        ("a\\b", "a\\b"),
    ],
)
def test_wire_shows_names_as_utf8_and_unwire_gives_the_name_back(name: str, shown: str) -> None:
    assert wire(name) == shown
    shown.encode("utf-8")  # valid UTF-8: no surrogate left
    assert unwire(shown) == name
