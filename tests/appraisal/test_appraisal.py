"""Tests for emotional_memory.appraisal (SPEC 8 appraisal, SPEC 9 bad input)."""

from __future__ import annotations

import json
import math
import warnings
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from emotional_memory import EmotionalMemory, InMemoryStore
from emotional_memory.affect import CoreAffect
from emotional_memory.appraisal import (
    APPRAISAL_DIMENSIONS,
    DEFAULT_KEYWORD_RULES,
    AppraisalVector,
    KeywordAppraisalEngine,
    KeywordRule,
    LLMAppraisalConfig,
    LLMAppraisalEngine,
    LLMCallable,
    StaticAppraisalEngine,
)
from emotional_memory.embedders import HashingEmbedder
from support.fake_llm import FakeLLM

DIMS = list(APPRAISAL_DIMENSIONS)

signed = st.floats(min_value=-1.0, max_value=1.0, allow_nan=False, allow_infinity=False)
unit = st.floats(min_value=0.0, max_value=1.0, allow_nan=False, allow_infinity=False)
vectors = st.builds(
    AppraisalVector,
    novelty=signed,
    goal_relevance=signed,
    coping_potential=unit,
    norm_congruence=signed,
    self_relevance=unit,
)


def spec_core_affect(
    novelty: float, goal: float, coping: float, norm: float, self_rel: float
) -> tuple[float, float, float]:
    """SPEC 8 formula in plain Python, clamped like CoreAffect."""
    c = 2 * coping - 1
    valence = 0.4805 * goal + 0.1862 * norm + 0.1643 * c + 0.0179 * novelty
    arousal = 0.3694 * abs(novelty) + 0.1357 * (1 - coping) + 0.2208 * self_rel + 0.1399
    return (
        max(-1.0, min(1.0, valence)),
        max(0.0, min(1.0, arousal)),
        max(0.0, min(1.0, coping)),
    )


#: Filler for the fields a test leaves out (self-relevance 0.5, the old default).
LEGACY_DEFAULT = AppraisalVector(
    novelty=0.0, goal_relevance=0.0, coping_potential=0.5, norm_congruence=0.0, self_relevance=0.5
)
#: KeywordAppraisalEngine's answer when no rule fires: neutral, as the original.
KEYWORD_DEFAULT = AppraisalVector.neutral()


def make_vec(**fields: float) -> AppraisalVector:
    """An AppraisalVector with the given fields, the rest from LEGACY_DEFAULT."""
    return AppraisalVector(**{**LEGACY_DEFAULT.model_dump(), **fields})


def has_protocol_shape(engine: object) -> bool:
    """Structural check matching the AppraisalEngine protocol (appraise method)."""
    return callable(getattr(engine, "appraise", None))


# --------------------------------------------------------------------------- AppraisalVector


