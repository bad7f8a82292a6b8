"""`acp-server sessions list|show|delete|prune`: the session store for people, reading the very store the server
writes (the same `--state-dir` / `ACP_SERVER_STATE_DIR` / `state_dir`, or `--store-url` / `ACP_SERVER_STORE_URL` /
`store_url` for PostgreSQL, and retention settings, merged the same way).

Each action opens the store as any server process would (a lease of its own, so a turn left running by a process
that is gone is marked interrupted), never deletes what a live editor has open unless told to (`delete --force`), and
writes its report to stderr, like everything acp-server says to a person. Exit status: 0 done, 1 something was not
(an unknown session, one in use, a store that cannot be used), 2 a usage error.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio

from acp_server.errors import StoreUnavailable
from acp_server.settings.command_line import load
from acp_server.settings.config import Config
from acp_server.store import (
    EMPTY_SESSION_GRACE_S,
    STORE_FILENAME,
    AgentText,
    PlanSet,
    Retention,
    SessionStore,
    ToolCallChanged,
    ToolCallOpened,
    UserChunk,
    default_state_dir,
)

if TYPE_CHECKING:
    from acp_server.store import LoadedSession, SessionStore, TurnRecord

__all__ = ["ACTIONS", "main"]

ACTIONS = ("list", "show", "delete", "prune")
_USAGE = (
    "usage: acp-server sessions {list,show,delete,prune} [...]\n"
    "  list [--cwd DIR] [--limit N]   the most recently updated sessions (open: an editor has it open now)\n"
    "  show SESSION_ID                a session's settings and conversation\n"
    "  delete SESSION_ID... [--force] remove sessions (--force: even one an editor has open)\n"
    "  prune                          apply the retention settings now (--keep-sessions-days, --keep-sessions)\n"
    "Each also takes the server's flags (--state-dir or --store-url, --keep-sessions-days, ...):"
    " acp-server sessions ACTION --help\n"
)


def _say(text: str = "") -> None:
    sys.stderr.write(text + "\n")


def _extend(action: str) -> Callable[[argparse.ArgumentParser], None]:
    def extend(parser: argparse.ArgumentParser) -> None:
        if action == "list":
            parser.add_argument("--cwd", metavar="DIR", help="only the sessions of this working directory")
            parser.add_argument("--limit", type=int, default=50, metavar="N", help="at most N sessions (default 50)")
        elif action == "show":
            parser.add_argument("session_id", metavar="SESSION_ID")
        elif action == "delete":
            parser.add_argument("session_ids", nargs="+", metavar="SESSION_ID")
            parser.add_argument("--force", action="store_true", help="also a session an editor has open now")

    return extend


def store_path(config: Config) -> Path:
    return (Path(config.state_dir) if config.state_dir else default_state_dir()) / STORE_FILENAME


def main(argv: Sequence[str]) -> int:
    args = list(argv)
    if not args or args[0] not in ACTIONS:
        sys.stderr.write(_USAGE)
        return 0 if args[:1] in (["-h"], ["--help"]) else 2
    action = args[0]
    loaded = load(args[1:], prog=f"acp-server sessions {action}", extend=_extend(action))
    config, options = loaded.config, loaded.args
    if action == "list" and options.cwd is not None:
        options.cwd = str(Path(options.cwd).resolve())
    if not config.store:
        _say("sessions are not stored (--no-store, ACP_SERVER_NO_STORE or store = false): there is nothing to see")
        return 1
    url = config.store_url
    if url is None:
        path = store_path(config)
        if not path.exists():
            _say(f"no session store at {path} yet: no session has been stored")
            return 0 if action in ("list", "prune") else 1
        try:
            opened: SessionStore | None = SessionStore.open(path)
        except StoreUnavailable as exc:
            _say(str(exc))
            return 1
    else:
        opened = None  # PostgreSQL (--store-url): opened on the event loop, in `run`

    async def run() -> int:
        store = opened if opened is not None else await SessionStore.connect(url or "")
        try:
            return await _ACTIONS[action](store, config, options)
        finally:
            await store.aclose()

    try:
        return anyio.run(run)
    except StoreUnavailable as exc:
        _say(str(exc))
        return 1


async def _list(store: SessionStore, config: Config, options: argparse.Namespace) -> int:
    cwd = options.cwd
    sessions = await store.overview(cwd, max(1, options.limit))
    if not sessions:
        _say(f"no sessions{'' if cwd is None else f' in {cwd}'} ({store.where})")
        return 0
    _say(f"{'UPDATED (UTC)':<16}  {'TURNS':>5}  {'SESSION':<37}  TITLE  (CWD)")
    for item in sessions:
        updated = item.updated_at[:16].replace("T", " ")
        title = _one_line(item.title) if item.title else "(untitled)"
        held = "  [open]" if item.held else ""
        _say(f"{updated:<16}  {item.turns:>5}  {item.session_id:<37}  {title}  ({item.cwd}){held}")
    _say(f"{len(sessions)} session(s) shown, most recent first, from {store.where}")
    return 0


async def _show(store: SessionStore, config: Config, options: argparse.Namespace) -> int:
    loaded = await store.load(options.session_id)
    if loaded is None:
        _say(f"unknown session: {options.session_id} ({store.where})")
        return 1
    for line in render(loaded):
        _say(line)
    return 0


async def _delete(store: SessionStore, config: Config, options: argparse.Namespace) -> int:
    status = 0
    for session_id in options.session_ids:
        outcome = await store.delete_unless_held(session_id, force=options.force)  # checked and deleted at once
        if outcome == "unknown":
            _say(f"unknown session: {session_id}")
            status = 1
            continue
        if outcome == "held":
            _say(f"not deleted: {session_id} is open in a running acp-server (an editor); --force deletes it anyway")
            status = 1
            continue
        _say(f"deleted {session_id}")
    return status


async def _prune(store: SessionStore, config: Config, options: argparse.Namespace) -> int:
    retention = Retention(max_age_days=config.keep_sessions_days, max_count=config.keep_sessions)
    pruned = await store.prune(retention)
    age = f"not updated for {retention.max_age_days:g} days" if retention.max_age_days else "(no age limit)"
    count = f"past the newest {retention.max_count}" if retention.max_count else "(no count limit)"
    _say(f"removed {len(pruned.empty)} session(s) that never got a prompt (after {EMPTY_SESSION_GRACE_S // 60} min)")
    _say(f"removed {len(pruned.expired)} session(s) {age}")
    _say(f"removed {len(pruned.over_count)} session(s) {count}")
    for session_id in (*pruned.empty, *pruned.expired, *pruned.over_count):
        _say(f"  {session_id}")
    return 0


_ACTIONS: dict[str, Callable[[SessionStore, Config, argparse.Namespace], Awaitable[int]]] = {
    "list": _list,
    "show": _show,
    "delete": _delete,
    "prune": _prune,
}


def _one_line(text: str) -> str:
    return " ".join(text.split())


def render(loaded: LoadedSession) -> list[str]:
    """A stored session as lines for a person: its settings, then each turn (the prompt, replies, tool calls,
    plans) with how it ended."""
    record = loaded.session
    lines = [
        f"session {record.session_id}",
        f"  title:   {record.title or '(untitled)'}",
        f"  cwd:     {record.cwd}",
        f"  created: {record.created_at}   updated: {record.updated_at}",
        f"  mode:    {record.mode}   model: {record.config.get('model', '?')}",
    ]
    if record.forked_from:
        lines.append(f"  forked from {record.forked_from}")
    for number, turn in enumerate(loaded.turns, 1):
        ending = turn.status + (f", {turn.stop_reason}" if turn.stop_reason else "")
        lines += ["", f"turn {number} ({ending}) {turn.started_at}", *_turn_lines(turn)]
        if turn.error:
            lines.append(f"  error: {turn.error}")
    return lines


def _turn_lines(turn: TurnRecord) -> list[str]:
    lines: list[str] = []
    reply: list[str] = []
    titles: dict[str, str] = {}

    def flush_reply() -> None:
        text = "".join(reply).strip()
        lines.extend(f"  {line}" for line in text.splitlines())
        reply.clear()

    for entry in turn.entries:
        if isinstance(entry, UserChunk):
            lines.append(f"  > {_one_line(_block_text(entry.content))}")
        elif isinstance(entry, AgentText):
            reply.append(entry.text)
        elif isinstance(entry, ToolCallOpened):
            flush_reply()
            titles[entry.call_id] = entry.title or entry.call_id
            lines.append(f"  * {titles[entry.call_id]}")
        elif isinstance(entry, ToolCallChanged) and entry.status in ("completed", "failed"):
            flush_reply()
            lines.append(f"  * {titles.get(entry.call_id, entry.call_id)}: {entry.status}")
        elif isinstance(entry, PlanSet):
            flush_reply()
            marks = {"completed": "x", "in_progress": "~"}
            lines += [f"  [{marks.get(e.status, ' ')}] {e.content}" for e in entry.entries]
    flush_reply()
    return lines


def _block_text(block: dict[str, Any]) -> str:
    if block.get("type") == "text":
        return str(block.get("text", ""))
    if block.get("type") == "resource_link":
        return f"[{block.get('name') or block.get('uri')}]"
    if block.get("type") == "resource":
        return f"[{(block.get('resource') or {}).get('uri', 'resource')}]"
    return f"[{block.get('type', 'content')}]"
