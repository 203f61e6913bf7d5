"""Saving new memories and linking them by resonance, block by block (SPEC 7): store side.

``EmotionalMemory.encode`` and ``encode_batch`` save new memories and link each one to
its resonance candidates. The engine scores the links
(:func:`emotional_memory.resonance.score_links`); what it needs from the store goes
through a :class:`Linker`:

- save a block of new memories;
- the candidates of each memory of the block, as columns (:class:`LinkCandidates`):
  memory ``j`` sees only the memories stored up to itself; up to ``limit`` stored
  memories they are all of them, in insertion order, beyond that the ``limit``
  nearest by embedding;
- write a memory's forward links and the backward twins on their targets (appended,
  or replacing the target's weakest link when it is full and the twin is stronger),
  and whatever it held back once the block is linked;
- the stored copy of a memory, once the block is done.

Two implementations, which build the very same store:

- :class:`RowLinking` (a mixin of :class:`~emotional_memory.stores.InMemoryStore`):
  blocks of rows, candidates as row indices from one batched search per block, link
  columns read from the rows for several memories at once (float64 embeddings as
  stored, core affects, timestamps), the links of compact rows held unpacked while
  a block is linked and packed back once per row at its end (:meth:`Linker.flush`),
  only the old links logged for undo. No :class:`~emotional_memory.models.Memory` is
  built on the way. Its searches overlap the engine's linking (:attr:`Linker.overlaps`):
  a block's search is started when the block is saved and finished a block of
  queries at a time as the candidates are read, while the engine links the block
  before; a running search is fetched before any row is written
  (:meth:`Linker.settle`);
- :class:`MemoryLinker`: any :class:`~emotional_memory.interfaces.MemoryStore`
  through its protocol methods (``save`` / ``get`` / ``update`` / ``list_all`` /
  ``search_by_embedding``, and ``search_by_embedding_batch(..., visible_until=ids)``
  when the store has it). It is also what a subclass of ``InMemoryStore`` that
  overrides one of those methods gets, so its overrides are honoured.
"""

from __future__ import annotations

import itertools
import threading
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import numpy as np

from emotional_memory.interfaces import MemoryStore
from emotional_memory.models import LinkType, Memory, ResonanceLink
from emotional_memory.stores._records import (
    _LINK_CODE,
    pack_link_columns,
    to_microseconds,
    unpack_link_columns,
    unpack_links,
)
from emotional_memory.stores._search import EmbeddingSearch, PendingSearch
from emotional_memory.stores._undo import UndoLog, _undo
from emotional_memory.stores.columnar import overrides_any

_LINK_CODES = {name: bytes([code]) for name, code in _LINK_CODE.items()}
"""Link type -> its one-byte code in a packed link record."""

_COLUMN_CHUNK = 64
"""Memories whose candidates' columns are gathered together (bounds the float64
copy of their embeddings)."""

BatchSearch = Callable[..., list[list[Memory]]]
"""A store's ``search_by_embedding_batch(embeddings, top_k, *, visible_until=ids)``."""

PendingLinks = dict[int, tuple[str, tuple[str, ...], tuple[float, ...], bytes]]
"""Compact rows whose new links are held back while a block is linked: row ->
``(memory id, target ids, strengths, link type codes)`` (the columns of
:func:`~emotional_memory.stores._records.unpack_link_columns`), written back packed
by ``RowLinking._link_flush``. Tuples of atoms and ``bytes``, replaced rather than
changed: once the garbage collector has met an entry it no longer tracks it,
however long the block (lists it would traverse in every collection until then)."""

ForwardLink = tuple[int, float, LinkType]
"""A link to write: ``(index among the candidates, strength, link type)``."""

# The protocol methods whose effect the row path reproduces without calling them: a
# subclass overriding one of them is linked through MemoryLinker instead.
_STOOD_IN_FOR = (
    "__len__",
    "save",
    "get",
    "update",
    "list_all",
    "search_by_embedding",
    "search_by_embedding_batch",
)


