"""Tests for the JAX scoring kernel (SPEC 3-5, DESIGN "The kernel").

Covers gradient safety at every SPEC branch, jit == eager, vmap == loop, bucketed
padding == unpadded, float32 ~ float64, the params <-> config round trip, the ablation
mask, dense spreading activation and stable ranking. float64 checks run inside JAX's
local x64 context; the global flag is never touched.
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
from jax.test_util import check_grads

from emotional_memory.decay import DecayConfig
from emotional_memory.kernel import (
    DECAY_FIELDS,
    GATE_FIELDS,
    MemoryColumns,
    QueryFeatures,
    ScoringParams,
    adaptive_weights,
    apply_signal_mask,
    bank_cosine,
    bucket_size,
    pack_params,
    pad_columns,
    score_bank,
    score_given_semantic,
    score_with_weights,
    signals,
    spreading_activation_dense,
    stable_rank,
    unpack_params,
)
from emotional_memory.kernel.params import PACKED_SIZE
from emotional_memory.retrieval import AdaptiveWeightsConfig, RetrievalConfig
from emotional_memory.scoring_config import (
    params_from_config,
    params_to_config,
    params_to_config_dicts,
)

_score_bank_jit = jax.jit(score_bank)

SQRT6 = math.sqrt(6.0)
N_ROWS, DIM = 24, 6
FAST = settings(max_examples=12, deadline=None)

SPEC_BASE_WEIGHTS = [0.35, 0.25, 0.15, 0.10, 0.10, 0.05]
SPEC_GATES = {
    "negative_mood_strength": 0.15,
    "negative_mood_center": -0.5,
    "negative_mood_sharpness": 5.0,
    "high_arousal_strength": 0.10,
    "high_arousal_center": 0.7,
    "high_arousal_sharpness": 5.0,
    "calm_strength": 0.15,
    "calm_valence_width": 0.2,
    "calm_arousal_center": 0.3,
    "calm_sharpness": 5.0,
}
SPEC_DECAY = {
    "base_decay": 0.5,
    "arousal_modulation": 0.5,
    "retrieval_boost": 0.1,
    "floor_arousal_threshold": 0.7,
    "floor_value": 0.1,
    "min_seconds": 1.0,
    "power": 1.0,
}
ABLATION_MASKS = {
    "all": [1.0, 1.0, 1.0, 1.0, 1.0, 1.0],
    "no_mood": [1.0, 0.0, 1.0, 1.0, 1.0, 1.0],
    "no_momentum": [1.0, 1.0, 1.0, 0.0, 1.0, 1.0],
    "no_resonance": [1.0, 1.0, 1.0, 1.0, 1.0, 0.0],
    "none_of_three": [1.0, 0.0, 1.0, 0.0, 1.0, 0.0],
}


# --------------------------------------------------------------------------- builders


def default_params(**decay_overrides: float) -> ScoringParams:
    return params_from_config(RetrievalConfig(), DecayConfig(**decay_overrides))


def params_variant(name: str) -> ScoringParams:
    """Parameter sets that drive the weight normalisation into its branches."""
    zero_gates = AdaptiveWeightsConfig(
        negative_mood_strength=0.0, high_arousal_strength=0.0, calm_strength=0.0
    )
    if name == "default":
        return default_params()
    if name == "min_seconds_zero":  # beyond config validation (a training step may go there)
        params = default_params()
        return eqx.tree_at(lambda t: t.decay.min_seconds, params, np.float64(0.0))
    if name == "all_zero_base":  # everything cancels -> uniform 1/6 fallback
        cfg = RetrievalConfig(base_weights=[0.0] * 6, adaptive_weights_config=zero_gates)
    elif name == "all_negative_base":  # everything clipped at 0 -> uniform fallback
        cfg = RetrievalConfig(base_weights=[-1.0] * 6, adaptive_weights_config=zero_gates)
    elif name == "clipped":  # w0 pushed below 0 by a negative/aroused mood, clipped
        cfg = RetrievalConfig(
            base_weights=[0.01, 0.3, 0.2, 0.2, 0.2, 0.09],
            adaptive_weights_config=AdaptiveWeightsConfig(
                negative_mood_strength=1.0, high_arousal_strength=1.0
            ),
        )
    elif name == "masked_all_zero":  # enabled weights all 0 under "none_of_three" mask
        cfg = RetrievalConfig(
            base_weights=[0.0, 1.0, 0.0, 1.0, 0.0, 1.0], adaptive_weights_config=zero_gates
        )
    elif name == "calibrated":
        cfg = RetrievalConfig(
            signal_scale=[1.5, 0.5, 2.0, 1.0, 0.7, 3.0],
            signal_shift=[0.1, -0.2, 0.0, 0.3, -0.1, 0.05],
        )
    else:  # pragma: no cover
        raise KeyError(name)
    return params_from_config(cfg, DecayConfig())


PARAM_VARIANTS = (
    "default", "all_zero_base", "all_negative_base", "clipped", "masked_all_zero", "calibrated",
    "min_seconds_zero",
)


def _unit(rng: np.random.Generator, d: int) -> np.ndarray:
    v = rng.normal(size=d)
    return v / np.linalg.norm(v)


def random_bank(
    rng: np.random.Generator,
    n: int = N_ROWS,
    d: int = DIM,
    *,
    edge_fraction: float = 0.0,
    near_threshold: bool = True,
) -> tuple[QueryFeatures, MemoryColumns]:
    """A random query and bank as float64 numpy leaves.

    With ``edge_fraction`` > 0 that share of rows is overwritten with a random SPEC
    edge case (missing/NaN embedding, identical affect, zero velocity, tiny ages, the
    arousal floor, ...). ``near_threshold=False`` avoids velocities near 1e-12.
    """
    q_affect = np.array([rng.uniform(-1, 1), rng.uniform(0, 1), rng.uniform(0, 1)])
    q_mood = np.array([rng.uniform(-1, 1), rng.uniform(0, 1), rng.uniform(0, 1)])
    query = QueryFeatures(
        embedding=rng.normal(size=d),
        affect=q_affect,
        mood=q_mood,
        velocity=rng.normal(size=3) * 10 ** rng.uniform(-3, 0),
    )
    emb = rng.normal(size=(n, d))
    affect = np.column_stack([rng.uniform(-1, 1, n), rng.uniform(0, 1, n), rng.uniform(0, 1, n)])
    mood = np.column_stack([rng.uniform(-1, 1, n), rng.uniform(0, 1, n), rng.uniform(0, 1, n)])
    velocity = rng.normal(size=(n, 3)) * 10 ** rng.uniform(-3, 0, size=(n, 1))
    age = 10 ** rng.uniform(-1, 7.5, n)
    consolidation = rng.uniform(0.1, 1.0, n)
    count = rng.integers(0, 25, n).astype(np.float64)
    activation = np.where(rng.random(n) < 0.5, rng.uniform(0, 1, n), 0.0)

    edges = [
        "zero_emb", "nan_emb", "same_affect", "same_mood", "zero_vel", "age_below_min",
        "age_zero", "age_negative", "arousal_at_floor", "arousal_above", "low_consolidation",
        "zero_consolidation", "full_activation",
    ]
    if near_threshold:
        edges.append("tiny_vel")
    for i in range(n):
        if rng.random() >= edge_fraction:
            continue
        edge = edges[rng.integers(len(edges))]
        if edge == "zero_emb":
            emb[i] = 0.0
        elif edge == "nan_emb":
            emb[i, rng.integers(d)] = np.nan
        elif edge == "same_affect":
            affect[i] = q_affect
        elif edge == "same_mood":
            mood[i] = q_mood
        elif edge == "zero_vel":
            velocity[i] = 0.0
        elif edge == "tiny_vel":
            velocity[i] = _unit(rng, 3) * 1e-13
        elif edge == "age_below_min":
            age[i] = rng.uniform(0.0, 1.0)
        elif edge == "age_zero":
            age[i] = 0.0
        elif edge == "age_negative":
            age[i] = -rng.uniform(1.0, 1e4)
        elif edge == "arousal_at_floor":
            affect[i, 1] = 0.7
        elif edge == "arousal_above":
            affect[i, 1] = rng.choice([0.85, 1.0])
            age[i] = 1e7
        elif edge == "low_consolidation":
            consolidation[i] = 0.05
            affect[i, 1] = 0.9
        elif edge == "zero_consolidation":
            consolidation[i] = 0.0
        elif edge == "full_activation":
            activation[i] = 1.0
    cols = MemoryColumns(
        embedding=emb,
        affect=affect,
        mood=mood,
        velocity=velocity,
        age_seconds=age,
        consolidation=consolidation,
        retrieval_count=count,
        activation=activation,
        valid=np.ones(n, dtype=bool),
    )
    return query, cols


def edge_bank(query_kind: str = "normal") -> tuple[QueryFeatures, MemoryColumns]:
    """A deterministic bank with one row per SPEC edge case, plus padding rows."""
    rng = np.random.default_rng(1234)
    d = DIM
    q_affect = np.array([0.2, 0.4, 0.6])
    q_mood = np.array([-0.6, 0.7, 0.5])  # negative, at the arousal gate centre
    q_emb = rng.normal(size=d)
    q_vel = np.array([0.3, -0.2, 0.1])
    if query_kind == "zero_embedding":
        q_emb = np.zeros(d)
    elif query_kind == "nan_embedding":
        q_emb[2] = np.nan
    elif query_kind == "zero_velocity":
        q_vel = np.zeros(3)
    elif query_kind == "calm":
        q_mood = np.array([0.0, 0.0, 0.5])
    elif query_kind == "extreme_mood":
        q_mood = np.array([1.0, 1.0, 1.0])
    query = QueryFeatures(embedding=q_emb, affect=q_affect, mood=q_mood, velocity=q_vel)

    rows: list[dict[str, Any]] = []

    def row(**kw: Any) -> None:
        base = {
            "embedding": rng.normal(size=d),
            "affect": np.array([rng.uniform(-1, 1), 0.3, rng.uniform(0, 1)]),
            "mood": np.array([rng.uniform(-1, 1), rng.uniform(0, 1), rng.uniform(0, 1)]),
            "velocity": rng.normal(size=3),
            "age_seconds": 3600.0,
            "consolidation": 0.8,
            "retrieval_count": 2.0,
            "activation": 0.0,
        }
        base.update(kw)
        rows.append(base)

    row()  # an ordinary memory
    row(embedding=np.zeros(d))  # missing embedding
    row(embedding=np.array([np.nan] + [1.0] * (d - 1)))  # NaN embedding
    row(embedding=q_emb.copy())  # identical embedding (cosine 1)
    row(embedding=-q_emb)  # opposite embedding (cosine -1)
    row(affect=q_affect.copy())  # identical affect: distance 0, sqrt at 0
    row(mood=q_mood.copy())  # identical mood
    row(affect=np.array([-1.0, 0.0, 0.0]), mood=np.array([1.0, 0.0, 0.0]))  # far affects
    row(velocity=np.zeros(3))  # zero memory velocity
    row(velocity=np.array([1e-13, 0.0, 0.0]))  # below MOMENTUM_EPS
    row(velocity=q_vel.copy())  # aligned
    row(velocity=-q_vel)  # opposed
    row(age_seconds=0.0)
    row(age_seconds=0.5)  # below min_seconds
    row(age_seconds=1.0)  # exactly min_seconds
    row(age_seconds=-50.0)  # negative age (clock skew)
    row(affect=np.array([0.1, 0.7, 0.5]), age_seconds=1e8)  # arousal exactly at threshold
    row(affect=np.array([0.1, 0.95, 0.5]), age_seconds=1e8)  # above threshold, floored
    row(affect=np.array([0.1, 1.0, 0.5]), age_seconds=10.0)  # above threshold, not floored
    row(affect=np.array([0.1, 0.9, 0.5]), consolidation=0.05, age_seconds=1e8)  # c < floor
    row(consolidation=0.0, affect=np.array([0.0, 0.8, 0.5]))
    row(retrieval_count=0.0, age_seconds=1e6)
    row(activation=1.0)
    row(activation=0.37, embedding=np.zeros(d), velocity=np.zeros(3))
    n_real = len(rows)
    cols = MemoryColumns(
        **{k: np.stack([np.asarray(r[k], dtype=np.float64) for r in rows]) for k in rows[0]},
        valid=np.ones(n_real, dtype=bool),
    )
    return query, pad_columns(cols, n_real + 8)  # 24 real rows + 8 padding = 32


def to_dtype(tree: Any, dtype: Any) -> Any:
    """Cast every inexact leaf to a JAX array of ``dtype`` (bool leaves stay bool)."""

    def cast(x: Any) -> Any:
        arr = np.asarray(x)
        if arr.dtype == bool:
            return jnp.asarray(arr)
        return jnp.asarray(arr, dtype=dtype)

    return jax.tree.map(cast, tree)


def row_of(cols: MemoryColumns, i: int) -> MemoryColumns:
    return jax.tree.map(lambda x: x[i], cols)


# --------------------------------------------------------------------------- oracle


def oracle_signals(
    query: QueryFeatures, cols: MemoryColumns, i: int, decay: dict[str, float]
) -> list[float]:
    """SPEC 4 signals for row ``i`` in plain Python floats (independent of the kernel)."""
    qe = [float(x) for x in np.asarray(query.embedding)]
    me = [float(x) for x in np.asarray(cols.embedding)[i]]

    def norm(v: list[float]) -> float:
        return math.sqrt(sum(x * x for x in v))

    if any(math.isnan(x) for x in qe + me) or norm(qe) == 0 or norm(me) == 0:
        s1 = 0.0
    else:
        s1 = sum(a * b for a, b in zip(qe, me, strict=True)) / (norm(qe) * norm(me))

    def prox(a: Any, b: Any) -> float:
        dist = math.sqrt(sum((float(x) - float(y)) ** 2 for x, y in zip(a, b, strict=True)))
        return max(0.0, 1.0 - dist / SQRT6)

    s2 = prox(query.mood, np.asarray(cols.mood)[i])
    s3 = prox(query.affect, np.asarray(cols.affect)[i])
    vq = [float(x) for x in np.asarray(query.velocity)]
    vm = [float(x) for x in np.asarray(cols.velocity)[i]]
    if norm(vq) < 1e-12 or norm(vm) < 1e-12:
        s4 = 0.5
    else:
        s4 = (sum(a * b for a, b in zip(vq, vm, strict=True)) / (norm(vq) * norm(vm)) + 1) / 2
    a = float(np.asarray(cols.affect)[i, 1])
    c = float(np.asarray(cols.consolidation)[i])
    elapsed = max(float(np.asarray(cols.age_seconds)[i]), decay["min_seconds"])
    rate = max(
        0.0,
        decay["base_decay"]
        * (1 - decay["arousal_modulation"] * a)
        / (1 + decay["retrieval_boost"] * float(np.asarray(cols.retrieval_count)[i])),
    )
    s = c * elapsed ** (-rate * decay["power"])
    s = min(max(s, 0.0), c)
    if a >= decay["floor_arousal_threshold"]:
        s = max(s, min(decay["floor_value"], c))
    s6 = float(np.asarray(cols.activation)[i])
    return [s1, s2, s3, s4, s, s6]


def oracle_weights(mood_valence: float, mood_arousal: float, base: list[float]) -> list[float]:
    cfg = SPEC_GATES

    def gate(x: float, c: float, k: float) -> float:
        return 0.5 * (1 + math.tanh(k * (x - c)))

    w = list(base)
    s_n = cfg["negative_mood_strength"]
    neg = gate(mood_valence, cfg["negative_mood_center"], -cfg["negative_mood_sharpness"])
    w[1] += s_n * neg * 2 / 3
    w[2] += s_n * neg / 3
    w[0] -= s_n * neg
    aro = gate(mood_arousal, cfg["high_arousal_center"], cfg["high_arousal_sharpness"])
    w[3] += cfg["high_arousal_strength"] * aro
    w[0] -= cfg["high_arousal_strength"] * aro
    calm = math.exp(-((mood_valence / cfg["calm_valence_width"]) ** 2)) * gate(
        mood_arousal, cfg["calm_arousal_center"], -cfg["calm_sharpness"]
    )
    s_c = cfg["calm_strength"]
    w[0] += s_c * calm
    w[1] -= s_c * calm * 2 / 3
    w[2] -= s_c * calm / 3
    w = [max(0.0, x) for x in w]
    total = sum(w)
    return [x / total for x in w] if total > 0 else [1 / 6] * 6


def test_oracle_agrees_on_edge_bank_x64() -> None:
    """The kernel reproduces SPEC's numbers on every edge row (sanity for what follows)."""
    for kind in ("normal", "zero_embedding", "nan_embedding", "zero_velocity", "calm"):
        query, cols = edge_bank(kind)
        with jax.enable_x64(True):
            out = _score_bank_jit(*to_dtype((default_params(), query, cols), jnp.float64))
            raw = np.asarray(out.raw)
            weights = np.asarray(out.weights)
            totals = np.asarray(out.totals)
        mood = np.asarray(query.mood)
        w_ref = oracle_weights(float(mood[0]), float(mood[1]), SPEC_BASE_WEIGHTS)
        np.testing.assert_allclose(weights, w_ref, rtol=0, atol=1e-12)
        valid = np.asarray(cols.valid)
        for i in np.flatnonzero(valid):
            ref = oracle_signals(query, cols, int(i), SPEC_DECAY)
            np.testing.assert_allclose(raw[i], ref, rtol=0, atol=1e-12, err_msg=f"{kind} row {i}")
            total = sum(w * s for w, s in zip(weights, ref, strict=True))
            assert abs(totals[i] - total) <= 1e-12
        assert np.all(totals[~valid] == -np.inf)


