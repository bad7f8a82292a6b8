"""The editor as the tools' outside world: its file buffers, its terminals, its user's permission and answers.

Everything here is a request to the client made on behalf of one turn, so it is cancelled with the turn (the
request is retracted with `$/cancel_request` and a late answer ignored), and it is fenced: nothing is asked after the
turn's response. Terminals are the exception that proves the rule: a terminal the turn created is always killed and
released, before the turn's response, even when the turn is cancelled (ACP: the agent MUST release every terminal).

Also here: the permission gate, and `EditorQuestions`, the `ask_user` tool's form (`elicitation/create`), retracted
by a cancel exactly as a permission request is (docs/interrupts.md I8). Permission modes are per session; an
"always" answer is remembered for the session, per tool for edits and per command prefix (the executable and its
first argument) for commands.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread

from acp_server.agent.sessions.runs import Session
from acp_server.errors import ToolError
from acp_server.jsonrpc.connection import ClientRequestError
from acp_server.mcp_bridge import MCP_TOOL_PREFIX
from acp_server.protocol.schema import PermissionOptionKind, PermissionOutcome
from acp_server.runtime import beneath
from acp_server.runtime.paths import wire
from acp_server.runtime.ports import Answer, CommandResult, Decision, FileSystem, PermissionRequest, Question
from acp_server.settings.choices import PermissionMode

__all__ = [
    "ClientRequest",
    "EditorFileSystem",
    "EditorQuestions",
    "EditorTerminalRunner",
    "PermissionGate",
    "PermissionQuestion",
    "SplitFileSystem",
]

ClientRequest = Callable[[str, dict[str, Any]], Awaitable[Any]]

# Bytes of command output an editor terminal keeps for us (it truncates from the start beyond this).
TERMINAL_OUTPUT_LIMIT = 256 * 1024
# How long an answer to terminal/kill is awaited when no cleanup deadline is running (a command that timed out).
KILL_ANSWER_WAIT = 5.0


# How a version asks its permission question: the params of `session/request_permission` for the request, the
# options offered and the `_meta` naming the parent's tool call (protocol/v1/permissions.py, v2/permissions.py).
PermissionQuestion = Callable[[Session, PermissionRequest, list[dict[str, Any]], dict[str, Any] | None], dict[str, Any]]


class EditorFileSystem:
    """`fs/read_text_file` and `fs/write_text_file`: the editor's view, unsaved buffers included.

    The editor opens the path itself, so we cannot hand it a descriptor: each path is walked beneath the roots at
    the moment of sending (`beneath.checked_path`), links resolved, and the editor is sent the checked path, which
    holds no symbolic link. A link swapped in between our check and the editor's open is out of our hands (docs/guide.md
    says so). A name that is not UTF-8 cannot be named to the editor in JSON, and the editor can hold no
    buffer for it, so that file is read and written on the local disk, with the same confinement.
    """

    def __init__(self, request: ClientRequest, session_id: str, roots: Sequence[Path], local: FileSystem) -> None:
        self._request = request
        self._session_id = session_id
        self._roots = tuple(roots)
        self._local = local

    async def _checked(self, path: Path) -> Path | None:
        """The path to send, or None when it cannot be named on the wire (the local disk is used instead)."""
        checked = await anyio.to_thread.run_sync(beneath.checked_path, path, self._roots)
        return None if wire(str(checked)) != str(checked) else checked

    async def read_text(self, path: Path, line: int | None = None, limit: int | None = None) -> str:
        checked = await self._checked(path)
        if checked is None:
            return await self._local.read_text(path, line, limit)
        path = checked
        params: dict[str, Any] = {"sessionId": self._session_id, "path": str(path)}
        if line is not None:
            params["line"] = line
        if limit is not None:
            params["limit"] = limit
        try:
            result = await self._request("fs/read_text_file", params)
        except ClientRequestError as exc:
            raise ToolError(f"{path}: the editor could not read it: {exc.message}") from None
        content = result.get("content") if isinstance(result, dict) else None
        if not isinstance(content, str):
            raise ToolError(f"{path}: the editor answered without file content")
        return content

    async def write_text(self, path: Path, content: str) -> None:
        checked = await self._checked(path)
        if checked is None:
            await self._local.write_text(path, content)
            return
        path = checked
        params = {"sessionId": self._session_id, "path": str(path), "content": content}
        try:
            await self._request("fs/write_text_file", params)
        except ClientRequestError as exc:
            raise ToolError(f"{path}: the editor could not write it: {exc.message}") from None


class SplitFileSystem:
    """Reads and writes are advertised separately by ACP clients; each goes where it can."""

    def __init__(self, reader: Any, writer: Any) -> None:
        self._reader = reader
        self._writer = writer

    async def read_text(self, path: Path, line: int | None = None, limit: int | None = None) -> str:
        text: str = await self._reader.read_text(path, line, limit)
        return text

    async def write_text(self, path: Path, content: str) -> None:
        await self._writer.write_text(path, content)


class EditorTerminalRunner:
    """A command in an editor terminal: create, show it, wait (with the timeout), read the output, release."""

    def __init__(self, request: ClientRequest, session_id: str, cleanup_deadline: Callable[[], float]) -> None:
        self._request = request
        self._session_id = session_id
        self._cleanup_deadline = cleanup_deadline

    async def run(
        self,
        command: str,
        cwd: Path,
        timeout: float | None,
        on_terminal: Callable[[str], Awaitable[None]],
    ) -> CommandResult:
        terminal_id = await self._create(command, cwd)
        ids = {"sessionId": self._session_id, "terminalId": terminal_id}
        released = False
        try:
            await anyio.lowlevel.checkpoint()  # a cancel that arrived during the create takes effect here, id known
            await on_terminal(terminal_id)
            with anyio.move_on_after(float("inf") if timeout is None else timeout) as timer:
                status = await self._request("terminal/wait_for_exit", ids)
            if timer.cancelled_caught:
                # A client that never answers the kill must not hold the turn: the release below kills too.
                with anyio.move_on_after(KILL_ANSWER_WAIT):
                    await self._request("terminal/kill", ids)
                status = {}
            output = await self._request("terminal/output", ids)
            released = True  # before awaiting: a cancel during the release must not send a second one
            await self._request("terminal/release", ids)
        except ClientRequestError as exc:
            raise ToolError(f"the editor's terminal failed: {exc.message}") from None
        finally:
            if not released:
                await self._kill_and_release(ids)
        exit_status = output.get("exitStatus") or status or {}
        return CommandResult(
            output=str(output.get("output", "")),
            exit_code=exit_status.get("exitCode"),
            signal=exit_status.get("signal"),
            truncated=bool(output.get("truncated")),
            timed_out=timer.cancelled_caught,
        )

    async def _create(self, command: str, cwd: Path) -> str:
        params = {
            "sessionId": self._session_id,
            "command": "/bin/sh",
            "args": ["-c", command],
            "cwd": str(cwd),
            "outputByteLimit": TERMINAL_OUTPUT_LIMIT,
        }
        # Shielded: once the editor may have created a terminal we must learn its id to release it. Bounded all the
        # same: the turn's response retracts the request at the cleanup deadline.
        with anyio.CancelScope(shield=True):
            try:
                created = await self._request("terminal/create", params)
            except ClientRequestError as exc:
                raise ToolError(f"the editor could not start a terminal: {exc.message}") from None
        terminal_id = created.get("terminalId") if isinstance(created, dict) else None
        if not isinstance(terminal_id, str):
            raise ToolError("the editor answered terminal/create without a terminalId")
        return terminal_id

    async def _kill_and_release(self, ids: dict[str, Any]) -> None:
        """Cancelled (or failed): kill, then release, exactly once each, even if the kill fails or is never
        answered. The kill may use half of the time left before the deadline; the release is always sent."""
        deadline = min(self._cleanup_deadline(), anyio.current_time() + 2 * KILL_ANSWER_WAIT)
        with anyio.CancelScope(shield=True):
            kill_deadline = anyio.current_time() + (deadline - anyio.current_time()) / 2
            with anyio.move_on_at(kill_deadline), contextlib.suppress(ClientRequestError):
                await self._request("terminal/kill", ids)
            with anyio.move_on_at(deadline), contextlib.suppress(ClientRequestError):
                await self._request("terminal/release", ids)


class PermissionGate:
    """Decides whether a tool may edit or execute: by the session's mode, its remembered answers, or by asking."""

    def __init__(
        self,
        session: Session,
        request: ClientRequest,
        question: PermissionQuestion,
        on_behalf_of: str | None = None,
    ) -> None:
        """`question`: how the connection's version asks (the params of its `session/request_permission`).
        `on_behalf_of` is the `delegate` tool call a subagent's questions belong to (docs/interrupts.md, decision
        7): the question names the child's own tool call, and its `_meta` names the parent's call the client can see."""
        self._session = session
        self._request = request
        self._question = question
        self._meta = {"acpServer": {"parentToolCallId": on_behalf_of}} if on_behalf_of is not None else None

    async def decide(self, request: PermissionRequest) -> Decision:
        session = self._session
        mode = session.mode
        if mode == PermissionMode.BYPASS or (mode == PermissionMode.ACCEPT_EDITS and request.kind == "edit"):
            return Decision(True)
        if mode == PermissionMode.READ_ONLY:
            return Decision(False, f"the session is in read-only mode: {request.tool_name} is not allowed")
        # An MCP tool asks as `execute` but is remembered per tool under its own key: a command line that happens to
        # read like a tool's name must never share its "always" answer.
        is_mcp = request.tool_name.startswith(MCP_TOOL_PREFIX)
        key = f"mcp:{request.tool_name}" if is_mcp else f"{request.kind}:{request.rule}"
        remembered = session.permission_rules.get(key)
        if remembered is not None:
            return Decision(True) if remembered else Decision(False, f"the user always rejects {request.rule!r}")
        # Remembered per tool for edits and MCP tools, and per command prefix for commands; the label says which.
        subject = request.tool_name if request.kind == "edit" or is_mcp else f"`{request.rule}`"
        kind = PermissionOptionKind
        options = [
            {"optionId": kind.ALLOW_ONCE, "name": "Allow", "kind": kind.ALLOW_ONCE},
            {"optionId": kind.ALLOW_ALWAYS, "name": f"Always allow {subject}", "kind": kind.ALLOW_ALWAYS},
            {"optionId": kind.REJECT_ONCE, "name": "Reject", "kind": kind.REJECT_ONCE},
            {"optionId": kind.REJECT_ALWAYS, "name": f"Always reject {subject}", "kind": kind.REJECT_ALWAYS},
        ]
        # In the connection's version's shape, naming the parent's `delegate` call for a subagent's question.
        params = self._question(session, request, options, self._meta)
        try:
            answer = await self._request("session/request_permission", params)
        except ClientRequestError as exc:
            return Decision(False, f"the permission request failed: {exc.message}")
        outcome = answer.get("outcome") if isinstance(answer, dict) else None
        selected = isinstance(outcome, dict) and outcome.get("outcome") == PermissionOutcome.SELECTED
        choice = outcome.get("optionId") if selected and outcome is not None else None
        if choice in (kind.ALLOW_ALWAYS, kind.REJECT_ALWAYS):
            session.permission_rules[key] = choice == kind.ALLOW_ALWAYS
        if choice in (kind.ALLOW_ONCE, kind.ALLOW_ALWAYS):
            return Decision(True)
        if choice is None:
            return Decision(False, "the permission request was cancelled")
        return Decision(False, f"the user rejected {request.tool_name}")


