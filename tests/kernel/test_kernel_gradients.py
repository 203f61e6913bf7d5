"""The JAX scoring kernel against the plain oracle, and gradient safety at every SPEC branch
(finite Jacobians on edge and random banks, check_grads at smooth points). float64 checks run
inside JAX's local x64 context; the global flag is never touched.
"""

from __future__ import annotations

from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from jax.test_util import check_grads

from emotional_memory.kernel import (
    MemoryColumns,
    QueryFeatures,
    ScoringParams,
    bank_cosine,
    pad_columns,
    score_bank,
    score_given_semantic,
    score_with_weights,
)
from support.kernel_banks import (
    ABLATION_MASKS,
    DIM,
    FAST,
    PARAM_VARIANTS,
    SMOOTH_LEAVES,
    SPEC_BASE_WEIGHTS,
    SPEC_DECAY,
    _score_bank_jit,
    default_params,
    edge_bank,
    oracle_signals,
    oracle_weights,
    params_variant,
    random_bank,
    to_dtype,
)

# --------------------------------------------------------------------------- oracle


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
