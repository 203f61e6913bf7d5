"""The store contract: the required protocol and every optional capability.

A store is any :class:`~emotional_memory.interfaces.MemoryStore` (six methods). Each
optional capability below is a runtime-checkable :class:`~typing.Protocol`; the
engine asks ``isinstance(store, Capability)`` and never probes attributes or method
overrides. ``docs/stores.md`` says what each capability is for and which backend
offers it.

Subclasses of the library's stores: :class:`BackendStore` (the base of every
library store) declares, when a user's subclass is created, which capabilities that
subclass keeps. A capability answers without calling some protocol methods (e.g.
``candidate_bank`` never calls ``get``); a subclass that overrides one of those
methods, and not the capability itself, loses the capability (it is set to None on
the subclass, which ``isinstance`` reads as absent), so the engine serves it through
the generic path that calls its overrides.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, ClassVar, Protocol, runtime_checkable

import numpy as np

from emotional_memory._bank import CandidateBank, LexicalQuery
from emotional_memory.filters import Where
from emotional_memory.interfaces import MemoryStore
from emotional_memory.kernel.columns import MemoryColumns
from emotional_memory.kernel.lexical import LexicalInputs
from emotional_memory.models import EmotionalTag, Memory

__all__ = [
    "BackendStore",
    "BatchSearchStore",
    "ColumnarStore",
    "CountingStore",
    "KeysetPagingStore",
    "LinkIndexStore",
    "ManyReadingStore",
    "MemoryStore",
    "ModifyingStore",
    "Now",
    "PagingStore",
    "RowLinkingStore",
    "SelectableStore",
    "Selection",
    "SettingsStore",
    "TagWritingStore",
    "VersionedStateStore",
    "replace_now",
]


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
        expiring: the operation writes memories with an expiry (``encode_batch``):
            a store confines the view by expiry even while it holds no expiring
            memory (a batch memory may have expired on arrival, and must be no
            link target of the later ones).
    """

    scope: tuple[str, ...] = ()
    where: Where | None = None
    now: Now = field(default_factory=lambda: Now(_utc_now), compare=False)
    expired: bool = False
    expiring: bool = False

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


def replace_now(selection: Selection, now: datetime) -> Selection:
    """``selection`` at another time.

    Args:
        selection: a selection.
        now: the new time.

    Returns:
        The copy.
    """
    return dataclasses.replace(selection, now=Now(now))


class _Capability(type(Protocol)):  # type: ignore[misc]
    """Protocol metaclass: an instance of a class that withdrew the capability (see
    :class:`BackendStore`) is not an instance of it, whatever methods it has."""

    def __instancecheck__(cls, instance: Any) -> bool:
        if cls.__name__ in getattr(type(instance), "_withdrawn_capabilities", ()):
            return False
        return bool(super().__instancecheck__(instance))


@runtime_checkable
class ColumnarStore(MemoryStore, Protocol, metaclass=_Capability):
    """A store that answers the engine in columns: retrieval candidates as ids plus
    :class:`~emotional_memory._bank.CandidateBank` columns, objects only for what is
    returned or changed."""

    def candidate_bank(
        self,
        embedding: Sequence[float] | np.ndarray | None,
        limit: int | None,
        now: datetime,
        *,
        also: Sequence[str] = (),
        lexical: LexicalQuery | None = None,
        with_memories: bool = False,
    ) -> CandidateBank:
        """The retrieval candidates of a query as columns, under one read of the store.

        Args:
            embedding: the query embedding, shape (D,), or None.
            limit: the semantic shortlist: the ``limit`` memories
                :meth:`search_by_embedding` returns; None: every memory, in insertion
                order.
            now: aware datetime for the ages.
            also: ids appended after the shortlist when not in it, in this order;
                ids no longer stored are skipped.
            lexical: the retrieve's lexical part, read with the candidates: its BM25
                shortlist is appended after ``also`` (the same rule), and with
                ``statistics`` the bank carries the candidates' term statistics. The
                engine passes it only when the retrieve has a lexical part.
            with_memories: also build the candidates' :class:`Memory` objects (the
                bank's ``memories``, read with the columns), for a full plan.

        Returns:
            The :class:`CandidateBank` (dimension: the query's, else the memories').

        Raises:
            ValueError: a query whose length differs from the memories' embeddings.
        """
        ...

    def memories(self, memory_ids: Sequence[str]) -> list[Memory]:
        """The stored memories of ``memory_ids``, in that order (missing ones skipped).

        Args:
            memory_ids: the ids.

        Returns:
            The memories.
        """
        ...

    def columns(self, now: datetime) -> tuple[list[str], MemoryColumns]:
        """Every memory as float64 columns, in insertion order (unpadded).

        Args:
            now: aware datetime for the ages.

        Returns:
            ``(ids, columns)``; the columns' embedding may be a read-only view of the
            store (use it before the next write).
        """
        ...

    def scoring_bank(
        self, now: datetime, dtype: Any = np.float32
    ) -> tuple[list[str | None], MemoryColumns, int | None]:
        """Every memory as padded JAX columns for batch scoring, one consistent copy.

        Args:
            now: aware datetime for the ages.
            dtype: numpy dtype of the float columns other than the embedding.

        Returns:
            ``(row_ids, columns, dim)``: the memory id of each of the N rows (a power
            of two; None on padding and free rows, whose ``valid`` is False), the
            columns as JAX arrays copied from one read of the store (embeddings as
            stored: use their rows' cosines), and the embedding dimension (None when
            no memory has one: the embedding column is then (N, 1) zeros).
        """
        ...

    def lexical_search(
        self, terms: Sequence[str], k: int, k1: float, b: float, analysis: str = "none"
    ) -> list[str]:
        """Up to ``k`` memory ids by BM25 of ``terms``, best first (lexical signal s7).

        Args:
            terms: query terms.
            k: shortlist size.
            k1: BM25 k1.
            b: BM25 b.
            analysis: the lexical analysis of ``terms`` (``lexical_stemmer``).

        Returns:
            Memory ids.
        """
        ...

    def lexical_inputs(
        self, terms: Sequence[str], memory_ids: Sequence[str], analysis: str = "none"
    ) -> LexicalInputs:
        """Term statistics of candidates, in candidate order (lexical signal s7).

        Args:
            terms: query terms.
            memory_ids: the candidates (a repeated id: its statistics on each row).
            analysis: the lexical analysis of ``terms`` (``lexical_stemmer``).

        Returns:
            Unpadded :class:`~emotional_memory.kernel.LexicalInputs`.
        """
        ...

    def linking_to(self, memory_ids: Iterable[str]) -> list[str]:
        """Ids of the memories holding a link to any of ``memory_ids``, in insertion order.

        Args:
            memory_ids: the link targets.

        Returns:
            The linking memories' ids.
        """
        ...

    def pending_ids(self) -> list[str]:
        """Ids of the memories pending appraisal (dual-path encoding), in insertion order.

        Returns:
            The ids.
        """
        ...

    def transaction(self) -> AbstractContextManager[Any]:
        """All-or-nothing block of writes (re-entrant).

        Returns:
            The context manager.
        """
        ...