def embedding_vector(memory: Memory) -> np.ndarray | None:
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


@dataclass(frozen=True)
class LinkCandidates:
    """The resonance candidates of one new memory, as columns, in candidate order.

    Attributes:
        ids: the memory ids.
        vectors: the embeddings as stored, as float64 vectors (None when missing or
            empty).
        affects: the core affects as ``(valence, arousal, dominance)``.
        times_us: the timestamps in microseconds since the Unix epoch.
        keys: what :meth:`Linker.link` needs to find each candidate again (its row,
            or its id).
        new_vector: the new memory's own embedding as a float64 vector, when the
            linker has it at hand (None: convert the memory's embedding).
        norms: the norms of ``vectors`` (``sqrt(v . v)``, as the store computed them
            when it saved each row; arbitrary where a vector is None), or None when
            the linker does not have them (:func:`score_links` computes them).
    """

    ids: Sequence[str]
    vectors: Sequence[np.ndarray | None]
    affects: Sequence[Sequence[float]]
    times_us: Sequence[int]
    keys: Sequence[Any]
    new_vector: np.ndarray | None = None
    norms: Sequence[float] | None = None


class Linker(ABC):
    """Saves new memories and writes their resonance links (see the module docs).

    Attributes:
        block_size: how many new memories are saved and searched together.
        overlaps: whether the engine may save and start searching the next block
            before linking this one (:meth:`save_and_find` then returns candidates
            whose search may still run; only for a store whose writes the engine's
            transaction makes all-or-nothing, since a failure then finds the next
            block saved and this one not linked yet). False: each block is linked
            right after its :meth:`save_and_find`.
    """

    block_size: int
    overlaps: bool = False

    @abstractmethod
    def settle(self) -> None:
        """Wait for any search still running (the engine calls it when linking ends,
        normally or not, before the store's rows may change again)."""

    @abstractmethod
    def save(
        self, memories: Sequence[Memory], vectors: Sequence[np.ndarray | None] | None = None
    ) -> None:
        """Save a block of new memories, in order (no linking).

        Args:
            memories: the new memories.
            vectors: optionally, their embeddings as the float64 vectors of their
                lists (None where missing or empty), which a linker may write rows
                from instead of converting the lists.
        """

    @abstractmethod
    def save_and_find(
        self,
        memories: Sequence[Memory],
        limit: int,
        vectors: Sequence[np.ndarray | None] | None = None,
    ) -> Iterator[LinkCandidates]:
        """Save a block of new memories, then find the candidates of each.

        Args:
            memories: at most :attr:`block_size` new memories, in encoding order.
            limit: ``max_links * candidate_multiplier``.
            vectors: optionally, their embeddings as float64 vectors (see :meth:`save`).

        Returns:
            The candidates of each memory, in order, each read when it is reached
            (links written in between do not change them, nor, with
            :attr:`overlaps`, the next block saved in between).
        """

    @abstractmethod
    def link(
        self,
        memory: Memory,
        candidates: LinkCandidates,
        links: list[ForwardLink],
        max_links: int,
    ) -> None:
        """Write ``memory``'s forward links and their backward twins, in order.

        Args:
            memory: the new memory (already saved, without links).
            candidates: its candidates.
            links: its forward links, strongest first (not empty).
            max_links: the most links a memory keeps.
        """

    @abstractmethod
    def flush(self) -> None:
        """Write what :meth:`link` held back for the block just linked (call it once
        the block's memories are linked, before anything else reads the store)."""

    @abstractmethod
    def stored(self, memory: Memory) -> Memory:
        """The store's copy of a new memory once linking is done.

        Args:
            memory: the new memory as it was saved, handed over: the engine built it
                for this encode and drops it after this call, so the copy may be
                ``memory`` itself, its link list filled in place (it was handed to
                nobody else: the store kept none of its objects).

        Returns:
            What the store holds for it (links included).
        """


