"""The SQLite backend: :class:`SQLiteStore` (one file, WAL, a row-engine cache)."""

from emotional_memory.stores.sqlite.schema import (
    SCHEMA_VERSION,
    SQLiteBusyError,
    SQLiteClosedError,
    SQLiteDimensionError,
    check_path,
    open_connection,
)
from emotional_memory.stores.sqlite.store import SQLiteStore

__all__ = [
    "SCHEMA_VERSION",
    "SQLiteBusyError",
    "SQLiteClosedError",
    "SQLiteDimensionError",
    "SQLiteStore",
    "check_path",
    "open_connection",
]
