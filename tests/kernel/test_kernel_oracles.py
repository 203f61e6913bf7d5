"""The kernel against plain-Python oracles of docs/behaviour.md on random inputs: the six
signals under random recency laws and extreme ages (§3, §4), the stable ranking with
NaN, signed zeros and padding, and the whole two-pass plan (§5) - plus the plan's
gradients (check_grads) and its vmap over queries. float64 inside JAX's local x64
context.
"""

from __future__ import annotations

import functools
import math
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from jax.test_util import check_grads

from emotional_memory.kernel import (
    DECAY_FIELDS,
    DecayParams,
    MemoryColumns,
    pad_columns,
    stable_rank,
)
from emotional_memory.kernel.plan import retrieval_plan, retrieval_plan_unjitted
from support.kernel_banks import (
    SPEC_BASE_WEIGHTS,
    _score_bank_jit,
    default_params,
    oracle_activation,
    oracle_signals,
    oracle_weights,
    random_bank,
    to_dtype,
)

SOME = settings(max_examples=25, deadline=None)

decay_laws = st.fixed_dictionaries({
    "base_decay": st.floats(0.0, 2.0),
    "arousal_modulation": st.floats(-1.0, 2.0),
    "retrieval_boost": st.floats(0.0, 1.0),
    "floor_arousal_threshold": st.floats(0.0, 1.0),
    "floor_value": st.floats(0.0, 1.0),
    "min_seconds": st.floats(1e-3, 1e4),
    "power": st.floats(0.0, 3.0),
})

EXTREME_AGES = (-3.2e9, -1.0, 0.0, 1e-9, 6.3e10, 1e12)
"""Future timestamps (negative ages) and very old ones (year 1 is ~6.3e10 s ago)."""


@SOME
@given(seed=st.integers(0, 2**32 - 1), decay=decay_laws)
def test_signals_match_the_oracle_under_random_recency_laws(
    seed: int, decay: dict[str, float]
) -> None:
    rng = np.random.default_rng(seed)
    query, cols = random_bank(rng, edge_fraction=0.5)
    ages = np.asarray(cols.age_seconds).copy()
    picked = rng.choice(ages.size, size=len(EXTREME_AGES), replace=False)
    ages[picked] = EXTREME_AGES
    affect = np.asarray(cols.affect).copy()
    affect[picked[:2], 1] = decay["floor_arousal_threshold"]  # exactly at the floor
    cols = eqx.tree_at(lambda c: (c.age_seconds, c.affect), cols, (ages, affect))
    params = eqx.tree_at(
        lambda p: p.decay, default_params(),
        DecayParams(*(np.asarray(decay[name]) for name in DECAY_FIELDS)),
    )
    with jax.enable_x64(True):
        out = _score_bank_jit(*to_dtype((params, query, cols), jnp.float64))
        raw, weights, totals = (np.asarray(x) for x in (out.raw, out.weights, out.totals))
    mood = np.asarray(query.mood)
    np.testing.assert_allclose(
        weights, oracle_weights(float(mood[0]), float(mood[1]), SPEC_BASE_WEIGHTS),
        rtol=0, atol=1e-12,
    )
    for i in range(cols.size):
        ref = oracle_signals(query, cols, i, decay)
        np.testing.assert_allclose(raw[i], ref, rtol=1e-12, atol=1e-12, err_msg=f"row {i}")
        assert abs(totals[i] - sum(w * s for w, s in zip(weights, ref, strict=True))) <= 1e-12


RANK_VALUES = [0.0, -0.0, 0.5, -0.5, 1e-300, math.inf, -math.inf, math.nan]
_rank_jit = jax.jit(stable_rank)


def oracle_rank(totals: list[float], valid: list[bool]) -> list[int]:
    """docs/behaviour.md §5's stable descending sort: NaN after every number, padding
    after every real row (both in index order)."""
    def key(i: int) -> tuple[bool, bool, float]:
        nan = math.isnan(totals[i])
        return (not valid[i], valid[i] and nan, -totals[i] if valid[i] and not nan else 0.0)

    return sorted(range(len(totals)), key=key)


@settings(max_examples=60, deadline=None)
@given(values=st.lists(st.sampled_from(RANK_VALUES), min_size=16, max_size=16),
       valid=st.lists(st.booleans(), min_size=16, max_size=16))
