"""Shared logic of the stores over external vector databases (Qdrant, Chroma).

:class:`VectorDBStore` turns a backend's few primitives over two collections (memories
with an embedding; memories without one, never searched) into the
:class:`~emotional_memory.interfaces.MemoryStore` contract with
:class:`~emotional_memory.stores.InMemoryStore`'s answers: database candidates ranked
by the exact rule of ``docs/stores.md``, and views (scope, ``where``, expiry) confined
in the database's own filter. Record layout: ``stores/vectordb/README.md``.
"""

from __future__ import annotations

import math
import threading
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Any, ClassVar

import numpy as np

from emotional_memory.interfaces import UnstorableValueError
from emotional_memory.models import EmotionalTag, Memory
from emotional_memory.stores._shared.ranking import (
    WIDEN_MOST,
    index_decides,
    norm,
    rank,
    row_norm,
    row_norms,
)
from emotional_memory.stores._shared.records import (
    check_times,
    check_utf8,
    dump_memory,
    load_memory,
    storable_id,
)
from emotional_memory.stores.base import BackendStore, Selection
from emotional_memory.stores.vectordb.filter import (
    NEVER,
    Cond,
    filter_fields,
    metadata_paths,
)

__all__ = ["Record", "VectorDBSelected", "VectorDBStore"]

_MARGIN = 16
"""Extra candidates asked from the database beyond ``top_k`` before exact re-ranking."""
_SMALL_SELECTION = 256
"""A view selecting at most this many embedded memories is searched by ranking them
all exactly (one filtered scan) instead of a filtered nearest-neighbour query."""


@dataclass(frozen=True)
class Record:
    """One stored memory as a backend sees it."""

    id: str
    seq: int
    data: str
    novec: bool = False
    fields: dict[str, Any] | None = None  # the filter fields to write (writes only)
    collection: str = ""  # where it was read (reads only; for errors)

    def memory(self) -> Memory:
        """The stored memory.

        Raises:
            ValueError: the record's data is no memory, or another memory's (edited
                by hand), naming the memory and its collection.
        """
        try:
            memory = load_memory(self.data)
        except ValueError as exc:
            raise ValueError(
                f"memory {self.id!r} in collection {self.collection!r} has an invalid "
                f"stored record: {exc}"
            ) from None
        if memory.id != self.id:
            raise ValueError(
                f"memory {self.id!r} in collection {self.collection!r} has an invalid "
                f"stored record: its data holds memory {memory.id!r}"
            )
        return memory


def _direction(embedding: Sequence[float]) -> list[float] | None:
    """The embedding's unit direction (what the database indexes for cosine), or None
    when its exact cosine is always 0 or undefined: a norm that is zero (underflowed
    included) or not finite. Such rows are ranked by the exact rule, never by the
    index, and a unit vector never overflows the database's float32."""
    values = np.asarray(embedding, dtype=np.float64)
    with np.errstate(over="ignore", invalid="ignore"):
        size = row_norm(values)
    if not (math.isfinite(size) and size > 0.0):
        return None
    unit: list[float] = (values / size).tolist()
    return unit


def _vector(embedding: Sequence[float]) -> tuple[list[float], bool]:
    """``(vector indexed, novec)`` of a main-collection record: the embedding's
    direction, or a placeholder flagged ``novec`` when it has none."""
    direction = _direction(embedding)
    if direction is None:
        return [1.0] + [0.0] * (len(embedding) - 1), True
    return direction, False


