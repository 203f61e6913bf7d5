"""PostgreSQL backend: exact and HNSW embedding search, and the linker"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from emotional_memory.models import Memory, ResonanceLink
from emotional_memory.stores._shared import records as _records
from emotional_memory.stores._shared.linking import (
    ForwardLink,
    LinkCandidates,
    MemoryLinker,
    backward,
    backward_twin,
    forward_links,
    memory_candidates,
    with_links,
)
from emotional_memory.stores._shared.ranking import index_decides, norm, rank, widened
from emotional_memory.stores.postgres.common import (
    _SEARCH_COLUMNS,
    MOST_ROWS,
    _embedding_of,
    _prepared,
    _search_row_memory_columns,
)
from emotional_memory.stores.postgres.read import _Reader


class _Searcher(_Reader):
    """PostgreSQL backend of :class:`~emotional_memory.stores.postgres.PostgresStore`."""

    # ------------------------------------------------------------------ search

    def _check_query(self, cur: Any, embedding: Any) -> np.ndarray:
        query = np.asarray(embedding if embedding is not None else [], dtype=np.float64)
        if query.ndim != 1:
            raise ValueError(f"embedding must be one-dimensional, got shape {query.shape}")
        dim = self._stored_dim(cur)
        if query.shape[0] and dim is not None and query.shape[0] != dim:
            raise ValueError(
                f"embedding length mismatch: query has {query.shape[0]}, "
                f"the store holds dimension {dim}"
            )
        return query

    def _search_rows(
        self, cur: Any, query: np.ndarray, k: int, upto: int | None = None
    ) -> tuple[list[Any], int | None]:
        """The ``k`` best embedded rows (``_SEARCH_COLUMNS``), exact float64 order.

        With ``upto``, also the number of memories this store (view) holds, read in
        the same statement (exact, or any number above ``upto`` once it exceeds it);
        when it is at most ``upto`` the rows are instead every memory it holds, in
        insertion order. Without ``upto`` the number is None.

        One statement in the common case (a table above ``exact_rows`` embedded
        memories): the HNSW search over-fetching ``k + margin`` rows, with the counts
        as two more columns (prepared once per connection for the whole table and
        expiry-only views); the rows are then re-ranked exactly.
        """
        t = self._t
        if k <= 0 and upto is None:
            return [], None
        k = min(k, MOST_ROWS)
        upto = None if upto is None else min(upto, MOST_ROWS)
        query_norm = norm(query) if query.shape[0] else 0.0
        zero = query_norm == 0.0 or not math.isfinite(query_norm)
        want = max(k, 0) + self._margin
        bound = max(self._exact_rows, want) + 1
        view, params, fixed = self._view_filter()
        embedded_expr, count_expr = self._count_exprs(bound, upto)
        rows: list[Any] = []
        total: int | None = None
        count: int | None = None
        if k > 0 and not zero:
            self._search_settings(cur, max(self._ef_search, want))
            unit = (query / query_norm).astype(np.float32)
            # prepared once the vector column is typed (its first embedding changes
            # the result type, which a prepared statement may not see)
            prepare = fixed and self._current() is None and self._dim is not None
            with _prepared(cur.connection, prepare):
                found = cur.execute(
                    f"SELECT {_SEARCH_COLUMNS}, {embedded_expr}, {count_expr} FROM {t} "
                    f"WHERE embedding IS NOT NULL{view} ORDER BY embedding <=> %(q)s "
                    f"LIMIT {int(want)}",
                    {**params, "q": unit},
                    prepare=prepare,
                ).fetchall()
            if found:
                total, count = found[0][-2], found[0][-1]
                rows = [r[:-2] for r in found]
        if total is None:  # no row came back to carry the counts
            total, count = cur.execute(
                f"SELECT {embedded_expr}, {count_expr}", params
            ).fetchone()
        total = int(total)
        count = None if count is None else int(count)
        if count is not None and count <= int(upto or 0):
            everything = cur.execute(
                f"SELECT {_SEARCH_COLUMNS} FROM {t} WHERE true{view} ORDER BY seq", params
            ).fetchall()
            return list(everything), count
        if k <= 0 or total == 0:
            return [], count
        if zero:  # every similarity is 0 (or NaN, counting 0): insertion order
            rows = cur.execute(
                f"SELECT {_SEARCH_COLUMNS} FROM {t} WHERE embedded{view} ORDER BY seq "
                f"LIMIT {int(k)}", params
            ).fetchall()
            return list(rows), count
        if total < bound:  # small enough to rank every row exactly
            rows = cur.execute(
                f"SELECT {_SEARCH_COLUMNS} FROM {t} WHERE embedded{view} ORDER BY seq", params
            ).fetchall()
            return self._rank(query, query_norm, rows, k)[0], count
        rows = self._widened(cur, query, query_norm, sorted(rows, key=lambda r: r[0]), k,
                             want, view, params)
        best, sims = self._rank(query, query_norm, rows, k)
        if len(best) < k or sims[-1] <= 0.0:
            # embedded rows without a direction (zero, NaN, inf: not in the index)
            # count as similarity 0: they may rank among these
            rows += cur.execute(
                f"SELECT {_SEARCH_COLUMNS} FROM {t} WHERE embedded AND embedding IS NULL"
                f"{view}", params
            ).fetchall()
            rows.sort(key=lambda r: r[0])
            best, _ = self._rank(query, query_norm, rows, k)
        return best, count

    def _widened(
        self, cur: Any, query: np.ndarray, query_norm: float, rows: list[Any], k: int,
        want: int, visible: str, params: dict[str, Any],
    ) -> list[Any]:
        """The index's candidates ``rows`` (``want`` asked, in seq order), widened
        (:func:`~emotional_memory.stores._shared.ranking.widened`) while they cannot
        decide the ``k``-th place.

        Args:
            cur: the search's cursor.
            query: the (D,) query; ``query_norm`` its norm (positive, finite).
            rows: the candidates (``_SEARCH_COLUMNS``), sorted by seq.
            k: the places to fill.
            want: how many candidates ``rows`` answered (fewer: the index had no more).
            visible: the view's SQL condition; ``params`` its parameters.

        Returns:
            The candidates to rank, sorted by seq.
        """
        def decided(found: list[Any]) -> bool:
            _, sims = self._rank(query, query_norm, found, len(found))
            return index_decides(float(sims[k - 1]), float(sims[-1]), query.shape[0])

        def fetch(n: int) -> list[Any]:
            self._search_settings(cur, max(self._ef_search, n))
            return sorted(cur.execute(
                f"SELECT {_SEARCH_COLUMNS} FROM {self._t} WHERE embedding IS NOT NULL"
                f"{visible} ORDER BY embedding <=> %(q)s LIMIT {int(n)}",
                {**params, "q": (query / query_norm).astype(np.float32)},
            ).fetchall(), key=lambda r: r[0])

        return rows if want <= k else widened(rows, want, decided, fetch)

    @staticmethod
    def _rank(
        query: np.ndarray, query_norm: float, rows: list[Any], k: int
    ) -> tuple[list[Any], np.ndarray]:
        """Rows (``_SEARCH_COLUMNS``, in seq order) ranked by exact cosine: the best k,
        and their similarities."""
        if not rows:
            return [], np.zeros((0,))
        vectors = np.empty((len(rows), query.shape[0]), dtype=np.float64)
        for i, r in enumerate(rows):
            vectors[i] = _embedding_of(r[2], r[8])
        norms = np.fromiter((r[7] for r in rows), np.float64, len(rows))
        order, sims = rank(vectors, norms, query, query_norm, k)
        return [rows[i] for i in order.tolist()], sims

    def search_by_embedding(self, embedding: Sequence[float], top_k: int) -> list[Memory]:
        """Nearest embedded memories by cosine similarity (docs/behaviour.md §5), best first.

        Memories without an embedding are skipped; ``top_k <= 0`` gives ``[]``; a
        zero-norm query gives the first ``top_k`` embedded memories in insertion order;
        otherwise exact float64 cosine ranks them (NaN as 0, exact ties: the
        later-inserted memory first) over every row up to ``exact_rows`` embedded
        memories, over the HNSW candidates above (widened on exact ties, see the
        package README).

        Args:
            embedding: the (D,) query.
            top_k: how many at most.

        Returns:
            The memories.

        Raises:
            TypeError: ``top_k`` is not an int.
            ValueError: the query's length differs from the store's dimension.
        """
        if isinstance(top_k, bool) or not isinstance(top_k, int | np.integer):
            raise TypeError(f"top_k must be an int, got {type(top_k).__name__}")
        with self._read() as cur:
            query = self._check_query(cur, embedding)
            rows, _ = self._search_rows(cur, query, int(top_k))
        self._lock_found(rows)
        return [self._memory(_search_row_memory_columns(r)) for r in rows]

    def _lock_found(self, rows: Sequence[Any]) -> None:
        """Inside a write transaction, lock the rows (``_SEARCH_COLUMNS``) a search
        returned (``FOR UPDATE``), queued like a write: sent before anything this
        transaction writes next. The rows read are current already (every writer
        holds the store's write lock, which this transaction has)."""
        tx = self._current()
        if tx is None or not tx.write or not rows:
            return
        tx.queued.append((
            f"SELECT 1 FROM {self._t} WHERE seq = ANY(%(seqs)s) ORDER BY seq FOR UPDATE",
            {"seqs": sorted({r[0] for r in rows})},
        ))
        tx.known.update(r[1] for r in rows)
        for r in rows:
            tx.rows[r[1]] = _search_row_memory_columns(r)

    def search_by_embedding_batch(
        self,
        embeddings: Sequence[Sequence[float] | None],
        top_k: int,
        *,
        visible_until: Sequence[str] | None = None,
    ) -> list[list[Memory]]:
        """One :meth:`search_by_embedding` per query, all in one transaction whose
        index searches travel together (pipeline mode).

        Args:
            embeddings: the (D,) queries (None or empty: insertion order).
            top_k: how many memories per query at most.
            visible_until: per query, the id of the last memory (in insertion order)
                it may see (``encode_batch``: each new memory sees the memories stored
                up to itself); None: every memory.

        Returns:
            The memories of each query, best first.
        """
        found = self._search_batch_rows(embeddings, top_k, visible_until=visible_until)
        memories = {
            r[0]: self._memory(_search_row_memory_columns(r)) for rows in found for r in rows
        }
        return [[memories[r[0]] for r in rows] for rows in found]

    def _search_batch_rows(
        self,
        embeddings: Sequence[Sequence[float] | None],
        top_k: int,
        *,
        visible_until: Sequence[str] | None = None,
    ) -> list[list[Any]]:
        """:meth:`search_by_embedding_batch` as rows (``_SEARCH_COLUMNS``), locked
        inside a write transaction (no memory built)."""
        if isinstance(top_k, bool) or not isinstance(top_k, int | np.integer):
            raise TypeError(f"top_k must be an int, got {type(top_k).__name__}")
        n = len(embeddings)
        if visible_until is not None and len(visible_until) != n:
            raise ValueError("visible_until must have one id per query")
        with self._read() as cur:
            limits: list[int | None] = [None] * n
            if visible_until is not None:
                seq_of = dict(cur.execute(
                    f"SELECT id, seq FROM {self._t} WHERE id = ANY(%s)",
                    (list(dict.fromkeys(visible_until)),),
                ).fetchall())
                limits = [seq_of.get(mid, -1) for mid in visible_until]
            queries = [self._check_query(cur, e) for e in embeddings]
            found = self._search_many(cur, queries, int(top_k), limits)
        unique = {r[0]: r for rows in found for r in rows}
        self._lock_found(list(unique.values()))
        return found

    def _search_many(
        self, cur: Any, queries: list[np.ndarray], k: int, limits: list[int | None]
    ) -> list[list[Any]]:
        """:meth:`_search_rows` of many queries, each over the rows ``seq <= limit``;
        the index searches are sent together and read back in one round trip."""
        t = self._t
        out: list[list[Any]] = [[] for _ in queries]
        if k <= 0 or not queries:
            return out
        k = min(k, MOST_ROWS)
        want = k + self._margin
        bound = max(self._exact_rows, want) + 1
        view, params, _ = self._view_filter()
        self._search_settings(cur, max(self._ef_search, want))
        embedded_expr, _ = self._count_exprs(bound, None)
        total = int(cur.execute(f"SELECT {embedded_expr}", params).fetchone()[0])
        if total == 0:
            return out
        top = max((x for x in limits if x is not None), default=None)
        if total < bound:  # every row, once, ranked per query
            everything = cur.execute(
                f"SELECT {_SEARCH_COLUMNS} FROM {t} WHERE embedded{view} "
                + ("AND seq <= %(top)s " if top is not None else "")
                + "ORDER BY seq",
                {**params, "top": top},
            ).fetchall()
        cursors: list[Any] = []
        norms: list[float] = []
        for i, query in enumerate(queries):
            qnorm = norm(query) if query.shape[0] else 0.0
            norms.append(qnorm)
            limit = limits[i]
            if limit is not None and limit < 0:
                cursors.append(None)
                continue
            visible = view + ("" if limit is None else " AND seq <= %(limit)s")
            bound_params = {**params, "limit": limit}
            if qnorm == 0.0 or not math.isfinite(qnorm):
                c = cur.connection.cursor(binary=True)
                c.execute(
                    f"SELECT {_SEARCH_COLUMNS} FROM {t} WHERE embedded{visible} "
                    f"ORDER BY seq LIMIT {int(k)}", bound_params,
                )
                cursors.append(c)
            elif total < bound:
                cursors.append(None)
            else:
                c = cur.connection.cursor(binary=True)
                c.execute(
                    f"SELECT {_SEARCH_COLUMNS} FROM {t} WHERE embedding IS NOT NULL"
                    f"{visible} ORDER BY embedding <=> %(q)s LIMIT {int(want)}",
                    {**bound_params, "q": (query / qnorm).astype(np.float32)},
                )
                cursors.append(c)
        directionless: list[Any] | None = None  # embedded rows not in the index
        for i, query in enumerate(queries):
            c = cursors[i]
            limit = limits[i]
            if limit is not None and limit < 0:
                continue
            qnorm = norms[i]
            if qnorm == 0.0 or not math.isfinite(qnorm):
                out[i] = list(c.fetchall())
            elif c is None:  # small table: rank the visible rows exactly
                rows = everything if limit is None else [r for r in everything if r[0] <= limit]
                out[i] = self._rank(query, qnorm, rows, k)[0]
            else:
                rows = self._widened(cur, query, qnorm, sorted(c.fetchall(), key=lambda r: r[0]),
                                     k, want, view + ("" if limit is None
                                                      else " AND seq <= %(limit)s"),
                                     {**params, "limit": limit})
                best, sims = self._rank(query, qnorm, rows, k)
                if len(best) < k or sims[-1] <= 0.0:  # they count as similarity 0
                    if directionless is None:
                        directionless = cur.execute(
                            f"SELECT {_SEARCH_COLUMNS} FROM {t} WHERE embedded AND "
                            f"embedding IS NULL{view}", params,
                        ).fetchall()
                    rows = sorted(
                        rows + [r for r in directionless if limit is None or r[0] <= limit],
                        key=lambda r: r[0],
                    )
                    best, _ = self._rank(query, qnorm, rows, k)
                out[i] = best
            if c is not None:
                c.close()
        return out

    def _row_candidates(self, rows: Sequence[Any]) -> LinkCandidates:
        """The :class:`LinkCandidates` of search rows (``_SEARCH_COLUMNS``), as
        :func:`memory_candidates` makes them of the rows' memories."""
        if any(r[14] is not None for r in rows):  # a shape only the memory holds
            return memory_candidates([self._memory(_search_row_memory_columns(r)) for r in rows])
        ids = [r[1] for r in rows]
        vectors: list[np.ndarray | None] = []
        for r in rows:
            vec = _embedding_of(r[2], r[8])
            vectors.append(None if vec is None or not vec.size else vec)
        return LinkCandidates(
            ids=ids,
            vectors=vectors,
            affects=[tuple(r[3][_records.F_AFFECT]) for r in rows],
            times_us=[int(r[4][_records.I_TIMESTAMP]) for r in rows],
            keys=ids,
        )


class _PostgresLinker(MemoryLinker):
    """:class:`~emotional_memory.stores._shared.linking.MemoryLinker` with the round trips cut:
    a block's new rows go out together, its candidate searches travel together
    (:meth:`PostgresStore.search_by_embedding_batch`, each memory seeing the memories
    stored up to itself), and a memory's link targets are read (and locked) in one
    query; their updates are queued like every write. The links are those of one
    search and one ``get`` per link (docs/behaviour.md §7)."""

    def __init__(self, store: _Searcher, block_size: int) -> None:
        super().__init__(
            store, store.search_by_embedding_batch if block_size > 1 else None, block_size
        )
        self._pg = store

    def save_and_find(
        self,
        memories: Sequence[Memory],
        limit: int,
        vectors: Sequence[np.ndarray | None] | None = None,
    ) -> Iterator[LinkCandidates]:
        """See :meth:`Linker.save_and_find`: the block's searches travel together and
        the candidates are built from the rows (no memory built for them)."""
        pg = self._pg
        before = len(pg)
        self.save(memories)
        # memory i of the block sees before + i + 1 memories; up to ``limit`` of them
        # its candidates are all of them (docs/behaviour.md §7)
        first = min(len(memories), max(0, limit - before))
        searched = memories[first:]
        found = pg._search_batch_rows(
            [m.embedding or [] for m in searched], limit,
            visible_until=[m.id for m in searched],
        ) if searched else []
        everything = pg.list_all()[: before + first] if first else []
        return (
            memory_candidates(everything[: before + i + 1]) if i < first
            else pg._row_candidates(found[i - first])
            for i in range(len(memories))
        )

    def link(
        self,
        memory: Memory,
        candidates: LinkCandidates,
        links: list[ForwardLink],
        max_links: int,
    ) -> None:
        """See :meth:`Linker.link` (the targets read in one query)."""
        forward = forward_links(memory.id, candidates, links)
        memory = with_links(memory, forward)
        self._pg.update(memory)
        self._forward[memory.id] = memory
        targets = {m.id: m for m in self._pg.memories([lk.target_id for lk in forward])}
        for link in forward:
            target = targets.get(link.target_id)
            if target is None or not backward_twin(memory, target):
                continue
            back = ResonanceLink(
                source_id=target.id, target_id=memory.id, strength=link.strength,
                link_type=link.link_type,
            )
            existing = list(target.tag.resonance_links)
            strengths = [lk.strength for lk in existing]
            if backward(existing, strengths, back, back.strength, max_links):
                updated = with_links(target, existing)
                targets[target.id] = updated
                self._pg.update(updated)
