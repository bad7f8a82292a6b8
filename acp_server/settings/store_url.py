"""The session store's URL (`--store-url`, `ACP_SERVER_STORE_URL`, `store_url`): checked, and never shown whole.

Why it exists: a PostgreSQL URL may carry a password (`postgresql://user:secret@host/db`). The setting is read in
three places (flags, the environment, the config file) and shown in logs, errors and `acp-server sessions`; each
of them shows `redact_store_url`'s form, the password replaced. The password itself is one of the secrets the server
holds (settings.held_secrets), so it is redacted from transcripts and kept from child processes too. Pure string
work: nothing here imports psycopg, which loads only when such a store is opened.
"""

from __future__ import annotations

from urllib.parse import parse_qsl, unquote, urlencode, urlsplit, urlunsplit

__all__ = ["STORE_URL_SCHEMES", "STORE_URL_VARIABLES", "check_store_url", "redact_store_url", "store_url_passwords"]

STORE_URL_SCHEMES = ("postgresql", "postgres")
# What a child process never sees: the URL (it may hold a password), and libpq's own password and password file.
STORE_URL_VARIABLES = ("ACP_SERVER_STORE_URL", "PGPASSWORD", "PGPASSFILE")
_HIDDEN = "***"


def check_store_url(text: str) -> str:
    """`text` when it is a PostgreSQL URL (postgresql://USER@HOST:PORT/DB); ValueError saying what is expected (the
    message never holds the value: it may carry a password)."""
    try:
        parts = urlsplit(text.strip())
        parts.port  # noqa: B018 (raises ValueError for a port that is not a number)
    except ValueError:
        raise ValueError("expected a URL like postgresql://USER@HOST:PORT/DB") from None
    if parts.scheme.lower() not in STORE_URL_SCHEMES:
        raise ValueError("expected a URL starting with postgresql:// (the only store besides the default SQLite file)")
    return text.strip()


def store_url_passwords(url: str) -> list[str]:
    """The passwords the URL carries (in its user part, as written and percent-decoded as libpq reads it, and as a
    `password=` parameter)."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return []
    written = parts.netloc.rpartition("@")[0].partition(":")[2]
    found = [written, unquote(written)]
    found += [value for key, value in parse_qsl(parts.query, keep_blank_values=True) if key == "password"]
    return sorted({value for value in found if value})


def redact_store_url(url: str) -> str:
    """The URL as logs and messages show it: the password (user part or `password=` parameter) replaced by ***."""
    try:
        parts = urlsplit(url)
        password = parts.password
    except ValueError:
        return "<a store URL that cannot be read>"
    netloc = parts.netloc
    if password is not None:
        userinfo, _, where = netloc.rpartition("@")
        netloc = f"{userinfo.partition(':')[0]}:{_HIDDEN}@{where}"  # the user as written (percent-encoded)
    query = parts.query
    if query:
        pairs = parse_qsl(query, keep_blank_values=True)
        query = urlencode([(k, _HIDDEN if k == "password" else v) for k, v in pairs], safe="*")
    return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))
