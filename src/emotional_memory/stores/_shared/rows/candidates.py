"""Retrieval candidates of :class:`~emotional_memory.stores.InMemoryStore` as columns.

The rows found by the exact search are gathered straight from the row arrays into a
:class:`~emotional_memory._bank.CandidateBank`: no :class:`Memory` is rebuilt for a
candidate. The values are bit-identical to
:func:`~emotional_memory._bank.bank_from_memories` over the same memories (a test
compares them byte for byte): float64 embeddings as stored, tag numbers as written,
ages ``(now_us - timestamp_us) / 1e6`` (the correctly rounded quotient of the same
integer microseconds ``timedelta.total_seconds`` divides), link strengths as packed.
"""

from __future__ import annotations

import dataclasses
import functools
import struct
import threading
from collections.abc import Callable, Iterator, Sequence
from datetime import datetime
from typing import Any

import jax
import numpy as np

from emotional_memory._bank import (
    COLUMNS_TREEDEF,
    CandidateBank,
    LexicalQuery,
    padded_adjacency,
    rescale_far_rows,
)
from emotional_memory.kernel.columns import MemoryColumns, bucket_size
from emotional_memory.kernel.plan import FEATURE_WIDTH
from emotional_memory.lexical import LexicalIndex
from emotional_memory.models import Memory
from emotional_memory.stores._shared import records as _records
from emotional_memory.stores._shared.records import to_microseconds
from emotional_memory.stores._shared.rows.columns import aligned_zeros
from emotional_memory.stores._shared.rows.search import EmbeddingSearch


@functools.lru_cache(maxsize=64)
def _strengths(count: int) -> struct.Struct:
    """The leading ``count`` float64 strengths of a packed link record."""
    return struct.Struct(f"<{count}d")


