"""Bad input in configs and value objects fails loudly, naming the field (SPEC 9).

pydantic's ``ValidationError`` subclasses ``ValueError``, so every rejection here is
checked as ``ValueError`` whose message contains the offending field's name. Affect
values out of range are clamped (SPEC 1), but NaN/inf is never clamped into range.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import equinox as eqx
import numpy as np
import pytest

from emotional_memory.affect import AffectiveMomentum, CoreAffect
from emotional_memory.appraisal import AppraisalVector
from emotional_memory.decay import DecayConfig
from emotional_memory.mood import MoodDecayConfig, MoodField
from emotional_memory.resonance import ResonanceConfig
from emotional_memory.retrieval import (
    AdaptiveWeightsConfig,
    QueryClassifierConfig,
    RetrievalConfig,
)
from emotional_memory.scoring_config import params_from_config, params_to_config

NON_FINITE = [
    pytest.param(float("nan"), id="nan"),
    pytest.param(float("inf"), id="inf"),
    pytest.param(float("-inf"), id="-inf"),
    pytest.param(np.float64("nan"), id="np.nan"),
    pytest.param(np.float32("inf"), id="np.f32.inf"),
]

ADAPTIVE_FIELDS = [
    "negative_mood_strength",
    "negative_mood_center",
    "negative_mood_sharpness",
    "high_arousal_strength",
    "high_arousal_center",
    "high_arousal_sharpness",
    "calm_strength",
    "calm_valence_width",
    "calm_arousal_center",
    "calm_sharpness",
]
DECAY_FIELDS = [
    "base_decay",
    "arousal_modulation",
    "retrieval_boost",
    "floor_arousal_threshold",
    "floor_value",
    "min_seconds",
    "power",
]
MOOD_DECAY_FIELDS = [
    "base_half_life_seconds",
    "inertia_scale",
    "baseline_valence",
    "baseline_arousal",
    "baseline_dominance",
]
RESONANCE_FLOAT_FIELDS = [
    "threshold",
    "semantic_weight",
    "emotional_weight",
    "temporal_weight",
    "temporal_half_life_seconds",
    "hebbian_increment",
    "contrastive_temporal_threshold",
    "contrastive_valence_threshold",
    "causal_temporal_threshold",
    "causal_semantic_threshold",
]
RESONANCE_INT_FIELDS = ["max_links", "candidate_multiplier", "propagation_hops"]
RETRIEVAL_FLOAT_FIELDS = [
    "ape_threshold",
    "reconsolidation_learning_rate",
    "reconsolidation_window_seconds",
]
FLOAT_FIELDS: list[tuple[type, str]] = [
    *((AdaptiveWeightsConfig, f) for f in ADAPTIVE_FIELDS),
    *((DecayConfig, f) for f in DECAY_FIELDS),
    *((MoodDecayConfig, f) for f in MOOD_DECAY_FIELDS),
    *((ResonanceConfig, f) for f in RESONANCE_FLOAT_FIELDS),
    *((RetrievalConfig, f) for f in RETRIEVAL_FLOAT_FIELDS),
]


def assert_rejected(factory: Callable[[], Any], *names: str) -> ValueError:
    """``factory()`` raises ValueError whose message contains every one of ``names``."""
    with pytest.raises(ValueError) as info:
        factory()
    message = str(info.value)
    for name in names:
        assert name in message, f"{name!r} not named in: {message}"
    return info.value


# --------------------------------------------------------------------------- defaults


@pytest.mark.parametrize(
    "cls",
    [RetrievalConfig, AdaptiveWeightsConfig, QueryClassifierConfig, DecayConfig,
     MoodDecayConfig, ResonanceConfig],
)
def test_defaults_are_valid(cls: type) -> None:
    cfg = cls()
    assert cls.model_validate(cfg.model_dump()) == cfg


# --------------------------------------------------------------------------- NaN / inf


@pytest.mark.parametrize("value", NON_FINITE)
@pytest.mark.parametrize(("cls", "field"), FLOAT_FIELDS,
                         ids=[f"{c.__name__}.{f}" for c, f in FLOAT_FIELDS])
def test_non_finite_float_field_rejected(cls: type, field: str, value: float) -> None:
    assert_rejected(lambda: cls(**{field: value}), field)


@pytest.mark.parametrize(("cls", "field"), FLOAT_FIELDS,
                         ids=[f"{c.__name__}.{f}" for c, f in FLOAT_FIELDS])
def test_nan_string_rejected(cls: type, field: str) -> None:
    assert_rejected(lambda: cls(**{field: "nan"}), field)


@pytest.mark.parametrize("value", [float("nan"), float("inf")], ids=["nan", "inf"])
@pytest.mark.parametrize(("cls", "field"), [
    *((ResonanceConfig, f) for f in RESONANCE_INT_FIELDS),
    (RetrievalConfig, "candidate_multiplier"),
])
def test_non_finite_int_field_rejected(cls: type, field: str, value: float) -> None:
    assert_rejected(lambda: cls(**{field: value}), field)


@pytest.mark.parametrize("value", NON_FINITE)
@pytest.mark.parametrize("index", range(6))
@pytest.mark.parametrize("field", ["base_weights", "signal_scale", "signal_shift"])
def test_non_finite_weight_vector_entry_rejected(field: str, index: int, value: float) -> None:
    weights = [0.35, 0.25, 0.15, 0.10, 0.10, 0.05]
    weights[index] = value
    assert_rejected(lambda: RetrievalConfig(**{field: weights}), field)


@pytest.mark.parametrize("value", NON_FINITE)
@pytest.mark.parametrize("index", [0, 3, 5])
@pytest.mark.parametrize("route", ["temporal", "single_hop", "default"])
def test_non_finite_routed_weights_entry_rejected(route: str, index: int, value: float) -> None:
    weights = [0.5, 0.3, 0.1, 0.05, 0.05, 0.0]
    weights[index] = value
    routes = {"multi_hop": [0.5, 0.3, 0.1, 0.05, 0.05, 0.0], route: weights}
    assert_rejected(
        lambda: QueryClassifierConfig(mode="heuristic", routed_weights=routes),
        "routed_weights", route,
    )
    # and when nested inside a RetrievalConfig given as plain data
    assert_rejected(
        lambda: RetrievalConfig.model_validate(
            {"query_classifier": {"mode": "heuristic", "routed_weights": routes}}
        ),
        "routed_weights", route,
    )


@pytest.mark.parametrize("field", ADAPTIVE_FIELDS)
def test_nested_adaptive_weights_field_rejected(field: str) -> None:
    assert_rejected(
        lambda: RetrievalConfig.model_validate({"adaptive_weights_config": {field: math.nan}}),
        field,
    )


# --------------------------------------------------------------------------- lengths


@pytest.mark.parametrize("length", [0, 1, 5, 7, 12])
@pytest.mark.parametrize("field", ["base_weights", "signal_scale", "signal_shift"])
def test_weight_vector_wrong_length_rejected(field: str, length: int) -> None:
    assert_rejected(lambda: RetrievalConfig(**{field: [0.1] * length}), field)


@pytest.mark.parametrize("length", [5, 7])
def test_base_weights_wrong_length_from_numpy_and_tuple(length: int) -> None:
    assert_rejected(lambda: RetrievalConfig(base_weights=np.full(length, 0.1)), "base_weights")
    assert_rejected(lambda: RetrievalConfig(base_weights=(0.1,) * length), "base_weights")


@pytest.mark.parametrize("length", [0, 5, 7])
@pytest.mark.parametrize("route", ["temporal", "open_domain", "custom_type"])
def test_routed_weights_entry_wrong_length_rejected(route: str, length: int) -> None:
    routes = {"single_hop": [0.7, 0.1, 0.05, 0.05, 0.05, 0.05], route: [0.1] * length}
    assert_rejected(lambda: QueryClassifierConfig(routed_weights=routes), "routed_weights", route)


def test_valid_weight_vectors_accepted() -> None:
    cfg = RetrievalConfig(
        base_weights=np.array([0.7, 0.1, 0.05, 0.05, 0.05, 0.05]),
        signal_scale=(1.0,) * 6,
        query_classifier=QueryClassifierConfig(
            mode="heuristic", routed_weights={"temporal": [0.5, 0.3, 0.1, 0.05, 0.05, 0.0]}
        ),
    )
    assert cfg.base_weights == [0.7, 0.1, 0.05, 0.05, 0.05, 0.05]
    assert cfg.signal_scale == [1.0] * 6
    assert cfg.query_classifier is not None
    assert cfg.query_classifier.routed_weights["temporal"][0] == 0.5


# --------------------------------------------------------------------------- ranges

OUT_OF_RANGE: list[tuple[type, str, Any]] = [
    *(
        (AdaptiveWeightsConfig, f, v)
        for f in ("negative_mood_strength", "high_arousal_strength", "calm_strength")
        for v in (-0.01, 1.01, -1.0, 2.0)
    ),
    *(
        (AdaptiveWeightsConfig, f, v)
        for f in ("negative_mood_sharpness", "high_arousal_sharpness", "calm_sharpness",
                  "calm_valence_width")
        for v in (0.0, -0.0, -1e-9, -5.0)
    ),
    *((AdaptiveWeightsConfig, "negative_mood_center", v) for v in (-1.01, 1.01, 3.0)),
    *(
        (AdaptiveWeightsConfig, f, v)
        for f in ("high_arousal_center", "calm_arousal_center")
        for v in (-0.01, 1.01, -2.0)
    ),
    *((MoodDecayConfig, "base_half_life_seconds", v) for v in (0.0, -1.0, -3600.0)),
    *((ResonanceConfig, "propagation_hops", v) for v in (0, 6, -1, 100)),
    *((ResonanceConfig, "hebbian_increment", v) for v in (-0.01, 0.51, 1.0)),
    *((ResonanceConfig, "temporal_half_life_seconds", v) for v in (0.0, -1.0)),
    # the link-typing thresholds keep the original 0.18.1's ranges
    *(
        (ResonanceConfig, f, v)
        for f in ("contrastive_temporal_threshold", "causal_temporal_threshold",
                  "causal_semantic_threshold")
        for v in (-0.01, 1.01, -0.5, 6.0)
    ),
    *((ResonanceConfig, "contrastive_valence_threshold", v) for v in (-0.01, 2.01, 10.0)),
    *((ResonanceConfig, "candidate_multiplier", v) for v in (0, -1)),
    *((RetrievalConfig, "candidate_multiplier", v) for v in (0, -3)),
    *((DecayConfig, "min_seconds", v) for v in (0.0, -1.0, -1e-12)),
    *((DecayConfig, "floor_value", v) for v in (-0.01, 1.01, 5.0)),
]


@pytest.mark.parametrize(("cls", "field", "value"), OUT_OF_RANGE,
                         ids=[f"{c.__name__}.{f}={v}" for c, f, v in OUT_OF_RANGE])
def test_out_of_range_rejected(cls: type, field: str, value: Any) -> None:
    assert_rejected(lambda: cls(**{field: value}), field)


BOUNDARY_OK: list[tuple[type, str, Any]] = [
    *(
        (AdaptiveWeightsConfig, f, v)
        for f in ("negative_mood_strength", "high_arousal_strength", "calm_strength")
        for v in (0.0, 1.0)
    ),
    *(
        (AdaptiveWeightsConfig, f, 1e-6)
        for f in ("negative_mood_sharpness", "high_arousal_sharpness", "calm_sharpness",
                  "calm_valence_width")
    ),
    *((AdaptiveWeightsConfig, "negative_mood_center", v) for v in (-1.0, 1.0)),
    *(
        (AdaptiveWeightsConfig, f, v)
        for f in ("high_arousal_center", "calm_arousal_center")
        for v in (0.0, 1.0)
    ),
    (MoodDecayConfig, "base_half_life_seconds", 1e-3),
    *((ResonanceConfig, "propagation_hops", v) for v in (1, 5)),
    *((ResonanceConfig, "hebbian_increment", v) for v in (0.0, 0.5)),
    (ResonanceConfig, "temporal_half_life_seconds", 1e-3),
    *(
        (ResonanceConfig, f, v)
        for f in ("contrastive_temporal_threshold", "causal_temporal_threshold",
                  "causal_semantic_threshold")
        for v in (0.0, 1.0)
    ),
    *((ResonanceConfig, "contrastive_valence_threshold", v) for v in (0.0, 2.0)),
    (ResonanceConfig, "candidate_multiplier", 1),
    (RetrievalConfig, "candidate_multiplier", 1),
    (DecayConfig, "min_seconds", 1e-6),
    *((DecayConfig, "floor_value", v) for v in (0.0, 1.0)),
]


@pytest.mark.parametrize(("cls", "field", "value"), BOUNDARY_OK,
                         ids=[f"{c.__name__}.{f}={v}" for c, f, v in BOUNDARY_OK])
def test_boundary_values_accepted(cls: type, field: str, value: Any) -> None:
    cfg = cls(**{field: value})
    assert getattr(cfg, field) == value


def test_failed_construction_leaves_no_partial_object() -> None:
    cfg = ResonanceConfig()
    with pytest.raises(ValueError):
        cfg.model_validate({**cfg.model_dump(), "propagation_hops": 9})
    assert cfg.propagation_hops == 2


# --------------------------------------------------------------------------- fitted params


@pytest.mark.parametrize(("leaf", "index", "name"), [
    *(("gates", None, f) for f in ADAPTIVE_FIELDS),
    *(("decay", None, f) for f in DECAY_FIELDS),
    *(("base_weights", i, "base_weights") for i in (0, 5)),
])
def test_params_with_nan_do_not_round_trip_into_a_config(
    leaf: str, index: int | None, name: str
) -> None:
    """A diverged fit (NaN parameter) cannot be saved as a config silently."""
    params = params_from_config(RetrievalConfig(), DecayConfig())
    if index is None:  # a named scalar of a parameter group
        broken = eqx.tree_at(lambda p: getattr(getattr(p, leaf), name), params, np.float64(np.nan))
    else:
        values = np.array(params.base_weights, dtype=np.float64)
        values[index] = np.nan
        broken = eqx.tree_at(lambda p: p.base_weights, params, values)
    assert_rejected(lambda: params_to_config(broken), name)


# --------------------------------------------------------------------------- value objects


@pytest.mark.parametrize("value", NON_FINITE)
@pytest.mark.parametrize("field", ["valence", "arousal", "dominance"])
def test_core_affect_non_finite_rejected(field: str, value: float) -> None:
    kwargs: dict[str, Any] = {"valence": 0.0, "arousal": 0.5, "dominance": 0.5, field: value}
    assert_rejected(lambda: CoreAffect(**kwargs), field)


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ((2.0, 0.5, 0.5), (1.0, 0.5, 0.5)),
        ((-3.0, 0.5, 0.5), (-1.0, 0.5, 0.5)),
        ((0.2, 1.5, 0.5), (0.2, 1.0, 0.5)),
        ((0.2, -0.5, 0.5), (0.2, 0.0, 0.5)),
        ((0.2, 0.5, 7.0), (0.2, 0.5, 1.0)),
        ((0.2, 0.5, -1e-9), (0.2, 0.5, 0.0)),
        ((1e308, -1e308, 1e308), (1.0, 0.0, 1.0)),
        ((-1.0, 0.0, 1.0), (-1.0, 0.0, 1.0)),
    ],
)
def test_core_affect_clamps_out_of_range(
    given: tuple[float, float, float], expected: tuple[float, float, float]
) -> None:
    affect = CoreAffect(valence=given[0], arousal=given[1], dominance=given[2])
    assert (affect.valence, affect.arousal, affect.dominance) == expected


def test_core_affect_default_dominance_and_neutral() -> None:
    assert CoreAffect(valence=0.1, arousal=0.2).dominance == 0.5
    n = CoreAffect.neutral()
    assert (n.valence, n.arousal, n.dominance) == (0.0, 0.0, 0.5)


@pytest.mark.parametrize("value", NON_FINITE)
@pytest.mark.parametrize(
    "field",
    ["d_valence", "d_arousal", "d_dominance", "dd_valence", "dd_arousal", "dd_dominance"],
)
def test_affective_momentum_non_finite_rejected(field: str, value: float) -> None:
    assert_rejected(lambda: AffectiveMomentum(**{field: value}), field)


@pytest.mark.parametrize("value", NON_FINITE)
@pytest.mark.parametrize(
    "field",
    ["novelty", "goal_relevance", "coping_potential", "norm_congruence", "self_relevance"],
)
def test_appraisal_vector_non_finite_rejected(field: str, value: float) -> None:
    assert_rejected(lambda: AppraisalVector(**{field: value}), field)


@pytest.mark.parametrize("value", [float("nan"), float("inf")], ids=["nan", "inf"])
@pytest.mark.parametrize("field", ["valence", "arousal", "dominance", "inertia"])
def test_mood_field_non_finite_rejected(field: str, value: float) -> None:
    kwargs: dict[str, Any] = {
        "valence": 0.0, "arousal": 0.3, "dominance": 0.5, "inertia": 0.5,
        "timestamp": datetime(2024, 1, 1, tzinfo=UTC), field: value,
    }
    assert_rejected(lambda: MoodField(**kwargs), field)


def test_mood_field_clamps_out_of_range() -> None:
    mood = MoodField(valence=-4.0, arousal=2.0, dominance=-1.0, inertia=9.0,
                     timestamp=datetime(2024, 1, 1, tzinfo=UTC))
    assert (mood.valence, mood.arousal, mood.dominance, mood.inertia) == (-1.0, 1.0, 0.0, 1.0)


# --------------------------------------------------------------------------- huge ints

HUGE = [pytest.param(10**400, id="10**400"), pytest.param(-(10**400), id="-10**400")]


@pytest.mark.parametrize("value", HUGE)
@pytest.mark.parametrize(("cls", "field"), FLOAT_FIELDS,
                         ids=[f"{c.__name__}.{f}" for c, f in FLOAT_FIELDS])
def test_int_beyond_float_range_rejected_in_configs(cls: type, field: str, value: int) -> None:
    # float(10**400) raises OverflowError, which pydantic let through unnamed
    assert_rejected(lambda: cls(**{field: value}), field)


@pytest.mark.parametrize("value", [*HUGE, pytest.param(2**53 + 1, id="2**53+1")])
@pytest.mark.parametrize("field", RESONANCE_INT_FIELDS)
def test_resonance_int_field_beyond_bound_rejected(field: str, value: int) -> None:
    # pydantic kept 10**400 links, which a SQL store's LIMIT cannot hold
    assert_rejected(lambda: ResonanceConfig(**{field: value}), field)


def test_resonance_link_candidates_product_bounded() -> None:
    # each factor fits, their product (the encode-time search limit) does not
    assert_rejected(lambda: ResonanceConfig(max_links=2**30, candidate_multiplier=2**30),
                    "max_links", "candidate_multiplier")
    cfg = ResonanceConfig(max_links=2**26, candidate_multiplier=2**26)
    assert cfg.max_links * cfg.candidate_multiplier == 2**52


@pytest.mark.parametrize("value", [True, False, np.bool_(True)], ids=["True", "False", "np"])
@pytest.mark.parametrize("field", RESONANCE_INT_FIELDS)
def test_resonance_int_field_rejects_bool(field: str, value: Any) -> None:
    # pydantic's lax int took True as 1 link
    with pytest.raises((TypeError, ValueError), match=field):
        ResonanceConfig(**{field: value})


def test_resonance_int_fields_keep_lax_numbers() -> None:
    cfg = ResonanceConfig(max_links="7", candidate_multiplier=4.0, propagation_hops=np.int64(3))
    assert (cfg.max_links, cfg.candidate_multiplier, cfg.propagation_hops) == (7, 4, 3)
    assert type(cfg.max_links) is int


@pytest.mark.parametrize("value", HUGE)
@pytest.mark.parametrize(("factory", "field"), [
    (lambda v: CoreAffect(valence=v, arousal=0.5), "valence"),
    (lambda v: CoreAffect(valence=0.0, arousal=v), "arousal"),
    (lambda v: CoreAffect(valence=0.0, arousal=0.5, dominance=v), "dominance"),
    (lambda v: AffectiveMomentum(dd_arousal=v), "dd_arousal"),
    (lambda v: AppraisalVector(novelty=v, goal_relevance=0, coping_potential=0,
                               norm_congruence=0, self_relevance=0), "novelty"),
    (lambda v: MoodField(valence=0, arousal=0, dominance=0, inertia=v,
                         timestamp=datetime(2024, 1, 1, tzinfo=UTC)), "inertia"),
    (lambda v: CoreAffect.neutral().lerp(CoreAffect.neutral(), v), "alpha"),
    (lambda v: MoodField.neutral().update(CoreAffect.neutral(), alpha=v), "alpha"),
], ids=["valence", "arousal", "dominance", "momentum", "appraisal", "mood", "lerp",
        "mood_update"])
def test_int_beyond_float_range_rejected_in_value_objects(
    factory: Callable[[int], Any], field: str, value: int
) -> None:
    assert_rejected(lambda: factory(value), field)


@pytest.mark.parametrize("field", RESONANCE_INT_FIELDS)
def test_resonance_int_beyond_str_digits_limit_named(field: str) -> None:
    # the message must not try to print a 5000-digit int (str() raises past 4300 digits)
    assert_rejected(lambda: ResonanceConfig(**{field: 10**5000}), field)


@pytest.mark.parametrize(("args", "name"), [
    (("P", {}), "retrieval_config"),
    (("P", None, "x"), "decay_config"),
    (("P", DecayConfig()), "retrieval_config"),  # arguments swapped
    (("P", None, RetrievalConfig()), "decay_config"),
    (("p",), "params"),
])
def test_params_to_config_names_a_wrong_argument(args: tuple[Any, ...], name: str) -> None:
    # AttributeError "'dict' object has no attribute 'model_dump'", or a pydantic
    # "extra inputs" error for swapped templates
    params = params_from_config(RetrievalConfig(), DecayConfig())
    call = tuple(params if a == "P" else a for a in args)
    with pytest.raises(TypeError, match=name):
        params_to_config(*call)


@pytest.mark.parametrize("value", [True, False, np.bool_(True), 2**31 + 1, 10**400],
                         ids=["True", "False", "np", "2**31+1", "10**400"])
def test_retrieval_candidate_multiplier_rejects_bool_and_huge(value: Any) -> None:
    # pydantic's lax int took True as 1; 10**400 times top_k fits no SQL LIMIT
    with pytest.raises((TypeError, ValueError), match="candidate_multiplier"):
        RetrievalConfig(candidate_multiplier=value)
    assert RetrievalConfig(candidate_multiplier=2**31).candidate_multiplier == 2**31
    assert RetrievalConfig(candidate_multiplier="4").candidate_multiplier == 4
