"""Appraisal schemas (SPEC 11 "Appraisal"): dimensions, projections, generic vectors."""

from __future__ import annotations

import math
from collections.abc import Mapping

import pytest
from hypothesis import given
from hypothesis import strategies as st

import emotional_memory
from emotional_memory.affect import CoreAffect
from emotional_memory.appraisal import AppraisalVector, GenericAppraisalVector
from emotional_memory.appraisal_schema import (
    DIRECT_VAD_SCHEMA,
    SCHERER_CPM_SCHEMA,
    AppraisalDimension,
    AppraisalSchema,
    coerce_appraisal_dimensions,
)

finite = st.floats(-5.0, 5.0, allow_nan=False)


def _oracle_scherer(
    n: float, g: float, c: float, nc: float, s: float
) -> tuple[float, float, float]:
    """SPEC 8 projection written out in plain floats, then CoreAffect's clamps."""
    cc = 2 * c - 1
    v = 0.4805 * g + 0.1862 * nc + 0.1643 * cc + 0.0179 * n
    a = 0.3694 * abs(n) + 0.1357 * (1 - c) + 0.2208 * s + 0.1399
    return (min(1.0, max(-1.0, v)), min(1.0, max(0.0, a)), min(1.0, max(0.0, c)))


def test_names_importable_from_every_path() -> None:
    for name in (
        "AppraisalDimension",
        "AppraisalSchema",
        "SCHERER_CPM_SCHEMA",
        "DIRECT_VAD_SCHEMA",
        "GenericAppraisalVector",
    ):
        assert name in emotional_memory.__all__
        assert getattr(emotional_memory, name) is not None
    assert emotional_memory.GenericAppraisalVector is GenericAppraisalVector
    from emotional_memory import appraisal

    assert appraisal.SCHERER_CPM_SCHEMA is SCHERER_CPM_SCHEMA
    assert appraisal.AppraisalSchema is AppraisalSchema


def test_builtin_schemas_dimensions() -> None:
    assert SCHERER_CPM_SCHEMA.name == "scherer_cpm"
    assert SCHERER_CPM_SCHEMA.dimension_names == (
        "novelty",
        "goal_relevance",
        "coping_potential",
        "norm_congruence",
        "self_relevance",
    )
    assert DIRECT_VAD_SCHEMA.name == "direct_vad"
    assert DIRECT_VAD_SCHEMA.dimension_names == ("valence", "arousal", "dominance")
    assert DIRECT_VAD_SCHEMA.dimension("valence").range == (-1.0, 1.0)
    assert DIRECT_VAD_SCHEMA.dimension("arousal").range == (0.0, 1.0)
    assert DIRECT_VAD_SCHEMA.neutral_values() == {"valence": 0.0, "arousal": 0.5, "dominance": 0.5}
    with pytest.raises(KeyError, match="nope"):
        DIRECT_VAD_SCHEMA.dimension("nope")
    js = SCHERER_CPM_SCHEMA.to_json_schema()
    assert js["required"] == list(SCHERER_CPM_SCHEMA.dimension_names)
    assert js["properties"]["coping_potential"]["minimum"] == 0.0
    assert js["additionalProperties"] is False
    assert SCHERER_CPM_SCHEMA.system_prompt and DIRECT_VAD_SCHEMA.system_prompt


@given(finite, finite, finite)
def test_direct_vad_is_identity_after_clamping(v: float, a: float, d: float) -> None:
    g = GenericAppraisalVector({"valence": v, "arousal": a, "dominance": d}, DIRECT_VAD_SCHEMA)
    ca = g.to_core_affect()
    assert g.schema_name == "direct_vad"
    assert (ca.valence, ca.arousal, ca.dominance) == (
        min(1.0, max(-1.0, v)),
        min(1.0, max(0.0, a)),
        min(1.0, max(0.0, d)),
    )


