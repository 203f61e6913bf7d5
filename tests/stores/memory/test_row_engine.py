"""The in-process row engine (InMemoryStore, and SQLiteStore's cache): search against a
naive reference at sizes that take its partition and compaction paths, the embedding
matrix, amortised growth, and transactions with rollback (nested, failed writes,
dimension changes). The store contract every backend keeps is
``tests/stores/contract/``."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import numpy as np
import pytest

from emotional_memory.interfaces import store_transaction
from emotional_memory.models import Memory
from emotional_memory.state_stores import InMemoryAffectiveStateStore
from emotional_memory.stores import InMemoryStore, SQLiteStore
from support.memories import basic_memory as mem
from support.rows import QUERIES, assert_same_state, ids, populate, state_of

Store = InMemoryStore | SQLiteStore


# ---------------------------------------------------------------------- helpers


def reference_search(memories: list[Memory], query: Sequence[float], top_k: int) -> list[str]:
    """SPEC 5 search written naively, one memory at a time."""
    if top_k <= 0:
        return []
    embedded = [m for m in memories if m.embedding]
    q = np.asarray(query, dtype=np.float64)
    q_norm = float(np.linalg.norm(q))
    if q_norm == 0.0 or not math.isfinite(q_norm):  # no direction: insertion order
        return [m.id for m in embedded[:top_k]]
    scored = []
    for position, m in enumerate(embedded):
        v = np.asarray(m.embedding, dtype=np.float64)
        v_norm = float(np.linalg.norm(v))
        with np.errstate(invalid="ignore", divide="ignore"):
            sim = float(np.dot(v, q) / (v_norm * q_norm)) if v_norm > 0 else 0.0
        if math.isnan(sim):
            sim = 0.0
        scored.append((-sim, -position, m.id))  # ties: the later first
    scored.sort()
    return [mid for _, _, mid in scored[:top_k]]


@pytest.fixture(params=["memory", "sqlite"])
def make_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Callable[[], Store]]:
    opened: list[Store] = []

    def factory() -> Store:
        s: Store = (
            InMemoryStore() if request.param == "memory" else SQLiteStore(tmp_path / "memories.db")
        )
        opened.append(s)
        return s

    yield factory
    for s in opened:
        s.close()


@pytest.fixture
def store(make_store: Callable[[], Store]) -> Store:
    return make_store()


# ------------------------------------------------------------------- CRUD basics


def test_list_all_insertion_order_kept_on_resave(store: Store) -> None:
    ms = [mem(f"m{i}", [i + 1.0, 1.0]) for i in range(5)]
    for m in ms:
        store.save(m)
    changed = ms[1].model_copy(update={"content": "changed", "embedding": [9.0, 9.0]})
    store.save(changed)
    assert ids(store.list_all()) == ids(ms)
    assert store.list_all()[1].content == "changed"
    mids, matrix, _ = store.embedding_matrix()
    assert mids == ids(ms)
    np.testing.assert_array_equal(matrix[1], [9.0, 9.0])
    # delete then save again: goes to the end
    store.delete(ms[0].id)
    store.save(ms[0])
    assert ids(store.list_all()) == [*ids(ms[1:]), ms[0].id]


# ----------------------------------------------------------- search (SPEC 5)


def test_search_ties_go_to_the_later_memory(store: Store) -> None:
    ms = [mem(f"m{i}", [1.0, 2.0] if i % 2 == 0 else [2.0, 4.0]) for i in range(6)]
    for m in ms:
        store.save(m)
    assert ids(store.search_by_embedding([1, 2], 4)) == ids(ms[::-1][:4])
    # re-saving keeps the tie position
    store.save(ms[0].model_copy(update={"content": "again"}))
    assert ids(store.search_by_embedding([1, 2], 6)) == ids(ms[::-1])


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_search_without_direction_gives_the_first_embedded(dtype: str) -> None:
    """A query whose norm overflows (or is NaN) has no direction: the first embedded
    memories, in every dtype (float64 once ranked it, every cosine 0: a tie)."""
    store = InMemoryStore(embedding_dtype=dtype)  # type: ignore[arg-type]
    ms = [mem(f"m{i}", None if i == 0 else [1.0 + i, 2.0]) for i in range(5)]
    for m in ms:
        store.save(m)
    for query in ([1e200, 1e200], [math.nan, 1.0], [math.inf, 0.0]):
        assert ids(store.search_by_embedding(query, 2)) == ids(ms[1:3]), query


def test_search_ties_at_partition_cut_large_n(store: Store) -> None:
    """Large N takes the argpartition path; ties at the cut go to the later memory."""
    rng = np.random.default_rng(7)
    dim = 8
    kinds = np.array([0] * 5 + [1] * 100 + [2] * 3000 + [3] * 20 + [4] * 20 + [5] * 20)
    rng.shuffle(kinds)
    memories = []
    for i, kind in enumerate(kinds.tolist()):
        vec = np.zeros(dim)
        if kind == 0:
            vec[0] = 1.0  # similarity 1
        elif kind == 1:
            vec[:2] = 1.0  # similarity 1/sqrt(2), all identical
        elif kind == 2:
            vec[2:] = rng.normal(size=dim - 2)  # orthogonal: similarity exactly 0
        elif kind == 3:
            vec[1] = float("nan")  # NaN -> 0
        elif kind == 4:
            pass  # zero row -> 0
        memories.append(mem(f"m{i}", None if kind == 5 else vec.tolist()))
    with store_transaction(store):
        for m in memories:
            store.save(m)
    query = np.zeros(dim)
    query[0] = 3.0
    everything = store.list_all()
    for top_k in (1, 5, 10, 105, 106, 200, 400):
        got = ids(store.search_by_embedding(query.tolist(), top_k))
        assert got == reference_search(everything, query.tolist(), top_k), top_k


def test_search_matches_brute_force_random(store: Store) -> None:
    rng = np.random.default_rng(0)
    dim = 16
    memories = [
        mem(f"m{i}", None if i % 11 == 0 else rng.normal(size=dim).tolist()) for i in range(3000)
    ]
    with store_transaction(store):
        for m in memories:
            store.save(m)
    queries = [rng.normal(size=dim).tolist() for _ in range(5)]

    def check() -> None:
        everything = store.list_all()
        for q in queries:
            for top_k in (1, 7, 50, 900, 5000):
                assert ids(store.search_by_embedding(q, top_k)) == reference_search(
                    everything, q, top_k
                )

    check()
    # deletes (enough to trigger compaction), re-saves and fresh inserts
    doomed = rng.choice(len(memories), size=2200, replace=False)
    for i in doomed.tolist():
        assert store.delete(memories[i].id)
    for i in range(0, 3000, 97):
        if memories[i].id in store:
            store.save(memories[i].model_copy(update={"embedding": rng.normal(size=dim).tolist()}))
    for i in range(50):
        store.save(mem(f"new{i}", rng.normal(size=dim).tolist()))
    assert len(store) == 3000 - 2200 + 50
    check()
    mids, matrix, has = store.embedding_matrix()
    assert mids == ids(store.list_all())
    for m, row, flag in zip(store.list_all(), matrix, has, strict=True):
        assert flag == bool(m.embedding)
        if m.embedding:
            np.testing.assert_array_equal(row, m.embedding)


def test_search_partition_path_matches_full_sort(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Force the argpartition branch on a small bank with many ties."""
    import emotional_memory.stores._shared.rows.search as search_module

    rng = np.random.default_rng(11)
    vectors = rng.integers(-2, 3, size=(400, 3)).astype(float)  # lots of exact ties
    for i, v in enumerate(vectors):
        store.save(mem(f"m{i}", None if i % 13 == 0 else v.tolist()))
    queries = [rng.integers(-2, 3, size=3).astype(float).tolist() for _ in range(6)]
    expected = {
        (qi, k): reference_search(store.list_all(), q, k)
        for qi, q in enumerate(queries)
        for k in (1, 3, 17, 60)
    }
    monkeypatch.setattr(search_module, "_PARTITION_MIN_ROWS", 0)
    for (qi, k), want in expected.items():
        assert ids(store.search_by_embedding(queries[qi], k)) == want


