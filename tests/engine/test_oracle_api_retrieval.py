"""Public API vs. the oracle, SPEC 4-5: adaptive weights, the retrieval breakdown and
score, the retrieval plan and spreading activation.

Every public numeric function is compared with the independent plain-Python oracle
(``tests/support/oracle.py``) on random inputs to 1e-9 (float64).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import numpy as np
import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from emotional_memory import (
    AdaptiveWeightsConfig,
    AffectiveMomentum,
    CoreAffect,
    DecayConfig,
    Memory,
    MoodField,
    ResonanceLink,
    RetrievalConfig,
)
from emotional_memory.resonance import spreading_activation
from emotional_memory.retrieval import (
    adaptive_weights,
    build_retrieval_plan,
    retrieval_breakdown,
    retrieval_score,
)
from support import oracle as O
from support.oracle_cases import (
    BASE,
    FAST,
    LINK_TYPES,
    MEDIUM,
    SLOW,
    adaptive_configs,
    affects,
    assert_activation,
    assert_close,
    assert_seq_close,
    base_weight_lists,
    decay_configs,
    memories,
    momenta,
    moods,
    near_ties,
    neutral_tag,
    oadaptive,
    odecay,
    omem,
    retrieval_configs,
    signed,
    times,
    unit,
    vad,
    vel,
)

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
    assert_activation(plan.activation_map, exp.activation, "activation")
    _check_pass(plan.pass2, exp.pass2, exp.raw2, weights, "pass2")
    assert plan.candidate_count == len(bank)


@st.composite
def graphs(draw: st.DrawFn) -> tuple[list[Memory], list[str], int]:
    n = draw(st.integers(1, 8))
    ids = [f"n{i}" for i in range(n)]
    tag = neutral_tag()
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
    assert_activation(got, exp, "activation")
    assert not set(got) & set(seeds)
    if hops == 2:
        assert spreading_activation(seeds, mems) == got


def test_a_spread_below_float32_is_within_the_oracles_tolerance() -> None:
    # found by hypothesis: a link of strength 1.1e-308 spreads a float64 activation the
    # oracle records, which float32 rounds to 0 (unrecorded): within tolerance
    tag = neutral_tag()
    link = ResonanceLink(source_id="a", target_id="b", strength=1.1125369292536007e-308,
                         link_type=LINK_TYPES[0])
    mems = [Memory(id="a", content="a", tag=tag.model_copy(update={"resonance_links": [link]})),
            Memory(id="b", content="b", tag=tag)]
    exp = O.spreading_activation(["a"], [omem(m) for m in mems], 2)
    assert set(exp) == {"b"}
    assert_activation(spreading_activation(["a"], mems), exp, "activation")
