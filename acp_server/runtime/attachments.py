"""Image files a prompt links to, read from the local disk for the model: beneath the session's directories (one
checked open, no gap between the check and the read, runtime/beneath.py), size-limited, and sent only if their bytes
are an image format the providers take (PNG, JPEG, GIF, WebP), whatever the file's name says.
"""

from __future__ import annotations

import base64
from collections.abc import Sequence
from pathlib import Path

import anyio

from acp_server.errors import ToolError
from acp_server.runtime import beneath
from acp_server.runtime.media import MAX_MEDIA_BYTES, image_type
from acp_server.runtime.model import Media

__all__ = ["MAX_IMAGE_BYTES", "image_type", "read_image"]

# The largest image file read for a prompt: the largest medium sent to a model (runtime/media.py).
MAX_IMAGE_BYTES = MAX_MEDIA_BYTES


async def read_image(path: str, roots: Sequence[Path]) -> Media:
    """The image file at `path` (absolute) as `Media`; `ToolError` says why it cannot be (outside the session's
    directories, missing, too large, not an image)."""
    try:
        data = await anyio.to_thread.run_sync(beneath.read_bytes, Path(path), roots, MAX_IMAGE_BYTES)
    except OSError as exc:
        raise ToolError(f"{path}: cannot read: {exc.strerror or exc}") from None
    mime = image_type(data)
    if mime is None:
        raise ToolError(f"{path}: not a PNG, JPEG, GIF or WebP image")
    return Media("image", mime, base64.b64encode(data).decode())
