"""The generic columnar path: any plain :class:`~emotional_memory.interfaces.MemoryStore`
served as a :class:`~emotional_memory.stores.base.ColumnarStore` with the same answers.

:func:`columnar` returns the store itself when it is columnar, else a
:class:`StoreAdapter` (one per store), so the engine has one code path per operation.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence
from contextlib import AbstractContextManager
from datetime import datetime
from typing import Any, TypeGuard

import numpy as np

from emotional_memory._bank import (
    CandidateBank,
    LexicalQuery,
    bank_from_memories,
    columns_from_memories,
    device_columns,
    embedding_dim,
)
from emotional_memory.interfaces import MemoryStore, store_transaction
from emotional_memory.kernel.columns import MemoryColumns, bucket_size, pad_columns
from emotional_memory.kernel.lexical import LexicalInputs
from emotional_memory.lexical import LexicalIndex
from emotional_memory.models import EmotionalTag, Memory
from emotional_memory.stores.base import (
    BackendStore,
    ColumnarStore,
    LinkIndexStore,
    ManyReadingStore,
    TagWritingStore,
)

__all__ = ["ColumnarStore", "StoreAdapter", "columnar"]  # ColumnarStore: see stores.base


class StoreAdapter:
    """Any plain :class:`MemoryStore` as a :class:`ColumnarStore`, same answers.

    Candidates come from ``search_by_embedding`` / ``list_all`` and are turned into
    columns here; lexical queries use an index built from ``list_all()`` per call;
    ``transaction`` is the store's own when it has one, else a no-op.

    Args:
        store: the plain store (any object with the six protocol methods).
    """

    def __init__(self, store: MemoryStore) -> None:
        self.store = store

    # The MemoryStore protocol, passed through.
    def save(self, memory: Memory) -> None:
        """See :meth:`MemoryStore.save`."""
        self.store.save(memory)

    def get(self, memory_id: str) -> Memory | None:
        """See :meth:`MemoryStore.get`."""
        return self.store.get(memory_id)

    def update(self, memory: Memory) -> None:
        """See :meth:`MemoryStore.update`."""
        self.store.update(memory)

    def delete(self, memory_id: str) -> bool:
        """See :meth:`MemoryStore.delete`."""
        return self.store.delete(memory_id)

    def list_all(self) -> list[Memory]:
        """See :meth:`MemoryStore.list_all`."""
        return self.store.list_all()

    def search_by_embedding(self, embedding: Sequence[float], top_k: int) -> list[Memory]:
        """See :meth:`MemoryStore.search_by_embedding`."""
        return self.store.search_by_embedding(embedding, top_k)

    def __len__(self) -> int:
        """Number of memories stored."""
        return len(self.store)

    # The columnar part.
    def candidate_bank(
        self,
        embedding: Sequence[float] | np.ndarray | None,
        limit: int | None,
        now: datetime,
        *,
        also: Sequence[str] = (),
        lexical: LexicalQuery | None = None,
        with_memories: bool = False,
    ) -> CandidateBank:
        """See :meth:`ColumnarStore.candidate_bank` (built from the store's memories,
        which the bank always carries; a lexical query builds one index from
        ``list_all`` for both its shortlist and its statistics)."""
        del with_memories  # the memories are at hand anyway
        wanted = lexical is not None and (
            bool(lexical.shortlist and lexical.terms) or lexical.statistics
        )
        index = self._lexicon() if wanted else None
        if limit is None:
            found = self.store.list_all()
        else:  # plain stores get the query as a list of floats
            query = embedding.tolist() if isinstance(embedding, np.ndarray) else embedding
            found = self.store.search_by_embedding(query if query is not None else [], limit)
        if index is not None and lexical is not None and lexical.shortlist and lexical.terms:
            also = [*also, *index.search(
                lexical.terms, lexical.shortlist, lexical.k1, lexical.b, lexical.analysis
            )]
        if also:
            have = {m.id for m in found}
            found = list(found)
            for mid in also:
                if mid not in have and (memory := self.store.get(mid)) is not None:
                    found.append(memory)
                    have.add(mid)
        bank = bank_from_memories(found, now, embedding)
        if index is not None and lexical is not None and lexical.statistics:
            bank = dataclasses.replace(bank, lexical=index.inputs(
                lexical.terms, bank.ids, analysis=lexical.analysis
            ))
        return bank

    def memories(self, memory_ids: Sequence[str]) -> list[Memory]:
        """See :meth:`ColumnarStore.memories` (the store's own batched read when it
        has one, else one ``get`` per id)."""
        if _reads_many(self.store):
            many: list[Memory] = self.store.memories(memory_ids)
            return many
        found = (self.store.get(i) for i in memory_ids)
        return [m for m in found if m is not None]

    def columns(self, now: datetime) -> tuple[list[str], MemoryColumns]:
        """See :meth:`ColumnarStore.columns` (built from ``list_all``)."""
        memories = self.store.list_all()
        dim = embedding_dim(None, memories)
        return [m.id for m in memories], columns_from_memories(memories, now, dim)

    def scoring_bank(
        self, now: datetime, dtype: Any = np.float32
    ) -> tuple[list[str | None], MemoryColumns, int | None]:
        """See :meth:`ColumnarStore.scoring_bank` (built from ``list_all``)."""
        memories = self.store.list_all()
        dim = embedding_dim(None, memories)
        size = bucket_size(len(memories))
        cols = pad_columns(columns_from_memories(memories, now, dim), size)
        ids: list[str | None] = [m.id for m in memories]
        ids += [None] * (size - len(memories))
        has_embedding = any(m.embedding for m in memories)
        return ids, device_columns(cols, dtype), dim if has_embedding else None

    def _lexicon(self) -> LexicalIndex:
        return LexicalIndex.from_pairs((m.id, m.content) for m in self.store.list_all())

    def lexical_search(
        self, terms: Sequence[str], k: int, k1: float, b: float, analysis: str = "none"
    ) -> list[str]:
        """See :meth:`ColumnarStore.lexical_search` (an index built from ``list_all``)."""
        return self._lexicon().search(terms, k, k1, b, analysis)

    def lexical_inputs(
        self, terms: Sequence[str], memory_ids: Sequence[str], analysis: str = "none"
    ) -> LexicalInputs:
        """See :meth:`ColumnarStore.lexical_inputs` (an index built from ``list_all``)."""
        return self._lexicon().inputs(terms, memory_ids, analysis=analysis)

    def linking_to(self, memory_ids: Iterable[str]) -> list[str]:
        """See :meth:`ColumnarStore.linking_to` (the store's own ``linking_to`` when it
        has one and no subclass overrides its reads, else a scan of ``list_all``)."""
        if isinstance(self.store, LinkIndexStore):
            own = self.store.linking_to
            found: list[str] = own(memory_ids)
            return found
        targets = set(memory_ids)
        return [
            m.id for m in self.store.list_all()
            if any(lk.target_id in targets for lk in m.tag.resonance_links)
        ]

    def pending_ids(self) -> list[str]:
        """See :meth:`ColumnarStore.pending_ids` (a scan of ``list_all``)."""
        return [m.id for m in self.store.list_all() if m.tag.pending_appraisal]

    def transaction(self) -> AbstractContextManager[Any]:
        """The store's ``transaction()`` when it has one, else a no-op context."""
        return store_transaction(self.store)


