"""The SQLite store's linker: the row engine's linker, with the changed rows upserted."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from emotional_memory.models import Memory
from emotional_memory.stores._shared.linking import ForwardLink, LinkCandidates, Linker


class SQLiteLinker(Linker):
    """:meth:`SQLiteStore.row_linker`: the cache's row linker, then the block's rows."""

    overlaps = False  # each block's rows are written when it is linked

    def __init__(self, store: Any, inner: Linker) -> None:
        self._store = store
        self._inner = inner
        self.block_size = inner.block_size
        self._mark = 0

    def _begin(self) -> None:
        if self._store._depth == 0:
            raise RuntimeError("SQLiteStore.row_linker runs inside store.transaction()")
        self._mark = len(self._store._cache._undo)

    def settle(self) -> None:
        """See :meth:`Linker.settle`."""
        self._inner.settle()

    def prefetch(self, vectors: Sequence[np.ndarray | None], limit: int) -> None:
        """See :meth:`Linker.prefetch` (before the transaction: nothing written)."""
        self._inner.prefetch(vectors, limit)

    def save(
        self, memories: Sequence[Memory], vectors: Sequence[np.ndarray | None] | None = None
    ) -> None:
        """See :meth:`Linker.save`: the block's rows are written at once."""
        self._begin()
        self._inner.save(memories, vectors)
        self._inner.settle()
        self._mark = self._store._write_rows_since(self._mark)

    def save_and_find(
        self,
        memories: Sequence[Memory],
        limit: int,
        vectors: Sequence[np.ndarray | None] | None = None,
    ) -> Iterator[LinkCandidates]:
        """See :meth:`Linker.save_and_find` (rows written by :meth:`flush`)."""
        self._begin()
        return self._inner.save_and_find(memories, limit, vectors)

    def link(
        self,
        memory: Memory,
        candidates: LinkCandidates,
        links: list[ForwardLink],
        max_links: int,
    ) -> None:
        """See :meth:`Linker.link`."""
        self._inner.link(memory, candidates, links, max_links)

    def flush(self) -> None:
        """See :meth:`Linker.flush`, then upsert the rows the block changed."""
        self._inner.flush()
        self._inner.settle()
        self._mark = self._store._write_rows_since(self._mark)

    def stored(self, memory: Memory) -> Memory:
        """See :meth:`Linker.stored`."""
        return self._inner.stored(memory)
