"""grouped_top_k: the same answer as lax.top_k, through group maxima.

The oracle is plain Python: sort positions by (value descending, position ascending)
in IEEE total order after mapping -0.0 to +0.0 and every NaN to one positive NaN.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from emotional_memory.kernel.chunked_topk import GROUP_SIZE, grouped_top_k, merge_top_k

SPECIAL = [0.0, -0.0, 1.0, -1.0, 0.5, 2.5, math.inf, -math.inf, math.nan, -math.nan]


def oracle_top_k(row: list[float], k: int) -> tuple[list[float], list[int]]:
    """Top ``k`` of one row: NaN first, then by value descending; ties by position."""

    def key(i: int) -> tuple[int, float, int]:
        v = row[i]
        return (0, 0.0, i) if math.isnan(v) else (1, -v, i)  # -0.0 == 0.0 here

    order = sorted(range(len(row)), key=key)[:k]
    return [row[i] for i in order], order


def assert_matches_oracle(x: np.ndarray, k: int, group: int = GROUP_SIZE) -> None:
    values, index = grouped_top_k(jnp.asarray(x), k, group)
    values, index = np.asarray(values), np.asarray(index)
    assert index.dtype == np.int32 and values.shape == index.shape == (*x.shape[:-1], k)
    for r, row in enumerate(x.reshape(-1, x.shape[-1]).tolist()):
        want_values, want_index = oracle_top_k(row, k)
        got_values = values.reshape(-1, k)[r]
        assert index.reshape(-1, k)[r].tolist() == want_index
        for got, want in zip(got_values.tolist(), want_values, strict=True):
            if math.isnan(want):
                assert math.isnan(got) and math.copysign(1.0, got) == 1.0
            else:  # zeros come back as +0.0
                assert got == want and (got != 0.0 or math.copysign(1.0, got) == 1.0)


@settings(max_examples=60, deadline=None)
@given(
    data=st.data(),
    rows=st.integers(1, 3),
    groups=st.integers(4, 24),
    k=st.integers(1, 6),
)
def test_grouped_top_k_equals_oracle_with_ties_zeros_infinities_and_nans(
    data: st.DataObject, rows: int, groups: int, k: int
) -> None:
    # At least 4k groups so the grouped path runs (not the lax.top_k fallback).
    groups = max(groups, 4 * k)
    n = groups * GROUP_SIZE
    picks = data.draw(
        st.lists(st.integers(0, len(SPECIAL) - 1), min_size=rows * n, max_size=rows * n)
    )
    x = np.asarray([SPECIAL[i] for i in picks], np.float32).reshape(rows, n)
    assert_matches_oracle(x, k)


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), k=st.integers(1, 32), group=st.sampled_from([8, 16, 32]))
def test_grouped_top_k_equals_lax_top_k_on_ordinary_floats(seed: int, k: int, group: int) -> None:
    """Without NaN and -0.0 the answer is lax.top_k's, bit for bit (ties included:
    values are rounded to few levels so many rows tie)."""
    rng = np.random.default_rng(seed)
    n = group * 4 * k + group * int(rng.integers(0, 40))
    x = np.round(rng.standard_normal((4, n)), 1).astype(np.float32) + np.float32(0.0)
    x[x == 0] = 0.0
    got = grouped_top_k(jnp.asarray(x), k, group)
    want = jax.lax.top_k(jnp.asarray(x), k)
    np.testing.assert_array_equal(np.asarray(got[1]), np.asarray(want[1]))
    np.testing.assert_array_equal(
        np.asarray(got[0]).view(np.int32), np.asarray(want[0]).view(np.int32)
    )


def test_a_top_value_hidden_behind_a_tied_group_maximum() -> None:
    """Two groups share the maximum; the lower group wins the tie, and the third value
    lives in the higher group, below its maximum: every chosen group is gathered whole
    (not only its maximum), in index order."""
    x = np.full((1, 12 * 16), -5.0, np.float32)  # 12 groups: the grouped path for k=3
    x[0, 20] = 3.0  # group 1
    x[0, 100] = 3.0  # group 6: ties with group 1's maximum
    x[0, 101] = 2.0  # second value of group 6, above everything but the maxima
    x[0, 21] = 1.0
    x[0, 150] = 1.5  # group 9's maximum: chosen third, below group 6's second value
    values, index = jax.jit(grouped_top_k, static_argnums=(1, 2))(jnp.asarray(x), 3, 16)
    assert np.asarray(index).tolist() == [[20, 100, 101]]
    assert np.asarray(values).tolist() == [[3.0, 3.0, 2.0]]


@pytest.mark.parametrize(("n", "k"), [(100, 3), (16 * 7, 2), (64, 1)])
def test_grouped_top_k_falls_back_where_groups_save_nothing(n: int, k: int) -> None:
    """A width that is not a multiple of the group, or fewer than 4k groups: the
    same answer as the grouped path would give (canonical zeros and NaN too)."""
    rng = np.random.default_rng(n)
    x = np.asarray(rng.choice(SPECIAL, size=(2, n)), np.float32)
    x[:, 3] = -0.0
    assert_matches_oracle(x, k, 16)


def test_grouped_top_k_under_vmap_and_one_dimensional() -> None:
    rng = np.random.default_rng(5)
    x = np.asarray(rng.integers(-4, 4, (3, 2, 512)), np.float32)
    got = jax.vmap(lambda a: grouped_top_k(a, 5))(jnp.asarray(x))
    for i in range(3):
        assert_matches_oracle(x[i], 5)
        np.testing.assert_array_equal(np.asarray(got[1][i]), np.asarray(grouped_top_k(x[i], 5)[1]))
    assert_matches_oracle(x[0, 0], 5)


def test_merge_top_k_with_grouped_chunks_keeps_the_lowest_row_on_ties() -> None:
    """A running top-k merged with a chunk of tied values (chunk wide enough for
    the grouped path): the lower rows (the running ones) come first."""
    best = jnp.asarray([[1.0, 1.0, 0.5]], jnp.float32)
    best_index = jnp.asarray([[2, 7, 9]], jnp.int32)
    chunk = np.zeros((1, 16 * 16), np.float32)
    chunk[0, [5, 40, 200]] = 1.0
    merged, index = merge_top_k(best, best_index, jnp.asarray(chunk), jnp.int32(1000), 3)
    assert np.asarray(index).tolist() == [[2, 7, 1005]]
    assert np.asarray(merged).tolist() == [[1.0, 1.0, 1.0]]
