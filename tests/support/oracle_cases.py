"""Converters to the plain oracle's types and hypothesis strategies shared by the public
API vs. oracle tests (tests/engine/test_oracle_api_*.py)."""

from __future__ import annotations

import itertools
import math
from datetime import UTC, datetime, timedelta
from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

import emotional_memory as em
from emotional_memory import (
    AdaptiveWeightsConfig,
    AffectiveMomentum,
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
from support import oracle as O

TOL = 1e-9

BASE = datetime(2024, 1, 1, tzinfo=UTC)

FAST = settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])

MEDIUM = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])

SLOW = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])

LINK_TYPES = ["semantic", "emotional", "temporal", "causal", "contrastive"]


# --------------------------------------------------------------------------- helpers


def neutral_tag() -> EmotionalTag:
    """A neutral tag at :data:`BASE` (no links, consolidation 0.5), for link graphs."""
    return EmotionalTag(
        core_affect=CoreAffect.neutral(),
        momentum=AffectiveMomentum.zero(),
        mood_snapshot=MoodField.neutral(BASE),
        timestamp=BASE,
        consolidation_strength=0.5,
    )


def close(got: float, exp: float, tol: float = TOL) -> bool:
    return math.isclose(float(got), float(exp), rel_tol=tol, abs_tol=tol)


def assert_close(got: float, exp: float, what: str = "", tol: float = TOL) -> None:
    assert close(got, exp, tol), f"{what}: got {got!r}, expected {exp!r}"


def assert_seq_close(got: Any, exp: Any, what: str = "") -> None:
    got, exp = [float(x) for x in got], [float(x) for x in exp]
    assert len(got) == len(exp), f"{what}: length {len(got)} != {len(exp)}"
    for i, (g, e) in enumerate(zip(got, exp, strict=True)):
        assert_close(g, e, f"{what}[{i}]")


FLOAT32_TINY = 1.1754943508222875e-38
"""float32's smallest normal number: the kernel spreads activation in float32."""


def assert_activation(got: dict[str, float], exp: dict[str, float], what: str = "") -> None:
    """``got`` (the library's activation map) against the float64 oracle's ``exp``: the
    same keys, except that a spread the oracle keeps below float32's smallest normal
    (a path over links of strength ~1e-308) may round to 0 in the kernel and go
    unrecorded; each value within the tolerance."""
    kept = {k for k, v in exp.items() if v >= FLOAT32_TINY}
    assert kept <= set(got) <= set(exp), f"{what}: keys {sorted(got)} vs {sorted(exp)}"
    for k, v in exp.items():
        assert_close(got.get(k, 0.0), v, f"{what}[{k}]")


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