@given(
    st.floats(-1, 1),
    st.floats(-1, 1),
    st.floats(0, 1),
    st.floats(-1, 1),
    st.floats(0, 1),
)
def test_scherer_schema_equals_appraisal_vector_and_oracle(
    n: float, g: float, c: float, nc: float, s: float
) -> None:
    vals = {
        "novelty": n,
        "goal_relevance": g,
        "coping_potential": c,
        "norm_congruence": nc,
        "self_relevance": s,
    }
    generic = GenericAppraisalVector(vals, SCHERER_CPM_SCHEMA).to_core_affect()
    classic = AppraisalVector(**vals).to_core_affect()
    assert generic == classic
    exp = _oracle_scherer(n, g, c, nc, s)
    assert (classic.valence, classic.arousal, classic.dominance) == pytest.approx(exp, abs=1e-12)


def test_generic_vector_fills_neutral_ignores_unknown_and_is_immutable() -> None:
    g = GenericAppraisalVector({"valence": "0.25", "extra": 9}, DIRECT_VAD_SCHEMA)
    assert dict(g.dimensions) == {"valence": 0.25, "arousal": 0.5, "dominance": 0.5}
    assert list(g.dimensions) == ["valence", "arousal", "dominance"]
    assert g["valence"] == 0.25
    with pytest.raises(TypeError):
        g.dimensions["valence"] = 1.0  # type: ignore[index]
    with pytest.raises(AttributeError):
        g.foo = 1
    same = GenericAppraisalVector({"valence": 0.25}, DIRECT_VAD_SCHEMA)
    assert g == same and hash(g) == hash(same)
    assert g != GenericAppraisalVector({"valence": 0.3}, DIRECT_VAD_SCHEMA)
    assert "direct_vad" in repr(g)


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf, "abc"])
def test_generic_vector_rejects_non_finite_naming_the_dimension(bad: object) -> None:
    with pytest.raises(ValueError, match="arousal"):
        GenericAppraisalVector({"arousal": bad}, DIRECT_VAD_SCHEMA)


@pytest.mark.parametrize("bad", [None, True, [1.0]])
def test_generic_vector_rejects_non_numbers(bad: object) -> None:
    with pytest.raises(TypeError, match="dominance"):
        GenericAppraisalVector({"dominance": bad}, DIRECT_VAD_SCHEMA)


def test_generic_vector_type_errors() -> None:
    with pytest.raises(TypeError, match="schema"):
        GenericAppraisalVector({}, "direct_vad")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="dimensions"):
        coerce_appraisal_dimensions([("valence", 1.0)], DIRECT_VAD_SCHEMA)  # type: ignore[arg-type]


def test_custom_schema() -> None:
    dims = (
        AppraisalDimension(name="pleasure", range=(0, 10), neutral=5, description="0 awful"),
        AppraisalDimension(name="energy", range=(0, 10), neutral=0),
    )

    def project(v: Mapping[str, float]) -> CoreAffect:
        return CoreAffect(valence=(v["pleasure"] - 5) / 5, arousal=v["energy"] / 10)

    schema = AppraisalSchema("ten_point", dims, "rate it", project)
    g = GenericAppraisalVector({"pleasure": 12, "energy": 3}, schema)
    assert dict(g.dimensions) == {"pleasure": 10.0, "energy": 3.0}
    ca = g.to_core_affect()
    assert (ca.valence, ca.arousal, ca.dominance) == (1.0, 0.3, 0.5)
    assert g.schema_name == "ten_point"


def test_schema_and_dimension_validation() -> None:
    with pytest.raises(ValueError, match="range"):
        AppraisalDimension(name="x", range=(1, 0), neutral=0.5)
    with pytest.raises(ValueError, match="neutral"):
        AppraisalDimension(name="x", range=(0, 1), neutral=2)
    with pytest.raises(ValueError, match="name"):
        AppraisalDimension(name=" ", range=(0, 1), neutral=0)
    d = AppraisalDimension(name="x", range=(0, 1), neutral=0)
    with pytest.raises(ValueError, match="duplicate"):
        AppraisalSchema("s", (d, d), "", lambda v: CoreAffect.neutral())
    with pytest.raises(ValueError, match="empty"):
        AppraisalSchema("s", (), "", lambda v: CoreAffect.neutral())
    with pytest.raises(TypeError, match=r"dimensions\[0\]"):
        AppraisalSchema("s", ("x",), "", lambda v: CoreAffect.neutral())  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="project_to_core_affect"):
        AppraisalSchema("s", (d,), "", None)  # type: ignore[arg-type]
    assert AppraisalSchema("s", [d], "", lambda v: CoreAffect.neutral()).dimensions == (d,)


