"""Kernel parameters: the params <-> config round trip, packing, the ablation mask, the
SPEC 4 adaptive weights and their saturation fallback.
"""

from __future__ import annotations

import math
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from emotional_memory.decay import DecayConfig
from emotional_memory.kernel import (
    DECAY_FIELDS,
    GATE_FIELDS,
    ScoringParams,
    adaptive_weights,
    apply_signal_mask,
    pack_params,
    unpack_params,
)
from emotional_memory.kernel.params import PACKED_SIZE
from emotional_memory.retrieval import AdaptiveWeightsConfig, RetrievalConfig
from emotional_memory.scoring_config import (
    params_from_config,
    params_to_config,
    params_to_config_dicts,
)
from support.kernel_banks import (
    ABLATION_MASKS,
    FAST,
    SPEC_BASE_WEIGHTS,
    SPEC_DECAY,
    SPEC_GATES,
    default_params,
    oracle_weights,
)

# --------------------------------------------------------------------------- params/config


def test_default_to_config_dicts_reproduce_spec() -> None:
    retrieval, decay = params_to_config_dicts(default_params())
    assert retrieval == {"base_weights": SPEC_BASE_WEIGHTS, "adaptive_weights_config": SPEC_GATES,
                         # the opt-in lexical signal: off (weight 0), BM25's usual k1 and b
                         "lexical_weight": 0.0, "lexical_k1": 1.2, "lexical_b": 0.75,
                         # the opt-in context signal: off (weight 0), mix 0.5
                         "context_weight": 0.0, "context_mix": 0.5,
                         # no calibration: the SPEC score
                         "signal_scale": None, "signal_shift": None}
    assert decay == SPEC_DECAY
    for value in [*retrieval["base_weights"], *retrieval["adaptive_weights_config"].values(),
                  *decay.values()]:
        assert type(value) is float
    assert list(GATE_FIELDS) == list(SPEC_GATES)
    assert list(DECAY_FIELDS) == list(SPEC_DECAY)


def test_default_params_leaves() -> None:
    p = default_params()
    np.testing.assert_array_equal(p.base_weights, SPEC_BASE_WEIGHTS)
    np.testing.assert_array_equal(p.gates.vector(), list(SPEC_GATES.values()))
    np.testing.assert_array_equal(p.decay.vector(), list(SPEC_DECAY.values()))
    assert float(p.distance_scale) == math.sqrt(6.0)
    np.testing.assert_array_equal(p.signal_scale, [1.0] * 6)
    np.testing.assert_array_equal(p.signal_shift, [0.0] * 6)
    for name in GATE_FIELDS:
        assert float(getattr(p.gates, name)) == SPEC_GATES[name]
    for name in DECAY_FIELDS:
        assert float(getattr(p.decay, name)) == SPEC_DECAY[name]
    assert p.gates.vector().dtype == np.float64 and p.decay.vector().dtype == np.float64


def test_default_round_trip_is_exact() -> None:
    r, d = RetrievalConfig(), DecayConfig()
    assert params_to_config(params_from_config(r, d)) == (r, d)
    assert params_to_config(params_from_config(r, d), r, d) == (r, d)


def test_round_trip_keeps_template_fields() -> None:
    r = RetrievalConfig(ape_threshold=0.7, candidate_multiplier=5,
                        reconsolidation_window_seconds=12.0)
    d = DecayConfig(power=1.3)
    r2, d2 = params_to_config(params_from_config(r, d), r, d)
    assert (r2, d2) == (r, d)
    # Without templates the non-scoring fields fall back to defaults.
    r3, d3 = params_to_config(params_from_config(r, d))
    assert r3.ape_threshold == RetrievalConfig().ape_threshold
    assert r3.base_weights == r.base_weights and d3 == d


finite_float = st.floats(-10.0, 10.0, allow_nan=False, allow_infinity=False)

unit = st.floats(0.0, 1.0, allow_nan=False)

pos = st.floats(1e-3, 50.0, allow_nan=False)


