"""Async components for the async engine's tests: a store over an in-memory one that
records the loop of each call, and a sync embedder that can be held inside ``embed``."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

from emotional_memory import InMemoryStore
from emotional_memory.embedders import HashingEmbedder


class LoopRecordingStore:
    """An async memory store over an :class:`InMemoryStore`; ``loops`` lists the event
    loop each call ran on."""

    def __init__(self) -> None:
        self.inner = InMemoryStore()
        self.loops: list[asyncio.AbstractEventLoop] = []

    def _seen(self) -> None:
        self.loops.append(asyncio.get_running_loop())

    async def save(self, memory: Any) -> None:
        self._seen()
        self.inner.save(memory)

    async def get(self, memory_id: str) -> Any:
        self._seen()
        return self.inner.get(memory_id)

    async def update(self, memory: Any) -> None:
        self._seen()
        self.inner.update(memory)

    async def delete(self, memory_id: str) -> bool:
        self._seen()
        return self.inner.delete(memory_id)

    async def list_all(self) -> list[Any]:
        self._seen()
        return self.inner.list_all()

    async def search_by_embedding(self, embedding: Any, top_k: int) -> list[Any]:
        self._seen()
        return self.inner.search_by_embedding(embedding, top_k)

    async def count(self) -> int:
        self._seen()
        return len(self.inner)


class HeldEmbedder:
    """A hashing embedder that can be held inside ``embed`` until released."""

    def __init__(self, dim: int = 16) -> None:
        self.inner = HashingEmbedder(dim=dim)
        self.entered = threading.Event()
        self.release = threading.Event()
        self.release.set()

    def hold(self) -> None:
        """The next ``embed`` waits (after setting ``entered``) until ``release``."""
        self.release.clear()
        self.entered.clear()

    def embed(self, text: str) -> list[float]:
        self.entered.set()
        assert self.release.wait(timeout=60)
        return self.inner.embed(text)

    def embed_batch(self, texts: list[str]) -> list[list[float]]:
        return [self.embed(t) for t in texts]


class WordHeldEmbedder(HashingEmbedder):
    """The hashing embedder, except that a text containing ``word`` waits for ``release``.

    Args:
        word: the marker a held text contains.
        wait: seconds to wait for ``release`` (only reached when something hangs).
        dim: the hashing embedder's dimension (its default when None).
    """

    def __init__(self, word: str, wait: float = 60.0, dim: int | None = None) -> None:
        if dim is None:
            super().__init__()
        else:
            super().__init__(dim=dim)
        self.word = word
        self.wait = wait
        self.entered = threading.Event()
        self.release = threading.Event()

    def _hold(self, texts: Any) -> None:
        if any(self.word in t for t in texts):
            self.entered.set()
            assert self.release.wait(self.wait), "never released"

    def embed(self, text: str) -> list[float]:
        self._hold([text])
        return super().embed(text)

    def embed_batch(self, texts: Any) -> list[list[float]]:
        texts = list(texts)
        self._hold(texts)
        return super().embed_batch(texts)

    def embed_array(self, texts: Any) -> Any:
        texts = list(texts)
        self._hold(texts)
        return super().embed_array(texts)