# --------------------------------------------------------------------------- gradients
#
# One compiled Jacobian per dtype serves every gradient test: it differentiates three
# training-style objectives w.r.t. EVERY inexact leaf of (params, query, columns). The
# mask is always an array (all ones = no ablation, which passes the weights through
# bit-for-bit), so the compiled program is shared by all cases.

NO_MASK = ABLATION_MASKS["all"]


def _losses(
    params: ScoringParams, query: QueryFeatures, cols: MemoryColumns, mask: Any, coeffs: Any
) -> jax.Array:
    """Sum of valid totals, a weighted sum, and a listwise softmax cross-entropy."""
    out = score_bank(params, query, cols, mask)
    valid_totals = jnp.where(cols.valid, out.totals, 0.0)
    summed = jnp.sum(valid_totals)
    weighted = jnp.sum(coeffs * valid_totals) + jnp.sum(out.weights * jnp.arange(1.0, 7.0))
    # the -inf padding totals flow through logsumexp, as in the listwise training loss
    listwise = jax.nn.logsumexp(out.totals / 0.1) - out.totals[0] / 0.1
    return jnp.stack([summed, weighted, listwise])


def _jacobian(diff: Any, static: Any, mask: Any, coeffs: Any) -> tuple[jax.Array, Any]:
    def f(d: Any) -> jax.Array:
        params, query, cols = eqx.combine(d, static)
        return _losses(params, query, cols, mask, coeffs)

    return f(diff), jax.jacrev(f)(diff)


