"""``memory://``: the in-process store and state store (nothing survives the process)."""

from __future__ import annotations

from typing import Any

from emotional_memory.stores._shared.urls import Backend, OpenedStore, StoreURLError
from emotional_memory.stores.memory.state import InMemoryAffectiveStateStore
from emotional_memory.stores.memory.store import InMemoryStore


def _exact(url: str, what: str) -> None:
    if url.lower() != "memory://":
        raise StoreURLError(f"the in-memory {what} URL is exactly memory://")


def open_memory(url: str, description: str, options: dict[str, Any]) -> OpenedStore:
    """An empty :class:`InMemoryStore` with an in-memory state store."""
    _exact(url, "store")
    return OpenedStore(InMemoryStore(), InMemoryAffectiveStateStore(), description, False, False)


def open_memory_state(url: str) -> Any:
    """An empty :class:`InMemoryAffectiveStateStore`."""
    _exact(url, "state store")
    return InMemoryAffectiveStateStore()


BACKEND = Backend("memory", ("memory",), ("memory",), open_memory, open_memory_state)
