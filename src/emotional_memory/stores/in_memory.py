"""In-process memory store with vectorised column caches (SPEC 2, 5).

Memories live in a dict that preserves insertion order. Next to it the store keeps
struct-of-arrays columns, so :meth:`InMemoryStore.search_by_embedding` is one
matrix-vector product and :meth:`InMemoryStore.columns` hands a whole bank to the
batch scorer, never a Python loop over memories:

- the **search matrix** of embeddings, in ``embedding_dtype`` (below), plus float64
  row norms and ``has_embedding`` / ``valid`` masks;
- the **tag columns** of the scoring kernel: core affect, mood snapshot and momentum
  velocity (``(N, 3)`` float64 each), the timestamp as int64 microseconds since the
  epoch (ages are then bit-identical to ``(now - timestamp).total_seconds()``),
  consolidation strength and retrieval count.

Column layout, and why:

- Rows are appended in insertion order and never reordered except by compaction,
  which keeps their relative order. So row order *is* insertion order, and a stable
  sort over rows resolves ties by insertion order with no extra sequence column.
- Capacity doubles when full (amortised O(1) appends; O(log N) reallocations).
- Deleting a memory leaves a tombstone (``valid`` False). Tombstones are compacted
  away once they outnumber the live rows, so the work stays amortised O(1) per delete.
- Re-saving an existing id rewrites its row in place, keeping its position. When the
  new version shares the old one's embedding list (``model_copy`` of a tag update,
  as the engine does for links and retrieval bookkeeping) only the tag columns are
  rewritten. Embedding lists are treated as immutable.

**Embedding precision.** ``embedding_dtype`` selects the search matrix:

- ``"float64"``: the raw embeddings, searched exactly as SPEC states (a float64
  matrix-vector product), 8 bytes per value;
- ``"float32"`` (default), ``"float16"``, ``"bfloat16"``: unit-normalised rows in 4 or
  2 bytes per value. A search computes approximate cosines with one product, keeps a
  pool of the best ``k + max(8, k // 2)`` rows, recomputes their cosines exactly in
  float64 from the memories' own (full-precision) embeddings, and widens the pool
  whenever the float32 rounding bound could let an outside row reach the k-th exact
  score. The answer is therefore the one of the float64 computation, ties included
  (by insertion order); only the speed depends on the precision. Rows whose norm is
  outside [1e-150, 1e150] (where float64's own arithmetic over/underflows) are always
  rescored exactly, and so are such queries.

The :class:`~emotional_memory.models.Memory` objects always keep their full-precision
embedding lists; the search matrix is a cache next to them.

Transactions keep an undo log of the operations done inside them and replay it
backwards on an exception, so a failed block costs only what it did, not a copy of
the whole store.
"""

from __future__ import annotations

import functools
import math
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from types import TracebackType
from typing import Any, ClassVar, Literal

import numpy as np

from emotional_memory.models import Memory

EmbeddingDType = Literal["float64", "float32", "float16", "bfloat16"]
EMBEDDING_DTYPES: tuple[str, ...] = ("float64", "float32", "float16", "bfloat16")

_INITIAL_CAPACITY = 16
# Compact once tombstones exceed both this count and the number of live rows.
_COMPACT_MIN_DEAD = 16
# Below this many embedded rows a full stable argsort beats argpartition.
_PARTITION_MIN_ROWS = 2048
# Rows (and queries) whose float64 norm lies outside this range are scored exactly:
# there float64's own products may over/underflow, so no rounding bound holds.
_NORM_MIN = 1e-150
_NORM_MAX = 1e150
# From this many rows on, the approximate search runs as one jitted XLA program
# (product + top-k on the matrix shared zero-copy, as the bare ``E @ q`` +
# ``lax.top_k`` baseline does); below it numpy is faster (no dispatch). Half precision
# switches earlier: numpy has no fast float16/bfloat16 product.
_JAX_MIN_ROWS = 8192
_HALF_JAX_MIN_ROWS = 8192
_HALF_CHUNK = 4096
# Approximate rows fetched per half-precision search (room for pool widening).
_HALF_TOP = 256
# Batched searches: queries per block and rows per scan step.
_QUERY_BLOCK = 256
_BLOCK_CHUNK = 16384
# Rows rescored in float64 beyond k (before any widening).
_POOL_MARGIN = 8
_ALIGN = 64

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND = timedelta(microseconds=1)

# Storage of each reduced-precision mode: (numpy dtype, relative rounding of a stored
# unit-vector entry, absolute rounding of a subnormal entry).
_STORAGE: dict[str, tuple[Any, float, float]] = {
    "float32": (np.float32, 2.0**-24, 2.0**-150),
    "float16": (np.float16, 2.0**-11, 2.0**-25),
    "bfloat16": (np.uint16, 2.0**-8, 2.0**-134),  # bfloat16 bits held in uint16
}


@dataclass(frozen=True)
class _Undo:
    """One entry of the transaction undo log."""

    kind: Literal["insert", "replace", "delete"]
    memory_id: str
    previous: Memory | None
    row: int


def _embedding_vector(memory: Memory) -> np.ndarray | None:
    """The memory's embedding as a float64 (D,) array, or None when missing or empty.

    Raises:
        ValueError: when the embedding is not one-dimensional.
    """
    emb = memory.embedding
    if emb is None or len(emb) == 0:
        return None
    vec = np.asarray(emb, dtype=np.float64)
    if vec.ndim != 1:
        raise ValueError(f"embedding must be a flat list of floats, got shape {vec.shape}")
    return vec


def _norm(vector: np.ndarray) -> float:
    """``np.linalg.norm`` without an overflow warning (an infinite norm is handled)."""
    with np.errstate(over="ignore", invalid="ignore"):
        return float(np.linalg.norm(vector))


def _row_norm(row: np.ndarray) -> float:
    """Euclidean norm of one row; equals ``np.linalg.norm`` without its dispatch cost."""
    return float(np.sqrt(np.dot(row, row)))


def to_microseconds(moment: datetime) -> int:
    """An aware datetime as integer microseconds since the Unix epoch (exact)."""
    return (moment - _EPOCH) // _MICROSECOND


