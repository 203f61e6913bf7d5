"""In-process memory store with vectorised column caches (SPEC 2, 5).

Every memory lives as one row of struct-of-arrays columns, not as a Python object
tree, so :meth:`InMemoryStore.search_by_embedding` is one matrix-vector product,
:meth:`InMemoryStore.columns` hands a whole bank to the batch scorer, and a stored
memory costs about 1 KB besides its embedding row (a ``Memory`` with a 384-float
embedding list is ~20 KB of Python objects). Per row:

- the **embedding row** of the search matrix, in ``embedding_dtype`` (below), with
  float64 norms and ``has_embedding`` / ``valid`` masks;
- the **tag blocks** (see :mod:`emotional_memory.stores._records`): every number of the
  emotional tag in one float64 and one int64 row (timestamps as int64 microseconds
  since the epoch, so ages are bit-identical to ``(now - timestamp).total_seconds()``),
  which also serve as the kernel's columns (core affect, mood, momentum velocity,
  timestamp, consolidation, retrieval count);
- content, metadata (None when empty) and the resonance links packed in a small tuple.

``get`` / ``list_all`` / searches rebuild :class:`~emotional_memory.models.Memory`
objects from a row (~15 us, plus the embedding list); the last few hundred memories
saved or read are kept as objects, so the engine's read-modify-write cycles hand the
same objects back. Memories outside the common shape (a datetime not in
``datetime.UTC``, a subclassed model, a link that does not leave the memory) are kept
whole; everything is returned equal to what was saved.

Column layout, and why:

- Rows are appended in insertion order and never reordered except by compaction,
  which keeps their relative order. So row order *is* insertion order, and a stable
  sort over rows resolves ties by insertion order with no extra sequence column.
- Capacity doubles when full (amortised O(1) appends; O(log N) reallocations).
- Deleting a memory leaves a tombstone (``valid`` False). Tombstones are compacted
  away once they outnumber the live rows, so the work stays amortised O(1) per delete.
- Re-saving an existing id rewrites its row in place, keeping its position; an
  unchanged embedding (the same list object as the stored one, or equal values) is
  not rewritten.

**Embedding precision.** ``embedding_dtype`` is how embeddings are *stored*:

- ``"float64"``: raw rows, 8 bytes per value, searched exactly as SPEC states (a
  float64 matrix-vector product).
- ``"float32"`` (default): raw rows rounded to float32, 4 bytes per value, **lossless**:
  a row whose values are not all float32 numbers (or whose norm is outside
  [1e-18, 1e18]) also keeps its float64 values on the side. Embedders produce float32
  numbers, so in practice every row takes 4 bytes per value and ``get`` returns the
  very list that was saved.
- ``"float16"`` / ``"bfloat16"``: unit rows in 2 bytes per value plus the float64
  norm, **lossy**: a memory's embedding is kept (and returned, and searched) as
  ``unit_row * norm`` with the unit row rounded to half precision (about 3 and 2
  significant decimal digits), the way :class:`~emotional_memory.stores.SQLiteStore`
  keeps float32. This halves the resident embedding bytes of the float32 default.

Search, in every mode, returns **exactly** the answer of the float64 SPEC computation
over the stored embeddings (cosine, NaN and zero-norm rows count 0, ties by insertion
order): one float32 product gives approximate cosines (numpy below 8,192 rows, above
it one jitted XLA program on the matrix shared zero-copy), a pool of the best
``k + max(8, k // 2)`` rows is rescored in float64, and the pool widens whenever the
proven float32 rounding bound could let an outside row reach the k-th exact score.
Rows (and queries) whose float64 norm is outside the range where that bound holds are
always rescored exactly.

Transactions keep an undo log of row snapshots taken inside them and replay it
backwards on an exception, so a failed block costs only what it did, not a copy of
the whole store.
"""

from __future__ import annotations

import functools
import math
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from types import TracebackType
from typing import Any, ClassVar, Literal

import cachetools
import ml_dtypes
import numpy as np

from emotional_memory.kernel.lexical import LexicalInputs
from emotional_memory.lexical import LexicalIndex
from emotional_memory.models import Memory
from emotional_memory.stores import _records
from emotional_memory.stores._records import to_microseconds

__all__ = ["EMBEDDING_DTYPES", "EmbeddingDType", "InMemoryStore", "deep_size", "to_microseconds"]

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
# Raw float32 rows (float32 mode) need a norm in this narrower range: their entries,
# products and squared norms then stay normal float32 numbers.
_F32_NORM_MIN = 1e-18
_F32_NORM_MAX = 1e18
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
# Memory objects kept after a save or a read (most recent first out last).
_RECENT = 256

# Storage of each reduced-precision mode: (numpy dtype, relative rounding of a stored
# entry with respect to the stored embedding, absolute rounding of a subnormal entry).
# Half-precision rows *are* the stored embedding (up to its float64 scale), so they
# add no storage rounding; float32 rows may round a float64 embedding kept aside.
_STORAGE: dict[str, tuple[Any, float, float]] = {
    "float32": (np.float32, 2.0**-24, 2.0**-150),
    "float16": (np.float16, 0.0, 2.0**-25),
    "bfloat16": (np.uint16, 0.0, 2.0**-134),  # bfloat16 bits held in uint16
}


