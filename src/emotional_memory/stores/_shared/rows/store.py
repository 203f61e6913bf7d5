"""The row engine: memories as struct-of-arrays rows (see ``stores/memory/README.md``)."""

from __future__ import annotations

import threading
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime
from types import TracebackType
from typing import Any

import cachetools
import numpy as np

from emotional_memory._validation import check_after, check_page
from emotional_memory._validation import memory_id as check_id
from emotional_memory.kernel.lexical import LexicalInputs
from emotional_memory.lexical import LexicalIndex
from emotional_memory.models import EmotionalTag, Memory
from emotional_memory.stores._shared import records as _records
from emotional_memory.stores._shared.records import to_microseconds
from emotional_memory.stores._shared.rows.candidates import CandidateRows
from emotional_memory.stores._shared.rows.linking import RowLinking
from emotional_memory.stores._shared.rows.objects import (
    clone,
    deep_size,
    readonly,
)
from emotional_memory.stores._shared.rows.precision import (
    EMBEDDING_DTYPES,
    EmbeddingDType,
    from_bfloat16_bits,  # noqa: F401  (was defined here; tests import it from here)
    to_bfloat16_bits,  # noqa: F401  (same)
)
from emotional_memory.stores._shared.rows.search import check_top_k
from emotional_memory.stores._shared.rows.selected import RowSelecting
from emotional_memory.stores._shared.rows.undo import UndoLog, undo_entry
from emotional_memory.stores._shared.rows.writes import RECENT, EmbeddingDimensionError, RowWrites
from emotional_memory.stores.base import BackendStore

__all__ = [
    "EMBEDDING_DTYPES",
    "EmbeddingDType",
    "EmbeddingDimensionError",
    "RowStore",
    "deep_size",
    "to_microseconds",
]


