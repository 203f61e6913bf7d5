"""The fast default fit.

* the query adapter's s1 from compact rows (each distinct candidate row once) against a
  plain numpy oracle of the adapted cosine, zero, non-finite and repeated rows included;
* a batch scored through the compact rows equals the (Q, C, D) path;
* the default model selection's pruned candidates (analyses tried on the winner only).
"""

from __future__ import annotations

import math

import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from emotional_memory import EmotionalMemoryConfig
from emotional_memory._precision import float64
from emotional_memory.embedders import HashingEmbedder
from emotional_memory.kernel.adapter import QueryAdapter
from emotional_memory.learn import build_recall_batch
from emotional_memory.learn.losses import (
    CompactRows,
    adapted_semantic,
    batch_scores,
    batch_signal_mask,
    compact_rows,
)
from emotional_memory.learn.recall_batch import RecallBatch
from emotional_memory.retrieval import RetrievalConfig
from emotional_memory.scoring_config import params_from_config
from support.lexical import tiny_dataset


def _oracle_cosine(query: list[float], row: list[float]) -> float:
    """Plain-Python cosine with the kernel's conventions (0 for zero / non-finite)."""
    if not all(math.isfinite(x) for x in query) or not all(math.isfinite(x) for x in row):
        return 0.0
    qn = math.sqrt(sum(x * x for x in query))
    rn = math.sqrt(sum(x * x for x in row))
    if qn == 0 or rn == 0:
        return 0.0
    return sum(a * b for a, b in zip(query, row, strict=True)) / (qn * rn)


def _adapt(query: list[float], left: np.ndarray, right: np.ndarray) -> list[float]:
    d, r = left.shape
    inner = [sum(right[i][k] * query[i] for i in range(d)) for k in range(r)]
    return [query[i] + sum(left[i][k] * inner[k] for k in range(r)) for i in range(d)]


def _fake_batch(query: np.ndarray, rows: np.ndarray) -> RecallBatch:
    """Only the leaves :func:`compact_rows` reads (the query and candidate embeddings)."""

    class Columns:
        embedding = rows

    class Query:
        embedding = query

    class Fake:
        columns = Columns
        query = Query

    return Fake  # type: ignore[return-value]


@settings(max_examples=25, deadline=None)
@given(st.integers(0, 10_000), st.integers(1, 4), st.booleans())
def test_adapted_semantic_matches_a_plain_oracle(seed: int, rank: int, bad: bool) -> None:
    rng = np.random.default_rng(seed)
    q, c, d = 3, 5, 6
    distinct = rng.standard_normal((4, d))
    distinct[0] = 0.0  # a zero row
    rows = distinct[rng.integers(0, 4, size=(q, c))]  # repeated rows across queries
    query = rng.standard_normal((q, d))
    if bad:
        rows[1, 2, 0] = np.nan
        query[2, 1] = np.inf
    left, right = rng.standard_normal((d, rank)), rng.standard_normal((d, rank))
    compact = compact_rows(_fake_batch(query, rows))
    assert compact.bank.shape[0] <= 4 + int(bad)
    with float64():
        got = np.asarray(adapted_semantic(
            QueryAdapter(jnp.asarray(left), jnp.asarray(right)), jnp.asarray(query),
            CompactRows(*(jnp.asarray(x) for x in (compact.bank, compact.index,
                                                    compact.dots, compact.query_ok))),
        ))
    for i in range(q):
        qv = query[i].tolist()
        adapted = _adapt(qv, left, right) if all(math.isfinite(x) for x in qv) else qv
        for j in range(c):
            want = _oracle_cosine(adapted, rows[i, j].tolist())
            assert got[i, j] == pytest.approx(want, rel=1e-9, abs=1e-12)


def test_compact_batch_scores_equal_the_dense_path() -> None:
    cfg = EmotionalMemoryConfig(retrieval=RetrievalConfig(lexical_weight=0.3))
    batch, _ = build_recall_batch(tiny_dataset(), HashingEmbedder(dim=8), cfg, lexical=True,
                                  embeddings=True)
    rng = np.random.default_rng(0)
    left, right = rng.standard_normal((8, 3)), rng.standard_normal((8, 3))
    params = params_from_config(cfg.retrieval, cfg.decay)
    mask = jnp.asarray(batch_signal_mask(cfg, batch))
    with float64():
        adapter = QueryAdapter(jnp.asarray(left), jnp.asarray(right))
        dense = np.asarray(batch_scores(params, batch, mask, adapter))
        compact = CompactRows(*(jnp.asarray(x) for x in (lambda c: (
            c.bank, c.index, c.dots, c.query_ok))(compact_rows(batch))))
        fast = np.asarray(batch_scores(params, batch, mask, adapter, compact))
    np.testing.assert_allclose(fast, dense, rtol=1e-10, atol=1e-12)


def test_compact_rows_needs_embeddings() -> None:
    batch, _ = build_recall_batch(tiny_dataset(), HashingEmbedder(dim=8))
    with pytest.raises(ValueError, match=r"embeddings=True"):
        compact_rows(batch)