@runtime_checkable
class RowLinkingStore(Protocol):
    """A store with its own :class:`Linker` (as :class:`RowLinking` provides)."""

    def row_linker(self, block_size: int) -> Linker | None:
        """The store's linker, or None when it must be linked through its protocol."""
        ...


@runtime_checkable
class BatchSearchStore(Protocol):
    """A store with ``search_by_embedding_batch(embeddings, top_k, *, visible_until)``."""

    def search_by_embedding_batch(
        self,
        embeddings: Sequence[Sequence[float] | None],
        top_k: int,
        *,
        visible_until: Sequence[str] | None = None,
    ) -> list[list[Memory]]:
        """One ``search_by_embedding`` per query, each seeing memories up to its id."""
        ...


def linker_for(
    store: MemoryStore, block_size: int, owner: MemoryStore | None = None
) -> Linker:
    """The linker of ``store``.

    Args:
        store: the engine's store (or a view of it confined to a selection).
        block_size: memories saved and searched together; 1 links each memory as
            ``encode`` does (one ``search_by_embedding`` per memory on a plain store).
        owner: for a confined view, the store it confines: the memories the linker
            saves are written and read back through it, so a new memory the view
            does not see (one already expired) still gets its links.

    Returns:
        The store's own row linker when it has one, else a :class:`MemoryLinker`
        (batched when ``block_size > 1`` and the store has a batched search).
    """
    if isinstance(store, RowLinkingStore):
        own = store.row_linker(block_size)
        if own is not None:
            return own
    if block_size > 1 and isinstance(store, BatchSearchStore):
        return MemoryLinker(store, store.search_by_embedding_batch, block_size, owner)
    return MemoryLinker(store, None, 1, owner)


def memory_candidates(memories: Sequence[Memory]) -> LinkCandidates:
    """The link columns of candidate memories (their ids serve as keys).

    Args:
        memories: the candidates, in order.

    Returns:
        Their :class:`LinkCandidates`.
    """
    ids = [m.id for m in memories]
    return LinkCandidates(
        ids=ids,
        vectors=[
            np.asarray(m.embedding, dtype=np.float64) if m.embedding else None for m in memories
        ],
        affects=[
            (m.tag.core_affect.valence, m.tag.core_affect.arousal, m.tag.core_affect.dominance)
            for m in memories
        ],
        times_us=[to_microseconds(m.tag.timestamp) for m in memories],
        keys=ids,
    )


def _with_links(memory: Memory, links: list[ResonanceLink]) -> Memory:
    return memory.model_copy(
        update={"tag": memory.tag.model_copy(update={"resonance_links": links})}
    )


def _backward_slot(strengths: Sequence[float], strength: float, max_links: int) -> int:
    """Where a backward twin of ``strength`` goes among a target's links.

    Appended while the target has fewer than ``max_links`` links; else it replaces
    the weakest one (the first of equal minima) when strictly stronger.

    Args:
        strengths: the strengths of the target's links, in order.
        strength: the twin's strength.
        max_links: the most links a memory keeps.

    Returns:
        ``len(strengths)`` to append it, the index of the link it replaces, or -1
        when it is not kept.
    """
    n = len(strengths)
    if n < max_links:
        return n
    weakest = min(range(n), key=strengths.__getitem__)
    return weakest if strength > strengths[weakest] else -1


def _backward(
    existing: list[Any], strengths: list[float], back: Any, strength: float, max_links: int
) -> bool:
    """Add a backward twin to a target's links (both lists change in place), where
    :func:`_backward_slot` puts it.

    Args:
        existing: the target's links (any representation).
        strengths: their strengths.
        back: the twin, in the representation of ``existing``.
        strength: its strength.
        max_links: the most links a memory keeps.

    Returns:
        Whether the links changed.
    """
    slot = _backward_slot(strengths, strength, max_links)
    if slot < 0:
        return False
    if slot == len(existing):
        existing.append(back)
        strengths.append(strength)
    else:
        existing[slot] = back
        strengths[slot] = strength
    return True


