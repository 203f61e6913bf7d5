"""Which memories an engine operation may see: scope, ``where`` filter, expiry.

A :class:`Selection` is what one operation of an engine view sees: the memories under
the view's scope path, matching its ``where`` filter and not expired at the
operation's time. :func:`select` turns a store into a
:class:`~emotional_memory.stores.columnar.ColumnarStore` confined to a selection, in
the store's own index when it can, else through :class:`SelectedStore` (O(N) per
operation). The three cases are in ``docs/stores.md``, "Views".
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