class TestAppraisalVector:
    def test_fields_required_and_neutral(self) -> None:
        # SPEC 11: the five fields are required; neutral() is the no-information vector.
        with pytest.raises(ValueError, match="self_relevance"):
            AppraisalVector(novelty=0, goal_relevance=0, coping_potential=0.5, norm_congruence=0)
        assert AppraisalVector.neutral().model_dump() == {
            "novelty": 0.0,
            "goal_relevance": 0.0,
            "coping_potential": 0.5,
            "norm_congruence": 0.0,
            "self_relevance": 0.0,
        }
        assert AppraisalVector.neutral().schema_name == "scherer_cpm"

    def test_neutral_core_affect_hand_computed(self) -> None:
        ca = LEGACY_DEFAULT.to_core_affect()
        assert isinstance(ca, CoreAffect)
        assert ca.valence == pytest.approx(0.0)
        # 0.1357 * 0.5 + 0.2208 * 0.5 + 0.1399
        assert ca.arousal == pytest.approx(0.31815)
        assert ca.dominance == pytest.approx(0.5)

    def test_hand_computed_example(self) -> None:
        v = AppraisalVector(
            novelty=-0.5,
            goal_relevance=0.8,
            coping_potential=0.9,
            norm_congruence=0.4,
            self_relevance=1.0,
        )
        ca = v.to_core_affect()
        # c = 0.8; 0.3844 + 0.07448 + 0.13144 - 0.00895
        assert ca.valence == pytest.approx(0.58137)
        # 0.1847 + 0.01357 + 0.2208 + 0.1399
        assert ca.arousal == pytest.approx(0.55897)
        assert ca.dominance == pytest.approx(0.9)

    def test_extreme_negative(self) -> None:
        v = AppraisalVector(
            novelty=1.0,
            goal_relevance=-1.0,
            coping_potential=0.0,
            norm_congruence=-1.0,
            self_relevance=1.0,
        )
        ca = v.to_core_affect()
        assert ca.valence == pytest.approx(-0.4805 - 0.1862 - 0.1643 + 0.0179)
        assert ca.arousal == pytest.approx(0.3694 + 0.1357 + 0.2208 + 0.1399)
        assert ca.dominance == 0.0

    @settings(max_examples=200, deadline=None)
    @given(vectors)
    def test_formula_matches_spec(self, v: AppraisalVector) -> None:
        expected = spec_core_affect(
            v.novelty, v.goal_relevance, v.coping_potential, v.norm_congruence, v.self_relevance
        )
        got = v.to_core_affect().as_tuple()
        for g, e in zip(got, expected, strict=True):
            assert math.isclose(g, e, rel_tol=1e-12, abs_tol=1e-12)

    @pytest.mark.parametrize(
        ("field", "value"),
        [
            ("novelty", 1.01),
            ("novelty", -1.5),
            ("goal_relevance", 2.0),
            ("norm_congruence", -1.01),
            ("coping_potential", -0.1),
            ("coping_potential", 1.1),
            ("self_relevance", 1.5),
            ("self_relevance", -0.01),
        ],
    )
    def test_out_of_range_is_clamped(self, field: str, value: float) -> None:
        # SPEC 11: finite out-of-range values are clamped, as in the original.
        low, high = (0.0, 1.0) if field in ("coping_potential", "self_relevance") else (-1.0, 1.0)
        assert getattr(make_vec(**{field: value}), field) == min(high, max(low, value))

    @pytest.mark.parametrize("field", DIMS)
    @pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf])
    def test_non_finite_raises_naming_field(self, field: str, value: float) -> None:
        with pytest.raises(ValueError, match=field):
            AppraisalVector(**{field: value})

    def test_frozen(self) -> None:
        v = AppraisalVector.neutral()
        with pytest.raises(ValueError):
            v.novelty = 0.3  # type: ignore[misc]


# --------------------------------------------------------------------------- static


class TestStaticEngine:
    def test_returns_vector(self) -> None:
        vec = make_vec(novelty=0.3, goal_relevance=-0.2)
        eng = StaticAppraisalEngine(vec)
        assert eng.appraise("anything") is vec
        assert eng.appraise("other", {"k": 1}) is vec
        assert eng.vector is vec
        assert has_protocol_shape(eng)
        assert "StaticAppraisalEngine" in repr(eng)

    def test_bad_vector(self) -> None:
        with pytest.raises(TypeError, match="vector"):
            StaticAppraisalEngine({"novelty": 0.1})  # type: ignore[arg-type]

    def test_bad_content_and_context(self) -> None:
        eng = StaticAppraisalEngine(AppraisalVector.neutral())
        with pytest.raises(TypeError, match="event_text"):
            eng.appraise(42)  # type: ignore[arg-type]
        with pytest.raises(TypeError, match="context"):
            eng.appraise("x", ["not", "a", "dict"])  # type: ignore[arg-type]


# --------------------------------------------------------------------------- keyword rules

EXAMPLES: dict[str, str] = {
    "loss": "My grandmother passed away last night.",
    "threat": "I was terrified when the car skidded towards us.",
    "success": "We finally won the championship!",
    "praise": "My manager praised my report in front of everyone.",
    "conflict": "We argued for an hour and he blamed me for everything.",
    "surprise": "Out of nowhere she showed up at my door.",
    "relief": "I was so relieved when the results came back clear.",
    "injustice": "It is unfair that they cheated and got away with it.",
    "novelty": "Today I went scuba diving for the first time.",
    "failure": "I failed the driving test again.",
    "affection": "We hugged at the airport after two years apart.",
    "routine": "Another mundane day at the office, nothing happened.",
}


