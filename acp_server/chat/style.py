"""How things look: ANSI colours (or none), unified diffs (computed, or a v2 agent's git patch), plan checklists and
tool-call status lines.

Pure functions from protocol values to text, so `render` decides what to show and when, and this module only how.
Colour is an on/off choice made once (a terminal, and NO_COLOR unset); without it the text says the same in words.
"""

from __future__ import annotations

import difflib
from typing import Any

__all__ = ["Style"]

MAX_DIFF_LINES = 200
MAX_OUTPUT_LINES = 12

_CODES = {"dim": "2", "bold": "1", "red": "31", "green": "32", "yellow": "33", "blue": "34", "cyan": "36"}
_STATUS = {
    "pending": ("○", "yellow"),
    "in_progress": ("◐", "yellow"),
    "completed": ("✓", "green"),
    "failed": ("✗", "red"),
    "cancelled": ("✗", "yellow"),  # v2 only: v1 reports a call stopped by a cancel as failed
    "paused": ("◐", "yellow"),  # v2 only: started, waiting to be resumed
}
_GIT_HEADERS = ("diff --git ", "index ", "new file mode", "deleted file mode", "old mode", "new mode", "similarity")
_PLAN_MARKS = {"completed": "[x]", "in_progress": "[>]", "pending": "[ ]"}


class Style:
    def __init__(self, colour: bool) -> None:
        self.colour = colour

    def paint(self, text: str, *styles: str) -> str:
        if not self.colour or not text:
            return text
        codes = ";".join(_CODES[s] for s in styles)
        return f"\x1b[{codes}m{text}\x1b[0m"

    def tool_line(self, title: str, kind: str, status: str) -> str:
        mark, colour = _STATUS.get(status, ("•", "blue"))
        words = status.replace("_", " ")
        label = f" ({kind})" if kind and kind != "other" else ""
        return f"{self.paint(mark, colour)} {self.paint(title, 'bold')}{self.paint(label, 'dim')} {words}\n"

    def diff(self, path: str, old_text: str | None, new_text: str) -> str:
        old = [] if old_text is None else old_text.splitlines(keepends=True)
        new = new_text.splitlines(keepends=True)
        lines = list(
            difflib.unified_diff(old, new, "/dev/null" if old_text is None else path, path, n=3, lineterm="\n")
        )
        if not lines:
            return self.paint(f"    (no change to {path})", "dim") + "\n"
        return self._coloured_diff(lines)

    def patch(self, text: str) -> str:
        """A unified diff the agent wrote (ACP v2's `Diff.patch`, git format), drawn like one computed here: the git
        header lines go, since the `---` / `+++` lines name the same files."""
        lines = [line for line in text.splitlines(keepends=True) if not line.startswith(_GIT_HEADERS)]
        if not lines:
            return ""
        return self._coloured_diff(lines)

    def _coloured_diff(self, lines: list[str]) -> str:
        shown = lines[:MAX_DIFF_LINES]
        out: list[str] = []
        for line in shown:
            text = line.rstrip("\n")
            if line.startswith(("---", "+++")):
                out.append(self.paint(text, "bold"))
            elif line.startswith("@@"):
                out.append(self.paint(text, "cyan"))
            elif line.startswith("+"):
                out.append(self.paint(text, "green"))
            elif line.startswith("-"):
                out.append(self.paint(text, "red"))
            else:
                out.append(text)
        if len(lines) > len(shown):
            out.append(self.paint(f"… {len(lines) - len(shown)} more diff lines", "dim"))
        return "".join(f"    {line}\n" for line in out)

    def output(self, text: str) -> str:
        """A tool's text result, indented and cut to its first lines."""
        lines = text.rstrip("\n").splitlines() or [""]
        shown = lines[:MAX_OUTPUT_LINES]
        if len(lines) > len(shown):
            shown.append(f"… {len(lines) - len(shown)} more lines")
        return "".join(self.paint(f"    {line}", "dim") + "\n" for line in shown)

    def plan(self, entries: list[Any]) -> str:
        out = [self.paint("Plan:", "bold") + "\n"]
        for entry in entries:
            if not isinstance(entry, dict):
                continue
            status = str(entry.get("status", "pending"))
            mark = _PLAN_MARKS.get(status, "[?]")
            text = f"  {mark} {entry.get('content', '')}"
            out.append((self.paint(text, "dim") if status == "completed" else text) + "\n")
        return "".join(out)
