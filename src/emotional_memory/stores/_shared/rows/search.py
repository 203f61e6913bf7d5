"""Exact cosine search over the search matrix: single, batched, numpy or jitted JAX.

Every mode returns exactly the float64 answer (cosine; NaN and zero-norm rows count 0;
exact ties: the later-inserted memory first). A float32 product ranks approximately
(numpy for small stores, one jitted XLA program on the matrix shared zero-copy above
``_JAX_MIN_ROWS``), a pool of the best rows is rescored in float64, and the pool
widens whenever the rounding bound of :meth:`EmbeddingPrecision._error_bound` lets an
outside row reach the k-th exact score. Batched searches rank a block of queries with
one matrix-matrix product (a block of fewer than 4 queries: one matrix-vector product
per query), rescore the pools of many queries with one float64 gather and
multiply-reduce (the same sums, row for row, as a single search's), and finish each
query as a single search does.
"""

from __future__ import annotations

import functools
import math
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np

from emotional_memory.stores._shared.ranking import (
    NORM_MAX,
    NORM_MIN,
    cosines,
    norm,
    stable_top,
    stable_top_rows,
)
from emotional_memory.stores._shared.rows.precision import EmbeddingPrecision

# From this many rows on, the approximate search runs as one jitted XLA program
# (product + top-k on the matrix shared zero-copy, as the bare ``E @ q`` +
# ``lax.top_k`` baseline does); below it numpy is faster (no dispatch). Half precision
# switches earlier: numpy has no fast float16/bfloat16 product.
_PARTITION_MIN_ROWS = 2048  # below this many rows a full stable argsort is faster
_JAX_MIN_ROWS = 8192
_HALF_JAX_MIN_ROWS = 8192
# A batched float32 search of at least _JAX_BATCH_MIN_QUERIES queries ranks them with
# the jitted program from _JAX_BATCH_MIN_ROWS rows on: numpy's product is as fast
# there, but its argpartition of every (query, row) score is not (encode_batch's
# blocks of 1000 queries: about half the time of the numpy pass at 1k-8k rows).
_JAX_BATCH_MIN_ROWS = 1024
_JAX_BATCH_MIN_QUERIES = 64
_HALF_CHUNK = 4096
# Approximate rows fetched per half-precision search (room for pool widening).
_HALF_TOP = 256
# Jitted batched searches: queries per block and rows per scan step at most (a
# (512, 16384) float32 block of scores is 32 MiB). A block of fewer queries is padded
# to the smallest of 16, 64, 256, ... that holds it; a block of fewer than
# _QUERY_SPLIT queries is searched one query at a time, as matrix-vector products.
# Each width compiles its own program (kept in the persistent compilation cache):
# 1, 16, 64, 256 and 512 at most. Timings: docs/scale.md, "Grouped top-k, query buckets".
_QUERY_BLOCK = 512
_BLOCK_CHUNK = 16384
_QUERY_BUCKET_MIN = 16
_QUERY_SPLIT = 4
# The numpy pass of small stores: queries per matrix-matrix product.
_NUMPY_QUERY_BLOCK = 256
# Batched searches rescore the pools of this many queries per gather (~2 MiB of
# float64 rows for pools of 24 rows of 384).
_RESCORE_QUERIES = 32
# Rows rescored in float64 beyond k (before any widening).
POOL_MARGIN = 8