@st.composite
def configs(draw: Any) -> tuple[RetrievalConfig, DecayConfig]:
    gates = AdaptiveWeightsConfig(
        negative_mood_strength=draw(unit),
        negative_mood_center=draw(st.floats(-1.0, 1.0)),
        negative_mood_sharpness=draw(pos),
        high_arousal_strength=draw(unit),
        high_arousal_center=draw(unit),
        high_arousal_sharpness=draw(pos),
        calm_strength=draw(unit),
        calm_valence_width=draw(pos),
        calm_arousal_center=draw(unit),
        calm_sharpness=draw(pos),
    )
    calibrate = draw(st.booleans())
    r = RetrievalConfig(
        base_weights=draw(st.lists(finite_float, min_size=6, max_size=6)),
        adaptive_weights_config=gates,
        ape_threshold=draw(st.floats(0.0, 2.0)),
        candidate_multiplier=draw(st.integers(1, 10)),
        signal_scale=draw(st.lists(finite_float, min_size=6, max_size=6)) if calibrate else None,
        signal_shift=draw(st.lists(finite_float, min_size=6, max_size=6)) if calibrate else None,
    )
    d = DecayConfig(
        base_decay=draw(st.floats(0.0, 5.0)),
        arousal_modulation=draw(st.floats(-1.0, 1.0)),
        retrieval_boost=draw(st.floats(0.0, 2.0)),
        floor_arousal_threshold=draw(unit),
        floor_value=draw(unit),
        min_seconds=draw(pos),
        power=draw(st.floats(0.0, 3.0)),
    )
    return r, d


@given(cfg=configs())
@settings(max_examples=60, deadline=None)
def test_round_trip_random_valid_configs(cfg: tuple[RetrievalConfig, DecayConfig]) -> None:
    r, d = cfg
    params = params_from_config(r, d)
    # Templates carry only the non-scoring fields, so every scoring number must come
    # from the parameters themselves.
    template_r = RetrievalConfig(ape_threshold=r.ape_threshold,
                                 candidate_multiplier=r.candidate_multiplier)
    r2, d2 = params_to_config(params, template_r, DecayConfig())
    expected_r = r
    if r.signal_scale == [1.0] * 6 and r.signal_shift == [0.0] * 6:
        # identity calibration is the SPEC score and is written as "no calibration"
        expected_r = r.model_copy(update={"signal_scale": None, "signal_shift": None})
    assert r2 == expected_r
    assert d2 == d
    # and the dicts are the exact numbers
    rd, dd = params_to_config_dicts(params)
    assert rd["base_weights"] == r.base_weights
    assert rd["adaptive_weights_config"] == r.adaptive_weights_config.model_dump()
    assert dd == d.model_dump()
    # a second trip is a fixed point
    assert params_to_config(params_from_config(r2, d2), template_r) == (r2, d2)


def test_from_config_base_weights_override() -> None:
    route = [0.70, 0.10, 0.05, 0.05, 0.05, 0.05]
    p = params_from_config(RetrievalConfig(), DecayConfig(), base_weights=route)
    np.testing.assert_array_equal(p.base_weights, route)
    ref = default_params()
    np.testing.assert_array_equal(p.gates.vector(), ref.gates.vector())
    np.testing.assert_array_equal(p.decay.vector(), ref.decay.vector())
    r, d = params_to_config(p)
    assert r.base_weights == route
    assert r.adaptive_weights_config == AdaptiveWeightsConfig()
    assert d == DecayConfig()


def test_astype() -> None:
    p = default_params()
    p32 = p.astype(jnp.float32)
    leaves = jax.tree_util.tree_leaves(p)
    # three (6,) vectors, the distance scale, and 22 named scalars in four groups
    assert len(leaves) == 3 + 1 + 10 + 7 + 3 + 2
    for leaf, ref in zip(jax.tree_util.tree_leaves(p32), leaves, strict=True):
        assert isinstance(leaf, jax.Array)
        assert leaf.dtype == jnp.float32
        np.testing.assert_array_equal(np.asarray(leaf), np.asarray(ref, dtype=np.float32))
    with jax.enable_x64(True):
        p64 = p.astype(jnp.float64)
        for leaf, ref in zip(jax.tree_util.tree_leaves(p64), leaves, strict=True):
            assert leaf.dtype == jnp.float64
            np.testing.assert_array_equal(np.asarray(leaf), np.asarray(ref))
        assert params_to_config(p64) == (RetrievalConfig(), DecayConfig())
    # the named groups, packed into one vector and back, are the same leaves
    again = unpack_params(pack_params(p))
    for leaf, ref in zip(jax.tree_util.tree_leaves(again), leaves, strict=True):
        assert np.asarray(leaf).shape == np.shape(ref)
        assert np.asarray(leaf).tobytes() == np.asarray(ref, np.float64).tobytes()
    assert pack_params(p).shape == (PACKED_SIZE,) == (41,)


def test_from_config_accepts_duck_typed_objects() -> None:
    class Gates:
        pass

    class Retrieval:
        base_weights = [0.2] * 6
        adaptive_weights_config = Gates()

    for k, v in SPEC_GATES.items():
        setattr(Gates, k, v)

    class Decay:
        pass

    for k, v in SPEC_DECAY.items():
        setattr(Decay, k, v)
    p = params_from_config(Retrieval(), Decay())
    np.testing.assert_array_equal(p.gates.vector(), list(SPEC_GATES.values()))
    np.testing.assert_array_equal(p.base_weights, [0.2] * 6)


