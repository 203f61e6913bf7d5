"""Candidates of a batch searched before its transaction (views of row stores).

A view's batch encode holds the store's lock for its whole transaction; the costly
part of it was each new memory's exact candidate search among the memories the view
already held and among its batch-mates. :func:`prefetch` runs both searches first:
the view's rows are copied as float64 under the lock and searched without it (a view
of more than :data:`_EXACT_ROWS` embedded rows: the store's own search, in turns of
at most :data:`_TURN_S` under the lock), and the batch-mates, whose rows are the
batch's own vectors in a store that keeps them exactly, need no lock at all. It
records what it saw: the store's rows object, its search epoch (bumped whenever a
row's embedding is removed or rows are renumbered) and the view's rows.

Inside the transaction :meth:`Prefetched.found` checks that the view still sees
exactly those rows, unchanged, below the batch's own; each memory's candidates are
then the best of its early ones and of its batch-mates up to itself (searched again
in the transaction when the view sees anything else new, or a batch-mate has
expired), merged by exact cosine, ties to the later row (insertion order). Exact cosines are
row-wise sums, so the merge equals one search of all the rows. When the check fails,
the caller searches everything as before.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from emotional_memory.stores._shared.ranking import cosines_many, norm, row_norms, stable_top

_TURN_S = 0.02
"""Longest stretch (seconds) the prefetch holds the store's lock at a time."""

_TURN_QUERIES = 16
"""Queries searched between two checks of the clock."""

_EXACT_ROWS = 2048
"""Views of at most this many embedded rows are searched on a float64 copy of their
rows, outside the lock (more: the store's own search, in turns under the lock)."""

_CHUNK_ELEMENTS = 1 << 22
"""Float64 products a chunk of queries holds at once (32 MiB)."""


@dataclass
class Prefetched:
    """A batch's candidates, searched before its transaction.

    Attributes:
        store: the rows store searched.
        epoch: its ``_search_epoch`` then.
        rows: the view's rows then, ascending.
        top: per batch memory (by position), its best rows among ``rows`` and their
            exact cosines, best first; None when its query has no usable direction
            (missing, empty, zero or non-finite norm: searched in the transaction).
        mates: per batch memory, its best batch-mates up to itself (positions in the
            batch) and their exact cosines, best first (None as in ``top``); None
            altogether when the store keeps embeddings lossily (half precision: the
            stored rows are not the batch's vectors).
        batch_rows: the rows of the batch's memories saved so far, in order.
    """

    store: Any
    epoch: int
    rows: np.ndarray
    top: list[tuple[np.ndarray, np.ndarray] | None]
    mates: list[tuple[np.ndarray, np.ndarray] | None] | None
    batch_rows: list[int] = field(default_factory=list)

    def found(
        self,
        store: Any,
        seen: np.ndarray,
        vectors: Sequence[np.ndarray | None],
        ids: Sequence[str],
        offset: int,
        limit: int,
    ) -> list[np.ndarray] | None:
        """The candidates of a block of the batch, when the prefetch still holds.

        Args:
            store: the rows store now (the caller holds its lock).
            seen: the view's rows now (the block saved), ascending.
            vectors: the block's float64 embeddings (None: none).
            ids: the block's memory ids.
            offset: the block's first position in the batch.
            limit: candidates per memory.

        Returns:
            Row indices per memory, best first (as ``_search_rows_in_batch`` gives
            them), or None when the store or the view's earlier rows changed.
        """
        own = [store._row_of[memory_id] for memory_id in ids]
        if offset != len(self.batch_rows):
            return None
        self.batch_rows.extend(own)
        n = self.rows.shape[0]
        if store is not self.store or store._search_epoch != self.epoch:
            return None
        if seen.shape[0] < n or not np.array_equal(seen[:n], self.rows):
            return None
        if n and min(own) <= int(self.rows[-1]):
            return None  # a memory of the batch sits among the prefetched rows
        newer = seen[n:]
        # every memory of the batch saved so far is seen, and nothing else is new:
        # the batch-mates searched early are each memory's new candidates
        batch_rows = np.asarray(self.batch_rows, dtype=np.int64)
        mates = self.mates if np.array_equal(newer, batch_rows) else None
        usable = [j for j in range(len(ids)) if self.top[offset + j] is not None]
        plain = [j for j in range(len(ids)) if self.top[offset + j] is None]
        out: list[np.ndarray] = [np.zeros(0, dtype=np.int64)] * len(ids)
        if plain:
            for j, rows in zip(plain, store._search_rows_in_batch(
                [vectors[j] if vectors[j] is not None else [] for j in plain],
                limit, seen, [ids[j] for j in plain],
            ), strict=True):
                out[j] = rows
        recent: list[tuple[np.ndarray, np.ndarray]] = []
        if mates is not None:
            for j in usable:
                mate = mates[offset + j]
                assert mate is not None
                recent.append((batch_rows[mate[0]], mate[1]))
        elif usable:
            for j, rows in zip(usable, store._search_rows_in_batch(
                [vectors[j] for j in usable], limit, newer, [ids[j] for j in usable]
            ), strict=True):
                query = store._check_query(vectors[j])
                recent.append((rows, store._exact_similarities(rows, query, norm(query))))
        for j, (rows, sims) in zip(usable, recent, strict=True):
            old = self.top[offset + j]
            assert old is not None
            all_rows = np.concatenate([old[0], rows])
            all_sims = np.concatenate([old[1], sims])
            out[j] = all_rows[np.lexsort((-all_rows, -all_sims))[:limit]]
        return out


