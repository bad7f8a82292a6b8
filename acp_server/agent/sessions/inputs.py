"""The core's inputs: what a request gives the core, in its own types (a prompt, its attachments, the client's
tools). The protocol edge parses wire requests into these, so nothing in `agent/` reads a wire model. (Not
"commands": in this project a command is a shell command line; see docs/architecture.md, "Words".)
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from acp_server.runtime.model import Media

__all__ = ["Attachment", "ClientTools", "LinkedImage", "Prompt", "RequestId"]

# A JSON-RPC request id, kept as the client sent it (a prompt's is echoed in test-mode probes).
RequestId = int | str | None


@dataclass(frozen=True, slots=True)
class LinkedImage:
    """An image file on the local disk a prompt links to (a `file://` `resource_link`): read beneath the session's
    directories when the turn starts (runtime/attachments.py), never on the reader."""

    path: str
    name: str


# What a prompt shows the model besides its text: images (sounds) it carries, and image files it links to.
Attachment = Media | LinkedImage


class Prompt:
    """One `session/prompt`: its text for the model, its attachments, and what the store keeps of it.

    Both are made on first use, not when the prompt is read: admission runs on the reader, and a prompt may carry
    megabytes of embedded files.
    """

    __slots__ = ("_blocks", "_text", "_text_of", "attachments", "block_count", "message_id", "meta")

    def __init__(
        self,
        text: str | Callable[[], str],
        block_count: int,
        blocks: Callable[[], list[dict[str, Any]]] = list,
        meta: dict[str, Any] | None = None,
        attachments: Callable[[], tuple[Attachment, ...]] = tuple,
    ) -> None:
        self._text: str | None = text if isinstance(text, str) else None
        self._text_of = text if callable(text) else str
        # How many content blocks the client sent: a slash command is a prompt of exactly one.
        self.block_count = block_count
        self._blocks = blocks
        # The request's `_meta` (the scripted model reads its script there).
        self.meta: dict[str, Any] = {} if meta is None else meta
        # The media and linked images for the model, in the prompt's order (made on use, like the text).
        self.attachments = attachments
        # The id the protocol edge gave the user message when it inserted it (ACP v2 returns it), kept by the store
        # so a replay shows the same id; None: the store makes one.
        self.message_id: str | None = None

    @property
    def text(self) -> str:
        """Every block represented as text (see protocol/prompts.py); what the model is given."""
        if self._text is None:
            self._text = self._text_of()
        return self._text

    def blocks(self) -> list[dict[str, Any]]:
        """The blocks as the client sent them, for the session store."""
        return self._blocks()


@dataclass(frozen=True, slots=True)
class ClientTools:
    """What the client can do for a session's tools and show its user (from its `initialize` capabilities)."""

    read_files: bool = False
    write_files: bool = False
    terminals: bool = False
    # `clientCapabilities.session.notices` / `.compaction`: it shows `notice` and `compaction_update` updates.
    notices: bool = False
    compaction: bool = False
    # `clientCapabilities.elicitation.form`: it asks its user structured questions (`elicitation/create`).
    elicitation: bool = False
    # `clientCapabilities.elicitation.url`: it sends its user to a link and says whether they went (URL mode).
    elicitation_url: bool = False