class TestKeywordRule:
    def test_normalises_keywords(self) -> None:
        r = KeywordRule(keywords=["  Hello   World ", "HI", "hi"], appraisal={"novelty": 0.5})
        assert r.keywords == ["hello world", "hi"]
        assert r.weight == 1.0

    def test_accepts_appraisal_vector(self) -> None:
        vec = make_vec(novelty=0.4)
        r = KeywordRule(keywords=["x"], appraisal=vec)
        assert r.appraisal == vec.model_dump()

    def test_frozen(self) -> None:
        r = KeywordRule(keywords=["x"], appraisal={"novelty": 0.5})
        with pytest.raises(ValueError):
            r.weight = 2.0  # type: ignore[misc]

    @pytest.mark.parametrize("keywords", [[], [""], ["   "]])
    def test_empty_keywords(self, keywords: list[str]) -> None:
        with pytest.raises(ValueError, match="keywords"):
            KeywordRule(keywords=keywords, appraisal={"novelty": 0.5})

    def test_keywords_type(self) -> None:
        with pytest.raises((TypeError, ValueError), match="keywords"):
            KeywordRule(keywords="single string", appraisal={"novelty": 0.5})
        with pytest.raises((TypeError, ValueError), match="keywords"):
            KeywordRule(keywords=["ok", 3], appraisal={"novelty": 0.5})

    def test_bad_appraisal(self) -> None:
        with pytest.raises(ValueError, match="appraisal"):
            KeywordRule(keywords=["x"], appraisal={})
        with pytest.raises(ValueError, match="happiness"):
            KeywordRule(keywords=["x"], appraisal={"happiness": 0.5})
        with pytest.raises(ValueError, match="coping_potential"):
            KeywordRule(keywords=["x"], appraisal={"coping_potential": -0.5})
        with pytest.raises(ValueError, match="novelty"):
            KeywordRule(keywords=["x"], appraisal={"novelty": math.nan})
        with pytest.raises((TypeError, ValueError), match="appraisal"):
            KeywordRule(keywords=["x"], appraisal=[0.1, 0.2])

    @pytest.mark.parametrize("weight", [0.0, -1.0, math.nan, math.inf])
    def test_bad_weight(self, weight: float) -> None:
        with pytest.raises(ValueError, match="weight"):
            KeywordRule(keywords=["x"], appraisal={"novelty": 0.5}, weight=weight)


