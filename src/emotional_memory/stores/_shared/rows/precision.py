"""Embedding precision: the storage dtypes, rounding an embedding into a row, reading it back.

``embedding_dtype`` (see :mod:`emotional_memory.stores._shared.rows.store`) picks how the search
matrix stores each embedding: raw float64 rows, raw float32 rows (with the float64
values kept aside when rounding would lose them), or unit rows in float16 / bfloat16
with the float64 norm. Here are the dtypes, the exact bfloat16 rounding, the norm
ranges outside which a row is kept aside and always rescored exactly, the writing and
decoding of a row, and the proven bound on the float32 cosine's rounding that
:mod:`emotional_memory.stores._shared.rows.search` relies on.
"""

from __future__ import annotations

import math
from typing import Any, Literal

import ml_dtypes
import numpy as np

from emotional_memory.stores._shared.ranking import (
    F32_NORM_MAX,
    F32_NORM_MIN,
    NORM_MAX,
    NORM_MIN,
    row_norm,
)
from emotional_memory.stores._shared.rows.columns import RowColumns, aligned_zeros

EmbeddingDType = Literal["float64", "float32", "float16", "bfloat16"]
EMBEDDING_DTYPES: tuple[str, ...] = ("float64", "float32", "float16", "bfloat16")

# Storage of each reduced-precision mode: (numpy dtype, relative rounding of a stored
# entry with respect to the stored embedding, absolute rounding of a subnormal entry).
# Half-precision rows *are* the stored embedding (up to its float64 scale), so they
# add no storage rounding; float32 rows may round a float64 embedding kept aside.
_STORAGE: dict[str, tuple[Any, float, float]] = {
    "float32": (np.float32, 2.0**-24, 2.0**-150),
    "float16": (np.float16, 0.0, 2.0**-25),
    "bfloat16": (np.uint16, 0.0, 2.0**-134),  # bfloat16 bits held in uint16
}


def to_bfloat16_bits(values: np.ndarray) -> np.ndarray:
    """Round finite float32 values to bfloat16 (nearest, ties to even); uint16 bits."""
    return np.ascontiguousarray(values, dtype=np.float32).astype(ml_dtypes.bfloat16).view(np.uint16)


def from_bfloat16_bits(bits: np.ndarray) -> np.ndarray:
    """bfloat16 bits (uint16) to float32, exactly."""
    return np.asarray(bits, dtype=np.uint16).view(ml_dtypes.bfloat16).astype(np.float32)


