"""Filling an empty :class:`~emotional_memory.stores.InMemoryStore` from columns at once.

A durable store that opens rebuilds its in-memory cache from every stored row. Saving
one :class:`~emotional_memory.models.Memory` per row costs a validated model tree, an
embedding list and a row write each (about 80 us per memory at D = 384); here the rows
arrive already decoded into columns (:class:`RowBlock`: the tag blocks, the embedding
matrix, the norms, ...) and are written with a few array assignments. The result is
the store :meth:`RowStore.save` would build from the same memories, row for row
(``tests/stores/sqlite/test_sqlite_bulk_load.py`` compares every array).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from emotional_memory.stores._shared import records as _records
from emotional_memory.stores._shared.ranking import F32_NORM_MAX, F32_NORM_MIN
from emotional_memory.stores._shared.rows.columns import NEVER_US

if TYPE_CHECKING:
    from emotional_memory.stores._shared.rows.store import RowStore


@dataclass
class RowBlock:
    """N memories of the common (compact) shape as columns, in insertion order.

    Attributes:
        ids: the N distinct memory ids.
        contents: their contents.
        metadata: their metadata (None for an empty dict).
        links: their packed links (:func:`~emotional_memory.stores._shared.records.pack_links`'
            records; None for none), target ids shared with ``ids`` where stored.
        tagf: ``(N, TAG_F)`` float64 tag block.
        tagi: ``(N, TAG_I)`` int64 tag block, label codes in ``labels``.
        labels: the label table of those codes.
        scopes: the distinct scope paths, ``scopes[0] == ()``.
        scope_ids: ``(N,)`` int32 index of each row's path in ``scopes``.
        expires_us: ``(N,)`` int64 expiry in microseconds (``NEVER_US``: never).
        dim: the embedding dimension (None: no memory has an embedding).
        narrow: ``(N, dim)`` float32 embedding rows (a row stored in float64 holds
            anything; zeros without an embedding).
        wide_rows: ``(K,)`` rows whose embedding is given in float64 (``wide``).
        wide: ``(K, dim)`` float64 embeddings of those rows.
        has: ``(N,)`` whether a row has a non-empty embedding.
        empty: ``(N,)`` whether a row's embedding is ``[]``.
        norms: ``(N,)`` float64 norm of each embedding (``sqrt(v . v)`` of its float64
            values, as :meth:`RowStore.save` computes it; 0 without one).
    """

    ids: list[str]
    contents: list[str]
    metadata: list[dict[str, Any] | None]
    links: list[Any]
    tagf: np.ndarray
    tagi: np.ndarray
    labels: _records.LabelTable
    scopes: list[tuple[str, ...]]
    scope_ids: np.ndarray
    expires_us: np.ndarray
    dim: int | None
    narrow: np.ndarray
    wide_rows: np.ndarray
    wide: np.ndarray
    has: np.ndarray
    empty: np.ndarray
    norms: np.ndarray


def fill_rows(store: RowStore, block: RowBlock) -> None:
    """Write ``block`` into the empty float32-mode ``store`` (rows 0..N-1).

    Args:
        store: an empty :class:`InMemoryStore` with ``embedding_dtype="float32"``.
        block: the rows.

    Raises:
        RuntimeError: the store is not empty or not in float32 mode.
    """
    if store._row_of or store._size or store._mode != "float32":
        raise RuntimeError("fill_rows needs an empty float32 store")
    n = len(block.ids)
    if n == 0:
        return
    store._ensure_capacity(n)
    has = block.has
    if block.dim is not None and has.any():
        store._set_dim(block.dim)
        norms = np.where(has, block.norms, 0.0)
        in_range = has & (norms >= F32_NORM_MIN) & (norms <= F32_NORM_MAX)
        matrix = store._matrix
        matrix[:n] = block.narrow
        aside = has & ~in_range
        if len(block.wide_rows):
            wide = block.wide
            with np.errstate(over="ignore", invalid="ignore"):
                rounded = wide.astype(np.float32)
                inexact = ~(rounded.astype(np.float64) == wide).all(axis=1)
            matrix[block.wide_rows] = rounded
            aside[block.wide_rows[inexact]] = True
        outside = np.flatnonzero(has & ~in_range)
        if len(outside):
            matrix[outside] = 0.0
        with np.errstate(divide="ignore"):
            scale = np.where(in_range, (1.0 / np.where(in_range, norms, 1.0)).astype(np.float32), 0)
        store._scale[:n] = scale
        special = has & np.isfinite(norms) & (norms > 0.0) & ~in_range
        store._special[:n] = special
        store._bias[:n] = np.where(has, np.where(special, np.inf, 0.0), -np.inf)
        store._norms[:n] = norms
        store._has[:n] = has
        store._n_embedded = int(has.sum())
        store._n_special = int(special.sum())
        kept = np.flatnonzero(aside)
        if len(kept):
            exact = np.empty((len(kept), block.dim), dtype=np.float64)
            where_wide = {int(r): i for i, r in enumerate(block.wide_rows.tolist())}
            for j, row in enumerate(kept.tolist()):
                w = where_wide.get(row)
                exact[j] = block.wide[w] if w is not None else block.narrow[row]
            store._side = exact
            store._side_top = len(kept)
            store._side_free = []
            store._side_slot[kept] = np.arange(len(kept))
            store._aside[kept] = True
    store._empty[:n] = block.empty
    store._valid[:n] = True
    store._seq[:n] = np.arange(n)
    store._next_seq = n
    store._tagf[:n] = block.tagf
    store._tagi[:n] = block.tagi
    store._labels = block.labels
    store._row_ids = list(block.ids)
    store._row_of = dict(zip(block.ids, range(n), strict=True))
    store._content = list(block.contents)
    store._meta = list(block.metadata)
    store._links = list(block.links)
    store._size = n
    placed = bool(block.scope_ids.any()) or bool((block.expires_us != NEVER_US).any())
    if placed:
        store._scopes = list(block.scopes)
        store._scope_index = {scope: i for i, scope in enumerate(block.scopes)}
        store._scope_id[:n] = block.scope_ids
        store._expires_us[:n] = block.expires_us
        store._placed = True
        store._any_expiry = bool((block.expires_us != NEVER_US).any())
    store._version += 1