class TestKeywordEngine:
    def test_default_rule_set_size_and_names(self) -> None:
        names = [r.name for r in DEFAULT_KEYWORD_RULES]
        assert 8 <= len(names) <= 12
        assert len(set(names)) == len(names)
        assert set(names) == set(EXAMPLES)

    @pytest.mark.parametrize("name", sorted(EXAMPLES))
    def test_each_default_rule_fires(self, name: str) -> None:
        eng = KeywordAppraisalEngine()
        fired = {r.name for r, _ in eng.matches(EXAMPLES[name])}
        assert name in fired
        assert eng.appraise(EXAMPLES[name]) != eng.default

    @pytest.mark.parametrize(
        ("name", "sign"),
        [
            ("loss", -1),
            ("threat", -1),
            ("failure", -1),
            ("injustice", -1),
            ("conflict", -1),
            ("success", 1),
            ("praise", 1),
            ("relief", 1),
            ("affection", 1),
        ],
    )
    def test_default_rules_valence_direction(self, name: str, sign: int) -> None:
        ca = KeywordAppraisalEngine().appraise(EXAMPLES[name]).to_core_affect()
        assert ca.valence * sign > 0.1

    def test_surprise_and_routine_novelty(self) -> None:
        eng = KeywordAppraisalEngine()
        assert eng.appraise(EXAMPLES["surprise"]).novelty > 0.5
        assert eng.appraise(EXAMPLES["routine"]).novelty < -0.5
        assert eng.appraise(EXAMPLES["injustice"]).norm_congruence < -0.5

    def test_threat_more_arousing_than_routine(self) -> None:
        eng = KeywordAppraisalEngine()
        threat = eng.appraise(EXAMPLES["threat"]).to_core_affect()
        routine = eng.appraise(EXAMPLES["routine"]).to_core_affect()
        assert threat.arousal > routine.arousal
        assert threat.dominance < routine.dominance

    def test_no_match_returns_default(self) -> None:
        eng = KeywordAppraisalEngine()
        assert eng.appraise("The sky has some clouds.") == KEYWORD_DEFAULT
        assert eng.appraise("") == KEYWORD_DEFAULT
        custom = make_vec(novelty=0.1, self_relevance=0.2)
        eng2 = KeywordAppraisalEngine(default=custom)
        assert eng2.appraise("The sky has some clouds.") is custom

    def test_whole_word_matching(self) -> None:
        rule = KeywordRule(keywords=["win", "fire"], appraisal={"goal_relevance": 0.9})
        eng = KeywordAppraisalEngine([rule])
        for text in ["a window", "twine", "winter", "bonfires", "fireplace", "Firewall"]:
            assert eng.matches(text) == [], text
            assert eng.appraise(text) == KEYWORD_DEFAULT
        for text in ["We WIN!", "win", "fire.", "(fire)", "Fire, fire"]:
            assert eng.matches(text), text
            assert eng.appraise(text).goal_relevance == pytest.approx(0.9)

    def test_default_rules_whole_word(self) -> None:
        eng = KeywordAppraisalEngine()
        # "news" contains "new", "deadline" contains "dead", "winter" contains "win".
        assert eng.matches("The newsletter arrived in winter near the deadline.") == []

    def test_case_insensitive_phrases(self) -> None:
        rule = KeywordRule(keywords=["first time"], appraisal={"novelty": 0.8})
        eng = KeywordAppraisalEngine([rule])
        assert eng.matches("It was my FIRST   Time abroad")
        assert eng.matches("the first\ntime")
        assert eng.matches("firsttime") == []
        assert eng.matches("first timer") == []

    def test_hits_counted(self) -> None:
        rule = KeywordRule(keywords=["panic", "panic attack"], appraisal={"novelty": 0.8})
        eng = KeywordAppraisalEngine([rule])
        assert eng.matches("panic attack, then panic") == [(rule, 2)]

    def test_multiple_rules_weighted_average(self) -> None:
        a = KeywordRule(
            keywords=["alpha"], appraisal={"novelty": 0.8, "goal_relevance": 0.6}, weight=1.0
        )
        b = KeywordRule(
            keywords=["beta"], appraisal={"novelty": -0.4, "coping_potential": 0.1}, weight=2.0
        )
        default = make_vec(norm_congruence=0.3, self_relevance=0.7)
        eng = KeywordAppraisalEngine([a, b], default=default)
        v = eng.appraise("alpha beta")
        assert v.novelty == pytest.approx((0.8 * 1 + -0.4 * 2) / 3)
        # Dimensions only one rule mentions take that rule's value.
        assert v.goal_relevance == pytest.approx(0.6)
        assert v.coping_potential == pytest.approx(0.1)
        # Dimensions no fired rule mentions come from the default.
        assert v.norm_congruence == pytest.approx(0.3)
        assert v.self_relevance == pytest.approx(0.7)

    def test_hits_weight_the_average(self) -> None:
        a = KeywordRule(keywords=["alpha"], appraisal={"novelty": 0.9})
        b = KeywordRule(keywords=["beta"], appraisal={"novelty": -0.3})
        eng = KeywordAppraisalEngine([a, b])
        v = eng.appraise("alpha alpha alpha beta")
        assert v.novelty == pytest.approx((3 * 0.9 - 0.3) / 4)

    def test_default_rules_combine(self) -> None:
        eng = KeywordAppraisalEngine()
        text = "I was terrified at first, but then relieved."
        fired = {r.name for r, _ in eng.matches(text)}
        assert {"threat", "relief"} <= fired
        v = eng.appraise(text)
        threat = eng.appraise("I was terrified.")
        relief = eng.appraise("I was relieved.")
        assert min(threat.goal_relevance, relief.goal_relevance) < v.goal_relevance
        assert v.goal_relevance < max(threat.goal_relevance, relief.goal_relevance)

    @settings(max_examples=150, deadline=None)
    @given(
        st.lists(
            st.sampled_from(
                [kw for r in DEFAULT_KEYWORD_RULES for kw in r.keywords]
                + ["the", "and", "cat", "window", "!", ",", "\n"]
            ),
            max_size=25,
        )
    )
    def test_results_always_valid(self, words: list[str]) -> None:
        v = KeywordAppraisalEngine().appraise(" ".join(words))
        assert isinstance(v, AppraisalVector)
        for name, (low, high) in APPRAISAL_DIMENSIONS.items():
            value = getattr(v, name)
            assert math.isfinite(value)
            assert low <= value <= high
        # Revalidates without error.
        AppraisalVector(**v.model_dump())

    @settings(max_examples=100, deadline=None)
    @given(st.text(max_size=200))
    def test_arbitrary_text_never_fails(self, text: str) -> None:
        assert isinstance(KeywordAppraisalEngine().appraise(text), AppraisalVector)

    def test_custom_rules_only(self) -> None:
        rule = KeywordRule(
            keywords=["deploy failed", "outage"],
            appraisal={"goal_relevance": -0.9, "coping_potential": 0.2, "self_relevance": 1.0},
            name="ops",
        )
        eng = KeywordAppraisalEngine([rule])
        assert eng.rules == (rule,)
        v = eng.appraise("The deploy failed and caused an outage.")
        assert v.goal_relevance == pytest.approx(-0.9)
        assert v.coping_potential == pytest.approx(0.2)
        assert v.self_relevance == pytest.approx(1.0)
        assert v.novelty == 0.0
        # Default rules are not used when custom rules are given.
        assert eng.appraise("My dog died.") == KEYWORD_DEFAULT

    def test_empty_rules(self) -> None:
        eng = KeywordAppraisalEngine([])
        assert eng.appraise("My dog died.") == KEYWORD_DEFAULT

    def test_context_accepted(self) -> None:
        eng = KeywordAppraisalEngine()
        assert eng.appraise(EXAMPLES["loss"], {"who": "me"}) == eng.appraise(EXAMPLES["loss"])
        assert has_protocol_shape(eng)

    def test_type_errors(self) -> None:
        with pytest.raises(TypeError, match="rules"):
            KeywordAppraisalEngine(["not a rule"])  # type: ignore[list-item]
        with pytest.raises(TypeError, match="rules"):
            KeywordAppraisalEngine("loss")  # type: ignore[arg-type]
        with pytest.raises(TypeError, match="default"):
            KeywordAppraisalEngine(default={"novelty": 0.1})  # type: ignore[arg-type]
        eng = KeywordAppraisalEngine()
        with pytest.raises(TypeError, match="content"):
            eng.appraise(None)  # type: ignore[arg-type]
        with pytest.raises(TypeError, match="content"):
            eng.matches(b"bytes")  # type: ignore[arg-type]
        with pytest.raises(TypeError, match="context"):
            eng.appraise("x", "ctx")  # type: ignore[arg-type]


