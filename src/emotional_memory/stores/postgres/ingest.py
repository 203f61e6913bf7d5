"""PostgreSQL backend: bulk ingest (``encode_batch``, ``encode``, ``import_memories``).

:class:`_BulkLinker` links a block of new memories with a handful of statements
whatever its size, where a memory at a time cost round trips per memory:

- the block's candidates: ONE search statement for the whole block over the rows
  stored before it (a ``LATERAL`` HNSW search per query above ``exact_rows``
  embedded memories, else every row once), and the block's own earlier memories
  ranked in Python by the same exact rule (``stores/_shared/ranking.py``), so memory
  ``j`` sees exactly what was stored up to itself;
- the back-links: kept in Python while the block is linked, from the candidate rows
  just read (the transaction holds the store's write lock: they are current), and
  written once per changed row in ONE ``UPDATE ... FROM (VALUES ...)``;
- the new rows: inserted once the block is linked, with their final links, by
  multi-row ``INSERT`` statements (never updated afterwards: a second version of a
  new row would go to the vector index again), the meta counts in one statement.

The links equal those of one ``save`` + search + ``get`` per memory (what
``InMemoryStore`` builds: ``tests/stores/postgres/test_postgres_ingest.py`` replays
the same calls on both).
"""

from __future__ import annotations

import math
import select
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np

from emotional_memory.interfaces import UnstorableValueError
from emotional_memory.models import Memory, ResonanceLink
from emotional_memory.stores._shared import records as _records
from emotional_memory.stores._shared.linking import (
    ForwardLink,
    LinkCandidates,
    Linker,
    backward,
    embedding_vector,
    forward_links,
    with_links,
)
from emotional_memory.stores._shared.ranking import (
    cosines,
    index_decides,
    norm,
    row_norm,
    stable_top,
    widened,
)
from emotional_memory.stores._shared.records import dump_memory
from emotional_memory.stores.postgres.common import (
    COLUMN_TYPES,
    LINK_CODE,
    _embedding_of,
)
from emotional_memory.stores.postgres.search import _PostgresLinker, _Searcher

_INSERT_CHUNK = 250
"""Rows per multi-row INSERT: the server inserts a chunk (pipeline mode) while the
client writes the next one's parameters."""
_UPDATE_CHUNK = 8000
"""Rows per multi-row link UPDATE (4 parameters each)."""

_COLUMNS = (
    "seq, id, exact, tagf[1:3], tagi[1:1], link_targets, link_strengths, norm, "
    "embedding, link_types, whole IS NOT NULL, scope"
)
"""What linking reads of a stored row: insertion order, id, embedding (``exact``,
``norm``, ``embedding``), core affect, timestamp, links, whether it is kept whole
(then its memory is read: :meth:`_BulkLinker._whole_memory`) and its scope path
(a backward twin only within one: :func:`~emotional_memory.stores._shared.linking.
backward_twin`)."""

_LINK_NAMES = {code: name for name, code in LINK_CODE.items()}

Links = tuple[list[str], list[float], list[int]]
"""A row's links as it is being linked: target ids, strengths, link type codes."""


def insert_rows(store: _Searcher, cur: Any, values: Sequence[dict[str, Any]]) -> None:
    """Insert new rows (``_Writer._row_values``) with multi-row INSERTs and add them to
    the meta counts in one statement (every value a bound parameter).

    Args:
        store: the store (its tables).
        cur: a cursor of the open write transaction.
        values: the rows, in insertion order (ids not stored yet: a stored id fails
            the statement, and with it the transaction).
    """
    if not values:
        return
    fields = store._FIELDS
    row_sql = "(" + ", ".join(f"%s::{COLUMN_TYPES[f]}" for f in fields) + ")"
    head = f"INSERT INTO {store._t} ({', '.join(fields)}) VALUES "
    for lo in range(0, len(values), _INSERT_CHUNK):
        chunk = values[lo : lo + _INSERT_CHUNK]
        cur.execute(
            head + ", ".join([row_sql] * len(chunk)),
            [v[f] for v in chunk for f in fields],
        )
    embedded = sum(1 for v in values if v["embedded"])
    expiring = sum(1 for v in values if v["expires_us"] is not None)
    cur.execute(
        f"UPDATE {store._meta} SET value = (value::bigint + CASE key WHEN 'count' THEN "
        "%s::bigint WHEN 'embedded' THEN %s::bigint ELSE %s::bigint END)::text "
        "WHERE key IN ('count', 'embedded', 'expiring')",
        (len(values), embedded, expiring),
    )


