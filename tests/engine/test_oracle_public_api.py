"""Public API vs. the independent plain-Python oracle of SPEC 1-8 (``tests/support/oracle.py``).

Every public numeric function is compared with the oracle on random inputs to 1e-9
(float64); a handful of hand-computed examples pin the oracle itself.
"""

from __future__ import annotations

import itertools
import json
import math
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

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
from emotional_memory.decay import compute_effective_strength, compute_effective_strength_batch
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

TOL = 1e-9
BASE = datetime(2024, 1, 1, tzinfo=UTC)
FAST = settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
MEDIUM = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
SLOW = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
LINK_TYPES = ["semantic", "emotional", "temporal", "causal", "contrastive"]


# --------------------------------------------------------------------------- helpers


def close(got: float, exp: float, tol: float = TOL) -> bool:
    return math.isclose(float(got), float(exp), rel_tol=tol, abs_tol=tol)


def assert_close(got: float, exp: float, what: str = "", tol: float = TOL) -> None:
    assert close(got, exp, tol), f"{what}: got {got!r}, expected {exp!r}"


def assert_seq_close(got: Any, exp: Any, what: str = "") -> None:
    got, exp = [float(x) for x in got], [float(x) for x in exp]
    assert len(got) == len(exp), f"{what}: length {len(got)} != {len(exp)}"
    for i, (g, e) in enumerate(zip(got, exp, strict=True)):
        assert_close(g, e, f"{what}[{i}]")


def vad(a: CoreAffect | MoodField) -> O.Affect:
    return (a.valence, a.arousal, a.dominance)


def vel(m: AffectiveMomentum) -> O.Vec3:
    return (m.d_valence, m.d_arousal, m.d_dominance)


def mom6(m: AffectiveMomentum) -> list[float]:
    return [m.d_valence, m.d_arousal, m.d_dominance, m.dd_valence, m.dd_arousal, m.dd_dominance]


def omood(m: MoodField) -> O.OMood:
    return O.OMood(m.valence, m.arousal, m.dominance, m.inertia, m.timestamp)


def odecaymood(c: MoodDecayConfig | None) -> O.ODecayMood | None:
    if c is None:
        return None
    return O.ODecayMood(
        c.base_half_life_seconds,
        c.inertia_scale,
        c.baseline_valence,
        c.baseline_arousal,
        c.baseline_dominance,
    )


def odecay(c: DecayConfig) -> O.ODecay:
    return O.ODecay(
        c.base_decay,
        c.arousal_modulation,
        c.retrieval_boost,
        c.floor_arousal_threshold,
        c.floor_value,
        c.min_seconds,
        c.power,
    )


def oadaptive(c: AdaptiveWeightsConfig) -> O.OAdaptive:
    return O.OAdaptive(**c.model_dump())


def oresonance(c: ResonanceConfig) -> O.OResonance:
    names = O.OResonance.__dataclass_fields__
    return O.OResonance(**{k: v for k, v in c.model_dump().items() if k in names})


def omem(m: Memory) -> O.OMemory:
    t = m.tag
    return O.OMemory(
        id=m.id,
        embedding=None if m.embedding is None else list(m.embedding),
        affect=vad(t.core_affect),
        velocity=vel(t.momentum),
        mood_snapshot=vad(t.mood_snapshot),
        timestamp=t.timestamp,
        consolidation=t.consolidation_strength,
        retrieval_count=t.retrieval_count,
        links=[(link.target_id, link.strength) for link in t.resonance_links],
    )


def assert_mood_eq(got: MoodField, exp: O.OMood, what: str = "mood") -> None:
    assert_seq_close(
        [got.valence, got.arousal, got.dominance, got.inertia],
        [exp.valence, exp.arousal, exp.dominance, exp.inertia],
        what,
    )
    assert got.timestamp == exp.timestamp, f"{what}.timestamp"


def near_ties(scores: list[float]) -> bool:
    """Some two scores differ by a non-zero amount below the comparison tolerance."""
    s = sorted(scores)
    return any(0.0 < b - a < 1e-9 for a, b in itertools.pairwise(s))


# --------------------------------------------------------------------------- strategies

unit = st.floats(0.0, 1.0)
signed = st.floats(-1.0, 1.0)
wide = st.floats(-3.0, 3.0)
micros = st.integers(-(10**13), 10**13)
times = st.one_of(st.integers(-(10**7), 10**7), micros).map(
    lambda us: BASE + timedelta(microseconds=us)
)

