"""The system prompt: who the model is, where it works, what it can use, and the project's own instructions.

Built for every turn (it is cheap), so a changed AGENTS.md is picked up on the next prompt. Instruction files are
project files the user wrote for agents; they are included verbatim, capped, and labelled with their path.
"""

from __future__ import annotations

import platform
from collections.abc import Sequence
from datetime import date
from pathlib import Path

import anyio

from acp_server.runtime.model import ToolSpec

__all__ = ["INSTRUCTION_FILES", "build_system_prompt", "read_instructions"]

INSTRUCTION_FILES = ("AGENTS.md", "CLAUDE.md")
MAX_INSTRUCTION_CHARS = 32_000


async def read_instructions(cwd: Path) -> list[tuple[Path, str]]:
    found: list[tuple[Path, str]] = []
    for name in INSTRUCTION_FILES:
        path = cwd / name
        try:
            text = await anyio.Path(path).read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
        if len(text) > MAX_INSTRUCTION_CHARS:
            text = text[:MAX_INSTRUCTION_CHARS] + f"\n[{path.name} truncated at {MAX_INSTRUCTION_CHARS} characters]"
        found.append((path, text))
    return found


def build_system_prompt(
    *,
    cwd: Path,
    roots: Sequence[Path],
    tools: Sequence[ToolSpec],
    instructions: Sequence[tuple[Path, str]],
    today: date,
) -> str:
    lines = [
        "You are acp-server, a coding agent working inside the user's editor through the Agent Client Protocol.",
        "Be direct and precise. Read before you change; make the smallest change that does the job; say what you did.",
        "",
        f"Operating system: {platform.system()} {platform.release()} ({platform.machine()})",
        f"Today's date: {today.isoformat()}",
        f"Working directory: {cwd}",
    ]
    extra = [str(root) for root in roots if root != cwd]
    if extra:
        lines.append(f"Other directories you may use: {', '.join(extra)}")
    lines.append("Relative paths are relative to the working directory; you cannot reach outside these directories.")
    if tools:
        lines += ["", "Tools:"] + [f"- {tool.name}: {tool.description}" for tool in tools]
        lines.append("The user may be asked to approve edits and commands; a refusal is final for that call.")
    for path, text in instructions:
        lines += ["", f"Project instructions from {path}:", text.strip()]
    return "\n".join(lines)