class MemoryLinker(Linker):
    """A :class:`Linker` over the :class:`~emotional_memory.interfaces.MemoryStore`
    protocol: every write is a ``store.update`` of a whole memory.

    Args:
        store: the store.
        search: its ``search_by_embedding_batch``, or None (then ``block_size`` must
            be 1 and each memory gets one ``search_by_embedding``).
        block_size: memories saved and searched together.
        owner: the store ``store`` confines, or None: the memories saved here are
            updated and read back through it (see :func:`linker_for`).
    """

    def __init__(
        self,
        store: MemoryStore,
        search: BatchSearch | None,
        block_size: int,
        owner: MemoryStore | None = None,
    ) -> None:
        if search is None and block_size != 1:
            raise ValueError("without a batched search, memories are linked one at a time")
        self._store = store
        self._own = owner if owner is not None else store
        self._search = search
        self.block_size = block_size
        self._forward: dict[str, Memory] = {}  # new memories with their forward links

    def save(
        self, memories: Sequence[Memory], vectors: Sequence[np.ndarray | None] | None = None
    ) -> None:
        """See :meth:`Linker.save` (``vectors`` unused: the store converts the lists)."""
        for memory in memories:
            self._store.save(memory)

    def save_and_find(
        self,
        memories: Sequence[Memory],
        limit: int,
        vectors: Sequence[np.ndarray | None] | None = None,
    ) -> Iterator[LinkCandidates]:
        """See :meth:`Linker.save_and_find` (``vectors`` unused)."""
        store = self._store
        before = len(store)
        self.save(memories)
        # Memory i of the block is linked when the store holds before + i + 1
        # memories; up to ``limit`` of them its candidates are all of them (SPEC 7).
        first = min(len(memories), max(0, limit - before))
        searched = memories[first:]
        found: list[list[Memory]] = []
        if searched and self._search is None:
            found = [store.search_by_embedding(m.embedding or [], limit) for m in searched]
        elif searched and self._search is not None:
            found = self._search(
                [m.embedding or [] for m in searched], limit,
                visible_until=[m.id for m in searched],
            )
            if len(found) != len(searched):
                raise ValueError(
                    f"search_by_embedding_batch returned {len(found)} results for "
                    f"{len(searched)} queries"
                )
        everything = store.list_all()[: before + first] if first else []
        return (
            memory_candidates(everything[: before + i + 1] if i < first else found[i - first])
            for i in range(len(memories))
        )

    def link(
        self,
        memory: Memory,
        candidates: LinkCandidates,
        links: list[ForwardLink],
        max_links: int,
    ) -> None:
        """See :meth:`Linker.link`; backward twins read each target's current links."""
        forward = [
            ResonanceLink(
                source_id=memory.id, target_id=candidates.ids[i], strength=strength,
                link_type=link_type,
            )
            for i, strength, link_type in links
        ]
        memory = _with_links(memory, forward)
        self._own.update(memory)  # saved by this linker: the view may not see it
        self._forward[memory.id] = memory
        for link in forward:
            target = self._store.get(link.target_id)
            if target is None:
                continue
            back = ResonanceLink(
                source_id=target.id, target_id=memory.id, strength=link.strength,
                link_type=link.link_type,
            )
            existing = list(target.tag.resonance_links)
            strengths = [lk.strength for lk in existing]
            if _backward(existing, strengths, back, back.strength, max_links):
                self._store.update(_with_links(target, existing))

    def flush(self) -> None:
        """See :meth:`Linker.flush` (every write went through ``update``: nothing to do)."""

    def settle(self) -> None:
        """See :meth:`Linker.settle` (its searches return finished: nothing runs)."""

    def stored(self, memory: Memory) -> Memory:
        """See :meth:`Linker.stored` (the memory with its forward links when the store
        has no copy)."""
        got = self._own.get(memory.id)
        return got if got is not None else self._forward.get(memory.id, memory)


