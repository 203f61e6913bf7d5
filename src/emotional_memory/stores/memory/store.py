"""The in-process backend: the row engine, held in process memory only."""

from __future__ import annotations

from emotional_memory.stores._shared.rows.store import (
    EMBEDDING_DTYPES,
    EmbeddingDimensionError,
    EmbeddingDType,
    RowStore,
    deep_size,
)

__all__ = [
    "EMBEDDING_DTYPES",
    "EmbeddingDType",
    "EmbeddingDimensionError",
    "InMemoryStore",
    "deep_size",
]


class InMemoryStore(RowStore):
    """Memories in process memory, searched exactly (float64 cosine, ties: later first).

    Args:
        embedding_dtype: how embedding rows are held: ``"float32"`` (default,
            lossless for float32 embeddings), ``"float64"``, or the lossy
            ``"float16"`` / ``"bfloat16"`` (unit rows plus a float64 norm).

    Nothing outlives the process; ``transaction()`` rolls back on an exception.
    See ``stores/memory/README.md`` for the layout and its costs.
    """

    def __repr__(self) -> str:
        """``InMemoryStore(count=<n>)``, as the original's."""
        return f"{type(self).__name__}(count={len(self)})"