# --------------------------------------------------------------------------- weights & mask


@given(
    weights=st.lists(st.floats(0.0, 5.0), min_size=6, max_size=6),
)
@settings(max_examples=40, deadline=None)
def test_apply_signal_mask_all_ones_is_identity(weights: list[float]) -> None:
    with jax.enable_x64(True):
        w = jnp.asarray(weights, jnp.float64)
        out = apply_signal_mask(w, jnp.ones(6))
        assert np.asarray(out).tobytes() == np.asarray(w).tobytes()
    w32 = jnp.asarray(weights, jnp.float32)
    out32 = apply_signal_mask(w32, jnp.ones(6))
    assert np.asarray(out32).tobytes() == np.asarray(w32).tobytes()


@given(
    weights=st.lists(st.floats(0.0, 1.0), min_size=6, max_size=6),
    mask=st.lists(st.sampled_from([0.0, 1.0]), min_size=6, max_size=6),
)
@settings(max_examples=60, deadline=None)
def test_apply_signal_mask_renormalises(weights: list[float], mask: list[float]) -> None:
    if all(m == 1.0 for m in mask) or not any(mask):
        return
    with jax.enable_x64(True):
        out = np.asarray(apply_signal_mask(jnp.asarray(weights), jnp.asarray(mask)))
    masked = [w * m for w, m in zip(weights, mask, strict=True)]
    total = sum(masked)
    if total > 0:
        expected = [x / total for x in masked]
    else:
        k = sum(mask)
        expected = [m / k for m in mask]
    np.testing.assert_allclose(out, expected, rtol=1e-12, atol=1e-15)
    assert abs(out.sum() - 1.0) < 1e-12
    assert np.all(out[np.asarray(mask) == 0.0] == 0.0)


def test_apply_signal_mask_examples() -> None:
    with jax.enable_x64(True):
        w = jnp.asarray(SPEC_BASE_WEIGHTS)
        no_mood = np.asarray(apply_signal_mask(w, jnp.asarray(ABLATION_MASKS["no_mood"])))
        np.testing.assert_allclose(no_mood, [0.35 / 0.75, 0, 0.15 / 0.75, 0.1 / 0.75,
                                             0.1 / 0.75, 0.05 / 0.75], rtol=1e-15)
        zero_enabled = jnp.asarray([0.0, 0.5, 0.0, 0.5, 0.0, 0.0])
        out = np.asarray(apply_signal_mask(zero_enabled,
                                           jnp.asarray(ABLATION_MASKS["none_of_three"])))
        np.testing.assert_array_equal(out, [1 / 3, 0, 1 / 3, 0, 1 / 3, 0])
        out = np.asarray(apply_signal_mask(jnp.zeros(6), jnp.asarray(ABLATION_MASKS["no_mood"])))
        np.testing.assert_array_equal(out, [0.2, 0, 0.2, 0.2, 0.2, 0.2])
        # gradient finite on the uniform branch
        g = jax.grad(lambda x: jnp.sum(apply_signal_mask(
            x, jnp.asarray(ABLATION_MASKS["none_of_three"])) * jnp.arange(6.0)))(zero_enabled)
        assert np.all(np.isfinite(np.asarray(g)))


@FAST
@given(valence=st.floats(-1.0, 1.0), arousal=st.floats(0.0, 1.0),
       base=st.lists(st.floats(-0.2, 1.0), min_size=6, max_size=6))
def test_adaptive_weights_match_spec(valence: float, arousal: float, base: list[float]) -> None:
    p = params_from_config(RetrievalConfig(base_weights=base), DecayConfig())
    with jax.enable_x64(True):
        w = np.asarray(adaptive_weights(p, jnp.asarray(valence), jnp.asarray(arousal)))
    np.testing.assert_allclose(w, oracle_weights(valence, arousal, base), rtol=0, atol=1e-12)


def test_accurate_tanh_matches_libm_and_saturates_exactly() -> None:
    import math

    from emotional_memory.kernel.gates import accurate_tanh

    zs = np.concatenate([np.linspace(-25, 25, 20001), [-19.6, -19.06, -18.7, 0.0, 1e-300]])
    with jax.enable_x64(True):
        got = np.asarray(accurate_tanh(jnp.asarray(zs)))
    ref = np.asarray([math.tanh(z) for z in zs])
    assert np.max(np.abs(got - ref)) <= 2.3e-16
    # exact saturation: the uniform-weights fallback depends on an exact 0 gate
    assert np.array_equal(got == 1.0, ref == 1.0)
    assert np.array_equal(got == -1.0, ref == -1.0)


