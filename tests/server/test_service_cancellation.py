"""A request cancelled while its operation runs (a client gone, an MCP cancel, a
shutdown): the operation completes in the background, and the service treats its
scope as in use until then.

Real :class:`MemoryService` over the real async engine; the operation is held in its
worker thread by an embedder that waits for an event, so no test sleeps.
"""

from __future__ import annotations

import asyncio

from emotional_memory.affect import CoreAffect
from emotional_memory.embedders import HashingEmbedder
from emotional_memory.engine import EmotionalMemory
from emotional_memory.server.service import BatchItem, MemoryService
from emotional_memory.state_stores import InMemoryAffectiveStateStore
from emotional_memory.stores import InMemoryStore
from support.async_parts import WordHeldEmbedder

WAIT = 60.0  # seconds: only ever reached when something hangs


def _service(embedder: HashingEmbedder, max_views: int) -> MemoryService:
    engine = EmotionalMemory(InMemoryStore(), embedder, state_store=InMemoryAffectiveStateStore())
    return MemoryService(engine, max_views=max_views)


def test_a_cancelled_operation_keeps_its_scope_view_until_it_finishes() -> None:
    """The view of a cancelled operation's scope counts as idle (evictable) while the
    operation still runs; opened again meanwhile, the new view loads the scope's
    state only once that operation has saved it (the engine's scope lock), so the
    next operation starts from it: the scope's state holds both encodes."""
    embedder = WordHeldEmbedder("HOLD", WAIT)
    service = _service(embedder, max_views=1)
    first = CoreAffect(valence=-0.8, arousal=0.9)
    second = CoreAffect(valence=0.6, arousal=0.2)

    async def run() -> None:
        held = asyncio.ensure_future(service.remember(("a",), BatchItem("HOLD me", affect=first)))
        assert await asyncio.to_thread(embedder.entered.wait, WAIT)
        held.cancel()  # the client went away; its encode goes on in the background
        await asyncio.gather(held, return_exceptions=True)
        for other in ("b", "c"):  # other scopes' requests: views opened, idle ones evicted
            await service.remember((other,), BatchItem(f"{other} goes on"))
        after = asyncio.ensure_future(service.remember(("a",), BatchItem("next", affect=second)))
        embedder.release.set()
        await asyncio.wait_for(after, WAIT)
        state = (await service.state(("a",))).history
        assert [round(v, 6) for _, v, _, _ in state[-2:]] == [first.valence, second.valence]
        assert [m.content for m in await service.list(("a",), None, 10, 0)] == ["HOLD me", "next"]

    asyncio.run(run())
