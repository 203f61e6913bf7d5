"""Congruence of the batch paths (hypothesis): every row of a batch answers what the
same query alone answers.

- kernel: each row of ``score_batch`` (and ``score_batch_sharded`` on this process's
  devices) over Q queries equals ``score_batch`` of that one query and the
  ``score_bank`` totals, on banks with invalid, NaN, zero and duplicate rows, any k
  (past the bank included) and chunk size;
- engine: each row of ``BatchRetriever`` over a list of queries (with per-query
  affects, duplicates, the lexical signal on or off) equals the same retriever on
  that query alone, also after the store changed between calls.

Scores of one query may differ in the last float32 digit with the rest of the call
(``docs/scale.md``, "Batch scorer"), so rows are compared as top-k lists under a
tolerance: the same number of results, the same scores position by position, and
every returned row's own score (from the single-query answer over the whole bank)
equal to the score at its position.
"""

from __future__ import annotations

import math
from datetime import UTC, datetime
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from emotional_memory import CoreAffect, EmotionalMemory, EmotionalMemoryConfig
from emotional_memory.batch_retrieval import BatchRetriever
from emotional_memory.embedders import HashingEmbedder
from emotional_memory.kernel import MemoryColumns, QueryFeatures, score_bank
from emotional_memory.kernel.chunked_topk import score_batch
from emotional_memory.kernel.sharding import score_batch_sharded
from emotional_memory.retrieval import RetrievalConfig
from emotional_memory.stores import InMemoryStore
from support.kernel_banks import default_params

TOL = 1e-5
FEW = settings(max_examples=12, deadline=None)
MORE = settings(max_examples=30, deadline=None)


def _bank(rng: np.random.Generator, n: int, d: int) -> MemoryColumns:
    """A float32 bank with invalid, NaN, zero and duplicated rows."""
    emb = rng.normal(size=(n, d))
    emb[rng.uniform(size=n) < 0.1] = np.nan
    emb[rng.uniform(size=n) < 0.1] = 0.0
    affect = rng.uniform(0, 1, (n, 3))
    mood = rng.uniform(0, 1, (n, 3))
    velocity = rng.normal(0, 0.2, (n, 3))
    age = rng.uniform(0, 1e6, n)
    if n > 3:  # rows 1 and 2 are copies of row 0
        for col in (emb, affect, mood, velocity, age):
            col[1:3] = col[0]
    f32 = np.float32
    return MemoryColumns(
        embedding=emb.astype(f32), affect=affect.astype(f32), mood=mood.astype(f32),
        velocity=velocity.astype(f32), age_seconds=age.astype(f32),
        consolidation=rng.uniform(0.1, 1, n).astype(f32),
        retrieval_count=rng.integers(0, 4, n).astype(f32),
        activation=(rng.uniform(size=n) * (rng.uniform(size=n) < 0.3)).astype(f32),
        valid=rng.uniform(size=n) > 0.15,
    )


def _queries(rng: np.random.Generator, q: int, d: int) -> QueryFeatures:
    emb = rng.normal(size=(q, d))
    emb[rng.uniform(size=q) < 0.2] = 0.0
    emb[rng.uniform(size=q) < 0.2, 0] = np.inf
    f32 = np.float32
    return QueryFeatures(
        embedding=emb.astype(f32), affect=rng.uniform(0, 1, (q, 3)).astype(f32),
        mood=rng.uniform(-1, 1, (q, 3)).astype(f32),
        velocity=rng.normal(0, 0.2, (q, 3)).astype(f32),
    )


def _assert_congruent(
    got: list[tuple[Any, float]], want: list[tuple[Any, float]], own: dict[Any, float],
    where: str,
) -> None:
    """``got`` and ``want`` are the same top-k up to float rounding: as many results,
    the same scores in order, and each of ``got``'s keys scored (in ``own``, the
    single-query scores of every candidate) as at its position."""
    assert len(got) == len(want), where
    np.testing.assert_allclose([s for _, s in got], [s for _, s in want], rtol=0, atol=TOL,
                               err_msg=where)
    assert len({key for key, _ in got}) == len(got), where  # no row twice
    for key, score in got:
        assert key in own and abs(own[key] - score) <= TOL, (where, key, score)