class CandidateRows(EmbeddingSearch):
    """The candidate reads of the store's
    :class:`~emotional_memory.stores.columnar.ColumnarStore` protocol.

    A mixin of :class:`~emotional_memory.stores.InMemoryStore` (its lock, rows and
    search), whose ``__init__`` creates the attributes declared here.
    """

    _lock: threading.RLock
    _whole: dict[str, Memory]  # memories kept as objects (odd shapes)
    _memory_at: Callable[..., Memory]  # rebuilds the memory of a live row
    _dim: int | None  # the embedding dimension (None while no memory has one)
    columns: Callable[..., tuple[list[str | None], MemoryColumns]]  # every row as columns
    lexical_index: Callable[[], LexicalIndex]  # the store's inverted index (s7)

    def candidate_bank(
        self,
        embedding: Sequence[float] | np.ndarray | None,
        limit: int | None,
        now: datetime,
        *,
        also: Sequence[str] = (),
        lexical: LexicalQuery | None = None,
        with_memories: bool = False,
        within: np.ndarray | None = None,
    ) -> CandidateBank:
        """The retrieval candidates of a query as columns (see
        :meth:`~emotional_memory.stores.columnar.ColumnarStore.candidate_bank`).

        Args:
            embedding: the query embedding, shape (D,), or None.
            limit: shortlist size (the rows :meth:`search_by_embedding` would return),
                or None for every memory in insertion order.
            now: aware datetime for the ages.
            also: ids appended when not already candidates (unknown ids skipped).
            lexical: the lexical shortlist (appended after ``also``) and statistics,
                from the store's index under the same lock.
            with_memories: also rebuild the candidates' memories (``memories``).
            within: only these live rows (ascending) are candidates, as in a store
                holding only them (a scope, a filter: see ``stores/_selected.py``);
                None: every row.

        Returns:
            The :class:`CandidateBank` (``memories`` None unless asked for).

        Raises:
            ValueError: a query whose length differs from the stored embeddings.
        """
        with self._lock:
            allowed: set[str] | None = None
            if within is not None and (lexical is not None or also):
                allowed = {self._row_ids[r] for r in within.tolist()}
            if limit is None:
                rows: list[int] = (
                    self._live_row_list() if within is None else within.tolist()
                )
            elif within is None:
                found = self._search_rows(embedding if embedding is not None else [], limit)
                rows = found.tolist()
            else:
                rows = self._search_rows_in(  # type: ignore[attr-defined]
                    embedding if embedding is not None else [], limit, within
                ).tolist()
            if lexical is not None and lexical.shortlist and lexical.terms:
                also = [*also, *self.lexical_index().search(
                    lexical.terms, lexical.shortlist, lexical.k1, lexical.b, lexical.analysis,
                    within=allowed,
                )]
            if also:
                have = set(rows)
                for mid in also:
                    row = self._row_of.get(mid)
                    if row is not None and row not in have and (
                        allowed is None or mid in allowed
                    ):
                        rows.append(row)
                        have.add(row)
            bank = self._bank_of_rows(rows, embedding, now)
            if with_memories:
                bank = dataclasses.replace(bank, memories=[self._memory_at(r) for r in rows])
            if lexical is not None and lexical.statistics:
                stats = self.lexical_index().inputs(
                    lexical.terms, bank.ids, analysis=lexical.analysis, within=allowed
                )
                bank = dataclasses.replace(bank, lexical=stats)
            return bank

    def scoring_bank(
        self, now: datetime, dtype: Any = np.float32
    ) -> tuple[list[str | None], MemoryColumns, int | None]:
        """Every row as padded JAX columns for batch scoring (see
        :meth:`~emotional_memory.stores.columnar.ColumnarStore.scoring_bank`): the
        capacity's rows, the search matrix as the embedding, copied under the lock.
        """
        with self._lock:
            row_ids, cols = self.columns(now, padded=True, dtype=dtype)
            # The embedding is a view of the live search matrix, which JAX would share
            # without a copy on CPU: copy it while no write can change it (scoring
            # runs after the lock is released; a compaction would move its rows).
            # One copy, into an aligned buffer JAX then shares (an unaligned copy
            # would be copied a second time).
            private = aligned_zeros(cols.embedding.shape, cols.embedding.dtype)
            private[...] = cols.embedding
            self._write_far_rows(private)
            cols = dataclasses.replace(cols, embedding=private)
            return row_ids, jax.device_put(cols), self._dim

    def _write_far_rows(self, private: np.ndarray) -> None:
        """Make every embedded row of ``private`` (a copy of the search matrix) score
        its exact cosine in float32: rows kept aside as zeros (norm outside the
        precision's range) get their float64 embedding, and rows beyond float32's
        range (float64 mode) are rescaled, by :func:`rescale_far_rows`."""
        if private.dtype == np.float64:
            scaled = rescale_far_rows(private)
            if scaled is not private:
                private[...] = scaled
            return
        for row in np.flatnonzero(self._special[: private.shape[0]]).tolist():
            vec = np.asarray(self._exact_row(row), np.float64)
            private[row, : vec.shape[0]] = rescale_far_rows(vec[None, :])[0]

    def _bank_of_rows(
        self, rows: list[int], embedding: Sequence[float] | np.ndarray | None, now: datetime
    ) -> CandidateBank:
        """The bank of live ``rows`` (candidate order); callers hold the lock."""
        n = len(rows)
        idx = np.asarray(rows, dtype=np.int64)
        ids: list[str] = [self._row_ids[r] for r in rows]  # type: ignore[misc]
        has = self._has[idx]
        store_dim: int = self._dim or 0
        query_dim = len(embedding) if embedding is not None else 0
        if query_dim and has.any() and store_dim != query_dim:
            first = int(np.flatnonzero(has)[0])
            raise ValueError(
                f"embedding length mismatch: memory {ids[first]!r} has {store_dim}, "
                f"expected {query_dim}"
            )
        dim = max(query_dim or (store_dim if has.any() else 0), 1)
        size = bucket_size(n)
        emb = np.zeros((size, dim), dtype=np.float64)
        if has.any():
            emb[np.flatnonzero(has)] = self._exact_rows(idx[has])
        # The kernel's (size, 13) features matrix, written once; the columns' small
        # leaves are views of it (the ranking hands the matrix over as it is).
        features = np.zeros((size, FEATURE_WIDTH), dtype=np.float64)
        tagf = self._tagf[idx]
        features[:n, :9] = tagf[:, _records.F_AFFECT.start : _records.F_VELOCITY.stop]
        features[:n, 9] = (to_microseconds(now) - self._tagi[idx, _records.I_TIMESTAMP]) / 1e6
        features[:n, 10] = tagf[:, _records.F_CONSOLIDATION]
        features[:n, 11] = tagf[:, _records.F_RETRIEVAL]
        valid = np.zeros((size,), dtype=bool)
        valid[:n] = True
        leaves = [
            emb, features[:, 0:3], features[:, 3:6], features[:, 6:9], features[:, 9],
            features[:, 10], features[:, 11], features[:, 12], valid,
        ]  # embedding, affect, mood, velocity, age, consolidation, retrievals, activation
        columns: MemoryColumns = jax.tree_util.tree_unflatten(COLUMNS_TREEDEF, leaves)
        return CandidateBank(
            ids=ids, columns=columns, adjacency=self._adjacency(rows, ids, size), dim=dim,
            features=features,
        )

    def _adjacency(
        self, rows: list[int], ids: list[str], size: int
    ) -> tuple[np.ndarray, np.ndarray]:
        """Links among the candidate ``rows`` (as ``adjacency_from_memories``), padded
        to ``size`` rows."""
        whole = self._whole

        def links() -> Iterator[tuple[Sequence[str], Sequence[float]]]:
            for i, row in enumerate(rows):
                kept_whole = whole.get(ids[i]) if whole else None
                if kept_whole is not None:
                    kept = kept_whole.tag.resonance_links
                    yield [lk.target_id for lk in kept], [lk.strength for lk in kept]
                elif (record := self._links[row]) is not None:
                    yield record[0], _strengths(len(record[0])).unpack_from(record[1])
                else:
                    yield (), ()

        return padded_adjacency(links(), ids, size)