class EmbeddingPrecision(RowColumns):
    """Writing and reading the embedding columns of a row in the store's precision.

    A mixin of :class:`~emotional_memory.stores.InMemoryStore` (see :class:`RowColumns`).
    """

    # Float64 embeddings kept aside: one slot (a row of ``_side``) per such row,
    # ``_side_slot[row]`` (-1: none); freed slots are reused before ``_side`` grows.
    _side: np.ndarray  # (slots, dim) float64
    _side_slot: np.ndarray  # per row (a row array), int64
    _side_free: list[int]
    _side_top: int  # slots handed out so far (free ones included)
    _n_embedded: int
    _n_special: int  # live embedded rows that are always rescored exactly

    def _new_matrix(self, rows: int, dim: int) -> np.ndarray:
        if self._mode == "float64":
            return np.zeros((rows, dim), dtype=np.float64)
        return aligned_zeros((rows, dim), _STORAGE[self._mode][0])

    def _public_matrix(self) -> np.ndarray:
        if self._mode == "bfloat16":
            import ml_dtypes

            return self._matrix.view(ml_dtypes.bfloat16)
        return self._matrix

    def _write_row(self, row: int, vec: np.ndarray | None, *, empty: bool) -> bool:
        """Write an embedding (or its absence) into ``row``, whose counts are cleared.

        Returns:
            False when the stored embedding differs from ``vec`` (half precision).
        """
        if vec is None:
            if self._matrix.shape[1]:
                self._matrix[row] = 0
            self._empty[row] = empty
            if self._n_embedded == 0:
                self._dim = None
            return True
        with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
            norm = row_norm(vec)
        lossless = True
        if self._mode == "float64":
            self._matrix[row] = vec
            in_range = NORM_MIN <= norm <= NORM_MAX
        elif self._mode == "float32":
            in_range = F32_NORM_MIN <= norm <= F32_NORM_MAX
            if in_range:
                rounded = vec.astype(np.float32)
                self._matrix[row] = rounded
                self._scale[row] = np.float32(1.0 / norm)
                # np.array_equal's test (same shape here), without its overhead
                if not (rounded.astype(np.float64) == vec).all():
                    self._keep_aside(row, vec)
        else:
            in_range = NORM_MIN <= norm <= NORM_MAX
            if in_range:
                unit = (vec / norm).astype(np.float32)
                if self._mode == "bfloat16":
                    bits = to_bfloat16_bits(unit)
                    self._matrix[row] = bits
                    stored = from_bfloat16_bits(bits).astype(np.float64)
                else:
                    half = unit.astype(np.float16)
                    self._matrix[row] = half
                    stored = half.astype(np.float64)
                self._decode[row] = norm
                self._scale[row] = np.float32(1.0 / row_norm(stored))
                decoded = stored * norm
                with np.errstate(over="ignore", invalid="ignore"):
                    norm = row_norm(decoded)
                lossless = bool(np.array_equal(decoded, vec))
        if self._mode != "float64" and not in_range:
            self._matrix[row] = 0
            self._keep_aside(row, vec)
        self._special[row] = bool(math.isfinite(norm) and norm > 0.0 and not in_range)
        self._norms[row] = norm
        self._has[row] = True
        self._n_embedded += 1
        self._bias[row] = 0.0
        if self._special[row]:
            self._n_special += 1
            self._bias[row] = np.inf
        return lossless

    def _keep_aside(self, row: int, vec: np.ndarray) -> None:
        """Keep ``vec`` (row ``row``'s float64 embedding) in a slot of the side matrix."""
        self._side_slot[row] = self._side_put(vec)
        self._aside[row] = True

    def _side_put(self, vec: np.ndarray) -> int:
        """Write a float64 embedding into a free slot of ``_side`` (grown, doubling,
        when none is free; made anew at ``vec``'s width when no slot is in use).

        Returns:
            The slot.
        """
        dim = vec.shape[0]
        if self._side.shape[1] != dim and len(self._side_free) == self._side_top:
            self._side = np.zeros((0, dim), dtype=np.float64)
            self._side_free, self._side_top = [], 0
        if self._side_free:
            slot = self._side_free.pop()
        else:
            slot = self._side_top
            self._side_top += 1
            if slot == self._side.shape[0]:
                grown = np.zeros((max(16, 2 * slot), dim), dtype=np.float64)
                grown[:slot] = self._side
                self._side = grown
        self._side[slot] = vec
        return slot

    def _side_nbytes(self) -> int:
        """Bytes of the float64 embeddings kept aside (slots in use)."""
        return (self._side_top - len(self._side_free)) * self._side.shape[1] * 8

    def _clear_embedding(self, row: int) -> None:
        """Forget the embedding of ``row`` (counts included)."""
        self._search_epoch += 1
        if self._has[row]:
            self._n_embedded -= 1
            if self._special[row]:
                self._n_special -= 1
        if self._aside[row]:
            self._side_free.append(int(self._side_slot[row]))
            self._side_slot[row] = -1
        self._has[row] = False
        self._empty[row] = False
        self._aside[row] = False
        self._special[row] = False
        self._scale[row] = 0.0
        self._bias[row] = -np.inf
        self._decode[row] = 0.0
        self._norms[row] = 0.0

    def _exact_row(self, row: int) -> np.ndarray:
        """The stored embedding of ``row`` (which has one) in float64 (a row of the
        side matrix, read-only, for a row kept aside: use it before the next write)."""
        dim = self._dim or 0
        if self._aside[row]:
            view = self._side[self._side_slot[row]]
            view.flags.writeable = False
            return view
        if self._mode == "float64":
            return self._matrix[row, :dim].copy()
        if self._mode == "float32":
            return self._matrix[row, :dim].astype(np.float64)
        return self._upcast(self._matrix[row, :dim]).astype(np.float64) * self._decode[row]

    def _exact_rows(self, rows: np.ndarray) -> np.ndarray:
        """Stored embeddings of ``rows`` in float64, ``(len(rows), D)`` (a new array;
        rows without an embedding hold arbitrary values)."""
        dim = self._dim or 0
        aside = self._side_top > len(self._side_free)  # some row kept aside
        if aside and len(rows) and self._aside[rows].all():
            # Every row kept aside (float32 mode, embeddings float32 cannot hold):
            # one gather of the side matrix, none of the search matrix.
            return self._side[self._side_slot[rows]]
        block = self._matrix[rows, :dim]
        if self._mode == "float64":
            vectors = block
        elif self._mode == "float32":
            vectors = block.astype(np.float64)
        else:
            vectors = self._upcast(block).astype(np.float64) * self._decode[rows, None]
        if aside:
            kept = np.flatnonzero(self._aside[rows])
            if len(kept):
                vectors[kept] = self._side[self._side_slot[rows[kept]]]
        return vectors

    def _upcast(self, block: np.ndarray) -> np.ndarray:
        """A block of the search matrix as float32 (exact)."""
        if self._mode == "bfloat16":
            return from_bfloat16_bits(block)
        return block.astype(np.float32)

    def _error_bound(self) -> float:
        """Bound on |approximate cosine - float64 cosine| for queries whose norm lies in
        [NORM_MIN, NORM_MAX] and rows that are not special.

        The approximate cosine is ``fl32(fl32(row . q32) * scale)``: the query's
        rounding to float32 and the float32 accumulation cost at most
        ``(D + 2) 2^-24`` relative to ``|row| |q|``, the float32 ``scale = 1 / |row|``
        and its product ``2 * 2^-24``, the row's own rounding from a float64
        embedding ``rel`` (float32 mode only: half-precision rows are the stored
        embedding) and subnormal entries ``sub * sqrt(D)``; doubled for safety.
        """
        _, rel, sub = _STORAGE[self._mode]
        dim = float(self._dim or 0)
        return 2.0 * ((dim + 4.0) * 2.0**-24 + rel + sub * math.sqrt(dim)) + 1e-12
