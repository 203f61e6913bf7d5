"""Memory stores: :class:`InMemoryStore` (process memory) and :class:`SQLiteStore` (durable).

Both implement :class:`~emotional_memory.interfaces.MemoryStore`, support
``transaction()`` with rollback, and keep vectorised embedding columns for
``search_by_embedding`` and batch scoring (``embedding_matrix()``).
"""

from emotional_memory.stores.chroma import ChromaStore
from emotional_memory.stores.in_memory import InMemoryStore
from emotional_memory.stores.postgres import PostgresStore
from emotional_memory.stores.qdrant import QdrantStore
from emotional_memory.stores.sqlite import SQLiteStore

# QdrantStore / ChromaStore / PostgresStore import their client libraries only when
# constructed (extras ``qdrant`` / ``chroma`` / ``postgres``).
__all__ = ["ChromaStore", "InMemoryStore", "PostgresStore", "QdrantStore", "SQLiteStore"]
