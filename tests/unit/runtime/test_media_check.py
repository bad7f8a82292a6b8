"""`validate_media`, the one check every image and sound passes before it may reach a model: the formats the
providers take (confirmed by the bytes, not only the label), strict base64, the size bound, the audio formats."""

from __future__ import annotations

import base64

import pytest

from acp_server.runtime.media import MAX_MEDIA_BYTES, decoded_size, validate_media

PNG_HEAD = b"\x89PNG\r\n\x1a\n" + bytes(8)


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


@pytest.mark.parametrize(
    ("kind", "mime", "data"),
    [
        ("image", "image/png", PNG_HEAD),
        ("image", "image/jpeg", b"\xff\xd8\xff\xe0" + bytes(20)),
        ("image", "image/gif", b"GIF89a" + bytes(10)),
        ("image", "image/webp", b"RIFF\x00\x00\x00\x00WEBPVP8 "),
        ("audio", "audio/wav", b"RIFF\x00\x00\x00\x00WAVEfmt "),
        ("audio", "audio/mpeg", b"ID3\x04" + bytes(10)),
        ("audio", "audio/mpeg", b"\xff\xfb\x90\x00" + bytes(10)),
        ("image", "image/png", PNG_HEAD + bytes(MAX_MEDIA_BYTES - len(PNG_HEAD))),
    ],
)
def test_media_the_providers_take_passes(kind: str, mime: str, data: bytes) -> None:
    assert validate_media(kind, mime, b64(data)) is None


@pytest.mark.parametrize(
    ("kind", "mime", "data", "why"),
    [
        ("image", "image/svg+xml", b64(b"<svg/>"), "the models take PNG, JPEG, GIF and WebP"),
        ("image", "image/tiff", b64(b"II*\x00"), "the models take PNG, JPEG, GIF and WebP"),
        ("audio", "audio/ogg", b64(b"OggS\x00"), "the models take wav and mp3"),
        ("audio", "audio/mpeg", b64(b"RIFF\x00\x00\x00\x00WAVEfmt "), "not a mp3 sound"),
        ("image", "image/png", b64(b"GIF89a" + bytes(10)), "its bytes are image/gif"),
        ("image", "image/png", b64(b"not an image"), "not a image/png image"),
        ("image", "image/png", b64(PNG_HEAD)[:-1], "not base64"),  # not a multiple of 4
        ("image", "image/png", b64(PNG_HEAD) + "\n", "not base64"),
        ("image", "image/png", "iVBO=wKGgoAAAAA", "not base64"),
        ("image", "image/png", "iVBORw0KGgo=AAAA", "not base64"),  # padding inside
        ("image", "image/png", b64(PNG_HEAD).replace("A", "-"), "not base64"),
        ("image", "image/png", b64(PNG_HEAD + bytes(MAX_MEDIA_BYTES)), "too large"),
        # As many base64 characters as exactly MAX_MEDIA_BYTES (no padding where that has one `=`): the bound is on
        # the decoded size.
        ("image", "image/png", b64(PNG_HEAD + bytes(MAX_MEDIA_BYTES + 1 - len(PNG_HEAD))), "too large"),
        ("text", "text/plain", b64(b"hello"), "not an image or a sound"),
    ],
)
def test_media_the_endpoint_would_refuse_is_named_with_the_reason(kind: str, mime: str, data: str, why: str) -> None:
    found = validate_media(kind, mime, data)
    assert found is not None and why in found, found


@pytest.mark.parametrize("size", [0, 1, 2, 3, 4, 5, MAX_MEDIA_BYTES - 1, MAX_MEDIA_BYTES, MAX_MEDIA_BYTES + 1])
def test_the_decoded_size_is_read_from_the_length_and_the_padding(size: int) -> None:
    data = b64(bytes(size))
    assert decoded_size(data) == len(base64.b64decode(data)) == size


def test_the_size_bound_is_exact_on_the_decoded_bytes() -> None:
    at_bound = b64(PNG_HEAD + bytes(MAX_MEDIA_BYTES - len(PNG_HEAD)))
    one_more = b64(PNG_HEAD + bytes(MAX_MEDIA_BYTES + 1 - len(PNG_HEAD)))
    assert len(at_bound) == len(one_more), "the case the padded length cannot tell apart"
    assert validate_media("image", "image/png", at_bound) is None
    assert validate_media("image", "image/png", one_more) == (
        f"data is too large: about {MAX_MEDIA_BYTES + 1} bytes, at most {MAX_MEDIA_BYTES} are sent"
    )