@dataclass(frozen=True)
class _RowState:
    """Everything one row holds, for the undo log."""

    arrays: tuple[np.ndarray, ...]  # one copy per name in InMemoryStore._ROW_ARRAYS
    matrix_row: np.ndarray
    content: str | None
    meta: dict[str, Any] | None
    links: Any
    exact: np.ndarray | None  # the float64 embedding kept aside, if any
    whole: Memory | None


@dataclass(frozen=True)
class _Undo:
    """One entry of the transaction undo log."""

    kind: Literal["insert", "replace", "delete"]
    memory_id: str
    row: int
    state: _RowState | None


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


def _aligned_zeros(shape: tuple[int, int], dtype: Any) -> np.ndarray:
    """Zeros whose buffer starts on a 64-byte boundary (zero-copy hand-off to JAX)."""
    itemsize = np.dtype(dtype).itemsize
    nbytes = shape[0] * shape[1] * itemsize
    raw = np.zeros(nbytes + _ALIGN, dtype=np.uint8)
    offset = (-raw.ctypes.data) % _ALIGN
    return raw[offset : offset + nbytes].view(dtype).reshape(shape)


def _to_bfloat16_bits(values: np.ndarray) -> np.ndarray:
    """Round finite float32 values to bfloat16 (nearest, ties to even); uint16 bits."""
    return np.ascontiguousarray(values, dtype=np.float32).astype(ml_dtypes.bfloat16).view(np.uint16)


def _from_bfloat16_bits(bits: np.ndarray) -> np.ndarray:
    """bfloat16 bits (uint16) to float32, exactly."""
    return np.asarray(bits, dtype=np.uint16).view(ml_dtypes.bfloat16).astype(np.float32)


