"""Protocols the engine depends on: embedders, stores, state stores, appraisal.

Structural typing (``typing.Protocol``) lets users plug in any object with the right
methods; nothing has to inherit from these classes.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import AbstractContextManager, nullcontext
from typing import Any, Protocol, runtime_checkable

from emotional_memory.appraisal import AppraisalVector, GenericAppraisalVector
from emotional_memory.models import Memory
from emotional_memory.state import AffectiveState


@runtime_checkable
class Embedder(Protocol):
    """Turns text into a vector: a list of floats, or a numpy / JAX array of real
    numbers (integers, floats, ml_dtypes' ``bfloat16`` / ``float8_*``), read as
    float64."""

    def embed(self, text: str) -> list[float]:
        """Embed one text.

        Args:
            text: The text to embed.

        Returns:
            The embedding, shape (D,).
        """
        ...

    def embed_batch(self, texts: list[str]) -> list[list[float]]:
        """Embed many texts.

        Args:
            texts: The texts to embed.

        Returns:
            One embedding per text, in order, shape (len(texts), D).
        """
        ...


class SequentialEmbedder:
    """Base class giving ``embed_batch`` for embedders that only implement ``embed``.

    Subclass it and implement :meth:`embed`; the batch form calls it text by text.
    """

    def embed(self, text: str) -> list[float]:
        """Embed one text (override this).

        Args:
            text: The text to embed.

        Returns:
            The embedding, shape (D,).

        Raises:
            NotImplementedError: Always, unless a subclass overrides it.
        """
        raise NotImplementedError

    def embed_batch(self, texts: list[str]) -> list[list[float]]:
        """Embed ``texts`` one at a time, in order.

        Args:
            texts: The texts to embed.

        Returns:
            One embedding per text, shape (len(texts), D).
        """
        return [self.embed(t) for t in texts]


@runtime_checkable
class MemoryStore(Protocol):
    """Persistence for memories. Insertion order is preserved by ``list_all``."""

    def save(self, memory: Memory) -> None:
        """Insert (or replace) a memory.

        Args:
            memory: The memory to store, keyed by ``memory.id``.
        """
        ...

    def get(self, memory_id: str) -> Memory | None:
        """Look a memory up by id.

        Args:
            memory_id: The memory's id.

        Returns:
            The memory with this id, or None.
        """
        ...

    def update(self, memory: Memory) -> None:
        """Replace an existing memory.

        Args:
            memory: The new version; its ``id`` must already be stored.

        Raises:
            KeyError: When no memory with that id exists.
        """
        ...

    def delete(self, memory_id: str) -> bool:
        """Remove a memory.

        Args:
            memory_id: The memory's id.

        Returns:
            True when it existed.
        """
        ...

    def list_all(self) -> list[Memory]:
        """All memories, in insertion order.

        Returns:
            A list of every stored memory.
        """
        ...

    def search_by_embedding(self, embedding: Sequence[float], top_k: int) -> list[Memory]:
        """Up to ``top_k`` embedded memories by cosine similarity, highest first.

        The rule is in docs/behaviour.md §5.

        Args:
            embedding: The query embedding, shape (D,).
            top_k: Maximum number of results; ``<= 0`` gives [].

        Returns:
            Memories with an embedding, most similar first (NaN similarity counts as
            0; a zero-norm query gives the first ``top_k`` in insertion order).
        """
        ...

    def __len__(self) -> int:
        """Number of memories stored."""
        ...


@runtime_checkable
class AffectiveStateStore(Protocol):
    """Persistence for the engine's affective state snapshot."""

    def save(self, state: AffectiveState) -> None:
        """Store the state (replacing any previous one).

        Args:
            state: The engine's current ``AffectiveState``.
        """
        ...

    def load(self) -> AffectiveState | None:
        """Read the stored state.

        Returns:
            The stored state, or None when nothing is stored. (The engine also
            accepts a snapshot dict here, from stores written for older versions.)
        """
        ...

    def clear(self) -> None:
        """Forget the stored snapshot."""
        ...


@runtime_checkable
class AppraisalEngine(Protocol):
    """Appraises an event description (Scherer's stimulus evaluation checks)."""

    def appraise(
        self, event_text: str, context: dict[str, Any] | None = None
    ) -> AppraisalVector | GenericAppraisalVector:
        """Appraise an event.

        Args:
            event_text: The event description.
            context: Optional extra information for the appraiser.

        Returns:
            The appraisal of ``event_text``.
        """
        ...


@runtime_checkable
class AsyncEmbedder(Protocol):
    """Async counterpart of :class:`Embedder`."""

    async def embed(self, text: str) -> list[float]:
        """Embed one text.

        Args:
            text: The text to embed.

        Returns:
            The embedding, shape (D,).
        """
        ...

    async def embed_batch(self, texts: list[str]) -> list[list[float]]:
        """Embed many texts.

        Args:
            texts: The texts to embed.

        Returns:
            One embedding per text, in order, shape (len(texts), D).
        """
        ...


@runtime_checkable
class AsyncMemoryStore(Protocol):
    """Async counterpart of :class:`MemoryStore`."""

    async def save(self, memory: Memory) -> None:
        """Insert (or replace) a memory.

        Args:
            memory: The memory to store, keyed by ``memory.id``.
        """
        ...

    async def get(self, memory_id: str) -> Memory | None:
        """Look a memory up by id.

        Args:
            memory_id: The memory's id.

        Returns:
            The memory with this id, or None.
        """
        ...

    async def update(self, memory: Memory) -> None:
        """Replace an existing memory.

        Args:
            memory: The new version; its ``id`` must already be stored.
        """
        ...

    async def delete(self, memory_id: str) -> bool:
        """Remove a memory.

        Args:
            memory_id: The memory's id.

        Returns:
            True when it existed.
        """
        ...

    async def list_all(self) -> list[Memory]:
        """All memories, in insertion order.

        Returns:
            A list of every stored memory.
        """
        ...

    async def search_by_embedding(self, embedding: Sequence[float], top_k: int) -> list[Memory]:
        """Nearest memories by cosine, as :meth:`MemoryStore.search_by_embedding`.

        Args:
            embedding: The query embedding, shape (D,).
            top_k: Maximum number of results.

        Returns:
            Up to ``top_k`` embedded memories, most similar first.
        """
        ...

    async def count(self) -> int:
        """Number of memories stored.

        Returns:
            The memory count.
        """
        ...


@runtime_checkable
class AsyncAppraisalEngine(Protocol):
    """Async counterpart of :class:`AppraisalEngine`."""

    async def appraise(
        self, event_text: str, context: dict[str, Any] | None = None
    ) -> AppraisalVector | GenericAppraisalVector:
        """Appraise an event.

        Args:
            event_text: The event description.
            context: Optional extra information for the appraiser.

        Returns:
            The appraisal of ``event_text``.
        """
        ...


def store_transaction(store: object) -> AbstractContextManager[Any]:
    """The store's ``transaction()`` context if it has one, else a no-op context.

    Engines wrap each operation in it so a durable store commits all or nothing.

    Args:
        store: Any store; its optional ``transaction()`` method is used when callable.

    Returns:
        A context manager to wrap the operation in.
    """
    tx = getattr(store, "transaction", None)
    return tx() if callable(tx) else nullcontext()


class StoreTimeoutError(RuntimeError):
    """A store's database statement ran past its time limit and was cancelled; the
    operation's transaction rolled back (nothing changed). Raised by stores with a
    statement timeout (``PostgresStore(statement_timeout=...)``)."""


class StoreBusyError(StoreTimeoutError):
    """No database connection of the store became free within its wait (every one
    held by other operations); the operation did nothing. Worth retrying later."""


class StoreUnreachableError(StoreBusyError):
    """No database connection of the store became free within its wait, and none could
    be opened: the database server is down, restarting or refusing connections. The
    operation did nothing. Worth retrying later."""


class StateConflictError(StoreBusyError):
    """The scope's stored affective state changed under an operation that held the
    scope (its cross-process lock was lost: e.g. the lock's database connection was
    cut mid-operation, and another process's operation on the scope committed); the
    operation rolled back, nothing changed. Retry it."""


class StoredStateError(ValueError):
    """A stored affective state that is no state snapshot: its value was edited by
    hand or written by another program (not JSON, no JSON object, no snapshot, a
    Redis value of another type). A :class:`ValueError` naming the state's key; the
    stored value is left as it is. The state store's ``clear()`` or ``save(...)``
    replace it; with ``shared_state`` so do an engine's ``reset_state()``,
    ``load_state(...)`` or ``clear_persisted_state()`` (without it the engine and its
    views raise this when they open). The service answers it as its own fault (HTTP
    500, the key only in its log), not as bad input.

    Attributes:
        key: the state's key.
    """

    def __init__(self, key: str, problem: str) -> None:
        """Args: key: the state's key; problem: what the stored value is instead."""
        super().__init__(
            f"the stored affective state {key!r} is not a state snapshot ({problem}); "
            "the state store's clear() or save(...) replace it (with shared_state, so "
            "do an engine's reset_state(), load_state(...) or clear_persisted_state())"
        )
        self.key = key


class EmbeddingDimensionError(ValueError):
    """A memory's embedding length differs from the dimension the store holds.

    A :class:`ValueError`; the message names the memory and both dimensions, and the
    store is left unchanged.
    """


class UnstorableValueError(ValueError):
    """A memory holds a value its store's database cannot hold (e.g. a NUL character
    in PostgreSQL text); nothing was written.

    Attributes:
        field: the memory's field: ``"id"``, ``"content"`` or ``"metadata"``.
        index: the memory's position in the batch being written (``encode_batch``,
            ``import_memories``), or None for a single memory.
    """

    def __init__(self, field: str, message: str, index: int | None = None) -> None:
        super().__init__(message)
        self.field = field
        self.index = index
