"""The generic confined view: any store seeing only a selection's memories.

:class:`SelectedStore` serves a store that cannot confine itself (or a filter it
cannot translate) by filtering the store's memories: every read lists the whole store
and ranks the selected memories exactly (O(N) per operation). A store's own confined
view (``selected``), when given, answers the plain reads instead.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from contextlib import AbstractContextManager
from typing import Any

from emotional_memory.interfaces import MemoryStore, store_transaction
from emotional_memory.models import Memory
from emotional_memory.stores._shared.ranking import exact_search
from emotional_memory.stores.base import Selection

__all__ = ["SelectedStore"]


class _FilteredMemories:
    """A plain :class:`MemoryStore` showing only the memories a selection sees.

    Args:
        store: the underlying plain store.
        selection: what is seen.
    """

    def __init__(self, store: MemoryStore, selection: Selection) -> None:
        self.store = store
        self.selection = selection

    def _seen(self, memory: Memory | None) -> Memory | None:
        return memory if memory is not None and self.selection.matches(memory) else None

    def save(self, memory: Memory) -> None:
        """Save ``memory``; refused (ValueError) for an id held outside the selection."""
        current = self.store.get(memory.id)
        if current is not None and self._seen(current) is None:
            raise ValueError(f"memory id {memory.id!r} cannot be written from this view")
        self.store.save(memory)

    def get(self, memory_id: str) -> Memory | None:
        """The memory when seen, else None."""
        return self._seen(self.store.get(memory_id))

    def update(self, memory: Memory) -> None:
        """Replace a seen memory (KeyError for one not seen, as for an unknown id)."""
        if self.get(memory.id) is None:
            raise KeyError(memory.id)
        self.store.update(memory)

    def delete(self, memory_id: str) -> bool:
        """Delete a seen memory (False for one not seen)."""
        if self.get(memory_id) is None:
            return False
        return self.store.delete(memory_id)

    def list_all(self) -> list[Memory]:
        """The seen memories, in insertion order."""
        return [m for m in self.store.list_all() if self.selection.matches(m)]

    def search_by_embedding(self, embedding: Sequence[float], top_k: int) -> list[Memory]:
        """Exact search among the seen memories (:func:`exact_search`)."""
        if self.selection.unconfined:  # the store's own search; expired ones dropped
            return [m for m in self.store.search_by_embedding(embedding, top_k)
                    if self.selection.alive(m)]
        return exact_search(self.list_all(), embedding, top_k)

    def __len__(self) -> int:
        if self.selection.unconfined:  # the store's count (expired memories included)
            return len(self.store)
        return len(self.list_all())

    def transaction(self) -> AbstractContextManager[Any]:
        """The store's transaction (a no-op when it has none)."""
        return store_transaction(self.store)


class SelectedStore:
    """A :class:`~emotional_memory.stores.columnar.ColumnarStore` over any store,
    confined to a selection by filtering its memories (see the module docs for the
    cost).

    Args:
        base: the engine's columnar view of the store.
        store: the store itself (its protocol methods are read).
        selection: what is seen.
        plain: the store's own confined view (a plain store's ``selected``), used
            instead of filtering its memories; None for none.
    """

    def __init__(
        self, base: Any, store: MemoryStore, selection: Selection, plain: Any = None
    ) -> None:
        from emotional_memory.stores.columnar import StoreAdapter

        self.base = base
        self.selection = selection
        self._plain: Any = plain if plain is not None else _FilteredMemories(store, selection)
        self._adapter = StoreAdapter(self._plain)

    @property
    def confined_by_store(self) -> bool:
        """Whether the store confines this view itself (its own ``selected``), rather
        than by filtering its memories here."""
        return not isinstance(self._plain, _FilteredMemories)

    def __getattr__(self, name: str) -> Any:
        # the columnar protocol, answered from the filtered memories
        if name.startswith("__"):
            raise AttributeError(name)
        return getattr(self._adapter, name)

    def save(self, memory: Memory) -> None:
        """See :meth:`_FilteredMemories.save`."""
        self._plain.save(memory)

    def get(self, memory_id: str) -> Memory | None:
        """See :meth:`_FilteredMemories.get`."""
        return self._plain.get(memory_id)

    def update(self, memory: Memory) -> None:
        """See :meth:`_FilteredMemories.update`."""
        self._plain.update(memory)

    def delete(self, memory_id: str) -> bool:
        """See :meth:`_FilteredMemories.delete`."""
        return self._plain.delete(memory_id)

    def list_all(self) -> list[Memory]:
        """See :meth:`_FilteredMemories.list_all`."""
        return self._plain.list_all()

    def search_by_embedding(self, embedding: Sequence[float], top_k: int) -> list[Memory]:
        """See :meth:`_FilteredMemories.search_by_embedding`."""
        return self._plain.search_by_embedding(embedding, top_k)

    def __len__(self) -> int:
        return len(self._plain)

    def candidate_bank(self, *args: Any, **kwargs: Any) -> Any:
        """See :meth:`~emotional_memory.stores.columnar.ColumnarStore.candidate_bank`."""
        return self._adapter.candidate_bank(*args, **kwargs)

    def memories(self, memory_ids: Sequence[str]) -> list[Memory]:
        """The seen memories among ``memory_ids``, in that order."""
        return self._adapter.memories(memory_ids)

    def linking_to(self, memory_ids: Iterable[str]) -> list[str]:
        """Every memory linking to ``memory_ids``, seen or not: a delete drops every
        link to what it removes (no link may dangle), wherever it is held."""
        linking: list[str] = self.base.linking_to(memory_ids)
        return linking

    def transaction(self) -> AbstractContextManager[Any]:
        """The store's transaction."""
        out: AbstractContextManager[Any] = self.base.transaction()
        return out
