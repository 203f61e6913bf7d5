"""Batch scoring at scale (DESIGN "Scale"): the kernel's chunked top-k scorer, the
InMemoryStore's reduced-precision search matrix and column cache, and the read-only
batch retrieval API.

- ``score_batch`` equals ``score_bank`` query by query (indices exactly, scores to
  1e-6 in float32) on random banks with padding, NaN and zero rows, ties, chunk
  boundaries, ablation masks, calibration and half-precision embeddings;
- every ``embedding_dtype`` of the store returns the float64 search answer exactly,
  single and batched (``visible_until``), on banks built to make rounding matter;
- half precision halves the search-matrix bytes; its effect on batch top-5 sets is
  measured;
- ``score_queries`` agrees with a float64 pass-1 ranking and has no side effects.
"""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest

from emotional_memory import CoreAffect, EmotionalMemory, EmotionalMemoryConfig
from emotional_memory._bank import columns_from_memories
from emotional_memory.batch_retrieval import BatchRetriever, score_queries
from emotional_memory.decay import DecayConfig
from emotional_memory.embedders import HashingEmbedder
from emotional_memory.interfaces import store_transaction
from emotional_memory.kernel import MemoryColumns, QueryFeatures, ScoringParams, score_bank
from emotional_memory.kernel.chunked_topk import score_batch, score_batch_compiled
from emotional_memory.models import Memory
from emotional_memory.retrieval import (
    QueryClassifierConfig,
    RetrievalConfig,
    build_retrieval_plan,
)
from emotional_memory.scoring_config import params_from_config
from emotional_memory.stores import InMemoryStore, SQLiteStore
from emotional_memory.stores._shared.rows import search as search_module
from emotional_memory.stores.columnar import StoreAdapter
from support.memories import tricky_vectors, varied_memory
from support.plain_store import PerMemoryStore

T0 = datetime(2025, 3, 1, 9, 0, tzinfo=UTC)
MODES = ("float64", "float32", "float16", "bfloat16")


# --------------------------------------------------------------------------- banks


def random_columns(
    rng: np.random.Generator, n: int, d: int, *, special_rows: bool = True
) -> MemoryColumns:
    """A float32 bank with invalid (padding) rows, NaN rows, zero rows and duplicates."""
    emb = rng.normal(size=(n, d))
    affect = np.column_stack([rng.uniform(-1, 1, n), rng.uniform(0, 1, n), rng.uniform(0, 1, n)])
    mood = np.column_stack([rng.uniform(-1, 1, n), rng.uniform(0, 1, n), rng.uniform(0, 1, n)])
    velocity = rng.normal(0, 0.2, size=(n, 3))
    velocity[rng.uniform(size=n) < 0.2] = 0.0  # zero speed: momentum 0.5
    valid = rng.uniform(size=n) > 0.15
    if special_rows:
        emb[rng.uniform(size=n) < 0.03] = np.nan
        emb[rng.uniform(size=n) < 0.03] = 0.0
    cols = MemoryColumns(
        embedding=emb.astype(np.float32),
        affect=affect.astype(np.float32),
        mood=mood.astype(np.float32),
        velocity=velocity.astype(np.float32),
        age_seconds=rng.uniform(0, 5e6, n).astype(np.float32),
        consolidation=rng.uniform(0.1, 1, n).astype(np.float32),
        retrieval_count=rng.integers(0, 6, n).astype(np.float32),
        activation=(rng.uniform(size=n) * (rng.uniform(size=n) < 0.3)).astype(np.float32),
        valid=valid,
    )
    return cols


def random_queries(rng: np.random.Generator, q: int, d: int) -> QueryFeatures:
    emb = rng.normal(size=(q, d))
    emb[0] = 0.0  # zero-norm query: semantic 0 everywhere
    if q > 2:
        emb[1, 0] = np.nan  # NaN query: semantic 0 everywhere
    velocity = rng.normal(0, 0.2, size=(q, 3))
    velocity[-1] = 0.0
    mood = np.column_stack([rng.uniform(-1, 1, q), rng.uniform(0, 1, q), rng.uniform(0, 1, q)])
    return QueryFeatures(
        embedding=emb.astype(np.float32),
        affect=rng.uniform(0, 1, (q, 3)).astype(np.float32),
        mood=mood.astype(np.float32),
        velocity=velocity.astype(np.float32),
    )


@jax.jit
def _bank_totals(params: Any, queries: Any, cols: Any, mask: Any) -> Any:
    """``score_bank`` totals of each query (a vmap over queries, itself one query at a
    time: the reference the batch scorer must match)."""
    return jax.vmap(lambda q: score_bank(params, q, cols, mask).totals)(queries)


