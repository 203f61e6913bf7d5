"""Protocols the engine depends on: embedders, stores, state stores, appraisal.

Structural typing (``typing.Protocol``) lets users plug in any object with the right
methods; nothing has to inherit from these classes.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from typing import Any, Protocol, runtime_checkable

from emotional_memory.appraisal import AppraisalVector
from emotional_memory.models import Memory


@runtime_checkable
class Embedder(Protocol):
    """Turns text into a vector."""

    def embed(self, text: str) -> list[float]:
        """Embed one text. Returns a (D,) list of floats."""
        ...

    def embed_batch(self, texts: list[str]) -> list[list[float]]:
        """Embed many texts. Returns one (D,) list per text, in order."""
        ...


class SequentialEmbedder:
    """Base class giving ``embed_batch`` for embedders that only implement ``embed``.

    Subclass it and implement :meth:`embed`; the batch form calls it text by text.
    """

    def embed(self, text: str) -> list[float]:
        """Embed one text (override this)."""
        raise NotImplementedError

    def embed_batch(self, texts: list[str]) -> list[list[float]]:
        """Embed ``texts`` one at a time, in order."""
        return [self.embed(t) for t in texts]


@runtime_checkable
class MemoryStore(Protocol):
    """Persistence for memories. Insertion order is preserved by ``list_all``."""

    def save(self, memory: Memory) -> None:
        """Insert (or replace) a memory."""
        ...

    def get(self, memory_id: str) -> Memory | None:
        """The memory with this id, or None."""
        ...

    def update(self, memory: Memory) -> None:
        """Replace an existing memory (KeyError when absent)."""
        ...

    def delete(self, memory_id: str) -> bool:
        """Remove a memory; True when it existed."""
        ...

    def list_all(self) -> list[Memory]:
        """All memories, in insertion order."""
        ...

    def search_by_embedding(self, embedding: Sequence[float], top_k: int) -> list[Memory]:
        """Up to ``top_k`` embedded memories by cosine similarity, highest first."""
        ...

    def __len__(self) -> int:
        """Number of memories stored."""
        ...


@runtime_checkable
class AffectiveStateStore(Protocol):
    """Persistence for the engine's affective state snapshot."""

    def save(self, snapshot: dict[str, Any]) -> None:
        """Store the snapshot (replacing any previous one)."""
        ...

    def load(self) -> dict[str, Any] | None:
        """The stored snapshot, or None."""
        ...

    def clear(self) -> None:
        """Forget the stored snapshot."""
        ...


@runtime_checkable
class AppraisalEngine(Protocol):
    """Appraises an event description (Scherer's stimulus evaluation checks)."""

    def appraise(self, content: str, context: dict[str, Any] | None = None) -> AppraisalVector:
        """Return the appraisal of ``content``."""
        ...


@runtime_checkable
class AsyncEmbedder(Protocol):
    """Async counterpart of :class:`Embedder`."""

    async def embed(self, text: str) -> list[float]:
        """Embed one text."""
        ...

    async def embed_batch(self, texts: list[str]) -> list[list[float]]:
        """Embed many texts."""
        ...


@runtime_checkable
class AsyncMemoryStore(Protocol):
    """Async counterpart of :class:`MemoryStore`."""

    async def save(self, memory: Memory) -> None:
        """Insert (or replace) a memory."""
        ...

    async def get(self, memory_id: str) -> Memory | None:
        """The memory with this id, or None."""
        ...

    async def update(self, memory: Memory) -> None:
        """Replace an existing memory."""
        ...

    async def delete(self, memory_id: str) -> bool:
        """Remove a memory."""
        ...

    async def list_all(self) -> list[Memory]:
        """All memories, in insertion order."""
        ...

    async def search_by_embedding(self, embedding: Sequence[float], top_k: int) -> list[Memory]:
        """Nearest memories by cosine."""
        ...

    async def count(self) -> int:
        """Number of memories stored."""
        ...


@runtime_checkable
class AsyncAppraisalEngine(Protocol):
    """Async counterpart of :class:`AppraisalEngine`."""

    async def appraise(
        self, content: str, context: dict[str, Any] | None = None
    ) -> AppraisalVector:
        """Return the appraisal of ``content``."""
        ...


@contextmanager
def _no_transaction() -> Iterator[None]:
    yield


def store_transaction(store: object) -> AbstractContextManager[Any]:
    """The store's ``transaction()`` context if it has one, else a no-op context.

    Engines wrap each operation in it so a durable store commits all or nothing.
    """
    tx = getattr(store, "transaction", None)
    return tx() if callable(tx) else _no_transaction()