affects = st.builds(CoreAffect, valence=signed, arousal=unit, dominance=unit)
vel_component = st.one_of(
    st.just(0.0), st.floats(-1e-14, 1e-14), st.floats(-5.0, 5.0).filter(lambda x: abs(x) > 1e-6)
)
momenta = st.builds(
    AffectiveMomentum,
    d_valence=vel_component,
    d_arousal=vel_component,
    d_dominance=vel_component,
    dd_valence=st.floats(-5, 5),
    dd_arousal=st.floats(-5, 5),
    dd_dominance=st.floats(-5, 5),
)
moods = st.builds(
    MoodField, valence=signed, arousal=unit, dominance=unit, inertia=unit, timestamp=times
)
mood_decays = st.builds(
    MoodDecayConfig,
    base_half_life_seconds=st.floats(1.0, 1e5),
    inertia_scale=st.floats(0.0, 5.0),
    baseline_valence=signed,
    baseline_arousal=unit,
    baseline_dominance=unit,
)
decay_configs = st.one_of(
    st.just(DecayConfig()),
    st.builds(
        DecayConfig,
        base_decay=st.floats(0.0, 2.0),
        arousal_modulation=st.floats(-1.0, 2.0),
        retrieval_boost=st.floats(0.0, 1.0),
        floor_arousal_threshold=unit,
        floor_value=unit,
        min_seconds=st.floats(1e-3, 1e4),
        power=st.floats(0.0, 3.0),
    ),
)
adaptive_configs = st.one_of(
    st.just(AdaptiveWeightsConfig()),
    st.builds(
        AdaptiveWeightsConfig,
        negative_mood_strength=unit,
        negative_mood_center=signed,
        negative_mood_sharpness=st.floats(1e-3, 60.0),
        high_arousal_strength=unit,
        high_arousal_center=unit,
        high_arousal_sharpness=st.floats(1e-3, 60.0),
        calm_strength=unit,
        calm_valence_width=st.floats(1e-3, 2.0),
        calm_arousal_center=unit,
        calm_sharpness=st.floats(1e-3, 60.0),
    ),
)
weight_item = st.one_of(st.just(0.0), st.floats(-0.5, 1.0))
base_weight_lists = st.one_of(
    st.just([0.35, 0.25, 0.15, 0.10, 0.10, 0.05]),
    st.just([0.0] * 6),
    st.lists(weight_item, min_size=6, max_size=6),
)
retrieval_configs = st.builds(
    RetrievalConfig, base_weights=base_weight_lists, adaptive_weights_config=adaptive_configs
)


def embeddings(dim: int, allow_nan: bool = True) -> st.SearchStrategy[list[float] | None]:
    rand = st.lists(st.floats(-1.0, 1.0), min_size=dim, max_size=dim)
    options = [st.none(), st.just([]), st.just([0.0] * dim), rand, rand, rand]
    if allow_nan and dim > 0:
        options.append(
            st.tuples(rand, st.integers(0, dim - 1)).map(
                lambda p: [float("nan") if i == p[1] else x for i, x in enumerate(p[0])]
            )
        )
    return st.one_of(*options)


@st.composite
def tags(draw: st.DrawFn, links: list[ResonanceLink] | None = None) -> EmotionalTag:
    tag = EmotionalTag(
        core_affect=draw(affects),
        momentum=draw(momenta),
        mood_snapshot=draw(moods),
        timestamp=draw(times),
        consolidation_strength=draw(st.one_of(unit, st.floats(0.0, 0.1))),
        retrieval_count=draw(st.integers(0, 30)),
        resonance_links=links or [],
    )
    return tag


@st.composite
def memories(draw: st.DrawFn, dim: int, allow_nan: bool = True) -> Memory:
    if draw(st.booleans()):
        tag = em.make_emotional_tag(
            draw(affects),
            draw(momenta),
            draw(moods),
            draw(st.floats(-0.5, 1.5)),
            now=draw(times),
        )
    else:
        tag = draw(tags())
    return Memory.create("content", tag, embedding=draw(embeddings(dim, allow_nan)))


# --------------------------------------------------------------------------- SPEC 1: affect


@FAST
@given(v=wide, a=wide, d=wide)
def test_core_affect_clamps(v: float, a: float, d: float) -> None:
    assert vad(CoreAffect(valence=v, arousal=a, dominance=d)) == O.core_affect(v, a, d)
    assert vad(CoreAffect(valence=v, arousal=a)) == O.core_affect(v, a)


@FAST
@given(p=affects, q=affects, alpha=st.floats(-1.0, 2.0))
def test_core_affect_distance_and_lerp(p: CoreAffect, q: CoreAffect, alpha: float) -> None:
    assert_close(p.distance(q), O.distance(vad(p), vad(q)), "distance")
    assert p.distance(q) <= em.affect.MAX_PAD_DISTANCE + 1e-12
    assert_seq_close(vad(p.lerp(q, alpha)), O.lerp(vad(p), vad(q), alpha), "lerp")


def test_max_pad_distance_and_neutral() -> None:
    assert_close(em.affect.MAX_PAD_DISTANCE, math.sqrt(6.0))
    assert vad(CoreAffect.neutral()) == (0.0, 0.0, 0.5)
    far = CoreAffect(valence=-1, arousal=0, dominance=0).distance(
        CoreAffect(valence=1, arousal=1, dominance=1)
    )
    assert_close(far, math.sqrt(6.0))


@FAST
@given(m=momenta)
def test_momentum_magnitude(m: AffectiveMomentum) -> None:
    assert_close(m.magnitude(), O.norm3(vel(m)), "magnitude")


