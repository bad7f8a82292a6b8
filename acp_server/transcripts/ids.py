"""Generated ids in a conversation: where they sit in a message, and the placeholders they are compared as.

Two runs of the same conversation differ in every id the agent makes up (session ids, tool call ids, message ids,
the ids of its own requests to the client); the ids the client chose are the same. So each generated id becomes
`$<kind><n>`, numbered in order of first appearance, and the client's own ids stay literal. The same functions turn a
transcript's placeholders (or a recording's old ids) back into the ids a new run generated.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import orjson

__all__ = ["ID_KEYS", "IdMap", "Namer", "key", "map_ids", "render"]

# Wherever they occur. A v2 agent-owned terminal's id is generated too; a v1 editor's terminal id, first seen in the
# editor's own answer, stays literal.
ID_KEYS = {"sessionId": "session", "toolCallId": "call", "messageId": "msg", "terminalId": "terminal"}

IdMap = Callable[[str, Any], Any]  # (kind, value) -> replacement


def key(value: Any) -> bytes:
    """Identity of a JSON value, keeping types apart (the ids 1 and "1" differ)."""
    return orjson.dumps(value, option=orjson.OPT_SORT_KEYS)


def render(value: Any) -> str:
    return orjson.dumps(value, option=orjson.OPT_SORT_KEYS).decode()


@dataclass
class Namer:
    """Gives each id the agent generated a placeholder, `$<kind><n>`, in order of first appearance.

    An id first seen in an "in" line was chosen by the client (an unknown session, a tool call id in a script's
    arguments): it stays literal wherever it appears, so the agent must echo it exactly.
    """

    names: dict[tuple[str, bytes], str] = field(default_factory=dict)
    values: dict[str, Any] = field(default_factory=dict)  # placeholder -> the value it stands for
    ordinals: dict[str, int] = field(default_factory=dict)
    client_chosen: set[tuple[str, bytes]] = field(default_factory=set)
    counts: dict[str, int] = field(default_factory=dict)

    def output(self, kind: str, value: Any) -> Any:
        """An id in an agent line: its placeholder (a new one at its first appearance), or itself if client-chosen."""
        ident = (kind, key(value))
        if ident in self.client_chosen:
            return value
        name = self.names.get(ident)
        if name is None:
            self.counts[kind] = self.counts.get(kind, 0) + 1
            name = f"${kind}{self.counts[kind]}"
            self.names[ident] = name
            self.values[name] = value
            self.ordinals[name] = self.counts[kind]
        return name

    def input(self, kind: str, value: Any) -> Any:
        """An id in a client line: the placeholder of a generated id seen before, else the id itself (client-chosen
        from here on)."""
        ident = (kind, key(value))
        name = self.names.get(ident)
        if name is None:
            self.client_chosen.add(ident)
            return value
        return name

    def known(self, kind: str, value: Any) -> str | None:
        return self.names.get((kind, key(value)))


def map_ids(message: Any, direction: str, replace: IdMap) -> Any:
    """A copy of `message` with every generated-id position passed through `replace(kind, value)`."""
    if not isinstance(message, dict):
        return message
    mapped = _map_tree(message, replace)
    request_id = message.get("id")
    if request_id is not None:
        is_agent_request = direction == "out" and "method" in message
        is_answer_to_agent = (
            direction == "in" and "method" not in message and ("result" in message or "error" in message)
        )
        if is_agent_request or is_answer_to_agent:
            mapped["id"] = replace("req", request_id)
    params = mapped.get("params")
    retracted = params.get("requestId") if isinstance(params, dict) else None
    if direction == "out" and message.get("method") == "$/cancel_request" and retracted is not None:
        params["requestId"] = replace("req", retracted)
    return mapped


def _map_tree(value: Any, replace: IdMap) -> Any:
    if isinstance(value, dict):
        result: dict[str, Any] = {}
        for name, item in value.items():
            kind = ID_KEYS.get(name)
            result[name] = (
                replace(kind, item) if kind is not None and isinstance(item, str) else _map_tree(item, replace)
            )
        return result
    if isinstance(value, list):
        return [_map_tree(item, replace) for item in value]
    return value
