"""The service's one engine and its scoped views, and what REST and MCP ask of them.

The service runs one :class:`~emotional_memory.async_engine.AsyncEmotionalMemory`
over the opened store; each scope path gets a view of it
(``AsyncEmotionalMemory.scoped(*path)``: same store, embedder, config and lock, its
own affective state persisted under its path). Every method below is one call on
such a view; the REST routes and the MCP tools are thin wrappers around them.

Concurrency model: each operation runs in a worker thread, so the event loop keeps
accepting requests while one is served. Operations on disjoint scopes run at once;
an operation waits only for the earlier ones on its own scope, on its sub-scopes or
on its parents (the root's wait for every scope's), in arrival order. Opening a
scope's view (which loads its affective state) also runs in a worker thread. Every
request is checked against the service's :class:`~emotional_memory.server.limits.
Limits` before any work. See the README's "Service" and "Limits" sections.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import sqlite3
from collections import OrderedDict
from collections.abc import AsyncIterator, Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from emotional_memory._engine.locks import _synchronized
from emotional_memory._validation import json_metadata
from emotional_memory.affect import CoreAffect
from emotional_memory.async_engine import AsyncEmotionalMemory
from emotional_memory.engine import EmotionalMemory
from emotional_memory.filters import Where, parse_where
from emotional_memory.interfaces import (
    StateConflictError,
    StoreBusyError,
    StoredStateError,
    StoreTimeoutError,
    StoreUnreachableError,
    UnstorableValueError,
)
from emotional_memory.models import Memory
from emotional_memory.mood import MoodField
from emotional_memory.retrieval import RetrievalExplanation
from emotional_memory.retrieval.config import check_min_relevance
from emotional_memory.server.limits import Limits
from emotional_memory.server.schemas import DEFAULT_TOP_K
from emotional_memory.state import AffectiveState

logger = logging.getLogger("emotional_memory.server")

__all__ = [
    "BUSY_DETAIL", "MAX_VIEWS", "READY_WAIT_S", "BatchItem", "FieldError", "MemoryService",
    "Remembered", "database_busy", "timeout_detail",
]

MAX_VIEWS = 4096
"""Idle scope views kept open; beyond that the least recently used idle one is dropped
(its state is persisted, so it comes back as it was). A view serving a request is
never dropped, nor any view of an engine without a state store (its state is in
the view only)."""


class FieldError(ValueError):
    """Bad input found by the service, with where it is in the request.

    Attributes:
        loc: its place, relative to the body or the query (``("where",)``).
    """

    def __init__(self, loc: tuple[str | int, ...], message: str) -> None:
        super().__init__(message)
        self.loc = loc


def database_busy(exc: BaseException) -> bool:
    """Whether ``exc`` is SQLite's "database is locked" / "busy" (another process
    held the file past the busy timeout; the statement did nothing)."""
    return isinstance(exc, sqlite3.OperationalError) and getattr(
        exc, "sqlite_errorname", ""
    ).startswith(("SQLITE_BUSY", "SQLITE_LOCKED"))


READY_WAIT_S = 5.0
"""Seconds ``GET /readyz`` waits for the store to answer a read before it answers 503."""
_PROBE_ID = "00000000-0000-4000-8000-000000000000"
"""The id the readiness read asks for (no memory has it: the answer is None)."""


BUSY_DETAIL = (
    "the database is busy: every connection stayed in use by other requests "
    "for the whole wait; nothing was changed, try again"
)


def timeout_detail(exc: StoreTimeoutError) -> str:
    """What a 503 (REST) or a tool error (MCP) says of a store's timeout.

    Args:
        exc: the timeout (a lost state lock, a busy SQLite file, a statement timeout).

    Returns:
        A fixed message with no secret (the exception's own message, which names the
        database, is logged only by type).
    """
    if isinstance(exc, StateConflictError):
        return ("the scope's state changed during the request (its lock was lost, e.g. a "
                "database connection cut); nothing was changed, try again")
    if isinstance(exc, StoreUnreachableError):
        return ("the database cannot be reached (down, restarting or refusing "
                "connections); nothing was changed, try again")
    if isinstance(exc, StoreBusyError):
        return BUSY_DETAIL
    return ("the request's database work ran past the statement timeout "
            "(--statement-timeout); nothing was changed")


@contextlib.contextmanager
def _unstorable_at(loc: tuple[str | int, ...]) -> Iterator[None]:
    """A value the store cannot hold (:class:`UnstorableValueError`) as a
    :class:`FieldError` at ``loc`` (plus the batch position) and the field."""
    try:
        yield
    except UnstorableValueError as exc:
        at = loc if exc.index is None else (*loc, exc.index)
        raise FieldError((*at, exc.field), str(exc)) from None


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


@dataclass(frozen=True)
class Remembered:
    """A stored memory and what storing it did to its scope's mood.

    Attributes:
        memory: the stored memory.
        mood_before: the scope's mood just before (no other operation in between).
        mood_after: its mood just after.
        affect_source: where the memory's affect came from: ``"given"`` (the
            request's), ``"text"`` (rated from the content by the engine's
            ``affect_from_text``) or ``"current"`` (the scope's current affect).
    """

    memory: Memory
    mood_before: MoodField
    mood_after: MoodField
    affect_source: str


class MemoryService:
    """One engine, a view per scope path, and the operations the service offers.

    Args:
        engine: the root engine (its store, embedder, config and state store serve
            every scope).
        max_views: scope views kept open (LRU) when the engine has a state store
            (without one, every view is kept: its state lives only in it).
        limits: the bounds on one request (default: :class:`Limits`' defaults).
    """

    def __init__(
        self,
        engine: EmotionalMemory,
        *,
        max_views: int = MAX_VIEWS,
        limits: Limits | None = None,
    ) -> None:
        if not isinstance(engine, EmotionalMemory):
            raise TypeError(f"engine must be an EmotionalMemory, got {type(engine).__name__}")
        if max_views < 1:
            raise ValueError(f"max_views must be >= 1, got {max_views}")
        if limits is not None and not isinstance(limits, Limits):
            raise TypeError(f"limits must be a Limits, got {type(limits).__name__}")
        self.engine = engine
        self.root = AsyncEmotionalMemory.from_engine(engine)
        self.max_views = max_views
        self.limits = limits if limits is not None else Limits()
        # path -> [view, requests using it]; least recently used first. Touched only
        # on the event loop's thread, so no lock is needed.
        self._views: OrderedDict[tuple[str, ...], list[Any]] = OrderedDict()
        # path -> the view being opened in a worker thread (one opening per path)
        self._opening: dict[tuple[str, ...], asyncio.Future[AsyncEmotionalMemory]] = {}
        # path -> the mood shown by the last mood_change (at first: when this service
        # opened the scope); least recently used first, at most max_views.
        self._moods_seen: OrderedDict[tuple[str, ...], MoodField] = OrderedDict()
        self._moods_seen[()] = engine.get_state().mood
        self._probe: asyncio.Future[None] | None = None  # the readiness read in progress

    @property
    def rates_text(self) -> bool:
        """Whether memories stored without an affect get one rated from their text
        (the engine has ``affect_from_text`` and no appraisal engine)."""
        engine = self.engine
        return (
            engine.affect_from_text is not None
            and engine.appraisal_engine is None
            and engine.config.enable_appraisal
        )

    @property
    def calibrated(self) -> bool:
        """Whether the engine has a relevance calibration (``min_relevance`` works)."""
        return self.engine.config.retrieval.relevance_calibration is not None

    @property
    def default_top_k(self) -> int:
        """A search's ``top_k`` when the request gives none: 5, or ``max_top_k`` when
        smaller (a request that sends no ``top_k`` is never over the limit)."""
        return min(DEFAULT_TOP_K, self.limits.max_top_k)

    async def view(self, path: tuple[str, ...]) -> AsyncEmotionalMemory:
        """The engine as scope ``path`` sees it (opened on first use, then kept).

        Call it on the event loop's thread (as the routes and tools do): one view per
        path exists at a time, so a scope's affective state has one owner. Opening
        one (which loads its state) runs in a worker thread.

        Args:
            path: the scope path (``()``: the root engine itself).

        Returns:
            The async view.
        """
        if not path:
            return self.root
        view: AsyncEmotionalMemory = (await self._entry(path))[0]
        self._evict(keep=path)
        return view

    async def _entry(self, path: tuple[str, ...]) -> list[Any]:
        """``[view, users]`` of ``path``, opened when missing, marked most recent.

        The opening runs in a worker thread, once per path however many requests
        wait for it; a request cancelled meanwhile leaves it to finish for the others.
        """
        entry = self._views.get(path)
        if entry is None:
            pending = self._opening.get(path)
            if pending is None:
                pending = asyncio.ensure_future(asyncio.to_thread(self.root.scoped, *path))
                self._opening[path] = pending
                pending.add_done_callback(functools.partial(self._opened, path))
            view = await asyncio.shield(pending)
            if path not in self._moods_seen:
                # a database read with shared states: off the loop
                mood = (await asyncio.to_thread(view.get_state)).mood
                if path not in self._moods_seen:
                    self._seen(path, mood)
            entry = self._views.get(path)
            if entry is None:  # evicted while idle since it opened
                entry = [view, 0]
                self._views[path] = entry
        self._views.move_to_end(path)
        return entry

    def _opened(
        self, path: tuple[str, ...], pending: asyncio.Future[AsyncEmotionalMemory]
    ) -> None:
        """Keep a view once opened (also when the request that opened it is gone)."""
        del self._opening[path]
        if not pending.cancelled() and pending.exception() is None and path not in self._views:
            self._views[path] = [pending.result(), 0]
            self._evict(keep=path)

    def _evict(self, keep: tuple[str, ...] = ()) -> None:
        """Drop least recently used idle views (not ``keep``) beyond ``max_views``;
        none while the engine has no state store (a view's state lives only in it:
        opened again, the scope would start from the initial state)."""
        excess = len(self._views) - self.max_views
        if excess <= 0 or self.engine.state_store is None:
            return
        idle = [p for p, (_, users) in self._views.items() if users == 0 and p != keep]
        for p in idle[:excess]:
            del self._views[p]

    @contextlib.asynccontextmanager
    async def _using(self, path: tuple[str, ...]) -> AsyncIterator[AsyncEmotionalMemory]:
        """The view of ``path``, kept (never evicted) while the block runs."""
        if not path:
            yield self.root
            return
        entry = await self._entry(path)
        entry[1] += 1
        self._evict()
        try:
            yield entry[0]
        finally:
            entry[1] -= 1
            self._evict()

    # ------------------------------------------------------------------ checks

    def parse_filter(self, where: dict[str, Any] | Where | None) -> Where | None:
        """A request's filter, checked against the limits, then parsed.

        Args:
            where: the filter as sent (or already parsed, or None).

        Returns:
            The parsed filter, or None.

        Raises:
            LimitExceeded: too many clauses or too deep (422).
            FieldError: not a valid filter (the message names the operator or field).
        """
        if where is None or isinstance(where, Where):
            return where
        self.limits.check_filter(where, ("where",))
        try:
            return parse_where(where)
        except (TypeError, ValueError) as exc:
            raise FieldError(("where",), str(exc)) from None

    def _check_item(self, item: BatchItem, loc: tuple[str | int, ...]) -> None:
        if not isinstance(item.content, str):
            raise FieldError((*loc, "content"), "content must be a string")
        self.limits.check_text(item.content, (*loc, "content"))
        self.limits.check_metadata(item.metadata, (*loc, "metadata"))
        if item.metadata is not None:
            # the engine's own check, here so that the error is located at the item
            # (named as the engine names it: metadata[i] in a batch)
            name = "metadata" if not loc else f"metadata[{loc[-1]}]"
            try:
                json_metadata(name, item.metadata)
            except (TypeError, ValueError) as exc:
                raise FieldError((*loc, "metadata"), str(exc)) from None

    # ------------------------------------------------------------------ memories

    async def remember(self, path: tuple[str, ...], item: BatchItem) -> Memory:
        """Encode one memory in scope ``path``.

        Args:
            path: the scope.
            item: what to store.

        Returns:
            The stored memory.

        Raises:
            LimitExceeded: content or metadata over the limits (nothing stored).
        """
        self._check_item(item, ())
        with _unstorable_at(()):
            async with self._using(path) as view:
                return await view.encode(
                    item.content, metadata=item.metadata, affect=item.affect,
                    expires_at=item.expires_at,
                )

    async def remember_felt(self, path: tuple[str, ...], item: BatchItem) -> Remembered:
        """Encode one memory in scope ``path`` and report how the scope's mood moved.

        Args:
            path: the scope.
            item: what to store.

        Returns:
            The memory, the mood just before and just after, and the affect's source.

        Raises:
            LimitExceeded: content or metadata over the limits (nothing stored).
        """
        self._check_item(item, ())
        source = "given" if item.affect is not None else "text" if self.rates_text else "current"
        with _unstorable_at(()):
            async with self._using(path) as view:
                @_synchronized
                def felt(engine: EmotionalMemory) -> tuple[MoodField, Memory, MoodField]:
                    before = engine.get_state().mood
                    memory = engine.encode(
                        item.content, metadata=item.metadata, affect=item.affect,
                        expires_at=item.expires_at,
                    )
                    return before, memory, engine.get_state().mood

                # one engine operation (its turn, held across processes with shared
                # states): no other operation of any worker runs between the reads and
                # the encode
                before, memory, after = await view._run(felt, view.engine)
        return Remembered(memory, before, after, source)

    async def remember_batch(
        self, path: tuple[str, ...], items: Sequence[BatchItem]
    ) -> list[Memory]:
        """Encode many memories in scope ``path`` in one transaction (all or none).

        Args:
            path: the scope.
            items: what to store, in order.

        Returns:
            The stored memories, in order.

        Raises:
            LimitExceeded: too many items, or one over the limits (nothing stored).
        """
        self.limits.check_batch(len(items), ("items",))
        for i, it in enumerate(items):
            self._check_item(it, ("items", i))
        affects = [it.affect for it in items]
        with _unstorable_at(("items",)):
            async with self._using(path) as view:
                return await view.encode_batch(
                    [it.content for it in items],
                    [it.metadata for it in items],
                    expires_at=[it.expires_at for it in items],
                    affect=affects if any(a is not None for a in affects) else None,
                )

    async def search(
        self,
        path: tuple[str, ...],
        query: str,
        top_k: int,
        where: dict[str, Any] | Where | None = None,
        min_relevance: Any = None,
    ) -> list[RetrievalExplanation]:
        """Retrieve with explanations in scope ``path``.

        Args:
            path: the scope.
            query: the query text.
            top_k: how many results at most.
            where: optional metadata/built-in filter (the library's dialect), as sent
                or from :meth:`parse_filter`.
            min_relevance: optional calibrated-relevance threshold in [0, 1]: results
                below it are dropped, possibly all (the engine's config needs a
                ``retrieval.relevance_calibration``).

        Returns:
            The ranked explanations (score and breakdown of each winner; ``relevance``
            with a calibration).

        Raises:
            LimitExceeded: query, ``top_k`` or filter over the limits.
            FieldError: an invalid filter, or an invalid ``min_relevance`` (or one
                without a calibration).
        """
        self.limits.check_text(query, ("query",))
        self.limits.check_top_k(top_k, ("top_k",))
        parsed = self.parse_filter(where)
        try:
            threshold = check_min_relevance(min_relevance)
        except ValueError as exc:
            raise FieldError(("min_relevance",), str(exc)) from None
        if threshold is not None and not self.calibrated:
            raise FieldError(("min_relevance",), "min_relevance needs a fitted relevance "
                             "calibration (retrieval.relevance_calibration in the config)")
        async with self._using(path) as view:
            return await view.retrieve_with_explanations(query, top_k=top_k, where=parsed,
                                                         min_relevance=threshold)

    async def get(self, path: tuple[str, ...], memory_id: str) -> Memory | None:
        """One memory by id.

        Args:
            path: the scope.
            memory_id: the id.

        Returns:
            The memory when scope ``path`` sees it, else None.
        """
        async with self._using(path) as view:
            return await view.get(memory_id)

    async def delete(self, path: tuple[str, ...], memory_id: str) -> bool:
        """Delete a memory and the links to it.

        Args:
            path: the scope.
            memory_id: the id.

        Returns:
            False when scope ``path`` sees no memory with this id.
        """
        async with self._using(path) as view:
            return await view.delete(memory_id)

    async def list(
        self,
        path: tuple[str, ...],
        where: dict[str, Any] | Where | None,
        limit: int,
        offset: int,
    ) -> list[Memory]:
        """Memories of scope ``path`` in insertion order, filtered, one page.

        Args:
            path: the scope.
            where: optional filter (as sent, or from :meth:`parse_filter`).
            limit: page size.
            offset: memories skipped first.

        Returns:
            At most ``limit`` memories.

        Raises:
            LimitExceeded: ``limit`` or the filter over the limits.
            FieldError: an invalid filter.
        """
        self.limits.check_list_limit(limit, ("limit",))
        parsed = self.parse_filter(where)
        async with self._using(path) as view:
            return await view.list_all(where=parsed, limit=limit, offset=offset)

    # ------------------------------------------------------------------ state

    async def state(self, path: tuple[str, ...]) -> AffectiveState:
        """The affective state of scope ``path`` (its view opened and the state read
        off the loop: with states shared across processes the read is a database
        query, which waits for the store's lock while a write holds it)."""
        view = await self.view(path)
        return await asyncio.to_thread(view.get_state)

    async def mood_change(self, path: tuple[str, ...]) -> tuple[AffectiveState, MoodField]:
        """The state of scope ``path`` and the mood it had at the previous call.

        The first call for a scope compares with its mood when this service first
        opened it. Kept in this process only (at most ``max_views`` scopes).

        Args:
            path: the scope.

        Returns:
            ``(state now, previous mood)``; the state's mood becomes the next call's
            previous one.
        """
        state = await self.state(path)
        previous = self._moods_seen.get(path, state.mood)
        self._seen(path, state.mood)
        return state, previous

    def _seen(self, path: tuple[str, ...], mood: MoodField) -> None:
        self._moods_seen[path] = mood
        self._moods_seen.move_to_end(path)
        while len(self._moods_seen) > self.max_views:
            self._moods_seen.popitem(last=False)

    async def set_affect(self, path: tuple[str, ...], affect: CoreAffect) -> AffectiveState:
        """Feed an observed affect into scope ``path``'s state (mood follows).

        Runs in a worker thread under the engine's lock, so it never interleaves
        with a running operation (the async engine's own ``set_affect`` is
        synchronous and, on the event loop, does not wait for the lock).

        Returns:
            The new state (persisted).
        """
        async with self._using(path) as view:
            return await asyncio.to_thread(view.engine.set_affect, affect)

    async def ready(self) -> str | None:
        """Whether the stores answer a read (``GET /readyz``): one memory by id and
        the root's state, one probe at a time, in a worker thread, shared by the
        callers meanwhile; a probe that takes longer than :data:`READY_WAIT_S` is
        left to finish in the background.

        Returns:
            None when it answered, else why not (no secret: a store's own message,
            which names its database, goes to the log only by type).
        """
        if self._probe is None or self._probe.done():
            self._probe = asyncio.ensure_future(asyncio.to_thread(self._read_stores))
            # retrieved here, so that a probe answering after every wait logs nothing
            self._probe.add_done_callback(lambda f: f.cancelled() or f.exception())
        try:
            await asyncio.wait_for(asyncio.shield(self._probe), READY_WAIT_S)
        except TimeoutError:
            return (f"the store did not answer a read within {READY_WAIT_S:g} s "
                    "(its database may be down or every connection busy)")
        except StoreTimeoutError as exc:
            return timeout_detail(exc)
        except Exception as exc:
            logger.warning("readiness read failed: %s", type(exc).__name__)
            return "the store cannot be read (see the server's log)"
        return None

    def _read_stores(self) -> None:
        """One read of each store: a memory by an id none has, the root's state (one
        that is no snapshot was read all the same: the data's fault, which only the
        root's requests meet, as a 500; logged, and not unready)."""
        self.engine.store.get(_PROBE_ID)
        if self.engine.state_store is not None:
            try:
                self.engine.state_store.load()
            except StoredStateError as exc:
                logger.warning("readiness read: %s", exc)

    async def close(self) -> None:
        """Close the engine (its store and state store)."""
        await asyncio.to_thread(self.engine.close)

