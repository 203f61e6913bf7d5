"""Which memories an engine operation may see: scope, ``where`` filter, expiry.

A :class:`Selection` describes the rows one operation of an engine view sees: the
memories whose scope path starts with the view's path, that match its ``where``
filter and that have not expired at the operation's time. :func:`select` turns a
store into a :class:`~emotional_memory.stores.columnar.ColumnarStore` confined to a
selection:

- a store that confines in its own index offers ``selected(selection)`` (the
  in-memory and SQLite stores: scope ids and filter masks over their row columns);
- a plain store may offer ``selected(selection)`` returning a plain store confined
  in its own index (the Qdrant and Chroma stores: their databases' filters); it is
  served by :class:`SelectedStore` over that view instead of the filtered memories;
- any other store is served by :class:`SelectedStore`, which filters the store's
  :class:`~emotional_memory.models.Memory` objects. Its cost: every read of a scoped
  or filtered view lists the whole store (``list_all``) and ranks the selected
  memories itself (exact float64 cosines), O(N) per operation. The unscoped,
  unfiltered view of such a store keeps the store's own search and only drops expired
  memories from what it returns.

Confinement is where the data is chosen: searches, lexical statistics and linking
candidates only ever see the selected rows. Writes through a selected store are
refused for memories it does not see (they behave as unknown ids).
"""

from __future__ import annotations

from typing import Any

from emotional_memory.interfaces import MemoryStore
from emotional_memory.stores._shared.filtered import SelectedStore
from emotional_memory.stores._shared.ranking import exact_search
from emotional_memory.stores.base import Now, SelectableStore, Selection, replace_now

__all__ = ["Now", "SelectedStore", "Selection", "exact_search", "replace_now", "select"]


def select(base: Any, store: MemoryStore, selection: Selection) -> Any:
    """``base`` (the engine's columnar view of ``store``) confined to ``selection``.

    Args:
        base: the columnar store (``columnar(store)``).
        store: the store.
        selection: what the operation sees.

    Returns:
        The store's own selected view (``base.selected(selection)``) when it has one;
        else a :class:`SelectedStore` over the plain store's own confined view (its
        ``selected(selection)``, unless a subclass overrides ``get``, ``list_all`` or
        ``search_by_embedding``, which the view would bypass) or over its filtered
        memories.
    """
    if isinstance(base, SelectableStore):
        return base.selected(selection)
    if isinstance(store, SelectableStore):
        return SelectedStore(base, store, selection, store.selected(selection))
    return SelectedStore(base, store, selection)
