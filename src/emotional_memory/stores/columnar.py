"""The store protocol the engine works through: columns in, objects out.

The engine ranks, links and prunes through :class:`ColumnarStore`: retrieval
candidates come as ids plus :class:`~emotional_memory._bank.CandidateBank` columns
(no :class:`~emotional_memory.models.Memory` is built for a candidate), and memories
are built only for what is returned or changed. ``InMemoryStore`` and ``SQLiteStore``
implement it on their row arrays; :class:`StoreAdapter` serves any plain
:class:`~emotional_memory.interfaces.MemoryStore` (the six protocol methods) through it
with the very same answers, so the engine has one code path per operation:

==================================  =======================================
engine operation                    ColumnarStore method
==================================  =======================================
retrieve: candidates                :meth:`ColumnarStore.candidate_bank`
retrieve: lexical shortlist, s7     ``candidate_bank(lexical=...)``
plan / explanations                 :meth:`ColumnarStore.memories`
prune: strengths                    :meth:`ColumnarStore.columns`
batch scoring (``BatchRetriever``)  :meth:`ColumnarStore.scoring_bank`
delete: links to drop               ``linking_to``
elaborate_pending                   ``pending_ids``
every write                         ``transaction``
==================================  =======================================

Two optional extensions cut round trips for a store behind a network
(``PostgresStore`` has both; the engine uses them when present):

- ``counts_candidates = True`` with ``candidate_bank(..., everything_upto=n)``: the
  store counts its memories in the candidate read itself (the bank's ``total``) and
  answers as with ``limit=None`` when it holds at most ``n``; the engine's retrieve
  then asks no ``len`` first (it embeds the query before an empty store is seen);
- ``modify_memories(ids, change)``: the retrieval side effects' read-modify-write
  (``change`` maps the current memories to their new versions and may run more than
  once), with the guarantees of ``transaction`` + ``memories`` + ``update``.

:func:`columnar` picks the store itself or wraps it, once per store.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence
from contextlib import AbstractContextManager
from datetime import datetime
from typing import Any, Protocol, runtime_checkable

import numpy as np

from emotional_memory._bank import (
    CandidateBank,
    LexicalQuery,
    bank_from_memories,
    columns_from_memories,
    embedding_dim,
)
from emotional_memory.interfaces import MemoryStore, store_transaction
from emotional_memory.kernel.columns import MemoryColumns, bucket_size, pad_columns
from emotional_memory.kernel.lexical import LexicalInputs
from emotional_memory.lexical import LexicalIndex
from emotional_memory.models import Memory

__all__ = ["ColumnarStore", "StoreAdapter", "columnar"]


def _device_columns(cols: MemoryColumns, dtype: Any) -> MemoryColumns:
    """Numpy columns as JAX device arrays, every float leaf as ``dtype``.

    Args:
        cols: numpy columns.
        dtype: the float dtype.

    Returns:
        The columns as JAX arrays.
    """
    import jax

    def cast(x: Any) -> Any:
        arr = np.asarray(x)
        return arr.astype(dtype) if arr.dtype.kind == "f" else arr

    out: MemoryColumns = jax.device_put(jax.tree_util.tree_map(cast, cols))
    return out


@runtime_checkable
class ColumnarStore(MemoryStore, Protocol):
    """A :class:`MemoryStore` that also answers the engine in columns (see module docs)."""

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
        """The retrieval candidates of a query as columns, under one read of the store.

        Args:
            embedding: the query embedding, shape (D,), or None.
            limit: the semantic shortlist: the ``limit`` memories
                :meth:`search_by_embedding` returns; None: every memory, in insertion
                order.
            now: aware datetime for the ages.
            also: ids appended after the shortlist when not in it, in this order;
                ids no longer stored are skipped.
            lexical: the retrieve's lexical part, read with the candidates: its BM25
                shortlist is appended after ``also`` (the same rule), and with
                ``statistics`` the bank carries the candidates' term statistics. The
                engine passes it only when the retrieve has a lexical part.
            with_memories: also build the candidates' :class:`Memory` objects (the
                bank's ``memories``, read with the columns), for a full plan.

        Returns:
            The :class:`CandidateBank` (dimension: the query's, else the memories').

        Raises:
            ValueError: a query whose length differs from the memories' embeddings.
        """
        ...

    def memories(self, memory_ids: Sequence[str]) -> list[Memory]:
        """The stored memories of ``memory_ids``, in that order (missing ones skipped).

        Args:
            memory_ids: the ids.

        Returns:
            The memories.
        """
        ...

    def columns(self, now: datetime) -> tuple[list[str], MemoryColumns]:
        """Every memory as float64 columns, in insertion order (unpadded).

        Args:
            now: aware datetime for the ages.

        Returns:
            ``(ids, columns)``; the columns' embedding may be a read-only view of the
            store (use it before the next write).
        """
        ...

    def scoring_bank(
        self, now: datetime, dtype: Any = np.float32
    ) -> tuple[list[str | None], MemoryColumns, int | None]:
        """Every memory as padded JAX columns for batch scoring, one consistent copy.

        Args:
            now: aware datetime for the ages.
            dtype: numpy dtype of the float columns other than the embedding.

        Returns:
            ``(row_ids, columns, dim)``: the memory id of each of the N rows (a power
            of two; None on padding and free rows, whose ``valid`` is False), the
            columns as JAX arrays copied from one read of the store (embeddings as
            stored: use their rows' cosines), and the embedding dimension (None when
            no memory has one: the embedding column is then (N, 1) zeros).
        """
        ...

    def lexical_search(
        self, terms: Sequence[str], k: int, k1: float, b: float, analysis: str = "none"
    ) -> list[str]:
        """Up to ``k`` memory ids by BM25 of ``terms``, best first (lexical signal s7).

        Args:
            terms: query terms.
            k: shortlist size.
            k1: BM25 k1.
            b: BM25 b.
            analysis: the lexical analysis of ``terms`` (``lexical_stemmer``).

        Returns:
            Memory ids.
        """
        ...

    def lexical_inputs(
        self, terms: Sequence[str], memory_ids: Sequence[str], analysis: str = "none"
    ) -> LexicalInputs:
        """Term statistics of candidates, in candidate order (lexical signal s7).

        Args:
            terms: query terms.
            memory_ids: the candidates.
            analysis: the lexical analysis of ``terms`` (``lexical_stemmer``).

        Returns:
            Unpadded :class:`~emotional_memory.kernel.LexicalInputs`.
        """
        ...

    def linking_to(self, memory_ids: Iterable[str]) -> list[str]:
        """Ids of the memories holding a link to any of ``memory_ids``, in insertion order.

        Args:
            memory_ids: the link targets.

        Returns:
            The linking memories' ids.
        """
        ...

    def pending_ids(self) -> list[str]:
        """Ids of the memories pending appraisal (dual-path encoding), in insertion order.

        Returns:
            The ids.
        """
        ...

    def transaction(self) -> AbstractContextManager[Any]:
        """All-or-nothing block of writes (re-entrant).

        Returns:
            The context manager.
        """
        ...


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
        """See :meth:`ColumnarStore.memories`."""
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
        return ids, _device_columns(cols, dtype), dim if has_embedding else None

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
        own = getattr(self.store, "linking_to", None)
        if callable(own) and not overrides_any(self.store, _STOOD_IN_FOR):
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


_STOOD_IN_FOR = ("get", "list_all", "search_by_embedding")
"""The protocol methods whose answers ``candidate_bank`` and ``memories`` give without
calling them: a subclass overriding one of them (and not ``candidate_bank``) is served
through :class:`StoreAdapter`, so its override is honoured."""


def _library_class(cls: type) -> type | None:
    """The most derived class of ``cls``'s bases that this library defines, if any."""
    return next((c for c in cls.__mro__ if c.__module__.startswith("emotional_memory.")), None)


def overrides_any(store: object, names: Sequence[str]) -> bool:
    """Whether ``store``'s class, a subclass of one of this library's stores, replaces
    any of the methods ``names`` of that store.

    A store's column paths (retrieval's ``candidate_bank``, encoding's row linker)
    answer without calling its protocol methods; a user's subclass overriding one of
    those methods is served through them instead, so the override is honoured.

    Args:
        store: a store object.
        names: method names.

    Returns:
        True when some method differs from the library class's (False for a class
        with no library base).
    """
    cls = type(store)
    base = _library_class(cls)
    return base is not None and any(getattr(cls, n) is not getattr(base, n) for n in names)


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
    if isinstance(store, ColumnarStore) and (
        overrides_any(store, ("candidate_bank",)) or not overrides_any(store, _STOOD_IN_FOR)
    ):
        return store
    out: ColumnarStore = StoreAdapter(store)
    return out
