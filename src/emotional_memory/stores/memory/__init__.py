"""The in-process backend: :class:`InMemoryStore`."""

from emotional_memory.stores.memory.store import (
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
