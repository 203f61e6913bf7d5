"""Reliability: threads, cancellation, event loops, atomic state, several connections
and processes on one SQLite file, aliasing, bounded work on hostile input.

Every case uses the real thing (threads, processes, SQLite files in ``tmp_path``) and
is bounded in count; nothing asserts wall-clock time.
"""

from __future__ import annotations

import asyncio
import random
import threading
from pathlib import Path

import pytest

from emotional_memory import AsyncEmotionalMemory, EmotionalMemory, InMemoryStore, SQLiteStore
from emotional_memory.embedders import HashingEmbedder

WORDS = ("rain", "storm", "calm", "joy", "fear", "river", "bridge", "night", "sun", "loss")


def _text(rng: random.Random) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(4))


def _check_consistent(engine: EmotionalMemory) -> None:
    """No dangling links; every link leaves its holder; ids unique."""
    memories = engine.list_all()
    ids = [m.id for m in memories]
    assert len(ids) == len(set(ids)) == len(engine)
    known = set(ids)
    for m in memories:
        for link in m.tag.resonance_links:
            assert link.source_id == m.id
            assert link.target_id in known, f"dangling link {m.id} -> {link.target_id}"


# ---------------------------------------------------------------- 1. threads


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
def test_sync_engine_shared_by_eight_threads(kind: str, tmp_path: Path) -> None:
    store = InMemoryStore() if kind == "memory" else SQLiteStore(tmp_path / "m.db")
    engine = EmotionalMemory(store, HashingEmbedder(dim=32))
    for i in range(8):
        engine.encode(f"seed {i} " + WORDS[i])
    errors: list[BaseException] = []
    start = threading.Barrier(8)

    def worker(seed: int) -> None:
        rng = random.Random(seed)
        try:
            start.wait()
            for _ in range(12):
                op = rng.random()
                if op < 0.4:
                    engine.encode(_text(rng))
                elif op < 0.8:
                    engine.retrieve(_text(rng), top_k=3)
                else:
                    ids = [m.id for m in engine.list_all()]
                    if ids:
                        engine.delete(rng.choice(ids))
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(s,)) for s in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    assert not any(t.is_alive() for t in threads)
    assert errors == []
    _check_consistent(engine)
    if kind == "sqlite":
        # The file holds exactly what the engine saw.
        seen = {m.id: m for m in engine.list_all()}
        engine.close()
        with SQLiteStore(tmp_path / "m.db") as reopened:
            again = {m.id: m for m in reopened.list_all()}
        assert again.keys() == seen.keys()
        for mid, m in again.items():
            assert m.tag == seen[mid].tag


# ---------------------------------------------------------------- 2. async


class _GatedEmbedder:
    """A hashing embedder that records how many embed calls run at once and can be
    held inside ``embed`` until released (no sleeps: events decide the order)."""

    def __init__(self) -> None:
        self.inner = HashingEmbedder(dim=16)
        self.entered = threading.Event()
        self.release = threading.Event()
        self.release.set()
        self.active = 0
        self.max_active = 0
        self.calls: list[str] = []
        self._guard = threading.Lock()

    def embed(self, text: str) -> list[float]:
        with self._guard:
            self.active += 1
            self.max_active = max(self.max_active, self.active)
            self.calls.append(text)
        self.entered.set()
        try:
            assert self.release.wait(timeout=60)
            return self.inner.embed(text)
        finally:
            with self._guard:
                self.active -= 1

    def embed_batch(self, texts: list[str]) -> list[list[float]]:
        return [self.embed(t) for t in texts]


def test_cancelled_async_call_completes_whole_and_never_overlaps_the_next() -> None:
    embedder = _GatedEmbedder()
    engine = AsyncEmotionalMemory(InMemoryStore(), embedder)

    async def scenario() -> None:
        embedder.release.clear()
        embedder.entered.clear()
        first = asyncio.ensure_future(asyncio.wait_for(engine.encode("first event"), 30))
        await asyncio.to_thread(embedder.entered.wait, 30)
        first.cancel()  # the worker is inside embed: the caller stops waiting
        with pytest.raises(asyncio.CancelledError):
            await first
        second = asyncio.ensure_future(engine.encode("second event"))
        for _ in range(50):  # give the second call every chance to start early
            await asyncio.sleep(0.01)
            if len(embedder.calls) > 1:
                break
        assert embedder.calls == ["first event"]  # it has not started
        embedder.release.set()
        stored = await second
        assert stored.content == "second event"

    asyncio.run(scenario())
    assert embedder.max_active == 1
    contents = [m.content for m in engine.engine.list_all()]
    assert contents == ["first event", "second event"]  # the first completed entirely


def test_async_call_cancelled_before_its_turn_never_runs() -> None:
    embedder = _GatedEmbedder()
    engine = AsyncEmotionalMemory(InMemoryStore(), embedder)

    async def scenario() -> None:
        embedder.release.clear()
        embedder.entered.clear()
        first = asyncio.ensure_future(engine.encode("first"))
        await asyncio.to_thread(embedder.entered.wait, 30)
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(engine.encode("never"), 0.01)
        embedder.release.set()
        await first

    asyncio.run(scenario())
    assert [m.content for m in engine.engine.list_all()] == ["first"]
    assert embedder.calls == ["first"]


def test_one_async_engine_across_two_event_loops() -> None:
    engine = AsyncEmotionalMemory(InMemoryStore(), HashingEmbedder(dim=16))

    async def burst(tag: str) -> None:
        # Concurrent calls contend for the turn lock (binding it to this loop).
        await asyncio.gather(*(engine.encode(f"{tag} {i}") for i in range(4)))
        await asyncio.gather(*(engine.retrieve(tag, top_k=2) for _ in range(3)))

    asyncio.run(burst("first loop"))
    asyncio.run(burst("second loop"))
    assert len(engine.engine) == 8
