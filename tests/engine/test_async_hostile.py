"""AsyncEmotionalMemory under hostile use (views made while a batch runs, ...).

Events decide every order; nothing asserts wall-clock time."""

from __future__ import annotations

import asyncio
import threading
from datetime import UTC, datetime
from typing import Any

from emotional_memory import AsyncEmotionalMemory, InMemoryStore, KeywordAppraisalEngine
from emotional_memory.embedders import HashingEmbedder

NOW = datetime(2026, 1, 1, tzinfo=UTC)


class _AsyncKeywords:
    """An async appraisal engine (keyword appraisal, one loop step per call)."""

    async def appraise(self, text: str, context: Any = None) -> Any:
        await asyncio.sleep(0)
        return KeywordAppraisalEngine().appraise(text, context)


class _HeldEmbedder:
    """A hashing embedder that can be held inside ``embed`` until released."""

    def __init__(self) -> None:
        self.inner = HashingEmbedder(dim=16)
        self.entered = threading.Event()
        self.release = threading.Event()
        self.release.set()

    def embed(self, text: str) -> list[float]:
        self.entered.set()
        assert self.release.wait(timeout=60)
        return self.inner.embed(text)

    def embed_batch(self, texts: list[str]) -> list[list[float]]:
        return [self.embed(t) for t in texts]


def test_a_view_made_while_a_batch_runs_appraises_its_own_events() -> None:
    # encode_batch with an async appraiser swapped the engine's appraisal engine for
    # a replay of the batch's appraisals while it ran: scoped() (synchronous, on the
    # loop) copied the replay into the new view, whose next encode then failed
    # (IndexError: pop from empty list) or took another event's appraisal
    embedder = _HeldEmbedder()
    engine = AsyncEmotionalMemory(
        InMemoryStore(), embedder, _AsyncKeywords(), clock=lambda: NOW
    )
    reference = AsyncEmotionalMemory(
        InMemoryStore(), HashingEmbedder(dim=16), _AsyncKeywords(), clock=lambda: NOW
    )

    async def scenario() -> tuple[Any, Any, AsyncEmotionalMemory]:
        embedder.release.clear()
        embedder.entered.clear()
        batch = asyncio.ensure_future(engine.encode_batch(["I was furious", "a happy day"]))
        await asyncio.to_thread(embedder.entered.wait, 30)  # the batch is storing now
        view = engine.scoped("alice")
        embedder.release.set()
        await batch
        got = await view.encode("I was furious about the broken build")
        want = await reference.scoped("alice").encode("I was furious about the broken build")
        return got, want, view

    got, want, view = asyncio.run(scenario())
    assert got.tag.appraisal == want.tag.appraisal
    assert got.tag.core_affect == want.tag.core_affect
    assert view.engine.appraisal_engine is engine.engine.appraisal_engine
