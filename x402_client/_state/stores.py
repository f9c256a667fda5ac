"""The store a state location names: a `SqliteStore` for a file's path, a `PostgresStore`
for a `postgresql://` URL (whose module, and psycopg, load only then)."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, TypeAlias

from .._protocol.dsn import PostgresDsn, state_location

if TYPE_CHECKING:
    from .postgres_store import PostgresStore
    from .sqlite_store import SqliteStore

__all__ = ["JournalStore", "open_store"]

#: A payment journal (and budget store): one machine's file, or a fleet's database.
JournalStore: TypeAlias = "SqliteStore | PostgresStore"


def open_store(location: str | os.PathLike[str] | PostgresDsn) -> JournalStore:
    """Open the store of `location` (a path, or a `postgresql://` URL)."""
    where = state_location(location)
    del location  # it may be the DSN's text, password included: not kept in this frame
    if isinstance(where, PostgresDsn):
        from .postgres_store import PostgresStore

        return PostgresStore(where)
    from .sqlite_store import SqliteStore

    return SqliteStore(where)