@FAST
@given(v=wide, a=wide, d=wide, i=wide, p=moods)
def test_mood_field_clamps_and_distance(
    v: float, a: float, d: float, i: float, p: MoodField
) -> None:
    m = MoodField(valence=v, arousal=a, dominance=d, inertia=i, timestamp=BASE)
    exp = O.mood(v, a, d, i, BASE)
    assert_mood_eq(m, exp)
    assert_close(m.distance(p), O.distance(exp.vad(), vad(p)), "mood distance")


@FAST
@given(m=moods, now=times, cfg=mood_decays)
def test_mood_regress(m: MoodField, now: datetime, cfg: MoodDecayConfig) -> None:
    assert_mood_eq(m.regress(now, cfg), O.mood_regress(omood(m), now, odecaymood(cfg)))


@FAST
@given(
    m=moods,
    ca=affects,
    alpha=unit,
    now=times,
    cfg=st.one_of(st.none(), st.just(MoodDecayConfig()), mood_decays),
)
def test_mood_update(
    m: MoodField, ca: CoreAffect, alpha: float, now: datetime, cfg: MoodDecayConfig | None
) -> None:
    got = m.update(ca, alpha=alpha, now=now, decay_config=cfg)
    assert_mood_eq(got, O.mood_update(omood(m), vad(ca), alpha, now, odecaymood(cfg)))


def test_mood_decay_config_rejects_non_positive_half_life() -> None:
    for bad in (0.0, -1.0):
        with pytest.raises(ValueError):
            MoodDecayConfig(base_half_life_seconds=bad)


step_dts = st.one_of(
    st.just(0),  # equal timestamps
    st.integers(1, 999),  # < 1 ms
    st.integers(1000, 5000),  # just above the floor
    st.integers(5000, 10**10),
    st.integers(-(10**6), -1),  # clock going backwards
)
steps = st.lists(st.tuples(affects, step_dts), min_size=1, max_size=7)


def _run_state(
    state: AffectiveState,
    ostate: O.OState,
    seq: list[tuple[CoreAffect, int]],
    t: datetime,
    alpha: float,
    decay: MoodDecayConfig | None,
) -> tuple[AffectiveState, O.OState, datetime]:
    for i, (ca, dt_us) in enumerate(seq):
        t = t + timedelta(microseconds=dt_us)
        state = state.update(ca, now=t, mood_alpha=alpha, mood_decay=decay)
        ostate = ostate.update(vad(ca), t, alpha, odecaymood(decay))
        assert vad(state.core_affect) == ostate.core_affect, f"step {i} core_affect"
        assert_seq_close(mom6(state.momentum), ostate.momentum, f"step {i} momentum")
        assert_mood_eq(state.mood, ostate.mood, f"step {i} mood")
    return state, ostate, t


@MEDIUM
@given(seq=steps, alpha=unit, decay=st.one_of(st.none(), mood_decays))
def test_affective_state_update_sequences(
    seq: list[tuple[CoreAffect, int]], alpha: float, decay: MoodDecayConfig | None
) -> None:
    s = AffectiveState.initial(BASE)
    o = O.OState.initial(BASE)
    assert vad(s.core_affect) == o.core_affect
    assert mom6(s.momentum) == o.momentum
    assert_mood_eq(s.mood, o.mood)
    _run_state(s, o, seq, BASE, alpha, decay)


@MEDIUM
@given(before=steps, after=steps, alpha=unit, decay=st.one_of(st.none(), mood_decays))
def test_snapshot_restore_continues_momentum(
    before: list[tuple[CoreAffect, int]],
    after: list[tuple[CoreAffect, int]],
    alpha: float,
    decay: MoodDecayConfig | None,
) -> None:
    s, o, t = _run_state(
        AffectiveState.initial(BASE), O.OState.initial(BASE), before, BASE, alpha, decay
    )
    restored = AffectiveState.restore(json.loads(json.dumps(s.snapshot())))
    assert vad(restored.core_affect) == vad(s.core_affect)
    assert mom6(restored.momentum) == mom6(s.momentum)
    assert_mood_eq(restored.mood, omood(s.mood))
    a, _, _ = _run_state(s, o, after, t, alpha, decay)
    b, _, _ = _run_state(restored, o, after, t, alpha, decay)
    assert mom6(a.momentum) == mom6(b.momentum)
    assert vad(a.mood) == vad(b.mood)


# --------------------------------------------------------------------------- SPEC 2, 3


@FAST
@given(a=st.floats(-1.0, 2.0), m=st.floats(-1.0, 2.0))
def test_consolidation_strength(a: float, m: float) -> None:
    assert_close(em.consolidation_strength(a, m), O.consolidation_strength(a, m))


@FAST
@given(ca=affects, mom=momenta, m=moods, c=st.floats(-2.0, 3.0), now=times)
def test_make_emotional_tag(
    ca: CoreAffect, mom: AffectiveMomentum, m: MoodField, c: float, now: datetime
) -> None:
    tag = em.make_emotional_tag(ca, mom, m, c, now=now)
    assert tag.timestamp == now
    assert tag.consolidation_strength == O.clamp(c, 0.0, 1.0)
    assert tag.core_affect == ca and tag.momentum == mom and tag.mood_snapshot == m


