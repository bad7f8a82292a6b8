"""Model discovery's pure parts: reading an endpoint's untrusted models list, merging the choices, and the cache
file (atomic, tolerant of a broken file, keeping other endpoints' lists)."""

from __future__ import annotations

import gzip
import os
import re
import stat
import tracemalloc
import zlib
from dataclasses import asdict
from pathlib import Path
from typing import Any

import orjson
import pytest

from acp_server.errors import ListingError, ListingTooLargeError
from acp_server.runtime.providers.catalog import (
    LIST_TTL,
    MAX_CACHE_BYTES,
    MAX_ID_CHARS,
    MAX_LIST_BYTES,
    Listing,
    ListingCache,
    decode_listing,
    endpoint_key,
    merge_choices,
    model_ids,
    usable_model_id,
)


def test_a_models_list_gives_its_chat_models_in_order_without_duplicates() -> None:
    body = {
        "object": "list",
        "data": [
            {"id": "gpt-4.1", "object": "model"},
            {"id": "text-embedding-3-small"},
            {"id": "qwen2.5-coder:7b"},
            {"id": "gpt-4.1"},
            {"id": "whisper-1"},
            {"id": "bad\nname"},
            {"id": ""},
            {"id": "x" * 500},
            {"id": "meta-llama/llama-3.3-70b"},
        ],
    }
    assert model_ids(body) == ("gpt-4.1", "qwen2.5-coder:7b", "meta-llama/llama-3.3-70b")


@pytest.mark.parametrize(
    "body",
    [None, "text", [], {"models": []}, {"data": "x"}, {"data": [{"name": "m"}]}, {"data": [{"id": 3}]}, {"data": [1]}],
    ids=["null", "text", "array", "no-data", "data-not-a-list", "no-id", "id-not-text", "entry-not-an-object"],
)
def test_anything_but_a_models_list_is_a_listing_error(body: Any) -> None:
    with pytest.raises(ListingError):
        model_ids(body)


def test_choices_keep_the_configured_first_and_never_repeat_one() -> None:
    openai = Listing("openai", "http://h/v1", ("m", "qwen:latest", "new"), 0.0)
    anthropic = Listing("anthropic", "https://api.anthropic.com", ("claude-x",), 0.0)
    configured = ["openai:new", "openai:qwen", "anthropic:claude-y"]
    assert merge_choices(configured, [openai, anthropic]) == (
        "openai:new",
        "openai:qwen",
        "anthropic:claude-y",
        "openai:m",  # qwen:latest is the configured qwen
        "anthropic:claude-x",
    )


def test_an_endpoint_is_kept_without_its_credentials_or_query() -> None:
    assert endpoint_key("https://user:secret@host.example:8443/v1/?api-key=k") == "https://host.example:8443/v1"
    assert endpoint_key("http://127.0.0.1:11434/v1") == "http://127.0.0.1:11434/v1"


def test_a_listing_is_fresh_for_its_time_to_live_only() -> None:
    listing = Listing("openai", "e", ("m",), 1000.0)
    assert listing.fresh(1000.0 + LIST_TTL - 1)
    assert not listing.fresh(1000.0 + LIST_TTL)
    assert not listing.fresh(999.0)  # a clock that went back: asked again


def test_the_cache_is_written_atomically_for_the_user_only_and_keeps_other_endpoints(tmp_path: Path) -> None:
    cache = ListingCache(tmp_path / "state" / "model-lists.json")
    one = Listing("openai", "http://a/v1", ("m1",), 1.0)
    two = Listing("openai", "http://b/v1", ("m2",), 2.0)
    cache.update({("openai", "http://a/v1"): one})
    cache.update({("openai", "http://b/v1"): two})
    assert cache.load() == {("openai", "http://a/v1"): one, ("openai", "http://b/v1"): two}
    cache.update({}, dropped=[("openai", "http://a/v1")])
    assert cache.load() == {("openai", "http://b/v1"): two}
    assert sorted(p.name for p in cache.path.parent.iterdir()) == ["model-lists.json"]  # no temporary file left
    if os.name == "posix":
        assert stat.S_IMODE(cache.path.stat().st_mode) == 0o600


