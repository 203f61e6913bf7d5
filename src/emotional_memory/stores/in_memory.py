"""In-process memory store with a vectorised embedding column cache (SPEC 2, 5).

Memories live in a dict that preserves insertion order. Next to it the store keeps
struct-of-arrays columns - a float64 embedding matrix, row norms, a ``has_embedding``
mask and a ``valid`` mask - so :meth:`InMemoryStore.search_by_embedding` is one
matrix-vector product, never a Python loop over memories.

Column layout, and why:

- Rows are appended in insertion order and never reordered except by compaction,
  which keeps their relative order. So row order *is* insertion order, and a stable
  sort over rows resolves ties by insertion order with no extra sequence column.
- Capacity doubles when full (amortised O(1) appends; O(log N) reallocations).
- Deleting a memory leaves a tombstone (``valid`` False). Tombstones are compacted
  away once they outnumber the live rows, so the work stays amortised O(1) per delete.
- Re-saving an existing id rewrites its row in place, keeping its position.

Transactions keep an undo log of the operations done inside them and replay it
backwards on an exception, so a failed block costs only what it did, not a copy of
the whole store.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from types import TracebackType
from typing import Literal

import numpy as np

from emotional_memory.models import Memory

_INITIAL_CAPACITY = 16
# Compact once tombstones exceed both this count and the number of live rows.
_COMPACT_MIN_DEAD = 16
# Below this many embedded rows a full stable argsort beats argpartition.
_PARTITION_MIN_ROWS = 2048


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


def _row_norm(row: np.ndarray) -> float:
    """Euclidean norm of one row; equals ``np.linalg.norm`` without its dispatch cost."""
    return float(np.sqrt(np.dot(row, row)))


class InMemoryStore:
    """A :class:`~emotional_memory.interfaces.MemoryStore` held in process memory.

    Besides the protocol methods it exposes the embedding column cache for batch
    scoring: :meth:`embedding_matrix`, :attr:`dim`, :attr:`capacity` and the
    :attr:`reallocations` counter. It is thread-safe (one re-entrant lock) and
    supports :meth:`transaction` with rollback.
    """

    def __init__(self) -> None:
        """Create an empty store."""
        self._lock = threading.RLock()
        self._memories: dict[str, Memory] = {}
        self._row_of: dict[str, int] = {}
        self._row_ids: list[str | None] = []
        self._size = 0  # rows in use, live or tombstoned
        self._dead = 0  # tombstoned rows among the first ``_size``
        self._capacity = 0
        self._n_embedded = 0
        self._dim: int | None = None
        self._matrix = np.zeros((0, 0), dtype=np.float64)
        self._norms = np.zeros(0, dtype=np.float64)
        self._has = np.zeros(0, dtype=bool)
        self._valid = np.zeros(0, dtype=bool)
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
        order; otherwise memories are ranked by cosine similarity, highest first,
        with NaN similarities (and zero-norm rows) counting as 0 and ties resolved
        by insertion order.

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

    def embedding_matrix(self) -> tuple[list[str], np.ndarray, np.ndarray]:
        """The embedding columns of all memories, in insertion order.

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
            if self._dead:
                live = np.flatnonzero(self._valid[: self._size])
                matrix = self._matrix[live, :cols]
                has = self._has[live]
            else:
                matrix = self._matrix[: self._size, :cols]
                has = self._has[: self._size]
            matrix = matrix.view()
            has = has.view()
            matrix.flags.writeable = False
            has.flags.writeable = False
            return ids, matrix, has

    def _search_rows(self, embedding: Sequence[float], top_k: int) -> np.ndarray:
        """Cache row indices of :meth:`search_by_embedding`'s answer.

        Args:
            embedding: the (D,) query vector.
            top_k: how many rows at most.

        Returns:
            An int64 array of row indices into the cache, best first.
        """
        if isinstance(top_k, bool) or not isinstance(top_k, int | np.integer):
            raise TypeError(f"top_k must be an int, got {type(top_k).__name__}")
        empty = np.zeros(0, dtype=np.int64)
        if top_k <= 0 or self._n_embedded == 0 or self._dim is None:
            return empty
        query = np.asarray(embedding, dtype=np.float64)
        if query.ndim != 1:
            raise ValueError(f"embedding must be one-dimensional, got shape {query.shape}")
        rows = np.flatnonzero(self._valid[: self._size] & self._has[: self._size])
        k = min(int(top_k), rows.shape[0])
        if query.shape[0] == 0:
            return rows[:k]
        if query.shape[0] != self._dim:
            raise ValueError(
                f"embedding length mismatch: query has {query.shape[0]}, "
                f"the store holds dimension {self._dim}"
            )
        query_norm = float(np.linalg.norm(query))
        if query_norm == 0.0:
            return rows[:k]
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            dots = self._matrix[: self._size, : self._dim] @ query
            sims = dots[rows] / (self._norms[rows] * query_norm)
        sims = np.where(np.isnan(sims), 0.0, sims)
        neg = -sims
        if rows.shape[0] <= _PARTITION_MIN_ROWS or k * 4 >= rows.shape[0]:
            order = np.argsort(neg, kind="stable")[:k]
        else:
            # Partition out the k best, then widen to every row tied with the k-th
            # value so ties at the cut still resolve by insertion order.
            cut = np.partition(neg, k - 1)[k - 1]
            pool = np.flatnonzero(neg <= cut)
            order = pool[np.argsort(neg[pool], kind="stable")[:k]]
        return rows[order]

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

    def _put(self, memory: Memory) -> None:
        """Insert or replace ``memory``; validates before touching any state."""
        vec = _embedding_vector(memory)
        if vec is not None and self._dim is not None and vec.shape[0] != self._dim:
            raise ValueError(
                f"embedding dimension mismatch: memory {memory.id!r} has "
                f"{vec.shape[0]}, the store holds dimension {self._dim}"
            )
        if vec is not None and self._dim is None:
            self._set_dim(vec.shape[0])
        memory_id = memory.id
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
            if self._has[row]:
                self._n_embedded -= 1
        self._write_row(row, vec)
        self._memories[memory_id] = memory

    def _write_row(self, row: int, vec: np.ndarray | None) -> None:
        if vec is None:
            self._has[row] = False
            if self._matrix.shape[1]:
                self._matrix[row] = 0.0
            self._norms[row] = 0.0
        else:
            self._matrix[row] = vec
            with np.errstate(over="ignore", invalid="ignore"):
                self._norms[row] = _row_norm(self._matrix[row])
            self._has[row] = True
            self._n_embedded += 1
        if self._n_embedded == 0:
            self._dim = None

    def _remove(self, memory_id: str) -> None:
        """Drop ``memory_id`` (present) and tombstone its row."""
        row = self._row_of.pop(memory_id)
        previous = self._memories.pop(memory_id)
        if self._tx_depth:
            self._undo.append(_Undo("delete", memory_id, previous, row))
        if self._has[row]:
            self._n_embedded -= 1
        self._has[row] = False
        self._valid[row] = False
        self._norms[row] = 0.0
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
            self._matrix[:n] = matrix
            self._matrix[:n][~has] = 0.0
            with np.errstate(over="ignore", invalid="ignore"):
                # Row by row with the very operation ``_write_row`` uses, so norms (and
                # hence rankings) are bit-identical to those of the live store.
                for row in np.flatnonzero(has).tolist():
                    self._norms[row] = _row_norm(self._matrix[row])
        self._has[:n] = has
        self._valid[:n] = True
        self._n_embedded = n_embedded
        row_ids = [m.id for m in memories]
        self._row_ids = list(row_ids)
        self._row_of = {mid: i for i, mid in enumerate(row_ids)}
        self._memories = {m.id: m for m in memories}
        self._size = n

    def _set_dim(self, dim: int) -> None:
        """Fix the embedding dimension (only while no row holds an embedding)."""
        if self._matrix.shape[1] != dim:
            self._matrix = np.zeros((self._capacity, dim), dtype=np.float64)
            self._reallocations += 1
        self._dim = dim

    def _ensure_capacity(self, needed: int) -> None:
        if needed <= self._capacity:
            return
        capacity = max(self._capacity, _INITIAL_CAPACITY)
        while capacity < needed:
            capacity *= 2
        n = self._size
        matrix = np.zeros((capacity, self._matrix.shape[1]), dtype=np.float64)
        matrix[:n] = self._matrix[:n]
        norms = np.zeros(capacity, dtype=np.float64)
        norms[:n] = self._norms[:n]
        has = np.zeros(capacity, dtype=bool)
        has[:n] = self._has[:n]
        valid = np.zeros(capacity, dtype=bool)
        valid[:n] = self._valid[:n]
        self._matrix, self._norms, self._has, self._valid = matrix, norms, has, valid
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
        self._norms[:k] = self._norms[live]
        self._has[:k] = self._has[live]
        self._valid[:k] = True
        self._matrix[k:n] = 0.0
        self._norms[k:n] = 0.0
        self._has[k:n] = False
        self._valid[k:n] = False
        ids = [self._row_ids[r] for r in live.tolist()]
        self._row_ids = ids
        self._row_of = {mid: i for i, mid in enumerate(ids) if mid is not None}
        self._size = k
        self._dead = 0