class RowLinking(EmbeddingSearch, UndoLog):
    """The row path of :class:`Linker` for :class:`~emotional_memory.stores.InMemoryStore`
    (a mixin; see the module docs), whose class defines the attributes declared here."""

    _lock: threading.RLock
    _put: Callable[..., None]  # insert or replace a memory (``vector``: its float64 row)
    _memory_at: Callable[..., Memory]  # rebuild the memory of a live row

    def row_linker(self, block_size: int) -> Linker | None:
        """The store's own :class:`Linker`.

        Args:
            block_size: memories saved and searched together.

        Returns:
            A :class:`RowLinker`, or None for a subclass overriding a protocol method
            the row path would bypass (it is then linked through those methods).
        """
        if overrides_any(self, _STOOD_IN_FOR):
            return None
        return RowLinker(self, block_size)

    def _link_save(
        self, memories: Sequence[Memory], given: Sequence[np.ndarray | None] | None = None
    ) -> list[np.ndarray | None]:
        """Save new memories as rows, in order.

        Args:
            memories: the new memories.
            given: optionally, their embeddings as float64 vectors, each equal to
                what :func:`embedding_vector` makes of the memory's list (else the
                lists are converted here).

        Returns:
            Their embeddings as the float64 vectors the rows were written from (None
            when missing or empty).
        """
        if given is not None and len(given) != len(memories):
            raise ValueError(f"{len(given)} vectors for {len(memories)} memories")
        vectors: list[np.ndarray | None] = []
        with self._lock:
            for i, memory in enumerate(memories):
                vec = given[i] if given is not None else embedding_vector(memory)
                # Not kept as a recent object: the memory handed back is built by
                # _link_stored, and writing its links would drop that copy anyway.
                self._put(memory, vec, remember=False)
                vectors.append(vec)
        return vectors

    def _link_save_and_search(
        self,
        memories: Sequence[Memory],
        limit: int,
        given: Sequence[np.ndarray | None] | None = None,
    ) -> tuple[PendingSearch | None, Iterator[LinkCandidates]]:
        """:meth:`Linker.save_and_find` on rows: one batched search for the block,
        started and left running (``given``: as in :meth:`_link_save`).

        Returns:
            The started search (None when the block needs none), and the candidates
            of each memory: reading the first candidates of a block of queries
            finishes that block (under the lock). The search reads the search matrix
            in place until fetched: the caller fetches it before writing any row.
        """
        with self._lock:
            before = len(self._row_of)
            vectors = self._link_save(memories, given)
            first = min(len(memories), max(0, limit - before))
            searched = memories[first:]
            # The float64 vectors the rows were written from are the queries (what
            # the search would convert the lists to: no second conversion).
            search = (
                self._start_search_batch(
                    [vec if vec is not None else [] for vec in vectors[first:]],
                    limit,
                    [m.id for m in searched],
                )
                if searched
                else None
            )
            everything = self._live_row_list()[: before + first] if first else []
        rows: list[Any] = [everything[: before + i + 1] for i in range(first)]
        return search, self._link_found(search, rows, vectors)

    def _link_found(
        self,
        search: PendingSearch | None,
        rows: list[Any],
        vectors: list[np.ndarray | None],
    ) -> Iterator[LinkCandidates]:
        """The candidates of a block: ``rows`` (the memories searched for none), then
        the answers of ``search``, each block of queries finished when its first
        candidates are read (the later blocks may still be searched meanwhile)."""
        found: Iterable[Any] = search.results() if search is not None else ()
        return self._link_columns(itertools.chain(rows, found), vectors)

    def _link_columns(
        self, rows: Iterable[Sequence[int] | np.ndarray], new: Sequence[np.ndarray | None]
    ) -> Iterator[LinkCandidates]:
        """The link columns of each memory of a block, read :data:`_COLUMN_CHUNK`
        memories at a time (one gather of their candidates' rows each).

        Args:
            rows: per memory, its candidates' live rows (the keys), taken from the
                iterable a chunk at a time.
            new: per memory, its own embedding as a float64 vector (or None).

        Returns:
            The candidates of each memory, in order.
        """
        source = iter(rows)
        start = 0
        while chunk := list(itertools.islice(source, _COLUMN_CHUNK)):
            counts = [len(r) for r in chunk]
            index = np.concatenate([np.asarray(r, dtype=np.int64) for r in chunk])
            with self._lock:
                keys = index.tolist()
                row_ids = self._row_ids
                ids = [row_ids[r] for r in keys]
                has = self._has[index]
                vectors: list[np.ndarray | None]
                if has.all():
                    vectors = list(self._exact_rows(index))
                else:
                    vectors = [None] * len(index)
                    if has.any():
                        matrix = self._exact_rows(index)
                        for i in np.flatnonzero(has).tolist():
                            vectors[i] = matrix[i]
                # Triples as tuples of floats, which the garbage collector stops
                # tracking the first time it meets them (lists it would keep
                # traversing while the chunk is linked).
                affects = list(zip(*self._affect[index].T.tolist(), strict=True))
                times_us = self._timestamp_us[index].tolist()
                # sqrt(v . v) of each row's float64 embedding, computed when it was
                # written (_write_row): the norm score_links would compute.
                norms = self._norms[index].tolist()
            end = 0
            for j, count in enumerate(counts):
                begin, end = end, end + count
                yield LinkCandidates(
                    ids=ids[begin:end],
                    vectors=vectors[begin:end],
                    affects=affects[begin:end],
                    times_us=times_us[begin:end],
                    keys=keys[begin:end],
                    new_vector=new[start + j],
                    norms=norms[begin:end],
                )
            start += len(chunk)

    def _link_rows(
        self, memory_id: str, targets: list[int], links: list[tuple[float, LinkType]],
        max_links: int, pending: PendingLinks,
    ) -> None:
        """Write the forward links of ``memory_id`` (to rows ``targets``) and their
        backward twins, in order; the links of compact rows are held in ``pending``
        (unpacked once per block, packed once by :meth:`_link_flush`)."""
        with self._lock:
            row = self._row_of[memory_id]
            own = self._row_ids[row]
            assert own is not None
            row_ids = self._row_ids
            if self._content[row] is None:  # kept whole
                whole = self._whole[own]
                self._put(_with_links(whole, [
                    ResonanceLink(
                        source_id=own, target_id=row_ids[t],
                        strength=strength, link_type=link_type,
                    )
                    for t, (strength, link_type) in zip(targets, links, strict=True)
                ]))
            else:  # replaces the (empty) links it was saved with
                pending[row] = (
                    own,
                    tuple([row_ids[t] for t in targets]),  # type: ignore[misc]
                    tuple([strength for strength, _ in links]),
                    bytes([_LINK_CODE[link_type] for _, link_type in links]),
                )
            for t, (strength, link_type) in zip(targets, links, strict=True):
                self._add_backward(t, own, strength, link_type, max_links, pending)

    def _add_backward(
        self, row: int, source: str, strength: float, link_type: LinkType, max_links: int,
        pending: PendingLinks,
    ) -> None:
        """Add the twin ``row -> source`` of a forward link to ``row``'s links."""
        target = self._row_ids[row]
        assert target is not None
        if self._content[row] is None:  # kept whole
            whole = self._whole[target]
            existing: list[Any] = list(whole.tag.resonance_links)
            back = ResonanceLink(
                source_id=target, target_id=source, strength=strength, link_type=link_type
            )
            if _backward(
                existing, [lk.strength for lk in existing], back, back.strength, max_links
            ):
                self._put(_with_links(whole, existing))
            return
        held = pending.get(row)
        if held is None:
            targets, strengths, codes = unpack_link_columns(self._links[row])
        else:
            _, targets, strengths, codes = held
        slot = _backward_slot(strengths, strength, max_links)
        if slot < 0:
            return
        code = _LINK_CODES[link_type]
        if slot == len(targets):
            targets += (source,)
            strengths += (strength,)
            codes += code
        else:
            targets = (*targets[:slot], source, *targets[slot + 1 :])
            strengths = (*strengths[:slot], strength, *strengths[slot + 1 :])
            codes = codes[:slot] + code + codes[slot + 1 :]
        pending[row] = (target, targets, strengths, codes)

    def _link_flush(self, pending: PendingLinks) -> None:
        """Write the links held in ``pending`` into their rows (then empty it)."""
        with self._lock:
            for row, (memory_id, targets, strengths, codes) in pending.items():
                self._set_links(row, memory_id, pack_link_columns(targets, strengths, codes))
            pending.clear()

    def _link_stored(self, memory: Memory) -> Memory:
        """What ``get`` returns for ``memory``, saved by :meth:`_link_save` and linked
        since (see :meth:`Linker.stored`: ``memory`` is handed over).

        A compact row of a lossless precision holds exactly the memory saved, but
        for its links: the copy is ``memory`` itself, the row's links written into
        its (empty, as saved) link list. Its embedding list, metadata dict and link
        list are its own, shared with nobody: the store wrote the row from them and
        kept none of them (``_link_save`` does not remember the memory, and a
        compact row copies the metadata). ``get`` would rebuild an equal memory field
        by field from the row; a copy (:func:`_private`) would cost a memory, a tag,
        an embedding list and a link list more, all tracked by the garbage collector.
        Other rows are rebuilt.
        """
        with self._lock:
            row = self._row_of[memory.id]
            if self._content[row] is None or self._mode not in ("float32", "float64"):
                return self._memory_at(row)
            memory.tag.resonance_links[:] = unpack_links(memory.id, self._links[row])
            return memory

    def _set_links(self, row: int, memory_id: str, record: Any) -> None:
        """Replace the packed links of compact ``row`` in place (undo logged)."""
        if self._tx_depth:
            self._undo.append(_undo("links", memory_id, row, None, self._links[row]))
        self._links[row] = record
        self._recent.pop(memory_id, None)


