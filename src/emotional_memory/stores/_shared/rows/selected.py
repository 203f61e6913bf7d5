"""Selections over the in-memory rows: scope ids, expiry and ``where`` masks.

:class:`RowSelecting` (a mixin of :class:`~emotional_memory.stores.InMemoryStore`)
turns a :class:`~emotional_memory.stores.selection.Selection` into the sorted row
indices it sees: the rows whose scope path (one int32 id per row, an index into the
store's table of paths) lies under the selection's path, that have not expired
(int64 microseconds per row, compared only once a memory with an expiry was stored)
and that match the filter (built-in fields read from the tag columns, metadata from
the row's dict). It also searches and ranks within such a row set with the very
answer a store holding only those rows gives.

:class:`SelectedRows` is the :class:`~emotional_memory.stores.columnar.ColumnarStore`
an engine view works through: every read answers over the selected rows only (the
semantic and lexical shortlists, BM25's statistics, the candidates' adjacency, the
columns of ``prune``, pending ids), and writes go to the owning store after a check
that the memory is seen. ``SQLiteStore`` serves the same view over its cache's rows.
"""

from __future__ import annotations

import dataclasses
import math
import threading
from collections.abc import Callable, Iterable, Sequence
from contextlib import AbstractContextManager
from datetime import datetime
from typing import Any

import numpy as np

from emotional_memory._bank import CandidateBank, LexicalQuery
from emotional_memory._validation import check_page
from emotional_memory.filters import (
    And,
    Clause,
    Compare,
    Where,
    builtin_value,
    compare,
    metadata_value,
)
from emotional_memory.kernel.columns import MemoryColumns
from emotional_memory.kernel.lexical import LexicalInputs
from emotional_memory.models import Memory
from emotional_memory.stores._shared import records as _records
from emotional_memory.stores._shared.ranking import NORM_MAX, NORM_MIN, cosines, norm, stable_top
from emotional_memory.stores._shared.records import to_microseconds
from emotional_memory.stores._shared.rows.columns import NEVER_US
from emotional_memory.stores._shared.rows.linking import SelectedRowLinker
from emotional_memory.stores._shared.rows.search import POOL_MARGIN, check_top_k
from emotional_memory.stores.base import Selection

# The in-memory store (its rows answer a view); not imported: it imports this module.
InMemoryStore = Any

__all__ = ["RowSelecting", "SelectedRows"]

# Tag columns of the numeric built-in fields (floats in ``_tagf``, ints in ``_tagi``).
_FLOAT_FIELDS = frozenset({"valence", "arousal", "dominance"})
_BUILTIN_COLUMN = {
    "valence": _records.F_AFFECT.start,
    "arousal": _records.F_AFFECT.start + 1,
    "dominance": _records.F_AFFECT.start + 2,
    "retrieval_count": _records.I_RETRIEVAL,
    "timestamp": _records.I_TIMESTAMP,
}
# Integers of at most this size convert to float64 exactly.
_EXACT_INT = 2**53


def _numeric_mask(values: np.ndarray, op: str, operand: Any) -> np.ndarray:
    """:func:`~emotional_memory.filters.compare` of a column of present numbers.

    A built-in numeric field is never missing nor null, and its operands are numbers
    (or None for ``$eq``/``$ne``/``$in``/``$nin``): see ``filters._operand``.

    Args:
        values: (N,) float64 or int64 values.
        op: the operator.
        operand: the parsed operand.

    Returns:
        (N,) bool mask, equal to ``compare`` element by element.
    """
    n = values.shape[0]
    if op == "$exists":
        return np.full(n, bool(operand))
    if op in ("$eq", "$ne", "$in", "$nin"):
        operands = operand if op in ("$in", "$nin") else (operand,)
        hit = np.zeros(n, dtype=bool)
        for o in operands:
            if o is not None:
                hit |= _numeric_compare(values, "$eq", o)
        return hit if op in ("$eq", "$in") else ~hit
    return _numeric_compare(values, op, operand)