@st.composite
def decay_cases(draw: st.DrawFn) -> tuple[EmotionalTag, DecayConfig, datetime]:
    arousal = draw(st.one_of(unit, st.sampled_from([0.0, 0.7, 1.0])))
    cfg = draw(decay_configs)
    if draw(st.booleans()):  # arousal exactly at the floor threshold
        cfg = cfg.model_copy(update={"floor_arousal_threshold": arousal})
    tag = EmotionalTag(
        core_affect=CoreAffect(valence=draw(signed), arousal=arousal, dominance=draw(unit)),
        momentum=AffectiveMomentum.zero(),
        mood_snapshot=MoodField.neutral(BASE),
        timestamp=draw(times),
        consolidation_strength=draw(
            st.one_of(unit, st.floats(0.0, cfg.floor_value), st.just(0.0), st.just(1.0))
        ),
        retrieval_count=draw(st.integers(0, 50)),
    )
    age_us = draw(
        st.one_of(
            st.integers(-(10**9), 0),  # memory in the future
            st.integers(0, int(cfg.min_seconds * 1e6)),  # younger than min_seconds
            st.integers(0, 10**14),
        )
    )
    return tag, cfg, tag.timestamp + timedelta(microseconds=age_us)


def _oracle_strength(tag: EmotionalTag, now: datetime, cfg: DecayConfig) -> float:
    return O.effective_strength(
        tag.core_affect.arousal,
        tag.consolidation_strength,
        tag.retrieval_count,
        tag.timestamp,
        now,
        odecay(cfg),
    )


@FAST
@given(case=decay_cases())
def test_compute_effective_strength(case: tuple[EmotionalTag, DecayConfig, datetime]) -> None:
    tag, cfg, now = case
    assert_close(
        compute_effective_strength(tag, now, cfg),
        _oracle_strength(tag, now, cfg),
        f"strength cfg={cfg!r}",
    )


@MEDIUM
@given(cases=st.lists(decay_cases(), min_size=1, max_size=6), cfg=decay_configs, now=times)
def test_compute_effective_strength_batch(
    cases: list[tuple[EmotionalTag, DecayConfig, datetime]], cfg: DecayConfig, now: datetime
) -> None:
    tag_list = [c[0] for c in cases]
    got = compute_effective_strength_batch(tag_list, now, cfg)
    assert isinstance(got, np.ndarray) and got.shape == (len(tag_list),)
    assert_seq_close(got, [_oracle_strength(t, now, cfg) for t in tag_list], "batch")
    for t, g in zip(tag_list, got, strict=True):
        assert_close(g, compute_effective_strength(t, now, cfg), "batch vs single")


def test_compute_effective_strength_default_config() -> None:
    tag = EmotionalTag(
        core_affect=CoreAffect(valence=0.0, arousal=0.2),
        momentum=AffectiveMomentum.zero(),
        mood_snapshot=MoodField.neutral(BASE),
        timestamp=BASE,
        consolidation_strength=0.8,
    )
    now = BASE + timedelta(seconds=100)
    assert_close(compute_effective_strength(tag, now), _oracle_strength(tag, now, DecayConfig()))


# --------------------------------------------------------------------------- SPEC 4


def _oracle_weights(mood: MoodField, base: list[float], cfg: AdaptiveWeightsConfig) -> list[float]:
    return O.adaptive_weights(mood.valence, mood.arousal, base, oadaptive(cfg))


@FAST
@given(
    mv=st.one_of(signed, st.sampled_from([-1.0, -0.5, 0.0, 1.0])),
    ma=st.one_of(unit, st.sampled_from([0.0, 0.3, 0.7, 1.0])),
    base=base_weight_lists,
    cfg=adaptive_configs,
)
def test_adaptive_weights(
    mv: float, ma: float, base: list[float], cfg: AdaptiveWeightsConfig
) -> None:
    mood = MoodField(valence=mv, arousal=ma, dominance=0.5, inertia=0.5, timestamp=BASE)
    got = adaptive_weights(mood, base, cfg)
    assert isinstance(got, np.ndarray) and got.shape == (6,) and got.dtype == np.float64
    assert_seq_close(got, _oracle_weights(mood, base, cfg), "weights")
    assert_close(float(np.sum(got)), 1.0)


def test_adaptive_weights_uniform_fallback() -> None:
    off = AdaptiveWeightsConfig(
        negative_mood_strength=0.0, high_arousal_strength=0.0, calm_strength=0.0
    )
    mood = MoodField.neutral(BASE)
    for base in ([0.0] * 6, [-0.1, -0.2, 0.0, -1.0, 0.0, -0.3]):
        got = adaptive_weights(mood, base, off)
        assert list(got) == [1.0 / 6.0] * 6
        assert O.adaptive_weights(0.0, 0.0, base, oadaptive(off)) == [1.0 / 6.0] * 6
    # All-cancel under an active gate: calm at full strength drives w1, w2 to 0.
    calm = AdaptiveWeightsConfig(
        negative_mood_strength=0.0,
        high_arousal_strength=0.0,
        calm_strength=1.0,
        calm_arousal_center=1.0,
        calm_sharpness=60.0,
    )
    base = [-2.0, 0.1, 0.1, 0.0, 0.0, 0.0]
    assert_seq_close(adaptive_weights(mood, base, calm), _oracle_weights(mood, base, calm))
    assert list(adaptive_weights(mood, base, calm)) == [1.0 / 6.0] * 6


