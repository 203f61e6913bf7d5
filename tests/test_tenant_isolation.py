"""What one tenant's worst input can do to the engine, tested against oracles.

* An already-expired memory stored into a scope holding other memories is stored,
  invisible and linked exactly as a separate engine of that scope stores it.
* A filter integer beyond a float's range is refused, naming the field, before
  anything runs (it used to overflow in the stores).
"""

from __future__ import annotations

import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from tests.plain_store import PerMemoryStore

from emotional_memory import EmotionalMemory, InMemoryStore, SQLiteStore
from emotional_memory.embedders import HashingEmbedder
from emotional_memory.filters import parse_where
from emotional_memory.models import Memory

T0 = datetime(2025, 3, 1, 9, 0, tzinfo=UTC)


class Clock:
    """A clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> datetime:
        return self.now


def _store(kind: str, tmp: Path, name: str) -> Any:
    if kind == "memory":
        return InMemoryStore()
    if kind == "sqlite":
        return SQLiteStore(tmp / f"{name}.db")
    return PerMemoryStore()


def _held(memories: list[Memory]) -> list[tuple[Any, ...]]:
    """Content, expiry and links (ids mapped to contents) of each memory."""
    content_of = {m.id: m.content for m in memories}
    return [
        (m.content, m.expires_at,
         sorted((content_of[lk.target_id], lk.strength) for lk in m.tag.resonance_links))
        for m in memories
    ]


@pytest.mark.parametrize("kind", ["memory", "sqlite", "plain"])
def test_an_expired_memory_stored_in_a_scope_is_kept_invisible_as_alone(
    kind: str, tmp_path: Path
) -> None:
    clock = Clock()
    embedder = HashingEmbedder(dim=16)
    shared = EmotionalMemory(_store(kind, tmp_path, "shared"), embedder, clock=clock)
    alone = EmotionalMemory(_store(kind, tmp_path, "alone"), embedder, clock=clock)
    view = shared.scoped("a")
    past = T0 - timedelta(seconds=5)
    for engine in (view, alone):
        engine.encode("rain on the harbour bridge")
        gone = engine.encode("rain on the harbour bridge again", expires_at=past)
        assert gone.expires_at == past
        assert engine.get(gone.id) is None
        [kept] = engine.list_all()
        assert kept.content == "rain on the harbour bridge"
        batch = engine.encode_batch(["rain at the harbour", "more rain"],
                                    expires_at=[past, None])
        assert [engine.get(m.id) is None for m in batch] == [True, False]
    assert view.scope == ("a",)
    everything = shared.store.list_all()
    assert all(m.scope == ("a",) for m in everything)
    if kind != "plain":  # a plain store's root links to expired memories (documented)
        assert _held(everything) == _held(alone.store.list_all())
    else:
        assert [m.content for m in everything] == [m.content for m in alone.store.list_all()]
    assert [m.content for m in view.retrieve("rain harbour", 5)] == \
        [m.content for m in alone.retrieve("rain harbour", 5)]
    shared.close()
    alone.close()


@pytest.mark.parametrize("kind", ["memory", "sqlite", "plain"])
@pytest.mark.parametrize(
    "where",
    [
        {"valence": {"$gt": 10**400}},
        {"retrieval_count": -(10**309)},
        {"n": {"$in": [1, 2**1100]}},
        {"$or": [{"arousal": {"$lte": 0.5}}, {"dominance": {"$lt": -(2**1024)}}]},
    ],
)
def test_an_integer_beyond_a_floats_range_is_refused_naming_the_field(
    kind: str, where: dict[str, Any], tmp_path: Path
) -> None:
    engine = EmotionalMemory(_store(kind, tmp_path, "e"), HashingEmbedder(dim=16))
    engine.encode("hello there", metadata={"n": 1})
    field = next(iter(where)) if "$or" not in where else "dominance"
    with pytest.raises(ValueError, match=f"'{field}'.*range of a float"):
        parse_where(where)
    for call in (lambda: engine.retrieve("hello", 3, where=where),
                 lambda: engine.list_all(where=where)):
        with pytest.raises(ValueError, match=f"'{field}'.*range of a float"):
            call()
    assert len(engine) == 1 and engine.list_all()[0].tag.retrieval_count == 0
    # integers a float holds are accepted and compare exactly
    big = int(sys.float_info.max)
    assert len(engine.list_all(where={"n": {"$lt": big}})) == 1
    assert len(engine.list_all(where={"valence": {"$gt": -big}})) == 1
    assert len(engine.list_all(where={"retrieval_count": {"$lt": 2**70}})) == 1
    engine.close()


def test_every_top_k_is_served_by_a_few_programs_with_the_exact_seeds() -> None:
    import numpy as np

    from emotional_memory.decay import DecayConfig
    from emotional_memory.kernel.params import pack_params
    from emotional_memory.kernel.plan import retrieval_plan_packed, top_k_bucket
    from emotional_memory.retrieval import RetrievalConfig, scoring_params

    rng = np.random.default_rng(7)
    n, d = 64, 8
    embedding = rng.normal(size=(n, d))
    features = rng.uniform(0, 1, size=(n, 13))
    valid = np.arange(n) < 50  # padding rows at the end
    targets = rng.integers(-1, n, size=(n, 3)).astype(np.int32)
    strengths = rng.uniform(0, 1, size=(n, 3))
    params = pack_params(scoring_params(RetrievalConfig(), DecayConfig()))
    query = rng.normal(size=d)
    state = rng.uniform(0, 1, size=9)
    for k in (1, 2, 5, 7, 8, 9, 23, 49, 50, 64):
        exact = retrieval_plan_packed(params, query, state, embedding, features, valid,
                                      targets, strengths, top_k=k, hops=2, spread=True)
        bucketed = retrieval_plan_packed(params, query, state, embedding, features, valid,
                                         targets, strengths, top_k=top_k_bucket(k), hops=2,
                                         spread=True, seed_count=np.int32(k))
        assert top_k_bucket(k) >= k
        np.testing.assert_array_equal(np.asarray(exact[0]), np.asarray(bucketed[0]))
        np.testing.assert_array_equal(np.asarray(exact[1]), np.asarray(bucketed[1]))


def test_a_new_top_k_compiles_no_new_program_once_its_bucket_is_warm() -> None:
    from emotional_memory.kernel.plan import retrieval_plan_packed

    engine = EmotionalMemory(InMemoryStore(), HashingEmbedder(dim=16))
    engine.encode_batch([f"note {i} about rain and the harbour" for i in range(300)])
    before = retrieval_plan_packed._cache_size()
    sizes = [len(engine.retrieve("rain harbour", k)) for k in range(1, 41)]
    grown = retrieval_plan_packed._cache_size() - before
    assert sizes == list(range(1, 41))
    assert grown <= 8, f"{grown} programs compiled for 40 values of top_k"
    engine.close()
