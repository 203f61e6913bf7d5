"""``encode_batch`` with a batched resonance-candidate search (SPEC 7).

When the store has ``search_by_embedding_batch(..., visible_until=ids)`` the engine
saves a block of new memories first and finds all their candidates with one search;
stores without it get one ``search_by_embedding`` per memory. Both must build the very
same store: same links in the same order, same strengths, same state. Each test runs
the same workload on an ``InMemoryStore`` and on a thin wrapper that hides the batch
method, with identical clocks, and compares the exports with ids replaced by their
insertion index.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
import pytest

from emotional_memory import (
    AsyncEmotionalMemory,
    CoreAffect,
    EmotionalMemory,
    EmotionalMemoryConfig,
    InMemoryStore,
    KeywordAppraisalEngine,
    Memory,
    ResonanceConfig,
)
from emotional_memory._engine import encoding as engine_module
from emotional_memory.embedders import HashingEmbedder
from emotional_memory.replay import TickClock
from support.plain_store import PerMemoryStore

START = datetime(2026, 1, 1, tzinfo=UTC)
WORDS = [
    "server", "crashed", "demo", "coffee", "friend", "rain", "launch", "budget", "party",
    "furious", "happy", "calm", "sad", "review", "garden", "night", "storm", "email",
    "doctor", "bakery", "music", "deadline", "train", "river",
]


class SpyBatchStore(InMemoryStore):
    """``InMemoryStore`` recording batch searches; optionally failing the n-th update."""

    def __init__(self, fail_update_at: int | None = None, fail_search: bool = False) -> None:
        super().__init__()
        self.batch_queries: list[int] = []
        self.single_searches = 0
        self.updates = 0
        self.fail_update_at = fail_update_at
        self.fail_search = fail_search

    def search_by_embedding(self, embedding: Sequence[float], top_k: int) -> list[Memory]:
        self.single_searches += 1
        return super().search_by_embedding(embedding, top_k)

    def search_by_embedding_batch(
        self,
        embeddings: Sequence[Sequence[float] | None],
        top_k: int,
        *,
        visible_until: Sequence[str] | None = None,
    ) -> list[list[Memory]]:
        if self.fail_search:
            raise RuntimeError("search down")
        self.batch_queries.append(len(embeddings))
        return super().search_by_embedding_batch(embeddings, top_k, visible_until=visible_until)

    def update(self, memory: Memory) -> None:
        self.updates += 1
        if self.fail_update_at is not None and self.updates == self.fail_update_at:
            raise RuntimeError("store write failed")
        super().update(memory)


class GappyEmbedder:
    """HashingEmbedder that gives texts containing "blank" no embedding (None; an
    empty list is refused as bad embedder output)."""

    def __init__(self, dim: int = 24) -> None:
        self.inner = HashingEmbedder(dim=dim)

    def embed(self, text: str) -> list[float] | None:
        return None if "blank" in text else self.inner.embed(text)

    def embed_batch(self, texts: list[str]) -> list[list[float] | None]:
        return [self.embed(t) for t in texts]


def texts(n: int, seed: int, blank_every: int = 0) -> list[str]:
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        words = " ".join(WORDS[w] for w in rng.integers(0, len(WORDS), 5))
        blank = " blank" if blank_every and i % blank_every == 0 else ""
        out.append(f"{words}{blank} #{seed}.{i}")
    return out


CONFIGS = {
    "default": EmotionalMemoryConfig(),
    # many links per memory, full targets: exercises the weakest-link replacement
    "dense": EmotionalMemoryConfig(
        resonance=ResonanceConfig(threshold=0.05, max_links=3, candidate_multiplier=4)
    ),
}


def make(store: Any, config: EmotionalMemoryConfig, embedder: Any = None) -> EmotionalMemory:
    return EmotionalMemory(
        store,
        embedder if embedder is not None else HashingEmbedder(dim=24),
        KeywordAppraisalEngine(),
        config=config,
        clock=TickClock(START, timedelta(seconds=41)),
    )


def canon(engine: EmotionalMemory) -> str:
    """Export and state as JSON with ids replaced by insertion index (order kept)."""
    text = json.dumps({"memories": engine.export_memories(), "state": engine.save_state()})
    for i, memory in enumerate(engine.list_all()):
        text = text.replace(memory.id, f"#{i}")
    return text


def returned(memories: list[Memory], engine: EmotionalMemory) -> list[Any]:
    index = {m.id: i for i, m in enumerate(engine.list_all())}
    return [
        (index[m.id], m.content, [(index[lk.target_id], lk.strength, lk.link_type)
                                  for lk in m.tag.resonance_links])
        for m in memories
    ]


def workload(engine: EmotionalMemory) -> list[list[Memory]]:
    """Batches below, across and far above the candidate limit, with affect changes."""
    out = [engine.encode_batch(texts(4, 1, blank_every=3))]  # fewer than the limit
    out.append(engine.encode_batch(texts(30, 2, blank_every=7)))  # crosses the limit
    engine.set_affect(CoreAffect(valence=-0.7, arousal=0.9, dominance=0.2))
    out.append([engine.encode(t) for t in texts(3, 3)])
    out.append(engine.encode_batch(texts(250, 4, blank_every=11)))
    out.append(engine.encode_batch(texts(1, 5)))
    return out


@pytest.mark.parametrize("config", list(CONFIGS), ids=list(CONFIGS))
@pytest.mark.parametrize("block", [1024, 16], ids=["one_block", "blocks_of_16"])
def test_batched_search_builds_the_same_store(
    config: str, block: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(engine_module, "_LINK_SEARCH_BLOCK", block)
    cfg = CONFIGS[config]
    batched_store = SpyBatchStore()
    plain_store = PerMemoryStore()
    batched = make(batched_store, cfg, GappyEmbedder())
    plain = make(plain_store, cfg, GappyEmbedder())

    out_batched = workload(batched)
    out_plain = workload(plain)

    assert canon(batched) == canon(plain)
    for a, b in zip(out_batched, out_plain, strict=True):
        assert returned(a, batched) == returned(b, plain)
    assert sum(len(m.tag.resonance_links) for m in batched.list_all()) > 250  # links exist
    # the batch path searched in blocks (3 single searches: the 3 plain encodes) ...
    limit = cfg.resonance.max_links * cfg.resonance.candidate_multiplier
    assert batched_store.single_searches == 3
    assert sum(batched_store.batch_queries) == 4 + 30 + 250 + 1 - limit
    assert max(batched_store.batch_queries) <= block
    # ... the plain path once per memory beyond the limit
    assert plain_store.searches == 4 + 30 + 3 + 250 + 1 - limit


def test_fewer_memories_than_the_candidate_limit_link_to_all() -> None:
    """SPEC 7: up to max_links * candidate_multiplier memories, every one is a candidate,
    embedded or not (a search would skip the ones without an embedding)."""
    cfg = EmotionalMemoryConfig(resonance=ResonanceConfig(threshold=-1.0, max_links=20))
    store = SpyBatchStore()
    engine = make(store, cfg, GappyEmbedder())
    batch = texts(12, 7, blank_every=2)
    out = engine.encode_batch(batch)
    assert store.batch_queries == [] and store.single_searches == 0
    stored = engine.list_all()
    index = {m.id: i for i, m in enumerate(stored)}
    for i, memory in enumerate(stored):
        # threshold -1: forward links to every earlier memory, blank ones (no
        # embedding) too, then the backward twins of every later one
        targets = [index[lk.target_id] for lk in memory.tag.resonance_links]
        assert sorted(targets[:i]) == list(range(i))
        assert sorted(targets[i:]) == list(range(i + 1, len(batch)))
        # returned as repeated encode returns it: the forward links only
        assert out[i].tag.resonance_links == memory.tag.resonance_links[:i]
    plain = make(PerMemoryStore(), cfg, GappyEmbedder())
    plain.encode_batch(batch)
    assert canon(engine) == canon(plain)


def test_batch_starting_below_the_limit_and_ending_above() -> None:
    cfg = CONFIGS["default"]
    store = SpyBatchStore()
    engine = make(store, cfg)
    engine.encode_batch(texts(9, 8))
    engine.encode_batch(texts(20, 9))  # 9 stored: 6 more see <= 15, 14 are searched
    assert store.batch_queries == [14]
    plain = make(PerMemoryStore(), cfg)
    plain.encode_batch(texts(9, 8))
    plain.encode_batch(texts(20, 9))
    assert canon(engine) == canon(plain)


@pytest.mark.parametrize("fail_update_at", [1, 40, 200])
def test_failure_in_the_middle_of_the_batch_rolls_everything_back(fail_update_at: int) -> None:
    cfg = CONFIGS["dense"]
    store = SpyBatchStore()
    engine = make(store, cfg)
    engine.encode_batch(texts(40, 10))
    before, state, count = canon(engine), engine.save_state(), len(engine)
    store.updates, store.fail_update_at = 0, fail_update_at
    with pytest.raises(RuntimeError, match="store write failed"):
        engine.encode_batch(texts(120, 11))
    assert store.updates == fail_update_at  # it failed where asked, mid-batch
    assert len(engine) == count
    assert canon(engine) == before
    assert engine.save_state() == state
    # nothing half-written is left behind: the same batch now goes through
    store.fail_update_at = None
    engine.encode_batch(texts(120, 11))
    assert len(engine) == count + 120

def test_failing_batch_search_rolls_back() -> None:
    store = SpyBatchStore()
    engine = make(store, CONFIGS["default"])
    engine.encode_batch(texts(20, 12))
    before, state = canon(engine), engine.save_state()
    store.fail_search = True
    with pytest.raises(RuntimeError, match="search down"):
        engine.encode_batch(texts(10, 13))
    assert canon(engine) == before
    assert engine.save_state() == state
    assert len(engine) == 20


def test_batch_search_returning_the_wrong_count_is_an_error() -> None:
    class Short(InMemoryStore):
        def search_by_embedding_batch(self, embeddings: Any, top_k: int, **kw: Any) -> Any:
            return super().search_by_embedding_batch(embeddings, top_k, **kw)[:-1]

    store = Short()
    engine = make(store, CONFIGS["default"])
    engine.encode_batch(texts(15, 14))  # up to the limit: no search
    with pytest.raises(ValueError, match="returned 4 results for 5 queries"):
        engine.encode_batch(texts(5, 15))
    assert len(engine) == 15


def test_resonance_off_saves_without_searching() -> None:
    cfg = EmotionalMemoryConfig(enable_resonance=False)
    store = SpyBatchStore()
    engine = make(store, cfg)
    engine.encode_batch(texts(40, 16))
    assert store.batch_queries == [] and store.single_searches == 0
    assert all(m.tag.resonance_links == [] for m in engine.list_all())
    plain = make(PerMemoryStore(), cfg)
    plain.encode_batch(texts(40, 16))
    assert canon(engine) == canon(plain)


def test_async_encode_batch_uses_the_batched_search_with_the_same_result() -> None:
    cfg = CONFIGS["dense"]
    store = SpyBatchStore()
    clock = TickClock(START, timedelta(seconds=41))
    async_engine = AsyncEmotionalMemory(
        store, HashingEmbedder(dim=24), KeywordAppraisalEngine(), cfg, clock=clock
    )

    async def run() -> None:
        await async_engine.encode_batch(texts(10, 17))
        await async_engine.encode_batch(texts(150, 18))

    asyncio.run(run())
    assert sum(store.batch_queries) == 160 - cfg.resonance.max_links * 4
    plain = make(PerMemoryStore(), cfg)
    plain.encode_batch(texts(10, 17))
    plain.encode_batch(texts(150, 18))
    assert canon(async_engine.engine) == canon(plain)



def test_link_cosine_is_bit_for_bit_the_numpy_formula() -> None:
    """Link scoring computes the new memory's norm once; the cosine must still be
    ``dot(a, b) / (norm(a) * norm(b))`` exactly, with 0 for missing, zero-norm,
    NaN and infinite vectors."""
    from emotional_memory.resonance import _cosine

    rng = np.random.default_rng(3)
    for dim in (1, 7, 16, 33, 384):
        for _ in range(40):
            a = (rng.standard_normal(dim) * rng.uniform(1e-3, 1e3)).tolist()
            b = (rng.standard_normal(dim) * rng.uniform(1e-3, 1e3)).tolist()
            va, vb = np.asarray(a), np.asarray(b)
            norms = float(np.linalg.norm(va)) * float(np.linalg.norm(vb))
            expected = float(np.dot(va, vb) / norms)
            assert _cosine(a, b) == expected
    a = rng.standard_normal(8).tolist()
    assert _cosine(a, None) == _cosine(None, a) == _cosine([], a) == 0.0
    assert _cosine(a, [0.0] * 8) == _cosine([0.0] * 8, a) == 0.0
    assert _cosine(a, [float("nan"), *a[1:]]) == 0.0
    assert _cosine([float("inf"), *a[1:]], a) == 0.0
    with pytest.raises(ValueError, match="length mismatch"):
        _cosine(a, a[:-1])
    with pytest.raises(ValueError, match="length mismatch"):
        _cosine([0.0] * 8, a[:-1])  # checked before the zero norm, as before


@pytest.mark.parametrize("config", list(CONFIGS), ids=list(CONFIGS))
def test_per_item_affects_equal_repeated_encode_with_affect(config: str) -> None:
    """``encode_batch(..., affect=[...])`` = one ``encode(t, affect=a)`` per item (None:
    ``encode(t)``), in order, with the same clock: same memories, links and state."""
    batch_texts = texts(40, 9)
    rng = np.random.default_rng(9)
    affects: list[CoreAffect | None] = [
        None if i % 3 == 0 else CoreAffect(valence=float(rng.uniform(-1, 1)),
                                           arousal=float(rng.uniform(0, 1)),
                                           dominance=float(rng.uniform(0, 1)))
        for i in range(len(batch_texts))
    ]
    batched = make(InMemoryStore(), CONFIGS[config])
    got = batched.encode_batch(batch_texts, affect=affects)
    one_by_one = make(InMemoryStore(), CONFIGS[config])
    for text, affect in zip(batch_texts, affects, strict=True):
        if affect is None:
            one_by_one.encode(text)
        else:
            one_by_one.encode(text, affect=affect)
    assert canon(batched) == canon(one_by_one)
    assert [m.tag.core_affect for m in got] == [m.tag.core_affect for m in one_by_one.list_all()]
    # one affect for every item = that affect repeated
    same = make(InMemoryStore(), CONFIGS[config])
    same.encode_batch(batch_texts[:5], affect=affects[1])
    repeated = make(InMemoryStore(), CONFIGS[config])
    repeated.encode_batch(batch_texts[:5], affect=[affects[1]] * 5)
    assert canon(same) == canon(repeated)


@pytest.mark.parametrize(("affect", "error", "message"), [
    ("calm", TypeError, "affect must be a CoreAffect"),
    ({"valence": 0.1}, TypeError, "affect must be a CoreAffect"),
    ([CoreAffect(valence=0.1, arousal=0.2)], ValueError, "one entry per content (2)"),
    ([None, {"valence": 0.1}], TypeError, "affect[1]"),
])
def test_bad_per_item_affects_store_nothing(affect: Any, error: type, message: str) -> None:
    engine = make(InMemoryStore(), CONFIGS["default"])
    state = engine.save_state()
    with pytest.raises(error) as info:
        engine.encode_batch(["a", "b"], affect=affect)
    assert message in str(info.value)
    assert len(engine) == 0 and engine.save_state() == state


def test_async_encode_batch_takes_per_item_affects() -> None:
    batch_texts = texts(6, 10)
    affects = [None, CoreAffect(valence=0.4, arousal=0.3), None,
               CoreAffect(valence=-0.9, arousal=0.8), None, None]
    sync = make(InMemoryStore(), CONFIGS["default"])
    sync.encode_batch(batch_texts, affect=affects)
    engine = make(InMemoryStore(), CONFIGS["default"])
    asyncio.run(AsyncEmotionalMemory.from_engine(engine).encode_batch(batch_texts,
                                                                      affect=affects))
    assert canon(engine) == canon(sync)
