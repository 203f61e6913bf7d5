"""Vector-database backends: :class:`QdrantStore` and :class:`ChromaStore` over one
:class:`VectorDBStore` base (each client library is imported only when a store is
constructed)."""

from emotional_memory.stores.vectordb.base import VectorDBStore
from emotional_memory.stores.vectordb.chroma import ChromaStore
from emotional_memory.stores.vectordb.qdrant import QdrantStore

__all__ = ["ChromaStore", "QdrantStore", "VectorDBStore"]