# --------------------------------------------------------------------------- LLM

GOOD = {
    "novelty": 0.6,
    "goal_relevance": -0.4,
    "coping_potential": 0.3,
    "norm_congruence": 0.1,
    "self_relevance": 0.9,
}
GOOD_VEC = AppraisalVector(**GOOD)


def no_cache(**kw: Any) -> LLMAppraisalConfig:
    return LLMAppraisalConfig(cache_size=0, **kw)


class TestLLMConfig:
    def test_defaults(self) -> None:
        cfg = LLMAppraisalConfig()
        assert cfg.cache_size == 128  # the original's default
        assert cfg.fallback is None
        assert cfg.fallback_on_error is True
        assert cfg.include_context is True
        assert isinstance(cfg.system_prompt, str) and cfg.system_prompt

    @pytest.mark.parametrize("bad", [-1, -100])
    def test_negative_cache_size(self, bad: int) -> None:
        with pytest.raises(ValueError, match="cache_size"):
            LLMAppraisalConfig(cache_size=bad)

    @pytest.mark.parametrize("bad", [True, 1.5, "3"])
    def test_cache_size_type(self, bad: Any) -> None:
        with pytest.raises((TypeError, ValueError), match="cache_size"):
            LLMAppraisalConfig(cache_size=bad)

    def test_frozen(self) -> None:
        cfg = LLMAppraisalConfig()
        with pytest.raises(ValueError):
            cfg.cache_size = 3  # type: ignore[misc]


