"""Validates every message the server writes against the official ACP JSON schema, per method (`x-method`).

A connection starts on the v1 schema and moves to the v2 draft's (fixtures/acp-schema/v2/schema.json) once the
server answers `initialize` with `protocolVersion: 2`: each connection speaks exactly one version.

A line holding a JSON array is a batch response (JSON-RPC 2.0 §6: the server answers a client's batch with one):
`server_wrote_any` checks each of its elements as the response it is, and `client_sent` takes a batch the client
wrote entry by entry. `server_wrote` takes single messages only, for the clients that never send a batch.

The schema's top-level `anyOf` accepts nearly anything (its extension variants are open), so each message is
checked against the `$defs` type whose `x-method` names its method: requests and notifications by their own
method, responses by the method of the client request they answer.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

import orjson
from jsonschema import Draft202012Validator
from referencing import Registry, Resource

SCHEMA_PATH = Path(__file__).resolve().parents[2] / "fixtures" / "acp-schema" / "schema.json"
SCHEMA_V2_PATH = Path(__file__).resolve().parents[2] / "fixtures" / "acp-schema" / "v2" / "schema.json"
# The unstable schemas of the same SDK: only for the unstable methods' responses, which the stable ones lack.
UNSTABLE_PATHS = {
    1: SCHEMA_PATH.with_name("schema.unstable.json"),
    2: SCHEMA_V2_PATH.with_name("schema.unstable.json"),
}
# The unstable methods whose responses are validated against the unstable schema of the connection's version.
UNSTABLE_METHODS = frozenset(
    {
        "session/set_title",
        "session/status",
        "session/archive",
        "session/unarchive",
        "session/fork",
        "auth/status",
        "providers/list",
        "providers/set",
        "providers/disable",
    }
)
# The unstable notifications the server sends, validated against the unstable schema of the connection's version.
UNSTABLE_NOTIFICATIONS = frozenset({"auth/status_update"})
# The unstable requests the server sends the client, by method: their params' definition in the unstable schema of
# the connection's version (`mcp/message` is also a notification, the other way: its name alone is ambiguous).
UNSTABLE_REQUESTS = {"mcp/message": "MessageMcpRequest"}


@cache
def _schema(version: int = 1, unstable: bool = False) -> dict[str, Any]:
    path = UNSTABLE_PATHS[version] if unstable else SCHEMA_V2_PATH if version == 2 else SCHEMA_PATH
    loaded: dict[str, Any] = orjson.loads(path.read_bytes())
    return loaded


@cache
def _registry(version: int = 1, unstable: bool = False) -> Registry:
    registry: Registry = Registry().with_resource("urn:acp", Resource.from_contents(_schema(version, unstable)))
    return registry


@cache
def _validator(definition: str, version: int = 1, unstable: bool = False) -> Draft202012Validator:
    return Draft202012Validator({"$ref": f"urn:acp#/$defs/{definition}"}, registry=_registry(version, unstable))


def validate_v2(definition: str, instance: Any) -> list[str]:
    """The v2 schema's complaints about `instance` as `definition` (for tests of single v2 shapes)."""
    return [error.message for error in _validator(definition, 2).iter_errors(instance)]


@cache
def _definitions_by_method(version: int = 1, unstable: bool = False) -> dict[tuple[str, str], str]:
    """(method, 'request'|'response') -> $defs name."""
    table: dict[tuple[str, str], str] = {}
    for name, definition in _schema(version, unstable)["$defs"].items():
        method = definition.get("x-method")
        if method:
            table[(method, "response" if name.endswith("Response") else "request")] = name
    return table


AGENT_TO_CLIENT = {
    "session/update",
    "session/request_permission",
    "fs/read_text_file",
    "fs/write_text_file",
    "elicitation/create",
} | {f"terminal/{verb}" for verb in ("create", "output", "release", "wait_for_exit", "kill")}
# v2 removed the client's file system and terminals (ACP-V2.md §21.1).
AGENT_TO_CLIENT_V2 = {"session/update", "session/request_permission", "elicitation/create", "elicitation/complete"}