@functools.cache
def _jax_search(mode: str) -> tuple[Callable[..., Any], Callable[..., Any], Callable[..., Any]]:
    """Jitted ``(scores, top, top_many)`` over a search matrix of ``mode``.

    ``scores(matrix, scale, bias, query, last, step)`` is
    ``(matrix @ query) * scale + bias`` in float32, ``-inf`` on rows after ``last``
    (half matrices are upcast a chunk at a time); ``top(..., count)`` is its
    ``lax.top_k``; ``top_many(matrix, scale, bias, queries, lasts, step, count)`` is
    the top ``count`` per query of a (B, D) block, scanning the rows in chunks with a
    running top-k, so memory stays O(B * chunk).
    """
    import jax
    import jax.numpy as jnp

    from emotional_memory.kernel.chunked_topk import merge_top_k

    highest = jax.lax.Precision.HIGHEST

    def upcast(block: Any) -> Any:
        if mode == "bfloat16":
            block = jax.lax.bitcast_convert_type(block, jnp.bfloat16)
        return block.astype(jnp.float32)

    def scores(matrix: Any, scale: Any, bias: Any, query: Any, last: Any, step: int) -> Any:
        rows, dim = matrix.shape
        if mode == "float32":
            dots = jnp.matmul(matrix, query, precision=highest)
        else:
            chunk = min(_HALF_CHUNK, step)
            blocks = matrix.reshape(rows // chunk, chunk, dim)
            dots = jax.lax.map(
                lambda b: jnp.matmul(upcast(b), query, precision=highest), blocks
            ).reshape(rows)
        return jnp.where(jnp.arange(rows) <= last, dots * scale + bias, -jnp.inf)

    def top(
        matrix: Any, scale: Any, bias: Any, query: Any, last: Any, step: int, count: int
    ) -> Any:
        return jax.lax.top_k(scores(matrix, scale, bias, query, last, step), count)

    def top_many(
        matrix: Any, scale: Any, bias: Any, queries: Any, lasts: Any, step: int, count: int
    ) -> Any:
        rows = matrix.shape[0]
        chunk = min(_BLOCK_CHUNK, step)
        n_queries = queries.shape[0]

        def body(carry: Any, chunk_id: Any) -> tuple[Any, None]:
            start = chunk_id * chunk
            block = jax.lax.dynamic_slice_in_dim(matrix, start, chunk, axis=0)
            block_scale = jax.lax.dynamic_slice_in_dim(scale, start, chunk, axis=0)
            block_bias = jax.lax.dynamic_slice_in_dim(bias, start, chunk, axis=0)
            dots = jnp.matmul(queries, upcast(block).T, precision=highest)
            row = start + jnp.arange(chunk, dtype=jnp.int32)
            chunk_scores = jnp.where(
                row[None, :] <= lasts[:, None],
                dots * block_scale[None, :] + block_bias[None, :],
                -jnp.inf,
            )
            best_scores, best_index = carry
            return merge_top_k(best_scores, best_index, chunk_scores, start, count), None

        init = (
            jnp.full((n_queries, count), -jnp.inf, jnp.float32),
            jnp.full((n_queries, count), -1, jnp.int32),
        )
        (values, index), _ = jax.lax.scan(body, init, jnp.arange(rows // chunk, dtype=jnp.int32))
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
    :attr:`capacity`, :attr:`embedding_dtype`, :meth:`nbytes` and the
    :attr:`reallocations` counter. It is thread-safe (one re-entrant lock, also
    offered as :meth:`locked`) and supports :meth:`transaction` with rollback.

    Args:
        embedding_dtype: how embeddings are stored: ``"float32"`` (default, lossless
            for float32 inputs and exact for any input), ``"float64"``, or the lossy
            half-precision ``"float16"`` / ``"bfloat16"`` (see the module docs).
    """

    def __init__(self, *, embedding_dtype: EmbeddingDType = "float32") -> None:
        if embedding_dtype not in EMBEDDING_DTYPES:
            raise ValueError(
                f"embedding_dtype must be one of {EMBEDDING_DTYPES}, got {embedding_dtype!r}"
            )
        self._mode: str = embedding_dtype
        self._lock = threading.RLock()
        self._row_of: dict[str, int] = {}
        # Per row (length ``_size``): id (None once deleted), content, metadata (None
        # when empty), packed links.
        self._row_ids: list[str | None] = []
        self._content: list[str | None] = []
        self._meta: list[dict[str, Any] | None] = []
        self._links: list[Any] = []
        self._whole: dict[str, Memory] = {}  # memories kept as objects (odd shapes)
        self._exact: dict[str, np.ndarray] = {}  # float64 embeddings kept aside
        self._recent: cachetools.LRUCache[str, Memory] = cachetools.LRUCache(maxsize=_RECENT)
        self._labels = _records.LabelTable()
        self._size = 0  # rows in use, live or tombstoned
        self._dead = 0  # tombstoned rows among the first ``_size``
        self._capacity = 0
        self._n_embedded = 0
        self._n_special = 0  # live embedded rows that are always rescored exactly
        self._dim: int | None = None
        # float64 mode: raw rows. float32: raw rows rounded to float32. Half: unit rows.
        self._matrix = self._new_matrix(0, 0)
        self._norms = np.zeros(0, dtype=np.float64)  # of the stored embedding
        self._special = np.zeros(0, dtype=bool)
        # Approximate cosine = (row @ unit query) * _scale + _bias. _scale is 1/norm
        # of the row as stored; _bias is 0 on searchable rows, -inf on rows without a
        # live embedding (or unused), +inf on special rows (always rescored).
        self._scale = np.zeros(0, dtype=np.float32)
        self._bias = np.zeros(0, dtype=np.float32)
        self._decode = np.zeros(0, dtype=np.float64)  # half modes: embedding = row * this
        self._has = np.zeros(0, dtype=bool)
        self._empty = np.zeros(0, dtype=bool)  # embedding is [] (not None)
        self._aside = np.zeros(0, dtype=bool)  # float64 embedding kept in _exact
        self._valid = np.zeros(0, dtype=bool)
        self._tagf, self._tagi = _records.row_arrays(0)
        self._reallocations = 0
        self._tx_depth = 0
        self._undo: list[_Undo] = []
        # Built on first use (lexical_index) and kept in step with every write after.
        self._lexical: LexicalIndex | None = None

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
            row = self._row_of.get(memory_id)
            if row is None:
                return None
            return self._memory_at(row, keep=True)

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
            if memory.id not in self._row_of:
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
            if memory_id not in self._row_of:
                return False
            self._remove(memory_id)
            self._maybe_compact()
            return True

    def list_all(self) -> list[Memory]:
        """All memories, in insertion order.

        Returns:
            A new list (the memories themselves are immutable). Each is rebuilt from
            its row unless it is among the recently used ones: O(N) object
            construction, about 20 us per memory at D = 384.
        """
        with self._lock:
            return [self._memory_at(r) for r in self._live_row_list()]

    def count(self) -> int:
        """Number of memories stored (same as ``len(store)``)."""
        return len(self)

    def __len__(self) -> int:
        """Number of memories stored."""
        return len(self._row_of)

    def __contains__(self, memory_id: object) -> bool:
        """Whether a memory with this id is stored."""
        return memory_id in self._row_of

    def search_by_embedding(self, embedding: Sequence[float], top_k: int) -> list[Memory]:
        """Nearest embedded memories by cosine similarity (SPEC 5).

        Memories without an embedding are skipped; ``top_k <= 0`` gives ``[]``; a
        zero-norm query gives the first ``top_k`` embedded memories in insertion
        order; otherwise memories are ranked by their float64 cosine similarity,
        highest first, with NaN similarities (and zero-norm rows) counting as 0 and
        ties resolved by insertion order. Every ``embedding_dtype`` returns this very
        answer for the embeddings as stored.

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
            return [self._memory_at(r) for r in rows.tolist()]

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
        """How embeddings are stored (see the module documentation)."""
        return self._mode

    def locked(self) -> threading.RLock:
        """The store's re-entrant lock: hold it (``with store.locked():``) while using
        views returned by :meth:`columns` or :meth:`search_matrix`."""
        return self._lock

    def embedding_nbytes(self) -> int:
        """Bytes held by embeddings: the search matrix (allocated capacity, all rows)
        plus any float64 rows kept aside (see the module documentation)."""
        with self._lock:
            return int(self._matrix.nbytes) + sum(int(v.nbytes) for v in self._exact.values())

    def column_nbytes(self) -> int:
        """Bytes held by all column arrays together (search matrix included)."""
        return int(sum(getattr(self, name).nbytes for name in self._ROW_ARRAYS)) + int(
            self._matrix.nbytes
        )

    def embedding_matrix(self) -> tuple[list[str], np.ndarray, np.ndarray]:
        """The stored embeddings of all memories, in insertion order, in float64.

        With ``embedding_dtype="float64"`` the matrix is a view of the cache; other
        modes decode it (O(N * D) work; prefer :meth:`columns` or
        :meth:`search_matrix` for batch scoring).

        Returns:
            ``(ids, matrix, has_embedding)``: the N memory ids; a float64 ``(N, D)``
            matrix (``(N, 0)`` while :attr:`dim` is None; rows of memories without an
            embedding are zeros); a bool ``(N,)`` mask of which rows hold an
            embedding. The arrays are read-only and may be views of the cache: they
            are valid until the next write to the store (copy them to keep them).
        """
        with self._lock:
            if self._dead and self._tx_depth == 0:
                self._compact()
            rows = np.asarray(self._live_row_list(), dtype=np.int64)
            ids: list[str] = [self._row_ids[r] for r in rows.tolist()]
            cols = self._dim if self._dim is not None else 0
            has = self._has[rows]
            if self._mode == "float64" and not self._dead:
                matrix = self._matrix[: self._size, :cols]
            elif cols:
                matrix = self._exact_rows(rows)
                matrix[~has] = 0.0
            else:
                matrix = np.zeros((len(ids), 0), dtype=np.float64)
            return ids, _readonly(matrix), _readonly(has)

    def search_matrix(self) -> tuple[list[str | None], np.ndarray, np.ndarray, np.ndarray]:
        """The search matrix over all allocated rows (no copy).

        Returns:
            ``(row_ids, matrix, norms, valid)``: per row its memory id (None for a
            deleted or unused row); the ``(capacity, D)`` matrix (raw rows in
            ``"float64"`` and ``"float32"`` modes, unit rows in half precision, as
            ``ml_dtypes`` bfloat16 for ``"bfloat16"``; zeros for rows whose norm is
            outside the mode's range); float64 norms of the stored embeddings; a bool
            mask of rows that hold a live memory with an embedding. Read-only views,
            valid until the next write (hold :meth:`locked` while using them).
        """
        with self._lock:
            cap = self._capacity
            row_ids = list(self._row_ids) + [None] * (cap - len(self._row_ids))
            matrix = self._public_matrix()
            valid = self._valid & self._has
            return row_ids, _readonly(matrix), _readonly(self._norms), valid

    def linking_to(self, memory_ids: Iterable[str]) -> list[str]:
        """Ids of the memories holding a resonance link to any of ``memory_ids``.

        One pass over the packed links (no memory is rebuilt), for an engine that
        deletes memories and must drop every link to them.

        Args:
            memory_ids: the target ids.

        Returns:
            The linking memories' ids, in insertion order (a target linking to another
            target is included).
        """
        targets = set(memory_ids)
        with self._lock:
            out = []
            for row in self._live_row_list():
                mid = self._row_ids[row]
                whole = self._whole.get(mid) if self._whole else None  # type: ignore[arg-type]
                if whole is not None:
                    hit = any(lk.target_id in targets for lk in whole.tag.resonance_links)
                else:
                    record = self._links[row]
                    hit = record is not None and not targets.isdisjoint(record[0])
                if hit:
                    out.append(mid)
            return out  # type: ignore[return-value]

    def lexical_index(self) -> LexicalIndex:
        """The store's inverted index of memory contents (lexical signal s7).

        Built from the live rows on the first call, then kept in step with every
        save, update and delete (a rollback drops it; the next call rebuilds it).
        Callers must hold :meth:`locked` while they read it; :meth:`lexical_search`
        and :meth:`lexical_inputs` do.

        Returns:
            The :class:`~emotional_memory.lexical.LexicalIndex`.
        """
        with self._lock:
            if self._lexical is None:
                self._lexical = LexicalIndex.from_pairs(
                    (self._row_ids[row], self._row_content(row))  # type: ignore[misc]
                    for row in self._live_row_list()
                )
            return self._lexical

    def lexical_search(
        self, terms: Sequence[str], k: int, k1: float = 1.2, b: float = 0.75
    ) -> list[str]:
        """The lexical shortlist under the store's lock (:meth:`LexicalIndex.search`).

        Args:
            terms: distinct query terms.
            k: shortlist size.
            k1: BM25 k1.
            b: BM25 b.

        Returns:
            Up to ``k`` memory ids, best BM25 first.
        """
        with self._lock:
            return self.lexical_index().search(terms, k, k1, b)

    def lexical_inputs(self, terms: Sequence[str], memory_ids: Sequence[str]) -> LexicalInputs:
        """Term statistics of candidates under the store's lock (:meth:`LexicalIndex.inputs`).

        Args:
            terms: distinct query terms.
            memory_ids: the candidates, in candidate order.

        Returns:
            Unpadded :class:`~emotional_memory.kernel.LexicalInputs` (numpy leaves).
        """
        with self._lock:
            return self.lexical_index().inputs(terms, memory_ids)

    def pending_ids(self) -> list[str]:
        """Ids of the memories whose tag has ``pending_appraisal`` set, in insertion
        order (read from the flag column; no memory is rebuilt)."""
        with self._lock:
            rows = np.flatnonzero(
                self._valid[: self._size]
                & (self._tagi[: self._size, _records.I_FLAGS] & _records.FLAG_PENDING != 0)
            ).tolist()
            out = [self._row_ids[r] for r in rows]
            out += [
                mid for mid, m in self._whole.items() if m.tag.pending_appraisal and mid not in out
            ]
            if self._whole:
                out.sort(key=self._row_of.__getitem__)  # type: ignore[arg-type]
            return out  # type: ignore[return-value]

    def nbytes(self) -> dict[str, int]:
        """Approximate resident bytes of the store, by part.

        Returns:
            ``{"embeddings": ..., "columns": ..., "objects": ...}``: the embedding
            storage (:meth:`embedding_nbytes`), the other row arrays, and a deep
            estimate of the Python objects (ids, contents, metadata, links, the id
            index, memories kept whole or recently used).
        """
        import sys

        with self._lock:
            columns = self.column_nbytes() - int(self._matrix.nbytes)
            size = sys.getsizeof
            objects = size(self._row_of) + size(self._row_ids) + size(self._content)
            objects += size(self._meta) + size(self._links)
            for mid in self._row_ids:
                if mid is not None:
                    objects += size(mid)
            for text in self._content:
                if text is not None:
                    objects += size(text)
            for meta in self._meta:
                if meta is not None:
                    objects += deep_size(meta)
            for rec in self._links:
                if rec is not None:
                    objects += size(rec) + size(rec[0]) + size(rec[1])
            objects += sum(deep_size(m) for m in self._whole.values())
            objects += sum(deep_size(m) for m in self._recent.values())
            return {
                "embeddings": self.embedding_nbytes(),
                "columns": columns,
                "objects": objects,
            }

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
                row_ids = (
                    [self._row_ids[r] for r in live.tolist()]
                    if live is not None
                    else list(self._row_ids[: self._size])
                )
                valid = np.ones(len(row_ids), dtype=bool)
            dim = self._dim if self._dim is not None else 0
            matrix = (
                self._public_matrix()[take, :dim]
                if dim
                else np.zeros((len(row_ids), 1), dtype=self._public_matrix().dtype)
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

    def _live_row_list(self) -> list[int]:
        live = self._live_rows()
        return list(range(self._size)) if live is None else live.tolist()

    # ------------------------------------------------------------------ records

    def _row_content(self, row: int) -> str:
        """The content of live ``row`` (compact or kept whole)."""
        content = self._content[row]
        if content is not None:
            return content
        mid = self._row_ids[row]
        assert mid is not None
        return self._whole[mid].content

    def _memory_at(self, row: int, keep: bool = False) -> Memory:
        """The memory of live ``row``: a recent or whole object, else rebuilt.

        Args:
            row: a live row.
            keep: remember a rebuilt memory among the recent ones.
        """
        mid = self._row_ids[row]
        assert mid is not None
        memory = self._recent.get(mid)  # a hit becomes the most recently used
        if memory is not None:
            return memory
        memory = self._whole.get(mid)
        if memory is not None:
            return memory
        if self._has[row]:
            embedding: list[float] | None = self._exact_row(row).tolist()
        else:
            embedding = [] if self._empty[row] else None
        memory = _records.decode_memory(
            mid,
            self._content[row],  # type: ignore[arg-type]
            embedding,
            self._tagf[row].tolist(),
            self._tagi[row].tolist(),
            self._links[row],
            self._meta[row],
            self._labels,
        )
        if keep:
            self._remember(memory)
        return memory

    def _remember(self, memory: Memory) -> None:
        self._recent[memory.id] = memory  # evicts the least recently used

    def _exact_row(self, row: int) -> np.ndarray:
        """The stored embedding of ``row`` (which has one) in float64."""
        dim = self._dim or 0
        if self._aside[row]:
            return self._exact[self._row_ids[row]]  # type: ignore[index]
        if self._mode == "float64":
            return self._matrix[row, :dim].copy()
        if self._mode == "float32":
            return self._matrix[row, :dim].astype(np.float64)
        return self._upcast(self._matrix[row, :dim]).astype(np.float64) * self._decode[row]

    def _exact_rows(self, rows: np.ndarray) -> np.ndarray:
        """Stored embeddings of ``rows`` in float64, ``(len(rows), D)`` (a new array;
        rows without an embedding hold arbitrary values)."""
        dim = self._dim or 0
        block = self._matrix[rows, :dim]
        if self._mode == "float64":
            vectors = block
        elif self._mode == "float32":
            vectors = block.astype(np.float64)
        else:
            vectors = self._upcast(block).astype(np.float64) * self._decode[rows, None]
        if self._exact:
            for i in np.flatnonzero(self._aside[rows]).tolist():
                vectors[i] = self._exact[self._row_ids[int(rows[i])]]  # type: ignore[index]
        return vectors

    def _upcast(self, block: np.ndarray) -> np.ndarray:
        """A block of the search matrix as float32 (exact)."""
        if self._mode == "bfloat16":
            return _from_bfloat16_bits(block)
        return block.astype(np.float32)

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
        return self._finish_pooled(query, query_norm, query_unit, k, rows, values, last, pool_size)

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
        # The pool is small; the bound check in _finish_pooled widens it when needed.
        # Special rows carry +inf, so they always fall inside the pool.
        return min(searchable, k + max(_POOL_MARGIN, k // 2) + self._n_special)

    def _searchable_rows(self, last: int | None = None) -> np.ndarray:
        end = self._size if last is None else last + 1
        return np.flatnonzero(self._valid[:end] & self._has[:end])

    def _search_exact(self, query: np.ndarray, query_norm: float, k: int, last: int) -> np.ndarray:
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
        """Float64 cosines of ``rows`` from the stored embeddings (SPEC 5)."""
        vectors = self._exact_rows(rows)
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
        """Bound on |approximate cosine - float64 cosine| for queries whose norm lies in
        [_NORM_MIN, _NORM_MAX] and rows that are not special.

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

    def _use_jax(self) -> bool:
        limit = _JAX_MIN_ROWS if self._mode == "float32" else _HALF_JAX_MIN_ROWS
        return self._size >= limit

    def _jax_operands(self) -> tuple[Any, Any, Any, int]:
        """The first rows of matrix, scale and bias as JAX arrays, shared without a
        copy, and the row step.

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
        scale = jax.dlpack.from_dlpack(self._scale[:rows])
        bias = jax.dlpack.from_dlpack(self._bias[:rows])
        return matrix, scale, bias, step

    def _approximate(self, query_unit: np.ndarray, last: int) -> np.ndarray:
        """Approximate cosines (float32) plus the row bias of rows ``[:last + 1]``."""
        end = last + 1
        if self._use_jax():
            scores, _, _ = _jax_search(self._mode)
            matrix, scale, bias, step = self._jax_operands()
            out = scores(matrix, scale, bias, query_unit, np.int32(last), step=step)
            return np.asarray(out)[:end]
        block = self._matrix[:end]
        if self._mode != "float32":
            block = self._upcast(block)
        return np.asarray(block @ query_unit) * self._scale[:end] + self._bias[:end]

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
            matrix, scale, bias, step = self._jax_operands()
            wanted = count if self._mode == "float32" else max(count, _HALF_TOP)
            bucket = _count_bucket(wanted, int(matrix.shape[0]))
            values, rows = top(
                matrix, scale, bias, query_unit, np.int32(last), step=step, count=bucket
            )
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
                [last_row] * n_queries
                if visible_until is None
                else [self._row_of[memory_id] for memory_id in visible_until]
            )
            answers: list[np.ndarray | None] = [None] * n_queries
            batched: list[int] = []
            units: list[np.ndarray] = []
            for j, emb in enumerate(embeddings):
                plain = (
                    top_k <= 0
                    or self._n_embedded == 0
                    or self._dim is None
                    or self._mode == "float64"
                    or emb is None
                    or len(emb) == 0
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
            return [
                [self._memory_at(r) for r in rows.tolist()] for rows in answers if rows is not None
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
            matrix, scale, bias, step = self._jax_operands()
            wanted = need if self._mode == "float32" else max(need, _HALF_TOP)
            bucket = _count_bucket(wanted, int(matrix.shape[0]))
            for start in range(0, len(batched), _QUERY_BLOCK):
                block = batched[start : start + _QUERY_BLOCK]
                query_block = np.zeros((_QUERY_BLOCK, units[0].shape[0]), np.float32)
                query_block[: len(block)] = units[start : start + len(block)]
                last = np.full(_QUERY_BLOCK, -1, np.int32)
                last[: len(block)] = [limits[j] for j in block]
                values, rows = top_many(
                    matrix,
                    scale,
                    bias,
                    query_block,
                    last,
                    step=step,
                    count=bucket,
                )
                values, rows = np.asarray(values), np.asarray(rows)
                for i, j in enumerate(block):
                    self._finish_one(
                        embeddings[j],
                        top_k,
                        limits[j],
                        counts[j],
                        pools[j],
                        units[start + i],
                        rows[i],
                        values[i],
                        answers,
                        j,
                    )
            return
        # Small store: numpy, one matrix-matrix product per block of queries.
        n = self._size
        matrix_np = self._matrix[:n]
        if self._mode != "float32":
            matrix_np = self._upcast(matrix_np)
        row_index = np.arange(n)
        for start in range(0, len(batched), _QUERY_BLOCK):
            block = batched[start : start + _QUERY_BLOCK]
            approx = np.stack(units[start : start + len(block)]) @ matrix_np.T
            approx = approx * self._scale[:n] + self._bias[:n]
            last = np.asarray([limits[j] for j in block])
            approx[row_index[None, :] > last[:, None]] = -np.inf
            for i, j in enumerate(block):
                count = min(pools[j] + 1, n)
                part = np.argpartition(-approx[i], count - 1)[:count]
                order = part[np.argsort(-approx[i, part], kind="stable")]
                self._finish_one(
                    embeddings[j],
                    top_k,
                    limits[j],
                    counts[j],
                    pools[j],
                    units[start + i],
                    order,
                    approx[i, order],
                    answers,
                    j,
                )

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
        if entries:  # rebuilt on next use, in the rows' own order (ties keep it)
            self._lexical = None
        depth = self._tx_depth
        self._tx_depth = 0  # undo operations must not log themselves
        try:
            for entry in reversed(entries):
                if entry.kind == "insert":
                    self._remove(entry.memory_id)
                else:
                    assert entry.state is not None
                    self._restore(
                        entry.row, entry.memory_id, entry.state, revive=entry.kind == "delete"
                    )
        finally:
            self._tx_depth = depth - 1
        if self._tx_depth == 0:
            self._undo.clear()
            self._maybe_compact()

    # ---------------------------------------------------------------- internals

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
        "_valid",
        "_tagf",
        "_tagi",
    )
    # Fill value of unused rows (0 for every other row array).
    _ROW_FILL: ClassVar[dict[str, float]] = {"_bias": -np.inf}

    def _new_matrix(self, rows: int, dim: int) -> np.ndarray:
        if self._mode == "float64":
            return np.zeros((rows, dim), dtype=np.float64)
        return _aligned_zeros((rows, dim), _STORAGE[self._mode][0])

    def _snapshot(self, row: int) -> _RowState:
        """Everything ``row`` holds (for the undo log)."""
        mid = self._row_ids[row]
        return _RowState(
            arrays=tuple(np.array(getattr(self, name)[row]) for name in self._ROW_ARRAYS),
            matrix_row=self._matrix[row].copy(),
            content=self._content[row],
            meta=self._meta[row],
            links=self._links[row],
            exact=self._exact.get(mid) if mid is not None else None,
            whole=self._whole.get(mid) if mid is not None else None,
        )

    def _restore(self, row: int, memory_id: str, state: _RowState, *, revive: bool) -> None:
        """Put ``state`` back into ``row``: a replaced row, or a deleted one (``revive``)."""
        self._clear_embedding(row)
        self._recent.pop(memory_id, None)
        self._whole.pop(memory_id, None)
        if revive:
            self._row_ids[row] = memory_id
            self._row_of[memory_id] = row
            self._dead -= 1
        if state.arrays[self._ROW_ARRAYS.index("_has")]:
            width = state.matrix_row.shape[0]
            if self._dim is None:
                self._set_dim(width)
            self._matrix[row] = state.matrix_row
        elif self._matrix.shape[1]:
            self._matrix[row] = 0
        for name, value in zip(self._ROW_ARRAYS, state.arrays, strict=True):
            getattr(self, name)[row] = value
        self._content[row] = state.content
        self._meta[row] = state.meta
        self._links[row] = state.links
        if state.exact is not None:
            self._exact[memory_id] = state.exact
        if state.whole is not None:
            self._whole[memory_id] = state.whole
        if self._has[row]:
            self._n_embedded += 1
            if self._special[row]:
                self._n_special += 1

    def _put(self, memory: Memory) -> None:
        """Insert or replace ``memory``; validates before touching any state."""
        memory_id = memory.id
        row = self._row_of.get(memory_id)
        known = self._recent.get(memory_id) if row is not None else None
        # A tag-only update (model_copy) shares the embedding list: skip the vector.
        same_vector = known is not None and known.embedding is memory.embedding
        vec = None if same_vector else _embedding_vector(memory)
        if vec is not None and self._dim is not None and vec.shape[0] != self._dim:
            raise ValueError(
                f"embedding dimension mismatch: memory {memory.id!r} has "
                f"{vec.shape[0]}, the store holds dimension {self._dim}"
            )
        compact = _records.fits(memory)
        if row is not None and not same_vector:
            same_vector = self._stores_vector(row, memory, vec)
        if vec is not None and self._dim is None and not same_vector:
            self._set_dim(vec.shape[0])
        if row is None:
            self._ensure_capacity(self._size + 1)
            row = self._size
            self._size += 1
            self._row_ids.append(memory_id)
            self._content.append(None)
            self._meta.append(None)
            self._links.append(None)
            self._row_of[memory_id] = row
            self._valid[row] = True
            if self._tx_depth:
                self._undo.append(_Undo("insert", memory_id, row, None))
        else:
            if self._tx_depth:
                self._undo.append(_Undo("replace", memory_id, row, self._snapshot(row)))
            if not same_vector:
                self._clear_embedding(row)
        lossless = True
        if not same_vector:
            lossless = self._write_row(row, memory_id, vec, empty=memory.embedding == [])
        self._write_record(row, memory, compact, lossless)
        if self._lexical is not None:
            self._lexical.set(memory_id, memory.content)

    def _stores_vector(self, row: int, memory: Memory, vec: np.ndarray | None) -> bool:
        """Whether ``row`` already stores exactly ``memory``'s embedding."""
        if vec is None:
            return not self._has[row] and bool(self._empty[row]) == (memory.embedding == [])
        if not self._has[row] or vec.shape[0] != self._dim:
            return False
        return bool(np.array_equal(self._exact_row(row), vec))

    def _write_record(self, row: int, memory: Memory, compact: bool, lossless: bool) -> None:
        """Write everything but the embedding of ``memory`` into ``row``."""
        memory_id = memory.id
        self._whole.pop(memory_id, None)
        self._recent.pop(memory_id, None)
        tag = memory.tag
        if compact:
            floats, ints = _records.encode_tag(tag, self._labels)
            self._tagf[row] = floats
            self._tagi[row] = ints
            self._content[row] = memory.content
            self._meta[row] = memory.metadata or None
            self._links[row] = _records.pack_links(tag.resonance_links, self._intern)
            if lossless:
                self._remember(memory)
            return
        # Kept whole; only the kernel's columns are written.
        a, m, v = tag.core_affect, tag.mood_snapshot, tag.momentum
        self._tagf[row] = 0.0
        self._tagi[row] = 0
        self._affect[row] = (a.valence, a.arousal, a.dominance)
        self._mood[row] = (m.valence, m.arousal, m.dominance)
        self._velocity[row] = (v.d_valence, v.d_arousal, v.d_dominance)
        self._timestamp_us[row] = to_microseconds(tag.timestamp)
        self._consolidation[row] = tag.consolidation_strength
        self._retrieval_count[row] = float(tag.retrieval_count)
        self._content[row] = None
        self._meta[row] = None
        self._links[row] = None
        if not lossless:
            stored = self._exact_row(row).tolist() if self._has[row] else memory.embedding
            memory = memory.model_copy(update={"embedding": stored})
        self._whole[memory_id] = memory

    def _intern(self, memory_id: str) -> str:
        """The store's own copy of a stored id (links then share it), else the id."""
        row = self._row_of.get(memory_id)
        if row is None:
            return memory_id
        own = self._row_ids[row]
        return own if own is not None else memory_id

    def _clear_embedding(self, row: int) -> None:
        """Forget the embedding of ``row`` (counts included)."""
        if self._has[row]:
            self._n_embedded -= 1
            if self._special[row]:
                self._n_special -= 1
        if self._aside[row]:
            self._exact.pop(self._row_ids[row], None)  # type: ignore[arg-type]
        self._has[row] = False
        self._empty[row] = False
        self._aside[row] = False
        self._special[row] = False
        self._scale[row] = 0.0
        self._bias[row] = -np.inf
        self._decode[row] = 0.0
        self._norms[row] = 0.0

    def _write_row(self, row: int, memory_id: str, vec: np.ndarray | None, *, empty: bool) -> bool:
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
            norm = _row_norm(vec)
        lossless = True
        if self._mode == "float64":
            self._matrix[row] = vec
            in_range = _NORM_MIN <= norm <= _NORM_MAX
        elif self._mode == "float32":
            in_range = _F32_NORM_MIN <= norm <= _F32_NORM_MAX
            if in_range:
                rounded = vec.astype(np.float32)
                self._matrix[row] = rounded
                self._scale[row] = np.float32(1.0 / norm)
                if not np.array_equal(rounded.astype(np.float64), vec):
                    self._keep_aside(row, memory_id, vec)
        else:
            in_range = _NORM_MIN <= norm <= _NORM_MAX
            if in_range:
                unit = (vec / norm).astype(np.float32)
                if self._mode == "bfloat16":
                    bits = _to_bfloat16_bits(unit)
                    self._matrix[row] = bits
                    stored = _from_bfloat16_bits(bits).astype(np.float64)
                else:
                    half = unit.astype(np.float16)
                    self._matrix[row] = half
                    stored = half.astype(np.float64)
                self._decode[row] = norm
                self._scale[row] = np.float32(1.0 / _row_norm(stored))
                decoded = stored * norm
                with np.errstate(over="ignore", invalid="ignore"):
                    norm = _row_norm(decoded)
                lossless = bool(np.array_equal(decoded, vec))
        if self._mode != "float64" and not in_range:
            self._matrix[row] = 0
            self._keep_aside(row, memory_id, vec)
        self._special[row] = bool(math.isfinite(norm) and norm > 0.0 and not in_range)
        self._norms[row] = norm
        self._has[row] = True
        self._n_embedded += 1
        self._bias[row] = 0.0
        if self._special[row]:
            self._n_special += 1
            self._bias[row] = np.inf
        return lossless

    def _keep_aside(self, row: int, memory_id: str, vec: np.ndarray) -> None:
        self._exact[memory_id] = np.array(vec, dtype=np.float64)
        self._aside[row] = True

    def _remove(self, memory_id: str) -> None:
        """Drop ``memory_id`` (present) and tombstone its row."""
        row = self._row_of[memory_id]
        if self._tx_depth:
            self._undo.append(_Undo("delete", memory_id, row, self._snapshot(row)))
        self._clear_embedding(row)
        del self._row_of[memory_id]
        self._recent.pop(memory_id, None)
        self._whole.pop(memory_id, None)
        if self._lexical is not None:
            self._lexical.discard(memory_id)
        self._valid[row] = False
        self._row_ids[row] = None
        self._content[row] = None
        self._meta[row] = None
        self._links[row] = None
        self._dead += 1
        if self._n_embedded == 0:
            self._dim = None

    def _load_bulk(self, memories: list[Memory], matrix: np.ndarray | None) -> None:
        """Fill an empty store in one go (used when a durable store opens).

        Args:
            memories: the memories, in insertion order, with distinct ids.
            matrix: unused (each memory carries its embedding); kept for callers.
        """
        if self._row_of or self._size:
            raise RuntimeError("_load_bulk needs an empty store")
        del matrix
        self._ensure_capacity(len(memories))
        for memory in memories:
            self._put(memory)

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
        rows = live.tolist()
        self._row_ids = [self._row_ids[r] for r in rows]
        self._content = [self._content[r] for r in rows]
        self._meta = [self._meta[r] for r in rows]
        self._links = [self._links[r] for r in rows]
        self._row_of = {mid: i for i, mid in enumerate(self._row_ids) if mid is not None}
        self._size = k
        self._dead = 0


def deep_size(obj: Any, seen: set[int] | None = None) -> int:
    """Bytes reachable from ``obj`` (``sys.getsizeof`` over containers, objects'
    ``__dict__`` and pydantic's per-instance slots), each object counted once.

    Args:
        obj: the root object.
        seen: ids already counted (shared across calls to count a graph once).

    Returns:
        The total in bytes.
    """
    import sys

    seen = set() if seen is None else seen
    if id(obj) in seen:
        return 0
    seen.add(id(obj))
    size = sys.getsizeof(obj)
    if isinstance(obj, dict):
        size += sum(deep_size(k, seen) + deep_size(v, seen) for k, v in obj.items())
    elif isinstance(obj, list | tuple | set | frozenset):
        size += sum(deep_size(x, seen) for x in obj)
    elif hasattr(obj, "__dict__"):
        size += deep_size(vars(obj), seen)
        for extra in ("__pydantic_fields_set__", "__pydantic_extra__", "__pydantic_private__"):
            value = getattr(obj, extra, None)
            if value is not None:
                size += deep_size(value, seen)
    return size


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
