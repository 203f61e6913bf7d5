"""Malformed inputs of the one-query scorers (``score_bank``, ``score_with_weights``,
``score_given_semantic``, ``retrieval_plan``): a ValueError / TypeError naming the
argument, raised while tracing, instead of a broadcast that silently scored garbage
(a (1,) query embedding against (N, D) rows, a one-row ``valid`` or lexical table
standing for every row, a weight vector one short whose last weight was clamped and
reused) or an error naming none of them.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from emotional_memory.kernel import (
    LexicalInputs,
    MemoryColumns,
    QueryFeatures,
    score_bank,
    score_given_semantic,
    score_with_weights,
)
from emotional_memory.kernel.context import ContextInputs
from emotional_memory.kernel.plan import retrieval_plan
from support.kernel_banks import default_params, random_bank, to_dtype

N, D, T = 12, 6, 3


def _fields(module: Any) -> dict[str, Any]:
    return {k: getattr(module, k) for k in module.__dataclass_fields__}


def _inputs() -> tuple[QueryFeatures, MemoryColumns, LexicalInputs, ContextInputs]:
    query, cols = random_bank(np.random.default_rng(3), N, D)
    query, cols = to_dtype(query, jnp.float32), to_dtype(cols, jnp.float32)
    lexical = LexicalInputs(
        tf=np.ones((N, T), np.float32), length=np.full(N, 4.0, np.float32),
        df=np.ones(T, np.float32), n_docs=np.float32(20), avg_length=np.float32(4),
    )
    context = ContextInputs(neighbours=np.full((N, 2), -1, np.int32))
    return query, cols, lexical, context


def _with(module: Any, **leaves: Any) -> Any:
    return type(module)(**{**_fields(module), **leaves})


def test_score_bank_names_malformed_arguments() -> None:
    params = default_params().astype(jnp.float32)
    query, cols, lexical, context = _inputs()
    valid = np.asarray(cols.valid)
    cases: list[tuple[dict[str, Any], type[Exception], str]] = [
        ({"query": _with(query, embedding=np.ones(1, np.float32))}, ValueError,
         r"columns\.embedding must be \(N, 1\)"),
        ({"query": _with(query, embedding=np.ones(D + 1, np.float32))}, ValueError,
         r"columns\.embedding must be \(N, 7\)"),
        ({"query": _with(query, embedding=np.ones((1, D), np.float32))}, ValueError,
         r"query\.embedding must be \(D,\)"),
        ({"query": _with(query, mood=np.zeros(2, np.float32))}, ValueError,
         r"query\.mood must be \(3,\)"),
        ({"query": _with(query, affect=np.zeros(3, np.int32))}, TypeError,
         r"query\.affect must be floating point"),
        ({"columns": _with(cols, valid=valid[:1])}, ValueError, r"columns\.valid must be \(12,\)"),
        ({"columns": _with(cols, valid=valid.astype(np.float32))}, TypeError,
         r"columns\.valid must be bool"),
        ({"columns": _with(cols, affect=np.asarray(cols.affect)[:, :2])}, ValueError,
         r"columns\.affect"),
        ({"signal_mask": np.ones(5, np.float32)}, ValueError,
         r"signal_mask must have shape \(6,\)"),
        ({"signal_mask": np.ones(6, np.float32), "lexical": lexical}, ValueError,
         r"signal_mask must have shape \(7,\)"),
        ({"lexical": _with(lexical, tf=np.ones((1, T), np.float32))}, ValueError,
         r"lexical\.tf must be \(12, 3\)"),
        ({"lexical": _with(lexical, length=np.ones(1, np.float32))}, ValueError,
         r"lexical\.length must be \(12,\)"),
        ({"lexical": _with(lexical, df=np.ones(T + 1, np.float32))}, ValueError, r"lexical\.df"),
        ({"lexical": _with(lexical, n_docs=np.ones(1, np.float32))}, ValueError,
         r"lexical\.n_docs must be a scalar"),
        ({"lexical": lexical,
          "context": ContextInputs(neighbours=np.full((1, 2), -1, np.int32))}, ValueError,
         r"context\.neighbours must be \(12, K\)"),
        ({"context": context}, ValueError, "needs lexical"),
    ]
    for change, error, message in cases:
        args: dict[str, Any] = {"query": query, "columns": cols, "signal_mask": None,
                                "lexical": None, "context": None, **change}
        with pytest.raises(error, match=message):
            score_bank(params, args["query"], args["columns"], args["signal_mask"],
                       args["lexical"], args["context"])
        with pytest.raises(error, match=message):  # the same under jit (shapes are static)
            jax.jit(score_bank)(params, args["query"], args["columns"], args["signal_mask"],
                                args["lexical"], args["context"])
    out = score_bank(params, query, cols, None, lexical, _with(context))
    assert out.raw.shape == (N, 8)  # the well-formed inputs still score


def test_weights_and_semantic_of_another_length_are_named_errors() -> None:
    """``score_with_weights`` indexed a (6,) weight vector seven times with the lexical
    signal: JAX clamps the index, so s7 silently got s6's weight."""
    params = default_params().astype(jnp.float32)
    query, cols, lexical, _ = _inputs()
    with pytest.raises(ValueError, match=r"weights must have shape \(7,\)"):
        score_with_weights(jnp.full(6, 1 / 6, jnp.float32), params, query, cols, lexical)
    with pytest.raises(ValueError, match=r"weights must have shape \(6,\)"):
        score_with_weights(jnp.full(7, 1 / 7, jnp.float32), params, query, cols)
    with pytest.raises(ValueError, match=r"semantic must be \(12,\)"):
        score_given_semantic(params, query, cols, jnp.zeros(1, jnp.float32))
    # score_given_semantic reads no embedding: zero-width ones (training batches) pass
    bare_query = _with(query, embedding=np.zeros(0, np.float32))
    bare = _with(cols, embedding=np.zeros((N, 0), np.float32))
    semantic = jnp.linspace(0, 1, N, dtype=jnp.float32)
    got = score_given_semantic(params, bare_query, bare, semantic).totals
    want = score_given_semantic(params, query, cols, semantic).totals
    np.testing.assert_array_equal(np.asarray(got), np.asarray(want))


