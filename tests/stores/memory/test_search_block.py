"""The batched store search rescores a block of pools at once (stores/_search.py).

``_finish_block`` gathers the float64 rows of many queries' pools into one (G, P, D)
array and multiply-reduces its last axis; the single search multiply-reduces each
(P, D) pool on its own. Both must give the same bits, so a batched search returns
exactly the single searches' answers.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from emotional_memory.interfaces import store_transaction
from emotional_memory.stores import InMemoryStore
from emotional_memory.stores._shared.rows import search as search_module
from support.memories import tricky_vectors, varied_memory

DIMS = (1, 2, 7, 8, 9, 16, 127, 128, 129, 131, 384, 385, 1000, 1031)


@settings(max_examples=60, deadline=None)
@given(
    groups=st.integers(1, 5),
    pool=st.integers(1, 30),
    dim=st.sampled_from(DIMS),
    seed=st.integers(0, 2**32 - 1),
    spread=st.integers(0, 60),
)
def test_block_multiply_reduce_sums_each_row_as_a_single_pool(
    groups: int, pool: int, dim: int, seed: int, spread: int
) -> None:
    rng = np.random.default_rng(seed)
    # Entries over many magnitudes, so the summation order shows in the last bits.
    vectors = rng.normal(size=(groups, pool, dim)) * 2.0 ** rng.integers(
        -spread, spread + 1, size=(groups, pool, dim)
    )
    queries = rng.normal(size=(groups, dim))
    block = np.multiply(vectors, queries[:, None, :]).sum(axis=2)
    for g in range(groups):
        single = np.multiply(np.ascontiguousarray(vectors[g]), queries[g].copy()).sum(axis=1)
        assert block[g].tobytes() == single.tobytes()


@pytest.fixture(params=["numpy", "jax"])
def path(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """Both approximate passes of the batched search (jitted XLA from row 0)."""
    if request.param == "jax":
        monkeypatch.setattr(search_module, "_JAX_MIN_ROWS", 0)
        monkeypatch.setattr(search_module, "_HALF_JAX_MIN_ROWS", 0)
    yield request.param


@pytest.mark.parametrize("mode", ["float32", "bfloat16", "float16"])
@pytest.mark.parametrize("dim", [131, 385])
def test_batched_rows_equal_single_search_rows(mode: str, dim: int, path: str) -> None:
    """Row for row, ``_search_rows_batch`` is ``_search_rows`` per query: pools of
    several sizes (special rows, short prefixes), aside and matrix rows mixed, ties."""
    rng = np.random.default_rng(dim + len(mode))
    vectors = tricky_vectors(rng, 500, dim)
    for i in range(0, 500, 3):  # float32 numbers: stored in the matrix, not aside
        v = vectors[i]
        if v is not None:
            with np.errstate(over="ignore"):  # beyond float32's range: inf, on purpose
                vectors[i] = v.astype(np.float32).astype(np.float64)
    store = InMemoryStore(embedding_dtype=mode)  # type: ignore[arg-type]
    with store_transaction(store):
        for i, v in enumerate(vectors):
            store.save(varied_memory(f"m{i}", None if v is None else v.tolist()))
    everything = store.list_all()
    picks = rng.choice(len(everything), size=80, replace=False)
    queries = [everything[i].embedding for i in picks]
    queries[:10] = [rng.normal(size=dim).tolist() for _ in range(10)]
    visible = [everything[i].id for i in picks]
    for k in (1, 15, 40):
        with store._lock:
            batched = store._search_rows_batch(queries, k, visible)
            singles = [
                store._search_rows(q or [], k, store._row_of[v])
                for q, v in zip(queries, visible, strict=True)
            ]
        for got, want in zip(batched, singles, strict=True):
            assert got is not None
            assert got.tolist() == want.tolist()


def test_scan_chunk_divides_the_rows_within_the_cap() -> None:
    """Every row count a growing store hands the batched search (a multiple of
    ``capacity / 8``, up to the capacity) is scanned in whole chunks of at most
    ``_BLOCK_CHUNK`` rows, in one step up to that many rows."""
    cap = search_module._BLOCK_CHUNK
    for capacity in (16 << i for i in range(21)):
        step = capacity // 8
        for rows in range(step, capacity + 1, step):
            chunk = search_module._scan_chunk(rows, step)
            assert rows % chunk == 0
            assert min(step, cap) <= chunk <= cap
            if rows <= cap:
                assert chunk == rows


def test_query_buckets_pad_few_queries_little() -> None:
    """One query alone; otherwise the smallest of 16, 64, 256, ... (at most the
    block) holding them: at most 4x the queries, few compiled shapes."""
    block = search_module._QUERY_BLOCK
    for count in range(1, block + 1):
        width = search_module._query_bucket(count)
        assert count <= width <= block
        assert width == 1 if count == 1 else width <= max(16, 4 * count)
    assert {search_module._query_bucket(c) for c in range(2, block + 1)} == {16, 64, 256, 512}


def test_query_blocks_cover_every_query_once_in_order() -> None:
    """Blocks of ``_QUERY_BLOCK``; a last block of fewer than 4 queries goes one query
    at a time (its width 1, never a padded 16)."""
    block = search_module._QUERY_BLOCK
    for count in [*range(1, 40), block - 1, block, block + 1, block + 3, block + 4, 3 * block]:
        spans = search_module._query_blocks(count)
        assert [i for s, e in spans for i in range(s, e)] == list(range(count))
        assert all(e - s == 1 or search_module._QUERY_SPLIT <= e - s <= block for s, e in spans)
        assert all(e - s == block for s, e in spans[: count // block])


@pytest.mark.parametrize(
    ("count", "widths"),
    [(1, [1]), (3, [1, 1, 1]), (5, [16]), (20, [64]), (514, [512, 1, 1]), (600, [512, 256])],
)
def test_a_few_queries_are_not_searched_as_a_whole_block(
    monkeypatch: pytest.MonkeyPatch, count: int, widths: list[int]
) -> None:
    """The jitted batched search pads a block to its query bucket (a block of fewer
    than 4 queries goes one by one, as matrix-vector products): a single encode at
    scale multiplies one query, not 512. 3,000 rows: one 3,072-row scan step, so its
    top-k goes through grouped_top_k (192 groups of 16 for 32 rows). Answers are the
    single searches' (the jitted single search: lax.top_k over every row)."""
    monkeypatch.setattr(search_module, "_JAX_MIN_ROWS", 0)
    seen: list[int] = []
    real = search_module._jax_search

    def spied(mode: str) -> tuple:
        scores, top, top_many = real(mode)

        def many(matrix, scale, bias, queries, lasts, **kw):  # type: ignore[no-untyped-def]
            seen.append(queries.shape[0])
            return top_many(matrix, scale, bias, queries, lasts, **kw)

        return scores, top, many

    monkeypatch.setattr(search_module, "_jax_search", spied)
    rng = np.random.default_rng(count)
    vectors = rng.normal(size=(3000, 12))
    store = InMemoryStore()
    with store_transaction(store):
        for i, v in enumerate(vectors):
            store.save(varied_memory(f"m{i}", v.tolist()))
    everything = store.list_all()
    picks = rng.choice(3000, size=count, replace=False)
    queries = [vectors[i].tolist() for i in picks]
    visible = [everything[i].id for i in picks]
    with store._lock:
        got = store._search_rows_batch(queries, 15, visible)
        want = [
            store._search_rows(q, 15, store._row_of[v])
            for q, v in zip(queries, visible, strict=True)
        ]
    assert seen == widths
    assert [a.tolist() for a in got] == [a.tolist() for a in want]  # type: ignore[union-attr]