@runtime_checkable
class SelectableStore(Protocol, metaclass=_Capability):
    """A store that confines itself to a scope / filter / expiry selection."""

    def selected(self, selection: Selection) -> Any:
        """This store seeing only ``selection``'s memories (a store of the same kind)."""
        ...


@runtime_checkable
class LinkIndexStore(Protocol, metaclass=_Capability):
    """A store that finds the memories linking to some others without a full scan."""

    def linking_to(self, memory_ids: Iterable[str]) -> list[str]:
        """The ids of every memory holding a link to one of ``memory_ids``."""
        ...


@runtime_checkable
class RowLinkingStore(Protocol, metaclass=_Capability):
    """A store with its own resonance linker (saves and links blocks of rows)."""

    def row_linker(self, block_size: int) -> Any:
        """The store's :class:`~emotional_memory.stores._shared.linking.Linker`, or None
        when it must be linked through its protocol."""
        ...


@runtime_checkable
class BatchSearchStore(Protocol, metaclass=_Capability):
    """A store answering many embedding searches in one call."""

    def search_by_embedding_batch(
        self,
        embeddings: Sequence[Sequence[float] | None],
        top_k: int,
        *,
        visible_until: Sequence[str] | None = None,
    ) -> list[list[Memory]]:
        """One ``search_by_embedding`` per query, each seeing memories up to its id."""
        ...


@runtime_checkable
class ModifyingStore(Protocol, metaclass=_Capability):
    """A store doing a read-modify-write of some memories itself (one round trip)."""

    def modify_memories(
        self, memory_ids: Sequence[str], change: Callable[[list[Memory]], list[Memory]]
    ) -> list[Memory]:
        """Replace the current ``memory_ids`` by ``change(current)`` atomically.

        ``change`` may run more than once (on a conflict); returns what it gave last.
        """
        ...


@runtime_checkable
class TagWritingStore(Protocol, metaclass=_Capability):
    """A store that can rewrite only the emotional tags of some memories."""

    def update_tags(self, tags: Sequence[tuple[str, EmotionalTag]]) -> None:
        """Set each ``(id, tag)``; memories not held are skipped."""
        ...


@runtime_checkable
class CountingStore(Protocol, metaclass=_Capability):
    """A columnar store whose candidate read also counts the memories it holds
    (``candidate_bank(..., everything_upto=n)`` answers every memory when it holds at
    most ``n``, and sets the bank's ``total``)."""

    def counted_candidate_bank(
        self,
        embedding: Sequence[float] | np.ndarray | None,
        limit: int,
        now: datetime,
        *,
        everything_upto: int,
        with_memories: bool = False,
    ) -> CandidateBank:
        """``candidate_bank`` with the count in the same read (see the class)."""
        ...


@runtime_checkable
class SettingsStore(Protocol, metaclass=_Capability):
    """A store that keeps named settings beside its memories (e.g. which embedder
    wrote its vectors)."""

    def setting(self, key: str) -> str | None:
        """The value recorded under ``key``, or None."""
        ...

    def record_setting(self, key: str, value: str) -> str:
        """Record ``value`` under ``key`` unless one is recorded; the value kept."""
        ...

    def replace_setting(self, key: str, value: str | None) -> None:
        """Set ``key`` to ``value`` (None: forget it), inside an open transaction if any."""
        ...