def test_stable_rank_matches_the_oracle_with_nan_signed_zeros_and_padding(
    values: list[float], valid: list[bool]
) -> None:
    with jax.enable_x64(True):
        totals = jnp.asarray(values, jnp.float64)
        masked = np.asarray(_rank_jit(totals, jnp.asarray(valid))).tolist()
        unmasked = np.asarray(_rank_jit(totals, None)).tolist()
        # a -NaN (negated NaN) ranks like NaN: last among the numbers, not first
        negated = np.asarray(_rank_jit(-totals, None)).tolist()
    assert masked == oracle_rank(values, valid)
    assert unmasked == oracle_rank(values, [True] * 16)
    assert negated == oracle_rank([-v for v in values], [True] * 16)


# --------------------------------------------------------------------------- the plan

PLAN_ROWS = 16


def plan_case(rng: np.random.Generator, n_real: int) -> tuple[Any, MemoryColumns, Any, Any]:
    """A random bank of ``n_real`` rows padded to 16 (row 1 a copy of row 0: an exact
    pass-1 tie) and a random link graph with self links, duplicate links, strength 0
    and strength 1."""
    query, cols = random_bank(rng, n=n_real, edge_fraction=0.3)
    cols = eqx.tree_at(lambda c: c.activation, cols, np.zeros(n_real))
    if n_real > 1:
        cols = jax.tree.map(lambda x: np.concatenate([x[:1], x[:1], x[2:]]), cols)
    targets = np.full((PLAN_ROWS, 4), -1, np.int32)
    strengths = np.zeros((PLAN_ROWS, 4))
    for i in range(n_real):
        for j in range(4):
            if rng.random() < 0.5:
                targets[i, j] = rng.integers(n_real)
                strengths[i, j] = rng.choice([0.0, 1.0, rng.uniform(0.05, 0.95)])
        if rng.random() < 0.2 and targets[i, 0] >= 0:
            targets[i, 1], strengths[i, 1] = targets[i, 0], rng.uniform(0.05, 0.95)
    return query, pad_columns(cols, PLAN_ROWS), targets, strengths


def oracle_plan(
    query: Any, cols: MemoryColumns, n_real: int, targets: np.ndarray, strengths: np.ndarray,
    top_k: int, hops: int,
) -> dict[str, Any]:
    """docs/behaviour.md §5 in plain Python, from the §4 oracles."""
    mood = np.asarray(query.mood)
    w = oracle_weights(float(mood[0]), float(mood[1]), SPEC_BASE_WEIGHTS)
    signals = [oracle_signals(query, cols, i, dict(DEFAULT_DECAY)) for i in range(n_real)]

    def totals_of(resonance: dict[int, float]) -> list[float]:
        out = []
        for i, s in enumerate(signals):
            total = 0.0
            for wi, si in zip(w, [*s[:5], resonance.get(i, 0.0)], strict=True):
                total += wi * si
            out.append(total)
        return out

    totals1 = totals_of({})
    order1 = sorted(range(n_real), key=lambda i: -totals1[i])
    seeds = set(order1[:top_k])
    links = {
        i: [(int(t), float(s)) for t, s in zip(targets[i], strengths[i], strict=True) if t >= 0]
        for i in range(n_real)
    }
    activation = oracle_activation(seeds, links, hops)
    totals2 = totals_of(activation) if activation else totals1
    order2 = sorted(range(n_real), key=lambda i: -totals2[i])
    return {"totals1": totals1, "order1": order1, "seeds": seeds, "activation": activation,
            "totals2": totals2, "order2": order2}


DEFAULT_DECAY = tuple(
    (name, float(np.asarray(getattr(default_params().decay, name))))
    for name in DECAY_FIELDS
)


@SOME
@given(seed=st.integers(0, 2**32 - 1), n_real=st.integers(1, PLAN_ROWS),
       top_k=st.sampled_from([1, 3, 20]), hops=st.sampled_from([1, 2]))
def test_retrieval_plan_matches_the_spec_oracle(seed: int, n_real: int, top_k: int,
                                                hops: int) -> None:
    rng = np.random.default_rng(seed)
    query, cols, targets, strengths = plan_case(rng, n_real)
    with jax.enable_x64(True):
        p, q, c = to_dtype((default_params(), query, cols), jnp.float64)
        out = retrieval_plan(p, q, c, jnp.asarray(targets), jnp.asarray(strengths),
                             top_k=top_k, hops=hops, spread=True)
        got = {name: np.asarray(leaf) for name, leaf in vars(out).items()}
    want = oracle_plan(query, cols, n_real, targets, strengths, top_k, hops)
    n = n_real
    assert got["order1"][:n].tolist() == want["order1"]
    assert got["order2"][:n].tolist() == want["order2"]
    assert got["order1"][n:].tolist() == got["order2"][n:].tolist() == list(range(n, PLAN_ROWS))
    assert set(np.flatnonzero(got["seeds"]).tolist()) == want["seeds"]
    assert set(np.flatnonzero(got["reached"]).tolist()) == set(want["activation"])
    for i, value in want["activation"].items():
        assert abs(got["activation"][i] - value) <= 1e-12
    np.testing.assert_allclose(got["totals1"][:n], want["totals1"], rtol=0, atol=1e-12)
    np.testing.assert_allclose(got["totals2"][:n], want["totals2"], rtol=0, atol=1e-12)
    assert np.all(got["totals2"][n:] == -np.inf)