def test_adaptive_weights_default_config_argument() -> None:
    mood = MoodField(valence=-0.6, arousal=0.8, dominance=0.5, inertia=0.5, timestamp=BASE)
    base = [0.35, 0.25, 0.15, 0.10, 0.10, 0.05]
    assert_seq_close(
        adaptive_weights(mood, base), _oracle_weights(mood, base, AdaptiveWeightsConfig())
    )


@st.composite
def score_cases(draw: st.DrawFn) -> dict[str, Any]:
    dim = draw(st.integers(1, 5))
    mem = draw(memories(dim))
    other_ids = draw(st.lists(st.text("abc", min_size=1, max_size=3), max_size=3))
    act = {k: draw(unit) for k in other_ids}
    if draw(st.booleans()):
        act[mem.id] = draw(unit)
    pre = None
    if draw(st.booleans()):
        pre = np.array(
            draw(st.lists(st.floats(-1.0, 1.0), min_size=6, max_size=6)), dtype=np.float64
        )
    return {
        "query_embedding": draw(
            st.lists(st.floats(-1.0, 1.0), min_size=dim, max_size=dim) | st.just([0.0] * dim)
        ),
        "query_affect": draw(affects),
        "current_mood": draw(moods),
        "current_momentum": draw(momenta),
        "memory": mem,
        "activation_map": act,
        "now": draw(times),
        "decay_config": draw(decay_configs),
        "retrieval_config": draw(retrieval_configs),
        "precomputed_weights": pre,
    }


def _oracle_breakdown(kw: dict[str, Any]) -> tuple[list[float], list[float]]:
    rc: RetrievalConfig = kw["retrieval_config"]
    if kw.get("precomputed_weights") is not None:
        w = [float(x) for x in kw["precomputed_weights"]]
    else:
        w = _oracle_weights(kw["current_mood"], rc.base_weights, rc.adaptive_weights_config)
    raw = O.signals(
        kw["query_embedding"],
        vad(kw["query_affect"]),
        vad(kw["current_mood"]),
        vel(kw["current_momentum"]),
        omem(kw["memory"]),
        kw["activation_map"],
        kw["now"],
        odecay(kw["decay_config"]),
    )
    return w, raw


def _check_breakdown(kw: dict[str, Any]) -> None:
    w, raw = _oracle_breakdown(kw)
    bd = retrieval_breakdown(**kw)
    assert_seq_close(bd.weights.as_tuple(), w, "weights")
    assert_seq_close(bd.raw_signals.as_tuple(), raw, "raw_signals")
    assert_seq_close(bd.weighted_signals.as_tuple(), O.weighted(w, raw), "weighted_signals")
    assert_close(bd.total_score, O.total_score(w, raw), "total_score")
    assert_close(retrieval_score(**kw), O.total_score(w, raw), "retrieval_score")
    assert retrieval_score(**kw) == bd.total_score


@MEDIUM
@given(kw=score_cases())
def test_retrieval_breakdown_and_score(kw: dict[str, Any]) -> None:
    _check_breakdown(kw)


@SLOW
@given(kw=score_cases(), missing=st.sampled_from([None, []]))
def test_retrieval_breakdown_missing_query_embedding(kw: dict[str, Any], missing: Any) -> None:
    kw["query_embedding"] = missing
    _check_breakdown(kw)


@SLOW
@given(kw=score_cases(), extra=st.integers(1, 3), shorter=st.booleans())
def test_unequal_embedding_lengths_raise(kw: dict[str, Any], extra: int, shorter: bool) -> None:
    dim = len(kw["query_embedding"])
    longer = [0.5, -0.25, 0.125, 1.0, 0.3, -0.7, 0.2, 0.9][: dim + extra]
    if shorter:  # the memory's embedding is the shorter one
        kw["query_embedding"] = longer
        emb = longer[:dim]
    else:
        emb = longer
    kw["memory"] = kw["memory"].model_copy(update={"embedding": emb})
    with pytest.raises(ValueError):
        O.semantic_similarity(kw["query_embedding"], kw["memory"].embedding)
    with pytest.raises(ValueError):
        retrieval_breakdown(**kw)
    with pytest.raises(ValueError):
        retrieval_score(**kw)


# --------------------------------------------------------------------------- SPEC 5


@st.composite
def banks(draw: st.DrawFn, dim: int = 3) -> list[Memory]:
    n = draw(st.integers(1, 7))
    mems: list[Memory] = []
    for _ in range(n):
        if mems and draw(st.integers(0, 4)) == 0:  # an exact duplicate -> exact score tie
            src = draw(st.sampled_from(mems))
            mems.append(Memory.create("dup", src.tag, embedding=src.embedding))
        else:
            mems.append(draw(memories(dim)))
    ids = [m.id for m in mems]
    out = []
    for m in mems:
        links = [
            ResonanceLink(
                source_id=m.id,
                target_id=draw(st.sampled_from([*ids, "ghost"])),
                strength=draw(st.one_of(st.floats(0.0, 1.0), st.just(0.0))),
                link_type=draw(st.sampled_from(LINK_TYPES)),
            )
            for _ in range(draw(st.integers(0, 3)))
        ]
        out.append(
            m.model_copy(update={"tag": m.tag.model_copy(update={"resonance_links": links})})
        )
    return out