# ------------------------------------------------------------ dimension checks


# --------------------------------------------------------------- column cache


def test_embedding_matrix(store: Store) -> None:
    ms = [mem("a", [1, 2]), mem("b"), mem("c", [3, 4])]
    for m in ms:
        store.save(m)
    mids, matrix, has = store.embedding_matrix()
    assert mids == ids(ms)
    assert matrix.dtype == np.float64 and matrix.shape == (3, 2)
    np.testing.assert_array_equal(matrix, [[1, 2], [0, 0], [3, 4]])
    assert has.tolist() == [True, False, True]
    with pytest.raises(ValueError):
        matrix[0, 0] = 5.0
    store.delete(ms[0].id)
    mids, matrix, has = store.embedding_matrix()
    assert mids == ids(ms[1:])
    np.testing.assert_array_equal(matrix, [[0, 0], [3, 4]])
    assert has.tolist() == [False, True]


def test_amortised_growth(store: Store) -> None:
    n = 5000
    rng = np.random.default_rng(1)
    vectors = rng.normal(size=(n, 4))
    with store_transaction(store):
        for i in range(n):
            store.save(mem(f"m{i}", vectors[i].tolist()))
    assert len(store) == n
    # doubling: capacity a power of two below 2n, O(log n) reallocations
    assert n <= store.capacity < 2 * n
    assert store.capacity & (store.capacity - 1) == 0
    assert store.reallocations <= math.ceil(math.log2(n)) + 2
    got = ids(store.search_by_embedding(vectors[123].tolist(), 1))
    assert got == [store.list_all()[123].id]


