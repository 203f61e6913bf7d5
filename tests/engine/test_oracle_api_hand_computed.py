"""Hand-computed examples of SPEC 1-8 that pin the oracle itself, checked against both
the public API and the plain-Python oracle (``tests/support/oracle.py``).
"""

from __future__ import annotations

import math
from datetime import datetime, timedelta
from typing import Any

import numpy as np
import pytest

import emotional_memory as em
from emotional_memory import (
    AdaptiveWeightsConfig,
    AffectiveMomentum,
    AffectiveState,
    AppraisalVector,
    CoreAffect,
    DecayConfig,
    EmotionalTag,
    Memory,
    MoodDecayConfig,
    MoodField,
    ResonanceConfig,
    ResonanceLink,
    RetrievalConfig,
)
from emotional_memory.decay import compute_effective_strength
from emotional_memory.resonance import (
    build_resonance_links,
    hebbian_strengthen,
    spreading_activation,
    temporal_proximity,
)
from emotional_memory.retrieval import (
    adaptive_weights,
    build_retrieval_plan,
    compute_ape,
    reconsolidate,
    retrieval_breakdown,
    retrieval_score,
    update_prediction,
)
from support import oracle as O
from support.oracle_cases import (
    BASE,
    assert_close,
    assert_seq_close,
    mom6,
    neutral_tag,
    oadaptive,
    omem,
    vad,
)

# --------------------------------------------------------------------------- hand-computed


def test_hand_affect_mood_state() -> None:
    p, q = (
        CoreAffect(valence=0.2, arousal=0.4),
        CoreAffect(valence=-0.4, arousal=1.0, dominance=0.5),
    )
    assert_close(p.distance(q), math.sqrt(0.72))  # 0.36 + 0.36
    assert vad(p.lerp(q, 0.5)) == pytest.approx((-0.1, 0.7, 0.5), abs=1e-15)
    assert_seq_close(vad(p.lerp(q, 7.0)), vad(q))  # alpha clamped to 1

    m = MoodField(valence=1.0, arousal=0.9, dominance=0.5, inertia=0.5, timestamp=BASE)
    r = m.regress(BASE + timedelta(hours=2), MoodDecayConfig())  # hl = 3600 * 2 -> f = 1/2
    assert_seq_close(vad(r), (0.5, 0.6, 0.5))
    assert r.inertia == 0.5 and r.timestamp == BASE + timedelta(hours=2)
    assert_seq_close(vad(m.regress(BASE - timedelta(hours=1), MoodDecayConfig())), vad(m))
    u = MoodField.neutral(BASE).update(
        CoreAffect(valence=1.0, arousal=1.0, dominance=1.0), alpha=0.1, now=BASE
    )
    assert_seq_close(vad(u), (0.05, 0.05, 0.525))  # e = 0.1 * (1 - 0.5)

    s = AffectiveState.initial(BASE)
    s = s.update(CoreAffect(valence=0.0, arousal=0.0), now=BASE)
    assert mom6(s.momentum) == [0.0] * 6
    s = s.update(CoreAffect(valence=0.4, arousal=0.2), now=BASE + timedelta(seconds=2))
    assert_seq_close(mom6(s.momentum), [0.2, 0.1, 0.0, 0.0, 0.0, 0.0])
    s = s.update(
        CoreAffect(valence=0.5, arousal=0.2), now=BASE + timedelta(seconds=2, microseconds=500)
    )  # dt floored to 1 ms
    assert_seq_close(mom6(s.momentum), [100.0, 0.0, 0.0, 99.8, -0.1, 0.0])
    s = s.update(
        CoreAffect(valence=0.5, arousal=0.2), now=BASE + timedelta(seconds=2, microseconds=500)
    )  # equal timestamp
    assert_seq_close(mom6(s.momentum), [0.0, 0.0, 0.0, -100.0, 0.0, 0.0])