def _ranked(rows: Any) -> list[tuple[str, float]]:
    return [(r.memory.id, r.score) for r in rows]


def _check_pass(
    got: Any,
    exp: list[tuple[str, float]],
    raws: dict[str, list[float]],
    weights: list[float],
    what: str,
) -> None:
    assert [i for i, _ in _ranked(got)] == [i for i, _ in exp], f"{what} order"
    for (gid, gs), (_, es) in zip(_ranked(got), exp, strict=True):
        assert_close(gs, es, f"{what} score {gid}")
    for r in got:
        assert_seq_close(r.breakdown.raw_signals.as_tuple(), raws[r.memory.id], f"{what} raw")
        assert_seq_close(r.breakdown.weights.as_tuple(), weights, f"{what} weights")
        assert r.breakdown.total_score == r.score


@SLOW
@given(
    bank=banks(),
    qemb=st.one_of(st.none(), st.lists(st.floats(-1.0, 1.0), min_size=3, max_size=3)),
    qa=affects,
    mood=moods,
    mom=momenta,
    now=times,
    dc=decay_configs,
    rc=retrieval_configs,
    top_k=st.integers(1, 8),
    hops=st.integers(1, 5),
    use_pre=st.booleans(),
)
def test_build_retrieval_plan(
    bank: list[Memory],
    qemb: list[float] | None,
    qa: CoreAffect,
    mood: MoodField,
    mom: AffectiveMomentum,
    now: datetime,
    dc: DecayConfig,
    rc: RetrievalConfig,
    top_k: int,
    hops: int,
    use_pre: bool,
) -> None:
    weights = _oracle_weights(mood, rc.base_weights, rc.adaptive_weights_config)
    exp = O.retrieval_plan(
        qemb,
        vad(qa),
        vad(mood),
        vel(mom),
        [omem(m) for m in bank],
        now,
        odecay(dc),
        weights,
        top_k,
        hops,
    )
    assume(not near_ties([s for _, s in exp.pass1]))
    assume(not near_ties([s for _, s in exp.pass2]))
    pre = np.array(weights, dtype=np.float64) if use_pre else None
    plan = build_retrieval_plan(
        qemb,
        qa,
        mood,
        mom,
        bank,
        now,
        dc,
        rc,
        top_k,
        propagation_hops=hops,
        precomputed_weights=pre,
    )
    assert_seq_close(plan.weights, weights, "plan.weights")
    _check_pass(plan.pass1, exp.pass1, exp.raw1, weights, "pass1")
    assert list(plan.seed_ids) == exp.seed_ids
    assert set(plan.activation_map) == set(exp.activation), "activation keys"
    for k, v in exp.activation.items():
        assert_close(plan.activation_map[k], v, f"activation[{k}]")
    _check_pass(plan.pass2, exp.pass2, exp.raw2, weights, "pass2")
    assert plan.candidate_count == len(bank)


@st.composite
def graphs(draw: st.DrawFn) -> tuple[list[Memory], list[str], int]:
    n = draw(st.integers(1, 8))
    ids = [f"n{i}" for i in range(n)]
    tag = EmotionalTag(
        core_affect=CoreAffect.neutral(),
        momentum=AffectiveMomentum.zero(),
        mood_snapshot=MoodField.neutral(BASE),
        timestamp=BASE,
        consolidation_strength=0.5,
    )
    mems = []
    for i in ids:
        links = [
            ResonanceLink(
                source_id=i,
                target_id=draw(st.sampled_from([*ids, "x", "y"])),
                strength=draw(st.one_of(st.floats(0.0, 1.0), st.sampled_from([0.0, 1.0]))),
                link_type=draw(st.sampled_from(LINK_TYPES)),
            )
            for _ in range(draw(st.integers(0, 4)))
        ]
        mems.append(Memory(id=i, content=i, tag=tag.model_copy(update={"resonance_links": links})))
    seeds = draw(st.lists(st.sampled_from([*ids, "x", "zz"]), max_size=4))
    return mems, seeds, draw(st.integers(1, 5))


@MEDIUM
@given(g=graphs())
def test_spreading_activation(g: tuple[list[Memory], list[str], int]) -> None:
    mems, seeds, hops = g
    exp = O.spreading_activation(seeds, [omem(m) for m in mems], hops)
    got = spreading_activation(seeds, mems, hops=hops)
    assert set(got) == set(exp)
    for k, v in exp.items():
        assert_close(got[k], v, f"activation[{k}]")
    assert not set(got) & set(seeds)
    if hops == 2:
        assert spreading_activation(seeds, mems) == got


# --------------------------------------------------------------------------- SPEC 6


