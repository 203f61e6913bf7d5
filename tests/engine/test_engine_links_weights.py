"""Engine resonance links at encode, ablation weights and query routing.

Everything runs on a deterministic ``TickClock`` (1 ms per reading unless stated), so
each engine operation's timestamp is known in advance: the engine reads the clock
once per encode / observe / set_affect / retrieve / prune / elaborate.
"""

from __future__ import annotations

import math
from datetime import timedelta
from typing import Any

import numpy as np
import pytest

from emotional_memory import (
    AdaptiveWeightsConfig,
    CoreAffect,
    EmotionalMemory,
    Memory,
    QueryClassifierConfig,
    ResonanceConfig,
    ResonanceLink,
    RetrievalConfig,
)
from emotional_memory.replay import TickClock
from support.engine_cases import (
    SQRT6,
    START,
    FakeClassifier,
    SpyStore,
    TableEmbedder,
    _seeded,
    cosine,
    e,
    hand_adaptive,
    hand_mask,
    link,
    make,
    set_links,
    unit,
)

# --------------------------------------------------------------------------- resonance


def _hand_link_score(new: Memory, cand: Memory) -> tuple[float, str]:
    sem = cosine(new.embedding, cand.embedding)
    emo = max(0.0, 1 - new.tag.core_affect.distance(cand.tag.core_affect) / SQRT6)
    dt = abs((new.tag.timestamp - cand.tag.timestamp).total_seconds())
    temp = math.exp(-dt * math.log(2) / 3600.0)
    score = 0.5 * sem + 0.3 * emo + 0.2 * temp
    dv = abs(new.tag.core_affect.valence - cand.tag.core_affect.valence)
    if temp > 0.5 and dv > 1.0:
        kind = "contrastive"
    elif cand.tag.timestamp < new.tag.timestamp and temp > 0.7 and sem > 0.6:
        kind = "causal"
    elif sem >= emo and sem >= temp:
        kind = "semantic"
    elif emo >= temp:
        kind = "emotional"
    else:
        kind = "temporal"
    return score, kind


def test_forward_and_backward_links_at_encode() -> None:
    engine, clock = make()
    texts = [
        ("the server crashed during the demo", CoreAffect(valence=-0.8, arousal=0.9)),
        ("coffee with an old friend", CoreAffect(valence=0.7, arousal=0.3)),
        ("the demo server is down again", CoreAffect(valence=-0.6, arousal=0.8)),
        ("quiet evening reading a book", CoreAffect(valence=0.4, arousal=0.1)),
        ("deadline stress before the release", CoreAffect(valence=-0.5, arousal=0.85)),
        ("celebrated the release with the team", CoreAffect(valence=0.9, arousal=0.8)),
        ("rainy day, nothing happened", CoreAffect(valence=0.0, arousal=0.1)),
        ("server logs show a crash loop", CoreAffect(valence=-0.4, arousal=0.6)),
    ]
    for i, (t, a) in enumerate(texts):
        engine.encode(t, affect=a)
        clock.advance(timedelta(minutes=7 * (i + 1)))
    before = {m.id: list(m.tag.resonance_links) for m in engine.list_all()}
    new = engine.encode("the server crashed again", affect=CoreAffect(valence=-0.7, arousal=0.8))
    others = [m for m in engine.list_all() if m.id != new.id]

    scored = []
    for cand in others:
        score, kind = _hand_link_score(new, cand)
        if score >= 0.3:
            scored.append((score, cand.id, kind))
    scored.sort(key=lambda x: -x[0])
    expected = scored[:5]
    links = new.tag.resonance_links
    assert len(links) == min(5, len(scored)) >= 3
    assert [lk.target_id for lk in links] == [t for _, t, _ in expected]
    assert [lk.strength for lk in links] == pytest.approx([s for s, _, _ in expected], abs=1e-12)
    assert [lk.link_type for lk in links] == [k for _, _, k in expected]
    assert all(lk.source_id == new.id for lk in links)
    strengths = [lk.strength for lk in links]
    assert strengths == sorted(strengths, reverse=True)
    assert engine.get(new.id).tag.resonance_links == links

    # backward twins on targets; a full target replaces its weakest only if stronger
    for lk in links:
        back = ResonanceLink(
            source_id=lk.target_id, target_id=new.id, strength=lk.strength,
            link_type=lk.link_type,
        )
        exp = list(before[lk.target_id])
        if len(exp) < 5:
            exp.append(back)
        else:
            weakest = min(range(len(exp)), key=lambda i: exp[i].strength)
            if back.strength > exp[weakest].strength:
                exp[weakest] = back
        assert engine.get(lk.target_id).tag.resonance_links == exp
    # non-targets unchanged
    targets = {lk.target_id for lk in links}
    for m in others:
        if m.id not in targets:
            assert m.tag.resonance_links == before[m.id]
    assert all(len(m.tag.resonance_links) <= 5 for m in engine.list_all())