def _library_store(store: object) -> bool:
    """Whether ``store`` is a library store or view, whose optional capabilities are
    declared (a user's own class may hold an unrelated attribute of the name)."""
    return isinstance(store, BackendStore) or type(store).__module__.startswith(
        "emotional_memory."
    )


def _reads_many(store: object) -> TypeGuard[ManyReadingStore]:
    """Whether ``store`` is a library store or view with a batched ``memories``."""
    return _library_store(store) and isinstance(store, ManyReadingStore)


def columnar(store: MemoryStore) -> ColumnarStore:
    """``store`` itself when it is a :class:`ColumnarStore`, else a :class:`StoreAdapter`.

    A subclass of a library store that overrides ``get``, ``list_all`` or
    ``search_by_embedding`` but not ``candidate_bank`` gets the adapter, which calls
    its overrides (as the engine always did). A class of the user's own that has every
    protocol method (defined, or answered by ``__getattr__``) is used as it is.

    Args:
        store: any memory store.

    Returns:
        The columnar view the engine uses.
    """
    if isinstance(store, ColumnarStore):
        return store
    out: ColumnarStore = (
        TagWritingAdapter(store) if _library_store(store) and isinstance(store, TagWritingStore)
        else StoreAdapter(store)
    )
    return out


class TagWritingAdapter(StoreAdapter):
    """A :class:`StoreAdapter` over a store that writes tags itself (batched), which
    the retrieval side effects then use instead of one ``update`` per memory."""

    def update_tags(self, tags: Sequence[tuple[str, EmotionalTag]]) -> None:
        """See :meth:`~emotional_memory.stores.base.TagWritingStore.update_tags`."""
        store: Any = self.store
        store.update_tags(tags)