def exact_top_many(
    matrix: np.ndarray,
    norms: np.ndarray,
    queries: Sequence[np.ndarray],
    prefixes: Sequence[int],
    limit: int,
) -> list[tuple[np.ndarray, np.ndarray]]:
    """Each query's best rows among the first ``prefixes[i]`` of ``matrix`` by exact
    cosine, ties to the later position: ``cosines`` and ``stable_top`` per query, a chunk of
    queries at once (:func:`~emotional_memory.stores._shared.ranking.cosines_many`).

    Args:
        matrix: (N, D) float64 rows.
        norms: (N,) their ``row_norm`` values.
        queries: (D,) float64 queries, each of finite, positive norm.
        prefixes: per query, how many leading rows it sees (at most N).
        limit: how many rows per query.

    Returns:
        Per query: (row positions best first, their cosines).
    """
    n, dim = matrix.shape
    step = max(1, _CHUNK_ELEMENTS // max(1, n * dim))
    out: list[tuple[np.ndarray, np.ndarray]] = []
    for start in range(0, len(queries), step):
        chunk = np.stack(queries[start : start + step]) if n else None
        seen = prefixes[start : start + step]
        if chunk is None or max(seen) == 0:
            out.extend((np.zeros(0, np.int64), np.zeros(0)) for _ in seen)
            continue
        m = max(seen)
        sims = cosines_many(matrix[:m], norms[:m], chunk,
                            np.asarray([norm(q) for q in chunk]))
        for i, p in enumerate(seen):
            row = sims[i, :p]
            best = stable_top(-row, limit)
            out.append((best, row[best]))
    return out


def _batch_mates(
    vectors: Sequence[np.ndarray | None], usable: Sequence[int], limit: int
) -> list[tuple[np.ndarray, np.ndarray] | None]:
    """Each usable query's best batch-mates up to itself, as a lossless store would
    rank the batch's rows (the rows are the vectors, their norms ``row_norm``).

    Args:
        vectors: the batch's float64 embeddings (None: no row embedding).
        usable: positions whose query ranks by cosine.
        limit: how many per query.

    Returns:
        Per position: (batch positions best first, their exact cosines), or None.
    """
    embedded = np.asarray([i for i, vec in enumerate(vectors) if vec is not None], np.int64)
    out: list[tuple[np.ndarray, np.ndarray] | None] = [None] * len(vectors)
    if embedded.shape[0] == 0 or not usable:
        return out
    matrix = np.stack([vectors[i] for i in embedded.tolist()])
    found = exact_top_many(
        matrix, row_norms(matrix), [vectors[j] for j in usable],  # type: ignore[misc]
        np.searchsorted(embedded, usable, side="right").tolist(), limit,
    )
    for j, (best, sims) in zip(usable, found, strict=True):
        out[j] = (embedded[best], sims)
    return out


def _usable(store: Any, vector: np.ndarray | None) -> bool:
    """Whether a query ranks rows by cosine (not by position, nor refused)."""
    if vector is None or vector.ndim != 1 or vector.shape[0] != store._dim:
        return False
    value = norm(vector)
    return math.isfinite(value) and value > 0.0


def prefetch(
    view: Any, vectors: Sequence[np.ndarray | None], limit: int
) -> Prefetched | None:
    """Search a batch's candidates among a view's rows before its transaction.

    Args:
        view: a :class:`~emotional_memory.stores._shared.rows.selected.SelectedRows`.
        vectors: the batch's float64 embeddings in order (None: none or empty).
        limit: candidates per memory (``max_links * candidate_multiplier``).

    Returns:
        The candidates, or None when there is nothing worth searching early (the
        view holds fewer than ``limit`` rows, no embeddings) or the store changed
        while searching.
    """
    lock = view._lock
    with lock:
        store = view._store()
        rows = view._rows(store)
        epoch = store._search_epoch
        if rows.shape[0] < limit or store._dim is None or store._n_embedded == 0:
            return None
        todo = [j for j, vec in enumerate(vectors) if _usable(store, vec)]
        searchable = rows[store._has[rows]]
        copied = searchable.shape[0] <= _EXACT_ROWS
        if copied:  # the rows' values now (a copy): searched without the lock
            matrix = store._exact_rows(searchable)
            norms = store._norms[searchable].copy()
    top: list[tuple[np.ndarray, np.ndarray] | None] = [None] * len(vectors)
    if copied:
        found = exact_top_many(matrix, norms, [vectors[j] for j in todo],  # type: ignore[misc]
                               [searchable.shape[0]] * len(todo), limit)
        for j, (best, sims) in zip(todo, found, strict=True):
            top[j] = (searchable[best], sims)
    elif not _search_in_turns(view, store, epoch, rows, vectors, todo, limit, top):
        return None
    lossless = store._mode in ("float32", "float64") and all(
        vec is None or vec.shape == (store._dim,) for vec in vectors
    )
    mates = _batch_mates(vectors, todo, limit) if lossless else None
    return Prefetched(store, epoch, rows, top, mates)


def _search_in_turns(
    view: Any, store: Any, epoch: int, rows: np.ndarray,
    vectors: Sequence[np.ndarray | None], todo: Sequence[int], limit: int,
    top: list[tuple[np.ndarray, np.ndarray] | None],
) -> bool:
    """The store's own search of ``rows`` for the queries ``todo``, in turns of at most
    :data:`_TURN_S` under the lock (other scopes' operations run in between), filling
    ``top``; False when the store changed meanwhile."""
    done = 0
    while done < len(todo):
        with view._lock:
            if view._rows_of() is not store or store._search_epoch != epoch:
                return False
            started = time.perf_counter()
            while done < len(todo) and time.perf_counter() - started < _TURN_S:
                turn = todo[done : done + _TURN_QUERIES]
                found = store._search_rows_in_batch(
                    [vectors[j] for j in turn], limit, rows, None
                )
                for j, best in zip(turn, found, strict=True):
                    query = np.asarray(vectors[j], dtype=np.float64)
                    top[j] = (best, store._exact_similarities(best, query, norm(query)))
                done += len(turn)
    return True
