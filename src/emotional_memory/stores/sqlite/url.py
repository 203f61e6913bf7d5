"""``sqlite:///PATH``: one file holding the memories and the states (one transaction)."""

from __future__ import annotations

from typing import Any

from emotional_memory.stores._shared.urls import Backend, OpenedStore, sqlite_path
from emotional_memory.stores.sqlite.state import SQLiteAffectiveStateStore
from emotional_memory.stores.sqlite.store import SQLiteStore


def open_sqlite(url: str, description: str, options: dict[str, Any]) -> OpenedStore:
    """:class:`SQLiteStore` and the state store sharing its file and transactions
    (``statement_timeout`` bounds an operation's wait for its scope held elsewhere,
    and for the file's write lock held by another process: SQLite's busy timeout)."""
    wait = options.get("statement_timeout")
    path = sqlite_path(url)
    store = SQLiteStore(path, timeout=float(wait)) if wait else SQLiteStore(path)
    try:
        states = SQLiteAffectiveStateStore.from_store(
            store, hold_timeout=wait
        )
    except BaseException:
        store.close()
        raise
    return OpenedStore(store, states, description, True, True)


def open_sqlite_state(url: str) -> Any:
    """A :class:`SQLiteAffectiveStateStore` in the file (its own or a store's)."""
    return SQLiteAffectiveStateStore(sqlite_path(url))


BACKEND = Backend("sqlite", ("sqlite",), ("sqlite",), open_sqlite, open_sqlite_state)