@pytest.mark.parametrize(
    "content",
    [b"not json", b"[]", orjson.dumps({"version": 99, "endpoints": []}), orjson.dumps({"version": 1})],
    ids=["garbage", "not-an-object", "other-version", "no-endpoints"],
)
def test_a_broken_cache_file_is_ignored_and_replaced(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "model-lists.json"
    path.write_bytes(content)
    cache = ListingCache(path)
    assert cache.load() == {}
    listing = Listing("anthropic", "https://api.anthropic.com", ("claude-x",), 5.0)
    cache.update({("anthropic", "https://api.anthropic.com"): listing})
    assert cache.load() == {("anthropic", "https://api.anthropic.com"): listing}


def test_a_cache_that_cannot_be_written_is_only_a_warning(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    ListingCache(blocker / "model-lists.json").save({})  # its directory is a file
    assert "cannot write" in caplog.text


# Ids no picker may show: C0 and C1 controls (U+0085, U+009B), bidi and zero-width format characters, line and
# paragraph separators, spaces of any kind, an id past MAX_ID_CHARS, and entries that are not text at all.
UNUSABLE: list[object] = [
    "next\u0085line",
    "csi\u009b31m",
    "bidi\u202eevil",
    "isolate\u2066x",
    "zero\u200bwidth",
    "line\u2028sep",
    "para\u2029sep",
    "no\u00a0break",
    "bad\nname",
    "",
    "x" * (MAX_ID_CHARS + 1),
    "x" * 10_000,
]
USABLE = ["gpt-4.1", "qwen2.5-coder:7b", "meta-llama/llama-3.3-70b", "x" * MAX_ID_CHARS, "модель-7b", "通义千问"]


def test_one_filter_keeps_printable_ids_within_the_bound_and_drops_the_rest() -> None:
    assert not any(usable_model_id(name) for name in [*UNUSABLE, 3, None, {"a": 1}, ["m"]])
    assert all(usable_model_id(name) for name in USABLE)
    # An endpoint's answer (issue 20 item 9: C1 controls were offered).
    listed = {"data": [{"id": name} for name in [*UNUSABLE, *USABLE]]}
    assert model_ids(listed) == tuple(USABLE)


def test_ids_read_from_the_cache_pass_the_same_filter(tmp_path: Path) -> None:
    # Issue 20 item 9: the cache's ids were offered as they were, `str()` of a non-text entry included.
    path = tmp_path / "model-lists.json"
    models: list[Any] = [*UNUSABLE, {"a": 1}, 5, None, "text-embedding-3-small", *USABLE, "gpt-4.1"]
    entry = {"family": "openai", "endpoint": "http://a/v1", "fetched_at": 1.0, "models": models}
    path.write_bytes(orjson.dumps({"version": 1, "endpoints": [entry]}))
    expected = Listing("openai", "http://a/v1", tuple(USABLE), 1.0)
    assert ListingCache(path).load() == {("openai", "http://a/v1"): expected}


@pytest.mark.parametrize(
    "entry",
    [
        {"family": "openai", "endpoint": "http://a/v1", "fetched_at": 1.0, "models": "gpt-4.1"},
        {"family": ["openai"], "endpoint": "http://a/v1", "fetched_at": 1.0, "models": []},
        {"family": "openai", "endpoint": 7, "fetched_at": 1.0, "models": []},
    ],
    ids=["models-not-a-list", "family-not-text", "endpoint-not-text"],
)
def test_a_cache_entry_of_another_shape_makes_the_file_ignored(tmp_path: Path, entry: dict[str, Any]) -> None:
    path = tmp_path / "model-lists.json"
    path.write_bytes(orjson.dumps({"version": 1, "endpoints": [entry]}))
    assert ListingCache(path).load() == {}


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="POSIX: links and FIFOs")
@pytest.mark.parametrize("kind", ["fifo", "link", "directory", "too-large"])
def test_a_cache_that_is_not_a_regular_file_within_its_bound_is_ignored_and_replaced(
    tmp_path: Path, kind: str, caplog: pytest.LogCaptureFixture
) -> None:
    # Issue 20 item 10: a FIFO blocked the read (and `initialize` with it); a link was followed.
    path = tmp_path / "model-lists.json"
    target = tmp_path / "elsewhere.json"
    listing = Listing("openai", "http://a/v1", ("linked",), 1.0)
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "link":
        target.write_bytes(orjson.dumps({"version": 1, "endpoints": [{**asdict(listing), "models": ["linked"]}]}))
        path.symlink_to(target)
    elif kind == "directory":
        path.mkdir()
    else:
        path.write_bytes(b" " * (MAX_CACHE_BYTES + 1))
    cache = ListingCache(path)
    assert cache.load() == {}  # at once: pytest's timeout would end a blocked read
    reason = {"fifo": "a FIFO", "link": "a symbolic link, not followed", "directory": "a directory"}
    assert f"cannot read {path} ({reason.get(kind, f'larger than {MAX_CACHE_BYTES} bytes')})" in caplog.text
    if kind == "directory":
        return
    fresh = Listing("openai", "http://b/v1", ("m",), 2.0)
    cache.update({("openai", "http://b/v1"): fresh})  # the name is replaced (a rename never follows a link)
    assert stat.S_ISREG(path.lstat().st_mode) and cache.load() == {("openai", "http://b/v1"): fresh}
    if kind == "link":
        assert b"linked" in target.read_bytes()  # the link's target is left as it was


def test_a_listing_body_is_inflated_within_its_bound_and_a_bomb_is_cut_off_without_inflating_it_whole() -> None:
    # Issue 20 item 7: a 199 KiB gzip body inflated to 200 MB in the server's memory.
    listed = orjson.dumps({"data": [{"id": "gpt-4.1"}, {"id": "csi\u009bx"}]})
    assert decode_listing(listed, "") == decode_listing(gzip.compress(listed), "gzip") == ("gpt-4.1",)
    assert decode_listing(zlib.compress(listed), "deflate") == ("gpt-4.1",)
    spaces = MAX_LIST_BYTES * 25  # 200 MiB of spaces inside a valid list, about 200 KiB compressed
    compressor = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    bomb = compressor.compress(b'{"data": [{"id": "m"}]')
    block = b" " * (1 << 20)
    bomb += b"".join(compressor.compress(block) for _ in range(spaces >> 20)) + compressor.compress(b"}")
    bomb += compressor.flush()
    tracemalloc.start()
    try:
        with pytest.raises(ListingTooLargeError, match="larger than 8 MiB once decompressed"):
            decode_listing(bomb, "gzip")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 3 * MAX_LIST_BYTES  # what was inflated stopped at the bound, not at 200 MiB
    with pytest.raises(ListingTooLargeError, match="larger than 8 MiB, so"):
        decode_listing(b" " * (MAX_LIST_BYTES + 1), "")


@pytest.mark.parametrize(
    ("raw", "encoding", "said"),
    [
        (b"\x1f\x8b not gzip", "gzip", "cannot be decompressed"),
        (b"{}", "br", "an encoding that was not asked for (br)"),
        (b"<html>", "", "not JSON"),
    ],
)
def test_a_listing_body_that_cannot_be_read_is_a_listing_error(raw: bytes, encoding: str, said: str) -> None:
    with pytest.raises(ListingError, match=re.escape(said)):
        decode_listing(raw, encoding)