@st.composite
def tag_with_expectation(draw: st.DrawFn) -> EmotionalTag:
    tag = draw(tags())
    return tag.model_copy(
        update={
            "expected_affect": draw(st.one_of(st.none(), affects)),
            "prediction_learning_rate": draw(st.one_of(st.floats(-0.5, 1.5), st.floats(0.05, 0.8))),
        }
    )


@FAST
@given(
    tag=tag_with_expectation(),
    obs=affects,
    lr=st.floats(0.0, 5.0),
    ape=st.one_of(st.floats(0.0, 3.0), st.sampled_from([0.0, 0.05, 0.8])),
)
def test_ape_reconsolidate_update_prediction(
    tag: EmotionalTag, obs: CoreAffect, lr: float, ape: float
) -> None:
    exp_aff = None if tag.expected_affect is None else vad(tag.expected_affect)
    assert_close(compute_ape(tag, obs), O.compute_ape(vad(tag.core_affect), exp_aff, vad(obs)))

    rec = reconsolidate(tag, obs, ape, lr)
    assert_seq_close(
        vad(rec.core_affect),
        O.reconsolidate(vad(tag.core_affect), vad(obs), ape, lr),
        "reconsolidate",
    )
    assert rec.reconsolidation_count == tag.reconsolidation_count + 1
    assert rec.model_dump(exclude={"core_affect", "reconsolidation_count"}) == tag.model_dump(
        exclude={"core_affect", "reconsolidation_count"}
    )

    up = update_prediction(tag, obs, ape)
    e_exp, e_lr = O.update_prediction(
        vad(tag.core_affect), exp_aff, tag.prediction_learning_rate, vad(obs), ape
    )
    assert up.expected_affect is not None
    assert_seq_close(vad(up.expected_affect), e_exp, "expected_affect")
    assert_close(up.prediction_learning_rate, e_lr, "prediction_learning_rate")
    assert up.model_dump(exclude={"expected_affect", "prediction_learning_rate"}) == tag.model_dump(
        exclude={"expected_affect", "prediction_learning_rate"}
    )


@FAST
@given(data=st.data(), inc=st.floats(0.0, 0.5))
def test_hebbian_strengthen(data: st.DataObject, inc: float) -> None:
    pool = ["a", "b", "c", "d"]
    links = [
        ResonanceLink(
            source_id="me",
            target_id=data.draw(st.sampled_from(pool)),
            strength=data.draw(st.one_of(unit, st.just(1.0), st.floats(0.9, 1.0))),
            link_type=data.draw(st.sampled_from(LINK_TYPES)),
        )
        for _ in range(data.draw(st.integers(0, 5)))
    ]
    tag = data.draw(tags()).model_copy(update={"resonance_links": links})
    mem = Memory(id="me", content="x", tag=tag)
    co = data.draw(st.lists(st.sampled_from([*pool, "me", "zz"]), max_size=5))
    got = hebbian_strengthen(mem, co, inc)
    exp = O.hebbian_strengthen(
        [(x.target_id, x.strength) for x in links], [c for c in co if c != mem.id], inc
    )
    assert [x.target_id for x in got] == [t for t, _ in exp]
    assert_seq_close([x.strength for x in got], [s for _, s in exp], "strengths")
    assert [(x.source_id, x.link_type) for x in got] == [(x.source_id, x.link_type) for x in links]


# --------------------------------------------------------------------------- SPEC 7


@FAST
@given(t1=times, t2=times, hl=st.one_of(st.floats(1e-3, 1e6), st.floats(-10.0, 0.0)))
def test_temporal_proximity(t1: datetime, t2: datetime, hl: float) -> None:
    assert_close(temporal_proximity(t1, t2, hl), O.temporal_proximity(t1, t2, hl))
    assert_close(temporal_proximity(t1, t2), O.temporal_proximity(t1, t2))


resonance_configs = st.one_of(
    st.just(ResonanceConfig()),
    st.builds(
        ResonanceConfig,
        threshold=st.floats(0.0, 0.9),
        max_links=st.integers(1, 6),
        semantic_weight=st.floats(0.0, 0.6),
        emotional_weight=st.floats(0.0, 0.4),
        temporal_weight=st.floats(0.0, 0.4),
        temporal_half_life_seconds=st.floats(1.0, 1e5),
        contrastive_temporal_threshold=unit,
        contrastive_valence_threshold=st.floats(0.0, 2.0),
        causal_temporal_threshold=unit,
        causal_semantic_threshold=signed,
    ),
)


@st.composite
def link_cases(draw: st.DrawFn) -> tuple[Memory, list[Memory], ResonanceConfig]:
    def one(new: bool) -> Memory:
        vec = st.lists(st.floats(-1.0, 1.0), min_size=3, max_size=3).filter(
            lambda v: math.sqrt(sum(x * x for x in v)) > 1e-3
        )
        emb_opts = [st.none(), vec, vec]
        if new:
            emb_opts.append(st.just([0.0, 0.0, 0.0]))
        tag = em.make_emotional_tag(
            draw(affects),
            draw(momenta),
            draw(moods),
            draw(unit),
            now=BASE
            + timedelta(
                seconds=draw(
                    st.one_of(st.just(0), st.integers(-600, 600), st.integers(-20000, 20000))
                )
            ),
        )
        return Memory.create("c", tag, embedding=draw(st.one_of(*emb_opts)))

    new = one(True)
    cands = [one(False) for _ in range(draw(st.integers(0, 8)))]
    if cands and draw(st.booleans()):  # the new memory itself among the candidates
        cands.insert(draw(st.integers(0, len(cands))), new)
    return new, cands, draw(resonance_configs)