class EditorQuestions:
    """`elicitation/create`, scoped to the session and the `ask_user` tool call: in form mode for a client that
    advertised `elicitation.form`, in URL mode (a link, with an `elicitationId` of its own) for one that advertised
    `elicitation.url`; a question in a mode the client did not advertise is not sent (None: the tool asks in its
    reply). Sent through the turn's fenced request: a cancel retracts it with `$/cancel_request` and a late answer is
    ignored, as for a permission request. A subagent's question names the `delegate` call the client sees
    (`on_behalf_of`), as its permission questions do."""

    def __init__(
        self,
        request: ClientRequest,
        session_id: str,
        on_behalf_of: str | None = None,
        *,
        forms: bool = True,
        links: bool = False,
    ) -> None:
        self._request = request
        self._session_id = session_id
        self._on_behalf_of = on_behalf_of
        self._forms = forms
        self._links = links

    async def ask(self, question: Question) -> Answer | None:
        params: dict[str, Any] = {
            "sessionId": self._session_id,
            "toolCallId": self._on_behalf_of or question.tool_call_id,
        }
        if question.url is not None:
            if not self._links:
                return None
            params |= {
                "mode": "url",
                "elicitationId": f"elic_{uuid.uuid4().hex}",
                "message": question.message,
                "url": question.url,
            }
        elif self._forms:
            params |= {"mode": "form", "message": question.message, "requestedSchema": question.schema}
        else:
            return None
        try:
            answer = await self._request("elicitation/create", params)
        except ClientRequestError as exc:
            raise ToolError(f"the question could not be asked: {exc.message}") from None
        action = answer.get("action") if isinstance(answer, dict) else None
        if not isinstance(action, str):
            raise ToolError("the editor answered the question without an action")
        content = answer.get("content")
        return Answer(action, content if isinstance(content, dict) else None)
