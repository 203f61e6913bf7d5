"""What one request may leave behind in a long-running service: counted objects,
never timings. Many requests on distinct scopes must keep the per-scope state the
process holds within the documented bounds (``MAX_VIEWS`` views, the stored states)."""

from __future__ import annotations

import asyncio
import gc

from emotional_memory.embedders import HashingEmbedder
from emotional_memory.engine import EmotionalMemory
from emotional_memory.server.service import MemoryService
from emotional_memory.state_stores import InMemoryAffectiveStateStore
from emotional_memory.stores import InMemoryStore


def _live(kind: type) -> int:
    gc.collect()
    return sum(1 for obj in gc.get_objects() if type(obj) is kind)


def test_reading_many_scopes_keeps_no_in_memory_state_per_scope() -> None:
    """A scope only read (state, search, get) stores no state: once its view is
    evicted nothing of it stays, so a client naming new scopes forever cannot grow
    the process (``serve --store memory://`` keeps its states so)."""
    states = InMemoryAffectiveStateStore()
    engine = EmotionalMemory(InMemoryStore(), HashingEmbedder(), state_store=states)
    service = MemoryService(engine, max_views=2)
    before = _live(InMemoryAffectiveStateStore)

    async def run() -> None:
        for i in range(60):
            await service.state((f"s{i}",))
            await service.search((f"q{i}",), "hello", 3)
            await service.get((f"g{i}",), "no-such-id")

    asyncio.run(run())
    assert len(service._views) == 2
    # the two kept views' stores at most (and none for the 178 evicted scopes)
    assert _live(InMemoryAffectiveStateStore) - before <= 2


def test_a_saved_in_memory_state_outlives_its_evicted_view() -> None:
    from emotional_memory.affect import CoreAffect

    states = InMemoryAffectiveStateStore()
    engine = EmotionalMemory(InMemoryStore(), HashingEmbedder(), state_store=states)
    service = MemoryService(engine, max_views=1)
    affect = CoreAffect(valence=-0.6, arousal=0.7)

    async def run() -> None:
        saved = await service.set_affect(("kept",), affect)
        for i in range(5):
            await service.state((f"other{i}",))
        assert ("kept",) not in service._views
        again = await service.state(("kept",))
        assert again.snapshot() == saved.snapshot()

    asyncio.run(run())
    assert states.scoped(("kept",)).load_snapshot() is not None
    assert states.scoped(("other0",)).load() is None
    # a nested store's scopes are its own path's sub-scopes
    states.scoped(("a",)).scoped(("b",)).save(states.scoped(("kept",)).load_snapshot())
    assert states.scoped(("a", "b")).load_snapshot() == states.scoped(("kept",)).load_snapshot()
    assert states.scoped(("a",)).load() is None
