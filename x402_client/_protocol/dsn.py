"""Where the state lives: a SQLite file's path, or a PostgreSQL DSN (`postgresql://...`).

A `PostgresDsn` keeps the connection string it was given and shows it only without its
password: its `repr` and `str` read `postgresql://payer:***@db.internal:5432/x402`, so an
options object, a log line, an error or a captured frame local never prints the password.
`reveal()` gives the string itself, to the one call that connects. A password given as a
query parameter (`?password=...`) is masked the same way.
"""

from __future__ import annotations

import os
import pathlib
import re
from urllib.parse import parse_qsl, unquote, urlencode, urlsplit, urlunsplit

__all__ = ["POSTGRES_SCHEMES", "PostgresDsn", "is_postgres_dsn", "state_location"]

POSTGRES_SCHEMES = ("postgresql://", "postgres://")
_MASK = "***"
_SECRET_PARAMS = re.compile(r"pass|secret|token|key", re.IGNORECASE)


def is_postgres_dsn(text: object) -> bool:
    """Whether `text` is a `postgresql://` or `postgres://` URL."""
    return isinstance(text, str) and text.lower().startswith(POSTGRES_SCHEMES)


class PostgresDsn:
    """A PostgreSQL connection URL whose password is never shown."""

    __slots__ = ("_text",)

    def __init__(self, text: str) -> None:
        if not is_postgres_dsn(text):
            raise ValueError("a PostgreSQL DSN starts with postgresql:// or postgres://")
        self._text = text

    def reveal(self) -> str:
        """The DSN as given, password included: only for connecting."""
        return self._text

    @property
    def password(self) -> str | None:
        """The password the DSN carries (in its user info or its query), if any."""
        parts = urlsplit(self._text)
        if parts.password:
            return unquote(parts.password)
        for name, value in parse_qsl(parts.query, keep_blank_values=True):
            if name.lower() == "password" and value:
                return value
        return None

    @property
    def redacted(self) -> str:
        """The DSN with `***` for its password: what is ever shown."""
        parts = urlsplit(self._text)
        netloc = parts.netloc
        if "@" in netloc:
            userinfo, host = netloc.rsplit("@", 1)
            user = userinfo.split(":", 1)[0]
            netloc = f"{user}:{_MASK}@{host}" if ":" in userinfo else f"{user}@{host}"
        query = parts.query
        if query:
            pairs = parse_qsl(query, keep_blank_values=True)
            query = urlencode(
                [(n, _MASK if _SECRET_PARAMS.search(n) else v) for n, v in pairs], safe="*"
            )
        return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))

    def redact(self, text: str) -> str:
        """`text` (an error message of the driver) without this DSN's password."""
        password = self.password
        if password:
            text = text.replace(self._text, self.redacted).replace(password, _MASK)
        return text

    def __repr__(self) -> str:
        return f"PostgresDsn({self.redacted!r})"

    def __str__(self) -> str:
        return self.redacted

    def __eq__(self, other: object) -> bool:
        return isinstance(other, PostgresDsn) and other._text == self._text

    def __hash__(self) -> int:
        return hash(self._text)

    def __reduce__(self) -> tuple[type[PostgresDsn], tuple[str]]:
        return (PostgresDsn, (self._text,))


def state_location(value: object) -> pathlib.Path | PostgresDsn:
    """A state file's path, or a `PostgresDsn` for a `postgresql://` URL."""
    if isinstance(value, PostgresDsn):
        return value
    if is_postgres_dsn(value):
        return PostgresDsn(str(value))
    if isinstance(value, pathlib.Path):
        return value
    if isinstance(value, (str, os.PathLike)):
        return pathlib.Path(value)
    raise TypeError("a state location is a path or a postgresql:// URL")