def test_hand_consolidation_and_decay() -> None:
    assert_close(em.consolidation_strength(0.7, 0.7), 1.0)
    assert_close(em.consolidation_strength(0.0, 0.0), 0.1)  # 1 - 4 * 0.49 < 0.1
    assert_close(em.consolidation_strength(1.0, 1.0), 0.64)
    assert_close(em.consolidation_strength(5.0, -3.0), 1.0 - 4.0 * 0.0)  # (0.7*1 + 0) -> 1

    def tag(arousal: float, c: float, count: int = 0) -> EmotionalTag:
        return EmotionalTag(
            core_affect=CoreAffect(valence=0.0, arousal=arousal),
            momentum=AffectiveMomentum.zero(),
            mood_snapshot=MoodField.neutral(BASE),
            timestamp=BASE,
            consolidation_strength=c,
            retrieval_count=count,
        )

    cfg = DecayConfig()
    # d = 0.5 * (1 - 0.5*0.2) = 0.45; 0.8 * 100^-0.45 = 0.8 * 10^-0.9
    assert_close(
        compute_effective_strength(tag(0.2, 0.8), BASE + timedelta(seconds=100), cfg),
        0.10071403294353338,
    )
    # retrieval_count 10 halves d: 0.225 -> 0.8 * 10^-0.45
    assert_close(
        compute_effective_strength(tag(0.2, 0.8, 10), BASE + timedelta(seconds=100), cfg),
        0.8 * 0.35481338923357547,
    )
    # high arousal floor: 0.5 * 1e6^-0.3 = 0.0079 -> floor 0.1
    assert_close(
        compute_effective_strength(tag(0.8, 0.5), BASE + timedelta(seconds=10**6), cfg), 0.1
    )
    # floor never above consolidation
    assert_close(compute_effective_strength(tag(0.8, 0.05), BASE + timedelta(days=300), cfg), 0.05)
    # future memory / younger than min_seconds -> elapsed = 1 s -> full consolidation
    assert_close(compute_effective_strength(tag(0.2, 0.8), BASE - timedelta(days=3), cfg), 0.8)
    assert_close(compute_effective_strength(tag(0.2, 0.8), BASE + timedelta(seconds=0.5), cfg), 0.8)
    # arousal exactly at the threshold gets the floor
    assert_close(compute_effective_strength(tag(0.7, 0.9), BASE + timedelta(days=3000), cfg), 0.1)


def _calm_only() -> AdaptiveWeightsConfig:
    return AdaptiveWeightsConfig(
        negative_mood_strength=0.0, high_arousal_strength=0.0, calm_strength=0.3
    )


def test_hand_adaptive_weights_and_breakdown() -> None:
    # valence 0, arousal == calm centre: calm = 1 * 0.5 -> shift 0.15 / -0.1 / -0.05
    mood = MoodField(valence=0.0, arousal=0.3, dominance=0.5, inertia=0.5, timestamp=BASE)
    base = [0.35, 0.25, 0.15, 0.10, 0.10, 0.05]
    expected_w = [0.5, 0.15, 0.1, 0.1, 0.1, 0.05]
    assert_seq_close(adaptive_weights(mood, base, _calm_only()), expected_w)
    assert_seq_close(O.adaptive_weights(0.0, 0.3, base, oadaptive(_calm_only())), expected_w)
    off = AdaptiveWeightsConfig(
        negative_mood_strength=0.0, high_arousal_strength=0.0, calm_strength=0.0
    )
    assert_seq_close(adaptive_weights(mood, [1, 1, 1, 1, 0, 0], off), [0.25] * 4 + [0.0] * 2)

    ca = CoreAffect(valence=0.3, arousal=0.6, dominance=0.4)
    tag = em.make_emotional_tag(ca, AffectiveMomentum.zero(), mood, 0.6, now=BASE)
    mem = Memory.create("x", tag, embedding=[3.0, 4.0])
    kw: dict[str, Any] = {
        "query_embedding": [6.0, 8.0],
        "query_affect": ca,
        "current_mood": mood,
        "current_momentum": AffectiveMomentum(d_valence=1.0),
        "memory": mem,
        "activation_map": {mem.id: 0.4, "other": 1.0},
        "now": BASE,
        "decay_config": DecayConfig(),
        "retrieval_config": RetrievalConfig(adaptive_weights_config=_calm_only()),
    }
    bd = retrieval_breakdown(**kw)
    raw = [1.0, 1.0, 1.0, 0.5, 0.6, 0.4]  # cos 1, same mood, same affect, zero tag velocity
    assert_seq_close(bd.raw_signals.as_tuple(), raw)
    assert_seq_close(bd.weights.as_tuple(), expected_w)
    assert_seq_close(bd.weighted_signals.as_tuple(), [0.5, 0.15, 0.1, 0.05, 0.06, 0.02])
    assert_close(bd.total_score, 0.88)
    pre = np.array([0.0, 0.0, 0.0, 1.0, 0.0, 2.0])
    assert_close(retrieval_score(**kw, precomputed_weights=pre), 0.5 + 0.8)

    # momentum alignment: opposite -> 0, parallel -> 1, orthogonal -> 0.5
    for tag_vel, expected in (((-2.0, 0, 0), 0.0), ((3.0, 0, 0), 1.0), ((0, 1.0, 0), 0.5)):
        t2 = tag.model_copy(
            update={
                "momentum": AffectiveMomentum(
                    d_valence=tag_vel[0], d_arousal=tag_vel[1], d_dominance=tag_vel[2]
                )
            }
        )
        m2 = mem.model_copy(update={"tag": t2})
        got = retrieval_breakdown(**{**kw, "memory": m2}).raw_signals.momentum_alignment
        assert_close(got, expected)
    # affect proximity at the far corner is 0; NaN / zero embeddings give s1 = 0
    far = kw | {
        "query_affect": CoreAffect(valence=-1.0, arousal=0.0, dominance=0.0),
        "memory": mem.model_copy(
            update={
                "tag": tag.model_copy(
                    update={"core_affect": CoreAffect(valence=1.0, arousal=1.0, dominance=1.0)}
                )
            }
        ),
    }
    assert_close(retrieval_breakdown(**far).raw_signals.affect_proximity, 0.0)
    for emb in ([float("nan"), 1.0], [0.0, 0.0], None, []):
        m3 = mem.model_copy(update={"embedding": emb})
        assert retrieval_breakdown(**{**kw, "memory": m3}).raw_signals.semantic_similarity == 0
        assert O.semantic_similarity([6.0, 8.0], emb) == 0.0
    for q in ([float("nan"), 1.0], [0.0, 0.0], []):
        bd_q = retrieval_breakdown(**{**kw, "query_embedding": q})
        assert bd_q.raw_signals.semantic_similarity == 0