class VectorDBStore(BackendStore, ABC):
    """Base of :class:`QdrantStore` and :class:`ChromaStore` (see the module doc).

    Thread-safe: one lock serialises this object's calls to the database.
    """

    # No transactions in these databases: a multi-write engine operation that could
    # fail half-way (``import_memories``) checks its embeddings against the store first.
    writes_atomic: ClassVar[bool] = False
    refuses_empty_embedding: ClassVar[bool] = True
    # The most comparisons one database filter holds: a ``where`` filter translating
    # to more (a $in of thousands of values) is read as a superset and narrowed in
    # Python, instead of a request the database refuses or dies of.
    filter_size_max: ClassVar[int | None] = 4096
    # The most metadata paths (``me`` entries of ``filter_fields``) one record may
    # carry, None: no limit. A memory with more is refused (UnstorableValueError)
    # before anything is written.
    metadata_paths_max: ClassVar[int | None] = None
    # Whether the database takes only UTF-8 text and non-empty ids (refused, as
    # UnstorableValueError, before anything is written).
    utf8_only: ClassVar[bool] = False

    def __init__(self) -> None:
        """Read the next sequence number from the database."""
        self._lock = threading.RLock()
        self._dim: int | None = self._stored_dim()
        seqs = []
        for main in (True, False):
            top, legacy = self._seq_and_legacy(main)
            seqs.append(top)
            if legacy:
                self._add_fields(main, legacy)
        self._next_seq = 1 + max(seqs)
        # Whether a memory with an expiry may be stored (None: unknown, ask the
        # database); only a backend that is this process's alone keeps it.
        self._may_expire: bool | None = None
        self._expiring_seen = False  # a memory with an expiry was stored or found
        self._writes = 0  # this object's writes (a view's cached count is of one)

    def _add_fields(self, main: bool, ids: list[str]) -> None:
        """Give records written before the filter fields existed their fields (their
        JSON unchanged), in pages."""
        for start in range(0, len(ids), 256):
            records = self._fetch(main, ids[start : start + 256])
            self._set_fields(
                main, [(r.id, filter_fields(r.memory())) for r in records]
            )

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
    def _scan(self, main: bool, novec_only: bool = False, flt: Any = None) -> list[Record]:
        """Every record of a collection (or only its ``novec`` ones) that the rendered
        filter ``flt`` selects (None: all), any order."""

    @abstractmethod
    def _nearest(self, vector: list[float], k: int, flt: Any = None) -> list[str]:
        """Ids of up to ``k`` main-collection records nearest to ``vector`` (cosine)
        among those ``flt`` selects."""

    @abstractmethod
    def _count(self, main: bool, flt: Any = None) -> int:
        """Number of records in a collection that ``flt`` selects (0 when it does not
        exist)."""

    @abstractmethod
    def _seq_and_legacy(self, main: bool) -> tuple[int, list[str]]:
        """The largest sequence number in a collection (-1 when empty) and the ids of
        its records without filter fields (written before they existed)."""

    @abstractmethod
    def _set_fields(self, main: bool, fields: list[tuple[str, dict[str, Any]]]) -> None:
        """Add filter fields to existing records (other payload/metadata kept)."""

    @abstractmethod
    def _rewrite(self, main: bool, records: list[Record], vectors: list[list[float]]) -> None:
        """Replace existing records (data, filter fields, vectors): any filter field
        the stored version has and the record lacks goes; an id deleted meanwhile is
        left deleted."""

    @abstractmethod
    def _render(self, cond: Cond) -> Any:
        """A condition tree (never :data:`TRUE` or :data:`FALSE`) as the database's
        own filter."""

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

    def check_storable(self, memory: Memory) -> dict[str, Any]:
        """The filter fields of ``memory``, or the reason this database cannot hold it.

        Args:
            memory: the memory to write.

        Returns:
            Its :func:`~emotional_memory.stores.vectordb.filter.filter_fields`.

        Raises:
            UnstorableValueError: an id with a NUL or a lone surrogate, which ``get``
                and ``delete`` answer as unknown (field ``"id"``); text that is not
                UTF-8 where ``utf8_only``; metadata of more paths than
                ``metadata_paths_max`` (field ``"metadata"``).
        """
        if not storable_id(memory.id):
            raise UnstorableValueError(
                "id", f"memory id {memory.id!r} holds a NUL character or a lone "
                f"surrogate, which {type(self).__name__} cannot hold"
            )
        if self.utf8_only:
            self._check_utf8(memory)
        self.check_metadata(memory.metadata)
        check_times(memory)
        return filter_fields(memory)

    def _check_utf8(self, memory: Memory) -> None:
        """Refuse an empty id, or text UTF-8 cannot encode (a lone surrogate) naming
        its field (:func:`~emotional_memory.stores._shared.records.check_utf8`)."""
        if not memory.id:
            raise UnstorableValueError(
                "id", f"{type(self).__name__} cannot hold an empty memory id"
            )
        check_utf8(memory, type(self).__name__)

    def check_metadata(self, metadata: dict[str, Any]) -> None:
        """Refuse metadata of more paths than ``metadata_paths_max``.

        Args:
            metadata: a memory's metadata.

        Raises:
            UnstorableValueError: too many paths (field ``"metadata"``).
        """
        most = self.metadata_paths_max
        if most is None:
            return
        paths = metadata_paths(metadata)
        if paths > most:
            raise UnstorableValueError(
                "metadata",
                f"metadata has {paths} keys (nested keys included), over the {most} a "
                f"record of {type(self).__name__} can hold",
            )

    def _put(self, memory: Memory, *, must_exist: bool) -> None:
        fields = self.check_storable(memory)
        self._writes += 1
        embedding = memory.embedding
        dim = None if embedding is None else self._current_dim()
        if embedding is not None:
            if dim is not None and len(embedding) != dim:
                raise ValueError(
                    f"embedding length mismatch: memory has {len(embedding)}, "
                    f"the store holds dimension {dim}"
                )
            if len(embedding) == 0:
                raise ValueError("embedding must not be empty")
        old = self._existing(memory.id)
        if old is None and must_exist:
            raise KeyError(memory.id)
        seq = self._next_seq if old is None else old.seq
        data = dump_memory(memory)
        # written before the old record (in the other collection) is removed: a write
        # the database refuses leaves the memory as it was
        if embedding is None:
            self._upsert(False, [Record(memory.id, seq, data, False, fields)], [[1.0]])
            self._remove(True, [memory.id])
        else:
            if dim is None:
                self._create_main(len(embedding))
            vector, novec = _vector(embedding)
            self._upsert(True, [Record(memory.id, seq, data, novec, fields)], [vector])
            self._dim = len(embedding)  # once stored (a refused write fixes nothing)
            self._remove(False, [memory.id])
        if old is None:
            self._next_seq += 1
        if memory.expires_at is not None:
            self._expiring_seen = True
            if self._may_expire is False:
                self._may_expire = True

    def _holds_expiring(self) -> bool:
        """Whether some stored memory may have an expiry: a view then confines by
        expiry, reading the operation's time; else it reads no clock, as
        InMemoryStore's views. Known while only this object writes (an own
        embedded Qdrant); else asked of the database until one is found."""
        with self._lock:
            if self._expiring_seen or self._may_expire:
                return True
            if self._may_expire is False:
                return False
            expiring = self._render(Cond("range", "x_exp", NEVER, "lt"))
            self._expiring_seen = any(self._count(main, expiring) for main in (True, False))
            return self._expiring_seen

    def get(self, memory_id: str) -> Memory | None:
        """Look a memory up by id.

        Args:
            memory_id: The id.

        Returns:
            The memory, or None when absent.
        """
        if not storable_id(memory_id):  # the client would refuse it; stored nowhere
            return None
        with self._lock:
            record = self._existing(memory_id)
        return None if record is None else record.memory()

    def memories(self, memory_ids: Sequence[str]) -> list[Memory]:
        """The stored memories among ``memory_ids``, in that order (absent ones
        skipped), in one read per collection.

        Args:
            memory_ids: the ids.

        Returns:
            The memories.
        """
        with self._lock:
            held = self._held(memory_ids)
        built = {mid: record.memory() for mid, (_, record) in held.items()}
        return [built[mid] for mid in memory_ids if mid in built]

    def _held(self, memory_ids: Iterable[object]) -> dict[str, tuple[bool, Record]]:
        """The records of these ids (id: (in the main collection, record))."""
        wanted = [m for m in dict.fromkeys(memory_ids) if isinstance(m, str) and storable_id(m)]
        out = {r.id: (True, r) for r in self._fetch(True, wanted)}
        rest = [m for m in wanted if m not in out]
        out.update({r.id: (False, r) for r in self._fetch(False, rest)})
        return out

    def update_tags(self, tags: Sequence[tuple[str, EmotionalTag]]) -> None:
        """Replace the emotional tags of stored memories, every other field kept: one
        read and one write per collection (what a retrieval's side effects write).
        Each record is written whole (its vector too), as ``update`` writes it; one
        that another store object deletes between the read and the write stays deleted.

        Args:
            tags: ``(memory_id, tag)`` pairs.

        Raises:
            KeyError: an unknown id (nothing is written).
            TypeError: a tag that is not an :class:`EmotionalTag` (nothing is written).
        """
        pairs = list(tags)
        for _, tag in pairs:
            if not isinstance(tag, EmotionalTag):
                raise TypeError(f"tag must be an EmotionalTag, got {type(tag).__name__}")
        with self._lock:
            held = self._held(mid for mid, _ in pairs)
            built = {mid: record.memory() for mid, (_, record) in held.items()}
            writes: dict[bool, dict[str, tuple[Record, list[float]]]] = {True: {}, False: {}}
            for memory_id, tag in pairs:
                old = built.get(memory_id)
                if old is None:
                    raise KeyError(memory_id)
                main, record = held[memory_id]
                new = old.model_copy(update={"tag": tag})
                fields = self.check_storable(new)
                # the vector this version implies, written with it: another store
                # object's update since the read (a new embedding) is then lost
                # whole, as with update(), not kept under this version's data
                vector, novec = (_vector(new.embedding) if main and new.embedding is not None
                                 else ([1.0], False))
                writes[main][memory_id] = (
                    Record(memory_id, record.seq, dump_memory(new), novec, fields), vector
                )
            for main, rewritten in writes.items():
                if rewritten:
                    self._writes += 1
                    self._rewrite(main, [r for r, _ in rewritten.values()],
                                  [v for _, v in rewritten.values()])

    def delete(self, memory_id: str) -> bool:
        """Remove a memory.

        Args:
            memory_id: The id.

        Returns:
            True when the memory existed.
        """
        if not storable_id(memory_id):
            return False
        with self._lock:
            if self._existing(memory_id) is None:
                return False
            self._writes += 1
            self._remove(True, [memory_id])
            self._remove(False, [memory_id])
            return True

    def list_all(self) -> list[Memory]:
        """All memories, in insertion order.

        Returns:
            A new list.
        """
        return self._list(None)

    def __len__(self) -> int:
        """Number of memories stored."""
        with self._lock:
            return self._count(True) + self._count(False)

    def count(self) -> int:
        """Number of memories stored (same as ``len(store)``)."""
        return len(self)

    def __contains__(self, memory_id: object) -> bool:
        """Whether a memory with this id is stored."""
        if not isinstance(memory_id, str) or not storable_id(memory_id):
            return False
        with self._lock:
            return self._existing(memory_id) is not None

    @property
    def dim(self) -> int | None:
        """The embedding dimension, or None while no memory has an embedding."""
        with self._lock:
            return self._current_dim()

    def _current_dim(self) -> int | None:
        """The stored dimension: read again from the database while none is known
        (another store object, another process, may have written the first embedded
        memory since this one opened)."""
        if self._dim is None:
            self._dim = self._stored_dim()
        return self._dim

    def search_by_embedding(self, embedding: Sequence[float], top_k: int) -> list[Memory]:
        """Nearest embedded memories by cosine similarity (docs/behaviour.md §5).

        Memories without an embedding are skipped; ``top_k <= 0`` gives ``[]``; a
        zero-norm query gives the first ``top_k`` embedded memories in insertion
        order; otherwise memories are ranked by their float64 cosine similarity,
        highest first, with NaN similarities (and zero-norm embeddings) counting as 0
        and exact ties resolved to the later-inserted memory.

        Args:
            embedding: The (D,) query vector.
            top_k: How many memories to return at most.

        Returns:
            Up to ``top_k`` memories, best first.

        Raises:
            ValueError: When the query's length differs from the store's dimension.
        """
        return self._search(embedding, top_k, None)

    def _search(
        self, embedding: Sequence[float], top_k: int, flt: Any,
        count: Callable[[], int] | None = None,
    ) -> list[Memory]:
        """:meth:`search_by_embedding` among the records the rendered filter ``flt``
        selects (None: all); ``count`` gives their number in the main collection
        (None: ask the database)."""
        if isinstance(top_k, bool) or not isinstance(top_k, int):
            raise TypeError("top_k must be an int")
        query = np.asarray(embedding, dtype=np.float64)
        if query.ndim != 1:
            raise ValueError(f"embedding must be one-dimensional, got shape {query.shape}")
        with self._lock:
            if top_k <= 0 or self._current_dim() is None:
                return []
            if query.shape[0] and query.shape[0] != self._dim:
                raise ValueError(
                    f"embedding length mismatch: query has {query.shape[0]}, "
                    f"the store holds dimension {self._dim}"
                )
            direction = _direction(query.tolist()) if query.shape[0] else None
            if direction is None:  # zero-norm (or NaN) query: insertion order
                records = sorted(self._scan(True, flt=flt), key=lambda r: r.seq)[:top_k]
                return [r.memory() for r in records]
            total = self._count(True, flt) if count is None else count()
            candidates, ranked = self._candidates(query, direction, top_k, total, flt)
            complete = len(candidates) >= total
            if not complete and (len(ranked) < top_k or ranked[top_k - 1][0] <= 0.0):
                # Memories without a direction score 0 and may tie or place: add them.
                for r in self._scan(True, novec_only=True, flt=flt):
                    candidates.setdefault(r.id, r)
                ranked = self._rank(query, list(candidates.values()))
        return [r.memory() for _, _, r in ranked[:top_k]]

    def _candidates(
        self, query: np.ndarray, direction: list[float], top_k: int, total: int, flt: Any
    ) -> tuple[dict[str, Record], list[tuple[float, int, Record]]]:
        """The embedded records a search ranks, by id, and their exact ranking: the
        database's nearest ``top_k`` + a margin, widened while they cannot decide the
        ``top_k``-th place, else every record ``flt`` selects."""
        want = top_k + _MARGIN
        # A filtered nearest-neighbour query on an approximate index (HNSW) may
        # miss neighbours inside a small allowed set: a small selection is
        # ranked whole, exactly.
        small = flt is not None and total <= _SMALL_SELECTION
        while True:
            ids = self._nearest(direction, want, flt) if want < total and not small else []
            if len(ids) < min(want, total):
                # Small collection, or an approximate index (HNSW) answered short:
                # rank every embedded memory exactly.
                candidates = {r.id: r for r in self._scan(True, flt=flt)}
                return candidates, self._rank(query, list(candidates.values()))
            candidates = {r.id: r for r in self._fetch(True, ids)}
            ranked = self._rank(query, list(candidates.values()))
            # A record the database left out scores (in its float32) at most what
            # its worst candidate scores: one that may tie with or beat the
            # top_k-th exactly (an equal direction, a later memory) may be left
            # out, whichever the database picked: ask for more.
            if len(ranked) < top_k or want >= WIDEN_MOST or index_decides(
                    ranked[top_k - 1][0], ranked[-1][0], len(direction)):
                return candidates, ranked
            want = max(want, min(want * 4, WIDEN_MOST))


    def _list(self, flt: Any) -> list[Memory]:
        """The memories ``flt`` selects (None: all), in insertion order."""
        with self._lock:
            records = self._scan(True, flt=flt) + self._scan(False, flt=flt)
        records.sort(key=lambda r: r.seq)
        return [r.memory() for r in records]

    def linking_to(self, memory_ids: Iterable[str]) -> list[str]:
        """Ids of the memories holding a resonance link to any of ``memory_ids``, in
        insertion order (one filtered scan on the ``lk`` field, not a listing).

        Args:
            memory_ids: the link targets.

        Returns:
            The linking memories' ids.
        """
        targets = sorted({i for i in memory_ids if isinstance(i, str)})
        if not targets:
            return []
        out: list[Record] = []
        with self._lock:
            for start in range(0, len(targets), 256):
                cond = _any_link(targets[start : start + 256])
                flt = self._render(cond)
                out += self._scan(True, flt=flt) + self._scan(False, flt=flt)
        seen: dict[str, Record] = {r.id: r for r in out}
        return [r.id for r in sorted(seen.values(), key=lambda r: r.seq)]

    def selected(self, selection: Selection) -> VectorDBSelected:
        """This store confined to ``selection`` in the database's own filter (what an
        engine view works through; see :class:`VectorDBSelected`).

        Args:
            selection: what an operation sees (scope, ``where``, expiry).

        Returns:
            The confined view.
        """
        from emotional_memory.stores.vectordb.view import VectorDBSelected

        return VectorDBSelected(self, selection)

    @staticmethod
    def _rank(query: np.ndarray, records: list[Record]) -> list[tuple[float, int, Record]]:
        """Records by exact cosine, highest first, ties to the later-inserted record."""
        if not records:
            return []
        records = sorted(records, key=lambda r: r.seq)
        rows = np.asarray([r.memory().embedding for r in records], dtype=np.float64)
        query_norm = norm(query)
        if query_norm == 0.0 or not np.isfinite(query_norm):
            return [(0.0, r.seq, r) for r in records]
        order, sims = rank(rows, row_norms(rows), query, query_norm, len(records))
        pairs = zip(order.tolist(), sims, strict=True)
        return [(float(s), records[i].seq, records[i]) for i, s in pairs]

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


def _any_link(targets: list[str]) -> Cond:
    links = [Cond("has", "lk", t) for t in targets]
    return links[0] if len(links) == 1 else Cond("or", items=tuple(links))


from emotional_memory.stores.vectordb.view import VectorDBSelected  # noqa: E402  (re-export)