def test_target_at_max_links_replaces_weakest_only_if_strictly_stronger() -> None:
    table = {
        "A": e(0),
        "B": unit(0.2, 1),
        "C": [0.8, 0.0, 0.6, 0.0, 0.0, 0.0, 0.0, 0.0],
        "D": [0.5, 0.0, 0.0, math.sqrt(0.75), 0.0, 0.0, 0.0, 0.0],
        "E": [0.8, 0.0, 0.0, 0.0, 0.6, 0.0, 0.0, 0.0],
    }
    # zero-step clock: all timestamps equal (temporal proximity 1), neutral affect
    # (emotional 1): link score = 0.5 * cos + 0.5
    engine, _ = make(
        embedder=TableEmbedder(table),
        clock=TickClock(START, step=timedelta(0)),
        resonance=ResonanceConfig(max_links=1),
    )
    ids: dict[str, str] = {}

    def links_of(name: str) -> list[tuple[str, str, float]]:
        names = {v: k for k, v in ids.items()}
        return [
            (names[lk.source_id], names[lk.target_id], lk.strength)
            for lk in engine.get(ids[name]).tag.resonance_links
        ]

    for name in "AB":
        ids[name] = engine.encode(name).id
    assert links_of("B") == [("B", "A", pytest.approx(0.6))]
    assert links_of("A") == [("A", "B", pytest.approx(0.6))]

    ids["C"] = engine.encode("C").id  # C->A 0.9 beats A's 0.6 link: replaced
    assert links_of("C") == [("C", "A", pytest.approx(0.9))]
    assert links_of("A") == [("A", "C", pytest.approx(0.9))]
    assert links_of("B") == [("B", "A", pytest.approx(0.6))]

    ids["D"] = engine.encode("D").id  # D->A 0.75 weaker than A->C 0.9: A unchanged
    assert links_of("D") == [("D", "A", pytest.approx(0.75))]
    assert links_of("A") == [("A", "C", pytest.approx(0.9))]

    ids["E"] = engine.encode("E").id  # E->A 0.9 ties A->C exactly: not strictly stronger
    e_link = engine.get(ids["E"]).tag.resonance_links[0]
    a_link = engine.get(ids["A"]).tag.resonance_links[0]
    assert e_link.target_id == ids["A"]
    assert e_link.strength == a_link.strength
    assert links_of("A") == [("A", "C", pytest.approx(0.9))]


def test_link_candidates_prefiltered_when_store_large() -> None:
    table = {"m1": e(1), "m2": unit(0.3, 2), "m3": unit(0.9, 3), "new": e(0)}
    store = SpyStore()
    engine, _ = make(
        embedder=TableEmbedder(table), store=store,
        resonance=ResonanceConfig(max_links=1, candidate_multiplier=2),
    )
    engine.encode("m1")
    engine.encode("m2")  # store holds 2 <= 2: all candidates
    assert store.searches == []
    engine.encode("m3")  # 3 > 2: search_by_embedding(new embedding, 2)
    assert store.searches == [(unit(0.9, 3), 2)]
    new = engine.encode("new")
    assert store.searches[-1] == (e(0), 2)
    assert [engine.get(lk.target_id).content for lk in new.tag.resonance_links] == ["m3"]


def test_resonance_disabled() -> None:
    table = {"A": e(0), "B": unit(0.9, 1), "C": unit(0.8, 2), "q": e(0)}
    engine, _ = _seeded(TableEmbedder(table), ["A", "B", "C"], enable_resonance=False)
    assert all(not m.tag.resonance_links for m in engine.list_all())
    w = engine.current_weights("q")
    assert w[5] == 0.0
    assert float(np.sum(w)) == pytest.approx(1.0, abs=1e-12)
    # even with links present (e.g. imported), nothing spreads
    ids = {m.content: m.id for m in engine.list_all()}
    set_links(engine, ids["A"], [link(ids["A"], ids["C"], 1.0)])
    res = engine.retrieve_with_explanations("q", top_k=2)
    assert [r.memory.content for r in res] == ["A", "B"]
    for r in res:
        assert r.activation_level == 0.0
        assert r.breakdown.weights.resonance == 0.0
        assert r.breakdown.raw_signals.resonance == 0.0
        assert r.pass1_rank == r.pass2_rank


# --------------------------------------------------------------------------- ablation


@pytest.mark.parametrize(
    ("flags", "mask"),
    [
        ({}, [1, 1, 1, 1, 1, 1]),
        ({"enable_mood_signal": False}, [1, 0, 1, 1, 1, 1]),
        ({"enable_momentum": False}, [1, 1, 1, 0, 1, 1]),
        ({"enable_mood_signal": False, "enable_momentum": False, "enable_resonance": False},
         [1, 0, 1, 0, 1, 0]),
    ],
)
def test_ablation_weights_hand_computed(flags: dict[str, bool], mask: list[int]) -> None:
    engine, _ = make(**flags)
    for _ in range(5):
        engine.set_affect(CoreAffect(valence=-0.9, arousal=0.95))
    mood = engine.get_state().mood
    base = [0.35, 0.25, 0.15, 0.10, 0.10, 0.05]
    expected = hand_mask(hand_adaptive(mood.valence, mood.arousal, base), mask)
    got = engine.current_weights("anything")
    assert got.tolist() == pytest.approx(expected, abs=1e-12)
    for i, m in enumerate(mask):
        if not m:
            assert got[i] == 0.0


