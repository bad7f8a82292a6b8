"""`chat.forms`: a form's schema as fields typed one a line, and what each typed line means."""

from __future__ import annotations

from typing import Any

import pytest

from acp_server.chat.forms import Field, fields_of, hint, parse

SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "branch": {"type": "string", "title": "Branch", "enum": ["main", "dev"]},
        "size": {"type": "string", "oneOf": [{"const": "s", "title": "Small"}, {"const": "l", "title": "Large"}]},
        "count": {"type": "integer", "description": "how many"},
        "ratio": {"type": "number"},
        "tag": {"type": "boolean"},
        "note": {"type": "string"},
        "labels": {"type": "array", "items": {"type": "string"}},  # not askable here, but optional: left out
    },
    "required": ["branch", "count"],
}


def by_name() -> dict[str, Field]:
    fields = fields_of(SCHEMA)
    assert fields is not None
    return {field.name: field for field in fields}


def test_a_schemas_fields_keep_their_order_labels_and_choices_and_leave_out_what_cannot_be_asked() -> None:
    fields = by_name()
    assert list(fields) == ["branch", "size", "count", "ratio", "tag", "note"]
    assert fields["branch"].label == "Branch" and fields["branch"].required
    assert fields["size"].choices == (("s", "Small"), ("l", "Large"))
    assert hint(fields["branch"]) == "1. main, 2. dev"
    assert hint(fields["size"]) == "1. Small, 2. Large; Enter to skip"
    assert hint(fields["count"]) == "a whole number"
    assert hint(fields["tag"]) == "y/n; Enter to skip"
    assert hint(fields["note"]) == "Enter to skip"


def test_a_form_with_a_required_field_this_client_cannot_ask_is_not_answerable() -> None:
    assert fields_of({**SCHEMA, "required": ["labels"]}) is None
    assert fields_of({"type": "object"}) is None
    assert fields_of("not a schema") is None


@pytest.mark.parametrize(
    ("name", "typed", "meaning"),
    [
        ("branch", "2", (True, "dev")),
        ("branch", "main", (True, "main")),
        ("branch", "3", (False, None)),
        ("branch", "²", (False, None)),  # "²".isdigit() is true, but it is no number to choose by
        ("branch", "", (False, None)),  # required: asked again
        ("size", "Large", (True, "l")),
        ("size", "", (True, None)),  # optional: skipped
        ("count", "12", (True, 12)),
        ("count", "1.5", (False, None)),
        ("ratio", "1.5", (True, 1.5)),
        ("ratio", "2", (True, 2)),
        ("ratio", "two", (False, None)),
        ("ratio", "nan", (False, None)),  # JSON has no nan or infinity: they would be sent as null
        ("ratio", "inf", (False, None)),
        ("ratio", "1e400", (False, None)),
        ("count", "²", (False, None)),
        ("tag", "Y", (True, True)),
        ("tag", "no", (True, False)),
        ("tag", "maybe", (False, None)),
        ("note", "  spaced out ", (True, "  spaced out ")),
    ],
)
def test_a_typed_line_is_a_value_a_skip_or_a_reason_to_ask_again(
    name: str, typed: str, meaning: tuple[bool, Any]
) -> None:
    assert parse(by_name()[name], typed) == meaning
