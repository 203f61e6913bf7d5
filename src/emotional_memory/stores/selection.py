"""Which memories an engine operation may see: scope, ``where`` filter, expiry (issue 23).

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

import dataclasses
from collections.abc import Callable, Iterable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import numpy as np

from emotional_memory.filters import Where
from emotional_memory.interfaces import MemoryStore, store_transaction
from emotional_memory.models import Memory

__all__ = ["Now", "SelectedStore", "Selection", "exact_search", "select"]


class Now:
    """The time of one operation, read from the engine clock at most once, when first
    needed (a view whose store holds no expiring memory never reads it).

    Args:
        source: an aware datetime, or a zero-argument callable returning one.
    """

    __slots__ = ("_source", "_value")

    def __init__(self, source: datetime | Callable[[], datetime]) -> None:
        self._source = source
        self._value: datetime | None = source if isinstance(source, datetime) else None

    def __call__(self) -> datetime:
        """The time (the clock is read on the first call only)."""
        if self._value is None:
            assert callable(self._source)
            self._value = self._source()
        return self._value

    @property
    def known(self) -> bool:
        """Whether the time is at hand (given, or read already): calling is free."""
        return self._value is not None


@dataclass(frozen=True)
class Selection:
    """The memories one operation sees.

    Attributes:
        scope: the view's scope path: memories whose ``scope`` starts with it.
        where: the parsed filter, or None.
        now: the operation's time (expired memories, ``expires_at <= now``, are not
            seen); read lazily.
        expired: select the memories that HAVE expired instead (what ``prune``
            removes); False for every other operation.
    """

    scope: tuple[str, ...] = ()
    where: Where | None = None
    now: Now = field(default_factory=lambda: Now(_utc_now), compare=False)
    expired: bool = False

    @property
    def unconfined(self) -> bool:
        """Whether only expiry restricts this selection (the root, no filter)."""
        return not self.scope and self.where is None and not self.expired

    def in_scope(self, scope: tuple[str, ...]) -> bool:
        """Whether a memory of path ``scope`` lies under this selection's path."""
        n = len(self.scope)
        return n == 0 or scope[:n] == self.scope

    def alive(self, memory: Memory) -> bool:
        """Whether ``memory`` is on this selection's side of its expiry (not expired;
        expired with ``expired``)."""
        expires = memory.expires_at
        if self.expired:
            return expires is not None and expires <= self.now()
        return expires is None or expires > self.now()

    def matches(self, memory: Memory) -> bool:
        """Whether ``memory`` is seen (the reference semantics stores reproduce).

        Args:
            memory: a memory.

        Returns:
            True when it is in scope, not expired and matches the filter.
        """
        return (
            self.in_scope(memory.scope)
            and self.alive(memory)
            and (self.where is None or self.where.matches(memory))
        )


def _utc_now() -> datetime:
    from emotional_memory._validation import utc_now

    return utc_now()


def exact_search(
    memories: Sequence[Memory], embedding: Sequence[float] | np.ndarray, top_k: int
) -> list[Memory]:
    """``InMemoryStore.search_by_embedding``'s answer over ``memories`` (in insertion
    order): exact float64 cosines, NaN and zero norms as 0, ties by position,
    memories without an embedding skipped, a zero-norm or empty query giving the
    first embedded memories.

    Args:
        memories: the candidates, in insertion order.
        embedding: the (D,) query.
        top_k: how many at most.

    Returns:
        Up to ``top_k`` memories, best first.

    Raises:
        ValueError: a query whose length differs from the memories' embeddings.
    """
    if top_k <= 0:
        return []
    embedded = [m for m in memories if m.embedding]
    if not embedded:
        return []
    query = np.asarray(embedding, dtype=np.float64)
    if query.ndim != 1:
        raise ValueError(f"embedding must be one-dimensional, got shape {query.shape}")
    dim = len(embedded[0].embedding)  # type: ignore[arg-type]
    if query.shape[0] and query.shape[0] != dim:
        raise ValueError(
            f"embedding length mismatch: query has {query.shape[0]}, the store holds "
            f"dimension {dim}"
        )
    k = min(int(top_k), len(embedded))
    with np.errstate(over="ignore", invalid="ignore"):
        query_norm = float(np.sqrt(np.dot(query, query))) if query.shape[0] else 0.0
    if query.shape[0] == 0 or query_norm == 0.0 or not np.isfinite(query_norm):
        return embedded[:k]
    vectors = np.asarray([m.embedding for m in embedded], dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        norms = np.sqrt(np.einsum("ij,ij->i", vectors, vectors))
        dots = np.multiply(vectors, query).sum(axis=1)
        sims = dots / (norms * query_norm)
    sims = np.where(np.isnan(sims) | (norms == 0.0), 0.0, sims)
    order = np.argsort(-sims, kind="stable")[:k]
    return [embedded[i] for i in order.tolist()]


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
    own = getattr(base, "selected", None)
    if callable(own):
        return own(selection)
    from emotional_memory.stores.columnar import _STOOD_IN_FOR, overrides_any

    plain = getattr(store, "selected", None)
    if callable(plain) and not overrides_any(store, _STOOD_IN_FOR):
        return SelectedStore(base, store, selection, plain(selection))
    return SelectedStore(base, store, selection)


def replace_now(selection: Selection, now: datetime) -> Selection:
    """``selection`` at another time.

    Args:
        selection: a selection.
        now: the new time.

    Returns:
        The copy.
    """
    return dataclasses.replace(selection, now=Now(now))
