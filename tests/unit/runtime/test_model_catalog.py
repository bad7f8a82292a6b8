"""Model discovery's pure parts: reading an endpoint's untrusted models list, merging the choices, and the cache
file (atomic, tolerant of a broken file, keeping other endpoints' lists)."""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Any

import orjson
import pytest

from acp_server.runtime.providers.catalog import (
    LIST_TTL,
    Listing,
    ListingCache,
    ListingError,
    endpoint_key,
    merge_choices,
    model_ids,
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