@pytest.mark.parametrize("bad", [10**400, -(10**400)], ids=["huge", "-huge"])
def test_generic_vector_rejects_int_beyond_float_range_naming_the_dimension(bad: int) -> None:
    # float(10**400) raised a bare OverflowError (an LLM can answer such a number)
    with pytest.raises(ValueError, match="arousal"):
        GenericAppraisalVector({"arousal": bad}, DIRECT_VAD_SCHEMA)


@pytest.mark.parametrize(("field", "kw"), [
    ("range", {"range": (True, 2.0), "neutral": 1.5}),
    ("range", {"range": (0.0, True), "neutral": 0.5}),
    ("neutral", {"range": (0.0, 1.0), "neutral": True}),
])
def test_dimension_rejects_bools_as_numbers(field: str, kw: dict[str, object]) -> None:
    # pydantic's lax floats read True as 1.0
    with pytest.raises((TypeError, ValueError), match=field):
        AppraisalDimension(name="x", **kw)  # type: ignore[arg-type]


@pytest.mark.parametrize("answer", [
    '{"valence": 0.9}',
    '{"valence": 0.9, "arousal": 0.2}',
    '{"appraisal": {"dominance": 0.1}}',
])
def test_llm_answer_missing_a_schema_dimension_is_a_failure_not_neutral(answer: str) -> None:
    # a partial answer was neutral-filled ({"valence": 0.9} gave arousal 0.5, dominance
    # 0.5) and counted as a genuine appraisal; the original, like the Scherer path,
    # refuses it: fallback (counted, warned) or, without fallback, an error
    from emotional_memory.appraisal_llm import LLMAppraisalConfig, LLMAppraisalEngine

    cfg = LLMAppraisalConfig(appraisal_schema=DIRECT_VAD_SCHEMA, fallback_on_error=False)
    strict = LLMAppraisalEngine(lambda prompt, schema: answer, cfg)
    with pytest.raises(ValueError, match=r"missing field\(s\) \['(valence|arousal|dominance)'"):
        strict.appraise("x")
    assert strict.cache_len() == 0
    lenient = LLMAppraisalEngine(lambda prompt, schema: answer,
                                 LLMAppraisalConfig(appraisal_schema=DIRECT_VAD_SCHEMA))
    with pytest.warns(RuntimeWarning, match="missing"):
        got = lenient.appraise("x")
    assert got is lenient.fallback and lenient.fallback_count == 1


@pytest.mark.parametrize("returned", [None, {"valence": 0.9}, (0.9, 0.5, 0.5)])
def test_a_projection_that_gives_no_core_affect_is_refused_naming_the_schema(
    returned: object,
) -> None:
    # None (a projection missing its return) read as "no event affect": the memory was
    # stored silently with the current state's affect; other values failed later as
    # "new_affect must be a CoreAffect", naming neither the schema nor its projection
    from emotional_memory import EmotionalMemory, InMemoryStore
    from emotional_memory.appraisal import LLMAppraisalEngine
    from emotional_memory.appraisal_llm import LLMAppraisalConfig
    from emotional_memory.embedders.hashing import HashingEmbedder

    schema = AppraisalSchema(
        name="broken", dimensions=[AppraisalDimension(name="v", range=(-1, 1), neutral=0)],
        system_prompt="rate", project_to_core_affect=lambda values: returned,  # type: ignore[arg-type,return-value]
    )
    with pytest.raises(TypeError, match=r"'broken'.*project_to_core_affect.*CoreAffect"):
        GenericAppraisalVector({"v": 0.5}, schema).to_core_affect()
    engine = LLMAppraisalEngine(
        lambda prompt, json_schema: '{"v": 0.9}',
        LLMAppraisalConfig(appraisal_schema=schema, fallback_on_error=False),
    )
    memory = EmotionalMemory(InMemoryStore(), HashingEmbedder(), engine)
    before = memory.get_state()
    with pytest.raises(TypeError, match="project_to_core_affect"):
        memory.encode("the event")
    assert len(memory.store) == 0 and memory.get_state() == before