def _type_is_ambiguous(new: O.OMemory, cand: O.OMemory, cfg: O.OResonance) -> bool:
    """A link-type decision that sits within round-off of a boundary."""
    sem = O.link_semantic(new.embedding, cand.embedding)
    emo = max(0.0, 1.0 - O.distance(new.affect, cand.affect) / O.SQRT6)
    temp = O.temporal_proximity(new.timestamp, cand.timestamp, cfg.temporal_half_life_seconds)
    pairs = [
        (temp, cfg.contrastive_temporal_threshold),
        (abs(new.affect[0] - cand.affect[0]), cfg.contrastive_valence_threshold),
        (temp, cfg.causal_temporal_threshold),
        (sem, cfg.causal_semantic_threshold),
        (sem, emo),
        (sem, temp),
        (emo, temp),
    ]
    return any(abs(a - b) < 1e-9 for a, b in pairs)


@MEDIUM
@given(case=link_cases())
def test_build_resonance_links(case: tuple[Memory, list[Memory], ResonanceConfig]) -> None:
    new, cands, cfg = case
    onew, ocands, ocfg = omem(new), [omem(c) for c in cands], oresonance(cfg)
    scores = []
    for c in ocands:
        if c.id == onew.id:
            continue
        sem = O.link_semantic(onew.embedding, c.embedding)
        emo = max(0.0, 1.0 - O.distance(onew.affect, c.affect) / O.SQRT6)
        temp = O.temporal_proximity(onew.timestamp, c.timestamp, ocfg.temporal_half_life_seconds)
        s = ocfg.semantic_weight * sem + ocfg.emotional_weight * emo + ocfg.temporal_weight * temp
        assume(abs(s - ocfg.threshold) > 1e-9)
        scores.append(s)
    assume(not near_ties(scores))
    exp = O.build_resonance_links(onew, ocands, ocfg)
    got = build_resonance_links(new, cands, cfg)
    assert [x.target_id for x in got] == [t for t, _, _ in exp]
    assert_seq_close([x.strength for x in got], [s for _, s, _ in exp], "strengths")
    by_id = {c.id: c for c in ocands}
    for link, (tid, _, kind) in zip(got, exp, strict=True):
        assert link.source_id == new.id and link.target_id != new.id
        if not _type_is_ambiguous(onew, by_id[tid], ocfg):
            assert link.link_type == kind, f"link type to {tid}"
    if cfg == ResonanceConfig():
        assert build_resonance_links(new, cands) == got


# --------------------------------------------------------------------------- SPEC 8


@FAST
@given(n=signed, g=signed, c=unit, nc=signed, s=unit)
def test_appraisal_to_core_affect(n: float, g: float, c: float, nc: float, s: float) -> None:
    got = AppraisalVector(
        novelty=n, goal_relevance=g, coping_potential=c, norm_congruence=nc, self_relevance=s
    ).to_core_affect()
    assert_seq_close(vad(got), O.appraisal_to_core_affect(n, g, c, nc, s), "to_core_affect")


def _categorize_ambiguous(v: float, a: float) -> bool:
    r, angle = O.plutchik_angle(v, a)
    edges = [abs(r - x) for x in (0.05, 0.3, 0.7)] + [abs(abs(v) - 0.05), abs(a - 0.05)]
    edges += [abs((angle - 22.5) % 45.0), abs((angle - 22.5) % 45.0 - 45.0)]
    return min(edges) < 1e-9


@FAST
@given(
    v=st.one_of(signed, st.floats(-0.1, 0.1), st.floats(-1.0, -0.3)),
    a=st.one_of(unit, st.floats(0.4, 0.6), st.floats(0.0, 0.1), st.floats(0.8, 1.0)),
    d=st.one_of(unit, st.just(0.5)),
    dom=st.one_of(st.none(), unit, st.just(0.5)),
)
def test_categorize_affect(v: float, a: float, d: float, dom: float | None) -> None:
    assume(not _categorize_ambiguous(v, a))
    label = em.categorize_affect(CoreAffect(valence=v, arousal=a, dominance=d), dom)
    primary, intensity, name, conf = O.categorize(v, a, dom)  # split only when dom given
    assert (label.primary, label.intensity) == (primary, intensity)
    if name is not None:
        assert label.name == name
    assert_close(label.confidence, conf, "confidence")


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
    tag = EmotionalTag(
        core_affect=CoreAffect.neutral(),
        momentum=AffectiveMomentum.zero(),
        mood_snapshot=MoodField.neutral(BASE),
        timestamp=BASE,
        consolidation_strength=0.5,
    )

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