def _plan_loss(params: Any, strengths: Any, query: Any, cols: Any, targets: Any) -> Any:
    out = retrieval_plan_unjitted(params, query, cols, targets, strengths, top_k=3, hops=2,
                                  spread=True)
    coeffs = jnp.linspace(-1.0, 2.0, cols.size)
    valid = jnp.where(cols.valid, out.totals2, 0.0)
    return jnp.sum(coeffs * valid) + jax.nn.logsumexp(out.totals2 / 0.1)


def test_retrieval_plan_gradients_match_finite_differences() -> None:
    """Pass-2 totals are smooth in the strengths of the links that carry activation and
    in every smooth parameter: reverse mode agrees with finite differences (check_grads),
    and a strength no spread crosses gets exactly 0."""
    rng = np.random.default_rng(11)
    query, cols, _, _ = plan_case(rng, 12)
    targets = np.full((PLAN_ROWS, 4), -1, np.int32)
    strengths = np.zeros((PLAN_ROWS, 4))
    for i in range(12):
        for j in range(3):
            targets[i, j] = (i + 1 + 3 * j) % 12
            strengths[i, j] = rng.uniform(0.2, 0.9)
    with jax.enable_x64(True):
        p, q, c = to_dtype((default_params(min_seconds=5.0), query, cols), jnp.float64)
        t, s = jnp.asarray(targets), jnp.asarray(strengths)
        out = retrieval_plan(p, q, c, t, s, top_k=3, hops=2, spread=True)
        assert np.asarray(out.reached).any()
        smooth = (p.base_weights, p.gates, p.decay, p.signal_scale, p.signal_shift)

        @jax.jit
        def f(xs: Any, strengths: Any) -> Any:
            params = eqx.tree_at(
                lambda r: (r.base_weights, r.gates, r.decay, r.signal_scale, r.signal_shift),
                p, xs)
            return _plan_loss(params, strengths, q, c, t)

        check_grads(f, (smooth, s), order=1, modes=["rev"])
        g = np.asarray(jax.grad(f, argnums=1)(smooth, s))
        seeds = np.asarray(out.seeds)
        reached = np.asarray(out.reached)
    assert np.all(np.isfinite(g))
    assert np.all(g[~(seeds | reached)] == 0.0)  # rows no activation leaves carry nothing
    assert np.any(g[seeds] != 0.0)


def test_retrieval_plan_under_vmap_equals_one_query_at_a_time() -> None:
    rng = np.random.default_rng(5)
    query, cols, targets, strengths = plan_case(rng, 13)
    plan = functools.partial(retrieval_plan_unjitted, top_k=3, hops=2, spread=True)
    with jax.enable_x64(True):
        p, q, c = to_dtype((default_params(), query, cols), jnp.float64)
        moods = jnp.asarray([[-0.9, 0.9, 0.5], [0.0, 0.2, 0.5], [0.6, 0.5, 0.1]])
        queries = jax.tree.map(lambda x: jnp.stack([x] * 3), q)
        queries = eqx.tree_at(lambda x: x.mood, queries, moods)
        batched = jax.jit(jax.vmap(plan, in_axes=(None, 0, None, None, None)))(
            p, queries, c, targets, strengths)
        for i in range(3):
            one = jax.jit(plan)(p, jax.tree.map(lambda x, i=i: x[i], queries), c, targets,
                                strengths)
            for name in ("order1", "seeds", "reached", "order2"):
                np.testing.assert_array_equal(np.asarray(getattr(batched, name))[i],
                                              np.asarray(getattr(one, name)), err_msg=name)
            for name in ("weights", "totals1", "activation", "totals2"):
                np.testing.assert_allclose(np.asarray(getattr(batched, name))[i],
                                           np.asarray(getattr(one, name)), rtol=1e-13,
                                           atol=1e-15, err_msg=name)
