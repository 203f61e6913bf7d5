"""Compatibility path: see :mod:`emotional_memory.stores.vectordb.qdrant`."""

from emotional_memory.stores.vectordb.qdrant import (
    QdrantStore,
)

__all__ = ['QdrantStore']
