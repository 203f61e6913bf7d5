"""Shared logic of the stores over external vector databases (Qdrant, Chroma).

A backend provides a few primitives over two collections, the *main* one (memories
with an embedding, vector size = the embedding dimension, cosine distance) and the
*side* one (memories without an embedding, a 1-d placeholder vector; never searched).
This module turns them into the :class:`~emotional_memory.interfaces.MemoryStore`
contract with :class:`~emotional_memory.stores.InMemoryStore`'s answers:

- every record holds the whole memory as JSON (``data``), its insertion sequence
  number (``seq``: ``list_all`` order, kept when a memory is replaced) and a
  ``novec`` flag for embeddings that have no direction (zero norm, NaN/inf), which
  are stored with a placeholder vector;
- ``search_by_embedding`` asks the database for candidates, then ranks them (and
  every ``novec`` memory when they could place) by the exact float64 cosine of the
  stored embeddings, NaN as 0, ties by insertion order, as ``InMemoryStore`` does.
"""

from __future__ import annotations

import json
import math
import threading
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Any

import numpy as np

from emotional_memory.models import Memory

__all__ = ["Record", "VectorDBStore"]

_MARGIN = 16
"""Extra candidates asked from the database beyond ``top_k`` before exact re-ranking."""


@dataclass(frozen=True)
class Record:
    """One stored memory as a backend sees it."""

    id: str
    seq: int
    data: str
    novec: bool = False


def dump_memory(memory: Memory) -> str:
    """The memory as JSON text (NaN/inf embeddings survive: ``NaN`` tokens)."""
    return json.dumps(memory.model_dump(mode="json"), ensure_ascii=False)


def load_memory(data: str) -> Memory:
    """The memory stored by :func:`dump_memory`."""
    return Memory.model_validate(json.loads(data))


def _direction(embedding: Sequence[float]) -> list[float] | None:
    """The embedding as a list when it has a direction (finite, non-zero), else None."""
    values = [float(x) for x in embedding]
    if not all(math.isfinite(x) for x in values) or not any(values):
        return None
    return values