_jacobian_jit = jax.jit(_jacobian)


def _assert_all_finite(tree: Any, what: str) -> None:
    leaves = jax.tree_util.tree_leaves_with_path(tree)
    assert leaves, what
    for path, leaf in leaves:
        arr = np.asarray(leaf)
        bad = ~np.isfinite(arr)
        assert not bad.any(), (
            f"{what}: non-finite gradient at {jax.tree_util.keystr(path)}: "
            f"{arr[bad][:5]} (indices {np.argwhere(bad)[:5].tolist()})"
        )


def check_finite_grads(
    params: ScoringParams, query: Any, cols: Any, mask: Any, dtype: Any, what: str
) -> None:
    """Gradients of every objective w.r.t. every param (and input) leaf are finite."""
    tree = to_dtype((params, query, cols), dtype)
    diff, static = eqx.partition(tree, eqx.is_inexact_array)
    coeffs = jnp.linspace(-1.0, 2.0, cols.size, dtype=dtype)
    losses, (g_params, g_query, g_cols) = _jacobian_jit(
        diff, static, jnp.asarray(mask, dtype), coeffs
    )
    assert np.all(np.isfinite(np.asarray(losses))), f"{what}: losses {losses}"
    leaves = {f: getattr(g_params, f) for f in SMOOTH_LEAVES}
    assert all(leaf is not None for leaf in leaves.values())
    for name, leaf in leaves.items():
        for part in jax.tree_util.tree_leaves(leaf):  # a group's named scalars too
            assert np.asarray(part).dtype == np.dtype(dtype), (what, name)
    _assert_all_finite(g_params, f"{what} [params]")
    _assert_all_finite((g_query, g_cols), f"{what} [inputs]")


SMOOTH_LEAVES = ("base_weights", "gates", "decay", "distance_scale", "signal_scale",
                 "signal_shift")
