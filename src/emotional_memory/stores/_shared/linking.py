"""Saving new memories and linking them by resonance, block by block: store side.

The engine scores the links (:func:`emotional_memory.resonance.score_links`,
docs/behaviour.md §7); a :class:`Linker` does the store's part: save a block, give each
memory its candidates as columns (:class:`LinkCandidates`), write forward links and
their reverse twins, hand back the stored memories. :class:`MemoryLinker` does it for
any store through its protocol methods; the row engine has its own
(:class:`~emotional_memory.stores._shared.rows.linking.RowLinker`). Design notes:
``stores/_shared/README.md``.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from emotional_memory.interfaces import MemoryStore, UnstorableValueError
from emotional_memory.models import LinkType, Memory, ResonanceLink
from emotional_memory.stores._shared.records import (
    to_microseconds,
)
from emotional_memory.stores.base import BatchSearchStore, RowLinkingStore

BatchSearch = Callable[..., list[list[Memory]]]
"""A store's ``search_by_embedding_batch(embeddings, top_k, *, visible_until=ids)``."""

ForwardLink = tuple[int, float, LinkType]
"""A link to write: ``(index among the candidates, strength, link type)``."""

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

    def prefetch(self, vectors: Sequence[np.ndarray | None], limit: int) -> None:
        """Optionally search a batch's candidates before the engine's transaction
        opens, so that less of the search runs while the transaction holds the store
        (the linker checks in :meth:`save_and_find` that the store has not changed
        meanwhile, and searches again where it has). Default: nothing.

        Args:
            vectors: the batch's embeddings as float64 vectors, in order (None where
                missing or empty).
            limit: ``max_links * candidate_multiplier``.
        """
        del vectors, limit

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


def forward_links(
    memory_id: str, candidates: LinkCandidates, links: list[ForwardLink]
) -> list[ResonanceLink]:
    """A new memory's forward links from the engine's picks.

    Args:
        memory_id: the new memory's id.
        candidates: its link candidates.
        links: ``(candidate index, strength, link type)`` per link, in order.

    Returns:
        The :class:`ResonanceLink` objects, in order.
    """
    return [
        ResonanceLink(
            source_id=memory_id, target_id=candidates.ids[i], strength=strength,
            link_type=link_type,
        )
        for i, strength, link_type in links
    ]


def with_links(memory: Memory, links: list[ResonanceLink]) -> Memory:
    return memory.model_copy(
        update={"tag": memory.tag.model_copy(update={"resonance_links": links})}
    )


def backward_slot(strengths: Sequence[float], strength: float, max_links: int) -> int:
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


def backward_twin(memory: Memory, target: Memory) -> bool:
    """Whether a forward link ``memory -> target`` gets its backward twin.

    Only between memories of one scope path. A view links a new memory to what it
    sees, its sub-scopes' memories included, but a twin held by a sub-scope's memory
    would point at a memory that sub-scope's view does not see (and, once the target
    is full, evict one of its own links): the sub-scope would no longer answer as a
    separate engine holding only its memories.

    Args:
        memory: the new memory (the link's source).
        target: the linked memory.

    Returns:
        True when both hold the same scope path.
    """
    return target.scope == memory.scope


def backward(
    existing: list[Any], strengths: list[float], back: Any, strength: float, max_links: int
) -> bool:
    """Add a backward twin to a target's links (both lists change in place), where
    :func:`backward_slot` puts it.

    Args:
        existing: the target's links (any representation).
        strengths: their strengths.
        back: the twin, in the representation of ``existing``.
        strength: its strength.
        max_links: the most links a memory keeps.

    Returns:
        Whether the links changed.
    """
    slot = backward_slot(strengths, strength, max_links)
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
        for i, memory in enumerate(memories):
            try:
                self._store.save(memory)
            except UnstorableValueError as exc:
                if exc.index is None:
                    exc.index = i  # its place in the block, as a store's batch names it
                raise

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
        # memories; up to ``limit`` of them its candidates are all of them (docs/behaviour.md §7).
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
        forward = forward_links(memory.id, candidates, links)
        memory = with_links(memory, forward)
        self._own.update(memory)  # saved by this linker: the view may not see it
        self._forward[memory.id] = memory
        for link in forward:
            target = self._store.get(link.target_id)
            if target is None or not backward_twin(memory, target):
                continue
            back = ResonanceLink(
                source_id=target.id, target_id=memory.id, strength=link.strength,
                link_type=link.link_type,
            )
            existing = list(target.tag.resonance_links)
            strengths = [lk.strength for lk in existing]
            if backward(existing, strengths, back, back.strength, max_links):
                self._store.update(with_links(target, existing))

    def flush(self) -> None:
        """See :meth:`Linker.flush` (every write went through ``update``: nothing to do)."""

    def settle(self) -> None:
        """See :meth:`Linker.settle` (its searches return finished: nothing runs)."""

    def stored(self, memory: Memory) -> Memory:
        """See :meth:`Linker.stored` (the memory with its forward links when the store
        has no copy)."""
        got = self._own.get(memory.id)
        return got if got is not None else self._forward.get(memory.id, memory)