@runtime_checkable
class VersionedStateStore(Protocol, metaclass=_Capability):
    """A state store in the memory store's own database whose state carries a version
    and a lock that spans processes: engines in several processes (or hosts) share
    one affective state per key (``EmotionalMemory(..., shared_state=True)``)."""

    def hold_scope(
        self, path: tuple[str, ...], wait: bool = True
    ) -> AbstractContextManager[None]:
        """Hold scope ``path`` for one operation against overlapping operations of
        every process (``path`` exclusive, its prefixes shared; outside any store
        transaction). ``wait=False``: take the locks only if they are free at once,
        else raise :class:`~emotional_memory.stores._shared.scope_hold.
        ScopeHoldTimeout` holding nothing."""
        ...

    def load_versioned(self) -> tuple[dict[str, Any] | None, str]:
        """The stored snapshot (None when none) and its version token."""
        ...

    def save_versioned(self, state: Any, expected: str | None = None) -> str:
        """Store ``state``; the new version token. With ``expected`` (the version the
        operation started from; ``""``: nothing stored), raise
        :class:`~emotional_memory.interfaces.StateConflictError` and store nothing
        when the stored version is another."""
        ...

    def joined_with(self, store: object) -> Any:
        """This state store when its saves join ``store``'s transactions, else None."""
        ...


@runtime_checkable
class ManyReadingStore(Protocol, metaclass=_Capability):
    """A plain store (or confined view) that reads several memories by id at once."""

    def memories(self, memory_ids: Sequence[str]) -> list[Memory]:
        """The held memories among ``memory_ids``, in that order (absent ones skipped)."""
        ...


@runtime_checkable
class PagingStore(Protocol, metaclass=_Capability):
    """A store that builds one page of ``list_all`` without the rest."""

    def list_page(self, offset: int, limit: int) -> list[Memory]:
        """``list_all()[offset:offset + limit]``, building only those memories."""
        ...


@runtime_checkable
class KeysetPagingStore(Protocol, metaclass=_Capability):
    """A store that walks ``list_all``'s order page by page from a cursor: each page
    costs O(its size), however far into the store it lies (``list_page`` reads the
    memories before its offset too on some backends)."""

    def list_after(self, position: int | None, limit: int) -> tuple[list[Memory], int | None]:
        """The next memories in insertion order after ``position``.

        Args:
            position: None (from the start) or a cursor a previous call returned;
                it stays valid across writes (updates keep a memory's place; a
                deleted memory's cursor still marks its place) and, for a durable
                store, across processes.
            limit: most memories returned (>= 1).

        Returns:
            ``(page, cursor)``: up to ``limit`` memories, and the cursor after the
            last of them (``position`` itself when the page is empty).
        """
        ...


# capability (protocol name, its method) -> the protocol methods it answers for
# without calling them
_STANDS_IN_FOR: dict[tuple[str, str], tuple[str, ...]] = {
    ("ColumnarStore", "candidate_bank"): ("get", "list_all", "search_by_embedding"),
    ("CountingStore", "counted_candidate_bank"): ("get", "list_all", "search_by_embedding"),
    ("SelectableStore", "selected"): ("get", "list_all", "search_by_embedding"),
    ("LinkIndexStore", "linking_to"): ("get", "list_all", "search_by_embedding"),
    ("PagingStore", "list_page"): ("get", "list_all"),
    ("ManyReadingStore", "memories"): ("get",),
    ("KeysetPagingStore", "list_after"): ("get", "list_all"),
    ("TagWritingStore", "update_tags"): ("update",),
    ("ModifyingStore", "modify_memories"): ("get", "update"),
    ("RowLinkingStore", "row_linker"): (
        "__len__",
        "save",
        "get",
        "update",
        "list_all",
        "search_by_embedding",
        "search_by_embedding_batch",
    ),
}


class BackendStore:
    """Base of every library store: declares the capabilities a user's subclass keeps.

    When a class outside this library subclasses a library store and overrides a
    protocol method that a capability answers for (see ``_STANDS_IN_FOR``) without
    overriding the capability's own method, the subclass withdraws that capability:
    ``isinstance(store, Capability)`` is then False and the engine serves the store
    through the generic path, which calls its overrides. Its methods stay callable.
    """

    _withdrawn_capabilities: ClassVar[frozenset[str]] = frozenset()

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if cls.__module__.startswith("emotional_memory."):
            return
        base = next(c for c in cls.__mro__ if c.__module__.startswith("emotional_memory."))
        withdrawn = set()
        for (capability, method), stood_in in _STANDS_IN_FOR.items():
            mine = getattr(cls, method, None)
            if mine is None or mine is not getattr(base, method, None):
                continue  # absent, or the subclass's own
            if any(getattr(cls, m, None) is not getattr(base, m, None) for m in stood_in):
                withdrawn.add(capability)
        cls._withdrawn_capabilities = frozenset(withdrawn)
