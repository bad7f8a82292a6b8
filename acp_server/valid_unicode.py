"""Text as valid Unicode: a lone UTF-16 surrogate (half of an emoji split by a proxy, or escaped in JSON) repaired
before orjson, which refuses to encode one, meets it.

Its own leaf module, importing nothing of the package: the runtime repairs what models and tools produce
(runtime/text_guard.py), and the connection repairs the rare message that still carries one on its way out
(jsonrpc/connection.py), and neither layer may import the other.
"""

from __future__ import annotations

from typing import Any

__all__ = ["sanitize_json", "sanitize_text"]


def sanitize_text(text: str) -> str:
    """`text` as valid Unicode: surrogate pairs joined into their character, any other surrogate U+FFFD."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        # UTF-16 is the one codec in which a pair of surrogates is a character: through it and back joins them.
        return text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")
    return text  # the common case: one C-speed check, no copy


def sanitize_json(value: Any) -> Any:
    """A JSON-like value with every string in it (keys too) sanitized."""
    if isinstance(value, str):
        return sanitize_text(value)
    if isinstance(value, dict):
        return {sanitize_text(k) if isinstance(k, str) else k: sanitize_json(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [sanitize_json(item) for item in value]
    return value