@functools.cache
def _jax_search(mode: str) -> tuple[Callable[..., Any], Callable[..., Any], Callable[..., Any]]:
    """Jitted ``(scores, top, top_many)`` over a search matrix of ``mode``.

    ``scores(matrix, scale, bias, query, last, step)`` is
    ``(matrix @ query) * scale + bias`` in float32, ``-inf`` on rows after ``last``
    (half matrices are upcast a chunk at a time); ``top(..., count)`` is its
    ``lax.top_k``; ``top_many(matrix, scale, bias, queries, lasts, chunk, count)`` is
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
        matrix: Any, scale: Any, bias: Any, queries: Any, lasts: Any, chunk: int, count: int
    ) -> Any:
        rows = matrix.shape[0]
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
        jax.jit(top_many, static_argnames=("chunk", "count")),
    )


def _count_bucket(count: int, rows: int) -> int:
    """``count`` rounded up to a power of two (>= 32, <= rows): fewer compiled shapes."""
    return min(rows, max(32, 1 << (count - 1).bit_length()))


def _query_bucket(count: int) -> int:
    """Queries a jitted block of ``count`` (<= ``_QUERY_BLOCK``) is padded to: 1 for
    one query, else the smallest of 16, 64, 256, ... holding them, at most
    ``_QUERY_BLOCK`` (few compiled shapes; for the blocks searched, of one query or
    at least ``_QUERY_SPLIT``, at most 4x the queries' own product)."""
    if count == 1:
        return 1
    size = _QUERY_BUCKET_MIN
    while size < count:
        size *= 4
    return min(size, _QUERY_BLOCK)


def _query_blocks(count: int) -> list[tuple[int, int]]:
    """``(start, end)`` of the jitted blocks of ``count`` queries: ``_QUERY_BLOCK`` at
    a time, a last block of fewer than ``_QUERY_SPLIT`` split into single queries."""
    spans = [
        (start, min(start + _QUERY_BLOCK, count)) for start in range(0, count, _QUERY_BLOCK)
    ]
    if spans and spans[-1][1] - spans[-1][0] < _QUERY_SPLIT:
        start, end = spans.pop()
        spans += [(i, i + 1) for i in range(start, end)]
    return spans


def _scan_chunk(rows: int, step: int) -> int:
    """Rows per scan step of a batched search over ``rows``, a multiple of ``step``
    (a power of two: see :meth:`EmbeddingSearch._jax_operands`).

    The largest multiple of ``min(step, _BLOCK_CHUNK)`` that divides ``rows`` and is at
    most ``_BLOCK_CHUNK``: a store of up to ``_BLOCK_CHUNK`` rows is scanned in one step,
    with a single ``lax.top_k`` and no merging of running top-k lists.
    """
    unit = min(step, _BLOCK_CHUNK)
    units = rows // unit
    best = max(m for m in range(1, units + 1) if units % m == 0 and m * unit <= _BLOCK_CHUNK)
    return best * unit


class PendingSearch:
    """A batched search started by :meth:`EmbeddingSearch._start_search_batch`.

    Its approximate pass is a list of query blocks, each with the top rows and values
    of its queries: JAX arrays while the jitted program may still be running (XLA
    runs the blocks in order), numpy arrays once fetched (the numpy pass gives them
    at once). The exact finish (the float64 pools, the rounding bound, widening) runs
    a block at a time as :meth:`results` reaches it, under the store's lock, so the
    caller can use the first answers while the later blocks are still searched.

    Attributes:
        answers: each query's row indices, filled block by block (queries answered
            without the approximate pass already hold theirs).
        blocks: ``(start, end, values, rows)`` per block of batched queries.
        batched: the positions (in ``answers``) of the batched queries, in order.
        finish_block: finishes one block exactly (set when there are blocks).
    """

    def __init__(self, answers: list[np.ndarray | None], lock: Any) -> None:
        self.answers = answers
        self.blocks: list[tuple[int, int, Any, Any]] = []
        self.batched: list[int] = []
        self.finish_block: Callable[..., None] | None = None
        self._lock = lock
        self._done = 0  # blocks finished

    @staticmethod
    def _on_host(block: tuple[int, int, Any, Any]) -> tuple[int, int, np.ndarray, np.ndarray]:
        """A block's results as numpy (waits for the jitted program if still running)."""
        start, end, values, rows = block
        return start, end, np.asarray(values), np.asarray(rows).astype(np.int64, copy=False)

    def fetch(self) -> None:
        """Wait for the approximate pass and bring its results to the host (after
        this, the search matrix may change)."""
        self.blocks[self._done :] = [self._on_host(b) for b in self.blocks[self._done :]]

    def results(self) -> Iterator[np.ndarray | None]:
        """Each query's exact answer, in order, finishing the blocks as reached.

        Yields:
            The row indices of each query, best first.
        """
        given = 0
        while self._done < len(self.blocks):
            start, end, values, rows = self._on_host(self.blocks[self._done])
            assert self.finish_block is not None
            with self._lock:
                self.finish_block(start, end, list(rows), list(values))
            self._done += 1
            ready = self.batched[end - 1] + 1
            while given < ready:
                yield self.answers[given]
                given += 1
        while given < len(self.answers):
            yield self.answers[given]
            given += 1

    def finish(self) -> list[np.ndarray | None]:
        """Every exact answer (see :meth:`EmbeddingSearch._finish_block`).

        Returns:
            Each query's row indices, best first.
        """
        for _ in self.results():
            pass
        return self.answers


def check_top_k(top_k: object) -> None:
    if isinstance(top_k, bool) or not isinstance(top_k, int | np.integer):
        raise TypeError(f"top_k must be an int, got {type(top_k).__name__}")


class EmbeddingSearch(EmbeddingPrecision):
    """The search of :class:`~emotional_memory.stores.InMemoryStore` as row indices.

    A mixin (see :class:`~emotional_memory.stores._shared.rows.columns.RowColumns`);
    callers hold the
    store's lock.
    """

    # The JAX views of the search matrix, scale and bias that jitted searches used:
    # ``(matrix, scale, bias, {rows: views})`` for the arrays they view (None: none
    # yet, or dropped when the arrays were reallocated). Creating them costs ~0.1 ms
    # per search.
    _jax_views: tuple[Any, ...] | None = None
    _lock: threading.RLock  # the store's (a started batched search finishes under it)

    def _search_rows(
        self, embedding: Sequence[float] | np.ndarray, top_k: int, limit: int | None = None
    ) -> np.ndarray:
        """Cache row indices of :meth:`search_by_embedding`'s answer.

        Args:
            embedding: the (D,) query vector.
            top_k: how many rows at most.
            limit: only rows ``<= limit`` are eligible (default: all).

        Returns:
            An int64 array of row indices into the cache, best first.
        """
        check_top_k(top_k)
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
        query_norm = norm(query)
        if query_norm == 0.0 or not math.isfinite(query_norm):
            # no direction (every float64 similarity would be NaN or 0): the first ones
            return self._searchable_rows(last)[:k]
        if self._mode == "float64":
            return self._search_exact(query, query_norm, k, last)
        if not NORM_MIN <= query_norm <= NORM_MAX:
            return self._rank_exact(self._searchable_rows(last), query, query_norm, k)
        pool_size = self._pool_size(k, searchable)
        if pool_size >= searchable:
            return self._rank_exact(self._searchable_rows(last), query, query_norm, k)
        query_unit = (query / query_norm).astype(np.float32)
        rows, values = self._approximate_top(query_unit, pool_size + 1, last)
        return self._finish_pooled(query, query_norm, query_unit, k, rows, values, last, pool_size)

    def _check_query(self, embedding: Sequence[float] | np.ndarray) -> np.ndarray:
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

    def _count_searchable_many(self, lasts: Sequence[int]) -> list[int]:
        """:meth:`_count_searchable` of each of ``lasts``, with one running count.

        Args:
            lasts: last eligible rows.

        Returns:
            The searchable rows up to each, in order.
        """
        size = self._size
        if all(last >= size - 1 for last in lasts):
            return [self._n_embedded] * len(lasts)
        running = np.cumsum(self._valid[:size] & self._has[:size]).tolist()
        return [
            self._n_embedded if last >= size - 1 else running[last] if last >= 0 else 0
            for last in lasts
        ]

    def _pool_size(self, k: int, searchable: int) -> int:
        # The pool is small; the bound check in _finish_pooled widens it when needed.
        # Special rows carry +inf, so they always fall inside the pool.
        return min(searchable, k + max(POOL_MARGIN, k // 2) + self._n_special)

    def _searchable_rows(self, last: int | None = None) -> np.ndarray:
        end = self._size if last is None else last + 1
        return np.flatnonzero(self._valid[:end] & self._has[:end])

    def _search_exact(self, query: np.ndarray, query_norm: float, k: int, last: int) -> np.ndarray:
        """The float64 search over the raw matrix (``"float64"`` mode)."""
        rows = self._searchable_rows(last)
        sims = cosines(self._matrix[rows, : self._dim], self._norms[rows], query, query_norm)
        return rows[stable_top(-sims, k)]

    def _exact_similarities(
        self, rows: np.ndarray, query: np.ndarray, query_norm: float
    ) -> np.ndarray:
        """Float64 cosines of ``rows`` from the stored embeddings (docs/behaviour.md §5)."""
        return cosines(self._exact_rows(rows), self._norms[rows], query, query_norm)

    def _rank_exact(
        self, rows: np.ndarray, query: np.ndarray, query_norm: float, k: int
    ) -> np.ndarray:
        """``rows`` (ascending) ranked by exact cosine, ties to the later row; the best
        ``k``."""
        rows = np.sort(rows)
        sims = self._exact_similarities(rows, query, query_norm)
        return rows[stable_top(-sims, k)]

    def _use_jax(self) -> bool:
        limit = _JAX_MIN_ROWS if self._mode == "float32" else _HALF_JAX_MIN_ROWS
        return self._size >= limit

    def _single_steps(self) -> int:
        """Row-count steps per capacity of a single search's jitted programs: 32 for
        float32 matrices (at most 1/32 of the capacity multiplied in vain), 8 for half
        precision (whose upcast works in chunks of the step)."""
        return 32 if self._mode == "float32" else 8

    def _jax_operands(self, steps: int = 8) -> tuple[Any, Any, Any, int]:
        """The first rows of matrix, scale and bias as JAX arrays, shared without a
        copy, and the row step.

        The row count is rounded up to a multiple of ``step = capacity / steps``, so a
        growing store compiles at most ``steps`` shapes per capacity while multiplying
        at most ``1 / steps`` of the capacity in unused rows (their bias is -inf).
        Single searches of a float32 matrix (a retrieve's shortlist: one
        matrix-vector product, bound by reading the matrix) use 32 steps
        (:meth:`_single_steps`); batched searches, which compile a larger program per
        shape and grow the store a block at a time, 8.

        Args:
            steps: shapes per capacity (a power of two).

        Returns:
            ``(matrix, scale, bias, step)``.
        """
        import jax

        step = max(1, self._capacity // steps)
        rows = min(self._capacity, -(-self._size // step) * step)
        views = self._jax_views
        if views is not None and not (
            views[0] is self._matrix and views[1] is self._scale and views[2] is self._bias
        ):
            views = self._jax_views = None
        cached = views[3].get(rows) if views is not None else None
        if cached is not None:
            return cached[0], cached[1], cached[2], step
        # Zero-copy hand-off (the matrix is 64-byte aligned). No embedding row may be
        # written while a program runs on these views: single searches fetch their
        # results before the lock is released; a started batched search
        # (PendingSearch) is fetched by its owner before any row write (RowLinker).
        sources = (self._matrix[:rows], self._scale[:rows], self._bias[:rows])
        matrix, scale, bias = (jax.dlpack.from_dlpack(a) for a in sources)
        # Kept for the next search while they are views of these very arrays (the
        # store's in-place writes show through them; a reallocation drops them),
        # one set per row count (single and batched searches round differently).
        shared = all(
            v.unsafe_buffer_pointer() == a.ctypes.data
            for v, a in zip((matrix, scale, bias), sources, strict=True)
        )
        if shared:
            if views is None or len(views[3]) >= 4:  # row counts of a grown store: drop
                views = self._jax_views = (self._matrix, self._scale, self._bias, {})
            views[3][rows] = (matrix, scale, bias)
        return matrix, scale, bias, step

    def _approximate(self, query_unit: np.ndarray, last: int) -> np.ndarray:
        """Approximate cosines (float32) plus the row bias of rows ``[:last + 1]``."""
        end = last + 1
        if self._use_jax():
            scores, _, _ = _jax_search(self._mode)
            matrix, scale, bias, step = self._jax_operands(self._single_steps())
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
            matrix, scale, bias, step = self._jax_operands(self._single_steps())
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
        sims = self._exact_similarities(pool, query, query_norm)
        return self._certify(query, query_norm, query_unit, k, rows, values, last, pool, sims)

    def _certify(
        self,
        query: np.ndarray,
        query_norm: float,
        query_unit: np.ndarray,
        k: int,
        rows: np.ndarray,
        values: np.ndarray,
        last: int,
        pool: np.ndarray,
        sims: np.ndarray,
    ) -> np.ndarray:
        """The exact top-k of :meth:`_finish_pooled` from the pool's exact cosines.

        Args:
            query: the (D,) float64 query.
            query_norm: its norm.
            query_unit: the float32 unit query of the approximate pass.
            k: how many rows.
            rows: the approximate top rows, best first (more than the pool).
            values: their approximate scores.
            last: only rows ``<= last`` are eligible.
            pool: the first ``len(pool)`` of ``rows``, ascending.
            sims: their exact cosines (:meth:`_exact_similarities`).

        Returns:
            The exact top-k rows, best first.
        """
        outside_best = float(values[len(pool)])
        order = stable_top(-sims, k)
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

    def _search_rows_batch(
        self,
        embeddings: Sequence[Sequence[float] | np.ndarray | None],
        top_k: int,
        visible_until: Sequence[str] | None,
    ) -> list[np.ndarray | None]:
        """Cache row indices of :meth:`search_by_embedding_batch`'s answers, per query."""
        return self._start_search_batch(embeddings, top_k, visible_until).finish()

    def _start_search_batch(
        self,
        embeddings: Sequence[Sequence[float] | np.ndarray | None],
        top_k: int,
        visible_until: Sequence[str] | None,
    ) -> PendingSearch:
        """:meth:`_search_rows_batch` started: the approximate pass dispatched (the
        jitted program runs while the caller goes on) or done (numpy), the exact
        finish left to :meth:`PendingSearch.finish`.

        Callers hold the lock; until :meth:`PendingSearch.fetch` (or ``finish``) has
        returned, no embedding row may be written (the jitted program reads the
        search matrix in place). ``finish`` reads the float64 rows: call it under
        the lock too.

        Args:
            embeddings, top_k, visible_until: as :meth:`_search_rows_batch`.

        Returns:
            The started search.
        """
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
        queries: list[np.ndarray] = []
        norms: list[float] = []
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
                # norm(query): np.linalg.norm of a 1-D float64 vector is
                # sqrt(x.dot(x)), rounded alike by math.sqrt (without its overhead)
                with np.errstate(over="ignore", invalid="ignore"):  # inf/NaN: plain
                    norm = math.sqrt(query.dot(query))
                plain = not NORM_MIN <= norm <= NORM_MAX  # also 0, NaN, inf
            if plain:
                answers[j] = self._search_rows(emb if emb is not None else [], top_k, limits[j])
            else:
                batched.append(j)
                queries.append(query)
                norms.append(norm)
        pending = PendingSearch(answers, self._lock)
        if batched:
            # Each query / its norm, rounded to float32: elementwise, so a block at a
            # time gives every row what one query at a time does.
            units: list[np.ndarray] = list(
                (np.stack(queries) / np.asarray(norms)[:, None]).astype(np.float32)
            )
            self._approximate_batch(
                pending, embeddings, top_k, limits, batched, queries, norms, units
            )
        return pending

    def _approximate_batch(
        self,
        pending: PendingSearch,
        embeddings: Sequence[Sequence[float] | np.ndarray | None],
        top_k: int,
        limits: list[int],
        batched: list[int],
        queries: list[np.ndarray],
        norms: list[float],
        units: list[np.ndarray],
    ) -> None:
        """Approximate top pools of many queries at once, for ``pending`` to finish
        exactly (:meth:`_finish_block` per block of queries, into ``pending.answers``).

        Args:
            pending: the search being started (its blocks are added here).
            embeddings: every query as given.
            top_k: how many rows per query.
            limits: the last eligible row of every query.
            batched: the queries searched here (positions in ``embeddings``).
            queries: their (D,) float64 vectors, in the order of ``batched``.
            norms: their norms (within ``[NORM_MIN, NORM_MAX]``).
            units: their float32 unit vectors.
        """
        pending.batched = batched
        counts = self._count_searchable_many([limits[j] for j in batched])
        pools = [self._pool_size(min(top_k, c), c) for c in counts]
        need = max(pools) + 1
        pending.finish_block = functools.partial(
            self._finish_block, embeddings, top_k, limits, batched, queries, norms, units,
            counts, pools, pending.answers,
        )
        use_block = need <= self._size and (
            self._use_jax()
            or (
                self._mode == "float32"
                and self._size >= _JAX_BATCH_MIN_ROWS
                and len(batched) >= _JAX_BATCH_MIN_QUERIES
            )
        )
        if use_block:
            _, _, top_many = _jax_search(self._mode)
            matrix, scale, bias, step = self._jax_operands()
            wanted = need if self._mode == "float32" else max(need, _HALF_TOP)
            bucket = _count_bucket(wanted, int(matrix.shape[0]))
            chunk = _scan_chunk(int(matrix.shape[0]), step)
            for start, end in _query_blocks(len(batched)):
                width = _query_bucket(end - start)
                query_block = np.zeros((width, units[0].shape[0]), np.float32)
                query_block[: end - start] = units[start:end]
                last = np.full(width, -1, np.int32)
                last[: end - start] = [limits[j] for j in batched[start:end]]
                values, rows = top_many(
                    matrix, scale, bias, query_block, last, chunk=chunk, count=bucket
                )
                pending.blocks.append((start, end, values, rows))  # still running
            return
        # Small store: numpy, one matrix-matrix product per block of queries.
        n = self._size
        matrix_np = self._matrix[:n]
        if self._mode != "float32":
            matrix_np = self._upcast(matrix_np)
        row_index = np.arange(n)
        count = min(need, n)
        for start in range(0, len(batched), _NUMPY_QUERY_BLOCK):
            end = min(start + _NUMPY_QUERY_BLOCK, len(batched))
            approx = np.stack(units[start:end]) @ matrix_np.T
            approx = approx * self._scale[:n] + self._bias[:n]
            last_np = np.asarray([limits[j] for j in batched[start:end]])
            approx[row_index[None, :] > last_np[:, None]] = -np.inf
            # Every query gets the top ``need`` rows (at least its pool + 1, as the
            # jitted pass's bucket), best first.
            part = np.argpartition(-approx, count - 1, axis=1)[:, :count]
            part_values = np.take_along_axis(approx, part, axis=1)
            order = np.argsort(-part_values, axis=1, kind="stable")
            block_rows = np.take_along_axis(part, order, axis=1).astype(np.int64)
            block_values = np.take_along_axis(part_values, order, axis=1)
            pending.blocks.append((start, end, block_values, block_rows))

    def _finish_block(
        self,
        embeddings: Sequence[Sequence[float] | np.ndarray | None],
        top_k: int,
        limits: list[int],
        batched: list[int],
        queries: list[np.ndarray],
        norms: list[float],
        units: list[np.ndarray],
        counts: list[int],
        pools: list[int],
        answers: list[np.ndarray | None],
        start: int,
        end: int,
        rows: list[np.ndarray],
        values: list[np.ndarray],
    ) -> None:
        """Exact answers of the queries ``batched[start:end]`` from their approximate
        top rows, as :meth:`_search_rows` finds them.

        The pools of equal size are rescored together: one (G, P, D) gather of the
        float64 rows and one multiply-reduce over its last axis, which sums every row
        exactly as :meth:`_exact_similarities` does. The queries whose k-th exact
        score clears the bound (most) are answered at once; the others go through
        :meth:`_certify` one by one (widening the pool).

        Args:
            embeddings, top_k, limits, batched, queries, norms, units, answers: as in
                :meth:`_approximate_batch`.
            counts: the searchable rows of each batched query.
            pools: the pool size of each batched query.
            start: the first batched query of the block.
            end: one past its last.
            rows: each query's approximate top rows, best first (more than its pool).
            values: their approximate scores.
        """
        groups: dict[tuple[int, int], list[int]] = {}
        for b in range(start, end):
            j = batched[b]
            k = min(top_k, counts[b])
            if k == 0:
                answers[j] = np.zeros(0, dtype=np.int64)
            elif pools[b] >= counts[b]:
                emb = embeddings[j]
                answers[j] = self._search_rows(emb if emb is not None else [], top_k, limits[j])
            else:
                groups.setdefault((pools[b], k), []).append(b)
        bound = self._error_bound()
        for (size, k), members in groups.items():
            pool = np.sort(np.stack([rows[b - start][:size] for b in members]), axis=1)
            query = np.stack([queries[b] for b in members])
            dots = np.empty(pool.shape)
            for first in range(0, len(members), _RESCORE_QUERIES):
                # A few queries at a time: their rows stay in cache between the
                # gather, the product (in place: _exact_rows returns a new array)
                # and the sum.
                part = slice(first, first + _RESCORE_QUERIES)
                vectors = self._exact_rows(pool[part].ravel()).reshape(-1, size, query.shape[1])
                with np.errstate(invalid="ignore", over="ignore"):
                    np.multiply(vectors, query[part, None, :], out=vectors)
                    dots[part] = vectors.sum(axis=2)
            query_norm = np.asarray([norms[b] for b in members])
            row_norms = self._norms[pool]
            with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
                sims = dots / (row_norms * query_norm[:, None])
            sims = np.where(np.isnan(sims) | (row_norms == 0.0), 0.0, sims)
            certified = np.zeros(len(members), dtype=bool)
            best = pool
            if size <= _PARTITION_MIN_ROWS or k * 4 >= size:
                # _certify's first test for every query at once: stable_top's sort
                # of each query's pool.
                order = stable_top_rows(-sims, k)
                kth = np.take_along_axis(sims, order[:, -1:], axis=1)[:, 0]
                outside = np.asarray([values[b - start][size] for b in members], np.float64)
                certified = kth > outside + bound
                best = np.take_along_axis(pool, order, axis=1)
            for g, b in enumerate(members):
                answers[batched[b]] = best[g] if certified[g] else self._certify(
                    queries[b], norms[b], units[b], k,
                    rows[b - start], values[b - start], limits[batched[b]], pool[g], sims[g],
                )