class TestLLMEngine:
    @pytest.mark.parametrize(
        "answer",
        [
            json.dumps(GOOD),
            "  " + json.dumps(GOOD, indent=2) + "\n",
            "```json\n" + json.dumps(GOOD) + "\n```",
            "```\n" + json.dumps(GOOD) + "\n```",
            "Here is my appraisal:\n```json\n" + json.dumps(GOOD) + "\n```\nHope it helps.",
            "Sure! " + json.dumps(GOOD) + " Let me know if you need more.",
            "Thinking {not json} ... answer: " + json.dumps(GOOD) + ' {"x": 1}',
            json.dumps({"appraisal": GOOD}),
            json.dumps({**GOOD, "explanation": "extra fields are ignored"}),
            json.dumps({k: str(v) for k, v in GOOD.items()}),
        ],
    )
    def test_parses_answers(self, answer: str) -> None:
        eng = LLMAppraisalEngine(FakeLLM(answer), no_cache(fallback_on_error=False))
        assert eng.appraise("My bike was stolen.") == GOOD_VEC

    def test_clamps_slightly_out_of_range(self) -> None:
        answer = json.dumps(
            {
                "novelty": 1.2,
                "goal_relevance": -1.05,
                "coping_potential": -0.1,
                "norm_congruence": 0.0,
                "self_relevance": 1.3,
            }
        )
        eng = LLMAppraisalEngine(FakeLLM(answer), no_cache(fallback_on_error=False))
        v = eng.appraise("x")
        assert (v.novelty, v.goal_relevance, v.coping_potential, v.self_relevance) == (
            1.0,
            -1.0,
            0.0,
            1.0,
        )

    @pytest.mark.parametrize("value", [5.0, -3, 1e9, -1e300, 1.0000001, 7])
    def test_far_out_of_range_values_are_clamped_as_the_original(self, value: float) -> None:
        # the original clamps any finite value (novelty 5.0 -> 1.0; coping
        # 9 -> 1.0), it does not fall back to the neutral vector
        answer = json.dumps({**GOOD, "novelty": value, "coping_potential": value})
        eng = LLMAppraisalEngine(FakeLLM(answer), no_cache(fallback_on_error=False))
        got = eng.appraise("event")
        assert got.novelty == min(1.0, max(-1.0, float(value)))
        assert got.coping_potential == min(1.0, max(0.0, float(value)))
        assert got.goal_relevance == GOOD["goal_relevance"]
        assert eng.fallback_count == 0

    @pytest.mark.parametrize(
        "answer",
        [
            "",
            "no json here",
            "[1, 2, 3]",
            json.dumps({k: v for k, v in GOOD.items() if k != "self_relevance"}),
            json.dumps({**GOOD, "novelty": "high"}),
            json.dumps({**GOOD, "novelty": None}),
            json.dumps({**GOOD, "novelty": True}),
            json.dumps({**GOOD, "novelty": [0.1]}),
            '{"novelty": NaN, "goal_relevance": 0, "coping_potential": 0.5,'
            ' "norm_congruence": 0, "self_relevance": 0.5}',
            "```json\n{broken\n```",
        ],
    )
    def test_bad_answers_raise_when_no_fallback(self, answer: str) -> None:
        eng = LLMAppraisalEngine(FakeLLM(answer), no_cache(fallback_on_error=False))
        with pytest.raises(ValueError, match="LLM appraisal failed") as info:
            eng.appraise("x")
        assert info.value.__cause__ is not None

    def test_missing_field_named(self) -> None:
        answer = json.dumps({k: v for k, v in GOOD.items() if k != "norm_congruence"})
        eng = LLMAppraisalEngine(FakeLLM(answer), no_cache(fallback_on_error=False))
        with pytest.raises(ValueError, match="norm_congruence"):
            eng.appraise("x")

    def test_llm_exception_propagates_unchanged(self) -> None:
        # SPEC 11 / the original: the callable's own exception, not a wrapper
        boom = RuntimeError("network down")
        eng = LLMAppraisalEngine(FakeLLM(boom), no_cache(fallback_on_error=False))
        with pytest.raises(RuntimeError, match="network down") as info:
            eng.appraise("x")
        assert info.value is boom
        assert eng.fallback_count == 0

    def test_non_str_answer(self) -> None:
        eng = LLMAppraisalEngine(FakeLLM(GOOD), no_cache(fallback_on_error=False))
        with pytest.raises(ValueError) as info:
            eng.appraise("x")
        assert isinstance(info.value.__cause__, TypeError)

    def test_fallback_with_warning_default_neutral(self) -> None:
        eng = LLMAppraisalEngine(FakeLLM("garbage"))
        with pytest.warns(RuntimeWarning, match="LLM appraisal failed") as caught:
            v = eng.appraise("x")
        assert v == AppraisalVector.neutral()
        assert eng.fallback == AppraisalVector.neutral()
        assert [w.filename for w in caught] == [__file__]  # the caller's line
        engine = EmotionalMemory(InMemoryStore(), HashingEmbedder(dim=16), appraisal_engine=eng)
        with pytest.warns(RuntimeWarning, match="LLM appraisal failed") as through:
            engine.encode("through the engine, whose internals the warning skips")
        assert [w.filename for w in through] == [__file__]

    def test_fallback_custom_vector(self) -> None:
        fb = make_vec(novelty=-0.2, self_relevance=0.1)
        eng = LLMAppraisalEngine(FakeLLM(RuntimeError("boom")), LLMAppraisalConfig(fallback=fb))
        with pytest.warns(RuntimeWarning, match="boom"):
            assert eng.appraise("x") == fb

    def test_caches_successes(self) -> None:
        llm = FakeLLM(json.dumps(GOOD))
        eng = LLMAppraisalEngine(llm)
        assert eng.appraise("same") == GOOD_VEC
        assert eng.appraise("same") == GOOD_VEC
        assert len(llm.calls) == 1
        assert eng.cache_len() == 1
        eng.appraise("different")
        assert len(llm.calls) == 2
        eng.clear_cache()
        assert eng.cache_len() == 0
        eng.appraise("same")
        assert len(llm.calls) == 3

    def test_cache_keyed_by_context(self) -> None:
        llm = FakeLLM(json.dumps(GOOD))
        eng = LLMAppraisalEngine(llm)
        eng.appraise("same", {"a": 1, "b": 2})
        eng.appraise("same", {"b": 2, "a": 1})  # key order does not matter
        assert len(llm.calls) == 1
        eng.appraise("same", {"a": 2})
        eng.appraise("same")
        assert len(llm.calls) == 3

    def test_cache_ignores_context_when_excluded(self) -> None:
        llm = FakeLLM(json.dumps(GOOD))
        eng = LLMAppraisalEngine(llm, LLMAppraisalConfig(include_context=False))
        eng.appraise("same", {"a": 1})
        eng.appraise("same", {"a": 2})
        eng.appraise("same")
        assert len(llm.calls) == 1
        assert "Context" not in llm.calls[0][0]

    def test_lru_eviction(self) -> None:
        llm = FakeLLM(json.dumps(GOOD))
        eng = LLMAppraisalEngine(llm, LLMAppraisalConfig(cache_size=2))
        eng.appraise("a")
        eng.appraise("b")
        eng.appraise("a")  # refresh a; b is now least recent
        eng.appraise("c")  # evicts b
        assert eng.cache_len() == 2
        assert len(llm.calls) == 3
        eng.appraise("a")
        assert len(llm.calls) == 3
        eng.appraise("b")
        assert len(llm.calls) == 4

    def test_cache_size_zero_disables(self) -> None:
        llm = FakeLLM(json.dumps(GOOD))
        eng = LLMAppraisalEngine(llm, no_cache())
        for _ in range(3):
            assert eng.appraise("same") == GOOD_VEC
        assert len(llm.calls) == 3
        assert eng.cache_len() == 0

    def test_failures_not_cached(self) -> None:
        llm = FakeLLM("garbage", RuntimeError("down"), json.dumps(GOOD))
        eng = LLMAppraisalEngine(llm)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            assert eng.appraise("same") == AppraisalVector.neutral()
            assert eng.appraise("same") == AppraisalVector.neutral()
        assert eng.cache_len() == 0
        assert eng.appraise("same") == GOOD_VEC
        assert eng.appraise("same") == GOOD_VEC
        assert len(llm.calls) == 3

    def test_schema(self) -> None:
        llm = FakeLLM(json.dumps(GOOD))
        LLMAppraisalEngine(llm).appraise("x")
        schema = llm.calls[0][1]
        assert isinstance(schema, dict)
        assert schema["type"] == "object"
        assert set(schema["properties"]) == set(DIMS)
        assert sorted(schema["required"]) == sorted(DIMS)
        for name, (low, high) in APPRAISAL_DIMENSIONS.items():
            prop = schema["properties"][name]
            assert prop["type"] == "number"
            assert prop["minimum"] == low
            assert prop["maximum"] == high
        json.dumps(schema)

    def test_schema_mutation_does_not_leak(self) -> None:
        def mutating(prompt: str, schema: dict[str, Any]) -> str:
            schema["properties"].clear()
            schema["required"].clear()
            return json.dumps(GOOD)

        eng = LLMAppraisalEngine(mutating, no_cache())
        eng.appraise("x")
        llm = FakeLLM(json.dumps(GOOD))
        LLMAppraisalEngine(llm).appraise("x")
        assert set(llm.calls[0][1]["properties"]) == set(DIMS)
        assert set(eng.json_schema["required"]) == set(DIMS)

    def test_prompt_contents(self) -> None:
        llm = FakeLLM(json.dumps(GOOD))
        eng = LLMAppraisalEngine(llm)
        eng.appraise("My cat knocked over the vase.", {"speaker": "Ana", "place": "home"})
        prompt = llm.calls[0][0]
        assert "My cat knocked over the vase." in prompt
        assert eng.config.system_prompt in prompt
        for name in DIMS:
            assert name in prompt
        assert "[-1, 1]" in prompt and "[0, 1]" in prompt
        assert json.dumps({"place": "home", "speaker": "Ana"}) in prompt
        assert prompt == eng.build_prompt(
            "My cat knocked over the vase.", {"place": "home", "speaker": "Ana"}
        )

    def test_prompt_without_context(self) -> None:
        llm = FakeLLM(json.dumps(GOOD))
        LLMAppraisalEngine(llm).appraise("Event text")
        assert "Context" not in llm.calls[0][0]

    def test_context_not_json_serialisable(self) -> None:
        llm = FakeLLM(json.dumps(GOOD))
        eng = LLMAppraisalEngine(llm)
        assert eng.appraise("x", {"obj": object()}) == GOOD_VEC
        assert "obj" in llm.calls[0][0]

    @pytest.mark.parametrize("value", [10**400, -(10**400)], ids=["huge", "-huge"])
    def test_int_beyond_float_range_named(self, value: int) -> None:
        # float(10**400) raised OverflowError, which named no dimension
        answer = json.dumps({**GOOD, "coping_potential": value})
        eng = LLMAppraisalEngine(FakeLLM(answer), no_cache(fallback_on_error=False))
        with pytest.raises(ValueError, match="coping_potential"):
            eng.appraise("x")

    def test_context_json_can_not_hold_is_named(self) -> None:
        # sort_keys compared 1 with "b" ("'<' not supported ..."); a cycle gave
        # "Circular reference detected": neither named the context, nor did the LLM
        # get asked
        circular: dict[str, Any] = {}
        circular["self"] = circular
        llm = FakeLLM(json.dumps(GOOD))
        eng = LLMAppraisalEngine(llm)
        for context in ({1: "a", "b": 2}, circular):
            with pytest.raises((TypeError, ValueError), match="context"):
                eng.appraise("x", context)
        assert llm.calls == []

    def test_deeply_nested_junk_before_the_answer_is_skipped(self) -> None:
        answer = "[" * 100_000 + " then " + json.dumps(GOOD)
        eng = LLMAppraisalEngine(FakeLLM(answer), no_cache(fallback_on_error=False))
        assert eng.appraise("x") == GOOD_VEC

    def test_custom_system_prompt(self) -> None:
        llm = FakeLLM(json.dumps(GOOD))
        cfg = LLMAppraisalConfig(system_prompt="CUSTOM INSTRUCTIONS 123")
        LLMAppraisalEngine(llm, cfg).appraise("x")
        assert llm.calls[0][0].startswith("CUSTOM INSTRUCTIONS 123")

    def test_type_errors(self) -> None:
        with pytest.raises(TypeError, match="llm"):
            LLMAppraisalEngine("not callable")  # type: ignore[arg-type]
        with pytest.raises(TypeError, match="config"):
            LLMAppraisalEngine(FakeLLM("{}"), {"cache_size": 0})  # type: ignore[arg-type]
        llm = FakeLLM(json.dumps(GOOD))
        eng = LLMAppraisalEngine(llm, LLMAppraisalConfig(fallback_on_error=True))
        with pytest.raises(TypeError, match="event_text"):
            eng.appraise(123)  # type: ignore[arg-type]
        with pytest.raises(TypeError, match="event_text"):
            eng.appraise(None)  # type: ignore[arg-type]
        with pytest.raises(TypeError, match="context"):
            eng.appraise("x", [("a", 1)])  # type: ignore[arg-type]
        assert llm.calls == []

    def test_llm_callable_alias_and_protocol(self) -> None:
        fn: LLMCallable = FakeLLM(json.dumps(GOOD))
        eng = LLMAppraisalEngine(fn)
        assert has_protocol_shape(eng)
        assert "LLMAppraisalEngine" in repr(eng)

    def test_plain_function(self) -> None:
        def llm(prompt: str, schema: dict[str, Any]) -> str:
            return "```json\n" + json.dumps(GOOD) + "\n```"

        assert LLMAppraisalEngine(llm).appraise("x") == GOOD_VEC


def test_engines_satisfy_protocol_structurally() -> None:
    """All engines are usable where the interfaces.AppraisalEngine protocol is expected."""
    from emotional_memory.interfaces import AppraisalEngine

    engines: list[AppraisalEngine] = [
        StaticAppraisalEngine(AppraisalVector.neutral()),
        KeywordAppraisalEngine(),
        LLMAppraisalEngine(FakeLLM(json.dumps(GOOD))),
    ]
    for eng in engines:
        assert isinstance(eng, AppraisalEngine)
        assert isinstance(eng.appraise("hello"), AppraisalVector)