def _link(src: str, dst: str, s: float) -> ResonanceLink:
    return ResonanceLink(source_id=src, target_id=dst, strength=s, link_type="semantic")


def test_hand_spreading_activation_and_plan() -> None:
    tag = neutral_tag()

    def node(i: str, links: list[ResonanceLink]) -> Memory:
        return Memory(id=i, content=i, tag=tag.model_copy(update={"resonance_links": links}))

    mems = [
        node("A", [_link("A", "B", 0.5), _link("A", "D", 0.2), _link("A", "Z", 1.0)]),
        node("B", [_link("B", "C", 0.8), _link("B", "D", 0.1)]),
        node("C", [_link("C", "A", 1.0)]),
        node("D", []),
    ]
    exp = {"B": 0.5, "C": 0.4, "D": 0.2}  # D: max(0.2 at hop 1, 0.05 at hop 2)
    for got in (
        spreading_activation(["A"], mems),
        O.spreading_activation(["A"], [omem(m) for m in mems], 2),
    ):
        assert set(got) == set(exp)
        for k, v in exp.items():
            assert_close(got[k], v)
    assert set(spreading_activation(["A"], mems, hops=1)) == {"B", "D"}
    assert spreading_activation(["Q"], mems) == {}
    assert spreading_activation(["A", "B"], mems, hops=3) == pytest.approx({"C": 0.8, "D": 0.2})

    # plan: all four tie in pass 1 (identical tags, no embeddings) -> candidate order kept;
    # seeds = [A]; pass 2 lifts B, C, D by w6 * activation.
    rc = RetrievalConfig(
        base_weights=[0, 0, 0, 0, 0, 1.0],
        adaptive_weights_config=AdaptiveWeightsConfig(
            negative_mood_strength=0.0, high_arousal_strength=0.0, calm_strength=0.0
        ),
    )
    plan = build_retrieval_plan(
        None,
        CoreAffect.neutral(),
        MoodField.neutral(BASE),
        AffectiveMomentum.zero(),
        mems,
        BASE,
        DecayConfig(),
        rc,
        1,
    )
    assert [r.memory.id for r in plan.pass1] == ["A", "B", "C", "D"]
    assert [r.score for r in plan.pass1] == [0.0] * 4
    assert list(plan.seed_ids) == ["A"]
    assert [r.memory.id for r in plan.pass2] == ["B", "C", "D", "A"]
    assert_seq_close([r.score for r in plan.pass2], [0.5, 0.4, 0.2, 0.0])
    # no links from the seed -> no activation -> pass 2 is pass 1
    plan = build_retrieval_plan(
        None,
        CoreAffect.neutral(),
        MoodField.neutral(BASE),
        AffectiveMomentum.zero(),
        mems[3:] + mems[:3],
        BASE,
        DecayConfig(),
        rc,
        1,
    )
    assert plan.activation_map == {}
    assert [r.memory.id for r in plan.pass2] == [r.memory.id for r in plan.pass1]