def test_batched_rows_take_float64_arrays_as_queries(path: str) -> None:
    """The row linker hands the batched search the float64 arrays of rows kept aside:
    arrays answer as their lists do, the plain cases (empty, zero) included."""
    rng = np.random.default_rng(5)
    vectors = rng.normal(size=(300, 20))
    store = InMemoryStore()
    with store_transaction(store):
        for i, v in enumerate(vectors):
            store.save(varied_memory(f"m{i}", v.tolist()))
    lists: list[list[float]] = [v.tolist() for v in vectors[::7]] + [[], [0.0] * 20]
    arrays = [np.asarray(q, dtype=np.float64) for q in lists]
    everything = store.list_all()
    ids = [m.id for m in everything[::7]] + [everything[0].id, everything[-1].id]
    with store._lock:
        want = store._search_rows_batch(lists, 15, ids)
        got = store._search_rows_batch(arrays, 15, ids)
    assert [a.tolist() for a in got] == [a.tolist() for a in want]  # type: ignore[union-attr]


@settings(deadline=None, max_examples=40)
@given(
    kinds=st.lists(st.sampled_from(["vec", "none", "empty", "dead"]), min_size=1, max_size=30),
    picks=st.lists(st.integers(-1, 40), max_size=12),
)
def test_searchable_counts_of_many_limits_equal_one_at_a_time(
    kinds: list[str], picks: list[int]
) -> None:
    """The batched search counts the searchable rows up to every query's last row with
    one running count: the same numbers as one count per query (tombstones, rows
    without an embedding, limits before the first and past the last row)."""
    store = InMemoryStore()
    for i, kind in enumerate(kinds):
        embedding = {"vec": [1.0, float(i)], "none": None, "empty": []}.get(kind, [0.5, 1.0])
        memory = varied_memory(f"m{i}", embedding)
        store.save(memory)
        if kind == "dead":
            store.delete(memory.id)
    lasts = [min(p, store._size + 3) for p in picks]
    assert store._count_searchable_many(lasts) == [store._count_searchable(x) for x in lasts]
    everything = [store._size - 1] * 3
    assert store._count_searchable_many(everything) == [store._n_embedded] * 3