def _numeric_compare(values: np.ndarray, op: str, operand: int | float) -> np.ndarray:
    """``values op operand`` with Python's exact mixed int/float semantics."""
    if values.dtype.kind == "i" and values.shape[0]:
        if isinstance(operand, int):
            exact = -(2**63) <= operand < 2**63
        else:  # a float operand: the values are converted to float64
            exact = int(values.min()) > -_EXACT_INT and int(values.max()) < _EXACT_INT
        if not exact:
            # float64 could round a value: compare element by element, exactly.
            return np.fromiter(
                (compare(v, op, operand) for v in values.tolist()), bool, values.shape[0]
            )
    if op == "$eq":
        return np.asarray(values == operand)
    if op == "$gt":
        return np.asarray(values > operand)
    if op == "$gte":
        return np.asarray(values >= operand)
    if op == "$lt":
        return np.asarray(values < operand)
    return np.asarray(values <= operand)


# Selections of at most this many searchable rows are ranked exactly, row by row;
# larger ones take the approximate pass over the whole matrix and rescore a pool.
_EXACT_SUBSET = 2048
_APPROX_CHUNK = 64  # queries per matrix product of a batched view search


class RowSelecting:
    """Row sets of selections, and searches within them (a mixin of the in-memory store,
    whose ``__init__`` creates the attributes; callers hold the store's lock)."""

    _size: int
    _valid: np.ndarray
    _has: np.ndarray
    _special: np.ndarray
    _scope_id: np.ndarray
    _expires_us: np.ndarray
    _scopes: list[tuple[str, ...]]
    _any_expiry: bool
    _version: int
    _row_ids: list[str | None]
    _row_of: dict[str, int]
    _meta: list[dict[str, Any] | None]
    _whole: dict[str, Memory]
    _tagf: np.ndarray
    _tagi: np.ndarray
    _labels: _records.LabelTable
    _dim: int | None
    _n_embedded: int
    _mode: str
    _lock: threading.RLock
    _matrix: np.ndarray
    _scale: np.ndarray
    _bias: np.ndarray

    # provided by the other mixins of the store
    _upcast: Callable[[np.ndarray], np.ndarray]
    _check_query: Callable[..., np.ndarray]
    _rank_exact: Callable[..., np.ndarray]
    _exact_similarities: Callable[..., np.ndarray]
    _approximate: Callable[..., np.ndarray]
    _error_bound: Callable[[], float]

    def selected(self, selection: Selection) -> Any:
        """This store confined to ``selection`` (itself when nothing is confined).

        Args:
            selection: what an operation sees.

        Returns:
            A :class:`SelectedRows` view, or the store itself for the root without a
            filter while no memory has (or is being written with) an expiry.
        """
        if selection.unconfined and not (selection.expiring or self._any_expiry):
            return self
        return SelectedRows(lambda: self, self, selection)

    def _scope_ids_under(self, scope: tuple[str, ...]) -> list[int]:
        """Ids of the stored scope paths lying under ``scope``."""
        cache: dict[tuple[str, ...], tuple[int, list[int]]] = self.__dict__.setdefault(
            "_scope_cache", {}
        )
        known = len(self._scopes)
        hit = cache.get(scope)
        if hit is not None and hit[0] == known:
            return hit[1]
        n = len(scope)
        ids = [i for i, path in enumerate(self._scopes) if path[:n] == scope]
        if len(cache) > 4096:
            cache.clear()
        cache[scope] = (known, ids)
        return ids

    def _selected_rows(self, selection: Selection) -> np.ndarray:
        """The live rows ``selection`` sees, ascending (insertion order).

        Args:
            selection: the selection.

        Returns:
            int64 row indices.
        """
        n = self._size
        mask = self._valid[:n].copy()
        if selection.scope:
            ids = self._scope_ids_under(selection.scope)
            if not ids:
                return np.zeros(0, dtype=np.int64)
            column = self._scope_id[:n]
            mask &= column == ids[0] if len(ids) == 1 else np.isin(column, ids)
        if selection.expired:
            if not self._any_expiry:
                return np.zeros(0, dtype=np.int64)
            mask &= self._expires_us[:n] <= to_microseconds(selection.now())
        elif self._any_expiry:
            mask &= self._expires_us[:n] > to_microseconds(selection.now())
        rows = np.flatnonzero(mask)
        where = selection.where
        if where is not None and rows.shape[0]:
            rows = rows[self._where_mask(rows, where)]
        return rows.astype(np.int64, copy=False)

    def _where_mask(self, rows: np.ndarray, where: Where) -> np.ndarray:
        """Which of the live ``rows`` match ``where``, column by column.

        Built-in numeric fields compare whole tag columns at once, ``emotion`` once per
        distinct label, a metadata path once per distinct value (read once per path
        and call); memories kept whole are
        matched as objects. Equal to ``[self._row_matches(r, where) for r in rows]``.

        Args:
            rows: (N,) live row indices.
            where: the filter.

        Returns:
            (N,) bool mask.
        """

        columns: dict[tuple[str, ...], tuple[np.ndarray, list[Any]]] = {}

        def walk(node: Clause) -> np.ndarray:
            if isinstance(node, Compare):
                if node.path:  # each distinct value of the path compared once
                    column = columns.get(node.path)
                    if column is None:
                        column = columns[node.path] = self._metadata_column(rows, node)
                    codes, distinct = column
                    answers = np.fromiter(
                        (compare(v, node.op, node.value) for v in distinct), bool, len(distinct)
                    )
                    return answers[codes]
                return self._compare_mask(rows, node)
            masks = [walk(c) for c in node.clauses]
            reduce = np.logical_and if isinstance(node, And) else np.logical_or
            return reduce.reduce(masks) if len(masks) > 1 else masks[0]

        mask = walk(where.clause)
        if self._whole:
            ids = self._row_ids
            for i, row in enumerate(rows.tolist()):
                whole = self._whole.get(ids[row])
                if whole is not None:
                    mask[i] = where.matches(whole)
        return mask

    def _metadata_column(self, rows: np.ndarray, c: Compare) -> tuple[np.ndarray, list[Any]]:
        """The values of ``c``'s metadata path over ``rows``, factorized: ``(codes,
        distinct)`` with ``distinct[codes[i]]`` row ``i``'s value (scalars of one type
        and value share a code; lists and dicts get one each)."""
        meta = self._meta
        index: dict[Any, int] = {}
        distinct: list[Any] = []
        codes = np.empty(rows.shape[0], dtype=np.int64)
        for i, r in enumerate(rows.tolist()):
            value = metadata_value(meta[r], c)
            key = (type(value), value) if not isinstance(value, list | dict) else (i,)
            code = index.get(key)
            if code is None:
                code = index[key] = len(distinct)
                distinct.append(value)
            codes[i] = code
        return codes, distinct

    def _compare_mask(self, rows: np.ndarray, c: Compare) -> np.ndarray:
        """One comparison over compact ``rows`` (see :meth:`_where_mask`)."""
        if c.path:
            meta = self._meta
            return np.fromiter(
                (compare(metadata_value(meta[r], c), c.op, c.value) for r in rows.tolist()),
                bool,
                rows.shape[0],
            )
        if c.field == "emotion":
            ints = self._tagi[rows]
            codes = np.where(
                ints[:, _records.I_FLAGS] & _records.FLAG_LABEL, ints[:, _records.I_LABEL], -1
            )
            distinct, inverse = np.unique(codes, return_inverse=True)
            answers = np.array(
                [
                    compare(
                        None if code < 0 else self._labels.triple(int(code))[0], c.op, c.value
                    )
                    for code in distinct.tolist()
                ],
                dtype=bool,
            )
            return answers[inverse.reshape(-1)]
        column = _BUILTIN_COLUMN[c.field]
        values = self._tagf[rows, column] if c.field in _FLOAT_FIELDS else self._tagi[rows, column]
        return _numeric_mask(values, c.op, c.value)

    def _row_sees(self, row: int, selection: Selection) -> bool:
        """Whether live ``row`` is seen by ``selection``."""
        if selection.scope and not selection.in_scope(self._scopes[self._scope_id[row]]):
            return False
        if selection.expired:
            expires = int(self._expires_us[row])
            if expires == NEVER_US or expires > to_microseconds(selection.now()):
                return False
        elif self._any_expiry:
            expires = int(self._expires_us[row])
            if expires != NEVER_US and expires <= to_microseconds(selection.now()):
                return False
        return selection.where is None or self._row_matches(row, selection.where)

    def _row_matches(self, row: int, where: Where) -> bool:
        """Whether live ``row`` matches ``where`` (:meth:`Where.matches` of its memory)."""
        mid = self._row_ids[row]
        whole = self._whole.get(mid) if self._whole and mid is not None else None
        if whole is not None:
            return where.matches(whole)
        floats = self._tagf[row]
        ints = self._tagi[row]
        meta = self._meta[row]

        def value_of(c: Compare) -> Any:
            if c.path:
                return metadata_value(meta, c)
            label = None
            if c.field == "emotion" and int(ints[_records.I_FLAGS]) & _records.FLAG_LABEL:
                label = self._labels.triple(int(ints[_records.I_LABEL]))[0]
            return builtin_value(
                c.field,
                float(floats[0]),
                float(floats[1]),
                float(floats[2]),
                int(ints[_records.I_RETRIEVAL]),
                int(ints[_records.I_TIMESTAMP]),
                label,
            )

        return where.evaluate(value_of)

    def _search_rows_in(
        self,
        embedding: Sequence[float] | np.ndarray,
        top_k: int,
        rows: np.ndarray,
        approx: np.ndarray | None = None,
    ) -> np.ndarray:
        """:meth:`_search_rows`'s answer for a store holding only ``rows``.

        Args:
            embedding: the (D,) query.
            top_k: how many rows at most.
            rows: the eligible live rows, ascending.
            approx: the query's approximate cosines (plus bias) of every row, when
                already computed (:meth:`_search_rows_in_batch`); the answer is the
                same whichever way they were rounded (the pool is certified).

        Returns:
            Row indices, best first.
        """
        check_top_k(top_k)
        empty = np.zeros(0, dtype=np.int64)
        if top_k <= 0 or self._n_embedded == 0 or self._dim is None:
            return empty
        query = self._check_query(embedding)
        searchable = rows[self._has[rows]]
        k = min(int(top_k), searchable.shape[0])
        if k == 0:
            return empty
        if query.shape[0] == 0:
            return searchable[:k]
        query_norm = norm(query)
        if query_norm == 0.0:
            return searchable[:k]
        if self._mode == "float64":
            if not math.isfinite(query_norm):
                return searchable[:k]
            sims = cosines(
                self._matrix[searchable, : self._dim],
                self._norms[searchable],  # type: ignore[attr-defined]
                query,
                query_norm,
            )
            return searchable[stable_top(-sims, k)]
        if not math.isfinite(query_norm):
            return searchable[:k]
        if searchable.shape[0] <= _EXACT_SUBSET or not NORM_MIN <= query_norm <= NORM_MAX:
            return self._rank_exact(searchable, query, query_norm, k)
        return self._pooled_in(query, query_norm, k, searchable, approx)

    def _search_rows_in_batch(
        self,
        embeddings: Sequence[Sequence[float] | np.ndarray | None],
        top_k: int,
        rows: np.ndarray,
        visible_until: Sequence[str] | None,
    ) -> list[np.ndarray]:
        """:meth:`_search_rows_in` for many queries, each seeing ``rows`` up to its
        ``visible_until`` memory; the approximate pass of a chunk of queries is one
        matrix product (the matrix upcast once per chunk), the answers the same.

        Args:
            embeddings: the (D,) queries (None or empty: the first embedded rows).
            top_k: how many rows per query.
            rows: the eligible live rows, ascending.
            visible_until: optional memory id per query (its own row included).

        Returns:
            Row indices per query, best first.

        Raises:
            ValueError: ``visible_until`` of the wrong length; a query of the wrong
                dimension. KeyError: an unknown id in ``visible_until``.
        """
        check_top_k(top_k)
        n = len(embeddings)
        if visible_until is not None and len(visible_until) != n:
            raise ValueError(
                f"visible_until must have one id per query ({n}), got {len(visible_until)}"
            )
        last = [self._size - 1] * n if visible_until is None else [
            self._row_of[memory_id] for memory_id in visible_until]
        approx: dict[int, np.ndarray] = {}
        pooled = top_k > 0 and self._mode != "float64" and self._dim is not None and (
            rows.shape[0] > _EXACT_SUBSET)
        units: list[tuple[int, np.ndarray]] = []
        for j, emb in enumerate(embeddings if pooled else ()):
            if emb is None or len(emb) == 0:
                continue
            query = self._check_query(emb)
            query_norm = norm(query)
            if NORM_MIN <= query_norm <= NORM_MAX:
                units.append((j, (query / query_norm).astype(np.float32)))
        for start in range(0, len(units), _APPROX_CHUNK):
            chunk = units[start:start + _APPROX_CHUNK]
            block = self._matrix[: self._size]
            if self._mode != "float32":
                block = self._upcast(block)
            products = block @ np.stack([u for _, u in chunk], axis=1)
            scores = (products * self._scale[: self._size, None] + self._bias[: self._size, None])
            for i, (j, _) in enumerate(chunk):
                approx[j] = np.asarray(scores[:, i], dtype=np.float32)
        out = []
        for j, emb in enumerate(embeddings):
            seen = rows[: int(np.searchsorted(rows, last[j], side="right"))]
            out.append(self._search_rows_in(emb if emb is not None else [], top_k, seen,
                                            approx.get(j)))
        return out

    def _pooled_in(
        self, query: np.ndarray, query_norm: float, k: int, searchable: np.ndarray,
        approx_all: np.ndarray | None = None,
    ) -> np.ndarray:
        """The exact top-k among many ``searchable`` rows: the approximate pass over
        the whole matrix read at those rows (or ``approx_all``, already computed), a
        rescored pool, certified by the rounding bound (as a whole-store search)."""
        if approx_all is None:
            query_unit = (query / query_norm).astype(np.float32)
            approx_all = np.asarray(self._approximate(query_unit, self._size - 1))
        approx = approx_all[searchable]
        specials = int(np.count_nonzero(self._special[searchable]))
        pool_size = min(searchable.shape[0], k + max(POOL_MARGIN, k // 2) + specials)
        if pool_size >= searchable.shape[0]:
            return self._rank_exact(searchable, query, query_norm, k)
        part = np.argpartition(-approx, pool_size)[: pool_size + 1]
        ordered = part[np.argsort(-approx[part], kind="stable")]
        pool = np.sort(searchable[ordered[:pool_size]])
        outside_best = float(approx[ordered[pool_size]])
        sims = self._exact_similarities(pool, query, query_norm)
        order = stable_top(-sims, k)
        kth = float(sims[order[-1]])
        bound = self._error_bound()
        if kth > outside_best + bound:
            return pool[order]
        threshold = np.float32(kth - bound)
        if float(threshold) > kth - bound:
            threshold = np.nextafter(threshold, np.float32(-np.inf))
        extra = searchable[approx >= threshold]
        return self._rank_exact(np.union1d(pool, extra), query, query_norm, k)


class SelectedRows:
    """A row store confined to a selection (see the module docs).

    Args:
        rows_of: returns the :class:`InMemoryStore` whose rows answer (the store
            itself, or a SQLite store's current cache).
        owner: the store writes go to (the same store, or the SQLite store).
        selection: what is seen.
        sync: called before every read (a SQLite store reads other connections'
            commits first); None for none.
        wrap_linker: wraps the view's row linker (the SQLite store's writes the rows
            each block changed); None: used as it is.
    """

    def __init__(
        self,
        rows_of: Callable[[], InMemoryStore],
        owner: Any,
        selection: Selection,
        sync: Callable[[], None] | None = None,
        wrap_linker: Callable[[Any], Any] | None = None,
    ) -> None:
        self._rows_of = rows_of
        self._wrap_linker = wrap_linker
        self.owner = owner
        self.selection = selection
        self._sync = sync
        self._lock: threading.RLock = owner._lock
        self._cached: tuple[Any, int, np.ndarray] | None = None

    def _store(self) -> InMemoryStore:
        if self._sync is not None:
            self._sync()
        return self._rows_of()

    def _rows(self, store: InMemoryStore) -> np.ndarray:
        """The selected rows now (cached until the next write)."""
        cached = self._cached
        if cached is not None and cached[0] is store and cached[1] == store._version:
            return cached[2]
        rows = store._selected_rows(self.selection)
        self._cached = (store, store._version, rows)
        return rows

    def _prime(self) -> None:
        """Find the rows of a filtered selection outside the store's lock.

        A ``where`` over many memories is the costliest part of a confined read;
        holding the store's lock for it would make every other scope's operation wait.
        The store's version is read under the lock before and checked under it after:
        the rows are kept only when no write ran meanwhile (every write bumps the
        version), else the caller finds them under the lock as before.
        """
        if self.selection.where is None:
            return
        with self._lock:
            store = self._store()
            cached = self._cached
            if cached is not None and cached[0] is store and cached[1] == store._version:
                return
            version = store._version
        try:
            rows = store._selected_rows(self.selection)
        except Exception:  # a write changed the columns under the read: redo it locked
            return
        with self._lock:
            if self._rows_of() is store and store._version == version:
                self._cached = (store, version, rows)

    def _seen_row(self, store: InMemoryStore, memory_id: object) -> int | None:
        row = store._row_of.get(memory_id) if isinstance(memory_id, str) else None
        if row is None or not store._row_sees(row, self.selection):
            return None
        return row

    # ------------------------------------------------------------------ protocol

    def save(self, memory: Memory) -> None:
        """Save ``memory`` through the owner; an id held outside the view is refused.

        Raises:
            ValueError: the id belongs to a memory this view does not see.
        """
        with self._lock:
            store = self._store()
            if memory.id in store._row_of and self._seen_row(store, memory.id) is None:
                raise ValueError(f"memory id {memory.id!r} cannot be written from this view")
            self.owner.save(memory)

    def get(self, memory_id: str) -> Memory | None:
        """The memory when this view sees it, else None."""
        with self._lock:
            store = self._store()
            row = self._seen_row(store, memory_id)
            return None if row is None else store._memory_at(row, keep=True)

    def update(self, memory: Memory) -> None:
        """Replace a seen memory (KeyError otherwise, as for an unknown id)."""
        with self._lock:
            if self._seen_row(self._store(), memory.id) is None:
                raise KeyError(memory.id)
            self.owner.update(memory)

    def delete(self, memory_id: str) -> bool:
        """Delete a seen memory (False otherwise)."""
        with self._lock:
            if self._seen_row(self._store(), memory_id) is None:
                return False
            deleted: bool = self.owner.delete(memory_id)
            return deleted

    def list_all(self) -> list[Memory]:
        """The seen memories, in insertion order."""
        self._prime()
        with self._lock:
            store = self._store()
            return [store._memory_at(r) for r in self._rows(store).tolist()]

    def list_page(self, offset: int, limit: int) -> list[Memory]:
        """``list_all()[offset:offset + limit]``, building only those memories.

        Args:
            offset: seen memories skipped first (>= 0).
            limit: most memories returned (>= 0).

        Returns:
            The page, in insertion order.
        """
        offset, limit = check_page(offset, limit)
        self._prime()
        with self._lock:
            store = self._store()
            rows = self._rows(store)[offset:offset + limit]
            return [store._memory_at(r) for r in rows.tolist()]

    def row_linker(self, block_size: int) -> Any:
        """The view's :class:`~emotional_memory.stores._shared.linking.Linker`: the
        rows' own linker, candidates and backward twins only among the seen rows
        (:class:`~emotional_memory.stores._shared.rows.linking.SelectedRowLinker`),
        wrapped by the owner's ``wrap_linker`` when it has one (a SQLite store writes
        the block's rows).

        Args:
            block_size: memories saved and searched together.

        Returns:
            The linker.
        """
        linker = SelectedRowLinker(self, block_size)
        return linker if self._wrap_linker is None else self._wrap_linker(linker)

    def search_by_embedding_batch(
        self,
        embeddings: Sequence[Sequence[float] | None],
        top_k: int,
        *,
        visible_until: Sequence[str] | None = None,
    ) -> list[list[Memory]]:
        """:meth:`search_by_embedding` for many queries at once among the seen
        memories (each query seeing only those stored up to its ``visible_until``
        memory, as the store's own batch search), same answers.

        Args:
            embeddings: the (D,) queries.
            top_k: how many memories per query.
            visible_until: optional memory id per query.

        Returns:
            One list of up to ``top_k`` memories per query, best first.
        """
        self._prime()
        with self._lock:
            store = self._store()
            answers = store._search_rows_in_batch(embeddings, top_k, self._rows(store),
                                                  visible_until)
            return [[store._memory_at(r) for r in rows.tolist()] for rows in answers]

    def search_by_embedding(self, embedding: Sequence[float], top_k: int) -> list[Memory]:
        """The store's search answer among the seen memories."""
        self._prime()
        with self._lock:
            store = self._store()
            rows = store._search_rows_in(embedding, top_k, self._rows(store))
            return [store._memory_at(r) for r in rows.tolist()]

    def __len__(self) -> int:
        self._prime()
        with self._lock:
            store = self._store()
            return int(self._rows(store).shape[0])

    def __contains__(self, memory_id: object) -> bool:
        with self._lock:
            return self._seen_row(self._store(), memory_id) is not None

    # ------------------------------------------------------------------ columnar

    def candidate_bank(
        self,
        embedding: Sequence[float] | np.ndarray | None,
        limit: int | None,
        now: datetime,
        *,
        also: Sequence[str] = (),
        lexical: LexicalQuery | None = None,
        with_memories: bool = False,
    ) -> CandidateBank:
        """See :meth:`~emotional_memory.stores.columnar.ColumnarStore.candidate_bank`,
        over the seen rows (shortlists and BM25 statistics of the seen memories)."""
        self._prime()
        with self._lock:
            store = self._store()
            return store.candidate_bank(
                embedding, limit, now, also=also, lexical=lexical,
                with_memories=with_memories, within=self._rows(store),
            )

    def memories(self, memory_ids: Sequence[str]) -> list[Memory]:
        """The seen memories among ``memory_ids``, in that order."""
        with self._lock:
            store = self._store()
            rows = (self._seen_row(store, mid) for mid in memory_ids)
            return [store._memory_at(r, keep=True) for r in rows if r is not None]

    def columns(self, now: datetime) -> tuple[list[str], MemoryColumns]:
        """See :meth:`~emotional_memory.stores.columnar.ColumnarStore.columns` (the
        seen rows)."""
        self._prime()
        with self._lock:
            store = self._store()
            ids, cols = store.columns(now, rows=self._rows(store))
            return ids, cols

    def scoring_bank(
        self, now: datetime, dtype: Any = np.float32
    ) -> tuple[list[str | None], MemoryColumns, int | None]:
        """Every row as padded JAX columns with ``valid`` set on the seen rows only."""
        import jax

        self._prime()
        with self._lock:
            store = self._store()
            rows = self._rows(store)
            row_ids, cols, dim = store.scoring_bank(now, dtype)
            seen = np.zeros(len(row_ids), dtype=bool)
            seen[rows] = True
            valid = np.asarray(cols.valid) & seen
            ids = [mid if ok else None for mid, ok in zip(row_ids, seen.tolist(), strict=True)]
            return ids, dataclasses.replace(cols, valid=jax.device_put(valid)), dim

    def _allowed(self, store: InMemoryStore) -> set[str]:
        ids = store._row_ids
        return {ids[r] for r in self._rows(store).tolist()}

    def lexical_search(self, terms: Sequence[str], k: int, k1: float = 1.2,
                       b: float = 0.75, *, analysis: str = "none") -> list[str]:
        """BM25 shortlist among the seen memories (their own statistics)."""
        self._prime()
        with self._lock:
            store = self._store()
            return store.lexical_index().search(
                terms, k, k1, b, analysis, within=self._allowed(store)
            )

    def lexical_inputs(
        self, terms: Sequence[str], memory_ids: Sequence[str], *, analysis: str = "none"
    ) -> LexicalInputs:
        """Term statistics over the seen memories."""
        self._prime()
        with self._lock:
            store = self._store()
            return store.lexical_index().inputs(
                terms, memory_ids, analysis=analysis, within=self._allowed(store)
            )

    def linking_to(self, memory_ids: Iterable[str]) -> list[str]:
        """Every memory linking to ``memory_ids``, seen or not: a delete drops every
        link to what it removes, wherever it is held (no link may dangle)."""
        out: list[str] = self.owner.linking_to(memory_ids)
        return out

    def pending_ids(self) -> list[str]:
        """The seen memories pending appraisal, in insertion order."""
        with self._lock:
            store = self._store()
            return [mid for mid in store.pending_ids()
                    if self._seen_row(store, mid) is not None]

    def transaction(self) -> AbstractContextManager[Any]:
        """The owner's transaction."""
        out: AbstractContextManager[Any] = self.owner.transaction()
        return out
