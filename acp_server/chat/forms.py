"""Form questions (`elicitation/create` in form mode) as fields typed one a line (ACP-V2.md §15).

A form's `requestedSchema` is a flat object of primitive properties: strings (free, or one of an `enum` or of
`oneOf` constants), numbers, integers and booleans. Each becomes one line to type: a choice by its number or its
value, a boolean as y or n, an optional field skipped with Enter. A form with a required field this client cannot
ask (an array, say) is declined rather than answered half. Pure functions: `permissions.Questions` asks them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

__all__ = ["Field", "fields_of", "hint", "parse"]

KINDS = ("string", "number", "integer", "boolean")
YES = ("y", "yes", "true")
NO = ("n", "no", "false")


@dataclass(frozen=True, slots=True)
class Field:
    name: str
    label: str  # its title, else its name
    description: str
    kind: str  # one of KINDS
    choices: tuple[tuple[Any, str], ...]  # (value, what it is called) when the value must be one of these
    required: bool


def _text(value: Any) -> str:
    return value if isinstance(value, str) else ""


def _choices(spec: dict[str, Any]) -> tuple[tuple[Any, str], ...]:
    if isinstance(spec.get("enum"), list):
        given = spec.get("enumNames")  # the older titled-enum form: names beside the values
        names: list[Any] = given if isinstance(given, list) else []
        return tuple(
            (value, _text(names[i]) if i < len(names) and _text(names[i]) else str(value))
            for i, value in enumerate(spec["enum"])
        )
    if isinstance(spec.get("oneOf"), list):
        return tuple(
            (option["const"], _text(option.get("title")) or str(option["const"]))
            for option in spec["oneOf"]
            if isinstance(option, dict) and "const" in option
        )
    return ()


def fields_of(schema: Any) -> list[Field] | None:
    """The form's fields in order, those this client cannot ask left out when optional; None when it cannot be
    answered (not an object of properties, or a required field of a kind it cannot ask)."""
    if not isinstance(schema, dict) or not isinstance(schema.get("properties"), dict):
        return None
    listed = schema.get("required")
    required: list[Any] = listed if isinstance(listed, list) else []
    fields: list[Field] = []
    for name, given in schema["properties"].items():
        spec: dict[str, Any] = given if isinstance(given, dict) else {}
        kind, needed = spec.get("type"), name in required
        if kind not in KINDS:
            if needed:
                return None
            continue
        label = _text(spec.get("title")) or name
        fields.append(Field(name, label, _text(spec.get("description")), str(kind), _choices(spec), needed))
    return fields


def hint(field: Field) -> str:
    """How to answer, in words: the choices by number, y/n, or the kind of number."""
    if field.choices:
        what = ", ".join(f"{n}. {name}" for n, (_, name) in enumerate(field.choices, 1))
    elif field.kind == "boolean":
        what = "y/n"
    elif field.kind in ("number", "integer"):
        what = "a whole number" if field.kind == "integer" else "a number"
    else:
        what = ""
    skip = "" if field.required else "Enter to skip"
    return "; ".join(part for part in (what, skip) if part)


def parse(field: Field, line: str) -> tuple[bool, Any]:
    """(True, value) for an acceptable answer, None as the value of a skipped optional field; (False, None) for an
    answer to ask again."""
    text = line.strip()
    if not text:
        return (not field.required, None)
    if field.choices:
        if text.isdecimal() and 1 <= int(text) <= len(field.choices):  # not isdigit: int("²") raises
            return True, field.choices[int(text) - 1][0]
        for value, name in field.choices:
            if text in (str(value), name):
                return True, value
        return False, None
    if field.kind == "boolean":
        lowered = text.lower()
        return (True, True) if lowered in YES else (True, False) if lowered in NO else (False, None)
    if field.kind == "integer":
        try:
            return True, int(text)
        except ValueError:
            return False, None
    if field.kind == "number":
        try:
            number = float(text)
        except ValueError:
            return False, None
        if not math.isfinite(number):
            return False, None  # `nan`, `inf`, `1e400`: JSON has no such number (it would be sent as null)
        return True, int(number) if number.is_integer() and "." not in text else number
    return True, line.rstrip("\n")