QUERY_KINDS = ("normal", "zero_embedding", "nan_embedding", "zero_velocity", "calm",
               "extreme_mood")


@pytest.mark.parametrize("x64", [True, False], ids=["float64", "float32"])
@pytest.mark.parametrize("variant", PARAM_VARIANTS)
def test_grads_finite_on_edge_bank(x64: bool, variant: str) -> None:
    """Every SPEC branch at once: NaN/zero embeddings, distance 0, zero velocity, ages
    below min_seconds and negative, arousal at/above the floor threshold, consolidation
    below the floor, uniform fallback, clipped weights - for each kind of query."""
    params = params_variant(variant)
    dtype = jnp.float64 if x64 else jnp.float32
    with jax.enable_x64(x64):
        for kind in QUERY_KINDS:
            query, cols = edge_bank(kind)
            check_finite_grads(params, query, cols, NO_MASK, dtype, f"{variant}/{kind}")


@pytest.mark.parametrize("x64", [True, False], ids=["float64", "float32"])
@pytest.mark.parametrize("variant", ["default", "masked_all_zero", "all_zero_base", "clipped"])
def test_grads_finite_with_ablation_masks(x64: bool, variant: str) -> None:
    params = params_variant(variant)
    dtype = jnp.float64 if x64 else jnp.float32
    with jax.enable_x64(x64):
        for mask_name, mask in ABLATION_MASKS.items():
            for kind in ("normal", "zero_velocity"):
                query, cols = edge_bank(kind)
                check_finite_grads(params, query, cols, mask, dtype,
                                   f"{variant}/{mask_name}/{kind}")


def test_edge_variants_really_hit_their_branches() -> None:
    query, cols = edge_bank("normal")
    with jax.enable_x64(True):
        q, c = to_dtype((query, cols), jnp.float64)

        def weights(variant: str, mask: list[float] | None = None) -> np.ndarray:
            p = to_dtype(params_variant(variant), jnp.float64)
            m = None if mask is None else jnp.asarray(mask)
            return np.asarray(_score_bank_jit(p, q, c, m).weights)

        np.testing.assert_array_equal(
            weights("masked_all_zero", ABLATION_MASKS["none_of_three"]),
            [1 / 3, 0, 1 / 3, 0, 1 / 3, 0],
        )
        np.testing.assert_array_equal(weights("all_zero_base"), [1 / 6] * 6)
        np.testing.assert_array_equal(weights("all_negative_base"), [1 / 6] * 6)
        clipped = weights("clipped")
        assert clipped[0] == 0.0  # w0 pushed below 0 by the negative, aroused mood
        assert abs(clipped.sum() - 1.0) < 1e-15
        raw = np.asarray(_score_bank_jit(to_dtype(default_params(), jnp.float64), q, c).raw)
    # the bank contains the degenerate rows it claims to
    assert raw[1, 0] == 0.0 and raw[2, 0] == 0.0  # missing / NaN embedding
    assert raw[3, 0] == pytest.approx(1.0) and raw[4, 0] == pytest.approx(-1.0)
    assert raw[5, 2] == 1.0 and raw[6, 1] == 1.0  # identical affect / mood
    assert raw[8, 3] == 0.5 and raw[9, 3] == 0.5  # zero / tiny velocity
    assert raw[12, 4] == raw[13, 4] == raw[14, 4] == raw[15, 4] == 0.8  # ages <= min_seconds
    assert raw[16, 4] == 0.1 and raw[17, 4] == 0.1  # floored at and above the threshold
    assert raw[19, 4] == 0.05  # consolidation below the floor value


@FAST
@given(
    seed=st.integers(0, 2**32 - 1),
    variant=st.sampled_from(PARAM_VARIANTS),
    mask_name=st.sampled_from(sorted(ABLATION_MASKS)),
    x64=st.booleans(),
)
def test_grads_finite_random_banks(seed: int, variant: str, mask_name: str, x64: bool) -> None:
    rng = np.random.default_rng(seed)
    query, cols = random_bank(rng, edge_fraction=0.6)
    cols = pad_columns(cols)  # 24 -> 32, with padding rows
    if rng.random() < 0.3:
        query = eqx.tree_at(lambda q: q.embedding, query, np.zeros(DIM))
    if rng.random() < 0.3:
        query = eqx.tree_at(lambda q: q.velocity, query, np.zeros(3))
    dtype = jnp.float64 if x64 else jnp.float32
    with jax.enable_x64(x64):
        check_finite_grads(params_variant(variant), query, cols, ABLATION_MASKS[mask_name],
                           dtype, f"seed={seed} {variant} {mask_name}")


def test_grads_finite_without_mask_argument() -> None:
    """The default (mask=None) program, float64, on the edge bank with every query kind."""
    grad = jax.jit(jax.grad(
        lambda p, q, c: jnp.sum(jnp.where(c.valid, score_bank(p, q, c).totals, 0.0))
    ))
    with jax.enable_x64(True):
        for variant in PARAM_VARIANTS:
            for kind in QUERY_KINDS:
                g = grad(*to_dtype((params_variant(variant), *edge_bank(kind)), jnp.float64))
                _assert_all_finite(g, f"{variant}/{kind}")


def test_grad_of_score_with_weights_is_finite() -> None:
    query, cols = edge_bank("nan_embedding")

    def f(w: jax.Array, params: ScoringParams, q: Any, c: Any) -> jax.Array:
        out = score_with_weights(w, params, q, c)
        return jnp.sum(jnp.where(c.valid, out.totals, 0.0))

    with jax.enable_x64(True):
        p, q, c = to_dtype((default_params(), query, cols), jnp.float64)
        g_w, g_p = jax.jit(jax.grad(f, argnums=(0, 1)))(jnp.full(6, 1 / 6), p, q, c)
        _assert_all_finite((g_w, g_p), "score_with_weights")
        # d(sum of totals)/d(w_i) = sum of signal i over the valid rows
        raw = np.asarray(_score_bank_jit(p, q, c).raw)
        np.testing.assert_allclose(
            np.asarray(g_w), raw[np.asarray(c.valid)].sum(axis=0), rtol=1e-12
        )


@pytest.mark.parametrize("kind", QUERY_KINDS)
@pytest.mark.parametrize("mask_name", [None, "no_mood", "none_of_three"])
def test_score_given_semantic_with_bank_cosine_is_score_bank(
    kind: str, mask_name: str | None
) -> None:
    """With s1 = bank_cosine, the given-semantic scorer is score_bank to the bit."""
    with jax.enable_x64(True):
        p, q, c = to_dtype((params_variant("calibrated"), *edge_bank(kind)), jnp.float64)
        mask = None if mask_name is None else jnp.asarray(ABLATION_MASKS[mask_name])
        ref = score_bank(p, q, c, mask)
        out = score_given_semantic(p, q, c, bank_cosine(q.embedding, c.embedding), mask)
        for name in ("raw", "weights", "totals"):
            np.testing.assert_array_equal(
                np.asarray(getattr(out, name)), np.asarray(getattr(ref, name)), err_msg=name
            )


