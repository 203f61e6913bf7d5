"""The kernel under program transforms: jit == eager, vmap == loop, bucketed padding ==
unpadded, float32 ~ float64.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from emotional_memory.decay import DecayConfig
from emotional_memory.kernel import (
    bucket_size,
    pad_columns,
    score_bank,
    signals,
    stable_rank,
)
from emotional_memory.retrieval import RetrievalConfig
from emotional_memory.scoring_config import params_from_config
from support.kernel_banks import (
    ABLATION_MASKS,
    FAST,
    N_ROWS,
    PARAM_VARIANTS,
    SMOOTH_LEAVES,
    _score_bank_jit,
    default_params,
    edge_bank,
    params_variant,
    random_bank,
    row_of,
    to_dtype,
)

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