@dataclass
class WireValidator:
    """Feed it, in order, what the client sent and what the server wrote; it collects violations."""

    client_requests: dict[Any, str] = field(default_factory=dict)
    violations: list[str] = field(default_factory=list)
    # Off only for benchmarks, where validating every line would make the client the bottleneck.
    schema: bool = True
    # The protocol version the server's `initialize` answer chose (1 until it says otherwise).
    version: int = 1

    def client_sent(self, message: Any) -> None:
        for entry in message if isinstance(message, list) else [message]:
            if isinstance(entry, dict) and "method" in entry and "id" in entry:
                self.client_requests[_key(entry["id"])] = entry["method"]

    def server_wrote(self, line: bytes) -> dict[str, Any] | None:
        """A line the server wrote to a client that sends no batch: one JSON-RPC 2.0 object."""
        message = self.server_wrote_any(line)
        if isinstance(message, list):
            self._fail(line, "a batch response to a client that sent no batch")
            return None
        return message

    def server_wrote_any(self, line: bytes) -> dict[str, Any] | list[dict[str, Any]] | None:
        """A line the server wrote: one JSON-RPC 2.0 object, or a batch response (a non-empty array of response
        objects, each checked as the response it is); None, with a violation, for anything else."""
        if b"\n" in line.rstrip(b"\n"):
            self._fail(line, "more than one line")
        try:
            message = orjson.loads(line)
        except orjson.JSONDecodeError:
            self._fail(line, "not JSON")
            return None
        if isinstance(message, list):
            return self._batch(message, line)
        if not isinstance(message, dict) or message.get("jsonrpc") != "2.0":
            self._fail(line, "not a JSON-RPC 2.0 object")
            return None
        if self.schema:
            self._check(message, line)
        return message

    def _batch(self, messages: list[Any], line: bytes) -> list[dict[str, Any]] | None:
        """A batch response: never empty (a batch with nothing to answer gets nothing, JSON-RPC 2.0 §6), and only
        responses, each valid as one (we never send a batch of our own requests or notifications)."""
        if not messages:
            self._fail(line, "an empty batch response")
            return None
        for message in messages:
            if not isinstance(message, dict) or message.get("jsonrpc") != "2.0":
                self._fail(line, "a batch response element that is not a JSON-RPC 2.0 object")
                return None
            if "method" in message:
                self._fail(line, "a request or notification inside a batch response")
                return None
        if self.schema:
            for message in messages:
                self._check(message, line)
        return messages

    def _check(self, message: dict[str, Any], line: bytes) -> None:
        if "method" in message:
            method = message["method"]
            if not isinstance(method, str):
                self._fail(line, "non-string method")
            elif method.startswith("_"):
                pass  # an extension: free-form by the spec
            elif method in UNSTABLE_NOTIFICATIONS and "id" not in message:
                notification = _definitions_by_method(self.version, unstable=True)[(method, "request")]
                self._validate(notification, message.get("params"), line, unstable=True)
            elif method in UNSTABLE_REQUESTS and "id" in message:
                self._validate(UNSTABLE_REQUESTS[method], message.get("params"), line, unstable=True)
            elif method == "$/cancel_request":
                self._validate("CancelRequestNotification", message.get("params"), line)
            elif method in (AGENT_TO_CLIENT_V2 if self.version == 2 else AGENT_TO_CLIENT):
                definition = _definitions_by_method(self.version).get((method, "request"))
                assert definition is not None
                self._validate(definition, message.get("params"), line)
            else:
                self._fail(line, f"the server sent a method the client does not implement: {method}")
            return
        if ("result" in message) == ("error" in message):
            self._fail(line, "a response needs exactly one of result and error")
            return
        if "error" in message:
            self._validate("Error", message["error"], line)
            text = message["error"].get("message", "")
            if not text or "\n" in text or "Traceback" in text:
                self._fail(line, "error message must be one non-empty line without internals")
            return
        method = self.client_requests.get(_key(message.get("id")))
        if method == "initialize" and isinstance(message["result"], dict):
            self.version = 2 if message["result"].get("protocolVersion") == 2 else 1
        if method is None:
            self._fail(line, "a result for a request the client never sent")
        elif method in UNSTABLE_METHODS and (method, "response") not in _definitions_by_method(self.version):
            definition = _definitions_by_method(self.version, unstable=True)[(method, "response")]
            self._validate(definition, message["result"], line, unstable=True)
        elif not method.startswith("_"):
            definition = _definitions_by_method(self.version).get((method, "response"))
            if definition is None:
                self._fail(line, f"a result for {method}, which has no response type")
            else:
                self._validate(definition, message["result"], line)

    def _validate(self, definition: str, instance: Any, line: bytes, *, unstable: bool = False) -> None:
        for error in _validator(definition, self.version, unstable).iter_errors(instance):
            self._fail(line, f"{definition}: {error.message} at {list(error.absolute_path)}")

    def _fail(self, line: bytes, why: str) -> None:
        self.violations.append(f"{why}: {line[:300]!r}")


def _key(request_id: Any) -> Any:
    # JSON-RPC ids 1 and "1" are different requests; keep their types apart. Invalid ids (objects) stay hashable.
    if isinstance(request_id, (dict, list)):
        try:
            return (type(request_id).__name__, orjson.dumps(request_id, option=orjson.OPT_SORT_KEYS))
        except TypeError:  # nested deeper than orjson writes (the deep-JSON tests): never paired anyway
            return (type(request_id).__name__, id(request_id))
    return (type(request_id).__name__, request_id)