def test_retrieval_plan_names_a_mismatched_query_embedding_and_mask() -> None:
    """A (7,) mask was broadcast against (6,) weights: an error naming neither."""
    params = default_params().astype(jnp.float32)
    query, cols, _, _ = _inputs()
    targets = np.full((N, 2), -1, np.int32)
    strengths = np.zeros((N, 2), np.float32)
    with pytest.raises(ValueError, match=r"columns\.embedding must be \(N, 1\)"):
        retrieval_plan(params, _with(query, embedding=np.ones(1, np.float32)), cols, targets,
                       strengths, top_k=3, hops=2, spread=True)
    with pytest.raises(ValueError, match=r"signal_mask must have shape \(6,\)"):
        retrieval_plan(params, query, cols, targets, strengths, top_k=3, hops=2, spread=True,
                       signal_mask=jnp.ones(7, jnp.float32))


def test_six_plan_weights_with_the_lexical_signal_weigh_s7_zero() -> None:
    """Six final weights with lexical inputs (the engine's ``precomputed_weights``):
    the plan indexed them seven times, and JAX's clamped index gave s7 the sixth
    weight; s7 now weighs 0, as an explicit seventh weight of 0 does."""
    params = default_params().astype(jnp.float32)
    query, cols, lexical, _ = _inputs()
    targets = np.full((N, 2), -1, np.int32)
    strengths = np.zeros((N, 2), np.float32)
    six = jnp.asarray([0.1, 0.1, 0.1, 0.1, 0.1, 0.5], jnp.float32)
    seven = jnp.concatenate([six, jnp.zeros(1, jnp.float32)])
    run = [retrieval_plan(params, query, cols, targets, strengths, top_k=3, hops=1,
                          spread=False, weights=w, lexical=lexical) for w in (six, seven)]
    np.testing.assert_array_equal(np.asarray(run[0].weights), np.asarray(seven))
    np.testing.assert_array_equal(np.asarray(run[0].totals1), np.asarray(run[1].totals1))