def test_zero_spreads_activate_nothing() -> None:
    # As the original 0.18.1: a spread of 0 (a link of strength 0, or onward from a
    # node it reached) is never recorded, so such a node is not in the activation map
    tag = neutral_tag()

    def node(i: str, links: list[ResonanceLink]) -> Memory:
        return Memory(id=i, content=i, tag=tag.model_copy(update={"resonance_links": links}))

    mems = [
        node("A", [_link("A", "B", 0.0), _link("A", "C", 0.5)]),
        node("B", [_link("B", "D", 1.0)]),
        node("C", [_link("C", "E", 0.0)]),
        node("D", []),
        node("E", []),
    ]
    assert spreading_activation(["A"], mems, hops=3) == {"C": 0.5}
    assert O.spreading_activation(["A"], [omem(m) for m in mems], 3) == {"C": 0.5}
    assert spreading_activation(["A"], mems[:2] + mems[3:4], hops=2) == {}
    rc = RetrievalConfig(base_weights=[0, 0, 0, 0, 0, 1.0])
    plan = build_retrieval_plan(
        None, CoreAffect.neutral(), MoodField.neutral(BASE), AffectiveMomentum.zero(),
        mems, BASE, DecayConfig(), rc, 1,
    )
    assert list(plan.seed_ids) == ["A"]
    assert plan.activation_map == {"C": 0.5}
    assert [r.memory.id for r in plan.pass2] == ["C", "A", "B", "D", "E"]


def test_hand_resonance_links_and_helpers() -> None:
    def mem(emb: list[float] | None, v: float, a: float, ts: datetime) -> Memory:
        tag = em.make_emotional_tag(
            CoreAffect(valence=v, arousal=a, dominance=0.5),
            AffectiveMomentum.zero(),
            MoodField.neutral(BASE),
            0.5,
            now=ts,
        )
        return Memory.create("m", tag, embedding=emb)

    new = mem([1.0, 0.0], 0.5, 0.5, BASE)
    a = mem([1.0, 0.0], 0.5, 0.5, BASE - timedelta(hours=1))  # 0.5+0.3+0.1 = 0.9, semantic
    b = mem([0.0, 1.0], -0.5, 0.5, BASE)  # 0.3*(1-1/sqrt6) + 0.2, temporal
    c = mem(None, 1.0, 1.0, BASE - timedelta(hours=10))  # below threshold
    d = mem([1.0, 0.1], 0.5, 0.5, BASE - timedelta(minutes=10))  # causal
    e = mem([0.0, 1.0], -0.6, 0.5, BASE + timedelta(minutes=10))  # contrastive
    links = build_resonance_links(new, [new, a, b, c, d, e])
    t10 = 2.0 ** (-1.0 / 6.0)
    exp = [
        (d.id, 0.5 / math.sqrt(1.01) + 0.3 + 0.2 * t10, "causal"),
        (a.id, 0.9, "semantic"),
        (b.id, 0.3 * (1 - 1 / math.sqrt(6)) + 0.2, "temporal"),
        (e.id, 0.3 * (1 - 1.1 / math.sqrt(6)) + 0.2 * t10, "contrastive"),
    ]
    assert [(x.target_id, x.link_type) for x in links] == [(i, k) for i, _, k in exp]
    assert_seq_close([x.strength for x in links], [s for _, s, _ in exp])
    oexp = O.build_resonance_links(
        omem(new), [omem(m) for m in (new, a, b, c, d, e)], O.OResonance()
    )
    assert [(i, k) for i, _, k in oexp] == [(i, k) for i, _, k in exp]
    assert_seq_close([s for _, s, _ in oexp], [s for _, s, _ in exp])
    assert len(build_resonance_links(new, [a, b, d, e], ResonanceConfig(max_links=2))) == 2

    assert_close(temporal_proximity(BASE, BASE + timedelta(hours=1)), 0.5)
    assert temporal_proximity(BASE, BASE + timedelta(hours=1), 0.0) == 0.0
    mem_l = Memory(
        id="s",
        content="x",
        tag=a.tag.model_copy(
            update={
                "resonance_links": [
                    _link("s", "p", 0.98),
                    _link("s", "q", 0.3),
                    _link("s", "r", 0.3),
                ]
            }
        ),
    )
    got = hebbian_strengthen(mem_l, ["p", "q"], 0.05)
    assert [x.strength for x in got] == pytest.approx([1.0, 0.35, 0.3])


