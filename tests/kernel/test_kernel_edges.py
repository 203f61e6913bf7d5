"""Kernel functions at the edges of their shapes: an empty bank (N = 0), rows without
link slots (L = 0), rows without neighbour slots (K = 0), and ``weighted_total``'s
``terms`` at its ends. Each must give the obvious answer (nothing reached, nothing
ranked, a zero sum), not fail inside a reduction without an identity.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from emotional_memory.kernel import (
    ContextInputs,
    LexicalInputs,
    MemoryColumns,
    QueryFeatures,
    context_signal,
    lexical_signal,
    retrieval_plan,
    score_bank,
    spreading_activation_dense,
    weighted_total,
)
from emotional_memory.kernel import activation as activation_module
from support.kernel_banks import default_params, to_dtype


def empty_bank(d: int = 4) -> MemoryColumns:
    return MemoryColumns(
        embedding=np.zeros((0, d)), affect=np.zeros((0, 3)), mood=np.zeros((0, 3)),
        velocity=np.zeros((0, 3)), age_seconds=np.zeros(0), consolidation=np.zeros(0),
        retrieval_count=np.zeros(0), activation=np.zeros(0), valid=np.zeros(0, bool),
    )


def a_query(d: int = 4) -> QueryFeatures:
    return QueryFeatures(
        embedding=np.ones(d), affect=np.array([0.1, 0.5, 0.5]),
        mood=np.array([-0.2, 0.4, 0.5]), velocity=np.array([0.1, 0.0, -0.1]),
    )


def no_lexical(n: int, t: int = 2) -> LexicalInputs:
    return LexicalInputs(
        tf=np.zeros((n, t)), length=np.zeros(n), df=np.ones(t), n_docs=np.asarray(3.0),
        avg_length=np.asarray(2.0),
    )


@pytest.mark.parametrize("path", ["one_hot", "scatter"])
@pytest.mark.parametrize(("n", "width"), [(0, 3), (0, 0), (4, 0)])
def test_activation_on_an_empty_bank_or_without_link_slots(
    path: str, n: int, width: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Nothing to spread along: nothing reached, on both the one-hot and scatter paths."""
    if path == "scatter":
        monkeypatch.setattr(activation_module, "_ONE_HOT_MAX", -1)
    seeds = np.arange(n) % 2 == 0
    act, reached = spreading_activation_dense(
        jnp.asarray(seeds), jnp.full((n, width), -1, jnp.int32), jnp.zeros((n, width)), 2
    )
    assert act.shape == reached.shape == (n,)
    assert not np.asarray(reached).any() and np.all(np.asarray(act) == 0.0)


def test_retrieval_plan_over_an_empty_bank() -> None:
    """top_k > N = 0: no seeds, no activation, empty orders (jit-compiled)."""
    with jax.enable_x64(True):
        p, q, c = to_dtype((default_params(), a_query(), empty_bank()), jnp.float64)
        out = retrieval_plan(p, q, c, jnp.full((0, 8), -1, jnp.int32), jnp.zeros((0, 8)),
                             top_k=5, hops=2, spread=True)
        arrays = {name: np.asarray(leaf) for name, leaf in vars(out).items()}
    assert arrays["weights"].shape == (6,) and abs(arrays["weights"].sum() - 1.0) < 1e-12
    for name in ("totals1", "order1", "seeds", "activation", "reached", "totals2", "order2"):
        assert arrays[name].shape == (0,), name


def test_lexical_and_context_signals_over_an_empty_bank() -> None:
    with jax.enable_x64(True):
        s7 = lexical_signal(1.2, 0.75, no_lexical(0), jnp.zeros(0, bool))
        assert s7.shape == (0,)
        p, q, c = to_dtype((default_params(), a_query(), empty_bank()), jnp.float64)
        out = jax.jit(score_bank)(p, q, c, None, no_lexical(0),
                                  ContextInputs(neighbours=jnp.zeros((0, 2), jnp.int32)))
    assert np.asarray(out.raw).shape == (0, 8) and np.asarray(out.totals).shape == (0,)


def test_context_signal_without_neighbour_slots_is_zero() -> None:
    """K = 0: no row has a neighbour, so s8 is 0 everywhere (as for all-absent slots)."""
    lent = jnp.asarray([0.3, 0.9, 0.1])
    got = context_signal(lent, ContextInputs(neighbours=jnp.zeros((3, 0), jnp.int32)),
                         jnp.ones(3, bool))
    np.testing.assert_array_equal(np.asarray(got), [0.0, 0.0, 0.0])


def test_weighted_total_terms_counts_the_leading_terms() -> None:
    """``terms`` sums exactly the first ``terms`` products: 0 is an empty sum, and
    every prefix plus the remaining products is the full total."""
    w = jnp.asarray([0.5, 0.25, 2.0, 1.0, 3.0, 4.0])
    raw = jnp.asarray([[1.0, 2.0, 3.0, 4.0, 5.0, 6.0], [-1.0, 0.5, 0.0, 2.0, 1.0, -3.0]])
    products = np.asarray(w)[None, :] * np.asarray(raw)
    np.testing.assert_array_equal(np.asarray(weighted_total(w, raw, terms=0)), [0.0, 0.0])
    for terms in range(1, 7):
        np.testing.assert_allclose(np.asarray(weighted_total(w, raw, terms=terms)),
                                   products[:, :terms].sum(axis=1), rtol=1e-12)
    np.testing.assert_array_equal(np.asarray(weighted_total(w, raw)),
                                  np.asarray(weighted_total(w, raw, terms=6)))
    for bad in (-1, 7):
        with pytest.raises(ValueError, match="terms"):
            weighted_total(w, raw, terms=bad)