def update_links(store: _Searcher, cur: Any, rows: dict[str, Links]) -> None:
    """Replace the links of stored rows, all in one ``UPDATE ... FROM (VALUES ...)``
    per :data:`_UPDATE_CHUNK` rows (heap-only updates: no indexed column changes).

    Args:
        store: the store.
        cur: a cursor of the open write transaction.
        rows: id -> its new links.
    """
    items = list(rows.items())
    for lo in range(0, len(items), _UPDATE_CHUNK):
        chunk = items[lo : lo + _UPDATE_CHUNK]
        params: list[Any] = []
        for mid, (targets, strengths, codes) in chunk:
            params += [mid, targets, strengths, codes]
        cur.execute(
            f"UPDATE {store._t} AS m SET link_targets = v.lt, link_strengths = v.ls, "
            "link_types = v.ly FROM (VALUES "
            + ", ".join(["(%s::text, %s::text[], %s::float8[], %s::int2[])"] * len(chunk))
            + ") AS v(id, lt, ls, ly) WHERE m.id = v.id",
            params,
        )


class _Ingesting(_Searcher):
    """PostgreSQL backend of :class:`~emotional_memory.stores.postgres.PostgresStore`."""

    def row_linker(self, block_size: int) -> Linker:
        """The linker ``encode`` and ``encode_batch`` use: :class:`_BulkLinker`, or
        for a view with a ``where`` filter (which no encode makes) the per-memory
        :class:`~emotional_memory.stores.postgres.search._PostgresLinker`.

        Args:
            block_size: memories saved and searched together.

        Returns:
            The linker.
        """
        if self._selection is not None and self._selection.where is not None:
            return _PostgresLinker(self, block_size)
        return _BulkLinker(self, block_size)


def _links(source: str, targets: list[str], strengths: list[float], codes: list[int]
           ) -> list[ResonanceLink]:
    """A row's links (:data:`Links`) as :class:`ResonanceLink` objects."""
    return [
        ResonanceLink(source_id=source, target_id=t, strength=s, link_type=_LINK_NAMES[c])
        for t, s, c in zip(targets, strengths, codes, strict=True)
    ]