@pytest.mark.parametrize("mode", ["float32", "bfloat16", "float16", "float64"])
def test_a_views_batched_search_equals_its_single_searches(mode: str) -> None:
    """A scoped view's ``search_by_embedding_batch`` (one matrix product per chunk of
    queries for the approximate pass) answers exactly the view's single searches, each
    query seeing the view's memories up to its ``visible_until``: tricky vectors (ties,
    near-duplicates, NaN, zero, huge), more seen rows than the exact-subset limit."""
    from emotional_memory.stores.base import Selection

    dim = 131
    rng = np.random.default_rng(len(mode))
    vectors = tricky_vectors(rng, 5200, dim)
    store = InMemoryStore(embedding_dtype=mode)  # type: ignore[arg-type]
    with store_transaction(store):
        for i, v in enumerate(vectors):
            memory = varied_memory(f"m{i}", None if v is None else v.tolist())
            scope = ("a",) if i % 5 else ("b",)  # 4,160 rows in scope a
            store.save(memory.model_copy(update={"scope": scope}))
    view = store.selected(Selection(("a",)))
    seen = view.list_all()
    picks = rng.choice(len(seen), size=70, replace=False)
    queries: list[list[float] | None] = [seen[i].embedding for i in picks]
    queries[:8] = [rng.normal(size=dim).tolist() for _ in range(8)]
    queries[8] = None
    queries[9] = []
    visible = [seen[i].id for i in picks]
    everything = store.list_all()
    ids = [m.id for m in everything]
    for k in (1, 12, 40):
        batched = view.search_by_embedding_batch(queries, k, visible_until=visible)
        for query, last, got in zip(queries, visible, batched, strict=True):
            with store._lock:  # the view's single search over the rows up to ``last``
                rows = view._rows(store)
                upto = rows[rows <= store._row_of[last]]
                single_rows = store._search_rows_in(query or [], k, upto)
            assert [m.id for m in got] == [store._row_ids[r] for r in single_rows.tolist()]
            if mode in ("float32", "float64"):  # lossless rows: a store of just those
                oracle = InMemoryStore(embedding_dtype=mode)  # type: ignore[arg-type]
                with store_transaction(oracle):
                    for m in everything[: ids.index(last) + 1]:
                        if m.scope == ("a",):
                            oracle.save(m)
                want = oracle.search_by_embedding(query or [], k)
                assert [m.id for m in got] == [m.id for m in want]
        assert view.search_by_embedding_batch(queries[:3], k) == [
            view.search_by_embedding(q or [], k) for q in queries[:3]]


@pytest.mark.parametrize("mode", ["float32", "bfloat16"])
def test_a_query_whose_norm_overflows_is_answered_without_a_warning(mode: str) -> None:
    rng = np.random.default_rng(9)
    store = InMemoryStore(embedding_dtype=mode)  # type: ignore[arg-type]
    with store_transaction(store):
        for i, v in enumerate(rng.normal(size=(20, 8))):
            store.save(varied_memory(f"m{i}", v.tolist()))
    huge = [1e200] * 8  # its squared norm overflows float64: scores 0, as the exact rule
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        batched = store.search_by_embedding_batch([huge, huge[:4] + [0.0] * 4], 5)
    assert [m.id for m in batched[0]] == [m.id for m in store.search_by_embedding(huge, 5)]
    assert len(batched[1]) == 5
