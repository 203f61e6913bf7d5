"""A protocol-only store for tests comparing the engine's columnar fast paths with
its generic ones."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from emotional_memory.models import Memory
from emotional_memory.stores import InMemoryStore


class PerMemoryStore:
    """An ``InMemoryStore`` behind the ``MemoryStore`` protocol only (plus
    ``transaction``): no ``search_by_embedding_batch``, ``columns``, ``linking_to`` or
    ``pending_ids``, so the engine takes its generic paths (one search per memory,
    ``list_all`` scans). Counts the single searches the engine makes.
    """

    def __init__(self, inner: InMemoryStore | None = None) -> None:
        self.inner = inner if inner is not None else InMemoryStore()
        self.searches = 0

    def save(self, memory: Memory) -> None:
        self.inner.save(memory)

    def get(self, memory_id: str) -> Memory | None:
        return self.inner.get(memory_id)

    def update(self, memory: Memory) -> None:
        self.inner.update(memory)

    def delete(self, memory_id: str) -> bool:
        return self.inner.delete(memory_id)

    def list_all(self) -> list[Memory]:
        return self.inner.list_all()

    def search_by_embedding(self, embedding: Sequence[float], top_k: int) -> list[Memory]:
        self.searches += 1
        return self.inner.search_by_embedding(embedding, top_k)

    def transaction(self) -> Any:
        return self.inner.transaction()

    def __len__(self) -> int:
        return len(self.inner)

