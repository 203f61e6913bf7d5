"""Row linking: the row engine's :class:`~emotional_memory.stores._shared.linking.Linker`.

Blocks of rows are saved, their candidates found as row indices by one batched
search per block (started when the block is saved, finished as candidates are
read), link columns read for several memories at once, and the new links of compact
rows held unpacked while a block is linked and packed back once per row at its end.
No :class:`~emotional_memory.models.Memory` is built on the way; only old links are
logged for undo.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

import numpy as np

from emotional_memory.models import LinkType, Memory, ResonanceLink
from emotional_memory.stores._shared.linking import (
    ForwardLink,
    LinkCandidates,
    Linker,
    backward,
    backward_slot,
    embedding_vector,
    with_links,
)
from emotional_memory.stores._shared.records import (
    LINK_CODE,
    pack_link_columns,
    unpack_link_columns,
    unpack_links,
)
from emotional_memory.stores._shared.rows.prefetch import Prefetched, prefetch
from emotional_memory.stores._shared.rows.search import EmbeddingSearch, PendingSearch
from emotional_memory.stores._shared.rows.undo import UndoLog, undo_entry

_LINK_CODES = {name: bytes([code]) for name, code in LINK_CODE.items()}
"""Link type -> its one-byte code in a packed link record."""

_COLUMN_CHUNK = 64
"""Memories whose candidates' columns are gathered together (bounds the float64
copy of their embeddings)."""

PendingLinks = dict[int, tuple[str, tuple[str, ...], tuple[float, ...], bytes]]
"""Compact rows whose new links are held back while a block is linked: row ->
``(memory id, target ids, strengths, link type codes)`` (the columns of
:func:`~emotional_memory.stores._shared.records.unpack_link_columns`), written back packed
by ``RowLinking._link_flush``. Tuples of atoms and ``bytes``, replaced rather than
changed: once the garbage collector has met an entry it no longer tracks it,
however long the block (lists it would traverse in every collection until then)."""


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
            A :class:`RowLinker`.
        """
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
                self._put(with_links(whole, [
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
                    bytes([LINK_CODE[link_type] for _, link_type in links]),
                )
            scope_id = self._scope_id
            for t, (strength, link_type) in zip(targets, links, strict=True):
                if scope_id[t] == scope_id[row]:  # see backward_twin
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
            if backward(
                existing, [lk.strength for lk in existing], back, back.strength, max_links
            ):
                self._put(with_links(whole, existing))
            return
        held = pending.get(row)
        if held is None:
            targets, strengths, codes = unpack_link_columns(self._links[row])
        else:
            _, targets, strengths, codes = held
        slot = backward_slot(strengths, strength, max_links)
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

        A compact row of a lossless precision holds exactly the memory saved but for
        its links, and the store kept none of ``memory``'s lists or dicts, so the
        answer is ``memory`` itself with the row's links written into its link list
        (cheaper than rebuilding or copying it). Other rows are rebuilt.
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
            self._undo.append(undo_entry("links", memory_id, row, None, self._links[row]))
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


class SelectedRowLinker(RowLinker):
    """The :class:`RowLinker` of a confined view
    (:class:`~emotional_memory.stores._shared.rows.selected.SelectedRows`): candidates
    only among the rows the view sees, each memory seeing them up to its own row (as
    if the memories were saved and searched one at a time through the view); links
    and rows written as :class:`RowLinker` does, no
    :class:`~emotional_memory.models.Memory` built per candidate.

    Args:
        view: the view (its ``_store()`` gives the rows, its ``_rows(store)`` the
            rows it sees, its ``selection`` what it sees).
        block_size: memories saved and searched together.
    """

    def __init__(self, view: Any, block_size: int) -> None:
        super().__init__(view._store(), block_size)
        self._view = view
        self._prefetched: Prefetched | None = None
        self._position = 0  # the next block's first position in the batch

    def prefetch(self, vectors: Sequence[np.ndarray | None], limit: int) -> None:
        """See :meth:`Linker.prefetch`: the batch's candidates among the rows the view
        sees now and among its batch-mates, searched mostly outside the store's lock
        (:mod:`~emotional_memory.stores._shared.rows.prefetch`)."""
        self._prefetched = prefetch(self._view, vectors, limit)
        self._position = 0

    def _bind(self, memories: Sequence[Memory]) -> RowLinking:
        """The view's rows now; refuses ids held by memories the view does not see
        (as the view's own ``save`` does)."""
        view = self._view
        store: Any = view._store()
        for memory in memories:
            row = store._row_of.get(memory.id)
            if row is not None and not store._row_sees(row, view.selection):
                raise ValueError(f"memory id {memory.id!r} cannot be written from this view")
        self._store = store
        return store

    def save(
        self, memories: Sequence[Memory], vectors: Sequence[np.ndarray | None] | None = None
    ) -> None:
        """See :meth:`Linker.save`."""
        self._bind(memories)._link_save(memories, vectors)

    def save_and_find(
        self,
        memories: Sequence[Memory],
        limit: int,
        vectors: Sequence[np.ndarray | None] | None = None,
    ) -> Iterator[LinkCandidates]:
        """See :meth:`Linker.save_and_find`: the block's candidates are found at once
        (one batched search among the seen rows), their columns read as they are
        reached."""
        store: Any = self._bind(memories)
        view = self._view
        with store._lock:
            before = len(view._rows(store))
            saved = store._link_save(memories, vectors)
            seen = view._rows(store)  # the block's seen memories included
            first = min(len(memories), max(0, limit - before))
            # While the view holds at most ``limit`` memories, a memory's candidates
            # are all it sees up to itself, in insertion order (docs/behaviour.md §7).
            heads: list[Any] = [
                seen[: int(np.searchsorted(seen, store._row_of[m.id], side="right"))]
                for m in memories[:first]
            ]
            searched = memories[first:]
            position = self._position
            self._position += len(memories)
            found: list[Any] | None = None
            if searched and first == 0 and self._prefetched is not None:
                found = self._prefetched.found(
                    store, seen, saved, [m.id for m in memories], position, limit
                )
            if found is None:
                found = store._search_rows_in_batch(
                    [vec if vec is not None else [] for vec in saved[first:]],
                    limit, seen, [m.id for m in searched],
                ) if searched else []
        return store._link_columns(itertools.chain(heads, found), saved)