def test_uniform_fallback_when_the_only_gate_is_deep_in_saturation() -> None:
    # Found by hypothesis: all-zero base weights, calm gate at tanh(-19.6): the libm
    # reference gives calm == 0 exactly, hence uniform weights.
    from emotional_memory import MoodField
    from emotional_memory.retrieval import AdaptiveWeightsConfig, adaptive_weights

    cfg = AdaptiveWeightsConfig(
        negative_mood_strength=0.0, high_arousal_strength=0.0, calm_strength=1.0,
        calm_valence_width=1.0, calm_arousal_center=0.40625, calm_sharpness=33.0,
    )
    mood = MoodField(valence=0.0, arousal=1.0, dominance=0.0, inertia=0.0,
                     timestamp=MoodField.neutral().timestamp)
    np.testing.assert_array_equal(adaptive_weights(mood, [0.0] * 6, cfg), np.full(6, 1 / 6))


@settings(max_examples=30, deadline=None)
@given(st.lists(st.floats(-1e6, 1e6, allow_nan=False), min_size=41, max_size=41),
       st.floats(-1, 1), st.floats(0, 1))
def test_packed_params_round_trip_and_score_the_same(
    values: list[float], valence: float, arousal: float
) -> None:
    """Any parameters survive pack_params/unpack_params bit for bit, named leaves included,
    and the kernel reads the same numbers from either form."""
    packed = np.asarray(values, np.float64)
    params = unpack_params(packed)
    assert isinstance(params.gates.calm_sharpness, np.ndarray)
    np.testing.assert_array_equal(pack_params(params), packed)
    # the named leaves sit where pack_params' order says (base weights first, then gates)
    assert float(params.gates.negative_mood_strength) == values[6]
    assert float(params.decay.base_decay) == values[6 + len(GATE_FIELDS)]
    assert float(params.lexical.b) == values[-3]
    assert float(params.context.mix) == values[-1]
    again = unpack_params(pack_params(params))
    for a, b in zip(jax.tree_util.tree_leaves(again), jax.tree_util.tree_leaves(params),
                    strict=True):
        assert np.asarray(a).tobytes() == np.asarray(b).tobytes()
    with jax.enable_x64(True):
        direct = np.asarray(jax.jit(adaptive_weights)(params, valence, arousal))
        through = np.asarray(jax.jit(
            lambda p, v, a: adaptive_weights(unpack_params(p), v, a)
        )(jnp.asarray(packed), valence, arousal))
    np.testing.assert_array_equal(direct, through)


def test_params_reject_misshapen_leaves_and_old_style_groups() -> None:
    p = default_params()
    with pytest.raises(ValueError, match="base_weights"):
        pack_params(eqx.tree_at(lambda t: t.base_weights, p, np.zeros(5)))
    with pytest.raises(ValueError, match="41"):
        unpack_params(np.zeros(40))
    with pytest.raises(TypeError, match="GateParams"):  # a (10,) vector is no longer a group
        ScoringParams(base_weights=p.base_weights, gates=np.zeros(10), decay=p.decay,
                      distance_scale=p.distance_scale, signal_scale=p.signal_scale,
                      signal_shift=p.signal_shift)


def test_group_vector_keeps_float64_when_a_leaf_is_a_device_array() -> None:
    """Outside x64 mode, a group mixing host float64 and device leaves reads exactly."""
    p = default_params()
    with jax.enable_x64(True):
        power = jnp.asarray(1.0, jnp.float64)
    mixed = eqx.tree_at(lambda t: t.decay.power, p, power)
    assert not jax.config.read("jax_enable_x64")
    got = mixed.decay.vector()
    assert got.dtype == np.float64
    np.testing.assert_array_equal(got, p.decay.vector())
    assert params_to_config_dicts(mixed)[1] == SPEC_DECAY


@pytest.mark.parametrize(("scale", "shift"), [
    (None, None), ([2.0] * 6, None), (None, [0.1] * 6), ([0.5] * 6, [-0.2] * 6),
])
@pytest.mark.parametrize("template", [
    RetrievalConfig(), RetrievalConfig(signal_scale=[3.0] * 6, signal_shift=[0.3] * 6),
])
def test_params_write_their_calibration_whatever_the_template_holds(
    scale: list[float] | None, shift: list[float] | None, template: RetrievalConfig
) -> None:
    # identity params over a template with a calibration kept the template's; a shift
    # without a scale came back as scale [1.0] * 6 (the config no longer equal)
    source = RetrievalConfig(signal_scale=scale, signal_shift=shift)
    written, _ = params_to_config(params_from_config(source, DecayConfig()), template)
    assert (written.signal_scale, written.signal_shift) == (scale, shift)
