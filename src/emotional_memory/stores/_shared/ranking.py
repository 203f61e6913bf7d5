"""The one exact ranking rule every backend answers with.

Similarity is the float64 cosine of the query with each stored embedding:

- a row's norm is ``sqrt(dot(row, row))`` of its float64 values (:func:`row_norm`),
  computed on the row alone, so it never depends on where the row sits;
- its dot product with the query is a row-wise multiply-and-sum (never a BLAS
  matrix product, whose blocking may round rows differently by position), so equal
  embeddings get bit-equal scores;
- a row whose cosine is NaN (a NaN or infinite value) or whose norm is zero scores 0;
- exact ties go to the later position (the later-inserted memory first, as the
  original's stores answer).

A query whose norm is zero or not finite has no direction: searches then return the
first embedded memories in insertion order (see :func:`exact_search`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from emotional_memory.models import Memory

__all__ = [
    "F32_NORM_MAX",
    "F32_NORM_MIN",
    "NORM_MAX",
    "NORM_MIN",
    "WIDEN_MOST",
    "cosines",
    "exact_search",
    "index_decides",
    "norm",
    "rank",
    "row_norm",
    "row_norms",
    "stable_top",
    "stable_top_rows",
    "widened",
]

NORM_MIN = 1e-150
NORM_MAX = 1e150
"""Norms outside this range may over/underflow float64 products: such rows and
queries are always scored exactly, never through a rounding bound."""

F32_NORM_MIN = 1e-18
F32_NORM_MAX = 1e18
"""Rows stored as raw float32 need a norm in this range (their entries, products and
squared norms then stay normal float32 numbers)."""

_PARTITION_MIN_ROWS = 2048  # below this many keys a full stable argsort is faster
_CHUNK_ROWS = 4096  # rows multiplied at once (bounds the temporary array)


def norm(vector: np.ndarray) -> float:
    """Euclidean norm of a (D,) vector, inf on overflow (no warning).

    Args:
        vector: shape (D,).

    Returns:
        The norm (``sqrt(dot(v, v))``, as :func:`row_norm`).
    """
    with np.errstate(over="ignore", invalid="ignore"):
        return float(np.linalg.norm(vector))


def row_norm(row: np.ndarray) -> float:
    """Euclidean norm of one stored float64 row: ``sqrt(dot(row, row))``.

    Args:
        row: shape (D,).

    Returns:
        The norm.
    """
    return float(np.sqrt(np.dot(row, row)))


def row_norms(vectors: np.ndarray) -> np.ndarray:
    """:func:`row_norm` of each row (no warning on overflow or NaN).

    Args:
        vectors: an (N, D) float64 array.

    Returns:
        The (N,) norms.
    """
    with np.errstate(over="ignore", invalid="ignore"):
        return np.fromiter((row_norm(v) for v in vectors), np.float64, vectors.shape[0])


def cosines(
    vectors: np.ndarray, norms: np.ndarray, query: np.ndarray, query_norm: float
) -> np.ndarray:
    """Exact float64 cosines of ``query`` with each row (the module's rule).

    Args:
        vectors: (N, D) float64 rows.
        norms: (N,) their :func:`row_norm` values.
        query: (D,) float64 query.
        query_norm: ``norm(query)``, positive and finite.

    Returns:
        (N,) cosines; NaN results and zero-norm rows give 0.
    """
    n = vectors.shape[0]
    dots = np.empty((n,), dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore", under="ignore"):
        for start in range(0, n, _CHUNK_ROWS):
            block = vectors[start : start + _CHUNK_ROWS]
            dots[start : start + block.shape[0]] = np.multiply(block, query).sum(axis=1)
    return _from_dots(dots, norms, query_norm)


def cosines_many(
    vectors: np.ndarray, norms: np.ndarray, queries: np.ndarray, query_norms: np.ndarray
) -> np.ndarray:
    """:func:`cosines` of several queries at once, bit for bit (each dot product is the
    same row-wise sum); the caller bounds the (Q, N, D) temporary.

    Args:
        vectors: (N, D) float64 rows.
        norms: (N,) their :func:`row_norm` values.
        queries: (Q, D) float64 queries.
        query_norms: (Q,) their :func:`norm` values, positive and finite.

    Returns:
        (Q, N) cosines, as :func:`cosines` gives each row.
    """
    with np.errstate(divide="ignore", invalid="ignore", over="ignore", under="ignore"):
        dots = np.multiply(vectors[None], queries[:, None, :]).sum(axis=2)
    return _from_dots(dots, norms, query_norms[:, None])


def _from_dots(
    dots: np.ndarray, norms: np.ndarray, query_norm: float | np.ndarray
) -> np.ndarray:
    """The module's rule on dot products: divided by both norms; NaN results and
    zero-norm rows give 0."""
    with np.errstate(divide="ignore", invalid="ignore", over="ignore", under="ignore"):
        sims = dots / (norms * query_norm)
    return np.where(np.isnan(sims) | (norms == 0.0), 0.0, sims)


def stable_top(keys: np.ndarray, k: int) -> np.ndarray:
    """Positions of the ``k`` smallest ``keys``, ascending, ties to the later position.

    Args:
        keys: (N,) sort keys (negated similarities for a best-first ranking), in
            insertion order.
        k: how many.

    Returns:
        (min(k, N),) int positions.
    """
    n = keys.shape[0]
    k = min(k, n)
    last = n - 1
    if n <= _PARTITION_MIN_ROWS or k * 4 >= n:
        # a stable sort of the reversed keys puts the later of equal keys first
        return last - np.argsort(keys[::-1], kind="stable")[:k]
    # partition out the k best, then widen to every key tied with the k-th so ties at
    # the cut still resolve by position
    cut = np.partition(keys, k - 1)[k - 1]
    pool = np.flatnonzero(keys <= cut)[::-1]
    return pool[np.argsort(keys[pool], kind="stable")[:k]]


def stable_top_rows(keys: np.ndarray, k: int) -> np.ndarray:
    """:func:`stable_top` of each row of a (Q, N) array, the full sort's branch.

    Args:
        keys: (Q, N) sort keys, each row in insertion order.
        k: how many per row (at most N).

    Returns:
        (Q, k) int positions, best first, ties to the later position.
    """
    last = keys.shape[1] - 1
    return last - np.argsort(keys[:, ::-1], axis=1, kind="stable")[:, :k]


WIDEN_MOST = 4096
"""The most index candidates a search widens to while they cannot decide the ``k``-th
place (:func:`index_decides`): past it, the index's pick among equals stands."""


def index_decides(kth: float, worst: float, dim: int) -> bool:
    """Whether a float32 nearest-neighbour index's candidates decide the ``k``-th place.

    An index (HNSW in pgvector, Qdrant, Chroma) proposes its nearest candidates by
    float32 cosine; a row it left out scores, in float32, at most what its worst
    candidate scores. When the exact ``k``-th score does not beat the worst
    candidate's by more than float32 rounding (of each number, product and sum of a
    dot product of unit vectors of ``dim`` numbers, doubled), a left-out row may tie
    with or beat the ``k``-th exactly (an equal direction, a later memory): the
    candidates must be widened.

    Args:
        kth: the exact cosine of the ``k``-th best candidate.
        worst: the exact cosine of the worst candidate.
        dim: the vectors' length.

    Returns:
        True when no left-out row can reach the ``k``-th place.
    """
    return kth > worst + 4.0 * (dim + 2) * 2.0**-24


def widened(
    rows: list[Any], want: int, decided: Callable[[list[Any]], bool],
    fetch: Callable[[int], list[Any]],
) -> list[Any]:
    """An index's candidates ``rows`` (``want`` asked), asked again four times as many
    (up to :data:`WIDEN_MOST`) while they cannot decide the places to fill: among
    memories of one direction the index's pick of equals is arbitrary, and ties go to
    the latest.

    Args:
        rows: the candidates found; fewer than ``want``: the index had no more.
        want: how many were asked for.
        decided: whether candidates decide the last place (:func:`index_decides`).
        fetch: the index's ``n`` nearest candidates.

    Returns:
        The candidates to rank.
    """
    while len(rows) >= want and want < WIDEN_MOST and not decided(rows):
        want = min(want * 4, WIDEN_MOST)
        rows = fetch(want)
    return rows


def rank(
    vectors: np.ndarray, norms: np.ndarray, query: np.ndarray, query_norm: float, k: int
) -> tuple[np.ndarray, np.ndarray]:
    """The best ``k`` rows by exact cosine, ties to the later position.

    Args:
        vectors: (N, D) float64 rows in insertion order.
        norms: (N,) their :func:`row_norm` values.
        query: (D,) query.
        query_norm: ``norm(query)``, positive and finite.
        k: how many.

    Returns:
        (positions, cosines of those positions), each (min(k, N),).
    """
    sims = cosines(vectors, norms, query, query_norm)
    order = stable_top(-sims, k)
    return order, sims[order]


def exact_search(
    memories: Sequence[Memory], embedding: Sequence[float] | np.ndarray, top_k: int
) -> list[Memory]:
    """The exact search over memories in insertion order (the module's rule).

    Memories without an embedding are skipped; a query with no direction (zero, not
    finite or empty) gives the first embedded memories.

    Args:
        memories: the candidates, in insertion order.
        embedding: the (D,) query.
        top_k: how many at most.

    Returns:
        Up to ``top_k`` memories, best first.

    Raises:
        ValueError: a query that is not one-dimensional or whose length differs from
            the memories' embeddings.
    """
    if top_k <= 0:
        return []
    embedded = [m for m in memories if m.embedding]
    if not embedded:
        return []
    query = np.asarray(embedding, dtype=np.float64)
    if query.ndim != 1:
        raise ValueError(f"embedding must be one-dimensional, got shape {query.shape}")
    dim = len(embedded[0].embedding)  # type: ignore[arg-type]
    if query.shape[0] and query.shape[0] != dim:
        raise ValueError(
            f"embedding length mismatch: query has {query.shape[0]}, the store holds "
            f"dimension {dim}"
        )
    k = min(int(top_k), len(embedded))
    query_norm = norm(query) if query.shape[0] else 0.0
    if query_norm == 0.0 or not np.isfinite(query_norm):
        return embedded[:k]
    vectors = np.asarray([m.embedding for m in embedded], dtype=np.float64)
    order, _ = rank(vectors, row_norms(vectors), query, query_norm, k)
    return [embedded[i] for i in order.tolist()]
