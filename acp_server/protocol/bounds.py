"""Bounds on client JSON that is kept as it came (`_meta`, `mcpServers` entries, an embedded resource, unknown
fields), in one place, because it is written again later (store, recording, log) and orjson writes nothing nested
deeper than 254 levels: `_meta` at most `MAX_META_DEPTH` levels and `MAX_META_BYTES`, anything else kept whole at
most `MAX_KEPT_DEPTH` levels. What exceeds them is refused as invalid params (-32602), before anything is stored.
A `_meta` is bounded wherever it is, on both protocol versions: the one a model declares, and every one inside a
value kept as it came (a free-form field such as v2's `capabilities` and `info`, an unknown field).

Plain functions without pydantic: the wire models (`schema.py`) use them as validators, and the start-up path reads
`initialize` with them before pydantic is loaded (`initialize.py`).
"""

from __future__ import annotations

from typing import Any

import orjson

__all__ = [
    "MAX_KEPT_DEPTH",
    "MAX_META_BYTES",
    "MAX_META_DEPTH",
    "check_kept_object",
    "check_kept_value",
    "check_meta",
    "check_metas_within",
    "deeper_than",
]

MAX_META_DEPTH = 32
MAX_META_BYTES = 64 * 1024
# Free-form objects kept whole: deep enough for any real MCP server entry or resource, far below orjson's 254 with
# the envelopes the store and the recording add around them.
MAX_KEPT_DEPTH = 64


def deeper_than(value: Any, limit: int) -> bool:
    """Whether `value` nests more than `limit` objects/arrays. Iterative, and stops at `limit + 1`: a client's
    1000-level line must not cost Python recursion (or much time) to refuse."""
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children: Any = item.values()
        elif isinstance(item, list):
            children = item
        else:
            continue
        if depth == limit:
            return True
        stack.extend((child, depth + 1) for child in children)
    return False


def check_meta(meta: dict[str, Any] | None) -> dict[str, Any] | None:
    """The one rule for every `_meta` a client sends (whatever model or free-form object carries it)."""
    if meta is None:
        return None
    if deeper_than(meta, MAX_META_DEPTH):
        raise ValueError(f"_meta is nested deeper than {MAX_META_DEPTH} levels")
    size = len(orjson.dumps(meta))  # cannot fail: 32 levels are well within what orjson writes
    if size > MAX_META_BYTES:
        raise ValueError(f"_meta is larger than {MAX_META_BYTES // 1024} KiB ({size} bytes)")
    return meta


def check_kept_object(value: dict[str, Any]) -> dict[str, Any]:
    """A free-form client object stored as it came: bounded in depth, and every `_meta` inside it checked."""
    check_kept_value(value)
    return value


def check_kept_value(value: Any) -> Any:
    """Any client value kept as it came (a field typed loosely, read leniently): when it is an object or an array,
    bounded in depth and every `_meta` inside it checked; any other value as it is."""
    if isinstance(value, (dict, list)):
        if deeper_than(value, MAX_KEPT_DEPTH):
            raise ValueError(f"nested deeper than {MAX_KEPT_DEPTH} levels")
        check_metas_within(value)
    return value


def check_metas_within(value: Any) -> None:
    """Every `_meta` object inside `value` checked (`check_meta`). The caller has bounded its depth."""
    stack: list[Any] = [value]
    while stack:  # bounded by the caller's depth check
        item = stack.pop()
        if isinstance(item, dict):
            meta = item.get("_meta")
            if isinstance(meta, dict):
                check_meta(meta)
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