def _cosines(query: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """float64 cosine of ``query`` with each row; NaN (and zero-norm rows) as 0."""
    # Row-wise products and sums (not BLAS): a row's value never depends on its
    # position in the block, so equal embeddings tie exactly.
    with np.errstate(all="ignore"):
        norms = np.sqrt((rows * rows).sum(axis=1)) * np.sqrt((query * query).sum())
        sims = (rows * query).sum(axis=1) / norms
    return np.where(np.isfinite(sims), sims, 0.0)


class VectorDBStore(ABC):
    """Base of :class:`QdrantStore` and :class:`ChromaStore` (see the module doc).

    Thread-safe: one lock serialises this object's calls to the database.
    """

    def __init__(self) -> None:
        """Read the next sequence number from the database."""
        self._lock = threading.RLock()
        self._dim: int | None = self._stored_dim()
        self._next_seq = 1 + max(self._max_seq(True), self._max_seq(False))

    def _max_seq(self, main: bool) -> int:
        """The largest sequence number in a collection (-1 when empty); override to
        avoid reading whole records."""
        return max((r.seq for r in self._scan(main)), default=-1)

    # ---------------------------------------------------------- backend primitives

    @abstractmethod
    def _stored_dim(self) -> int | None:
        """The main collection's vector size, or None while it does not exist."""

    @abstractmethod
    def _create_main(self, dim: int) -> None:
        """Create the main collection with cosine distance and vector size ``dim``."""

    @abstractmethod
    def _upsert(self, main: bool, records: list[Record], vectors: list[list[float]]) -> None:
        """Insert or replace records (with their vectors) in a collection."""

    @abstractmethod
    def _fetch(self, main: bool, ids: list[str]) -> list[Record]:
        """The records with these ids that exist in a collection (any order)."""

    @abstractmethod
    def _remove(self, main: bool, ids: list[str]) -> None:
        """Delete these ids from a collection (absent ids are ignored)."""

    @abstractmethod
    def _scan(self, main: bool, novec_only: bool = False) -> list[Record]:
        """Every record of a collection (or only its ``novec`` ones), any order."""

    @abstractmethod
    def _nearest(self, vector: list[float], k: int) -> list[str]:
        """Ids of up to ``k`` main-collection records nearest to ``vector`` (cosine)."""

    @abstractmethod
    def _count(self, main: bool) -> int:
        """Number of records in a collection (0 when it does not exist)."""

    # -------------------------------------------------------------- MemoryStore

    def save(self, memory: Memory) -> None:
        """Insert a memory, or replace the one with the same id (keeping its position).

        Args:
            memory: The memory to store.

        Raises:
            TypeError: When ``memory`` is not a :class:`Memory`.
            ValueError: When its embedding's dimension differs from the store's.
        """
        if not isinstance(memory, Memory):
            raise TypeError(f"memory must be a Memory, got {type(memory).__name__}")
        with self._lock:
            self._put(memory, must_exist=False)

    def update(self, memory: Memory) -> None:
        """Replace an existing memory in place.

        Args:
            memory: The new version; its id must already be stored.

        Raises:
            KeyError: When no memory has this id.
            ValueError: On an embedding dimension mismatch.
        """
        if not isinstance(memory, Memory):
            raise TypeError(f"memory must be a Memory, got {type(memory).__name__}")
        with self._lock:
            self._put(memory, must_exist=True)

    def _existing(self, memory_id: str) -> Record | None:
        for main in (True, False):
            found = self._fetch(main, [memory_id])
            if found:
                return found[0]
        return None

    def _put(self, memory: Memory, *, must_exist: bool) -> None:
        embedding = memory.embedding
        if embedding is not None:
            if self._dim is not None and len(embedding) != self._dim:
                raise ValueError(
                    f"embedding length mismatch: memory has {len(embedding)}, "
                    f"the store holds dimension {self._dim}"
                )
            if len(embedding) == 0:
                raise ValueError("embedding must not be empty")
        old = self._existing(memory.id)
        if old is None and must_exist:
            raise KeyError(memory.id)
        seq = self._next_seq if old is None else old.seq
        data = dump_memory(memory)
        if embedding is None:
            self._remove(True, [memory.id])
            self._upsert(False, [Record(memory.id, seq, data)], [[1.0]])
        else:
            if self._dim is None:
                self._create_main(len(embedding))
                self._dim = len(embedding)
            direction = _direction(embedding)
            novec = direction is None
            vector = direction if direction is not None else [1.0] + [0.0] * (self._dim - 1)
            self._remove(False, [memory.id])
            self._upsert(True, [Record(memory.id, seq, data, novec)], [vector])
        if old is None:
            self._next_seq += 1

    def get(self, memory_id: str) -> Memory | None:
        """Look a memory up by id.

        Args:
            memory_id: The id.

        Returns:
            The memory, or None when absent.
        """
        with self._lock:
            record = self._existing(memory_id)
        return None if record is None else load_memory(record.data)

    def delete(self, memory_id: str) -> bool:
        """Remove a memory.

        Args:
            memory_id: The id.

        Returns:
            True when the memory existed.
        """
        with self._lock:
            if self._existing(memory_id) is None:
                return False
            self._remove(True, [memory_id])
            self._remove(False, [memory_id])
            return True

    def list_all(self) -> list[Memory]:
        """All memories, in insertion order.

        Returns:
            A new list.
        """
        with self._lock:
            records = self._scan(main=True) + self._scan(main=False)
        records.sort(key=lambda r: r.seq)
        return [load_memory(r.data) for r in records]

    def __len__(self) -> int:
        """Number of memories stored."""
        with self._lock:
            return self._count(True) + self._count(False)

    def count(self) -> int:
        """Number of memories stored (same as ``len(store)``)."""
        return len(self)

    def __contains__(self, memory_id: object) -> bool:
        """Whether a memory with this id is stored."""
        if not isinstance(memory_id, str):
            return False
        with self._lock:
            return self._existing(memory_id) is not None

    @property
    def dim(self) -> int | None:
        """The embedding dimension, or None while no memory has an embedding."""
        return self._dim

    def search_by_embedding(self, embedding: Sequence[float], top_k: int) -> list[Memory]:
        """Nearest embedded memories by cosine similarity (SPEC 5).

        Memories without an embedding are skipped; ``top_k <= 0`` gives ``[]``; a
        zero-norm query gives the first ``top_k`` embedded memories in insertion
        order; otherwise memories are ranked by their float64 cosine similarity,
        highest first, with NaN similarities (and zero-norm embeddings) counting as 0
        and ties resolved by insertion order.

        Args:
            embedding: The (D,) query vector.
            top_k: How many memories to return at most.

        Returns:
            Up to ``top_k`` memories, best first.

        Raises:
            ValueError: When the query's length differs from the store's dimension.
        """
        if isinstance(top_k, bool) or not isinstance(top_k, int):
            raise TypeError("top_k must be an int")
        query = np.asarray(embedding, dtype=np.float64)
        if query.ndim != 1:
            raise ValueError(f"embedding must be one-dimensional, got shape {query.shape}")
        with self._lock:
            if top_k <= 0 or self._dim is None:
                return []
            if query.shape[0] and query.shape[0] != self._dim:
                raise ValueError(
                    f"embedding length mismatch: query has {query.shape[0]}, "
                    f"the store holds dimension {self._dim}"
                )
            direction = _direction(query.tolist()) if query.shape[0] else None
            if direction is None:  # zero-norm (or NaN) query: insertion order
                records = sorted(self._scan(main=True), key=lambda r: r.seq)[:top_k]
                return [load_memory(r.data) for r in records]
            total = self._count(True)
            want = top_k + _MARGIN
            ids = self._nearest(direction, want) if want < total else []
            if len(ids) < min(want, total):
                # Small collection, or an approximate index (HNSW) answered short:
                # rank every embedded memory exactly.
                candidates = {r.id: r for r in self._scan(main=True)}
            else:
                candidates = {r.id: r for r in self._fetch(True, ids)}
            ranked = self._rank(query, list(candidates.values()))
            complete = len(candidates) >= total
            if not complete and (len(ranked) < top_k or ranked[top_k - 1][0] <= 0.0):
                # Memories without a direction score 0 and may tie or place: add them.
                for r in self._scan(main=True, novec_only=True):
                    candidates.setdefault(r.id, r)
                ranked = self._rank(query, list(candidates.values()))
        return [load_memory(r.data) for _, _, r in ranked[:top_k]]

    @staticmethod
    def _rank(query: np.ndarray, records: list[Record]) -> list[tuple[float, int, Record]]:
        """Records by exact cosine, highest first, ties by insertion order."""
        if not records:
            return []
        memories = [load_memory(r.data) for r in records]
        rows = np.asarray([m.embedding for m in memories], dtype=np.float64)
        sims = _cosines(query, rows)
        order = sorted(range(len(records)), key=lambda i: (-sims[i], records[i].seq))
        return [(float(sims[i]), records[i].seq, records[i]) for i in order]

    # ----------------------------------------------------------------- lifecycle

    @abstractmethod
    def close(self) -> None:
        """Release the client."""

    def __enter__(self) -> Any:
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
