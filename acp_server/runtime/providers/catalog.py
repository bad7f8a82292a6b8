"""What models an endpoint offers, so a user can pick one without editing `config.toml`: a models list read from
its answer, the `model` option's merged choices, and the lists kept on disk between runs.

Both families answer `GET .../models` with `{"data": [{"id": ...}, ...]}` (OpenAI, and every OpenAI-compatible
server: Ollama, vLLM, LM Studio, llama.cpp, OpenRouter; Anthropic's `/v1/models` too). The answer is untrusted: a
body of any other shape is a `ListingError`, and ids that could not be a model spec or that name models no chat can
use (embeddings, speech, images, moderation) are left out: one filter (`chat_model_ids`) for every source, the
endpoint's answer and the cache file alike.

The cache file holds, per endpoint (its family and its URL without credentials), the ids and when they were fetched:
never a key, a header or a query string. It is written atomically (a temporary file in the same directory, then a
rename), readable by the user only, and a file that cannot be read is ignored: a cache only ever saves a request. It
is read like every state file (settings.read_state_file): a link is not followed, a FIFO does not block, anything but
a regular file within MAX_CACHE_BYTES is ignored with a line in the log.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import tempfile
import unicodedata
import zlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TypeGuard
from urllib.parse import urlsplit, urlunsplit

import orjson

from acp_server.errors import ListingError, ListingTooLargeError
from acp_server.settings.files import read_state_file

__all__ = [
    "CACHE_FILENAME",
    "LIST_TTL",
    "Listing",
    "ListingCache",
    "chat_model_ids",
    "decode_listing",
    "endpoint_key",
    "merge_choices",
    "model_ids",
    "usable_model_id",
]

log = logging.getLogger(__name__)

CACHE_FILENAME = "model-lists.json"
CACHE_VERSION = 1
# How long a fetched list is taken as it is before it is asked for again. A stale list is still offered until the
# new one arrives (a new process would otherwise never list anything at `session/new`).
LIST_TTL = 600.0
MAX_MODELS = 1000
# The longest id offered. Real ids are far shorter (`gpt-4.1-mini-2025-04-14`, OpenRouter's
# `meta-llama/llama-3.3-70b-instruct:free`, Ollama's `hf.co/{user}/{repo}:{quant}`, whose Hugging Face parts are at
# most 96 characters each): 200 keeps every one of them and still fits a picker's line.
MAX_ID_CHARS = 200
# The most a models list may take, as sent and once decompressed. OpenRouter's list of some 300 models with their
# descriptions and prices is about 1 MiB; a larger answer is not a list worth reading (a 50 MB one took the server
# to 634 MB and stalled every session; a 199 KiB gzip body inflated to 200 MB).
MAX_LIST_BYTES = 8 * 1024 * 1024
# The cache holds at most a few endpoints' MAX_MODELS ids: a larger file is not one we wrote, and is not read.
MAX_CACHE_BYTES = 4 * 1024 * 1024
# Models no chat can use, by the words their ids carry on every endpoint that lists them.
_NOT_CHAT = re.compile(r"embed|whisper|tts|dall-e|moderation|transcribe", re.IGNORECASE)
# An id is printable text without spaces. ASCII ones (nearly all) are checked by this pattern; the others character
# by character against the Unicode categories C (controls: C0 and C1 such as U+0085 and U+009B; format characters:
# the bidi controls that reorder what a picker shows, zero-width ones that make two ids look alike; surrogates,
# private use, unassigned) and Z (spaces, the line and paragraph separators U+2028 and U+2029).
_ASCII_UNPRINTABLE = re.compile(r"[\x00-\x20\x7f]")


def endpoint_key(url: str) -> str:
    """An endpoint as its list is kept: scheme, host, port and path; never credentials, a query or a final `/`."""
    parts = urlsplit(url.rstrip("/"))
    host = parts.hostname or ""
    netloc = f"{host}:{parts.port}" if parts.port else host
    return urlunsplit((parts.scheme, netloc, parts.path.rstrip("/"), "", ""))


def too_large(decompressed: bool = False) -> ListingTooLargeError:
    once = " once decompressed" if decompressed else ""
    return ListingTooLargeError(f"it is larger than {MAX_LIST_BYTES // (1024 * 1024)} MiB{once}, so it was not read")


def decode_listing(raw: bytes, encoding: str) -> tuple[str, ...]:
    """The chat models of a models list's body as it came over the wire (`encoding`: its Content-Encoding), for a
    worker thread (the inflating and the parsing never run on the event loop). A gzip or deflate body is inflated to
    MAX_LIST_BYTES at most: one that would inflate to more is cut off there, never inflated whole."""
    if len(raw) > MAX_LIST_BYTES:
        raise too_large()
    coding = encoding.strip().lower()
    if coding in ("", "identity"):
        text = raw
    elif coding in ("gzip", "x-gzip", "deflate"):
        inflater = zlib.decompressobj(zlib.MAX_WBITS | (16 if "gzip" in coding else 0))
        try:
            text = inflater.decompress(raw, MAX_LIST_BYTES + 1)  # max_length: what is left stays unconsumed
        except zlib.error as exc:
            raise ListingError(f"its {coding} body cannot be decompressed ({exc})") from None
    else:
        raise ListingError(f"its body came in an encoding that was not asked for ({coding})")
    if len(text) > MAX_LIST_BYTES:
        raise too_large(decompressed=True)
    try:
        body = orjson.loads(text)
    except orjson.JSONDecodeError:
        raise ListingError("the answer is not JSON") from None
    return model_ids(body)


def usable_model_id(name: object) -> TypeGuard[str]:
    """Whether `name` may be offered as a model: text, 1 to MAX_ID_CHARS characters, printable and without spaces."""
    if not isinstance(name, str) or not 0 < len(name) <= MAX_ID_CHARS:
        return False
    if name.isascii():
        return _ASCII_UNPRINTABLE.search(name) is None
    return not any(unicodedata.category(char)[0] in "CZ" for char in name)


def chat_model_ids(names: Iterable[object]) -> tuple[str, ...]:
    """The one filter every listed id passes, from an endpoint or from the cache: usable ids (`usable_model_id`) of
    chat models, in their order, without duplicates, at most MAX_MODELS."""
    found: dict[str, None] = {}
    for name in names:
        if usable_model_id(name) and not _NOT_CHAT.search(name):
            found[name] = None
            if len(found) >= MAX_MODELS:
                break
    return tuple(found)


def model_ids(body: object) -> tuple[str, ...]:
    """The chat models a `{"data": [{"id": ...}]}` answer lists, in its order, without duplicates."""
    data = body.get("data") if isinstance(body, dict) else None
    if not isinstance(data, list):
        raise ListingError("the answer is not a models list (no `data` array)")
    names: list[str] = []
    for item in data:
        name = item.get("id") if isinstance(item, dict) else None
        if not isinstance(name, str):
            raise ListingError("the answer is not a models list (an entry without a text `id`)")
        names.append(name)
    return chat_model_ids(names)


@dataclass(frozen=True, slots=True)
class Listing:
    """What one endpoint listed, and when (wall-clock seconds: the cache outlives the process)."""

    family: str
    endpoint: str
    models: tuple[str, ...]
    fetched_at: float

    def fresh(self, now: float) -> bool:
        return 0 <= now - self.fetched_at < LIST_TTL

    def specs(self) -> tuple[str, ...]:
        return tuple(f"{self.family}:{name}" for name in self.models)


def merge_choices(configured: Sequence[str], listings: Iterable[Listing]) -> tuple[str, ...]:
    """The configured specs first, in their order, then each endpoint's, without duplicates. Ollama's `NAME:latest`
    is the configured `NAME` under another name, so it is not offered twice."""
    merged = dict.fromkeys(configured)
    for listing in listings:
        for spec in listing.specs():
            if spec.endswith(":latest") and spec.removesuffix(":latest") in merged:
                continue
            merged.setdefault(spec, None)
    return tuple(merged)


class ListingCache:
    """The lists on disk, keyed by (family, endpoint). Reading and writing never raise: a cache is optional."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def load(self) -> dict[tuple[str, str], Listing]:
        try:
            raw = read_state_file(self.path, MAX_CACHE_BYTES)
        except FileNotFoundError:
            return {}
        except OSError as exc:
            log.warning("model lists: cannot read %s (%s); asking the endpoints again", self.path, exc.strerror or exc)
            return {}
        try:
            document = orjson.loads(raw)
            if not isinstance(document, dict) or document.get("version") != CACHE_VERSION:
                raise ValueError("not a model list cache of this version")
            listings = {}
            for entry in document["endpoints"]:
                family, endpoint, models = entry["family"], entry["endpoint"], entry["models"]
                if not (isinstance(family, str) and isinstance(endpoint, str) and isinstance(models, list)):
                    raise ValueError("an entry whose family, endpoint or models are not what was written")
                # The file is as untrusted as an endpoint's answer: its ids pass the same filter.
                listing = Listing(family, endpoint, chat_model_ids(models), float(entry["fetched_at"]))
                listings[listing.family, listing.endpoint] = listing
        except (orjson.JSONDecodeError, ValueError, KeyError, TypeError) as exc:
            log.warning("model lists: ignoring %s (%s)", self.path, exc)
            return {}
        return listings

    def update(self, listings: Mapping[tuple[str, str], Listing], dropped: Iterable[tuple[str, str]] = ()) -> None:
        """Write these lists and forget the dropped ones, keeping what other configurations cached."""
        kept = self.load()
        for key in dropped:
            kept.pop(key, None)
        kept.update(listings)
        self.save(kept)

    def save(self, listings: Mapping[tuple[str, str], Listing]) -> None:
        document = {
            "version": CACHE_VERSION,
            "endpoints": [
                {
                    "family": listing.family,
                    "endpoint": listing.endpoint,
                    "fetched_at": listing.fetched_at,
                    "models": list(listing.models),
                }
                for listing in listings.values()
            ],
        }
        temporary: str | None = None
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            handle, temporary = tempfile.mkstemp(prefix=".model-lists-", suffix=".tmp", dir=self.path.parent)
            with os.fdopen(handle, "wb") as file:  # mkstemp makes it readable by the user only
                file.write(orjson.dumps(document, option=orjson.OPT_INDENT_2))
                file.flush()
                os.fsync(file.fileno())
            os.replace(temporary, self.path)
            temporary = None
        except OSError as exc:
            log.warning("model lists: cannot write %s (%s); they will be asked for again next time", self.path, exc)
        finally:
            if temporary is not None:
                with contextlib.suppress(OSError):
                    os.unlink(temporary)
