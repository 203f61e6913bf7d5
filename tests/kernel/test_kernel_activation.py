"""Dense spreading activation (SPEC 5) against a plain oracle, and stable ranking.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from emotional_memory.kernel import (
    spreading_activation_dense,
    stable_rank,
)
from support.kernel_banks import oracle_activation

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
