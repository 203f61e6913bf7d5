"""Compatibility path: see :mod:`emotional_memory.stores.memory`."""

from emotional_memory.stores.memory import (
    EMBEDDING_DTYPES,
    EmbeddingDimensionError,
    EmbeddingDType,
    InMemoryStore,
    deep_size,
)

__all__ = [
    "EMBEDDING_DTYPES",
    "EmbeddingDType",
    "EmbeddingDimensionError",
    "InMemoryStore",
    "deep_size",
]
