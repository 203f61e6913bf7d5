"""The row arrays of :class:`~emotional_memory.stores.InMemoryStore`: layout, growth, compaction.

Every memory is one row: a row of the search matrix plus one entry in each per-row
array (:attr:`RowColumns._ROW_ARRAYS`) and in each per-row Python list. Rows are
appended in insertion order and only compaction moves them (keeping their order), so
row order is insertion order; capacity doubles when full; deletes leave tombstones
that compaction squeezes out once they outnumber the live rows. What a row's embedding
columns hold in each precision is :mod:`emotional_memory.stores._shared.rows.precision`'s part.
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

from emotional_memory.stores._shared import records as _records

NEVER_US = int(np.iinfo(np.int64).max)
"""``_expires_us`` of a row that never expires."""

_INITIAL_CAPACITY = 16
# Compact once tombstones exceed both this count and the number of live rows.
_COMPACT_MIN_DEAD = 16
# The search matrix's buffer starts on this byte boundary (zero-copy hand-off to JAX).
_ALIGN = 64


def aligned_zeros(shape: tuple[int, ...], dtype: Any) -> np.ndarray:
    """Zeros whose buffer starts on a 64-byte boundary (zero-copy hand-off to JAX)."""
    itemsize = np.dtype(dtype).itemsize
    nbytes = int(np.prod(shape, dtype=np.int64)) * itemsize
    raw = np.zeros(nbytes + _ALIGN, dtype=np.uint8)
    offset = (-raw.ctypes.data) % _ALIGN
    return raw[offset : offset + nbytes].view(dtype).reshape(shape)


class RowColumns:
    """The store's rows as struct-of-arrays columns, and the operations on all rows.

    A mixin of :class:`~emotional_memory.stores.InMemoryStore`, whose ``__init__``
    creates the attributes declared here.
    """

    _mode: str  # the embedding_dtype
    _row_of: dict[str, int]  # live memory id -> row
    # One entry per row, live or tombstoned (see InMemoryStore.__init__).
    _row_ids: list[str | None]
    _content: list[str | None]
    _meta: list[dict[str, Any] | None]
    _links: list[Any]
    _size: int  # rows in use, live or tombstoned
    _dead: int  # tombstoned rows among the first ``_size``
    _capacity: int
    _dim: int | None
    _matrix: np.ndarray  # the search matrix, (capacity, dim)
    _jax_views: tuple[Any, ...] | None  # the search's cached JAX views of the matrix
    _norms: np.ndarray
    _special: np.ndarray
    _scale: np.ndarray
    _bias: np.ndarray
    _decode: np.ndarray
    _has: np.ndarray
    _empty: np.ndarray
    _aside: np.ndarray
    _side_slot: np.ndarray
    _valid: np.ndarray
    _tagf: np.ndarray
    _tagi: np.ndarray
    _scope_id: np.ndarray  # int32: the row's scope path, an index into _scopes
    _expires_us: np.ndarray  # int64: expiry in microseconds, NEVER_US for none
    _seq: np.ndarray  # int64: the row's insertion number, increasing with the row
    _next_seq: int  # the next new row's insertion number
    _version: int  # bumped by every write (selected views cache their rows by it)
    _search_epoch: int  # bumped when an embedding is removed or rows are renumbered
    _reallocations: int
    _tx_depth: int  # open transaction levels (no compaction inside one)

    # Per-row arrays (leading axis = capacity), grown and compacted together.
    _ROW_ARRAYS: tuple[str, ...] = (
        "_norms",
        "_special",
        "_scale",
        "_bias",
        "_decode",
        "_has",
        "_empty",
        "_aside",
        "_side_slot",
        "_valid",
        "_tagf",
        "_tagi",
        "_scope_id",
        "_expires_us",
        "_seq",
    )
    # Fill value of unused rows (0 for every other row array).
    _ROW_FILL: ClassVar[dict[str, float]] = {
        "_bias": -np.inf, "_side_slot": -1, "_expires_us": NEVER_US,
    }

    # Views of the tag blocks used as the kernel's columns.
    @property
    def _affect(self) -> np.ndarray:
        return self._tagf[:, _records.F_AFFECT]

    @property
    def _mood(self) -> np.ndarray:
        return self._tagf[:, _records.F_MOOD]

    @property
    def _velocity(self) -> np.ndarray:
        return self._tagf[:, _records.F_VELOCITY]

    @property
    def _timestamp_us(self) -> np.ndarray:
        return self._tagi[:, _records.I_TIMESTAMP]

    @property
    def _consolidation(self) -> np.ndarray:
        return self._tagf[:, _records.F_CONSOLIDATION]

    @property
    def _retrieval_count(self) -> np.ndarray:
        return self._tagf[:, _records.F_RETRIEVAL]

    def _new_matrix(self, rows: int, dim: int) -> np.ndarray:
        """A zero search matrix of ``rows`` x ``dim`` in the storage dtype (see
        :class:`~emotional_memory.stores._shared.rows.precision.EmbeddingPrecision`)."""
        raise NotImplementedError

    def _live_rows(self) -> np.ndarray | None:
        """Indices of live rows when tombstones exist, else None (all of ``[:size]``)."""
        if not self._dead:
            return None
        return np.flatnonzero(self._valid[: self._size])

    def _live_row_list(self) -> list[int]:
        live = self._live_rows()
        return list(range(self._size)) if live is None else live.tolist()

    def _set_dim(self, dim: int) -> None:
        """Fix the embedding dimension (only while no row holds an embedding)."""
        self._search_epoch += 1
        if self._matrix.shape[1] != dim:
            self._matrix = self._new_matrix(self._capacity, dim)
            self._jax_views = None  # views of the old matrix: let it go
            self._reallocations += 1
        self._dim = dim

    def _ensure_capacity(self, needed: int) -> None:
        if needed <= self._capacity:
            return
        capacity = max(self._capacity, _INITIAL_CAPACITY)
        while capacity < needed:
            capacity *= 2
        n = self._size
        matrix = self._new_matrix(capacity, self._matrix.shape[1])
        matrix[:n] = self._matrix[:n]
        self._matrix = matrix
        for name in self._ROW_ARRAYS:
            old = getattr(self, name)
            # aligned like the matrix: the jitted search shares scale and bias too
            grown = aligned_zeros((capacity, *old.shape[1:]), old.dtype)
            fill = self._ROW_FILL.get(name, 0)
            if fill != 0:
                grown.fill(fill)
            grown[:n] = old[:n]
            setattr(self, name, grown)
        self._capacity = capacity
        self._jax_views = None  # views of the old arrays: let them go
        self._reallocations += 1

    def _maybe_compact(self) -> None:
        live = self._size - self._dead
        if self._tx_depth == 0 and self._dead > _COMPACT_MIN_DEAD and self._dead > live:
            self._compact()

    def _compact(self) -> None:
        """Squeeze tombstones out, keeping the relative (insertion) order of rows."""
        n = self._size
        live = np.flatnonzero(self._valid[:n])
        k = live.shape[0]
        self._matrix[:k] = self._matrix[live]
        self._matrix[k:n] = 0
        for name in self._ROW_ARRAYS:
            arr = getattr(self, name)
            arr[:k] = arr[live]
            arr[k:n] = self._ROW_FILL.get(name, 0)
        rows = live.tolist()
        self._row_ids = [self._row_ids[r] for r in rows]
        self._content = [self._content[r] for r in rows]
        self._meta = [self._meta[r] for r in rows]
        self._links = [self._links[r] for r in rows]
        self._row_of = {mid: i for i, mid in enumerate(self._row_ids) if mid is not None}
        self._size = k
        self._dead = 0
        self._version += 1
        self._search_epoch += 1
