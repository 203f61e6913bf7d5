"""Public API vs. the oracle, SPEC 6-8: prediction error and reconsolidation, Hebbian and
resonance links, appraisal to affect and categorisation.

Every public numeric function is compared with the independent plain-Python oracle
(``tests/support/oracle.py``) on random inputs to 1e-9 (float64).
"""

from __future__ import annotations

import math
from datetime import datetime, timedelta

from hypothesis import assume, given
from hypothesis import strategies as st

import emotional_memory as em
from emotional_memory import (
    AppraisalVector,
    CoreAffect,
    EmotionalTag,
    Memory,
    ResonanceConfig,
    ResonanceLink,
)
from emotional_memory.resonance import (
    build_resonance_links,
    hebbian_strengthen,
    temporal_proximity,
)
from emotional_memory.retrieval import (
    compute_ape,
    reconsolidate,
    update_prediction,
)
from support import oracle as O
from support.oracle_cases import (
    BASE,
    FAST,
    LINK_TYPES,
    MEDIUM,
    affects,
    assert_close,
    assert_seq_close,
    momenta,
    moods,
    near_ties,
    omem,
    oresonance,
    signed,
    tags,
    times,
    unit,
    vad,
)

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
        causal_semantic_threshold=unit,
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
