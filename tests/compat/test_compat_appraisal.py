"""Drop-in compatibility with the original library 0.18.1 (SPEC 11): appraisal vectors and
engines, embedders, keyword rules.

The expectations are written from SPEC 11 (the facts checked against the original's
code), with plain-Python oracles where a number is involved; nothing here imports or
needs the original.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import emotional_memory as em
from emotional_memory import (
    DIRECT_VAD_SCHEMA,
    AppraisalVector,
    CoreAffect,
    LLMAppraisalConfig,
    LLMAppraisalEngine,
    LLMCallable,
    LLMQueryClassifier,
    StaticAppraisalEngine,
)
from support.compat_original import (
    _params,
    vad,
)

# --------------------------------------------------------------------------- appraisal


unbounded = st.floats(-10, 10, allow_nan=False)


@settings(max_examples=100, deadline=None)
@given(unbounded, unbounded, unbounded, unbounded, unbounded)
def test_appraisal_vector_clamps(n: float, g: float, c: float, nc: float, s: float) -> None:
    v = AppraisalVector(
        novelty=n, goal_relevance=g, coping_potential=c, norm_congruence=nc, self_relevance=s
    )
    assert (v.novelty, v.goal_relevance, v.norm_congruence) == tuple(
        min(1.0, max(-1.0, x)) for x in (n, g, nc)
    )
    assert (v.coping_potential, v.self_relevance) == tuple(min(1.0, max(0.0, x)) for x in (c, s))


def test_appraisal_vector_required_neutral_and_static_default() -> None:
    with pytest.raises(ValueError, match="novelty"):
        AppraisalVector(goal_relevance=0, coping_potential=0, norm_congruence=0, self_relevance=0)  # type: ignore[call-arg]
    with pytest.raises(ValueError, match="coping_potential"):
        AppraisalVector(
            novelty=0,
            goal_relevance=0,
            coping_potential=math.nan,
            norm_congruence=0,
            self_relevance=0,
        )
    neutral = AppraisalVector.neutral()
    assert neutral.model_dump() == {
        "novelty": 0.0,
        "goal_relevance": 0.0,
        "coping_potential": 0.5,
        "norm_congruence": 0.0,
        "self_relevance": 0.0,
    }
    assert StaticAppraisalEngine().appraise("anything") == neutral


def test_llm_callable_and_llm_engine_surface() -> None:
    def answer(prompt: str, schema: dict[str, Any]) -> str:
        return '{"valence": -0.5, "arousal": 0.75, "dominance": 0.25}'

    assert isinstance(answer, LLMCallable)
    cfg = LLMAppraisalConfig(appraisal_schema=DIRECT_VAD_SCHEMA)
    assert LLMAppraisalConfig().cache_size == 128
    eng = LLMAppraisalEngine(answer, cfg)
    got = eng.appraise("x")
    assert got == vad(-0.5, 0.75, 0.25)
    assert got.to_core_affect() == CoreAffect(valence=-0.5, arousal=0.75, dominance=0.25)
    assert "cached=1" in repr(eng)

    class Closable:
        closed = False

        def __call__(self, prompt: str, schema: dict[str, Any]) -> str:
            raise ConnectionError("down")

        def close(self) -> None:
            self.closed = True

    llm = Closable()
    fb = AppraisalVector(
        novelty=0.1,
        goal_relevance=0.2,
        coping_potential=0.3,
        norm_congruence=0.4,
        self_relevance=0.5,
    )
    eng2 = LLMAppraisalEngine(llm, fallback=fb)
    with pytest.warns(RuntimeWarning):
        assert eng2.appraise("a") == fb
    with pytest.warns(RuntimeWarning):
        assert eng2.appraise("b") == fb
    assert eng2.fallback_count == 2
    eng2.reset_fallback_count()
    assert eng2.fallback_count == 0
    eng2.close()
    assert llm.closed
    strict = LLMAppraisalEngine(llm, LLMAppraisalConfig(fallback_on_error=False))
    with pytest.raises(ConnectionError, match="down"):
        strict.appraise("c")


def test_llm_query_classifier_original_defaults() -> None:
    def boom(prompt: str, schema: dict[str, Any]) -> str:
        raise KeyError("exact")

    assert LLMQueryClassifier(boom).classify("q") == "open_domain"
    with pytest.raises(KeyError, match="exact"):
        LLMQueryClassifier(boom, fallback_on_error=False).classify("q")


# --------------------------------------------------------------------------- embedders


def test_sentence_transformer_embedder_original_surface(monkeypatch: Any) -> None:
    import sys
    import types

    created: list[tuple[str, dict[str, Any]]] = []

    class FakeModel:
        def __init__(self, name: str, **kwargs: Any) -> None:
            created.append((name, kwargs))

        def encode(self, items: list[str], **kwargs: Any) -> np.ndarray:
            return np.array([[3.0, 4.0]] * len(items))

    fake = types.ModuleType("sentence_transformers")
    fake.SentenceTransformer = FakeModel  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "sentence_transformers", fake)
    cls = em.SentenceTransformerEmbedder
    assert _params(cls)[0] == "model_name"
    assert cls(model_name="m1").model_name == "m1"
    assert cls.make_bge_small().model_name == "BAAI/bge-small-en-v1.5"
    assert cls.make_mpnet(device="cpu").model_name == "all-mpnet-base-v2"
    assert created == [
        ("m1", {}),
        ("BAAI/bge-small-en-v1.5", {}),
        ("all-mpnet-base-v2", {"device": "cpu"}),
    ]
    assert cls(model_name_or_path="legacy").embed("x") == [3.0, 4.0]


# --------------------------------------------------------------------------- keyword rules

DIMS = ("novelty", "goal_relevance", "coping_potential", "norm_congruence", "self_relevance")


def _delta_oracle(deltas: list[dict[str, float]]) -> dict[str, float]:
    """Original-form rules: mean of the non-zero deltas per dimension over the rules
    that fired, added to the neutral appraisal (coping 0.5), clamped."""
    base = {
        "novelty": 0.0,
        "goal_relevance": 0.0,
        "coping_potential": 0.5,
        "norm_congruence": 0.0,
        "self_relevance": 0.0,
    }
    for dim in DIMS:
        votes = [d[dim] for d in deltas if d[dim] != 0.0]
        if votes:
            base[dim] += sum(votes) / len(votes)
    lo = {"coping_potential": 0.0, "self_relevance": 0.0}
    return {k: min(1.0, max(lo.get(k, -1.0), v)) for k, v in base.items()}


delta = st.sampled_from([0.0, 0.0, -0.7, -0.2, 0.3, 0.9, 1.5])


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(*(delta for _ in DIMS)), min_size=1, max_size=4), st.data())
def test_original_form_keyword_rules(rows: list[tuple[float, ...]], data: Any) -> None:
    words = [f"word{i}" for i in range(len(rows))]
    rules = [
        em.KeywordRule(rf"\b{w}\b", **dict(zip(DIMS, row, strict=True)))
        for w, row in zip(words, rows, strict=True)
    ]
    present = data.draw(st.lists(st.sampled_from(words), unique=True))
    text = " and ".join(p.upper() for p in present)  # case-insensitive
    got = em.KeywordAppraisalEngine(rules).appraise(text)
    fired = [dict(zip(DIMS, rows[words.index(p)], strict=True)) for p in present]
    expected = _delta_oracle(fired)
    assert got.model_dump() == pytest.approx(expected, abs=1e-12)


def test_keyword_rule_forms_and_multilingual() -> None:
    rule = em.KeywordRule(r"\bwin\b", goal_relevance=0.6)
    assert repr(rule) == "KeywordRule(pattern='\\\\bwin\\\\b')"
    assert rule.matches("We WIN") and not rule.matches("winner")
    phrase = em.KeywordRule(keywords=["won"], appraisal={"goal_relevance": 0.8})
    assert phrase.matches("we won!") and not phrase.is_pattern_rule
    with pytest.raises(ValueError, match="pattern"):
        em.KeywordRule("(")
    with pytest.raises(ValueError, match="novelty"):
        em.KeywordRule("x", novelty=math.nan)
    with pytest.raises(ValueError, match="mixes"):
        em.KeywordAppraisalEngine([rule, phrase])
    multi = em.KeywordAppraisalEngine.make_multilingual()
    assert multi.appraise("Ho vinto la gara!").goal_relevance > 0.5
    assert multi.appraise("Il mio cane è morto").goal_relevance < -0.5
    assert multi.appraise("I won the race").goal_relevance > 0.5
