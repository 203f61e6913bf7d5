"""Engine retrieval: candidate prefiltering, two-pass activation and re-ranking, query
affect, and retrieval side effects (reconsolidation, Hebbian links).

Everything runs on a deterministic ``TickClock`` (1 ms per reading unless stated), so
each engine operation's timestamp is known in advance: the engine reads the clock
once per encode / observe / set_affect / retrieve / prune / elaborate.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from emotional_memory import (
    CoreAffect,
    EmotionalMemory,
    ResonanceConfig,
    RetrievalConfig,
    spreading_activation,
)
from emotional_memory.replay import TickClock
from emotional_memory.retrieval import retrieval_breakdown
from support.engine_cases import (
    SQRT6,
    SpyStore,
    TableEmbedder,
    _seeded,
    approx_affect,
    by_content,
    e,
    link,
    make,
    set_links,
    unit,
)

# --------------------------------------------------------------------------- candidates


def test_candidates_all_memories_when_store_small() -> None:
    table = {"m1": e(1), "m2": e(2), "m3": e(3), "q": e(1)}
    store = SpyStore()
    engine, _ = _seeded(TableEmbedder(table), ["m1", "m2", "m3"], store=store)
    store.searches.clear()
    res = engine.retrieve_with_explanations("q", top_k=1)  # limit 3 == len(store)
    assert store.searches == []
    assert res[0].candidate_count == 3
    assert res[0].memory.content == "m1"


def test_candidates_prefiltered_by_embedding_when_store_large() -> None:
    table = {
        "near": unit(0.9, 1),
        "mid": unit(0.5, 2),
        "far": unit(0.0, 3),
        "other": unit(0.7, 4),
        "q": e(0),
    }
    store = SpyStore()
    engine, _ = _seeded(TableEmbedder(table), ["far", "mid", "near", "other"], store=store)
    store.searches.clear()
    res = engine.retrieve_with_explanations("q", top_k=1)  # limit 3 < 4 memories
    assert store.searches == [(e(0), 3)]
    assert res[0].candidate_count == 3
    assert res[0].memory.content == "near"

    # candidate_multiplier=1, top_k=2: only the two cosine-nearest can be returned
    store2 = SpyStore()
    engine2, _ = _seeded(
        TableEmbedder(table), ["far", "mid", "near", "other"], store=store2,
        retrieval=RetrievalConfig(candidate_multiplier=1),
    )
    store2.searches.clear()
    res2 = engine2.retrieve("q", top_k=2)
    assert store2.searches == [(e(0), 2)]
    assert {m.content for m in res2} == {"near", "other"}


# --------------------------------------------------------------------------- two-pass


def _two_pass_engine() -> tuple[EmotionalMemory, TickClock, dict[str, str]]:
    table = {
        "A": e(0),
        "B": unit(0.30, 1),
        "C": unit(0.32, 2),
        "D": unit(0.0, 4),
        "E": unit(0.31, 3),
        "q": e(0),
    }
    # threshold above any possible link score: no automatic links
    engine, clock = make(
        embedder=TableEmbedder(table), resonance=ResonanceConfig(threshold=5.0)
    )
    ids = {t: engine.encode(t).id for t in ["A", "B", "C", "D", "E"]}
    assert all(not m.tag.resonance_links for m in engine.list_all())
    set_links(engine, ids["A"], [link(ids["A"], ids["B"], 1.0)])
    set_links(engine, ids["D"], [link(ids["D"], ids["E"], 1.0)])
    clock.advance(timedelta(seconds=10))
    return engine, clock, ids


def test_two_pass_activation_only_from_seeds_and_rerank() -> None:
    engine, clock, ids = _two_pass_engine()
    before = {m.id: m for m in engine.list_all()}
    now = clock.now
    res = engine.retrieve_with_explanations("q", top_k=2)
    # pass 1: A, C, E, B, D -> seeds A, C. Only A's link spreads (to B); D is no seed,
    # so E gets nothing. Pass 2: B's activation lifts it above C and E.
    assert [r.memory.content for r in res] == ["A", "B"]
    a, b = res
    assert (a.pass1_rank, a.pass2_rank, a.selected_as_seed) == (1, 1, True)
    assert a.activation_level == 0.0
    assert (b.pass1_rank, b.pass2_rank, b.selected_as_seed) == (4, 2, False)
    assert b.activation_level == pytest.approx(1.0)
    assert b.breakdown.raw_signals.resonance == pytest.approx(1.0)
    for r in res:
        assert r.candidate_count == 5
        assert r.score == r.breakdown.total_score
        stored = engine.get(r.memory.id)
        assert r.memory == stored
        assert stored.tag.retrieval_count == 1
        assert stored.tag.last_retrieved == now

    # activation computed from the seeds over the pre-retrieval candidates
    act = spreading_activation([ids["A"], ids["C"]], list(before.values()), hops=2)
    assert act == {ids["B"]: pytest.approx(1.0)}
    assert spreading_activation([ids["D"]], list(before.values()))[ids["E"]] == 1.0

    # scores agree with an independent per-memory breakdown
    state = engine.get_state()
    weights = engine.current_weights("q", now)
    for r, amap in ((a, {}), (b, {ids["B"]: 1.0})):
        bd = retrieval_breakdown(
            e(0), state.core_affect, engine.get_current_mood(now), state.momentum,
            before[r.memory.id], amap, now, engine.config.decay, engine.config.retrieval,
            precomputed_weights=weights,
        )
        assert r.score == pytest.approx(bd.total_score, abs=1e-12)
        assert r.breakdown.raw_signals.as_tuple() == pytest.approx(
            bd.raw_signals.as_tuple(), abs=1e-12
        )
        assert r.breakdown.weights.as_tuple() == pytest.approx(weights.tolist(), abs=1e-15)

    # untouched memories keep their bookkeeping
    for name in ("C", "D", "E"):
        tag = engine.get(ids[name]).tag
        assert tag.retrieval_count == 0
        assert tag.last_retrieved is None


def test_two_pass_without_links_pass2_equals_pass1() -> None:
    table = {"x": unit(0.9, 1), "y": unit(0.5, 2), "z": unit(0.1, 3), "q": e(0)}
    engine, _ = _seeded(
        TableEmbedder(table), ["z", "y", "x"], resonance=ResonanceConfig(threshold=5.0)
    )
    res = engine.retrieve_with_explanations("q", top_k=3)
    assert [r.memory.content for r in res] == ["x", "y", "z"]
    for i, r in enumerate(res, start=1):
        assert r.pass1_rank == r.pass2_rank == i
        assert r.selected_as_seed
        assert r.activation_level == 0.0
        assert r.breakdown.raw_signals.resonance == 0.0
    assert [m.content for m in engine.retrieve("q", top_k=2)] == ["x", "y"]


def test_retrieve_bad_top_k_and_empty_store() -> None:
    engine, _ = make()
    assert engine.retrieve("anything") == []
    assert engine.retrieve_with_explanations("anything", top_k=3) == []
    with pytest.raises(ValueError):
        engine.retrieve("anything", top_k=0)
    engine.encode("something")
    with pytest.raises(ValueError):
        engine.retrieve("anything", top_k=0)
    with pytest.raises(ValueError):
        engine.retrieve_with_explanations("anything", top_k=-1)


# --------------------------------------------------------------------------- query_affect


def test_query_affect_overrides_s3_only() -> None:
    a0 = CoreAffect(valence=-0.7, arousal=0.3, dominance=0.4)
    a1 = CoreAffect(valence=0.8, arousal=0.9, dominance=0.6)
    override = CoreAffect(valence=-0.7, arousal=0.3, dominance=0.4)

    def build() -> EmotionalMemory:
        eng, _ = make(resonance=ResonanceConfig(threshold=5.0))
        eng.encode("rainy commute to work", affect=a0)
        eng.encode("sunny picnic in the park", affect=CoreAffect(valence=0.5, arousal=0.5))
        eng.set_affect(a1)
        return eng

    e1, e2 = build(), build()
    before = by_content(e1)
    r1 = e1.retrieve_with_explanations("commute", top_k=2, query_affect=override)
    r2 = e2.retrieve_with_explanations("commute", top_k=2)
    s1 = {r.memory.content: r for r in r1}
    s2 = {r.memory.content: r for r in r2}
    assert set(s1) == set(s2) == {"rainy commute to work", "sunny picnic in the park"}
    for content, x in s1.items():
        y = s2[content]
        rx, ry = x.breakdown.raw_signals, y.breakdown.raw_signals
        assert x.breakdown.weights == y.breakdown.weights
        for name in ("semantic_similarity", "mood_congruence", "momentum_alignment",
                     "recency", "resonance"):
            assert getattr(rx, name) == pytest.approx(getattr(ry, name), abs=1e-12)
        tag = before[content].tag
        assert rx.affect_proximity == pytest.approx(
            max(0.0, 1 - override.distance(tag.core_affect) / SQRT6), abs=1e-12
        )
        assert ry.affect_proximity == pytest.approx(
            max(0.0, 1 - a1.distance(tag.core_affect) / SQRT6), abs=1e-12
        )
        # side effects use the engine's current affect, not the override
        tx = x.memory.tag.model_copy(update={"resonance_links": []})
        ty = y.memory.tag.model_copy(update={"resonance_links": []})
        assert tx == ty
    rainy = s1["rainy commute to work"].memory.tag
    assert rainy.reconsolidation_count == 1  # ape vs a1 is large; vs override it is 0


# --------------------------------------------------------------------------- reconsolidation


A0 = CoreAffect(valence=-0.8, arousal=0.2, dominance=0.5)

A1 = CoreAffect(valence=0.8, arousal=0.9, dominance=0.5)


def _one_memory(**cfg: Any) -> tuple[EmotionalMemory, TickClock, str]:
    engine, clock = make(**cfg)
    mid = engine.encode("the old argument", affect=A0).id
    engine.set_affect(A1)
    return engine, clock, mid


def _pred(tag_core: CoreAffect, expected: CoreAffect | None, lr: float, affect: CoreAffect,
          ape: float) -> tuple[CoreAffect, float]:
    target = min(0.8, max(0.05, ape))
    new_lr = min(0.8, max(0.05, lr + 0.2 * (target - lr)))
    base = expected if expected is not None else tag_core
    return base.lerp(affect, new_lr), new_lr


def test_reconsolidation_window_lifecycle() -> None:
    engine, clock, mid = _one_memory()
    # first retrieval: ape > 0.3 opens the window and reconsolidates
    t1 = clock.now
    m1 = engine.retrieve("argument", top_k=1)[0]
    ape1 = A0.distance(A1)
    assert ape1 > 0.3
    alpha1 = min(ape1 * 0.2, 0.5)
    core1 = A0.lerp(A1, alpha1)
    assert m1.tag.window_opened_at == t1
    assert m1.tag.reconsolidation_count == 1
    assert approx_affect(m1.tag.core_affect, core1)
    exp1, lr1 = _pred(core1, None, 0.2, A1, ape1)
    assert approx_affect(m1.tag.expected_affect, exp1)
    assert m1.tag.prediction_learning_rate == pytest.approx(lr1, abs=1e-15)
    assert engine.get(mid) == m1

    # within the window (exactly 300 s later): reconsolidates again, window stays
    clock.now = t1 + timedelta(seconds=300)
    m2 = engine.retrieve("argument", top_k=1)[0]
    ape2 = exp1.distance(A1)
    core2 = core1.lerp(A1, min(ape2 * 0.2, 0.5))
    assert m2.tag.reconsolidation_count == 2
    assert m2.tag.window_opened_at == t1
    assert approx_affect(m2.tag.core_affect, core2)
    exp2, lr2 = _pred(core2, exp1, lr1, A1, ape2)
    assert approx_affect(m2.tag.expected_affect, exp2)
    assert m2.tag.prediction_learning_rate == pytest.approx(lr2, abs=1e-15)

    # past the window: it closes, no reconsolidation
    clock.now = t1 + timedelta(seconds=301)
    m3 = engine.retrieve("argument", top_k=1)[0]
    assert m3.tag.window_opened_at is None
    assert m3.tag.reconsolidation_count == 2
    assert m3.tag.core_affect == m2.tag.core_affect
    assert m3.tag.retrieval_count == 3


def test_no_reconsolidation_below_threshold() -> None:
    engine, _ = make()
    a = CoreAffect(valence=0.1, arousal=0.4)
    engine.encode("calm", affect=a)
    engine.set_affect(CoreAffect(valence=0.2, arousal=0.4))  # ape 0.1 < 0.3
    m = engine.retrieve("calm", top_k=1)[0]
    assert m.tag.window_opened_at is None
    assert m.tag.reconsolidation_count == 0
    assert m.tag.core_affect == a
    assert m.tag.expected_affect is not None


def test_reconsolidation_disabled_never_changes_core_affect() -> None:
    engine, clock, _ = _one_memory(enable_reconsolidation=False)
    core, lr, expected = A0, 0.2, None
    for _ in range(3):
        m = engine.retrieve("argument", top_k=1)[0]
        clock.advance(timedelta(seconds=60))
        assert m.tag.core_affect == A0
        assert m.tag.reconsolidation_count == 0
        assert m.tag.window_opened_at is None
        ape = (expected if expected is not None else core).distance(A1)
        expected, lr = _pred(core, expected, lr, A1, ape)
        assert approx_affect(m.tag.expected_affect, expected)
        assert m.tag.prediction_learning_rate == pytest.approx(lr, abs=1e-15)


def test_prediction_lr_clamped_low_when_ape_tiny() -> None:
    engine, _ = make()
    a = CoreAffect(valence=0.3, arousal=0.3)
    engine.encode("steady", affect=a)  # current affect == a -> ape 0
    m = engine.retrieve("steady", top_k=1)[0]
    # target = 0.05; lr = 0.2 + 0.2 * (0.05 - 0.2) = 0.17
    assert m.tag.prediction_learning_rate == pytest.approx(0.17, abs=1e-15)
    assert m.tag.expected_affect == a


def test_retrieval_count_and_last_retrieved() -> None:
    table = {"hit": e(0), "miss": e(1), "q": e(0)}
    engine, clock = _seeded(TableEmbedder(table), ["hit", "miss"])
    engine.retrieve("q", top_k=1)
    clock.advance(timedelta(seconds=5))
    t2 = clock.now
    engine.retrieve("q", top_k=1)
    mems = by_content(engine)
    assert mems["hit"].tag.retrieval_count == 2
    assert mems["hit"].tag.last_retrieved == t2
    assert mems["miss"].tag.retrieval_count == 0
    assert mems["miss"].tag.last_retrieved is None


# --------------------------------------------------------------------------- Hebbian


def _hebbian_engine(**cfg: Any) -> tuple[EmotionalMemory, dict[str, str]]:
    table = {"A": e(0), "B": unit(0.6, 1), "C": e(2), "q": e(0)}
    engine, _ = _seeded(TableEmbedder(table), ["A", "B", "C"], **cfg)
    ids = {m.content: m.id for m in engine.list_all()}
    return engine, ids


def _links(engine: EmotionalMemory) -> dict[str, dict[str, float]]:
    return {
        m.content: {
            engine.get(lk.target_id).content: lk.strength for lk in m.tag.resonance_links
        }
        for m in engine.list_all()
    }


def test_hebbian_strengthens_links_between_co_retrieved() -> None:
    engine, _ = _hebbian_engine()
    before = _links(engine)
    assert set(before["A"]) == {"B", "C"} and set(before["B"]) == {"A", "C"}
    res = engine.retrieve("q", top_k=2)
    assert [m.content for m in res] == ["A", "B"]
    after = _links(engine)
    assert after["A"]["B"] == pytest.approx(before["A"]["B"] + 0.05, abs=1e-15)
    assert after["B"]["A"] == pytest.approx(before["B"]["A"] + 0.05, abs=1e-15)
    assert after["A"]["C"] == before["A"]["C"]
    assert after["B"]["C"] == before["B"]["C"]
    assert after["C"] == before["C"]


def test_hebbian_caps_at_one() -> None:
    engine, ids = _hebbian_engine()
    a, b, c = ids["A"], ids["B"], ids["C"]
    set_links(engine, a, [link(a, b, 0.98), link(a, c, 0.5)])
    set_links(engine, b, [link(b, a, 0.99)])
    engine.retrieve("q", top_k=2)
    after = _links(engine)
    assert after["A"]["B"] == 1.0
    assert after["B"]["A"] == 1.0
    assert after["A"]["C"] == 0.5


@pytest.mark.parametrize("variant", ["single", "zero_increment"])
def test_hebbian_no_change(variant: str) -> None:
    if variant == "single":
        engine, _ = _hebbian_engine()
        top_k = 1
    else:
        engine, _ = _hebbian_engine(resonance=ResonanceConfig(hebbian_increment=0.0))
        top_k = 2
    before = _links(engine)
    res = engine.retrieve("q", top_k=top_k)
    assert len(res) == top_k
    assert _links(engine) == before
