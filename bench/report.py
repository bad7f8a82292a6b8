"""The one shape every benchmark reports in, so run_all can print a single pass/fail table for all of them."""

from __future__ import annotations

import operator
from collections.abc import Callable, Sequence
from dataclasses import dataclass

__all__ = ["Figure", "format_table", "versioned"]

_COMPARE: dict[str, Callable[[float, float], bool]] = {"<=": operator.le, ">=": operator.ge}


@dataclass(frozen=True, slots=True)
class Figure:
    """One measured number; with a target (`"<=" 250`) it passes or fails, without one it is informational."""

    name: str
    value: float
    unit: str
    op: str | None = None
    target: float | None = None

    @property
    def passed(self) -> bool | None:
        if self.op is None or self.target is None:
            return None
        return _COMPARE[self.op](self.value, self.target)

    def value_text(self) -> str:
        return f"{_number(self.value)} {self.unit}"

    def target_text(self) -> str:
        if self.op is None or self.target is None:
            return "-"
        return f"{self.op} {_number(self.target)} {self.unit}"

    def verdict(self) -> str:
        return {True: "PASS", False: "FAIL", None: "info"}[self.passed]


def versioned(name: str, protocol: int) -> str:
    """A figure's name for a protocol version: v1's as it always was (results stay comparable), v2's prefixed."""
    return name if protocol == 1 else f"v{protocol} {name}"


def _number(value: float) -> str:
    if abs(value) >= 1000:
        return f"{value:,.0f}"
    if abs(value) >= 100:
        return f"{value:.0f}"
    if abs(value) >= 10:
        return f"{value:.1f}"
    return f"{value:.2f}"


def format_table(figures: Sequence[Figure]) -> str:
    rows = [("figure", "value", "target", "result")]
    rows += [(f.name, f.value_text(), f.target_text(), f.verdict()) for f in figures]
    widths = [max(len(row[i]) for row in rows) for i in range(4)]
    lines = []
    for index, row in enumerate(rows):
        lines.append(
            "  ".join(
                cell.ljust(width) if i != 1 else cell.rjust(width)
                for i, (cell, width) in enumerate(zip(row, widths, strict=True))
            ).rstrip()
        )
        if index == 0:
            lines.append("  ".join("-" * width for width in widths))
    return "\n".join(lines)