class RowLinker(Linker):
    """The :class:`Linker` of a :class:`RowLinking` store (keys are rows).

    Args:
        store: the store.
        block_size: memories saved and searched together.
    """

    overlaps = True  # the in-memory store's writes are transactional

    def __init__(self, store: RowLinking, block_size: int) -> None:
        self._store = store
        self.block_size = block_size
        self._pending: PendingLinks = {}
        # The last block's search, possibly still running on the search matrix.
        self._searching: PendingSearch | None = None

    def settle(self) -> None:
        """See :meth:`Linker.settle`: fetch the last block's search (its program reads
        the search matrix in place)."""
        if self._searching is not None:
            self._searching.fetch()
            self._searching = None

    def save(
        self, memories: Sequence[Memory], vectors: Sequence[np.ndarray | None] | None = None
    ) -> None:
        """See :meth:`Linker.save`."""
        self.settle()
        self._store._link_save(memories, vectors)

    def save_and_find(
        self,
        memories: Sequence[Memory],
        limit: int,
        vectors: Sequence[np.ndarray | None] | None = None,
    ) -> Iterator[LinkCandidates]:
        """See :meth:`Linker.save_and_find`: the block's search runs while the caller
        links the previous block (a block of queries is finished when its first
        candidates are read)."""
        self.settle()
        self._searching, found = self._store._link_save_and_search(memories, limit, vectors)
        return found

    def link(
        self,
        memory: Memory,
        candidates: LinkCandidates,
        links: list[ForwardLink],
        max_links: int,
    ) -> None:
        """See :meth:`Linker.link`."""
        keys = candidates.keys
        self._store._link_rows(
            memory.id,
            [keys[i] for i, _, _ in links],
            [(strength, link_type) for _, strength, link_type in links],
            max_links,
            self._pending,
        )

    def flush(self) -> None:
        """See :meth:`Linker.flush`: the links of compact rows, packed once per block."""
        self._store._link_flush(self._pending)

    def stored(self, memory: Memory) -> Memory:
        """See :meth:`Linker.stored`."""
        return self._store._link_stored(memory)