def reference_top_k(
    params: ScoringParams, queries: QueryFeatures, cols: MemoryColumns, k: int,
    mask: Any = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Per query: ``score_bank`` totals, stable descending sort of the valid rows."""
    out_idx, out_scores = [], []
    valid = np.asarray(cols.valid)
    all_totals = np.asarray(_bank_totals(params, queries, cols, mask), dtype=np.float64)
    for totals in all_totals:
        rows = np.flatnonzero(valid)
        order = rows[np.argsort(-totals[rows], kind="stable")][:k]
        idx = np.full(k, -1)
        sc = np.full(k, -np.inf)
        idx[: len(order)] = order
        sc[: len(order)] = totals[order]
        out_idx.append(idx)
        out_scores.append(sc)
    return np.stack(out_idx), np.stack(out_scores)


def float32_params(retrieval: RetrievalConfig | None = None) -> ScoringParams:
    return params_from_config(retrieval or RetrievalConfig(), DecayConfig()).astype(
        jnp.float32
    )


def assert_same_top_k(got: tuple[Any, Any], want: tuple[np.ndarray, np.ndarray]) -> None:
    idx, scores = np.asarray(got[0]), np.asarray(got[1], dtype=np.float64)
    np.testing.assert_array_equal(idx, want[0])
    finite = np.isfinite(want[1])
    assert np.array_equal(np.isfinite(scores), finite)
    np.testing.assert_allclose(scores[finite], want[1][finite], rtol=0, atol=1e-6)


# ------------------------------------------------------------------ score_batch


@pytest.mark.parametrize(
    ("n", "chunk", "k"),
    [
        (1000, 128, 10),  # 7 full chunks + a tail of 104 rows
        (512, 128, 7),  # exact multiple of the chunk size, no tail
        (300, 4096, 5),  # a single (tail-only) chunk smaller than chunk_size
        (40, 16, 64),  # k larger than the bank: -1 / -inf slots
        (2500, 512, 6),  # chunks wide enough for grouped_top_k (32 groups of 16 >= 4k)
    ],
)
def test_score_batch_equals_score_bank_per_query(n: int, chunk: int, k: int) -> None:
    rng = np.random.default_rng(n + chunk)
    cols = random_columns(rng, n, 24)
    queries = random_queries(rng, 9, 24)
    params = float32_params()
    got = score_batch(params, queries, cols, k, chunk_size=chunk)
    assert got[0].shape == (9, k) and got[0].dtype == jnp.int32
    assert_same_top_k(got, reference_top_k(params, queries, cols, k))
    # invalid rows never selected
    picked = np.asarray(got[0])
    assert not np.isin(picked[picked >= 0], np.flatnonzero(~np.asarray(cols.valid))).any()


@pytest.mark.parametrize("mask_name", ["no_mood", "none_of_three"])
def test_score_batch_with_mask_and_calibration(mask_name: str) -> None:
    masks = {"no_mood": [1, 0, 1, 1, 1, 1], "none_of_three": [1, 0, 1, 0, 1, 0]}
    rng = np.random.default_rng(3)
    cols = random_columns(rng, 700, 16)
    queries = random_queries(rng, 6, 16)
    params = float32_params(RetrievalConfig(
        signal_scale=[1.5, 0.5, 2.0, 1.0, 0.7, 3.0],
        signal_shift=[0.1, -0.2, 0.0, 0.3, -0.1, 0.05],
    ))
    mask = jnp.asarray(masks[mask_name], jnp.float32)
    got = score_batch(params, queries, cols, 8, chunk_size=256, signal_mask=mask)
    assert_same_top_k(got, reference_top_k(params, queries, cols, 8, mask))


def test_score_batch_ties_resolve_to_lowest_row() -> None:
    """Identical rows (zero embeddings, same tags) tie exactly; lowest index wins,
    across chunk boundaries too."""
    rng = np.random.default_rng(11)
    n = 200
    cols = random_columns(rng, n, 8, special_rows=False)
    template = 17
    dupes = np.array([3, 17, 64, 65, 129, 130, 199])  # spans chunks of 64
    leaves = {}
    for name in ("affect", "mood", "velocity", "age_seconds", "consolidation",
                 "retrieval_count", "activation"):
        arr = np.array(getattr(cols, name))
        arr[dupes] = arr[template]
        leaves[name] = arr
    emb = np.array(cols.embedding)
    emb[dupes] = 0.0
    valid = np.ones(n, dtype=bool)
    valid[130] = False
    tied = MemoryColumns(embedding=emb, valid=valid, **leaves)
    queries = random_queries(rng, 3, 8)
    queries = QueryFeatures(
        embedding=np.zeros((3, 8), np.float32), affect=queries.affect, mood=queries.mood,
        velocity=queries.velocity,
    )
    params = float32_params()
    got = score_batch(params, queries, tied, 12, chunk_size=64)
    want = reference_top_k(params, queries, tied, 12)
    assert_same_top_k(got, want)
    # the tied group appears in ascending row order wherever it is ranked
    for row in np.asarray(got[0]):
        in_group = [r for r in row.tolist() if r in set(dupes.tolist())]
        assert in_group == sorted(in_group)


@pytest.mark.parametrize("half", ["float16", "bfloat16"])
def test_score_batch_half_precision_embeddings_upcast_per_chunk(half: str) -> None:
    """A half-precision bank scores exactly like its float32 upcast."""
    rng = np.random.default_rng(5)
    cols = random_columns(rng, 600, 32, special_rows=False)
    dtype = jnp.float16 if half == "float16" else jnp.bfloat16
    half_emb = jnp.asarray(cols.embedding, dtype)
    half_cols = MemoryColumns(
        embedding=half_emb, affect=cols.affect, mood=cols.mood, velocity=cols.velocity,
        age_seconds=cols.age_seconds, consolidation=cols.consolidation,
        retrieval_count=cols.retrieval_count, activation=cols.activation, valid=cols.valid,
    )
    upcast = MemoryColumns(
        embedding=np.asarray(half_emb.astype(jnp.float32)), affect=cols.affect, mood=cols.mood,
        velocity=cols.velocity, age_seconds=cols.age_seconds, consolidation=cols.consolidation,
        retrieval_count=cols.retrieval_count, activation=cols.activation, valid=cols.valid,
    )
    queries = random_queries(rng, 5, 32)
    params = float32_params()
    assert_same_top_k(
        score_batch(params, queries, half_cols, 6, chunk_size=128),
        reference_top_k(params, queries, upcast, 6),
    )


def test_half_precision_top5_agreement_is_measured() -> None:
    """Top-5 sets from half-precision embeddings vs float32, on random banks.

    float16 keeps >= 99% of the sets identical; bfloat16 (8 significant bits) is
    coarser and reported by ``benchmarks/batch_throughput.py --agreement``.
    """
    rng = np.random.default_rng(21)
    n, d, q = 4000, 64, 200
    cols = random_columns(rng, n, d, special_rows=False)
    cols = MemoryColumns(
        embedding=cols.embedding, affect=cols.affect, mood=cols.mood, velocity=cols.velocity,
        age_seconds=cols.age_seconds, consolidation=cols.consolidation,
        retrieval_count=cols.retrieval_count, activation=cols.activation,
        valid=np.ones(n, dtype=bool),
    )
    queries = random_queries(rng, q, d)
    params = float32_params()
    base = np.asarray(score_batch(params, queries, cols, 5, chunk_size=1024)[0])
    half = MemoryColumns(
        embedding=jnp.asarray(cols.embedding, jnp.float16), affect=cols.affect,
        mood=cols.mood, velocity=cols.velocity, age_seconds=cols.age_seconds,
        consolidation=cols.consolidation, retrieval_count=cols.retrieval_count,
        activation=cols.activation, valid=cols.valid,
    )
    got = np.asarray(score_batch(params, queries, half, 5, chunk_size=1024)[0])
    same = np.mean([set(a) == set(b) for a, b in zip(base.tolist(), got.tolist(), strict=True)])
    assert same >= 0.99, same


def test_score_batch_is_one_compiled_program() -> None:
    rng = np.random.default_rng(8)
    cols = jax.device_put(random_columns(rng, 257, 8))
    queries = jax.device_put(random_queries(rng, 4, 8))
    params = float32_params()
    text = score_batch_compiled.lower(params, queries, cols, 3, chunk_size=64).as_text()
    assert "while" in text  # the chunk loop is a scan inside the program
    first = score_batch(params, queries, cols, 3, chunk_size=64)
    again = score_batch(params, queries, cols, 3, chunk_size=64)
    np.testing.assert_array_equal(np.asarray(first[0]), np.asarray(again[0]))


def test_score_batch_rejects_bad_k() -> None:
    rng = np.random.default_rng(0)
    with pytest.raises(ValueError, match="k must be"):
        score_batch(float32_params(), random_queries(rng, 2, 4), random_columns(rng, 8, 4), 0)


# ------------------------------------------------------------------ store: search


def reference_search(memories: list[Memory], query: Sequence[float], top_k: int) -> list[str]:
    """SPEC 5 search, one memory at a time in float64 (as the store contract tests)."""
    if top_k <= 0:
        return []
    embedded = [m for m in memories if m.embedding]
    q = np.asarray(query, dtype=np.float64)
    with np.errstate(over="ignore"):
        q_norm = float(np.linalg.norm(q)) if len(q) else 0.0
    if q_norm == 0.0 or not math.isfinite(q_norm):  # no direction: insertion order
        return [m.id for m in embedded[:top_k]]
    scored = []
    for position, m in enumerate(embedded):
        v = np.asarray(m.embedding, dtype=np.float64)
        with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
            v_norm = float(np.linalg.norm(v))
            sim = float(np.dot(v, q) / (v_norm * q_norm)) if v_norm > 0 else 0.0
        if math.isnan(sim):
            sim = 0.0
        scored.append((-sim, -position, m.id))  # ties: the later first
    scored.sort()
    return [mid for _, _, mid in scored[:top_k]]


def reference_cosines(memories: list[Memory], query: Sequence[float]) -> dict[str, float]:
    """Each embedded memory's float64 cosine with ``query`` (NaN and zero norms: 0)."""
    q = np.asarray(query, dtype=np.float64)
    out = {}
    for m in memories:
        if not m.embedding:
            continue
        v = np.asarray(m.embedding, dtype=np.float64)
        with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
            v_norm, q_norm = float(np.linalg.norm(v)), float(np.linalg.norm(q))
            sim = float(np.dot(v, q) / (v_norm * q_norm)) if v_norm > 0 else 0.0
        out[m.id] = 0.0 if math.isnan(sim) else sim
    return out


def assert_search_matches(
    mode: str, got: list[str], memories: list[Memory], query: Sequence[float], k: int
) -> None:
    """``got`` is the reference answer: exactly in the lossless modes; in half
    precision, where rounding makes distinct embeddings exact scalar multiples (so
    their cosines tie mathematically and differ only by float64 rounding, computed
    differently here), the returned cosines equal the reference's top-k cosines."""
    want = reference_search(memories, query, k)
    if mode in ("float64", "float32") or got == want:
        assert got == want, (mode, k)
        return
    q_norm = float(np.linalg.norm(np.asarray(query, dtype=np.float64))) if len(query) else 0.0
    assert len(got) == len(want), (mode, k)
    assert q_norm > 0.0, (mode, k)
    cos = reference_cosines(memories, query)
    np.testing.assert_allclose(
        [cos[i] for i in got], [cos[i] for i in want], rtol=0, atol=1e-12, err_msg=mode
    )


@pytest.fixture
def force_jax(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Route every search of the store through its jitted XLA programs."""
    monkeypatch.setattr(search_module, "_JAX_MIN_ROWS", 0)
    monkeypatch.setattr(search_module, "_HALF_JAX_MIN_ROWS", 0)
    yield


def filled_store(mode: str, vectors: Sequence[np.ndarray | None]) -> InMemoryStore:
    store = InMemoryStore(embedding_dtype=mode)  # type: ignore[arg-type]
    with store_transaction(store):
        for i, v in enumerate(vectors):
            store.save(varied_memory(f"m{i}", None if v is None else v.tolist()))
    return store


@pytest.mark.parametrize("path", ["numpy", "jax"])
@pytest.mark.parametrize("mode", MODES)
def test_search_is_exact_for_every_embedding_dtype(
    mode: str, path: str, request: pytest.FixtureRequest
) -> None:
    if path == "jax":
        request.getfixturevalue("force_jax")
    rng = np.random.default_rng(MODES.index(mode))
    d = 12
    vectors = tricky_vectors(rng, 900, d)
    store = filled_store(mode, vectors)
    doomed = [m.id for m in store.list_all()[::9]]
    for mid in doomed:
        store.delete(mid)
    everything = store.list_all()
    base = [np.asarray(m.embedding) for m in everything[:40] if m.embedding]
    queries = [b + rng.normal(size=d) * 1e-6 for b in base[:6]] + [
        rng.normal(size=d), rng.normal(size=d) * 1e-170, rng.normal(size=d) * 1e170,
        np.zeros(d),
    ]
    for q in queries:
        for k in (1, 4, 15, 60):
            got = [m.id for m in store.search_by_embedding(q.tolist(), k)]
            assert_search_matches(mode, got, everything, q.tolist(), k)


@pytest.mark.parametrize("mode", ["float32", "bfloat16"])
def test_jitted_searches_see_every_write_through_their_cached_views(
    mode: str, force_jax: None
) -> None:
    """The jitted search keeps its zero-copy JAX views of the matrix between searches:
    in-place rewrites, deletes, rolled-back writes, growth past the capacity and new
    rows must all show in the next search, exactly as a fresh search finds them."""
    rng = np.random.default_rng(7)
    d = 9
    store = filled_store(mode, [rng.normal(size=d) for _ in range(120)])
    query = rng.normal(size=d)

    def check() -> None:
        everything = store.list_all()
        for k in (1, 5):
            got = [m.id for m in store.search_by_embedding(query.tolist(), k)]
            assert_search_matches(mode, got, everything, query.tolist(), k)

    check()
    assert store._jax_views is not None
    views = store._jax_views
    # rewrite a row in place to the query's direction: it must win the next search
    target = store.list_all()[50]
    store.update(target.model_copy(update={"embedding": (query * 3).tolist()}))
    check()
    assert store.search_by_embedding(query.tolist(), 1)[0].id == target.id
    assert store._jax_views is views  # same arrays: the views were reused
    store.delete(target.id)
    check()
    near = (query + 0.05 * rng.normal(size=d)) * 4
    store.save(varied_memory("near", near.tolist()))  # a new row within the capacity
    check()
    assert store.search_by_embedding(query.tolist(), 1)[0].content == "near"
    with pytest.raises(RuntimeError), store_transaction(store):
        store.save(varied_memory("late", (query * 2).tolist()))
        raise RuntimeError("roll back")
    check()
    capacity = store.capacity
    with store_transaction(store):
        for i in range(capacity):  # past the capacity: the arrays are reallocated
            store.save(varied_memory(f"grown{i}", rng.normal(size=d).tolist()))
        store.save(varied_memory("best", (query * 5).tolist()))
    assert store.capacity > capacity
    check()
    assert store.search_by_embedding(query.tolist(), 1)[0].content == "best"
    assert store._jax_views is not views and store._jax_views[0] is store._matrix


@pytest.mark.parametrize("path", ["numpy", "jax"])
@pytest.mark.parametrize("mode", ["float32", "bfloat16", "float64"])
def test_batched_search_with_visibility_equals_single_searches(
    mode: str, path: str, request: pytest.FixtureRequest
) -> None:
    if path == "jax":
        request.getfixturevalue("force_jax")
    rng = np.random.default_rng(40 + len(mode))
    vectors = tricky_vectors(rng, 700, 10)
    store = filled_store(mode, vectors)
    everything = store.list_all()
    picks = rng.choice(len(everything), size=60, replace=False)
    queries: list[list[float] | None] = [everything[i].embedding for i in picks]
    queries[0] = None
    queries[1] = []
    visible = [everything[i].id for i in picks]
    for k in (1, 15):
        batched = store.search_by_embedding_batch(queries, k, visible_until=visible)
        for j, i in enumerate(picks.tolist()):
            assert_search_matches(
                mode, [m.id for m in batched[j]], everything[: i + 1], queries[j] or [], k
            )
        unrestricted = store.search_by_embedding_batch(queries, k)
        for j in range(len(queries)):
            assert_search_matches(
                mode, [m.id for m in unrestricted[j]], everything, queries[j] or [], k
            )
    with pytest.raises(KeyError):
        store.search_by_embedding_batch([queries[2]], 3, visible_until=["nope"])
    with pytest.raises(ValueError, match="one id per query"):
        store.search_by_embedding_batch([queries[2]], 3, visible_until=[])
    with pytest.raises(ValueError, match="length"):
        store.search_by_embedding_batch([[1.0, 2.0]], 3)


def test_half_precision_halves_embedding_bytes() -> None:
    rng = np.random.default_rng(2)
    # float32 numbers, as embedders produce: the float32 mode stores them losslessly
    vectors: list[np.ndarray | None] = list(
        rng.normal(size=(300, 64)).astype(np.float32).astype(np.float64)
    )
    stores = {mode: filled_store(mode, vectors) for mode in MODES}
    sizes = {mode: store.embedding_nbytes() for mode, store in stores.items()}
    # capacity 512 rows x 64 columns
    assert sizes["float64"] == 512 * 64 * 8
    assert sizes["float32"] == 512 * 64 * 4
    assert sizes["float16"] == sizes["bfloat16"] == 512 * 64 * 2
    assert sizes["float16"] * 2 == sizes["float32"]
    for mode in ("float64", "float32"):
        for m, v in zip(stores[mode].list_all(), vectors, strict=True):
            assert m.embedding == v.tolist()  # type: ignore[union-attr]


def test_float32_mode_keeps_float64_embeddings_aside_losslessly() -> None:
    rng = np.random.default_rng(3)
    exact32 = rng.normal(size=8).astype(np.float32).astype(np.float64)
    vectors: list[np.ndarray | None] = [
        exact32, rng.normal(size=8), rng.normal(size=8) * 1e30, np.full(8, np.nan),
    ]
    store = filled_store("float32", vectors)
    assert store.embedding_nbytes() == store.capacity * 8 * 4 + 3 * 8 * 8
    for m, v in zip(store.list_all(), vectors, strict=True):
        np.testing.assert_array_equal(m.embedding, v)
    # a replaced or deleted row releases its side copy
    store.delete(store.list_all()[1].id)
    assert store.embedding_nbytes() == store.capacity * 8 * 4 + 2 * 8 * 8


@pytest.mark.parametrize("mode", ["float16", "bfloat16"])
def test_half_precision_stores_rounded_unit_rows_times_norm(mode: str) -> None:
    rng = np.random.default_rng(5)
    vectors: list[np.ndarray | None] = list(rng.normal(size=(40, 16)) * 3.0)
    store = filled_store(mode, vectors)
    rel = 2.0**-11 if mode == "float16" else 2.0**-8
    for m, v in zip(store.list_all(), vectors, strict=True):
        got = np.asarray(m.embedding)
        assert v is not None
        norm = np.linalg.norm(v)
        np.testing.assert_allclose(got, v, rtol=0, atol=rel * norm)
        # the stored vector is the half-precision unit row times the float64 norm
        unit = got / norm
        half_type = np.float16 if mode == "float16" else ml_dtypes.bfloat16
        np.testing.assert_allclose(unit, unit.astype(half_type).astype(np.float64), rtol=1e-14)
    # saving what was read back does not drift (same stored embedding)
    before = [m.embedding for m in store.list_all()]
    for m in store.list_all():
        store.save(m.model_copy(update={"embedding": list(m.embedding or [])}))
    assert [m.embedding for m in store.list_all()] == before


def test_rejects_unknown_embedding_dtype() -> None:
    with pytest.raises(ValueError, match="embedding_dtype"):
        InMemoryStore(embedding_dtype="int8")  # type: ignore[arg-type]


def test_embedding_matrix_is_full_precision_in_every_mode() -> None:
    rng = np.random.default_rng(4)
    vectors = [rng.normal(size=5) * 1e-3 for _ in range(30)]
    for mode in MODES:
        store = filled_store(mode, vectors)
        ids, matrix, has = store.embedding_matrix()
        assert matrix.dtype == np.float64 and has.all()
        for row, m in zip(matrix, store.list_all(), strict=True):
            np.testing.assert_array_equal(row, m.embedding)
        assert ids == [m.id for m in store.list_all()]


# ------------------------------------------------------------------ store: columns


def test_columns_match_memories_and_ages_are_exact() -> None:
    rng = np.random.default_rng(6)
    store = InMemoryStore()
    memories = [
        varied_memory(f"memory {i}", rng.normal(size=6).tolist(), valence=float(rng.uniform(-1, 1)),
            when=T0 + timedelta(seconds=float(rng.uniform(0, 1e6)), microseconds=i),
            retrievals=i % 4)
        for i in range(60)
    ]
    for m in memories:
        store.save(m)
    for m in memories[::5]:
        store.delete(m.id)
    # a tag-only update (shared embedding list) and an embedding change
    target = store.list_all()[3]
    bumped = target.model_copy(update={"tag": target.tag.model_copy(
        update={"retrieval_count": 9})})
    store.update(bumped)
    moved = store.list_all()[4]
    store.update(moved.model_copy(update={"embedding": [1.0, 0, 0, 0, 0, 0]}))
    now = T0 + timedelta(days=20, microseconds=7)
    live = store.list_all()
    ids, cols = store.columns(now)
    assert ids == [m.id for m in live]
    ref = columns_from_memories(live, now, 6)
    for name in ("affect", "mood", "velocity", "age_seconds", "consolidation",
                 "retrieval_count"):
        np.testing.assert_array_equal(getattr(cols, name), getattr(ref, name), err_msg=name)
    assert cols.retrieval_count[3] == 9
    # float32 rows: the memories' embeddings rounded to float32 (same cosines)
    np.testing.assert_array_equal(cols.embedding, ref.embedding.astype(np.float32))
    # padded view: every allocated row, invalid where no live memory
    padded_ids, padded = store.columns(now, padded=True)
    assert len(padded_ids) == store.capacity == padded.valid.shape[0]
    assert [i for i in padded_ids if i is not None] == ids
    assert padded.valid.sum() == len(live)
    np.testing.assert_array_equal(padded.age_seconds[padded.valid], ref.age_seconds)


def test_columns_survive_rollback() -> None:
    store = InMemoryStore()
    first = varied_memory("a", [1.0, 0.0], retrievals=1)
    store.save(first)
    before = store.columns(T0)[1]
    with pytest.raises(RuntimeError), store.transaction():
        store.update(first.model_copy(update={"tag": first.tag.model_copy(
            update={"retrieval_count": 5})}))
        store.save(varied_memory("b", [0.0, 1.0]))
        raise RuntimeError
    after = store.columns(T0)[1]
    for name in ("retrieval_count", "affect", "age_seconds"):
        np.testing.assert_array_equal(getattr(after, name), getattr(before, name))


# ------------------------------------------------------------------ batch API


class Clock:
    """Advances 3 minutes per reading until frozen."""

    def __init__(self) -> None:
        self.now = T0
        self.frozen = False

    def __call__(self) -> datetime:
        if not self.frozen:
            self.now += timedelta(minutes=3)
        return self.now

    def freeze(self) -> datetime:
        self.frozen = True
        return self.now


def tick_clock() -> Clock:
    return Clock()


TEXTS = [
    "coffee with Ana in the rain", "server outage before the launch", "budget review went well",
    "birthday party with music", "missed the flight to Lisbon", "quiet morning in the garden",
    "the deadline moved again", "dinner with an old friend", "storm knocked out the power",
    "got the job offer", "argument about the budget", "long walk by the river",
]


def build_engine(store: Any, **config: Any) -> EmotionalMemory:
    engine = EmotionalMemory(store, HashingEmbedder(dim=48), clock=tick_clock(),
                             config=EmotionalMemoryConfig(**config))
    for i, text in enumerate(TEXTS * 3):
        engine.set_affect(CoreAffect(valence=math.sin(i), arousal=0.5 + 0.4 * math.cos(i)))
        engine.encode(f"{text} ({i})")
    engine.set_affect(CoreAffect(valence=-0.4, arousal=0.7))
    engine._clock.freeze()  # type: ignore[attr-defined]
    return engine


def snapshot(engine: EmotionalMemory) -> str:
    return json.dumps([engine.export_memories(), engine.save_state()], sort_keys=True)


def float64_pass1(engine: EmotionalMemory, query: str, now: datetime, top_k: int,
                  affect: CoreAffect | None = None) -> list[tuple[str, float]]:
    plan = build_retrieval_plan(
        engine.embedder.embed(query) if query else None,
        affect if affect is not None else engine.get_state().core_affect,
        engine.get_current_mood(now), engine.get_state().momentum, engine.list_all(), now,
        engine.config.decay, engine.config.retrieval, top_k,
        precomputed_weights=engine.current_weights(query, now), enable_resonance=False,
    )
    return [(r.memory.id, r.score) for r in plan.pass1[:top_k]]


@pytest.fixture(params=["memory", "memory-bfloat16", "sqlite", "plain"])
def any_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Any]:
    if request.param == "sqlite":
        store: Any = SQLiteStore(tmp_path / "batch.db")
    elif request.param == "plain":  # served through the StoreAdapter (list_all)
        store = PerMemoryStore(InMemoryStore())
    elif request.param == "memory-bfloat16":
        store = InMemoryStore(embedding_dtype="bfloat16")
    else:
        store = InMemoryStore()
    yield store
    getattr(store, "close", lambda: None)()


def test_score_queries_matches_float64_pass1_and_has_no_side_effects(any_store: Any) -> None:
    engine = build_engine(any_store)
    before = snapshot(engine)
    queries = ["coffee in the rain", "budget", "party music", "", "flight to Lisbon"]
    affects = [None, CoreAffect(valence=0.8, arousal=0.2), None, None, None]
    results = score_queries(engine, queries, top_k=4, query_affects=affects)
    assert snapshot(engine) == before  # store and state untouched
    now = engine._clock.now  # type: ignore[attr-defined]
    tol = 2e-3 if getattr(any_store, "embedding_dtype", "") == "bfloat16" else 1e-5
    for query, affect, got in zip(queries, affects, results, strict=True):
        want = float64_pass1(engine, query, now, 4, affect)
        assert [m.id for m, _ in got] == [mid for mid, _ in want]
        np.testing.assert_allclose([s for _, s in got], [s for _, s in want], atol=tol)
        assert all(isinstance(m, Memory) for m, _ in got)


def test_scoring_bank_of_a_plain_store_scores_like_the_native_one() -> None:
    """``BatchRetriever`` reads a plain store through the adapter's ``scoring_bank``
    (rows from ``list_all``) and the native store through its row arrays: the same
    ids, scores and order, with deleted rows left out of both."""
    native = build_engine(InMemoryStore())
    plain = build_engine(PerMemoryStore(InMemoryStore()))
    assert isinstance(plain._columnar, StoreAdapter)
    for engine in (native, plain):
        victim = engine.list_all()[4].id
        assert engine.delete(victim)
    queries = ["coffee in the rain", "budget", "party music", "flight to Lisbon"]
    got_native = score_queries(native, queries, top_k=5)
    got_plain = score_queries(plain, queries, top_k=5)
    for a, b in zip(got_native, got_plain, strict=True):
        assert [m.content for m, _ in a] == [m.content for m, _ in b]
        np.testing.assert_allclose([s for _, s in a], [s for _, s in b], rtol=0, atol=1e-6)
    row_ids, cols, dim = plain._columnar.scoring_bank(plain._clock())
    assert dim == 48 and len(row_ids) == cols.valid.shape[0] == 64
    assert sum(r is not None for r in row_ids) == int(np.asarray(cols.valid).sum()) == 35


@pytest.mark.parametrize("mode", ["float32", "bfloat16", "float64"])
def test_scoring_bank_is_a_copy_later_writes_do_not_reach(mode: str) -> None:
    """``scoring_bank`` returns a snapshot: updates, deletes and the compaction they
    trigger after the call leave the returned embeddings as they were (the live search
    matrix would otherwise be shared with JAX without a copy on CPU)."""
    rng = np.random.default_rng(3)
    store = filled_store(mode, [rng.normal(size=8) for _ in range(40)])
    row_ids, cols, dim = store.scoring_bank(T0)
    before = np.array(cols.embedding)
    for memory in store.list_all()[:30]:
        store.delete(memory.id)  # enough tombstones to compact the rows
    for memory in store.list_all():
        store.update(memory.model_copy(update={"embedding": [9.0] * 8}))
    store.list_all()
    np.testing.assert_array_equal(np.asarray(cols.embedding), before)
    assert dim == 8 and sum(r is not None for r in row_ids) == 40


def test_score_queries_routing_and_ablation() -> None:
    engine = build_engine(
        InMemoryStore(),
        enable_mood_signal=False,
        retrieval=RetrievalConfig(query_classifier=QueryClassifierConfig(
            mode="heuristic",
            routed_weights={"temporal": [0.1, 0.1, 0.1, 0.1, 0.5, 0.1],
                            "single_hop": [0.8, 0.05, 0.05, 0.05, 0.05, 0.0]},
        )),
    )
    queries = ["when was the storm", "who had coffee", "budget and then the deadline"]
    retriever = BatchRetriever(engine, chunk_size=16)
    before = snapshot(engine)
    results = retriever(queries, top_k=3)
    assert snapshot(engine) == before
    now = engine._clock.now  # type: ignore[attr-defined]
    for query, got in zip(queries, results, strict=True):
        want = float64_pass1(engine, query, now, 3)
        assert [m.id for m, _ in got] == [mid for mid, _ in want]
        np.testing.assert_allclose([s for _, s in got], [s for _, s in want], atol=1e-5)


def test_score_queries_edge_cases() -> None:
    engine = EmotionalMemory(InMemoryStore(), HashingEmbedder(dim=16), clock=tick_clock())
    assert score_queries(engine, ["anything"]) == [[]]
    assert score_queries(engine, []) == []
    engine.encode("only memory")
    (only,) = score_queries(engine, ["only", "memory"], top_k=5)[:1]
    assert len(only) == 1
    with pytest.raises(TypeError):
        score_queries(engine, "not a list")
    with pytest.raises(ValueError, match="top_k"):
        score_queries(engine, ["x"], top_k=0)
    with pytest.raises(TypeError, match="top_k"):
        score_queries(engine, ["x"], top_k=True)
    with pytest.raises(ValueError, match="query_affects"):
        score_queries(engine, ["x", "y"], query_affects=[None])
    with pytest.raises(TypeError, match="query_affects"):
        score_queries(engine, ["x"], query_affects=["calm"])  # type: ignore[list-item]
    with pytest.raises(ValueError, match="chunk_size"):
        BatchRetriever(engine, chunk_size=0)


def test_score_queries_rejects_dimension_mismatch() -> None:
    class Wrong:
        def embed(self, text: str) -> list[float]:
            return [1.0, 0.0, 0.0]

        def embed_batch(self, texts: list[str]) -> list[list[float]]:
            return [self.embed(t) for t in texts]

    engine = build_engine(InMemoryStore())
    engine.embedder = Wrong()
    with pytest.raises(ValueError, match="dimension"):
        score_queries(engine, ["x"])


if __name__ == "__main__":  # pragma: no cover
    sys.exit(pytest.main([__file__, "-q"]))
