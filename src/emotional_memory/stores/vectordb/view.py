"""A :class:`~emotional_memory.stores.vectordb.base.VectorDBStore` confined to one
selection (scope, ``where``, expiry) in the database's own filter."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from emotional_memory.models import Memory
from emotional_memory.stores._shared.ranking import exact_search
from emotional_memory.stores.base import Selection
from emotional_memory.stores.vectordb.filter import FALSE, TRUE, translate

__all__ = ["VectorDBSelected"]


class VectorDBSelected:
    """A :class:`VectorDBStore` confined to a selection (a view's scope, ``where``
    filter and expiry), as a plain :class:`~emotional_memory.interfaces.MemoryStore`.

    The selection is translated once
    (:func:`~emotional_memory.stores.vectordb.filter.translate`) into the database's
    filter, carried by every scan, count and search; ``get`` / ``update`` / ``delete``
    read the one record and check it. The root view (expiry only) works on the whole
    store and drops expired memories. An inexact translation (see
    ``stores/vectordb/README.md``) reads a superset and checks each memory with
    :meth:`Selection.matches`; searches are ranked by
    :func:`~emotional_memory.stores._shared.ranking.exact_search` either way.

    Args:
        store: the :class:`~emotional_memory.stores.vectordb.base.VectorDBStore` (not
            imported here: base builds its views from this module).
        selection: what is seen.
    """

    def __init__(self, store: Any, selection: Selection) -> None:
        self.store = store
        self.selection = selection
        self._translated: tuple[Any, bool, bool] | None = None
        self._main_count: tuple[int, int] | None = None  # (store writes, count)

    def _count_main(self, flt: Any) -> int:
        """The selected records of the main collection, counted once per write of
        the store (``__len__`` and the search of one operation share the count)."""
        cached = self._main_count
        if cached is not None and cached[0] == self.store._writes:
            return cached[1]
        count = self.store._count(True, flt)
        self._main_count = (self.store._writes, count)
        return count

    def _filter(self) -> tuple[Any, bool, bool]:
        """``(rendered filter or None, exact, nothing)``: the database filter, whether
        it is exact, and whether the selection is empty whatever is stored."""
        if self._translated is None:
            selection = self.selection
            # the time is read only when needed: the operation writes memories with
            # an expiry, or some stored memory has one
            expiry = selection.expiring or self.store._holds_expiring()
            cond, exact = translate(selection, self.store.filter_size_max, expiry)
            if cond == FALSE:
                self._translated = (None, True, True)
            elif cond == TRUE:
                self._translated = (None, exact, False)
            else:
                self._translated = (self.store._render(cond), exact, False)
        return self._translated

    def _seen(self, memory: Memory | None) -> Memory | None:
        return memory if memory is not None and self.selection.matches(memory) else None

    def save(self, memory: Memory) -> None:
        """Save ``memory``; refused for an id held outside the selection.

        Raises:
            ValueError: the id belongs to a memory this view does not see.
        """
        with self.store._lock:
            current = self.store.get(memory.id)
            if current is not None and self._seen(current) is None:
                raise ValueError(f"memory id {memory.id!r} cannot be written from this view")
            self.store.save(memory)

    def get(self, memory_id: str) -> Memory | None:
        """The memory when seen, else None."""
        return self._seen(self.store.get(memory_id))

    def update(self, memory: Memory) -> None:
        """Replace a seen memory (KeyError for one not seen, as for an unknown id)."""
        with self.store._lock:
            if self.get(memory.id) is None:
                raise KeyError(memory.id)
            self.store.update(memory)

    def memories(self, memory_ids: Sequence[str]) -> list[Memory]:
        """The seen memories among ``memory_ids``, in that order (one read per
        collection)."""
        return [m for m in self.store.memories(memory_ids) if self._seen(m) is not None]

    def delete(self, memory_id: str) -> bool:
        """Delete a seen memory (False for one not seen)."""
        with self.store._lock:
            if self.get(memory_id) is None:
                return False
            return self.store.delete(memory_id)

    def list_all(self) -> list[Memory]:
        """The seen memories, in insertion order (the database's filtered scan)."""
        if self.selection.unconfined:  # the root: nothing to confine but expiry
            return [m for m in self.store._list(None) if self.selection.alive(m)]
        flt, exact, nothing = self._filter()
        if nothing:
            return []
        found = self.store._list(flt)
        return found if exact else [m for m in found if self.selection.matches(m)]

    def search_by_embedding(self, embedding: Sequence[float], top_k: int) -> list[Memory]:
        """The store's search among the seen memories (the database's filtered
        nearest neighbours, re-ranked exactly)."""
        if self.selection.unconfined:
            # the root: the whole store's search, as exact unless it met an expired
            # memory (then the best live ones may lie beyond it: ask with the filter)
            found = self.store._search(embedding, top_k, None)
            if all(self.selection.alive(m) for m in found):
                return found
        flt, exact, nothing = self._filter()
        if nothing:
            if isinstance(top_k, bool) or not isinstance(top_k, int):
                raise TypeError("top_k must be an int")
            return []
        if exact:
            with self.store._lock:
                return self.store._search(embedding, top_k, flt,
                                          lambda: self._count_main(flt))
        return exact_search(self.list_all(), embedding, top_k)

    def __len__(self) -> int:
        if self.selection.unconfined and self.store._may_expire is False:
            return len(self.store)  # nothing can have expired
        flt, exact, nothing = self._filter()
        if nothing:
            return 0
        if exact:
            with self.store._lock:
                return self._count_main(flt) + self.store._count(False, flt)
        return len(self.list_all())

    def __contains__(self, memory_id: object) -> bool:
        return isinstance(memory_id, str) and self.get(memory_id) is not None

    def transaction(self) -> Any:
        """No transactions in these databases: a no-op context."""
        import contextlib

        return contextlib.nullcontext()