def test_score_given_semantic_uses_supplied_semantic() -> None:
    """s1 comes from the argument (calibrated); the other signals and the weights are
    score_bank's (to round-off: this side is jit-compiled, the reference eager)."""
    rng = np.random.default_rng(3)
    query, cols = random_bank(rng, n=10)
    with jax.enable_x64(True):
        p, q, c = to_dtype((params_variant("calibrated"), query, pad_columns(cols)), jnp.float64)
        semantic = jnp.asarray(rng.uniform(-1, 1, c.size))
        out = jax.jit(score_given_semantic)(p, q, c, semantic)
        ref = score_bank(p, q, c)
        raw = np.asarray(out.raw)
        np.testing.assert_allclose(raw[:, 1:], np.asarray(ref.raw)[:, 1:], rtol=1e-12)
        np.testing.assert_allclose(
            raw[:, 0], np.asarray(semantic) * p.signal_scale[0] + p.signal_shift[0], rtol=1e-15
        )
        np.testing.assert_allclose(np.asarray(out.weights), np.asarray(ref.weights), rtol=1e-12)
        valid = np.asarray(c.valid)
        totals = np.asarray(out.totals)
        assert np.all(totals[~valid] == -np.inf)
        w = np.asarray(out.weights)
        np.testing.assert_allclose(totals[valid], raw[valid] @ w, rtol=1e-12)
        # s1 enters each total linearly with the weight of s1 times its calibration scale
        grad = jax.grad(lambda s: jnp.sum(jnp.where(
            c.valid, score_given_semantic(p, q, c, s).totals, 0.0)))(semantic)
        expected = np.where(valid, w[0] * float(p.signal_scale[0]), 0.0)
        np.testing.assert_allclose(np.asarray(grad), expected, rtol=1e-12)


# --- check_grads at smooth points (away from every kink) ------------------------------


def smooth_bank() -> tuple[QueryFeatures, MemoryColumns]:
    """Rows away from every kink: positive weights, distinct affects, nonzero velocities,
    ages above min_seconds (or clamped to a min_seconds of 5 s), arousal clear of 0.7 and
    strengths clear of the floor."""
    rng = np.random.default_rng(7)
    d = 5
    query = QueryFeatures(
        embedding=rng.normal(size=d),
        affect=np.array([0.1, 0.5, 0.4]),
        mood=np.array([-0.3, 0.6, 0.5]),  # every gate partly open
        velocity=np.array([0.2, -0.1, 0.3]),
    )
    ages = [0.5, -20.0, 30.0, 600.0, 1e4, 1e5, 100.0, 1e6, 50.0, 2e3]
    arousal = [0.2, 0.4, 0.6, 0.1, 0.5, 0.3, 0.9, 0.95, 0.65, 0.35]
    n = len(ages)
    cols = MemoryColumns(
        embedding=rng.normal(size=(n, d)),
        affect=np.column_stack([rng.uniform(-0.9, 0.9, n), arousal, rng.uniform(0.1, 0.9, n)]),
        mood=np.column_stack([rng.uniform(-0.9, 0.9, n), rng.uniform(0.1, 0.9, n),
                              rng.uniform(0.1, 0.9, n)]),
        velocity=rng.normal(size=(n, 3)),
        age_seconds=np.asarray(ages),
        consolidation=np.asarray([0.8, 0.5, 0.9, 0.7, 0.6, 0.95, 0.8, 0.8, 0.4, 0.75]),
        retrieval_count=np.asarray([0.0, 1, 2, 3, 0, 5, 1, 0, 2, 4]),
        activation=np.asarray([0.0, 0.3, 0.0, 0.8, 0.1, 0.0, 0.5, 0.2, 0.0, 0.9]),
        valid=np.ones(n, dtype=bool),
    )
    return query, cols


def test_check_grads_params_at_smooth_point() -> None:
    """Numerical vs reverse-mode gradients for base weights, the ten gate parameters, the
    seven decay parameters, the distance scale and the calibration (float64)."""
    query, cols = smooth_bank()
    with jax.enable_x64(True):
        params = to_dtype(default_params(min_seconds=5.0), jnp.float64)
        q, c = to_dtype((query, cols), jnp.float64)
        coeffs = jnp.linspace(-1.0, 1.5, c.size)
        # Guard: the point really is smooth.
        no_floor = to_dtype(default_params(min_seconds=5.0, floor_arousal_threshold=2.0),
                            jnp.float64)
        s5 = np.asarray(_score_bank_jit(no_floor, q, c).raw[:, 4])
        assert np.all(np.abs(s5 - 0.1) > 1e-2)  # unfloored strengths clear of the floor
        assert np.all(np.asarray(_score_bank_jit(params, q, c).weights) > 1e-2)
        leaves = tuple(getattr(params, name) for name in SMOOTH_LEAVES)
        no_mood = jnp.asarray(ABLATION_MASKS["no_mood"])

        @jax.jit
        def f(*xs: jax.Array) -> jax.Array:
            p = eqx.tree_at(lambda t: tuple(getattr(t, n) for n in SMOOTH_LEAVES), params, xs)
            # the default (mask=None) program and a masked one, checked together
            return jnp.concatenate([_losses(p, q, c, None, coeffs),
                                    _losses(p, q, c, no_mood, coeffs)])

        check_grads(f, leaves, order=1, modes=["rev"])


def test_check_grads_wrt_query_state_at_smooth_point() -> None:
    query, cols = smooth_bank()
    with jax.enable_x64(True):
        params, q, c = to_dtype((default_params(min_seconds=5.0), query, cols), jnp.float64)

        @jax.jit
        def f(mood: jax.Array, affect: jax.Array, vel: jax.Array, emb: jax.Array) -> jax.Array:
            qq = QueryFeatures(embedding=emb, affect=affect, mood=mood, velocity=vel)
            return jnp.sum(score_bank(params, qq, c).totals)

        check_grads(f, (q.mood, q.affect, q.velocity, q.embedding), order=1, modes=["rev"])


# --------------------------------------------------------------------------- jit == eager


@pytest.mark.parametrize("x64", [True, False], ids=["float64", "float32"])
def test_jit_equals_eager(x64: bool) -> None:
    dtype = jnp.float64 if x64 else jnp.float32
    atol = 1e-12 if x64 else 1e-6
    rng = np.random.default_rng(99)
    query, cols = random_bank(rng, edge_fraction=0.5)
    banks = [(query, pad_columns(cols)), edge_bank("normal"), edge_bank("nan_embedding")]
    fresh_jit = jax.jit(score_bank)
    cases = [
        (variant, mask_name, bank)
        for mask_name in (None, "none_of_three")
        for bank in banks
        for variant in ("default", "masked_all_zero")
        if variant == "default" or mask_name is not None
    ]
    with jax.enable_x64(x64):
        for variant, mask_name, (q, c) in cases:
            mask = None if mask_name is None else jnp.asarray(ABLATION_MASKS[mask_name], dtype)
            p, q, c = to_dtype((params_variant(variant), q, c), dtype)
            eager = score_bank(p, q, c, mask)
            for fn in (fresh_jit, _score_bank_jit):
                jitted = fn(p, q, c, mask)
                for name in ("raw", "weights", "totals"):
                    a = np.asarray(getattr(eager, name))
                    b = np.asarray(getattr(jitted, name))
                    assert a.dtype == b.dtype == np.dtype(dtype)
                    np.testing.assert_allclose(b, a, rtol=0, atol=atol, err_msg=name)


