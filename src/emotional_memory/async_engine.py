"""AsyncEmotionalMemory: the engine's full surface as coroutines.

One implementation serves both worlds: the synchronous engine core runs in a worker
thread (so the event loop never blocks on JAX or SQLite), one operation at a time.
Async stores, embedders and appraisal engines are called back on the caller's loop
through a bridge, so results are identical to the sync engine's.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any, TypeVar

from emotional_memory.affect import CoreAffect
from emotional_memory.appraisal import AppraisalVector
from emotional_memory.async_adapters import (
    _LoopBridge,
    bridge_appraisal,
    bridge_embedder,
    bridge_store,
)
from emotional_memory.engine import Clock, EmotionalMemory, EmotionalMemoryConfig
from emotional_memory.interfaces import AffectiveStateStore
from emotional_memory.models import Memory
from emotional_memory.mood import MoodField
from emotional_memory.query_classifier import QueryClassifier
from emotional_memory.retrieval import RetrievalExplanation, RetrievalPlan
from emotional_memory.state import AffectiveState

T = TypeVar("T")


class AsyncEmotionalMemory:
    """Async affective memory with the same methods as :class:`EmotionalMemory`.

    Args:
        store: a sync ``MemoryStore`` or an ``AsyncMemoryStore``.
        embedder: a sync ``Embedder`` or an ``AsyncEmbedder``.
        appraisal_engine: optional sync or async appraisal engine.
        config, state_store, query_classifier, clock: as for :class:`EmotionalMemory`.
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
    ) -> None:
        self._bridge = _LoopBridge()
        self._lock: asyncio.Lock | None = None
        self._engine = EmotionalMemory(
            bridge_store(store, self._bridge),
            bridge_embedder(embedder, self._bridge),
            bridge_appraisal(appraisal_engine, self._bridge),
            config,
            state_store,
            query_classifier,
            clock=clock,
        )

    @classmethod
    def from_engine(cls, engine: EmotionalMemory) -> AsyncEmotionalMemory:
        """Wrap an existing sync engine (shares its store and state)."""
        if not isinstance(engine, EmotionalMemory):
            raise TypeError("engine must be an EmotionalMemory")
        out = cls.__new__(cls)
        out._bridge = _LoopBridge()
        out._lock = None
        out._engine = engine
        return out

    @property
    def engine(self) -> EmotionalMemory:
        """The synchronous engine doing the work."""
        return self._engine

    @property
    def config(self) -> EmotionalMemoryConfig:
        """The engine configuration."""
        return self._engine.config

    async def _run(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        if self._lock is None:
            self._lock = asyncio.Lock()
        async with self._lock:
            self._bridge.loop = asyncio.get_running_loop()
            return await asyncio.to_thread(functools.partial(fn, *args, **kwargs))

    # encoding
    async def encode(
        self,
        content: str,
        appraisal: AppraisalVector | None = None,
        metadata: dict[str, Any] | None = None,
        *,
        affect: CoreAffect | None = None,
    ) -> Memory:
        """See :meth:`EmotionalMemory.encode`."""
        return await self._run(self._engine.encode, content, appraisal, metadata, affect=affect)

    async def encode_batch(
        self, contents: Sequence[str], metadata: Sequence[dict[str, Any] | None] | None = None
    ) -> list[Memory]:
        """See :meth:`EmotionalMemory.encode_batch`."""
        return await self._run(self._engine.encode_batch, contents, metadata)

    async def observe(
        self,
        content: str | None = None,
        appraisal: AppraisalVector | None = None,
        *,
        affect: CoreAffect | None = None,
    ) -> AffectiveState:
        """See :meth:`EmotionalMemory.observe`."""
        return await self._run(self._engine.observe, content, appraisal, affect=affect)

    async def elaborate(self, memory_id: str) -> Memory:
        """See :meth:`EmotionalMemory.elaborate`."""
        return await self._run(self._engine.elaborate, memory_id)

    async def elaborate_pending(self) -> list[Memory]:
        """See :meth:`EmotionalMemory.elaborate_pending`."""
        return await self._run(self._engine.elaborate_pending)

    # retrieval
    async def retrieve(
        self, query: str, top_k: int = 5, *, query_affect: CoreAffect | None = None
    ) -> list[Memory]:
        """See :meth:`EmotionalMemory.retrieve`."""
        return await self._run(self._engine.retrieve, query, top_k, query_affect=query_affect)

    async def retrieve_with_explanations(
        self, query: str, top_k: int = 5, *, query_affect: CoreAffect | None = None
    ) -> list[RetrievalExplanation]:
        """See :meth:`EmotionalMemory.retrieve_with_explanations`."""
        return await self._run(
            self._engine.retrieve_with_explanations, query, top_k, query_affect=query_affect
        )

    async def plan_retrieval(
        self, query: str, top_k: int = 5, *, query_affect: CoreAffect | None = None
    ) -> RetrievalPlan:
        """See :meth:`EmotionalMemory.plan_retrieval` (no side effects)."""
        return await self._run(
            self._engine.plan_retrieval, query, top_k, query_affect=query_affect
        )

    async def current_weights(self, query: str = "", now: datetime | None = None) -> Any:
        """See :meth:`EmotionalMemory.current_weights`."""
        return await self._run(self._engine.current_weights, query, now)

    async def retrieve_with_query_appraisal(self, query: str, top_k: int = 5) -> list[Memory]:
        """See :meth:`EmotionalMemory.retrieve_with_query_appraisal`."""
        return await self._run(self._engine.retrieve_with_query_appraisal, query, top_k)

    # store access
    async def get(self, memory_id: str) -> Memory | None:
        """See :meth:`EmotionalMemory.get`."""
        return await self._run(self._engine.get, memory_id)

    async def delete(self, memory_id: str) -> bool:
        """See :meth:`EmotionalMemory.delete`."""
        return await self._run(self._engine.delete, memory_id)

    async def update_memory(
        self,
        memory_id: str,
        *,
        content: str | None = None,
        metadata: dict[str, Any] | None = None,
        embedding: Sequence[float] | None = None,
    ) -> Memory:
        """See :meth:`EmotionalMemory.update_memory`."""
        return await self._run(
            self._engine.update_memory, memory_id, content=content, metadata=metadata,
            embedding=embedding,
        )

    async def list_all(self) -> list[Memory]:
        """See :meth:`EmotionalMemory.list_all`."""
        return await self._run(self._engine.list_all)

    async def count(self) -> int:
        """Number of memories (the async form of ``len``)."""
        return await self._run(len, self._engine)

    async def prune(self, threshold: float = 0.05) -> int:
        """See :meth:`EmotionalMemory.prune`."""
        return await self._run(self._engine.prune, threshold)

    async def export_memories(self) -> list[dict[str, Any]]:
        """See :meth:`EmotionalMemory.export_memories`."""
        return await self._run(self._engine.export_memories)

    async def import_memories(
        self, data: Sequence[dict[str, Any]], overwrite: bool = False
    ) -> int:
        """See :meth:`EmotionalMemory.import_memories`."""
        return await self._run(self._engine.import_memories, data, overwrite)

    # state
    async def get_state(self) -> AffectiveState:
        """See :meth:`EmotionalMemory.get_state`."""
        return self._engine.get_state()

    async def set_affect(self, affect: CoreAffect) -> AffectiveState:
        """See :meth:`EmotionalMemory.set_affect`."""
        return await self._run(self._engine.set_affect, affect)

    async def reset_state(self) -> None:
        """See :meth:`EmotionalMemory.reset_state`."""
        await self._run(self._engine.reset_state)

    async def save_state(self) -> dict[str, Any]:
        """See :meth:`EmotionalMemory.save_state`."""
        return self._engine.save_state()

    async def load_state(self, snapshot: dict[str, Any]) -> None:
        """See :meth:`EmotionalMemory.load_state`."""
        await self._run(self._engine.load_state, snapshot)

    async def persist_state(self) -> None:
        """See :meth:`EmotionalMemory.persist_state`."""
        await self._run(self._engine.persist_state)

    async def restore_persisted_state(self) -> bool:
        """See :meth:`EmotionalMemory.restore_persisted_state`."""
        return await self._run(self._engine.restore_persisted_state)

    async def clear_persisted_state(self) -> None:
        """See :meth:`EmotionalMemory.clear_persisted_state`."""
        await self._run(self._engine.clear_persisted_state)

    async def get_current_mood(self, now: datetime | None = None) -> MoodField:
        """See :meth:`EmotionalMemory.get_current_mood`."""
        return self._engine.get_current_mood(now)

    # lifecycle
    async def close(self) -> None:
        """Close the underlying stores."""
        await self._run(self._engine.close)

    async def __aenter__(self) -> AsyncEmotionalMemory:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


def as_async(engine: EmotionalMemory) -> AsyncEmotionalMemory:
    """Wrap a sync engine as an :class:`AsyncEmotionalMemory` (blocking calls in threads)."""
    return AsyncEmotionalMemory.from_engine(engine)