def test_hand_prediction_appraisal_categorize() -> None:
    tag = em.make_emotional_tag(
        CoreAffect(valence=0.0, arousal=0.5, dominance=0.5),
        AffectiveMomentum.zero(),
        MoodField.neutral(BASE),
        0.5,
        now=BASE,
    )
    obs = CoreAffect(valence=0.6, arousal=0.5, dominance=0.5)
    assert_close(compute_ape(tag, obs), 0.6)
    rec = reconsolidate(tag, obs, 0.6, 0.2)  # alpha 0.12
    assert_seq_close(vad(rec.core_affect), (0.072, 0.5, 0.5))
    assert_seq_close(vad(reconsolidate(tag, obs, 0.6, 10.0).core_affect), (0.3, 0.5, 0.5))
    up = update_prediction(tag, obs, 0.6)  # lr 0.2 + 0.2*(0.6-0.2) = 0.28
    assert_close(up.prediction_learning_rate, 0.28)
    assert_seq_close(vad(up.expected_affect), (0.168, 0.5, 0.5))
    up2 = update_prediction(up, obs, 2.0)  # target 0.8: 0.28 + 0.2*0.52 = 0.384
    assert_close(up2.prediction_learning_rate, 0.384)
    assert_seq_close(vad(up2.expected_affect), (0.168 + 0.384 * 0.432, 0.5, 0.5))
    assert_close(compute_ape(up2, obs), 0.432 * (1 - 0.384))

    av = AppraisalVector(
        novelty=0.0,
        goal_relevance=1.0,
        coping_potential=1.0,
        norm_congruence=1.0,
        self_relevance=1.0,
    )
    assert_seq_close(vad(av.to_core_affect()), (0.831, 0.3607, 1.0))
    av = AppraisalVector(
        novelty=-1.0,
        goal_relevance=-1.0,
        coping_potential=0.0,
        norm_congruence=-1.0,
        self_relevance=0.0,
    )
    assert_seq_close(vad(av.to_core_affect()), (-0.8489, 0.645, 0.0))

    def cat(v: float, a: float, d: float = 0.5, dom: float | None = None) -> tuple:
        lab = em.categorize_affect(CoreAffect(valence=v, arousal=a, dominance=d), dom)
        return lab.primary, lab.intensity, lab.name, round(lab.confidence, 12)

    assert cat(0.5, 0.5) == ("joy", "moderate", "joy", 1.0)
    assert cat(0.0, 1.0) == ("surprise", "high", "amazement", 1.0)
    assert cat(0.2, 0.5) == ("joy", "low", "serenity", 1.0)
    conf = round(1 - (135 - (180 - math.degrees(math.atan(2.0)))) / 22.5, 12)
    assert cat(-0.5, 1.0) == ("fear", "high", "terror", conf)  # no dominance: no split
    assert cat(-0.5, 1.0, 0.5, 0.5) == ("anger", "high", "rage", conf)
    assert cat(-0.5, 1.0, 0.5, 0.2) == ("fear", "high", "terror", conf)
    assert cat(-0.5, 1.0, 0.1, 0.9)[0] == "anger"
    assert cat(-0.5, 0.5)[:3] == ("disgust", "moderate", "disgust")
    assert cat(-0.5, 0.0)[:3] == ("sadness", "high", "grief")
    assert cat(0.0, 0.0) == ("disgust", "low", "boredom", 0.0)  # never "neutral"
    assert cat(0.0, 0.1)[:3] == ("disgust", "high", "loathing")
    assert cat(0.4, 0.3)[:3] == ("trust", "moderate", "trust")
    assert cat(0.4, 0.7)[:3] == ("anticipation", "moderate", "anticipation")
    lab = em.categorize_affect(CoreAffect(valence=0.01, arousal=0.5))
    assert (lab.primary, lab.intensity, lab.name, lab.confidence) == ("joy", "low", "serenity", 0.0)
    lab = em.categorize_affect(CoreAffect(valence=0.02, arousal=0.02))
    assert (lab.primary, lab.intensity, lab.name, lab.confidence) == (
        "disgust", "low", "boredom", 0.0
    )
    assert O.categorize(0.02, 0.02, 0.5) == ("disgust", "low", "boredom", 0.0)
    assert O.categorize(-0.01, 0.5, None) == ("disgust", "low", "boredom", 0.0)
    assert O.categorize(0.01, 0.49, None) == ("trust", "low", "acceptance", 0.0)
    assert O.categorize(-0.5, 1.0, 0.2)[:3] == ("fear", "high", "terror")
    assert O.categorize(-0.5, 1.0, 0.5)[:3] == ("anger", "high", "rage")
    assert O.categorize(-0.5, 0.0, 0.5)[:3] == ("sadness", "high", "grief")
    assert O.categorize(0.4, 0.7, 0.5)[:3] == ("anticipation", "moderate", "anticipation")
    assert O.categorize(0.0, 0.1, 0.5)[:3] == ("disgust", "high", "loathing")
    assert_close(O.categorize(-0.5, 1.0, 0.5)[3], conf)
