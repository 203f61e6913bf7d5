"""Memory stores, one package per backend behind one contract (:mod:`.base`).

- :class:`InMemoryStore` (``memory/``): process memory, exact search.
- :class:`SQLiteStore` (``sqlite/``): one durable file.
- :class:`PostgresStore` (``postgres/``): PostgreSQL with pgvector (extra ``postgres``).
- :class:`QdrantStore`, :class:`ChromaStore` (``vectordb/``): extras ``qdrant`` / ``chroma``.

:func:`open_store` opens one by URL. Each name is imported on first use, so importing
one backend never loads another; client libraries load when a store is constructed.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from emotional_memory.stores.memory import InMemoryStore
    from emotional_memory.stores.postgres import PostgresStore
    from emotional_memory.stores.registry import open_state_store, open_store
    from emotional_memory.stores.sqlite import SQLiteStore
    from emotional_memory.stores.vectordb import ChromaStore, QdrantStore

_WHERE = {
    "InMemoryStore": "emotional_memory.stores.memory",
    "SQLiteStore": "emotional_memory.stores.sqlite",
    "PostgresStore": "emotional_memory.stores.postgres",
    "QdrantStore": "emotional_memory.stores.vectordb.qdrant",
    "ChromaStore": "emotional_memory.stores.vectordb.chroma",
    "open_store": "emotional_memory.stores.registry",
    "open_state_store": "emotional_memory.stores.registry",
}

__all__ = [
    "ChromaStore",
    "InMemoryStore",
    "PostgresStore",
    "QdrantStore",
    "SQLiteStore",
    "open_state_store",
    "open_store",
]


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