# --------------------------------------------------------------------------- vmap == loop


_signals_jit = jax.jit(signals)
_vmapped_signals_jit = jax.jit(jax.vmap(signals, in_axes=(None, None, 0)))


def test_vmap_over_10k_equals_per_memory_loop_x64() -> None:
    rng = np.random.default_rng(2024)
    n = 10_000
    query, cols = random_bank(rng, n=n, d=16, edge_fraction=0.3)
    with jax.enable_x64(True):
        p, q, c = to_dtype((default_params(), query, cols), jnp.float64)
        vmapped = np.asarray(_vmapped_signals_jit(p, q, c))
        out = _score_bank_jit(p, q, c)
        raw = np.asarray(out.raw)
        assert vmapped.shape == raw.shape == (n, 6)
        np.testing.assert_allclose(raw, vmapped, rtol=0, atol=1e-12)
        assert np.all(np.isfinite(raw))
        weights = [float(w) for w in np.asarray(out.weights)]
        totals = np.asarray(out.totals)
        rows = rng.choice(n, size=300, replace=False)
        for k, i in enumerate(rows):
            row = row_of(c, int(i))
            one = np.asarray(_signals_jit(p, q, row))
            np.testing.assert_allclose(vmapped[i], one, rtol=0, atol=1e-12, err_msg=f"row {i}")
            total = sum(w * float(s) for w, s in zip(weights, one, strict=True))
            assert abs(float(totals[i]) - total) <= 1e-12
            if k < 3:  # a few rows through the un-jitted per-memory function as well
                eager = np.asarray(signals(p, q, row))
                np.testing.assert_allclose(eager, one, rtol=0, atol=1e-12)


# --------------------------------------------------------------------------- padding


@FAST
@given(seed=st.integers(0, 2**32 - 1), n=st.sampled_from([2, 21]))
def test_padded_bank_scores_exactly_like_unpadded(seed: int, n: int) -> None:
    rng = np.random.default_rng(seed)
    query, cols = random_bank(rng, n=n, edge_fraction=0.4)
    with jax.enable_x64(True):
        p, q, c = to_dtype((default_params(), query, cols), jnp.float64)
        ref = _score_bank_jit(p, q, c)
        for size in (None, 40):  # the bucket (16 or 32) and an explicit larger size
            for padded in (pad_columns(cols, size), pad_columns(c, size)):
                m = padded.size
                assert m == (bucket_size(n) if size is None else size)
                assert np.asarray(padded.valid)[:n].all()
                assert not np.asarray(padded.valid)[n:].any()
                out = _score_bank_jit(p, q, to_dtype(padded, jnp.float64))
                np.testing.assert_array_equal(np.asarray(out.raw)[:n], np.asarray(ref.raw))
                np.testing.assert_array_equal(np.asarray(out.weights), np.asarray(ref.weights))
                np.testing.assert_array_equal(np.asarray(out.totals)[:n], np.asarray(ref.totals))
                assert np.all(np.asarray(out.totals)[n:] == -np.inf)
                order = np.asarray(stable_rank(out.totals, padded.valid))
                np.testing.assert_array_equal(order[:n], np.asarray(stable_rank(ref.totals)))
                np.testing.assert_array_equal(order[n:], np.arange(n, m))
                order_nomask = np.asarray(stable_rank(out.totals))
                np.testing.assert_array_equal(order_nomask[n:], np.arange(n, m))


def test_single_row_bank_pads_exactly() -> None:
    diffs = []
    for seed in range(3):
        query, cols = random_bank(np.random.default_rng(seed), n=1)
        with jax.enable_x64(True):
            p, q, c = to_dtype((default_params(), query, cols), jnp.float64)
            ref = np.asarray(_score_bank_jit(p, q, c).raw)
            out = np.asarray(_score_bank_jit(p, q, to_dtype(pad_columns(cols), jnp.float64)).raw)
        diffs.append(float(np.max(np.abs(out[:1] - ref))))
    assert max(diffs) <= 1e-15  # at most round-off either way
    assert diffs == [0.0] * 3


def test_padding_rows_sort_last_even_below_negative_scores() -> None:
    totals = jnp.asarray([-5.0, 0.2, -1e30, 0.0, 0.0])
    valid = jnp.asarray([True, True, True, False, False])
    order = np.asarray(stable_rank(totals, valid))
    np.testing.assert_array_equal(order, [1, 0, 2, 3, 4])


def test_pad_columns_rejects_smaller_size_and_keeps_numpy() -> None:
    _, cols = random_bank(np.random.default_rng(0), n=20)
    with pytest.raises(ValueError, match="size"):
        pad_columns(cols, 10)
    padded = pad_columns(cols)
    assert isinstance(padded.embedding, np.ndarray)
    assert padded.size == 32
    assert padded.valid.dtype == bool
    assert np.all(padded.embedding[20:] == 0.0)
    same = pad_columns(cols, 20)
    np.testing.assert_array_equal(same.age_seconds, cols.age_seconds)


@given(n=st.integers(0, 5_000_000))
@settings(max_examples=200, deadline=None)
def test_bucket_size_properties(n: int) -> None:
    b = bucket_size(n)
    assert b >= n and b >= 16
    assert b & (b - 1) == 0  # power of two
    assert b // 2 < max(n, 16)  # the smallest such
    assert bucket_size(b) == b


def test_bucket_size_examples() -> None:
    assert [bucket_size(n) for n in (0, 1, 15, 16, 17, 32, 33, 1000, 1024, 1025)] == [
        16, 16, 16, 16, 32, 32, 64, 1024, 1024, 2048
    ]
    assert bucket_size(3, minimum=1) == 4
    # a growing store recompiles O(log N) times
    assert len({bucket_size(n) for n in range(1, 100_001)}) == 14


# --------------------------------------------------------------------------- f32 vs f64


@FAST
@given(seed=st.integers(0, 2**32 - 1), variant=st.sampled_from(PARAM_VARIANTS))
def test_float32_agrees_with_float64(seed: int, variant: str) -> None:
    rng = np.random.default_rng(seed)
    query, cols = random_bank(rng, n=N_ROWS, edge_fraction=0.4, near_threshold=False)
    cols = pad_columns(cols)
    params = params_variant(variant)
    with jax.enable_x64(True):
        out64 = _score_bank_jit(*to_dtype((params, query, cols), jnp.float64))
        t64 = np.asarray(out64.totals)
        r64 = np.asarray(out64.raw)
    out32 = _score_bank_jit(*to_dtype((params, query, cols), jnp.float32))
    t32 = np.asarray(out32.totals)
    assert t32.dtype == np.float32 and t64.dtype == np.float64
    np.testing.assert_array_equal(np.isinf(t32), np.isinf(t64))
    ok = np.isfinite(t64)
    np.testing.assert_allclose(t32[ok], t64[ok], rtol=0, atol=1e-5)
    np.testing.assert_allclose(np.asarray(out32.raw)[ok], r64[ok], rtol=0, atol=1e-5)