def test_compaction_keeps_order() -> None:
    store = InMemoryStore()
    ms = [mem(f"m{i}", [float(i % 5), 1.0]) for i in range(200)]
    for m in ms:
        store.save(m)
    kept = [m for i, m in enumerate(ms) if i % 4 == 0]
    for i, m in enumerate(ms):
        if i % 4:
            store.delete(m.id)
    assert store._dead < 150  # compacted at least once
    tail = [mem(f"t{i}", [1.0, float(i)]) for i in range(10)]
    for m in tail:
        store.save(m)
    assert ids(store.list_all()) == ids(kept + tail)
    for q in ([1, 0], [0, 1], [1, 1]):
        assert ids(store.search_by_embedding(q, 30)) == reference_search(store.list_all(), q, 30)


# ---------------------------------------------------------------- transactions


def test_transaction_rollback_restores_everything(make_store: Callable[[], Store]) -> None:
    store = make_store()
    ms = populate(store)
    before = state_of(store, QUERIES)
    with pytest.raises(RuntimeError, match="boom"), store.transaction():
        store.save(mem("new", [1, 2, 3, 4]))
        store.save(ms[1].model_copy(update={"content": "B", "embedding": [9.0, 9.0, 9.0, 9.0]}))
        store.update(ms[2].model_copy(update={"embedding": [1.0, 0.0, 0.0, 1.0]}))
        assert store.delete(ms[0].id)
        assert store.delete(ms[3].id)
        store.save(ms[0].model_copy(update={"content": "A again"}))
        store.delete(ms[4].id)
        assert len(store) == 5
        raise RuntimeError("boom")
    assert_same_state(before, state_of(store, QUERIES))
    if isinstance(store, SQLiteStore):
        store.close()
        assert_same_state(before, state_of(make_store(), QUERIES))


def test_transaction_rollback_of_dimension_change(make_store: Callable[[], Store]) -> None:
    store = make_store()
    ms = populate(store)
    before = state_of(store, QUERIES)
    with pytest.raises(RuntimeError), store_transaction(store):
        for m in ms:
            store.delete(m.id)
        assert store.dim is None
        store.save(mem("seven", [1.0] * 7))
        assert store.dim == 7
        raise RuntimeError
    assert store.dim == 4
    assert_same_state(before, state_of(store, QUERIES))


def test_failed_write_inside_transaction_then_rollback(store: Store) -> None:
    populate(store)
    before = state_of(store, QUERIES)
    with pytest.raises(ValueError), store.transaction():
        store.save(mem("ok", [1, 1, 1, 1]))
        store.save(mem("bad", [1, 1]))
    assert_same_state(before, state_of(store, QUERIES))


def test_transaction_commit_and_nesting(make_store: Callable[[], Store]) -> None:
    store = make_store()
    a, b, c = mem("a", [1, 0]), mem("b", [0, 1]), mem("c", [1, 1])
    with store.transaction():
        store.save(a)
        try:
            with store.transaction():
                store.save(b)
                store.delete(a.id)
                raise KeyError("inner")
        except KeyError:
            pass
        assert ids(store.list_all()) == [a.id]
        with store.transaction():
            store.save(c)
    assert ids(store.list_all()) == [a.id, c.id]
    if isinstance(store, SQLiteStore):
        expected = state_of(store, [[1, 0]])
        store.close()
        assert_same_state(expected, state_of(make_store(), [[1, 0]]))


def test_outer_failure_rolls_back_committed_inner(store: Store) -> None:
    a = mem("a", [1, 0])
    store.save(a)
    before = state_of(store)
    with pytest.raises(RuntimeError), store.transaction():
        with store.transaction():
            store.save(mem("b", [0, 1]))
        raise RuntimeError
    assert_same_state(before, state_of(store))


# --------------------------------------------------------------------- SQLite


# --------------------------------------------------------------- state stores


def test_in_memory_store_context_manager() -> None:
    with InMemoryStore() as store, InMemoryAffectiveStateStore() as states:
        store.save(mem("a"))
        states.save({"x": 1})
        assert len(store) == 1 and states.load_snapshot() == {"x": 1}
