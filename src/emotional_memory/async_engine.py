"""AsyncEmotionalMemory: the engine's full surface as coroutines.

One implementation serves both worlds: the synchronous engine core runs in a worker
thread (so the event loop never blocks on JAX or SQLite), one operation at a time
per scope (operations on disjoint scopes run at once).
Async stores, embedders and appraisal engines are called back on the caller's loop
through a bridge, so results are identical to the sync engine's.

The core's worker threads come from the library's own pool (``_async_bridge``), never the loop's
default executor: a bridged coroutine that itself needs a default-executor thread
(``asyncio.to_thread``) then always finds one, so any number of engines sharing a
loop cannot deadlock, whatever the core count.

As in the original, the in-memory state methods (``get_state``, ``set_affect``,
``reset_state``, ``save_state``, ``load_state``, ``get_current_mood``) are plain
synchronous methods.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import weakref
from collections.abc import Callable, Iterable, Sequence
from datetime import datetime
from typing import Any, TypeVar

from emotional_memory._async_bridge import (
    CALLER_LOOP,
    NEST,
    NO_TURN,
    Nest,
    SyncToAsyncAppraisalEngine,
    SyncToAsyncEmbedder,
    SyncToAsyncStore,
    _AsyncToSyncAppraisal,
    _LoopBridge,
    all_or_none,
    bridge_appraisal,
    bridge_embedder,
    bridge_store,
    engine_executor,
    finish_detached,
    nested_call,
    to_thread,
    worker_body,
)
from emotional_memory._engine.event_args import NOT_APPRAISED, _per_item_affects
from emotional_memory._scope_locks import AsyncScopeLocks
from emotional_memory.affect import CoreAffect
from emotional_memory.affect_rater import AffectRater
from emotional_memory.appraisal import AppraisalVector, GenericAppraisalVector
from emotional_memory.engine import Clock, EmotionalMemory, EmotionalMemoryConfig
from emotional_memory.interfaces import AffectiveStateStore
from emotional_memory.models import EmotionalTag, Memory
from emotional_memory.mood import MoodField
from emotional_memory.query_classifier import QueryClassifier
from emotional_memory.retrieval import RetrievalExplanation, RetrievalPlan
from emotional_memory.state import AffectiveState
from emotional_memory.telemetry import traced_span

T = TypeVar("T")

class AsyncEmotionalMemory:
    """Async affective memory with the same methods as :class:`EmotionalMemory`.

    Args:
        store: a sync ``MemoryStore`` or an ``AsyncMemoryStore``.
        embedder: a sync ``Embedder`` or an ``AsyncEmbedder``.
        appraisal_engine: optional sync or async appraisal engine.
        config, state_store, query_classifier, clock: as for :class:`EmotionalMemory`.
        affect_from_text: opt-in synchronous :class:`~emotional_memory.affect_rater.
            AffectRater`, as for :class:`EmotionalMemory` (it runs in the engine's
            worker thread, never on the event loop).
        shared_state: as for :class:`EmotionalMemory`.
    """

    def __init__(
        self,
        store: Any,
        embedder: Any,
        appraisal_engine: Any = None,
        config: EmotionalMemoryConfig | None = None,
        state_store: AffectiveStateStore | None = None,
        query_classifier: QueryClassifier | None = None,
        *,
        clock: Clock | None = None,
        affect_from_text: AffectRater | None = None,
        shared_state: bool = False,
    ) -> None:
        self._bridge = _LoopBridge()
        self._locks: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, AsyncScopeLocks] = (
            weakref.WeakKeyDictionary()
        )
        self._given_store: Any = store  # shown by repr, as the original's
        self._engine = EmotionalMemory(
            bridge_store(store, self._bridge),
            bridge_embedder(embedder, self._bridge),
            bridge_appraisal(appraisal_engine, self._bridge),
            config,
            state_store,
            query_classifier,
            clock=clock,
            affect_from_text=affect_from_text,
            shared_state=shared_state,
        )

    @classmethod
    def from_engine(cls, engine: EmotionalMemory) -> AsyncEmotionalMemory:
        """Wrap an existing sync engine (shares its store and state).

        Args:
            engine: The sync engine; its components must be synchronous.

        Returns:
            An ``AsyncEmotionalMemory`` delegating to ``engine``.

        Raises:
            TypeError: If ``engine`` is not an ``EmotionalMemory``.
        """
        if not isinstance(engine, EmotionalMemory):
            raise TypeError("engine must be an EmotionalMemory")
        out = cls.__new__(cls)
        out._bridge = _LoopBridge()
        out._locks = weakref.WeakKeyDictionary()
        out._engine = engine
        return out

    def scoped(self, *path: str) -> AsyncEmotionalMemory:
        """A view confined to a scope path (see :meth:`EmotionalMemory.scoped`).

        The view shares this engine's store, embedder, appraisal engine, config,
        clock, locks and event-loop bridge, and has its own affective state.

        Args:
            *path: one or more non-empty strings, appended to this view's path.

        Returns:
            The async view.

        Raises:
            ValueError: an empty path or a part that is not a non-empty string.
        """
        out = type(self).__new__(type(self))
        out._bridge = self._bridge
        out._locks = self._locks
        out._engine = self._engine.scoped(*path)
        out._given_store = self._store_shown()
        return out

    def _store_shown(self) -> Any:
        """The store as given to the constructor (the sync engine's otherwise)."""
        return self.__dict__.get("_given_store", self._engine.store)

    def __repr__(self) -> str:
        """``AsyncEmotionalMemory(store=<store repr>)``, as the original's."""
        return f"{type(self).__name__}(store={self._store_shown()!r})"

    @property
    def scope(self) -> tuple[str, ...]:
        """This view's scope path (``()`` for the root engine)."""
        return self._engine.scope

    @property
    def engine(self) -> EmotionalMemory:
        """The synchronous engine doing the work."""
        return self._engine

    @property
    def config(self) -> EmotionalMemoryConfig:
        """The engine configuration."""
        return self._engine.config

    async def _run(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """Run one engine operation in a worker thread, in its scope's turn.

        Operations on one scope, on its sub-scopes or on its parents (the root
        included) take turns in arrival order; operations on disjoint scopes run at
        once (:class:`~emotional_memory._scope_locks.AsyncScopeLocks`). Cancelled
        while waiting for its turn, the operation never starts. Cancelled while its
        worker runs (e.g. by ``asyncio.wait_for``), the caller gets the
        ``CancelledError`` at once but the operation completes entirely in the
        background, and the next operation of an overlapping scope starts only
        after it: the turn is handed on when the worker finishes, not when the
        caller stops waiting (an operation waiting on async components of a loop
        that closes meanwhile fails instead, and hands the turn on). Each event loop
        gets its own turns, so the engine works across ``asyncio.run`` calls and from
        several loops at once (the sync engine's own scope locks keep operations
        from different loops apart); each operation's async components are called
        back on the loop that awaits it. A call an operation's async component makes
        back into the engine on an overlapping scope runs in that operation's turn
        (:class:`~emotional_memory._async_bridge.Nest`), as in the sync engine.
        """
        nest = NEST.get()
        if nest is not None and nest.covers(self._engine._scope_locks, self._engine.scope):
            if not nest.worker:  # the turn is held on the loop: run in it
                return await self._in_turn(None, nest.path, fn, *args, **kwargs)
            try:
                return await nested_call(nest, fn, *args, **kwargs)
            except LookupError:  # the operation is over: take a turn
                pass
        locks, path = await self._turn()
        return await self._in_turn(locks, path, fn, *args, **kwargs)

    async def _turn(self) -> tuple[AsyncScopeLocks, tuple[str, ...]]:
        """Wait for this view's turn on the running loop (see :meth:`_run`).

        Returns:
            The loop's turns and the path now held (hand it to :meth:`_in_turn`,
            or release it).
        """
        loop = asyncio.get_running_loop()
        locks = self._locks.get(loop)
        if locks is None:
            locks = self._locks.setdefault(loop, AsyncScopeLocks())
        path = self._engine.scope
        await locks.acquire(path)
        return locks, path

    async def _in_turn(
        self, locks: AsyncScopeLocks | None, path: tuple[str, ...], fn: Callable[..., T],
        *args: Any, **kwargs: Any,
    ) -> T:
        """Run ``fn`` in a worker thread in the turn ``path`` held, and hand the turn
        on when the worker finishes (see :meth:`_run`; ``locks`` None: a turn held by
        an enclosing operation, not handed on here)."""
        loop = asyncio.get_running_loop()
        locks = locks if locks is not None else NO_TURN
        try:
            self._bridge.loop = loop
            context = contextvars.copy_context()  # as asyncio.to_thread does
            # this operation's async components answer on this loop, even while
            # another loop's operation (a disjoint scope) runs on the engine
            context.run(CALLER_LOOP.set, loop)
            nest = Nest(self._engine._scope_locks, path, worker=True)
            context.run(NEST.set, nest)
            # the library's own pool, never the loop's default executor: an engine
            # call that waits on a coroutine needing a default-executor thread
            # (SyncToAsync adapters) cannot starve it (no deadlock under gather)
            # a StopIteration cannot be set on the future (the call would never end)
            worker: asyncio.Future[T] = loop.run_in_executor(
                engine_executor(),
                functools.partial(context.run, worker_body, nest, fn, *args, **kwargs),
            )
        except BaseException:
            locks.release(path)
            raise
        try:
            result = await asyncio.shield(worker)
        except asyncio.CancelledError:
            if worker.done():
                locks.release(path)
            else:
                worker.add_done_callback(functools.partial(finish_detached, locks, path))
            raise
        except BaseException:
            locks.release(path)
            raise
        locks.release(path)
        return result

    # encoding
    async def encode(
        self,
        content: str,
        appraisal: AppraisalVector | GenericAppraisalVector | None = None,
        metadata: dict[str, Any] | None = None,
        *,
        affect: CoreAffect | None = None,
        expires_at: datetime | None = None,
    ) -> Memory:
        """See :meth:`EmotionalMemory.encode`.

        Args:
            content: The event text.
            appraisal: Optional appraisal; its projection becomes the event affect.
            metadata: Optional JSON-able dict stored with the memory.
            affect: Opt-in explicit event affect.
            expires_at: Optional aware expiry.

        Returns:
            The stored memory (with its forward links).
        """
        return await self._run(
            self._engine.encode, content, appraisal, metadata, affect=affect,
            expires_at=expires_at,
        )

    async def encode_batch(
        self,
        contents: Sequence[str],
        metadata: Sequence[dict[str, Any] | None] | None = None,
        *,
        expires_at: datetime | Sequence[datetime | None] | None = None,
        affect: CoreAffect | Sequence[CoreAffect | None] | None = None,
    ) -> list[Memory]:
        """See :meth:`EmotionalMemory.encode_batch`.

        Args:
            contents: Event texts.
            metadata: Optional per-event metadata (same length as ``contents``).
            expires_at: Optional expiry, one for all or one per content.
            affect: Optional event affects, one for all or one (or None) per content.

        With an async appraisal engine, the batch's arguments are checked, then, in
        the batch's turn, its appraisals run concurrently, at most
        ``config.appraisal_max_concurrency`` at a time (as in the original); the
        memories, links and state are then exactly those of sequential encoding.

        Returns:
            The stored memories, in order.
        """
        engine = self._engine
        appraiser = engine.appraisal_engine
        cfg = engine.config
        if (
            not isinstance(appraiser, _AsyncToSyncAppraisal)
            or not cfg.enable_appraisal
            or cfg.dual_path_encoding
            or isinstance(contents, str)
            or not isinstance(contents, Sequence)  # an iterator: checking would consume it
            or not all(isinstance(c, str) for c in contents)
            or (metadata is not None and not isinstance(metadata, Sequence))
            or (metadata is not None and len(metadata) != len(contents))
        ):
            # Nothing to overlap, or bad input the engine itself reports.
            return await self._run(
                engine.encode_batch, contents, metadata, expires_at=expires_at, affect=affect
            )
        gate = asyncio.Semaphore(cfg.appraisal_max_concurrency)

        async def appraise(text: str, meta: dict[str, Any] | None, given: Any) -> Any:
            if given is not None:  # an event with a given affect is not appraised
                return NOT_APPRAISED
            async with gate:
                return await appraiser.inner.appraise(text, meta)

        # the batch's turn is taken first (as the serial path's), so that operations
        # arriving while it is checked and appraised run after it, in arrival order;
        # a batch an operation's async component encodes (nested) runs in its turn
        outer = NEST.get()
        nested = outer is not None and outer.covers(engine._scope_locks, engine.scope)
        locks, path = (NO_TURN, engine.scope) if nested else await self._turn()
        try:
            # checked before any appraisal (each may be a paid LLM call), off the
            # loop; the appraisals and the encoding use the checked private copies,
            # as the sync engine does (its appraiser gets the metadata it stores)
            def checked() -> tuple[Any, Any, Any, list[CoreAffect | None]]:
                texts, metas, expiries = engine._batch_inputs(contents, metadata, expires_at)
                return texts, metas, expiries, _per_item_affects(affect, len(texts))

            texts, metas, expiries, affects = await to_thread(checked)
            if not texts:  # as the sync engine: nothing embedded, no state written
                locks.release(path)
                return []
            # an appraiser's calls back into the engine run in the batch's turn (nested:
            # in the enclosing operation's, on its worker when it has one)
            nest = outer if nested and outer is not None else Nest(
                engine._scope_locks, path, worker=False
            )
            token = NEST.set(nest)
            try:
                results = await all_or_none(
                    appraise(t, m, a) for t, m, a in zip(texts, metas, affects, strict=True)
                )
            finally:
                NEST.reset(token)
                if nest is not outer:
                    nest.close()  # a task the appraiser left behind takes turns again
        except BaseException:
            locks.release(path)
            raise

        def encode_with_results() -> list[Memory]:
            # the checked inputs and their appraisals go to the sync engine's turn
            # directly (the engine itself is not touched: a view scoped() meanwhile
            # copies it, and keeps appraising)
            with traced_span("emotional_memory.encode_batch", {"batch_size": len(texts)}):
                return engine._encode_batch_in_turn(
                    texts, metas, expiries, affects, results, engine._batch_vectors(texts)
                )

        if nested:  # in the enclosing operation's turn (its worker holds the scope)
            return await self._run(encode_with_results)
        return await self._in_turn(locks, path, encode_with_results)

    async def observe(
        self,
        content: str | None = None,
        appraisal: AppraisalVector | GenericAppraisalVector | None = None,
        metadata: dict[str, Any] | None = None,
        *,
        affect: CoreAffect | None = None,
    ) -> EmotionalTag:
        """See :meth:`EmotionalMemory.observe`.

        Args:
            content: Event text.
            appraisal: Optional appraisal; its projection becomes the event affect.
            metadata: Optional dict passed to the appraisal engine as ``context``.
            affect: Optional explicit event affect.

        Returns:
            The tag ``encode`` would have stored.
        """
        return await self._run(self._engine.observe, content, appraisal, metadata, affect=affect)

    async def elaborate(self, memory_id: str) -> Memory | None:
        """See :meth:`EmotionalMemory.elaborate`.

        Args:
            memory_id: Id of the memory to elaborate.

        Returns:
            The updated memory, or None (unknown id, not pending, no appraisal engine).
        """
        return await self._run(self._engine.elaborate, memory_id)

    async def elaborate_pending(self) -> list[Memory]:
        """See :meth:`EmotionalMemory.elaborate_pending`.

        Returns:
            The elaborated memories ([] without an appraisal engine).
        """
        return await self._run(self._engine.elaborate_pending)

    # retrieval
    async def retrieve(
        self,
        query: str,
        top_k: int = 5,
        *,
        query_affect: CoreAffect | None = None,
        precomputed_weights: Any = None,
        where: Any = None,
        min_relevance: Any = None,
    ) -> list[Memory]:
        """See :meth:`EmotionalMemory.retrieve`.

        Args:
            query: Query text.
            top_k: Number of memories (>= 1).
            query_affect: Overrides the current affect for affect proximity (s3) only.
            precomputed_weights: Optional (6,) weights used as they are.
            where: Optional filter deciding the candidates.
            min_relevance: Optional calibrated-relevance threshold in [0, 1].

        Returns:
            Up to ``top_k`` memories, best first, after retrieval side effects.
        """
        return await self._run(
            self._engine.retrieve, query, top_k, query_affect=query_affect,
            precomputed_weights=precomputed_weights, where=where,
            min_relevance=min_relevance,
        )

    async def retrieve_query_gated(
        self, query: str, top_k: int = 5, *, tau: float | None = None
    ) -> list[Memory]:
        """See :meth:`EmotionalMemory.retrieve_query_gated`.

        Args:
            query: Query text (also appraised).
            top_k: Number of memories (>= 1).
            tau: Valence gate (default ``config.query_affect_gate_tau``).

        Returns:
            Up to ``top_k`` memories, best first.
        """
        return await self._run(self._engine.retrieve_query_gated, query, top_k, tau=tau)

    async def retrieve_with_explanations(
        self,
        query: str,
        top_k: int = 5,
        *,
        query_affect: CoreAffect | None = None,
        precomputed_weights: Any = None,
        where: Any = None,
        min_relevance: Any = None,
    ) -> list[RetrievalExplanation]:
        """See :meth:`EmotionalMemory.retrieve_with_explanations`.

        Args:
            query: Query text.
            top_k: Number of memories (>= 1).
            query_affect: Overrides the current affect for affect proximity (s3) only.
            precomputed_weights: Optional (6,) weights used as they are.
            where: Optional filter deciding the candidates.
            min_relevance: Optional calibrated-relevance threshold in [0, 1].

        Returns:
            One :class:`RetrievalExplanation` per result, best first.
        """
        return await self._run(
            self._engine.retrieve_with_explanations, query, top_k, query_affect=query_affect,
            precomputed_weights=precomputed_weights, where=where,
            min_relevance=min_relevance,
        )

    async def plan_retrieval(
        self, query: str, top_k: int = 5, *, query_affect: CoreAffect | None = None,
        where: Any = None,
    ) -> RetrievalPlan:
        """See :meth:`EmotionalMemory.plan_retrieval` (no side effects).

        Args:
            query: Query text.
            top_k: Number of seeds / results (>= 1).
            query_affect: Optional override for affect proximity.
            where: Optional filter deciding the candidates.

        Returns:
            The two-pass :class:`RetrievalPlan`.
        """
        return await self._run(
            self._engine.plan_retrieval, query, top_k, query_affect=query_affect, where=where
        )

    async def current_weights(self, query: str = "", now: datetime | None = None) -> Any:
        """See :meth:`EmotionalMemory.current_weights`.

        Args:
            query: Query text used for routing.
            now: Time at which the mood is read (default: the engine clock).

        Returns:
            The signal weights, shape (6,).
        """
        return await self._run(self._engine.current_weights, query, now)

    async def retrieve_with_query_appraisal(self, query: str, top_k: int = 5) -> list[Memory]:
        """See :meth:`EmotionalMemory.retrieve_with_query_appraisal`.

        Args:
            query: Query text (also the text appraised).
            top_k: Number of memories (>= 1).

        Returns:
            Up to ``top_k`` memories, best first.
        """
        return await self._run(self._engine.retrieve_with_query_appraisal, query, top_k)

    # store access
    async def get(self, memory_id: str) -> Memory | None:
        """See :meth:`EmotionalMemory.get`.

        Args:
            memory_id: The memory's id.

        Returns:
            The memory with this id, or None.
        """
        return await self._run(self._engine.get, memory_id)

    async def delete(self, memory_id: str) -> bool:
        """See :meth:`EmotionalMemory.delete`.

        Args:
            memory_id: The memory's id.

        Returns:
            True when it existed.
        """
        return await self._run(self._engine.delete, memory_id)

    async def update_memory(
        self,
        memory_id: str,
        *,
        content: str | None = None,
        tag: EmotionalTag | None = None,
        metadata: dict[str, Any] | None = None,
        embedding: Sequence[float] | None = None,
    ) -> Memory:
        """See :meth:`EmotionalMemory.update_memory`.

        Args:
            memory_id: The memory's id.
            content: New text (``None`` keeps it).
            tag: New tag (``None`` keeps it).
            metadata: New metadata (``None`` keeps it).
            embedding: New embedding, shape (D,) (``None`` keeps it or re-embeds).

        Returns:
            The updated memory.
        """
        return await self._run(
            self._engine.update_memory, memory_id, content=content, tag=tag, metadata=metadata,
            embedding=embedding,
        )

    async def list_all(
        self, *, where: Any = None, limit: int | None = None, offset: int = 0
    ) -> list[Memory]:
        """See :meth:`EmotionalMemory.list_all`.

        Args:
            where: Optional filter.
            limit: At most this many (None: all).
            offset: Skip this many first.

        Returns:
            The memories this view sees, in insertion order (one page with
            ``limit`` / ``offset``).
        """
        return await self._run(self._engine.list_all, where=where, limit=limit, offset=offset)

    async def count(self) -> int:
        """Number of memories (the async form of ``len``).

        Returns:
            The memory count.
        """
        return await self._run(len, self._engine)

    async def prune(self, threshold: float = 0.05, *, where: Any = None) -> int:
        """See :meth:`EmotionalMemory.prune`.

        Args:
            threshold: Effective-strength cut-off, in [0, 1].
            where: Optional filter.

        Returns:
            Number of memories removed.
        """
        return await self._run(self._engine.prune, threshold, where=where)

    async def export_memories(self, *, where: Any = None) -> list[dict[str, Any]]:
        """See :meth:`EmotionalMemory.export_memories`.

        Args:
            where: Optional filter.

        Returns:
            All memories this view sees as JSON-able dicts, in insertion order.
        """
        return await self._run(self._engine.export_memories, where=where)

    async def import_memories(
        self, data: Iterable[dict[str, Any]], overwrite: bool = False, *, reembed: bool = False
    ) -> int:
        """See :meth:`EmotionalMemory.import_memories`.

        Args:
            data: Memory dicts from :meth:`export_memories`.
            overwrite: Replace memories whose id already exists (else skip them).
            reembed: Embed every record's content with this engine's embedder.

        Returns:
            Number of memories written.
        """
        return await self._run(self._engine.import_memories, data, overwrite, reembed=reembed)

    def check_content(self, content: object, field: str = "content") -> str:
        """See :meth:`EmotionalMemory.check_content` (synchronous: no I/O).

        Returns:
            ``content``, unchanged.
        """
        return self._engine.check_content(content, field)

    # state: plain synchronous methods, as in the original
    def get_state(self) -> AffectiveState:
        """See :meth:`EmotionalMemory.get_state`.

        Returns:
            The current affective state.
        """
        return self._engine.get_state()

    def set_affect(self, core_affect: CoreAffect) -> AffectiveState:
        """See :meth:`EmotionalMemory.set_affect` (synchronous).

        Args:
            core_affect: The observed core affect.

        Returns:
            The new affective state.
        """
        return self._engine.set_affect(core_affect)

    def reset_state(self) -> None:
        """See :meth:`EmotionalMemory.reset_state` (synchronous)."""
        self._engine.reset_state()

    def save_state(self) -> dict[str, Any]:
        """See :meth:`EmotionalMemory.save_state`.

        Returns:
            A JSON-able snapshot of the affective state.
        """
        return self._engine.save_state()

    def load_state(self, data: dict[str, Any]) -> None:
        """See :meth:`EmotionalMemory.load_state` (synchronous).

        Args:
            data: A snapshot dict (of this library or the original).
        """
        self._engine.load_state(data)

    async def persist_state(self) -> dict[str, Any]:
        """See :meth:`EmotionalMemory.persist_state`.

        Returns:
            The state's snapshot.
        """
        return await self._run(self._engine.persist_state)

    async def restore_persisted_state(self) -> bool:
        """See :meth:`EmotionalMemory.restore_persisted_state`.

        Returns:
            True when a stored state was loaded.
        """
        return await self._run(self._engine.restore_persisted_state)

    async def clear_persisted_state(self) -> None:
        """See :meth:`EmotionalMemory.clear_persisted_state`."""
        await self._run(self._engine.clear_persisted_state)

    def get_current_mood(self, now: datetime | None = None) -> MoodField:
        """See :meth:`EmotionalMemory.get_current_mood`.

        Args:
            now: Aware time to read the mood at (default: the engine clock).

        Returns:
            The mood, regressed to ``now`` when ``mood_decay`` is configured.
        """
        return self._engine.get_current_mood(now)

    # lifecycle
    async def close(self) -> None:
        """Close the underlying stores and the appraisal engine."""
        await self._run(self._engine.close)

    async def __aenter__(self) -> AsyncEmotionalMemory:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


def as_async(engine: EmotionalMemory) -> AsyncEmotionalMemory:
    """An :class:`AsyncEmotionalMemory` over ``engine``'s parts.

    The new async engine uses the same store, embedder, appraisal engine, text rater, config,
    state store and query classifier, wrapped in the ``SyncToAsync*`` adapters, and
    is confined to ``engine``'s scope when ``engine`` is a scoped view, and
    starts from a copy of ``engine``'s affective state (history included): later
    state changes of either engine do not affect the other. An engine with
    ``shared_state`` keeps its state in the database: the copy then shares it, as an
    engine in another process would (same versions, same scope holds).

    Args:
        engine: A sync :class:`~emotional_memory.engine.EmotionalMemory`.

    Returns:
        The new ``AsyncEmotionalMemory``.

    Raises:
        TypeError: If ``engine`` is not an ``EmotionalMemory``.
    """
    if not isinstance(engine, EmotionalMemory):
        raise TypeError(f"engine must be an EmotionalMemory, got {type(engine).__name__}")
    appraiser = engine.appraisal_engine
    state = AffectiveState.restore(engine.get_state().snapshot())
    out = AsyncEmotionalMemory(
        SyncToAsyncStore(engine.store),
        SyncToAsyncEmbedder(engine.embedder),
        SyncToAsyncAppraisalEngine(appraiser) if appraiser is not None else None,
        engine.config,
        None,  # set below: constructing with it would reload the persisted state
        engine.query_classifier,
        # The construction-time initial state is replaced by the copy: reading the
        # engine's clock for it would advance a deterministic (replay) clock.
        clock=lambda: state.mood.timestamp,
        affect_from_text=engine.affect_from_text,
    )
    core = out.engine
    core._clock = engine._clock
    core.state_store = engine.state_store
    core._state = state
    if engine.scope:  # a view: the new engine is confined to the same scope
        core._scope = engine.scope
        core._root_state_store = engine.__dict__.get("_root_state_store", engine.state_store)
    if engine.__dict__.get("_shared_state", False):
        # the state lives in the database: share it through the engine's own store
        # (the adapters hide it from the state store's joined_with), never overwrite
        # it from a private copy
        core.store = engine.store
        core._shared_state = True
        if "_state_version" in engine.__dict__:
            core._state_version = engine._state_version
    return out