def test_float32_params_from_config_dtype() -> None:
    p = params_from_config(RetrievalConfig(), DecayConfig(), dtype=np.float32)
    for name in SMOOTH_LEAVES:
        for leaf in jax.tree_util.tree_leaves(getattr(p, name)):
            assert np.asarray(leaf).dtype == np.float32, name
    query, cols = edge_bank()
    out = _score_bank_jit(p, *to_dtype((query, cols), jnp.float32))
    assert out.totals.dtype == jnp.float32
    assert out.weights.dtype == jnp.float32


# --------------------------------------------------------------------------- params/config


def test_default_to_config_dicts_reproduce_spec() -> None:
    retrieval, decay = params_to_config_dicts(default_params())
    assert retrieval == {"base_weights": SPEC_BASE_WEIGHTS, "adaptive_weights_config": SPEC_GATES,
                         # the opt-in lexical signal: off (weight 0), BM25's usual k1 and b
                         "lexical_weight": 0.0, "lexical_k1": 1.2, "lexical_b": 0.75,
                         # the opt-in context signal: off (weight 0), mix 0.5
                         "context_weight": 0.0, "context_mix": 0.5}
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


# --------------------------------------------------------------------------- activation


def dense_graph(
    n: int, links: dict[int, list[tuple[int, float]]], width: int = 3
) -> tuple[np.ndarray, np.ndarray]:
    targets = -np.ones((n, width), dtype=np.int32)
    strengths = np.zeros((n, width))
    for src, outs in links.items():
        for j, (t, s) in enumerate(outs):
            targets[src, j] = t
            strengths[src, j] = s
    return targets, strengths


def oracle_activation(
    seeds: set[int], links: dict[int, list[tuple[int, float]]], hops: int
) -> dict[int, float]:
    """SPEC 5 spreading_activation written literally over dicts."""
    result: dict[int, float] = {}
    wave = {s: 1.0 for s in seeds}
    for _ in range(hops):
        nxt: dict[int, float] = {}
        for node, act in wave.items():
            for target, strength in links.get(node, []):
                if target in seeds:
                    continue
                spread = act * strength
                nxt[target] = max(nxt.get(target, -math.inf), spread)
        for target, value in nxt.items():
            result[target] = max(result.get(target, -math.inf), min(1.0, value))
        wave = nxt
    return result


GRAPH_NODES = 9
_activation_jit = jax.jit(spreading_activation_dense, static_argnums=3)


def run_activation(
    n: int, seeds: set[int], links: dict[int, list[tuple[int, float]]], hops: int
) -> tuple[np.ndarray, np.ndarray]:
    """Run the jitted kernel on a graph of ``n`` <= 9 nodes (padded to 9 isolated ones,
    so every graph shares one compiled program per hop count)."""
    assert n <= GRAPH_NODES
    targets, strengths = dense_graph(GRAPH_NODES, links)
    seed_mask = np.zeros(GRAPH_NODES, dtype=bool)
    seed_mask[list(seeds)] = True
    with jax.enable_x64(True):
        act, reached = _activation_jit(
            jnp.asarray(seed_mask), jnp.asarray(targets), jnp.asarray(strengths), hops
        )
        return np.asarray(act), np.asarray(reached)


def as_dict(act: np.ndarray, reached: np.ndarray) -> dict[int, float]:
    return {int(i): float(act[i]) for i in np.flatnonzero(reached)}


@settings(max_examples=40, deadline=None)
@given(
    n=st.integers(1, 40), width=st.integers(1, 6), hops=st.integers(1, 4),
    seed=st.integers(0, 2**31 - 1),
)
def test_activation_one_hot_and_scatter_paths_agree(
    n: int, width: int, hops: int, seed: int
) -> None:
    """Small banks spread through a one-hot target table, large ones by scatter-max:
    both give identical bits (duplicate targets, self links, empty slots, seeds)."""
    from emotional_memory.kernel import activation

    rng = np.random.default_rng(seed)
    targets = rng.integers(-1, n, size=(n, width)).astype(np.int32)
    strengths = np.where(targets >= 0, rng.choice([0.0, 0.25, 0.5, 1.0, 0.3], (n, width)), 0.0)
    seeds = rng.random(n) < 0.3
    with jax.enable_x64(True):
        args = (jnp.asarray(seeds), jnp.asarray(targets), jnp.asarray(strengths))
        one_hot = spreading_activation_dense(*args, hops)
        limit = activation._ONE_HOT_MAX
        activation._ONE_HOT_MAX = 0  # the scatter path
        try:
            scatter = spreading_activation_dense(*args, hops)
        finally:
            activation._ONE_HOT_MAX = limit
        for a, b in zip(one_hot, scatter, strict=True):
            assert np.asarray(a).tobytes() == np.asarray(b).tobytes()


def test_activation_chain_multi_hop() -> None:
    links = {0: [(1, 0.8)], 1: [(2, 0.5)], 2: [(3, 0.5)]}
    assert as_dict(*run_activation(5, {0}, links, 1)) == {1: 0.8}
    assert as_dict(*run_activation(5, {0}, links, 2)) == {1: 0.8, 2: 0.4}
    assert as_dict(*run_activation(5, {0}, links, 3)) == {1: 0.8, 2: 0.4, 3: 0.2}
    act, reached = run_activation(5, {0}, links, 3)
    assert not reached[4] and act[4] == 0.0 and not reached[0] and act[0] == 0.0


def test_activation_max_over_paths() -> None:
    # 0 -> 1 directly (0.5) and via 2 (0.9 * 0.9 = 0.81): the stronger path wins.
    links = {0: [(1, 0.5), (2, 0.9)], 2: [(1, 0.9)]}
    got = as_dict(*run_activation(3, {0}, links, 2))
    assert got == pytest.approx({1: 0.81, 2: 0.9}, abs=1e-15)
    # within one hop, two seeds reaching the same target keep the max spread
    links = {0: [(2, 0.3)], 1: [(2, 0.6)]}
    assert as_dict(*run_activation(3, {0, 1}, links, 1)) == {2: 0.6}
    # earlier strong activation is not lowered by a weaker later wave
    links = {0: [(1, 0.9), (2, 0.5)], 2: [(1, 0.2)]}
    assert as_dict(*run_activation(3, {0}, links, 2)) == pytest.approx({1: 0.9, 2: 0.5})


def test_activation_seeds_never_reached() -> None:
    links = {0: [(1, 0.9)], 1: [(0, 1.0), (2, 0.5)], 2: [(1, 1.0), (0, 1.0)]}
    act, reached = run_activation(3, {0}, links, 4)
    assert not reached[0] and act[0] == 0.0
    act, reached = run_activation(3, {0, 1}, {0: [(1, 1.0)], 1: [(0, 1.0)]}, 3)
    assert not reached.any() and np.all(act == 0.0)
    # a seed is also skipped as an intermediate target: 2 is only reachable through seed 1
    links = {0: [(1, 0.9)], 1: [(2, 0.9)]}
    assert as_dict(*run_activation(3, {0, 1}, links, 2)) == {2: 0.9}


