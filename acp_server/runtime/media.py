"""The one check every image and sound passes before it may reach a model: a pasted block, an embedded resource's
blob, an image file a prompt links to, an MCP tool's result. A medium the endpoint would refuse (an SVG, a TIFF, an
ogg sound, base64 that is not, too large) must never be sent: the endpoint answers 400, and the stored history
keeps the medium, so every later turn of the session would fail again.

The check is cheap enough for the connection's reader path (a prompt is admitted there, in reader order): a length
bound first, an alphabet and padding match without decoding, the decoded size from the length and the padding
(never decoding the whole), and only the first bytes decoded to see the format.
"""

from __future__ import annotations

import binascii
import re

__all__ = [
    "AUDIO_FORMATS",
    "IMAGE_TYPES",
    "MAX_MEDIA_BYTES",
    "audio_type",
    "decoded_size",
    "image_type",
    "validate_media",
]

# The largest image (sound) sent to a model: Anthropic's limit for one image (OpenAI's is higher).
MAX_MEDIA_BYTES = 5 * 1024 * 1024
# Its base64 length: 4 characters per 3 bytes, padded. Only a first, cheap bound: the last group of 4 characters
# holds 1 to 3 bytes, so the exact bound is on the decoded size (`decoded_size`).
MAX_BASE64_CHARS = (MAX_MEDIA_BYTES + 2) // 3 * 4
# The image formats both providers take (OpenAI and Anthropic: PNG, JPEG, GIF, WebP).
IMAGE_TYPES = frozenset({"image/png", "image/jpeg", "image/gif", "image/webp"})
# The sounds OpenAI's Chat Completions take (`input_audio.format`), by mime type.
AUDIO_FORMATS = {"audio/wav": "wav", "audio/x-wav": "wav", "audio/wave": "wav", "audio/mpeg": "mp3", "audio/mp3": "mp3"}

_BASE64 = re.compile(r"[A-Za-z0-9+/]*={0,2}")
_SNIFF_CHARS = 16  # 12 bytes: enough for every signature below


def image_type(data: bytes) -> str | None:
    """The image format of `data` by its first bytes, as a mime type, or None."""
    if data.startswith(b"\x89PNG\r\n\x1a\n"):
        return "image/png"
    if data.startswith(b"\xff\xd8\xff"):
        return "image/jpeg"
    if data.startswith((b"GIF87a", b"GIF89a")):
        return "image/gif"
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "image/webp"
    return None


def audio_type(data: bytes) -> str | None:
    """The sound format of `data` by its first bytes ("wav" or "mp3"), or None."""
    if data[:4] == b"RIFF" and data[8:12] == b"WAVE":
        return "wav"
    if data.startswith(b"ID3") or (len(data) >= 2 and data[0] == 0xFF and data[1] & 0xE0 == 0xE0):
        return "mp3"  # an ID3 tag, or an MPEG audio frame's sync word
    return None


def decoded_size(data: str) -> int:
    """The bytes that padded base64 `data` (a multiple of 4 characters) decodes to: 3 per 4 characters, less one per
    `=` of padding. Without decoding."""
    padding = 2 if data.endswith("==") else 1 if data.endswith("=") else 0  # strict base64 pads with 2 at most
    return len(data) // 4 * 3 - padding


def _too_large(size: int) -> str:
    return f"data is too large: about {size} bytes, at most {MAX_MEDIA_BYTES} are sent"


def validate_media(kind: str, mime: str, data: str) -> str | None:
    """Why the base64 `data` of this image ("image") or sound ("audio") cannot be sent to a model, or None if it
    can: a format the providers take (PNG, JPEG, GIF, WebP; wav, mp3) that its bytes confirm, strict base64, at
    most `MAX_MEDIA_BYTES` decoded."""
    if kind == "image":
        if mime not in IMAGE_TYPES:
            return f"mimeType {mime!r}: the models take PNG, JPEG, GIF and WebP images"
    elif kind == "audio":
        if mime not in AUDIO_FORMATS:
            return f"mimeType {mime!r}: the models take wav and mp3 sounds"
    else:
        return f"{kind} content is not an image or a sound"
    if len(data) > MAX_BASE64_CHARS:
        return _too_large(len(data) * 3 // 4)
    if len(data) % 4 or _BASE64.fullmatch(data) is None:
        return "data is not base64"
    size = decoded_size(data)
    if size > MAX_MEDIA_BYTES:
        return _too_large(size)
    try:
        head = binascii.a2b_base64(data[:_SNIFF_CHARS], strict_mode=True)
    except (binascii.Error, ValueError):
        return "data is not base64"  # padding inside the first characters
    if kind == "image":
        found = image_type(head)
        if found != mime:
            return f"data is not a {mime} image" + (f" (its bytes are {found})" if found else "")
    elif audio_type(head) != AUDIO_FORMATS[mime]:
        return f"data is not a {AUDIO_FORMATS[mime]} sound"
    return None
