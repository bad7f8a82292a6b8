"""Which root-level keys of a message's `params` or `result` the v2 schema does not define (acp-tck ACP-SCHEMA-002).

The schema leaves its objects open (no `additionalProperties: false`), so validation alone never catches a stray key.
Here a definition's known keys are its `properties`, plus those of every `allOf` part and of every `anyOf`/`oneOf`
branch the value matches; a value matched by an `other` branch (a custom or future variant) is open by construction
and is not judged, as the kit does.
"""

from __future__ import annotations

from functools import cache
from typing import Any

from jsonschema import Draft202012Validator

from tests.support.wire_schema import SCHEMA_V2_PATH, _registry, _schema

__all__ = ["definition_for", "unknown_root_keys"]


def _node(pointer: str) -> dict[str, Any]:
    """The schema object at a JSON pointer like `/$defs/StateUpdate/anyOf/1` (no key needs escaping here)."""
    node: Any = _schema(2)
    for part in pointer.strip("/").split("/"):
        node = node[int(part)] if isinstance(node, list) else node[part]
    assert isinstance(node, dict), pointer
    return node


@cache
def _branch_validator(pointer: str) -> Draft202012Validator:
    return Draft202012Validator({"$ref": f"urn:acp#{pointer}"}, registry=_registry(2))


def _known_keys(pointer: str, value: dict[str, Any]) -> set[str] | None:
    """The root keys the schema at `pointer` defines for `value`; None when an `other` branch matched (open)."""
    node = _node(pointer)
    known = set(node.get("properties", {}))
    parts: list[str] = []
    if "$ref" in node:
        parts.append(node["$ref"].removeprefix("#"))
    parts += [f"{pointer}/allOf/{n}" for n in range(len(node.get("allOf", [])))]
    for combinator in ("anyOf", "oneOf"):
        branches = [f"{pointer}/{combinator}/{n}" for n in range(len(node.get(combinator, [])))]
        matched = [branch for branch in branches if _branch_validator(branch).is_valid(value)]
        if any(_node(branch).get("title") == "other" for branch in matched):
            return None
        parts += matched
    for part in parts:
        more = _known_keys(part, value)
        if more is None:
            return None
        known |= more
    return known


def unknown_root_keys(definition: str, value: Any) -> list[str]:
    """The keys of `value` (a `params` or `result` object) that the v2 `$defs` type `definition` does not define."""
    if not isinstance(value, dict):
        return []
    known = _known_keys(f"/$defs/{definition}", value)
    return [] if known is None else sorted(set(value) - known)


@cache
def _by_method() -> dict[tuple[str, bool], str]:
    """(method, is a response) -> the v2 `$defs` type carrying that `x-method`."""
    assert SCHEMA_V2_PATH.exists()
    return {
        (definition["x-method"], name.endswith("Response")): name
        for name, definition in _schema(2)["$defs"].items()
        if definition.get("x-method")
    }


def definition_for(method: str, response: bool) -> str | None:
    """The v2 type of a request's or notification's `params` (`response=False`) or of its response's `result`."""
    return _by_method().get((method, response))