class RowStore(BackendStore, RowWrites, RowSelecting, RowLinking, CandidateRows, UndoLog):
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
        self._mode = embedding_dtype
        self._lock = threading.RLock()
        self._row_of = {}
        # Per row (length ``_size``): id (None once deleted), content, metadata (None
        # when empty), packed links.
        self._row_ids = []
        self._content = []
        self._meta = []
        self._links = []
        self._whole = {}  # memories kept as objects (odd shapes)
        # float64 embeddings kept aside: slots of a side matrix (see _precision)
        self._side = np.zeros((0, 0), dtype=np.float64)
        self._side_free = []
        self._side_top = 0
        self._recent = cachetools.LRUCache(maxsize=RECENT)
        self._labels = _records.LabelTable()
        self._size = 0  # rows in use, live or tombstoned
        self._dead = 0  # tombstoned rows among the first ``_size``
        self._capacity = 0
        self._n_embedded = 0
        self._n_special = 0  # live embedded rows that are always rescored exactly
        self._dim = None
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
        self._aside = np.zeros(0, dtype=bool)  # float64 embedding kept in _side
        self._side_slot = np.zeros(0, dtype=np.int64)  # its slot there (-1: none)
        self._valid = np.zeros(0, dtype=bool)
        self._tagf, self._tagi = _records.row_arrays(0)
        # Scopes: each row's path as an index into _scopes; expiry per row.
        self._scope_id = np.zeros(0, dtype=np.int32)
        self._expires_us = np.zeros(0, dtype=np.int64)
        # Insertion numbers (list_after's cursors): they survive compaction, which
        # renumbers rows but keeps their order.
        self._seq = np.zeros(0, dtype=np.int64)
        self._next_seq = 0
        self._scopes: list[tuple[str, ...]] = [()]
        self._scope_index: dict[tuple[str, ...], int] = {(): 0}
        self._any_expiry = False  # some memory ever stored with an expiry
        # some memory ever stored with a scope or an expiry: until then every row holds
        # the fill values (scope id 0, never expires) and _write_place writes nothing
        self._placed = False
        self._version = 0
        # bumped when a row's embedding is removed or rows are renumbered (a batch's
        # candidates searched before its transaction hold while it stands still)
        self._search_epoch = 0
        self._reallocations = 0
        self._tx_depth = 0
        self._undo = []
        # Built on first use (lexical_index) and kept in step with every write after.
        self._lexical = None

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
        check_id(memory_id)
        with self._lock:
            row = self._row_of.get(memory_id)
            if row is None:
                return None
            return self._memory_at(row, keep=True)

    def memories(self, memory_ids: Sequence[str], *, keep: bool = True) -> list[Memory]:
        """The stored memories of ``memory_ids``, in that order (missing ones skipped).

        Args:
            memory_ids: the ids.
            keep: remember them among the recently used memories, as :meth:`get`
                does (False: a walk, as :meth:`list_page`'s, that would evict them).

        Returns:
            The memories (as :meth:`get` gives them).
        """
        with self._lock:
            rows = (self._row_of.get(mid) for mid in memory_ids)
            return [self._memory_at(r, keep=keep) for r in rows if r is not None]

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

    def update_tags(self, tags: Sequence[tuple[str, EmotionalTag]]) -> None:
        """Replace the tags of stored memories, every other field kept as stored.

        What the retrieval side effects write (docs/behaviour.md §6): the same rows and undo entries
        as :meth:`update` with each memory's new tag, without comparing or copying its
        embedding, content, metadata, scope or expiry, which it takes from the store.
        A subclass overriding :meth:`update` gets one :meth:`update` call per pair.

        Args:
            tags: ``(memory_id, tag)`` pairs (ids as :meth:`memories` returned them).

        Raises:
            KeyError: an unknown id (nothing is written).
            TypeError: a tag that is not an :class:`EmotionalTag` (nothing is written).
        """
        with self._lock:
            pairs = list(tags)
            rows: list[int] = []
            for memory_id, tag in pairs:
                if not isinstance(tag, EmotionalTag):
                    raise TypeError(f"tag must be an EmotionalTag, got {type(tag).__name__}")
                row = self._row_of.get(memory_id)
                if row is None:
                    raise KeyError(memory_id)
                rows.append(row)
            if type(self).update is not RowStore.update or len(set(rows)) < len(rows):
                for (_, tag), row in zip(pairs, rows, strict=True):
                    self.update(clone(self._memory_at(row), {"tag": tag}))
                return
            for (memory_id, tag), row in zip(pairs, rows, strict=True):
                known = self._recent.get(memory_id)
                memory = clone(known if known is not None else self._memory_at(row), {"tag": tag})
                if known is None or not _records.fits(memory):
                    self._put(memory)  # kept whole, or not recent: the general path
                    continue
                if self._tx_depth:
                    self._undo.append(undo_entry("tags", memory_id, row, self._tag_snapshot(row)))
                floats, ints = _records.encode_tag(tag, self._labels)
                self._tagf[row] = floats
                self._tagi[row] = ints
                self._links[row] = _records.pack_links(tag.resonance_links, self._intern)
                # the store's own embedding and metadata stay shared with the recent copy
                self._remember(clone(known, {
                    "tag": clone(tag, {"resonance_links": list(tag.resonance_links)}),
                }))
                self._version += 1

    def delete(self, memory_id: str) -> bool:
        """Remove a memory.

        Args:
            memory_id: the id.

        Returns:
            True when the memory existed.
        """
        check_id(memory_id)
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

    def list_page(self, offset: int, limit: int) -> list[Memory]:
        """``list_all()[offset:offset + limit]``, building only those memories.

        Args:
            offset: memories skipped first (>= 0).
            limit: most memories returned (>= 0).

        Returns:
            The page, in insertion order.
        """
        offset, limit = check_page(offset, limit)
        with self._lock:
            live = self._live_rows()
            rows = (
                range(self._size)[offset:offset + limit] if live is None
                else live[offset:offset + limit].tolist()
            )
            return [self._memory_at(r) for r in rows]

    def list_after(self, position: int | None, limit: int) -> tuple[list[Memory], int | None]:
        """The next ``limit`` memories in insertion order after ``position`` (see
        :class:`~emotional_memory.stores.base.KeysetPagingStore`): O(log N + the rows
        walked), the rows walked being the page and the deleted rows among it.

        Args:
            position: None (from the start) or a cursor this store returned.
            limit: most memories returned (>= 1).

        Returns:
            ``(page, cursor)``; the cursor is ``position`` when the page is empty.
        """
        cursor, limit = check_after(position, limit)
        with self._lock:
            size = self._size
            row = int(np.searchsorted(self._seq[:size], cursor, side="right"))
            rows: list[int] = []
            while len(rows) < limit and row < size:
                end = min(size, row + 2 * (limit - len(rows)) + 16)
                live = np.flatnonzero(self._valid[row:end]) + row
                rows.extend(live[: limit - len(rows)].tolist())
                row = end
            if not rows:
                return [], position
            return [self._memory_at(r) for r in rows], int(self._seq[rows[-1]])

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
        """Nearest embedded memories by cosine similarity (docs/behaviour.md §5).

        Memories without an embedding are skipped; ``top_k <= 0`` gives ``[]``; a
        zero-norm query gives the first ``top_k`` embedded memories in insertion
        order; otherwise memories are ranked by their float64 cosine similarity,
        highest first, with NaN similarities (and zero-norm rows) counting as 0 and
        exact ties resolved to the later-inserted memory. Every ``embedding_dtype``
        returns this very answer for the embeddings as stored.

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
        per query; a block of fewer than 4 queries takes one matrix-vector product
        each), then each query is finished exactly as a single search.

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
        check_top_k(top_k)
        with self._lock:
            answers = self._search_rows_batch(embeddings, top_k, visible_until)
            return [
                [self._memory_at(r) for r in rows.tolist()] for rows in answers if rows is not None
            ]

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
        plus any float64 rows kept aside (see the module documentation; the slots of
        the side matrix in use, not its spare ones)."""
        with self._lock:
            return int(self._matrix.nbytes) + self._side_nbytes()

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
            return ids, readonly(matrix), readonly(has)

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
            return row_ids, readonly(matrix), readonly(self._norms), valid

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
        self, terms: Sequence[str], k: int, k1: float = 1.2, b: float = 0.75,
        analysis: str = "none",
    ) -> list[str]:
        """The lexical shortlist under the store's lock (:meth:`LexicalIndex.search`).

        Args:
            terms: query terms.
            k: shortlist size.
            k1: BM25 k1.
            b: BM25 b.
            analysis: the lexical analysis of ``terms`` (``lexical_stemmer``).

        Returns:
            Up to ``k`` memory ids, best BM25 first.
        """
        with self._lock:
            return self.lexical_index().search(terms, k, k1, b, analysis)

    def lexical_inputs(
        self, terms: Sequence[str], memory_ids: Sequence[str], analysis: str = "none"
    ) -> LexicalInputs:
        """Term statistics of candidates under the store's lock (:meth:`LexicalIndex.inputs`).

        Args:
            terms: query terms.
            memory_ids: the candidates, in candidate order.
            analysis: the lexical analysis of ``terms`` (``lexical_stemmer``).

        Returns:
            Unpadded :class:`~emotional_memory.kernel.LexicalInputs` (numpy leaves).
        """
        with self._lock:
            return self.lexical_index().inputs(terms, memory_ids, analysis=analysis)

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
        self, now: datetime | float, *, padded: bool = False, dtype: Any = np.float64,
        rows: np.ndarray | None = None,
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
            rows: with ``padded`` False, only these live rows (ascending; a
                selection's, see ``stores/_selected.py``).

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
            elif rows is not None:
                take = rows
                row_ids = [self._row_ids[r] for r in rows.tolist()]
                valid = np.ones(len(row_ids), dtype=bool)
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
                embedding=readonly(matrix),
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

    def __enter__(self) -> RowStore:
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
