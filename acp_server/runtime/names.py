"""File names as text: a name that is not UTF-8 shown reversibly as valid text, and read back.

File names are bytes on POSIX. Python hands names that are not UTF-8 to us with surrogate escapes, which JSON cannot
carry, so `wire` shows each such byte as `\\xNN` (and a backslash that would read as one as `\\x5c`), and `unwire`
turns a path the model sends back into the same name: the model can open a file it was shown. Its own module: both
the confinement check (`paths`) and the opener (`beneath`) use it.
"""

from __future__ import annotations

import re

__all__ = ["unwire", "wire"]

# A backslash the reader would take for the start of an escape, and the escapes `wire` writes.
_AMBIGUOUS = re.compile(r"\\(?=x[0-9a-fA-F]{2})|[\udc80-\udcff]")
_ESCAPE = re.compile(r"\\x([0-9a-fA-F]{2})")


def wire(name: str) -> str:
    """`name` as valid UTF-8 text: each byte that was not UTF-8 (a surrogate escape) as `\\xNN`, reversibly."""
    return _AMBIGUOUS.sub(lambda m: "\\x5c" if m.group() == "\\" else f"\\x{ord(m.group()) - 0xDC00:02x}", name)


def unwire(text: str) -> str:
    """The name `wire` showed as `text`: `\\xNN` back to the byte it stands for (`\\x5c` a backslash, `\\x80` to
    `\\xff` a byte that is not UTF-8); any other backslash is kept as typed."""

    def byte(match: re.Match[str]) -> str:
        value = int(match.group(1), 16)
        if value == 0x5C:
            return "\\"
        return chr(0xDC00 + value) if value >= 0x80 else match.group()

    return _ESCAPE.sub(byte, text) if "\\" in text else text
