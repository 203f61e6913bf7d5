"""The service's one engine and its scoped views, and what REST and MCP ask of them.

The service runs one :class:`~emotional_memory.async_engine.AsyncEmotionalMemory`
over the opened store; each scope path gets a view of it
(``AsyncEmotionalMemory.scoped(*path)``: same store, embedder, config and lock, its
own affective state persisted under its path). Every method below is one call on
such a view; the REST routes and the MCP tools are thin wrappers around them.

Concurrency model: the engine runs one operation at a time (its lock spans every
view), each in a worker thread, so the event loop keeps accepting requests while
one is served; requests queue in arrival order. See the README's "Service" section.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from cachetools import LRUCache

from emotional_memory.affect import CoreAffect
from emotional_memory.async_engine import AsyncEmotionalMemory
from emotional_memory.engine import EmotionalMemory
from emotional_memory.models import Memory
from emotional_memory.retrieval import RetrievalExplanation
from emotional_memory.state import AffectiveState

__all__ = ["MAX_VIEWS", "BatchItem", "MemoryService"]

MAX_VIEWS = 4096
"""Scope views kept open at once; the least recently used is dropped beyond that
(its state is persisted, so it comes back as it was)."""


@dataclass(frozen=True)
class BatchItem:
    """One memory of a batch, as the library's ``encode`` takes it.

    Attributes:
        content: the text.
        metadata: JSON metadata or None.
        affect: the event's own affect or None (the current state's).
        expires_at: aware expiry time or None.
    """

    content: str
    metadata: dict[str, Any] | None = None
    affect: CoreAffect | None = None
    expires_at: datetime | None = None


class MemoryService:
    """One engine, a view per scope path, and the operations the service offers.

    Args:
        engine: the root engine (its store, embedder, config and state store serve
            every scope).
        max_views: scope views kept open (LRU).
    """

    def __init__(self, engine: EmotionalMemory, *, max_views: int = MAX_VIEWS) -> None:
        if not isinstance(engine, EmotionalMemory):
            raise TypeError(f"engine must be an EmotionalMemory, got {type(engine).__name__}")
        self.engine = engine
        self.root = AsyncEmotionalMemory.from_engine(engine)
        self._views: LRUCache[tuple[str, ...], AsyncEmotionalMemory] = LRUCache(max_views)

    def view(self, path: tuple[str, ...]) -> AsyncEmotionalMemory:
        """The engine as scope ``path`` sees it (created on first use, then kept).

        Args:
            path: the scope path (``()``: the root engine itself).

        Returns:
            The async view.
        """
        if not path:
            return self.root
        found = self._views.get(path)
        if found is None:
            found = self.root.scoped(*path)
            self._views[path] = found
        return found

    # ------------------------------------------------------------------ memories

    async def remember(self, path: tuple[str, ...], item: BatchItem) -> Memory:
        """Encode one memory in scope ``path``.

        Args:
            path: the scope.
            item: what to store.

        Returns:
            The stored memory.
        """
        return await self.view(path).encode(item.content, metadata=item.metadata, **_extras(item))

    async def remember_batch(
        self, path: tuple[str, ...], items: Sequence[BatchItem]
    ) -> list[Memory]:
        """Encode many memories in scope ``path`` in one transaction (all or none).

        Args:
            path: the scope.
            items: what to store, in order.

        Returns:
            The stored memories, in order.
        """
        kwargs: dict[str, Any] = {}
        if any(it.affect is not None for it in items):
            kwargs["affect"] = [it.affect for it in items]
        if any(it.expires_at is not None for it in items):
            kwargs["expires_at"] = [it.expires_at for it in items]
        return await self.view(path).encode_batch(
            [it.content for it in items], [it.metadata for it in items], **kwargs
        )

    async def search(
        self,
        path: tuple[str, ...],
        query: str,
        top_k: int,
        where: dict[str, Any] | None = None,
    ) -> list[RetrievalExplanation]:
        """Retrieve with explanations in scope ``path``.

        Args:
            path: the scope.
            query: the query text.
            top_k: how many results at most.
            where: optional metadata/built-in filter (the library's dialect).

        Returns:
            The ranked explanations (score and breakdown of each winner).
        """
        kwargs = {} if where is None else {"where": where}
        return await self.view(path).retrieve_with_explanations(query, top_k=top_k, **kwargs)

    async def get(self, path: tuple[str, ...], memory_id: str) -> Memory | None:
        """The memory with this id when scope ``path`` sees it, else None."""
        return await self.view(path).get(memory_id)

    async def delete(self, path: tuple[str, ...], memory_id: str) -> bool:
        """Delete a memory scope ``path`` sees; False when it sees none with this id."""
        return await self.view(path).delete(memory_id)

    async def list(
        self,
        path: tuple[str, ...],
        where: dict[str, Any] | None,
        limit: int,
        offset: int,
    ) -> list[Memory]:
        """Memories of scope ``path`` in insertion order, filtered, one page.

        Args:
            path: the scope.
            where: optional filter.
            limit: page size.
            offset: memories skipped first.

        Returns:
            At most ``limit`` memories.
        """
        kwargs = {} if where is None else {"where": where}
        found = await self.view(path).list_all(**kwargs)
        return found[offset:offset + limit]

    # ------------------------------------------------------------------ state

    def state(self, path: tuple[str, ...]) -> AffectiveState:
        """The affective state of scope ``path`` (immutable; no lock needed)."""
        return self.view(path).get_state()

    async def set_affect(self, path: tuple[str, ...], affect: CoreAffect) -> AffectiveState:
        """Feed an observed affect into scope ``path``'s state (mood follows).

        Runs in a worker thread under the engine's lock, so it never interleaves
        with a running operation (the async engine's own ``set_affect`` is
        synchronous and, on the event loop, does not wait for the lock).

        Returns:
            The new state (persisted).
        """
        view = self.view(path)
        return await asyncio.to_thread(view.engine.set_affect, affect)

    async def close(self) -> None:
        """Close the engine (its store and state store)."""
        await asyncio.to_thread(self.engine.close)


def _extras(item: BatchItem) -> dict[str, Any]:
    """The keyword arguments of ``encode`` an item sets (affect, expires_at)."""
    out: dict[str, Any] = {}
    if item.affect is not None:
        out["affect"] = item.affect
    if item.expires_at is not None:
        out["expires_at"] = item.expires_at
    return out