class _BulkLinker(Linker):
    """The PostgreSQL store's :class:`Linker` (see the module docs).

    Args:
        store: the store, or a view of it confined to a scope and/or an expiry (no
            ``where`` filter: :meth:`_Searcher.row_linker` decides).
        block_size: memories saved and searched together.
    """

    def __init__(self, store: _Searcher, block_size: int) -> None:
        self._pg = store
        self.block_size = block_size
        self._new: list[Memory] = []  # the block's new memories, in order
        self._values: list[dict[str, Any]] = []  # their rows, links written at flush
        self._links: dict[str, Links] = {}  # rows being linked: new, and old ones
        self._old: dict[str, Any] = {}  # old candidate rows (``_COLUMNS``) by id
        self._dirty: dict[str, None] = {}  # old rows whose links changed, in order
        self._whole: dict[str, Memory] = {}  # old rows kept whole, as linked so far
        self._wholes: dict[str, Memory] = {}  # old rows kept whole, as read
        self._final: dict[str, Links] = {}  # saved memories' links
        self._unread: list[str] = []  # saved ids whose stored copy is not read yet
        self._copies: dict[str, Memory] = {}
        self._scopes: dict[str, tuple[str, ...]] = {}  # scope paths of new and old rows

    # ------------------------------------------------------------------ saving

    def settle(self) -> None:
        """See :meth:`Linker.settle` (searches return finished: nothing runs)."""

    def _prepare(
        self, memories: Sequence[Memory], vectors: Sequence[np.ndarray | None] | None
    ) -> list[np.ndarray | None]:
        """Check a block and hold its rows for :meth:`flush` (nothing written yet but
        the embedding dimension, fixed by the store's first embedding).

        Returns:
            The memories' float64 embeddings (None when missing or empty).
        """
        if vectors is not None and len(vectors) != len(memories):
            raise ValueError(f"{len(vectors)} vectors for {len(memories)} memories")
        pg = self._pg
        vecs: list[np.ndarray | None] = []
        for i, memory in enumerate(memories):
            if not isinstance(memory, Memory):
                raise TypeError(f"memory must be a Memory, got {type(memory).__name__}")
            vec = vectors[i] if vectors is not None else embedding_vector(memory)
            if vec is not None:
                pg._ingest_dim(len(vec), memory.id)
            vecs.append(vec)
            try:
                self._values.append(pg._row_values(memory, vec))
            except UnstorableValueError as exc:
                exc.index = i  # within the block: the engine adds the block's offset
                raise
            self._new.append(memory)
            self._scopes[memory.id] = memory.scope
            self._links[memory.id] = ([], [], [])  # saved without links
        return vecs

    def save(
        self, memories: Sequence[Memory], vectors: Sequence[np.ndarray | None] | None = None
    ) -> None:
        """See :meth:`Linker.save`: the rows are inserted at once (no links)."""
        self._prepare(memories, vectors)
        self.flush()

    # ------------------------------------------------------------------ candidates

    def _visible(self, memory: Memory) -> bool:
        """Whether the store (view) sees a new memory (its scope and expiry)."""
        selection = self._pg._selection
        return selection is None or selection.matches(memory)

    def save_and_find(
        self,
        memories: Sequence[Memory],
        limit: int,
        vectors: Sequence[np.ndarray | None] | None = None,
    ) -> Iterator[LinkCandidates]:
        """See :meth:`Linker.save_and_find`: the rows stored before the block are
        searched in one statement, the block's own memories ranked here.

        Memory ``i`` sees the memories stored up to itself: all of them, in insertion
        order, while they are at most ``limit``; else the ``limit`` most similar
        embedded ones (docs/behaviour.md §7), ties to the later-inserted memory.
        """
        start = len(self._new)
        vecs = self._prepare(memories, vectors)
        block = self._new[start:]
        pg = self._pg
        want = limit + pg._margin
        bound = max(pg._exact_rows, want) + 1
        with pg._read() as cur:
            embedded_expr, count_expr = pg._count_exprs(bound, limit)
            view, params, _ = pg._view_filter()
            old_embedded, before = cur.execute(
                f"SELECT {embedded_expr}, {count_expr}", params
            ).fetchone()
            old_embedded, before = int(old_embedded), int(before)
            visible = [self._visible(m) for m in block]
            counts = np.cumsum(visible) + before
            searched = [i for i in range(len(block)) if counts[i] > limit]
            units: dict[int, np.ndarray] = {}
            for i in searched:
                vec = vecs[i]
                qnorm = norm(vec) if vec is not None else 0.0
                if qnorm != 0.0 and math.isfinite(qnorm):
                    units[i] = vec  # type: ignore[assignment]
            everything: list[Any] = []
            if len(searched) < len(block):  # some memory sees every stored row
                everything = cur.execute(
                    f"SELECT {_COLUMNS} FROM {pg._t} WHERE true{view} ORDER BY seq",
                    params,
                ).fetchall()
            firsts: list[Any] = []
            if len(units) < len(searched):  # a query without direction: insertion order
                firsts = cur.execute(
                    f"SELECT {_COLUMNS} FROM {pg._t} WHERE embedded{view} "
                    f"ORDER BY seq LIMIT {int(limit)}", params,
                ).fetchall()
            exact = old_embedded < bound
            hits: dict[int, list[Any]] = {}
            every_embedded: list[Any] = []
            if units and exact and old_embedded:
                every_embedded = cur.execute(
                    f"SELECT {_COLUMNS} FROM {pg._t} WHERE embedded{view} ORDER BY seq",
                    params,
                ).fetchall()
            own: list[Any] = []

            def ours() -> None:  # the block's own part: while the server searches
                own.append(self._block_part(block, vecs, visible, units))

            if units and not exact:
                hits = self._index_search(cur, units, want, view, params, ours)
        if not own:
            ours()
        self._remember(everything, firsts, every_embedded, *hits.values())
        return self._candidates(
            block, vecs, visible, counts, limit, units, everything, firsts,
            every_embedded, hits, exact, *own[0],
        )

    @staticmethod
    def _block_part(
        block: list[Memory], vecs: list[np.ndarray | None], visible: list[bool],
        units: dict[int, np.ndarray],
    ) -> tuple[list[Any], np.ndarray, dict[int, np.ndarray]]:
        """The block's own columns: each new memory's link columns (id, embedding,
        affect, time, norm), which may be candidates (seen and embedded), and the
        cosines of each searched memory with those up to itself.

        Returns:
            ``(columns, candidate flags, searched memory -> cosines)``.
        """
        new: list[tuple[str, np.ndarray | None, Any, int, float]] = []
        for m, vec in zip(block, vecs, strict=True):
            a = m.tag.core_affect
            new.append((m.id, vec, (a.valence, a.arousal, a.dominance),
                        _records.to_microseconds(m.tag.timestamp),
                        row_norm(vec) if vec is not None else 0.0))
        # the block's embeddings in one matrix: memory i's similarities to the block's
        # memories up to itself are one row-wise pass over a slice of it (no copy)
        dim = next((v.shape[0] for v in vecs if v is not None), 0)
        matrix = np.zeros((len(block), dim))
        for j, vec in enumerate(vecs):
            if vec is not None:
                matrix[j] = vec
        block_norms = np.array([c[4] for c in new])
        eligible = np.array([visible[j] and vecs[j] is not None for j in range(len(block))],
                            dtype=bool)
        sims = {
            i: cosines(matrix[: i + 1], block_norms[: i + 1], q, norm(q))[
                np.flatnonzero(eligible[: i + 1])]
            for i, q in units.items()
        }
        return new, eligible, sims

    def _index_search(
        self, cur: Any, units: dict[int, np.ndarray], want: int, view: str,
        params: dict[str, Any], meanwhile: Callable[[], None],
    ) -> dict[int, list[Any]]:
        """The ``want`` nearest stored rows of each query by the HNSW index: ONE
        statement finds them (a ``LATERAL`` index scan per query, insertion orders
        only), a second reads each row found once (neighbouring queries share most
        of their rows); rows in insertion order. ``meanwhile`` runs while the server
        searches (the transaction is in pipeline mode: the search is sent, then
        waited for)."""
        pg = self._pg
        pg._search_settings(cur, max(pg._ef_search, want))
        order = list(units)
        qs = [(units[i] / norm(units[i])).astype(np.float32) for i in order]
        with cur.connection.cursor(binary=True) as search:
            search.execute(  # the vectors in binary (%b): ~30x faster than as text
                f"SELECT q.i, s.seq FROM unnest(%(qs)b::vector[]) WITH ORDINALITY "
                f"AS q(v, i) CROSS JOIN LATERAL (SELECT seq FROM {pg._t} "
                f"WHERE embedding IS NOT NULL{view} ORDER BY embedding <=> q.v "
                f"LIMIT {int(want)}) AS s",
                {**params, "qs": qs},
            )
            pgconn = cur.connection.pgconn  # all of it on its way (a large message)
            while pgconn.flush() == 1:
                select.select([], [pgconn.socket], [], 1.0)
            meanwhile()
            pairs = search.fetchall()
        rows = {r[0]: r for r in cur.execute(
            f"SELECT {_COLUMNS} FROM {pg._t} WHERE seq = ANY(%s)",
            (sorted({seq for _, seq in pairs}),),
        ).fetchall()}
        out: dict[int, list[Any]] = {i: [] for i in order}
        for i, seq in pairs:
            out[order[int(i) - 1]].append(rows[seq])
        for found in out.values():
            found.sort(key=lambda r: r[0])
        return out

    def _remember(self, *groups: Sequence[Any]) -> None:
        """Keep the old rows read (by id): their columns and current links."""
        for rows in groups:
            for r in rows:
                if self._old.setdefault(r[1], r) is r:
                    self._scopes[r[1]] = tuple(r[11])

    def _whole_memory(self, mid: str) -> Memory:
        """The memory of a stored row kept whole (read, and locked, once)."""
        got = self._wholes.get(mid)
        if got is None:
            (got,) = self._pg.memories([mid])
            self._wholes[mid] = got
        return got

    def _old_column(self, r: Any) -> tuple[str, np.ndarray | None, Any, int, float]:
        """An old row's link columns: id, float64 embedding, affect, time, norm."""
        if r[10]:  # a shape only the memory holds
            m = self._whole_memory(r[1])
            a = m.tag.core_affect
            vec = embedding_vector(m)
            return (m.id, vec, (a.valence, a.arousal, a.dominance),
                    _records.to_microseconds(m.tag.timestamp),
                    row_norm(vec) if vec is not None else 0.0)
        vec = _embedding_of(r[2], r[8])
        if vec is not None and not vec.size:
            vec = None
        return (r[1], vec, tuple(r[3]), int(r[4][0]), 0.0 if r[7] is None else float(r[7]))

    def _candidates(
        self, block: list[Memory], vecs: list[np.ndarray | None], visible: list[bool],
        counts: np.ndarray, limit: int, units: dict[int, np.ndarray],
        everything: list[Any], firsts: list[Any], every_embedded: list[Any],
        hits: dict[int, list[Any]], exact: bool, new: list[Any], eligible: np.ndarray,
        own_sims: dict[int, np.ndarray],
    ) -> Iterator[LinkCandidates]:
        """The candidates of each memory of a block, in order (see
        :meth:`save_and_find`; the block's part from :meth:`_block_part`)."""
        columns: dict[int, tuple[str, np.ndarray | None, Any, int, float]] = {}

        def old(rows: Sequence[Any]) -> list[tuple[str, np.ndarray | None, Any, int, float]]:
            out = []
            for r in rows:
                c = columns.get(r[0])
                if c is None:
                    c = columns[r[0]] = self._old_column(r)
                out.append(c)
            return out

        every: tuple[np.ndarray, np.ndarray] | None = None
        directionless: list[Any] | None = None
        for i in range(len(block)):
            if counts[i] <= limit:  # every stored row, in insertion order
                chosen = old(everything) + [new[j] for j in range(i + 1) if visible[j]]
            elif i not in units:  # no direction: the first embedded ones
                embedded = old(firsts) + [new[j] for j in range(i + 1) if eligible[j]]
                chosen = embedded[:limit]
            else:
                query = units[i]
                qnorm = norm(query)
                mine = [new[j] for j in np.flatnonzero(eligible[: i + 1]).tolist()]
                mine_sims = own_sims[i]
                if exact:
                    pool = old(every_embedded)
                    if every is None and pool:
                        every = (np.stack([c[1] for c in pool]),  # type: ignore[misc]
                                 np.array([c[4] for c in pool]))
                else:
                    hits[i] = self._widened(query, qnorm, hits[i], limit, mine_sims, old)
                    pool = old(hits[i])
                chosen, last = self._rank(pool, every if exact else None, mine,
                                          mine_sims, query, qnorm, limit)
                if not exact and (len(chosen) < limit or last <= 0.0):
                    # embedded rows without a direction score 0: they may rank here
                    if directionless is None:
                        directionless = self._directionless()
                    merged = sorted(hits[i] + directionless, key=lambda r: r[0])
                    chosen, _ = self._rank(old(merged), None, mine, mine_sims, query,
                                           qnorm, limit)
            yield LinkCandidates(
                ids=[c[0] for c in chosen],
                vectors=[c[1] for c in chosen],
                affects=[c[2] for c in chosen],
                times_us=[c[3] for c in chosen],
                keys=[c[0] for c in chosen],
                new_vector=vecs[i],
                norms=[c[4] for c in chosen],
            )

    def _widened(
        self, query: np.ndarray, qnorm: float, rows: list[Any], limit: int,
        mine_sims: np.ndarray,
        old: Callable[[Sequence[Any]], list[tuple[str, np.ndarray | None, Any, int, float]]],
    ) -> list[Any]:
        """The index's candidates ``rows`` of one query (in insertion order), widened
        (:func:`~emotional_memory.stores._shared.ranking.widened`) while they cannot
        decide the ``limit``-th place, as a search's are.

        Args:
            query: the (D,) query; ``qnorm`` its norm (positive, finite).
            rows: the candidates the block's search found.
            limit: the places to fill; ``mine_sims`` the block's own cosines.
            old: the link columns of old rows.

        Returns:
            The candidates to rank, in insertion order.
        """
        pg = self._pg

        def decided(found: list[Any]) -> bool:
            columns = old(found)
            sims = cosines(np.stack([c[1] for c in columns]),  # type: ignore[misc]
                           np.array([c[4] for c in columns]), query, qnorm)
            every = np.sort(np.concatenate([sims, mine_sims]))[::-1]
            return len(every) < limit or index_decides(
                float(every[limit - 1]), float(sims.min()), query.shape[0])

        def fetch(n: int) -> list[Any]:
            view, params, _ = pg._view_filter()
            with pg._read() as cur:
                found = self._index_search(cur, {0: query}, n, view, params, lambda: None)[0]
            self._remember(found)
            return found

        return widened(rows, limit + pg._margin, decided, fetch)

    @staticmethod
    def _rank(
        pool: list[Any], stacked: tuple[np.ndarray, np.ndarray] | None, mine: list[Any],
        mine_sims: np.ndarray, query: np.ndarray, qnorm: float, k: int,
    ) -> tuple[list[Any], float]:
        """The best ``k`` of ``pool`` (old rows, insertion order; ``stacked``: their
        embeddings and norms when at hand) then ``mine`` (the block's, in order, whose
        cosines are ``mine_sims``) by exact cosine, ties to the later position, and the last
        one's cosine (0 when none)."""
        parts = [mine_sims]
        if pool:
            if stacked is None:
                stacked = (np.stack([c[1] for c in pool]), np.array([c[4] for c in pool]))
            parts.insert(0, cosines(stacked[0], stacked[1], query, qnorm))
        sims = np.concatenate(parts)
        if not sims.shape[0]:
            return [], 0.0
        everyone = pool + mine
        order = stable_top(-sims, k).tolist()
        return [everyone[p] for p in order], float(sims[order[-1]]) if order else 0.0

    def _directionless(self) -> list[Any]:
        """The stored embedded rows without a direction (not in the index)."""
        pg = self._pg
        view, params, _ = pg._view_filter()
        with pg._read() as cur:
            rows = cur.execute(
                f"SELECT {_COLUMNS} FROM {pg._t} WHERE embedded AND "
                f"embedding IS NULL{view}", params,
            ).fetchall()
        self._remember(rows)
        return list(rows)

    # ------------------------------------------------------------------ linking

    def _links_of(self, mid: str) -> Links | None:
        """The links being built of a new or old row (None: an old row kept whole)."""
        held = self._links.get(mid)
        if held is not None:
            return held
        r = self._old[mid]
        if r[10]:
            if mid not in self._whole:
                self._whole[mid] = self._whole_memory(mid)
            return None
        held = self._links[mid] = (list(r[5]), [float(s) for s in r[6]],
                                   [int(c) for c in r[9]])
        return held

    def link(
        self,
        memory: Memory,
        candidates: LinkCandidates,
        links: list[ForwardLink],
        max_links: int,
    ) -> None:
        """See :meth:`Linker.link`: held until :meth:`flush`."""
        forward = forward_links(memory.id, candidates, links)
        self._links[memory.id] = (
            [lk.target_id for lk in forward], [float(lk.strength) for lk in forward],
            [LINK_CODE[lk.link_type] for lk in forward],
        )
        for lk in forward:
            target = lk.target_id
            if self._scopes[target] != memory.scope:  # see backward_twin
                continue
            held = self._links_of(target)
            if held is None:  # kept whole: its links as ResonanceLinks
                whole = self._whole[target]
                existing = list(whole.tag.resonance_links)
                back = ResonanceLink(source_id=target, target_id=memory.id,
                                     strength=lk.strength, link_type=lk.link_type)
                if backward(existing, [x.strength for x in existing], back,
                            back.strength, max_links):
                    self._whole[target] = with_links(whole, existing)
                continue
            targets, strengths, codes = held
            pairs = list(zip(targets, codes, strict=True))
            if backward(pairs, strengths, (memory.id, LINK_CODE[lk.link_type]),
                        float(lk.strength), max_links):
                targets[:] = [p[0] for p in pairs]
                codes[:] = [p[1] for p in pairs]
                if target in self._old:
                    self._dirty[target] = None

    def flush(self) -> None:
        """See :meth:`Linker.flush`: the block's rows inserted with their links, the
        changed links of older rows written in one statement."""
        pg = self._pg
        new_ids = {m.id for m in self._new}
        for memory, values in zip(self._new, self._values, strict=True):
            targets, strengths, codes = self._links.get(memory.id, ([], [], []))
            values["link_targets"], values["link_strengths"], values["link_types"] = (
                targets, strengths, codes,
            )
            if values["whole"] is not None:
                values["whole"] = dump_memory(with_links(memory, _links(memory.id, targets,
                                                                        strengths, codes)))
            self._final[memory.id] = (targets, strengths, codes)
            self._unread.append(memory.id)
        changed = {mid: self._links[mid] for mid in self._dirty if mid not in new_ids}
        with pg._write() as cur:
            insert_rows(pg, cur, self._values)
            update_links(pg, cur, changed)
        tx = pg._current()
        if tx is not None:
            if any(v["expires_us"] is not None for v in self._values):
                tx.nothing_expires = False
            tx.known.update(new_ids)
            for mid in [*new_ids, *changed]:
                tx.rows.pop(mid, None)
        selection = pg._selection
        if (selection is not None and "vft" not in pg._fv
                and any(v["expires_us"] is not None for v in self._values)):
            # The view was made while no memory could expire (no expiry in its SQL):
            # the next blocks' candidates must not include these rows once expired.
            selection.now()  # read the operation's time: the view's SQL then has it
            self._pg = pg.selected(selection)
        for whole in self._whole.values():
            pg.update(whole)
        self._new, self._values = [], []
        self._links, self._old, self._dirty, self._whole = {}, {}, {}, {}
        self._wholes = {}

    def stored(self, memory: Memory) -> Memory:
        """See :meth:`Linker.stored`: the saved memories read back together (one
        statement for all of them, on the first call)."""
        if self._unread:
            ids, self._unread = self._unread, []
            self._copies.update((m.id, m) for m in self._pg.memories(ids))
        got = self._copies.pop(memory.id, None)
        if got is not None:
            return got
        final = self._final.get(memory.id)
        return memory if final is None else with_links(memory, _links(memory.id, *final))