def _aligned_zeros(shape: tuple[int, int], dtype: Any) -> np.ndarray:
    """Zeros whose buffer starts on a 64-byte boundary (zero-copy hand-off to JAX)."""
    itemsize = np.dtype(dtype).itemsize
    nbytes = shape[0] * shape[1] * itemsize
    raw = np.zeros(nbytes + _ALIGN, dtype=np.uint8)
    offset = (-raw.ctypes.data) % _ALIGN
    return raw[offset : offset + nbytes].view(dtype).reshape(shape)


def _to_bfloat16_bits(values: np.ndarray) -> np.ndarray:
    """Round finite float32 values to bfloat16 (nearest, ties to even); uint16 bits."""
    bits = np.ascontiguousarray(values, dtype=np.float32).view(np.uint32)
    rounded = bits + (np.uint32(0x7FFF) + ((bits >> np.uint32(16)) & np.uint32(1)))
    return (rounded >> np.uint32(16)).astype(np.uint16)


def _from_bfloat16_bits(bits: np.ndarray) -> np.ndarray:
    """bfloat16 bits (uint16) to float32, exactly."""
    return (bits.astype(np.uint32) << np.uint32(16)).view(np.float32)


@functools.cache
def _jax_search(mode: str) -> tuple[Callable[..., Any], Callable[..., Any], Callable[..., Any]]:
    """Jitted ``(scores, top, top_many)`` over a search matrix of ``mode``.

    ``scores(matrix, bias, query, last, step)`` is ``matrix @ query + bias`` in float32,
    ``-inf`` on rows after ``last`` (half matrices are upcast a chunk at a time);
    ``top(..., count)`` is its ``lax.top_k``; ``top_many(matrix, bias, queries, lasts,
    step, count)`` is the top ``count`` per query of a (B, D) block, scanning the rows
    in chunks with a running top-k, so memory stays O(B * chunk).
    """
    import jax
    import jax.numpy as jnp

    from emotional_memory.kernel.batch import merge_top_k

    highest = jax.lax.Precision.HIGHEST

    def upcast(block: Any) -> Any:
        if mode == "bfloat16":
            block = jax.lax.bitcast_convert_type(block, jnp.bfloat16)
        return block.astype(jnp.float32)

    def scores(matrix: Any, bias: Any, query: Any, last: Any, step: int) -> Any:
        rows, dim = matrix.shape
        if mode == "float32":
            dots = jnp.matmul(matrix, query, precision=highest)
        else:
            chunk = min(_HALF_CHUNK, step)
            blocks = matrix.reshape(rows // chunk, chunk, dim)
            dots = jax.lax.map(
                lambda b: jnp.matmul(upcast(b), query, precision=highest), blocks
            ).reshape(rows)
        return jnp.where(jnp.arange(rows) <= last, dots + bias, -jnp.inf)

    def top(matrix: Any, bias: Any, query: Any, last: Any, step: int, count: int) -> Any:
        return jax.lax.top_k(scores(matrix, bias, query, last, step), count)

    def top_many(
        matrix: Any, bias: Any, queries: Any, lasts: Any, step: int, count: int
    ) -> Any:
        rows = matrix.shape[0]
        chunk = min(_BLOCK_CHUNK, step)
        n_queries = queries.shape[0]

        def body(carry: Any, chunk_id: Any) -> tuple[Any, None]:
            start = chunk_id * chunk
            block = jax.lax.dynamic_slice_in_dim(matrix, start, chunk, axis=0)
            block_bias = jax.lax.dynamic_slice_in_dim(bias, start, chunk, axis=0)
            dots = jnp.matmul(queries, upcast(block).T, precision=highest)
            row = start + jnp.arange(chunk, dtype=jnp.int32)
            chunk_scores = jnp.where(
                row[None, :] <= lasts[:, None], dots + block_bias[None, :], -jnp.inf
            )
            best_scores, best_index = carry
            return merge_top_k(best_scores, best_index, chunk_scores, start, count), None

        init = (
            jnp.full((n_queries, count), -jnp.inf, jnp.float32),
            jnp.full((n_queries, count), -1, jnp.int32),
        )
        (values, index), _ = jax.lax.scan(
            body, init, jnp.arange(rows // chunk, dtype=jnp.int32)
        )
        return values, index

    return (
        jax.jit(scores, static_argnames=("step",)),
        jax.jit(top, static_argnames=("step", "count")),
        jax.jit(top_many, static_argnames=("step", "count")),
    )


def _count_bucket(count: int, rows: int) -> int:
    """``count`` rounded up to a power of two (>= 32, <= rows): fewer compiled shapes."""
    return min(rows, max(32, 1 << (count - 1).bit_length()))


def _check_top_k(top_k: object) -> None:
    if isinstance(top_k, bool) or not isinstance(top_k, int | np.integer):
        raise TypeError(f"top_k must be an int, got {type(top_k).__name__}")


class InMemoryStore:
    """A :class:`~emotional_memory.interfaces.MemoryStore` held in process memory.

    Besides the protocol methods it exposes the column caches for batch scoring:
    :meth:`columns`, :meth:`search_matrix`, :meth:`embedding_matrix`, :attr:`dim`,
    :attr:`capacity`, :attr:`embedding_dtype` and the :attr:`reallocations`
    counter. It is thread-safe (one re-entrant lock, also offered as
    :meth:`locked`) and supports :meth:`transaction` with rollback.

    Args:
        embedding_dtype: precision of the search matrix: ``"float32"`` (default),
            ``"float16"`` or ``"bfloat16"`` (unit rows, exact answers through a
            float64 rescoring of a candidate pool) or ``"float64"`` (raw rows).
    """

    def __init__(self, *, embedding_dtype: EmbeddingDType = "float32") -> None:
        if embedding_dtype not in EMBEDDING_DTYPES:
            raise ValueError(
                f"embedding_dtype must be one of {EMBEDDING_DTYPES}, got {embedding_dtype!r}"
            )
        self._mode: str = embedding_dtype
        self._lock = threading.RLock()
        self._memories: dict[str, Memory] = {}
        self._row_of: dict[str, int] = {}
        self._row_ids: list[str | None] = []
        self._size = 0  # rows in use, live or tombstoned
        self._dead = 0  # tombstoned rows among the first ``_size``
        self._capacity = 0
        self._n_embedded = 0
        self._n_special = 0  # live embedded rows with a norm outside [_NORM_MIN, _NORM_MAX]
        self._dim: int | None = None
        # float64 mode: raw rows. Other modes: unit rows in the storage dtype.
        self._matrix = self._new_matrix(0, 0)
        self._norms = np.zeros(0, dtype=np.float64)
        self._special = np.zeros(0, dtype=bool)
        # Added to approximate cosines: 0 on searchable rows, -inf on rows without a
        # live embedding (or unused), +inf on special rows (always rescored).
        self._bias = np.zeros(0, dtype=np.float32)
        self._has = np.zeros(0, dtype=bool)
        self._valid = np.zeros(0, dtype=bool)
        self._affect = np.zeros((0, 3), dtype=np.float64)
        self._mood = np.zeros((0, 3), dtype=np.float64)
        self._velocity = np.zeros((0, 3), dtype=np.float64)
        self._timestamp_us = np.zeros(0, dtype=np.int64)
        self._consolidation = np.zeros(0, dtype=np.float64)
        self._retrieval_count = np.zeros(0, dtype=np.float64)
        self._reallocations = 0
        self._tx_depth = 0
        self._undo: list[_Undo] = []

    # ------------------------------------------------------------------ protocol

    def save(self, memory: Memory) -> None:
        """Insert a memory, or replace the one with the same id (keeping its position).

        Args:
            memory: the memory to store.

        Raises:
            TypeError: when ``memory`` is not a :class:`Memory`.
            ValueError: when its embedding's dimension differs from the store's
                (the store is left unchanged).
        """
        if not isinstance(memory, Memory):
            raise TypeError(f"memory must be a Memory, got {type(memory).__name__}")
        with self._lock:
            self._put(memory)

    def get(self, memory_id: str) -> Memory | None:
        """Look a memory up by id.

        Args:
            memory_id: the id.

        Returns:
            The memory, or None when absent.
        """
        with self._lock:
            return self._memories.get(memory_id)

    def update(self, memory: Memory) -> None:
        """Replace an existing memory in place.

        Args:
            memory: the new version; its id must already be stored.

        Raises:
            KeyError: when no memory has this id.
            ValueError: on an embedding dimension mismatch (store unchanged).
        """
        if not isinstance(memory, Memory):
            raise TypeError(f"memory must be a Memory, got {type(memory).__name__}")
        with self._lock:
            if memory.id not in self._memories:
                raise KeyError(memory.id)
            self._put(memory)

    def delete(self, memory_id: str) -> bool:
        """Remove a memory.

        Args:
            memory_id: the id.

        Returns:
            True when the memory existed.
        """
        with self._lock:
            if memory_id not in self._memories:
                return False
            self._remove(memory_id)
            self._maybe_compact()
            return True

    def list_all(self) -> list[Memory]:
        """All memories, in insertion order.

        Returns:
            A new list (the memories themselves are immutable).
        """
        with self._lock:
            return list(self._memories.values())

    def count(self) -> int:
        """Number of memories stored (same as ``len(store)``)."""
        return len(self)

    def __len__(self) -> int:
        """Number of memories stored."""
        return len(self._memories)

    def __contains__(self, memory_id: object) -> bool:
        """Whether a memory with this id is stored."""
        return memory_id in self._memories

    def search_by_embedding(self, embedding: Sequence[float], top_k: int) -> list[Memory]:
        """Nearest embedded memories by cosine similarity (SPEC 5).

        Memories without an embedding are skipped; ``top_k <= 0`` gives ``[]``; a
        zero-norm query gives the first ``top_k`` embedded memories in insertion
        order; otherwise memories are ranked by their float64 cosine similarity,
        highest first, with NaN similarities (and zero-norm rows) counting as 0 and
        ties resolved by insertion order. Every ``embedding_dtype`` returns this very
        answer.

        Args:
            embedding: the (D,) query vector.
            top_k: how many memories to return at most.

        Returns:
            Up to ``top_k`` memories, best first.

        Raises:
            ValueError: when the query's length differs from the store's dimension.
        """
        with self._lock:
            rows = self._search_rows(embedding, top_k)
            return [self._memories[self._row_ids[r]] for r in rows.tolist()]

    # ------------------------------------------------------------- column cache

    @property
    def dim(self) -> int | None:
        """The common embedding dimension, or None while no memory has an embedding."""
        return self._dim

    @property
    def capacity(self) -> int:
        """Rows allocated in the column arrays (a power of two, or 0)."""
        return self._capacity

    @property
    def reallocations(self) -> int:
        """How many times the column arrays were reallocated (growth or a new dimension)."""
        return self._reallocations

    @property
    def embedding_dtype(self) -> str:
        """Precision of the search matrix (see the module documentation)."""
        return self._mode

    def locked(self) -> threading.RLock:
        """The store's re-entrant lock: hold it (``with store.locked():``) while using
        views returned by :meth:`columns` or :meth:`search_matrix`."""
        return self._lock

    def embedding_nbytes(self) -> int:
        """Bytes held by the search matrix (allocated capacity, all rows)."""
        return int(self._matrix.nbytes)

    def column_nbytes(self) -> int:
        """Bytes held by all column arrays together (search matrix included)."""
        return int(sum(getattr(self, name).nbytes for name in self._ROW_ARRAYS)) + int(
            self._matrix.nbytes
        )

    def embedding_matrix(self) -> tuple[list[str], np.ndarray, np.ndarray]:
        """The embeddings of all memories, in insertion order, in full precision.

        With ``embedding_dtype="float64"`` the matrix is a view of the cache. With a
        reduced-precision search matrix it is rebuilt from the memories' own float64
        embeddings (O(N * D) work; prefer :meth:`columns` or :meth:`search_matrix`
        for batch scoring).

        Returns:
            ``(ids, matrix, has_embedding)``: the N memory ids; a float64 ``(N, D)``
            matrix (``(N, 0)`` while :attr:`dim` is None; rows of memories without an
            embedding are zeros); a bool ``(N,)`` mask of which rows hold an
            embedding. The arrays are read-only and may be views of the cache: they
            are valid until the next write to the store (copy them to keep them).
        """
        with self._lock:
            ids = list(self._memories)
            cols = self._dim if self._dim is not None else 0
            if self._dead and self._tx_depth == 0:
                self._compact()
            live = self._live_rows()
            has = self._has[live] if live is not None else self._has[: self._size]
            if self._mode == "float64":
                matrix = (
                    self._matrix[live, :cols] if live is not None
                    else self._matrix[: self._size, :cols]
                )
            else:
                matrix = np.zeros((len(ids), cols), dtype=np.float64)
                if cols:
                    for i, memory in enumerate(self._memories.values()):
                        if memory.embedding:
                            matrix[i] = memory.embedding
            matrix = matrix.view()
            has = has.view()
            matrix.flags.writeable = False
            has.flags.writeable = False
            return ids, matrix, has

    def search_matrix(self) -> tuple[list[str | None], np.ndarray, np.ndarray, np.ndarray]:
        """The search matrix over all allocated rows (no copy).

        Returns:
            ``(row_ids, matrix, norms, valid)``: per row its memory id (None for a
            deleted or unused row); the ``(capacity, D)`` matrix (raw float64 rows in
            ``"float64"`` mode, unit rows otherwise; bfloat16 as ``ml_dtypes``
            bfloat16); float64 row norms of the raw embeddings; a bool mask of rows
            that hold a live memory with an embedding. Read-only views, valid until
            the next write (hold :meth:`locked` while using them).
        """
        with self._lock:
            cap = self._capacity
            row_ids = list(self._row_ids) + [None] * (cap - len(self._row_ids))
            matrix = self._public_matrix()
            valid = self._valid & self._has
            return row_ids, _readonly(matrix), _readonly(self._norms), valid

    def columns(
        self, now: datetime | float, *, padded: bool = False, dtype: Any = np.float64
    ) -> tuple[list[str | None], Any]:
        """The bank as :class:`~emotional_memory.kernel.MemoryColumns`, for batch scoring.

        Ages are computed here, at the boundary, in float64: from a datetime they are
        bit-identical to ``(now - tag.timestamp).total_seconds()``.

        Args:
            now: an aware datetime, or Unix time in seconds.
            padded: False: the live memories only, in insertion order. True: every
                allocated row (a power of two, so compiled shapes repeat), with
                ``valid`` False on deleted and unused rows; no compaction, no copy of
                the embedding matrix.
            dtype: numpy dtype of the float columns other than the embedding.

        Returns:
            ``(row_ids, columns)``: the memory id of each row (None on invalid rows)
            and the columns. ``columns.embedding`` is the search matrix (see
            :meth:`search_matrix`): a read-only view valid until the next write. Use
            the cosine of its rows, not their raw values. ``activation`` is zero.
        """
        from emotional_memory.kernel.columns import MemoryColumns

        with self._lock:
            if isinstance(now, datetime):
                if now.tzinfo is None:
                    raise ValueError("now must be timezone-aware")
                now_us = to_microseconds(now)

                def ages_of(ts: np.ndarray) -> np.ndarray:
                    return np.asarray((now_us - ts) / 1e6)
            else:
                now_s = float(now)

                def ages_of(ts: np.ndarray) -> np.ndarray:
                    return np.asarray(now_s - ts / 1e6)
            if padded:
                cap = self._capacity
                take: Any = slice(0, cap)
                row_ids: list[str | None] = list(self._row_ids) + [None] * (
                    cap - len(self._row_ids)
                )
                valid = self._valid.copy()
            else:
                if self._dead and self._tx_depth == 0:
                    self._compact()
                live = self._live_rows()
                take = live if live is not None else slice(0, self._size)
                row_ids = list(self._memories)
                valid = np.ones(len(row_ids), dtype=bool)
            dim = self._dim if self._dim is not None else 0
            matrix = self._public_matrix()[take, :dim] if dim else np.zeros(
                (len(row_ids), 1), dtype=self._public_matrix().dtype
            )
            cols = MemoryColumns(
                embedding=_readonly(matrix),
                affect=np.asarray(self._affect[take], dtype=dtype),
                mood=np.asarray(self._mood[take], dtype=dtype),
                velocity=np.asarray(self._velocity[take], dtype=dtype),
                age_seconds=np.asarray(ages_of(self._timestamp_us[take]), dtype=dtype),
                consolidation=np.asarray(self._consolidation[take], dtype=dtype),
                retrieval_count=np.asarray(self._retrieval_count[take], dtype=dtype),
                activation=np.zeros(len(row_ids), dtype=dtype),
                valid=valid,
            )
            return row_ids, cols

    def _public_matrix(self) -> np.ndarray:
        if self._mode == "bfloat16":
            import ml_dtypes

            return self._matrix.view(ml_dtypes.bfloat16)
        return self._matrix

    def _live_rows(self) -> np.ndarray | None:
        """Indices of live rows when tombstones exist, else None (all of ``[:size]``)."""
        if not self._dead:
            return None
        return np.flatnonzero(self._valid[: self._size])

    # ------------------------------------------------------------------ search

    def _search_rows(
        self, embedding: Sequence[float], top_k: int, limit: int | None = None
    ) -> np.ndarray:
        """Cache row indices of :meth:`search_by_embedding`'s answer.

        Args:
            embedding: the (D,) query vector.
            top_k: how many rows at most.
            limit: only rows ``<= limit`` are eligible (default: all).

        Returns:
            An int64 array of row indices into the cache, best first.
        """
        _check_top_k(top_k)
        empty = np.zeros(0, dtype=np.int64)
        if top_k <= 0 or self._n_embedded == 0 or self._dim is None:
            return empty
        last = self._size - 1 if limit is None else min(int(limit), self._size - 1)
        query = self._check_query(embedding)
        searchable = self._count_searchable(last)
        k = min(int(top_k), searchable)
        if k == 0:
            return empty
        if query.shape[0] == 0:
            return self._searchable_rows(last)[:k]
        query_norm = _norm(query)
        if query_norm == 0.0:
            return self._searchable_rows(last)[:k]
        if self._mode == "float64":
            return self._search_exact(query, query_norm, k, last)
        if not math.isfinite(query_norm):
            # Every float64 similarity is NaN (or 0) then, so all count as 0.
            return self._searchable_rows(last)[:k]
        if not _NORM_MIN <= query_norm <= _NORM_MAX:
            return self._rank_exact(self._searchable_rows(last), query, query_norm, k)
        pool_size = self._pool_size(k, searchable)
        if pool_size >= searchable:
            return self._rank_exact(self._searchable_rows(last), query, query_norm, k)
        query_unit = (query / query_norm).astype(np.float32)
        rows, values = self._approximate_top(query_unit, pool_size + 1, last)
        return self._finish_pooled(
            query, query_norm, query_unit, k, rows, values, last, pool_size
        )

    def _check_query(self, embedding: Sequence[float]) -> np.ndarray:
        """The query as float64; ValueError on a bad shape or a dimension mismatch."""
        query = np.asarray(embedding, dtype=np.float64)
        if query.ndim != 1:
            raise ValueError(f"embedding must be one-dimensional, got shape {query.shape}")
        if query.shape[0] and query.shape[0] != self._dim:
            raise ValueError(
                f"embedding length mismatch: query has {query.shape[0]}, "
                f"the store holds dimension {self._dim}"
            )
        return query

    def _count_searchable(self, last: int) -> int:
        if last >= self._size - 1:
            return self._n_embedded
        return int(np.count_nonzero(self._valid[: last + 1] & self._has[: last + 1]))

    def _pool_size(self, k: int, searchable: int) -> int:
        # Rescoring converts each pooled memory's embedding list (~8 us at D=384), so
        # the pool is small; the bound check in _finish_pooled widens it when needed.
        # Special rows carry +inf, so they always fall inside the pool.
        return min(searchable, k + max(_POOL_MARGIN, k // 2) + self._n_special)

    def _searchable_rows(self, last: int | None = None) -> np.ndarray:
        end = self._size if last is None else last + 1
        return np.flatnonzero(self._valid[:end] & self._has[:end])

    def _search_exact(
        self, query: np.ndarray, query_norm: float, k: int, last: int
    ) -> np.ndarray:
        """The float64 search over the raw matrix (``"float64"`` mode)."""
        rows = self._searchable_rows(last)
        norms = self._norms[rows]
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            dots = self._matrix[: last + 1, : self._dim] @ query
            sims = dots[rows] / (norms * query_norm)
        # A zero-norm row (its squares may have underflowed) counts as 0, as does NaN.
        sims = np.where(np.isnan(sims) | (norms == 0.0), 0.0, sims)
        return rows[_stable_top(-sims, k)]

    def _exact_similarities(
        self, rows: np.ndarray, query: np.ndarray, query_norm: float
    ) -> np.ndarray:
        """Float64 cosines of ``rows`` from the memories' own embeddings (SPEC 5)."""
        memories = self._memories
        row_ids = self._row_ids
        vectors = np.array(
            [memories[row_ids[r]].embedding for r in rows.tolist()],
            dtype=np.float64,
        ).reshape(len(rows), -1)
        norms = self._norms[rows]
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            # A row-wise multiply-reduce, not a matrix product: every row is summed in
            # the same order wherever it sits, so equal embeddings tie exactly (and
            # ties resolve by insertion order); BLAS kernels may round rows differently.
            dots = np.multiply(vectors, query).sum(axis=1)
            sims = dots / (norms * query_norm)
        return np.where(np.isnan(sims) | (norms == 0.0), 0.0, sims)

    def _rank_exact(
        self, rows: np.ndarray, query: np.ndarray, query_norm: float, k: int
    ) -> np.ndarray:
        """``rows`` (ascending) ranked by exact cosine, ties by row; the best ``k``."""
        rows = np.sort(rows)
        sims = self._exact_similarities(rows, query, query_norm)
        return rows[_stable_top(-sims, k)]

    def _error_bound(self) -> float:
        """Bound on |approximate cosine - float64 cosine| for rows and queries whose
        norms lie in [_NORM_MIN, _NORM_MAX] (storage rounding + float32 products)."""
        _, rel, sub = _STORAGE[self._mode]
        dim = float(self._dim or 0)
        return 2.0 * ((dim + 2.0) * 2.0**-24 + rel + sub * math.sqrt(dim)) + 1e-12

    def _use_jax(self) -> bool:
        limit = _JAX_MIN_ROWS if self._mode == "float32" else _HALF_JAX_MIN_ROWS
        return self._size >= limit

    def _jax_operands(self) -> tuple[Any, Any, int]:
        """The first rows of matrix and bias as JAX arrays, shared without a copy, and
        the row step.

        The row count is rounded up to a multiple of ``step = capacity / 8``, so a
        growing store compiles at most 8 shapes per capacity while multiplying at most
        1/8 of the capacity in unused rows (their bias is -inf).
        """
        import jax

        step = max(1, self._capacity // 8)
        rows = min(self._capacity, -(-self._size // step) * step)
        # Zero-copy hand-off (the matrix is 64-byte aligned); results are fetched
        # before the lock is released, so no write can race the computation.
        matrix = jax.dlpack.from_dlpack(self._matrix[:rows])
        bias = jax.dlpack.from_dlpack(self._bias[:rows])
        return matrix, bias, step

    def _approximate(self, query_unit: np.ndarray, last: int) -> np.ndarray:
        """Approximate cosines (float32) plus the row bias of rows ``[:last + 1]``."""
        end = last + 1
        if self._use_jax():
            scores, _, _ = _jax_search(self._mode)
            matrix, bias, step = self._jax_operands()
            out = scores(matrix, bias, query_unit, np.int32(last), step=step)
            return np.asarray(out)[:end]
        block = self._matrix[:end]
        if self._mode == "bfloat16":
            block = _from_bfloat16_bits(block)
        elif self._mode == "float16":
            block = block.astype(np.float32)
        return np.asarray(block @ query_unit) + self._bias[:end]

    def _approximate_top(
        self, query_unit: np.ndarray, count: int, last: int
    ) -> tuple[np.ndarray, np.ndarray]:
        """At least the ``count`` rows ``<= last`` with the highest approximate cosine
        (plus bias), best first, and their values.

        The jitted path returns a power-of-two bucket of rows (>= 256 for half
        precision, whose wider rounding bound often needs rows past the pool: then
        :meth:`_finish_pooled` finds them in this list instead of a second pass).
        """
        if self._use_jax():
            _, top, _ = _jax_search(self._mode)
            matrix, bias, step = self._jax_operands()
            wanted = count if self._mode == "float32" else max(count, _HALF_TOP)
            bucket = _count_bucket(wanted, int(matrix.shape[0]))
            values, rows = top(matrix, bias, query_unit, np.int32(last), step=step, count=bucket)
            return np.asarray(rows).astype(np.int64), np.asarray(values)
        approx = self._approximate(query_unit, last)
        part = np.argpartition(-approx, count - 1)[:count]
        order = np.argsort(-approx[part], kind="stable")
        return part[order].astype(np.int64), approx[part[order]]

    def _finish_pooled(
        self,
        query: np.ndarray,
        query_norm: float,
        query_unit: np.ndarray,
        k: int,
        rows: np.ndarray,
        values: np.ndarray,
        last: int,
        pool_size: int,
    ) -> np.ndarray:
        """Exact top-k from the approximate top rows (best first, at least
        ``pool_size + 1`` of them).

        The pool's cosines are recomputed in float64; if the k-th exact score does not
        beat the best approximate score left outside the pool by more than the
        rounding bound, every row within the bound of it is rescored too.
        """
        pool = np.sort(rows[:pool_size])
        outside_best = float(values[pool_size])
        sims = self._exact_similarities(pool, query, query_norm)
        order = _stable_top(-sims, k)
        kth = float(sims[order[-1]])
        bound = self._error_bound()
        if kth > outside_best + bound:
            return pool[order]
        threshold = np.float32(kth - bound)
        if float(threshold) > kth - bound:  # rounded up to float32: step down once
            threshold = np.nextafter(threshold, np.float32(-np.inf))
        if values[-1] < threshold:  # every row above the threshold is in the list
            extra = rows[values >= threshold]
        else:
            extra = np.flatnonzero(self._approximate(query_unit, last) >= threshold)
        return self._rank_exact(np.union1d(pool, extra), query, query_norm, k)

    def search_by_embedding_batch(
        self,
        embeddings: Sequence[Sequence[float] | None],
        top_k: int,
        *,
        visible_until: Sequence[str] | None = None,
    ) -> list[list[Memory]]:
        """:meth:`search_by_embedding` for many queries at once, same answers.

        The approximate cosines of a block of queries come from one matrix-matrix
        product (compute-bound, instead of one memory-bound matrix-vector product
        per query), then each query is finished exactly as a single search.

        Args:
            embeddings: the (D,) query vectors (None or empty: no semantic, the first
                embedded memories).
            top_k: how many memories per query.
            visible_until: optional memory id per query: the query only sees memories
                inserted no later than that one (itself included). This is what an
                engine encoding a batch needs: save every new memory first, then find
                each one's resonance candidates among the memories stored up to it.

        Returns:
            One list of up to ``top_k`` memories per query, best first.

        Raises:
            KeyError: an unknown id in ``visible_until``. ValueError: a query of the
                wrong dimension, or ``visible_until`` of the wrong length.
        """
        _check_top_k(top_k)
        with self._lock:
            n_queries = len(embeddings)
            if visible_until is not None and len(visible_until) != n_queries:
                raise ValueError(
                    f"visible_until must have one id per query ({n_queries}), "
                    f"got {len(visible_until)}"
                )
            last_row = self._size - 1
            limits = (
                [last_row] * n_queries if visible_until is None
                else [self._row_of[memory_id] for memory_id in visible_until]
            )
            answers: list[np.ndarray | None] = [None] * n_queries
            batched: list[int] = []
            units: list[np.ndarray] = []
            for j, emb in enumerate(embeddings):
                plain = (
                    top_k <= 0 or self._n_embedded == 0 or self._dim is None
                    or self._mode == "float64" or emb is None or len(emb) == 0
                )
                if not plain:
                    query = self._check_query(emb)  # type: ignore[arg-type]
                    norm = _norm(query)
                    plain = not _NORM_MIN <= norm <= _NORM_MAX  # also 0, NaN, inf
                if plain:
                    answers[j] = self._search_rows(emb or [], top_k, limits[j])
                else:
                    batched.append(j)
                    units.append((query / norm).astype(np.float32))
            if batched:
                self._finish_batch(embeddings, top_k, limits, batched, units, answers)
            memories, row_ids = self._memories, self._row_ids
            return [
                [memories[row_ids[r]] for r in rows.tolist()]
                for rows in answers
                if rows is not None
            ]

    def _finish_batch(
        self,
        embeddings: Sequence[Sequence[float] | None],
        top_k: int,
        limits: list[int],
        batched: list[int],
        units: list[np.ndarray],
        answers: list[np.ndarray | None],
    ) -> None:
        """Approximate top pools of many queries at once, then exact finishing."""
        counts = {j: self._count_searchable(limits[j]) for j in batched}
        pools = {j: self._pool_size(min(top_k, counts[j]), counts[j]) for j in batched}
        need = max(pools.values()) + 1
        use_block = self._use_jax() and need <= self._size
        if use_block:
            _, _, top_many = _jax_search(self._mode)
            matrix, bias, step = self._jax_operands()
            wanted = need if self._mode == "float32" else max(need, _HALF_TOP)
            bucket = _count_bucket(wanted, int(matrix.shape[0]))
            for start in range(0, len(batched), _QUERY_BLOCK):
                block = batched[start : start + _QUERY_BLOCK]
                query_block = np.zeros((_QUERY_BLOCK, units[0].shape[0]), np.float32)
                query_block[: len(block)] = units[start : start + len(block)]
                last = np.full(_QUERY_BLOCK, -1, np.int32)
                last[: len(block)] = [limits[j] for j in block]
                values, rows = top_many(
                    matrix, bias, query_block, last, step=step, count=bucket,
                )
                values, rows = np.asarray(values), np.asarray(rows)
                for i, j in enumerate(block):
                    self._finish_one(embeddings[j], top_k, limits[j], counts[j], pools[j],
                                     units[start + i], rows[i], values[i], answers, j)
            return
        # Small store: numpy, one matrix-matrix product per block of queries.
        n = self._size
        matrix_np = self._matrix[:n]
        if self._mode == "bfloat16":
            matrix_np = _from_bfloat16_bits(matrix_np)
        elif self._mode == "float16":
            matrix_np = matrix_np.astype(np.float32)
        row_index = np.arange(n)
        for start in range(0, len(batched), _QUERY_BLOCK):
            block = batched[start : start + _QUERY_BLOCK]
            approx = np.stack(units[start : start + len(block)]) @ matrix_np.T
            approx += self._bias[:n]
            last = np.asarray([limits[j] for j in block])
            approx[row_index[None, :] > last[:, None]] = -np.inf
            for i, j in enumerate(block):
                count = min(pools[j] + 1, n)
                part = np.argpartition(-approx[i], count - 1)[:count]
                order = part[np.argsort(-approx[i, part], kind="stable")]
                self._finish_one(embeddings[j], top_k, limits[j], counts[j], pools[j],
                                 units[start + i], order, approx[i, order], answers, j)

    def _finish_one(
        self,
        embedding: Sequence[float] | None,
        top_k: int,
        last: int,
        searchable: int,
        pool_size: int,
        query_unit: np.ndarray,
        rows: np.ndarray,
        values: np.ndarray,
        answers: list[np.ndarray | None],
        j: int,
    ) -> None:
        k = min(top_k, searchable)
        if k == 0:
            answers[j] = np.zeros(0, dtype=np.int64)
            return
        if pool_size >= searchable:
            answers[j] = self._search_rows(embedding or [], top_k, last)
            return
        query = np.asarray(embedding, dtype=np.float64)
        norm = _norm(query)
        answers[j] = self._finish_pooled(
            query, norm, query_unit, k, rows.astype(np.int64), values, last, pool_size
        )

    # ------------------------------------------------------------- transactions

    @contextmanager
    def transaction(self) -> Iterator[None]:
        """All-or-nothing block: an exception inside undoes every write made in it.

        Re-entrant: a nested block that fails undoes only its own writes (and the
        exception then propagates to the outer block as usual). The store's lock is
        held for the whole block.

        Yields:
            None.
        """
        with self._lock:
            mark = self._tx_begin()
            try:
                yield
            except BaseException:
                self._tx_rollback(mark)
                raise
            self._tx_commit()

    def close(self) -> None:
        """Nothing to release (kept for interface parity with durable stores)."""

    def __enter__(self) -> InMemoryStore:
        """Context-manager entry: the store itself."""
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        """Context-manager exit: :meth:`close`."""
        self.close()

    def _tx_begin(self) -> int:
        """Open a (possibly nested) transaction level; returns its undo-log mark."""
        self._tx_depth += 1
        return len(self._undo)

    def _tx_commit(self) -> None:
        """Close a transaction level, keeping its writes."""
        self._tx_depth -= 1
        if self._tx_depth == 0:
            self._undo.clear()
            self._maybe_compact()

    def _tx_rollback(self, mark: int) -> None:
        """Close a transaction level, undoing every write logged since ``mark``."""
        entries = self._undo[mark:]
        del self._undo[mark:]
        depth = self._tx_depth
        self._tx_depth = 0  # undo operations must not log themselves
        reorder = False
        try:
            for entry in reversed(entries):
                if entry.kind == "insert":
                    self._remove(entry.memory_id)
                elif entry.kind == "replace":
                    assert entry.previous is not None
                    self._put(entry.previous)
                else:
                    assert entry.previous is not None
                    self._revive(entry.row, entry.previous)
                    reorder = True
            if reorder:
                # Revived memories were appended to the dict; restore row order.
                live = np.flatnonzero(self._valid[: self._size]).tolist()
                memories = self._memories
                self._memories = {
                    mid: memories[mid]
                    for mid in (self._row_ids[r] for r in live)
                    if mid is not None
                }
        finally:
            self._tx_depth = depth - 1
        if self._tx_depth == 0:
            self._undo.clear()
            self._maybe_compact()

    # ---------------------------------------------------------------- internals

    # Per-row arrays (leading axis = capacity), grown and compacted together.
    _ROW_ARRAYS: tuple[str, ...] = (
        "_norms", "_special", "_bias", "_has", "_valid", "_affect", "_mood", "_velocity",
        "_timestamp_us", "_consolidation", "_retrieval_count",
    )
    # Fill value of unused rows (0 for every other row array).
    _ROW_FILL: ClassVar[dict[str, float]] = {"_bias": -np.inf}

    def _new_matrix(self, rows: int, dim: int) -> np.ndarray:
        if self._mode == "float64":
            return np.zeros((rows, dim), dtype=np.float64)
        return _aligned_zeros((rows, dim), _STORAGE[self._mode][0])

    def _put(self, memory: Memory) -> None:
        """Insert or replace ``memory``; validates before touching any state."""
        memory_id = memory.id
        previous = self._memories.get(memory_id)
        # A tag-only update (model_copy) shares the embedding list: skip the vector.
        same_vector = previous is not None and previous.embedding is memory.embedding
        vec = None if same_vector else _embedding_vector(memory)
        if vec is not None and self._dim is not None and vec.shape[0] != self._dim:
            raise ValueError(
                f"embedding dimension mismatch: memory {memory.id!r} has "
                f"{vec.shape[0]}, the store holds dimension {self._dim}"
            )
        if vec is not None and self._dim is None:
            self._set_dim(vec.shape[0])
        row = self._row_of.get(memory_id)
        if row is None:
            self._ensure_capacity(self._size + 1)
            row = self._size
            self._size += 1
            self._row_ids.append(memory_id)
            self._row_of[memory_id] = row
            self._valid[row] = True
            if self._tx_depth:
                self._undo.append(_Undo("insert", memory_id, None, row))
        else:
            if self._tx_depth:
                self._undo.append(_Undo("replace", memory_id, self._memories[memory_id], row))
            if not same_vector:
                self._clear_embedding(row)
        if not same_vector:
            self._write_row(row, vec)
        self._write_tag(row, memory)
        self._memories[memory_id] = memory

    def _clear_embedding(self, row: int) -> None:
        """Forget the embedding bookkeeping of ``row`` (counts included)."""
        if self._has[row]:
            self._n_embedded -= 1
            if self._special[row]:
                self._n_special -= 1
        self._has[row] = False
        self._special[row] = False
        self._bias[row] = -np.inf
        self._norms[row] = 0.0

    def _write_row(self, row: int, vec: np.ndarray | None) -> None:
        """Write an embedding (or its absence) into ``row``, whose counts are cleared."""
        if vec is None:
            if self._matrix.shape[1]:
                self._matrix[row] = 0
        else:
            if self._mode == "float64":
                self._matrix[row] = vec
                with np.errstate(over="ignore", invalid="ignore"):
                    norm = _row_norm(self._matrix[row])
            else:
                with np.errstate(over="ignore", invalid="ignore"):
                    norm = _row_norm(vec)
                self._write_unit(row, vec, norm)
            self._norms[row] = norm
            self._has[row] = True
            self._n_embedded += 1
            self._bias[row] = 0.0
            if self._special[row]:
                self._n_special += 1
                self._bias[row] = np.inf
        if self._n_embedded == 0:
            self._dim = None

    def _write_unit(self, row: int, vec: np.ndarray, norm: float) -> None:
        """Store ``vec / norm`` in the reduced-precision matrix (zeros when the float64
        similarity of this row is always 0 or must be computed exactly)."""
        in_range = _NORM_MIN <= norm <= _NORM_MAX  # False for 0, NaN and inf
        self._special[row] = bool(math.isfinite(norm) and norm > 0.0 and not in_range)
        if not in_range:
            self._matrix[row] = 0
            return
        unit = (vec / norm).astype(np.float32)
        if self._mode == "bfloat16":
            self._matrix[row] = _to_bfloat16_bits(unit)
        else:
            self._matrix[row] = unit

    def _write_tag(self, row: int, memory: Memory) -> None:
        """Write the kernel's tag columns of ``memory`` into ``row``."""
        tag = memory.tag
        a, m, v = tag.core_affect, tag.mood_snapshot, tag.momentum
        self._affect[row] = (a.valence, a.arousal, a.dominance)
        self._mood[row] = (m.valence, m.arousal, m.dominance)
        self._velocity[row] = (v.d_valence, v.d_arousal, v.d_dominance)
        self._timestamp_us[row] = to_microseconds(tag.timestamp)
        self._consolidation[row] = tag.consolidation_strength
        self._retrieval_count[row] = tag.retrieval_count

    def _remove(self, memory_id: str) -> None:
        """Drop ``memory_id`` (present) and tombstone its row."""
        row = self._row_of.pop(memory_id)
        previous = self._memories.pop(memory_id)
        if self._tx_depth:
            self._undo.append(_Undo("delete", memory_id, previous, row))
        self._clear_embedding(row)
        self._valid[row] = False
        self._row_ids[row] = None
        self._dead += 1
        if self._n_embedded == 0:
            self._dim = None

    def _revive(self, row: int, memory: Memory) -> None:
        """Undo a delete: put ``memory`` back into its old tombstoned ``row``."""
        vec = _embedding_vector(memory)
        if vec is not None and self._dim is None:
            self._set_dim(vec.shape[0])
        self._row_ids[row] = memory.id
        self._row_of[memory.id] = row
        self._valid[row] = True
        self._dead -= 1
        self._write_row(row, vec)
        self._write_tag(row, memory)
        self._memories[memory.id] = memory

    def _load_bulk(self, memories: list[Memory], matrix: np.ndarray | None) -> None:
        """Fill an empty store in one go (used when a durable store opens).

        Args:
            memories: the memories, in insertion order, with distinct ids.
            matrix: float64 ``(N, D)`` embeddings, row ``i`` for ``memories[i]`` (any
                values where a memory has no embedding), or None when none has one.
        """
        if self._memories or self._size:
            raise RuntimeError("_load_bulk needs an empty store")
        n = len(memories)
        has = np.fromiter((bool(m.embedding) for m in memories), dtype=bool, count=n)
        n_embedded = int(has.sum())
        self._ensure_capacity(n)
        if n_embedded:
            assert matrix is not None and matrix.shape[0] == n
            self._set_dim(matrix.shape[1])
            raw = np.array(matrix, dtype=np.float64)
            raw[~has] = 0.0
            with np.errstate(over="ignore", invalid="ignore"):
                # Row by row with the very operation ``_write_row`` uses, so norms (and
                # hence rankings) are bit-identical to those of the live store.
                for row in np.flatnonzero(has).tolist():
                    self._norms[row] = _row_norm(raw[row])
            if self._mode == "float64":
                self._matrix[:n] = raw
            else:
                for row in np.flatnonzero(has).tolist():
                    self._write_unit(row, raw[row], float(self._norms[row]))
        self._has[:n] = has
        self._valid[:n] = True
        self._n_embedded = n_embedded
        self._n_special = int(self._special[:n].sum())
        self._bias[:n] = np.where(has, np.where(self._special[:n], np.inf, 0.0), -np.inf)
        for row, memory in enumerate(memories):
            self._write_tag(row, memory)
        row_ids = [m.id for m in memories]
        self._row_ids = list(row_ids)
        self._row_of = {mid: i for i, mid in enumerate(row_ids)}
        self._memories = {m.id: m for m in memories}
        self._size = n

    def _set_dim(self, dim: int) -> None:
        """Fix the embedding dimension (only while no row holds an embedding)."""
        if self._matrix.shape[1] != dim:
            self._matrix = self._new_matrix(self._capacity, dim)
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
            grown = np.full(
                (capacity, *old.shape[1:]), self._ROW_FILL.get(name, 0), dtype=old.dtype
            )
            grown[:n] = old[:n]
            setattr(self, name, grown)
        self._capacity = capacity
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
        ids = [self._row_ids[r] for r in live.tolist()]
        self._row_ids = ids
        self._row_of = {mid: i for i, mid in enumerate(ids) if mid is not None}
        self._size = k
        self._dead = 0


def _readonly(array: np.ndarray) -> np.ndarray:
    view = array.view()
    view.flags.writeable = False
    return view


def _stable_top(keys: np.ndarray, k: int) -> np.ndarray:
    """Positions of the ``k`` smallest ``keys``, ascending, ties by position."""
    n = keys.shape[0]
    k = min(k, n)
    if n <= _PARTITION_MIN_ROWS or k * 4 >= n:
        return np.argsort(keys, kind="stable")[:k]
    # Partition out the k best, then widen to every row tied with the k-th value so
    # ties at the cut still resolve by position.
    cut = np.partition(keys, k - 1)[k - 1]
    pool = np.flatnonzero(keys <= cut)
    return pool[np.argsort(keys[pool], kind="stable")[:k]]
