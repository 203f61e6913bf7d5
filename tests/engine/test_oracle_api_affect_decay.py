"""Public API vs. the oracle, SPEC 1-3: core affect, momentum, mood, affective state,
consolidation and decay.

Every public numeric function is compared with the independent plain-Python oracle
(``tests/support/oracle.py``) on random inputs to 1e-9 (float64).
"""

from __future__ import annotations

import json
import math
from datetime import datetime, timedelta

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import emotional_memory as em
from emotional_memory import (
    AffectiveMomentum,
    AffectiveState,
    CoreAffect,
    DecayConfig,
    EmotionalTag,
    MoodDecayConfig,
    MoodField,
)
from emotional_memory.decay import compute_effective_strength, compute_effective_strength_batch
from support import oracle as O
from support.oracle_cases import (
    BASE,
    FAST,
    MEDIUM,
    affects,
    assert_close,
    assert_mood_eq,
    assert_seq_close,
    decay_configs,
    mom6,
    momenta,
    mood_decays,
    moods,
    odecay,
    odecaymood,
    omood,
    signed,
    times,
    unit,
    vad,
    vel,
    wide,
)

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