def test_activation_wave_semantics_and_cycles() -> None:
    # 1 is re-reached on hop 3 with a weaker wave (0.5*0.5*1.0): its hop-4 spread to 2
    # starts from that weaker wave, and the merge keeps the earlier, stronger values.
    links = {0: [(1, 0.5)], 1: [(2, 0.5)], 2: [(1, 1.0)]}
    for hops in range(1, 6):
        got = as_dict(*run_activation(3, {0}, links, hops))
        assert got == pytest.approx(oracle_activation({0}, links, hops), abs=1e-15)
    assert as_dict(*run_activation(3, {0}, links, 5)) == pytest.approx({1: 0.5, 2: 0.25})
    # a node reached only on hop 2 is not spread from on hop 1 (hops limit the depth)
    assert as_dict(*run_activation(4, {0}, {0: [(1, 1.0)], 1: [(2, 1.0)], 2: [(3, 1.0)]},
                                   2)) == {1: 1.0, 2: 1.0}


def test_activation_cap_at_one_and_zero_strength_reached() -> None:
    # Strengths are in [0, 1] in practice; the merge still caps at 1.
    act, reached = run_activation(3, {0}, {0: [(1, 1.5)], 1: [(2, 0.5)]}, 2)
    assert act[1] == 1.0 and reached[1]
    assert 0.0 < act[2] <= 1.0
    assert as_dict(act, reached) == pytest.approx(
        oracle_activation({0}, {0: [(1, 1.5)], 1: [(2, 0.5)]}, 2)
    )
    act, reached = run_activation(3, {0}, {0: [(1, 0.0)]}, 2)
    assert reached[1] and act[1] == 0.0 and not reached[2]


def test_activation_no_seeds_and_empty_slots() -> None:
    act, reached = run_activation(4, set(), {0: [(1, 1.0)]}, 3)
    assert not reached.any() and np.all(act == 0.0)
    act, reached = run_activation(4, {2}, {}, 3)
    assert not reached.any()


@st.composite
def graphs(draw: Any) -> tuple[int, set[int], dict[int, list[tuple[int, float]]], int]:
    n = draw(st.integers(2, 9))
    links: dict[int, list[tuple[int, float]]] = {}
    for src in range(n):
        k = draw(st.integers(0, 3))
        outs = [
            (draw(st.integers(0, n - 1)), draw(st.sampled_from([0.0, 0.25, 0.5, 0.75, 1.0])
                                                | st.floats(0.0, 1.0)))
            for _ in range(k)
        ]
        if outs:
            links[src] = outs
    seeds = set(draw(st.lists(st.integers(0, n - 1), max_size=3)))
    hops = draw(st.integers(1, 5))
    return n, seeds, links, hops


@given(g=graphs())
@settings(max_examples=60, deadline=None)
def test_activation_matches_spec_oracle(
    g: tuple[int, set[int], dict[int, list[tuple[int, float]]], int],
) -> None:
    n, seeds, links, hops = g
    act, reached = run_activation(n, seeds, links, hops)
    expected = oracle_activation(seeds, links, hops)
    got = as_dict(act, reached)
    assert set(got) == set(expected)
    for k, v in expected.items():
        assert got[k] == pytest.approx(v, abs=1e-12)
    assert np.all(act[~reached] == 0.0)
    for seed in seeds:
        assert not reached[seed] and act[seed] == 0.0
    assert np.all((act >= 0.0) & (act <= 1.0))


def test_activation_jit_and_gradient() -> None:
    links = {0: [(1, 0.5), (2, 0.9)], 2: [(1, 0.9), (3, 0.4)], 3: [(0, 0.7)], 4: [(5, 0.5)]}
    targets, strengths = dense_graph(GRAPH_NODES, links)
    seeds = np.zeros(GRAPH_NODES, dtype=bool)
    seeds[0] = True
    with jax.enable_x64(True):
        for hops in (1, 3):
            args = (jnp.asarray(seeds), jnp.asarray(targets), jnp.asarray(strengths))
            eager = spreading_activation_dense(*args, hops)
            jitted = _activation_jit(*args, hops)
            np.testing.assert_array_equal(np.asarray(eager[0]), np.asarray(jitted[0]))
            np.testing.assert_array_equal(np.asarray(eager[1]), np.asarray(jitted[1]))

    def total(s: jax.Array, t: jax.Array) -> jax.Array:
        act, _ = spreading_activation_dense(jnp.asarray(seeds), t, s, 3)
        return jnp.sum(act * jnp.arange(1.0, GRAPH_NODES + 1.0, dtype=s.dtype))

    grad = jax.jit(jax.grad(total))
    with jax.enable_x64(True):
        g = np.asarray(grad(jnp.asarray(strengths), jnp.asarray(targets)))
        assert np.all(np.isfinite(g))
        # act[2] = s(0->2); act[1] = s(0->2) * s(2->1); act[3] = s(0->2) * s(2->3)
        assert g[0, 1] == pytest.approx(3 * 1.0 + 2 * 0.9 + 4 * 0.4)
        assert g[2, 0] == pytest.approx(2 * 0.9)
        assert g[2, 1] == pytest.approx(4 * 0.9)
        assert g[0, 0] == 0.0  # the weaker direct path 0 -> 1 does not win
        assert g[3, 0] == 0.0  # a link into a seed carries nothing
        assert np.all(g[4] == 0.0)  # unreachable component
        # finite at ties (two equal paths), zero strengths and empty slots too
        t_tied, s_tied = dense_graph(GRAPH_NODES, {0: [(1, 0.5), (1, 0.5), (2, 0.0)],
                                                   2: [(1, 0.0)], 1: [(2, 1.0)]})
        g_tied = np.asarray(grad(jnp.asarray(s_tied), jnp.asarray(t_tied)))
        assert np.all(np.isfinite(g_tied))
    g32 = grad(jnp.asarray(strengths, jnp.float32), jnp.asarray(targets))
    assert np.all(np.isfinite(np.asarray(g32)))


# --------------------------------------------------------------------------- ranking


def test_stable_rank_ties_keep_order() -> None:
    totals = jnp.asarray([0.5, 0.7, 0.5, 0.7, 0.1, 0.5])
    np.testing.assert_array_equal(np.asarray(stable_rank(totals)), [1, 3, 0, 2, 5, 4])
    valid = jnp.asarray([True, True, False, True, True, True])
    np.testing.assert_array_equal(np.asarray(stable_rank(totals, valid)), [1, 3, 0, 5, 4, 2])
    same = jnp.zeros(40)
    np.testing.assert_array_equal(np.asarray(stable_rank(same)), np.arange(40))


@given(values=st.lists(st.sampled_from([0.0, 0.1, 0.25, 0.5, -1.0, -np.inf]), min_size=16,
                      max_size=16))
@settings(max_examples=50, deadline=None)
def test_stable_rank_matches_python_stable_sort(values: list[float]) -> None:
    expected = sorted(range(len(values)), key=lambda i: -values[i])
    assert np.asarray(stable_rank(jnp.asarray(values))).tolist() == expected


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