def _rows(index: Any, scores: Any) -> list[list[tuple[int, float]]]:
    """(Q, k) arrays as lists of (row, score), the -1 slots left out."""
    return [[(int(r), float(s)) for r, s in zip(ri, si, strict=True) if r >= 0]
            for ri, si in zip(np.asarray(index), np.asarray(scores, np.float64), strict=True)]


@FEW
@given(
    seed=st.integers(0, 2**32 - 1),
    n=st.sampled_from([1, 23, 40]),
    q=st.sampled_from([1, 5]),
    k=st.sampled_from([1, 9, 64]),
    chunk=st.sampled_from([4, 16]),
)
def test_each_score_batch_row_is_the_one_query_answer(
    seed: int, n: int, q: int, k: int, chunk: int
) -> None:
    rng = np.random.default_rng(seed)
    params = default_params().astype(jnp.float32)
    cols, queries = _bank(rng, n, 5), _queries(rng, q, 5)
    batch = _rows(*score_batch(params, queries, cols, k, chunk_size=chunk))
    sharded = _rows(*score_batch_sharded(params, queries, cols, k, chunk_size=chunk))
    totals = np.asarray(jax.vmap(lambda one: score_bank(params, one, cols).totals)(queries),
                        np.float64)
    valid = np.asarray(cols.valid)
    for i in range(q):
        one = jax.tree_util.tree_map(lambda x, i=i: np.asarray(x)[i : i + 1], queries)
        alone = _rows(*score_batch(params, one, cols, k, chunk_size=chunk))[0]
        own = {r: float(totals[i, r]) for r in np.flatnonzero(valid & ~np.isnan(totals[i]))}
        assert len(alone) == min(k, len(own))
        _assert_congruent(batch[i], alone, own, f"query {i}")
        _assert_congruent(sharded[i], alone, own, f"sharded query {i}")
        _assert_congruent(alone, batch[i], own, f"alone {i}")


VOCAB = ["coffee", "rain", "Lisbon", "storm", "exam", "train", "launch", "budget", "Ana"]
words = st.lists(st.sampled_from(VOCAB), min_size=1, max_size=4).map(" ".join)
affects = st.builds(CoreAffect, valence=st.floats(-1, 1), arousal=st.floats(0, 1))


def _single(retriever: BatchRetriever, query: str, affect: CoreAffect | None) -> Any:
    """The query alone over the whole bank: its top list and every memory's score."""
    everything = retriever([query], 10_000, query_affects=[affect])[0]
    return {m.id: s for m, s in everything}


@MORE
@given(
    memories=st.lists(st.tuples(words, affects), min_size=1, max_size=10),
    queries=st.lists(st.tuples(words, st.none() | affects), min_size=1, max_size=6),
    top_k=st.integers(1, 12),
    lexical=st.booleans(),
)
def test_each_score_queries_row_is_the_one_query_answer(
    memories: list[tuple[str, CoreAffect]], queries: list[tuple[str, CoreAffect | None]],
    top_k: int, lexical: bool,
) -> None:
    config = EmotionalMemoryConfig(retrieval=RetrievalConfig(lexical_weight=0.3 * lexical))
    now = datetime(2026, 1, 1, tzinfo=UTC)  # frozen: recency does not move between calls
    engine = EmotionalMemory(InMemoryStore(), HashingEmbedder(dim=16), config=config,
                             clock=lambda: now)
    for text, affect in memories:
        engine.set_affect(affect)
        engine.encode(text)
    engine.set_affect(CoreAffect(valence=-0.2, arousal=0.4))
    retriever = BatchRetriever(engine, chunk_size=4)
    texts = [t for t, _ in queries]
    chosen = [a for _, a in queries]
    for round_ in range(2):
        batch = retriever(texts, top_k, query_affects=chosen)
        assert len(batch) == len(texts)
        for i, (text, affect) in enumerate(queries):
            alone = retriever([text], top_k, query_affects=[affect])[0]
            own = _single(retriever, text, affect)
            where = f"round {round_} query {i} {text!r}"
            got = [(m.id, s) for m, s in batch[i]]
            _assert_congruent(got, [(m.id, s) for m, s in alone], own, where)
            assert len(got) == min(top_k, len(engine.store)), where
            assert all(math.isfinite(s) for _, s in got), where
        engine.encode(texts[0])  # the bank changes between calls: no stale answer