def test_ablation_all_enabled_weights_zero_gives_uniform_over_enabled() -> None:
    engine, _ = make(
        enable_mood_signal=False,
        retrieval=RetrievalConfig(
            base_weights=[0.0, 1.0, 0.0, 0.0, 0.0, 0.0],
            adaptive_weights_config=AdaptiveWeightsConfig(
                negative_mood_strength=0.0, high_arousal_strength=0.0, calm_strength=0.0
            ),
        ),
    )
    assert engine.current_weights().tolist() == pytest.approx([0.2, 0, 0.2, 0.2, 0.2, 0.2])


def test_ablation_used_by_retrieval() -> None:
    engine, clock = make(enable_mood_signal=False, enable_momentum=False)
    engine.encode("a memory about cats", affect=CoreAffect(valence=0.3, arousal=0.5))
    expected = engine.current_weights("cats", clock.now)
    r = engine.retrieve_with_explanations("cats", top_k=1)[0]
    assert r.breakdown.weights.as_tuple() == pytest.approx(expected.tolist(), abs=1e-15)
    assert r.breakdown.weights.mood_congruence == 0.0
    assert r.breakdown.weights.momentum_alignment == 0.0
    assert r.breakdown.weighted_signals.mood_congruence == 0.0


# --------------------------------------------------------------------------- routing


W_T = [0.5, 0.3, 0.1, 0.05, 0.05, 0.0]

W_D = [0.2, 0.2, 0.2, 0.2, 0.1, 0.1]

W_S = [0.7, 0.1, 0.05, 0.05, 0.05, 0.05]

BASE = [0.35, 0.25, 0.15, 0.10, 0.10, 0.05]


def _routed(mode: str, routes: dict[str, list[float]], **kw: Any) -> RetrievalConfig:
    return RetrievalConfig(
        query_classifier=QueryClassifierConfig(mode=mode, routed_weights=routes, **kw)
    )


def _expect(engine: EmotionalMemory, base: list[float]) -> list[float]:
    mood = engine.get_state().mood
    return pytest.approx(hand_adaptive(mood.valence, mood.arousal, base), abs=1e-12)


def test_heuristic_routing() -> None:
    engine, _ = make(retrieval=_routed("heuristic", {"temporal": W_T, "default": W_D}))
    engine.set_affect(CoreAffect(valence=-0.6, arousal=0.8))
    assert engine.current_weights("When did we meet?").tolist() == _expect(engine, W_T)
    # single_hop is not routed -> routed_weights[default_type]
    assert engine.current_weights("Who is Bob?").tolist() == _expect(engine, W_D)

    no_default, _ = make(retrieval=_routed("heuristic", {"single_hop": W_S}))
    assert no_default.current_weights("Who is Bob?").tolist() == _expect(no_default, W_S)
    # neither the type nor default_type routed -> base weights
    assert no_default.current_weights("tell me a story").tolist() == _expect(no_default, BASE)

    custom, _ = make(
        retrieval=_routed("heuristic", {"single_hop": W_S}, default_type="single_hop")
    )
    assert custom.current_weights("since when?").tolist() == _expect(custom, W_S)

    disabled, _ = make(retrieval=_routed("disabled", {"temporal": W_T}))
    assert disabled.current_weights("When did we meet?").tolist() == _expect(disabled, BASE)


def test_heuristic_routing_reaches_retrieval() -> None:
    engine, _ = make(retrieval=_routed("heuristic", {"temporal": W_T}))
    engine.encode("we met in spring")
    r = engine.retrieve_with_explanations("when did we meet", top_k=1)[0]
    assert r.breakdown.weights.as_tuple() == _expect(engine, W_T)


def test_llm_routing_uses_engine_classifier() -> None:
    fake = FakeClassifier("multi_hop")
    engine, _ = make(
        retrieval=_routed("llm", {"multi_hop": W_T, "default": W_D}), query_classifier=fake
    )
    assert engine.current_weights("When did we meet?").tolist() == _expect(engine, W_T)
    assert fake.queries == ["When did we meet?"]
    engine.encode("we met in spring")
    r = engine.retrieve_with_explanations("anything at all", top_k=1)[0]
    assert "anything at all" in fake.queries
    assert r.breakdown.weights.as_tuple() == _expect(engine, W_T)

    fallback = FakeClassifier("open_domain")
    eng2, _ = make(
        retrieval=_routed("llm", {"multi_hop": W_T, "default": W_D}), query_classifier=fallback
    )
    assert eng2.current_weights("x").tolist() == _expect(eng2, W_D)

    # llm mode without a classifier -> base weights
    eng3, _ = make(retrieval=_routed("llm", {"multi_hop": W_T, "default": W_D}))
    assert eng3.current_weights("x").tolist() == _expect(eng3, BASE)
