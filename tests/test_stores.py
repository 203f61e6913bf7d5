"""Memory stores and affective-state stores (SPEC 2, 5, 8, 9)."""

from __future__ import annotations

import json
import math
import sqlite3
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from emotional_memory.affect import AffectiveMomentum, CoreAffect
from emotional_memory.interfaces import AffectiveStateStore, MemoryStore, store_transaction
from emotional_memory.models import Memory, make_emotional_tag
from emotional_memory.mood import MoodField
from emotional_memory.state import AffectiveState
from emotional_memory.state_stores import InMemoryAffectiveStateStore, SQLiteAffectiveStateStore
from emotional_memory.stores import InMemoryStore, SQLiteStore
from emotional_memory.stores._shared.records import F_CONSOLIDATION, TAG_F

Store = InMemoryStore | SQLiteStore
T0 = datetime(2024, 5, 1, 12, 0, tzinfo=UTC)


# ---------------------------------------------------------------------- helpers


def mem(
    content: str,
    embedding: Sequence[float] | None = None,
    *,
    valence: float = 0.0,
    metadata: dict[str, Any] | None = None,
) -> Memory:
    """A memory with a simple tag."""
    tag = make_emotional_tag(
        CoreAffect(valence=valence, arousal=0.5),
        AffectiveMomentum.zero(),
        MoodField.neutral(),
        0.5,
    )
    emb = None if embedding is None else [float(x) for x in embedding]
    return Memory.create(content, tag, embedding=emb, metadata=metadata)


def reference_search(memories: list[Memory], query: Sequence[float], top_k: int) -> list[str]:
    """SPEC 5 search written naively, one memory at a time."""
    if top_k <= 0:
        return []
    embedded = [m for m in memories if m.embedding]
    q = np.asarray(query, dtype=np.float64)
    q_norm = float(np.linalg.norm(q))
    if q_norm == 0.0:
        return [m.id for m in embedded[:top_k]]
    scored = []
    for position, m in enumerate(embedded):
        v = np.asarray(m.embedding, dtype=np.float64)
        v_norm = float(np.linalg.norm(v))
        with np.errstate(invalid="ignore", divide="ignore"):
            sim = float(np.dot(v, q) / (v_norm * q_norm)) if v_norm > 0 else 0.0
        if math.isnan(sim):
            sim = 0.0
        scored.append((-sim, position, m.id))
    scored.sort()
    return [mid for _, _, mid in scored[:top_k]]


def ids(memories: list[Memory]) -> list[str]:
    return [m.id for m in memories]


def state_of(store: Store, queries: Sequence[Sequence[float]] = ()) -> dict[str, Any]:
    """Everything observable about a store, for exact before/after comparisons."""
    mids, matrix, has = store.embedding_matrix()
    return {
        "memories": [m.model_dump() for m in store.list_all()],
        "ids": mids,
        "matrix": matrix.copy(),
        "has": has.copy(),
        "dim": store.dim,
        "len": len(store),
        "search": [ids(store.search_by_embedding(q, 3)) for q in queries],
    }


def assert_same_state(a: dict[str, Any], b: dict[str, Any]) -> None:
    assert a.keys() == b.keys()
    for key in a:
        if isinstance(a[key], np.ndarray):
            np.testing.assert_array_equal(a[key], b[key])
            assert a[key].shape == b[key].shape
        else:
            assert a[key] == b[key], key


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


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "memories.db"


# ------------------------------------------------------------------- CRUD basics


def test_protocols(store: Store) -> None:
    assert isinstance(store, MemoryStore)
    assert isinstance(InMemoryAffectiveStateStore(), AffectiveStateStore)


def test_save_get_len_contains(store: Store) -> None:
    a, b = mem("a", [1, 0]), mem("b")
    assert len(store) == 0 and store.get(a.id) is None
    store.save(a)
    store.save(b)
    assert len(store) == 2 and store.count() == 2
    assert a.id in store and b.id in store and "nope" not in store
    got = store.get(a.id)
    assert got is not None and got.content == "a" and got.embedding == [1.0, 0.0]
    assert store.get(b.id) == b


def test_save_rejects_non_memory(store: Store) -> None:
    with pytest.raises(TypeError, match="Memory"):
        store.save({"id": "x"})  # type: ignore[arg-type]


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


def test_update(store: Store) -> None:
    a = mem("a", [1, 2, 3])
    store.save(a)
    store.update(a.model_copy(update={"content": "a2"}))
    got = store.get(a.id)
    assert got is not None and got.content == "a2"
    assert len(store) == 1


def test_update_missing_raises_keyerror(store: Store) -> None:
    store.save(mem("a"))
    before = state_of(store)
    with pytest.raises(KeyError):
        store.update(mem("missing", [1, 2]))
    assert_same_state(before, state_of(store))


def test_delete(store: Store) -> None:
    a, b = mem("a", [1, 0]), mem("b", [0, 1])
    store.save(a)
    store.save(b)
    assert store.delete(a.id) is True
    assert store.delete(a.id) is False
    assert store.delete("never") is False
    assert ids(store.list_all()) == [b.id]
    assert len(store) == 1 and a.id not in store
    assert ids(store.search_by_embedding([1, 0], 5)) == [b.id]


def test_metadata_round_trip(store: Store) -> None:
    a = mem("a", metadata={"source": "chat", "n": 3, "nested": {"x": [1, 2]}})
    store.save(a)
    got = store.get(a.id)
    assert got is not None and got.metadata == {"source": "chat", "n": 3, "nested": {"x": [1, 2]}}


# ----------------------------------------------------------- search (SPEC 5)


def test_search_skips_unembedded(store: Store) -> None:
    a, b, c = mem("a"), mem("b", [1, 0]), mem("c", [])
    for m in (a, b, c):
        store.save(m)
    assert ids(store.search_by_embedding([1, 0], 10)) == [b.id]
    assert ids(store.search_by_embedding([0, 0], 10)) == [b.id]


def test_search_empty_store(store: Store) -> None:
    assert store.search_by_embedding([1, 2], 3) == []
    store.save(mem("plain"))
    assert store.search_by_embedding([1, 2], 3) == []


def test_search_top_k_non_positive(store: Store) -> None:
    store.save(mem("a", [1, 0]))
    assert store.search_by_embedding([1, 0], 0) == []
    assert store.search_by_embedding([1, 0], -3) == []


def test_search_zero_norm_query_returns_first_embedded(store: Store) -> None:
    ms = [mem("x"), mem("a", [0, 1]), mem("y"), mem("b", [1, 0]), mem("c", [-1, 0])]
    for m in ms:
        store.save(m)
    assert ids(store.search_by_embedding([0.0, 0.0], 2)) == [ms[1].id, ms[3].id]
    assert ids(store.search_by_embedding([0.0, 0.0], 10)) == [ms[1].id, ms[3].id, ms[4].id]


def test_search_orders_by_cosine(store: Store) -> None:
    far, near, mid = mem("far", [-1, 0]), mem("near", [2, 0.1]), mem("mid", [1, 1])
    for m in (far, near, mid):
        store.save(m)
    assert ids(store.search_by_embedding([1, 0], 3)) == [near.id, mid.id, far.id]
    assert ids(store.search_by_embedding([1, 0], 1)) == [near.id]


def test_search_nan_and_zero_rows_count_as_zero(store: Store) -> None:
    neg = mem("neg", [-1, 0])
    nan_row = mem("nan", [float("nan"), 1.0])
    pos = mem("pos", [1, 0])
    zero_row = mem("zero", [0, 0])
    for m in (neg, nan_row, pos, zero_row):
        store.save(m)
    # pos (1) > nan (0) == zero (0), by insertion order > neg (-1)
    assert ids(store.search_by_embedding([1, 0], 4)) == [pos.id, nan_row.id, zero_row.id, neg.id]
    # a NaN query: every similarity is NaN -> 0, so insertion order
    assert ids(store.search_by_embedding([float("nan"), 0], 4)) == ids(
        [neg, nan_row, pos, zero_row]
    )


def test_search_ties_by_insertion_order(store: Store) -> None:
    ms = [mem(f"m{i}", [1.0, 2.0] if i % 2 == 0 else [2.0, 4.0]) for i in range(6)]
    for m in ms:
        store.save(m)
    assert ids(store.search_by_embedding([1, 2], 4)) == ids(ms[:4])
    # re-saving keeps the tie position
    store.save(ms[0].model_copy(update={"content": "again"}))
    assert ids(store.search_by_embedding([1, 2], 6)) == ids(ms)


def test_search_query_dimension_mismatch(store: Store) -> None:
    store.save(mem("a", [1, 0, 0]))
    with pytest.raises(ValueError, match="embedding"):
        store.search_by_embedding([1, 0], 3)


def test_search_ties_at_partition_cut_large_n(store: Store) -> None:
    """Large N takes the argpartition path; ties at the cut keep insertion order."""
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


def test_dimension_mismatch_leaves_store_unchanged(store: Store) -> None:
    a, b, c = mem("a", [1, 0, 0]), mem("b", [0, 1, 0]), mem("c")
    for m in (a, b, c):
        store.save(m)
    assert store.dim == 3
    before = state_of(store, [[1, 0, 0]])
    with pytest.raises(ValueError, match="embedding"):
        store.save(mem("bad", [1, 2]))
    with pytest.raises(ValueError, match="embedding"):
        store.save(a.model_copy(update={"embedding": [1.0, 2.0, 3.0, 4.0]}))
    with pytest.raises(ValueError, match="embedding"):
        store.update(c.model_copy(update={"embedding": [1.0]}))
    assert_same_state(before, state_of(store, [[1, 0, 0]]))


def test_dim_none_until_first_embedding_and_reset_when_none_left(store: Store) -> None:
    plain = mem("plain")
    store.save(plain)
    assert store.dim is None
    mids, matrix, has = store.embedding_matrix()
    assert mids == [plain.id] and matrix.shape == (1, 0) and has.tolist() == [False]
    a = mem("a", [1, 2, 3])
    store.save(a)
    assert store.dim == 3
    store.delete(a.id)
    assert store.dim is None
    b = mem("b", [1, 2, 3, 4, 5])
    store.save(b)
    assert store.dim == 5
    assert ids(store.search_by_embedding([1, 0, 0, 0, 0], 3)) == [b.id]


def test_empty_embedding_is_treated_as_missing(store: Store) -> None:
    a = mem("a", [])
    store.save(a)
    assert store.dim is None
    got = store.get(a.id)
    assert got is not None and got.embedding == []


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


def _populate(store: Store) -> list[Memory]:
    ms = [
        mem("a", [1, 0, 0, 0]),
        mem("b", [0, 1, 0, 0]),
        mem("c"),
        mem("d", [1, 1, 0, 0], metadata={"k": 1}),
        mem("e", [0, 0, 1, 0]),
        mem("f", [0.5, 0.5, 0.5, 0.5]),
    ]
    for m in ms:
        store.save(m)
    return ms


QUERIES = [[1, 0, 0, 0], [0, 1, 1, 0], [0, 0, 0, 0]]


def test_transaction_rollback_restores_everything(make_store: Callable[[], Store]) -> None:
    store = make_store()
    ms = _populate(store)
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
    ms = _populate(store)
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
    _populate(store)
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


def test_sqlite_pragmas_schema_and_blob_format(db: Path) -> None:
    with SQLiteStore(db) as store:
        a = mem("a", [0.5, 0.25, -3.0])  # float32 numbers: a 4-byte blob
        store.save(a)
        store.save(mem("b"))
        store.save(mem("c", [0.1, 0.2, 0.3]))  # not float32 numbers: an 8-byte blob
        assert store.schema_version == 3
    raw = sqlite3.connect(db)
    try:
        assert raw.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        rows = raw.execute(
            "SELECT seq, id, embedding, dim, tag, rec FROM em_memories ORDER BY seq"
        ).fetchall()
        assert rows[0][1] == a.id and rows[0][3] == 3
        assert np.frombuffer(rows[0][2], dtype="<f4").tolist() == [0.5, 0.25, -3.0]
        assert rows[1][2] is None and rows[1][3] is None
        assert rows[2][3] == 3
        assert np.frombuffer(rows[2][2], dtype="<f8").tolist() == [0.1, 0.2, 0.3]
        # a compact memory: the tag's numbers in the record, no JSON tag
        assert rows[0][4] == ""
        floats = np.frombuffer(rows[0][5][: 8 * (TAG_F + 1)], dtype="<f8")
        assert floats[F_CONSOLIDATION] == 0.5
        assert floats[TAG_F] == np.linalg.norm([0.5, 0.25, -3.0])  # the embedding norm
        version = raw.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()
        assert version == ("3",)
    finally:
        raw.close()


def test_sqlite_rejects_newer_schema(db: Path) -> None:
    SQLiteStore(db).close()
    raw = sqlite3.connect(db)
    with raw:
        raw.execute("UPDATE meta SET value = '99' WHERE key = 'schema_version'")
    raw.close()
    with pytest.raises(ValueError, match="schema version"):
        SQLiteStore(db)


def test_sqlite_embeddings_kept_exactly(db: Path) -> None:
    vec = [0.1, 1 / 3, 2.0**-30 + 1.0]
    a = mem("a", vec)
    with SQLiteStore(db) as store:
        store.save(a)
        got = store.get(a.id)
        assert got is not None
        assert got.embedding == vec  # float64 values that are not float32 numbers
        live = got
    with SQLiteStore(db) as reopened:
        assert reopened.get(a.id) == live


def test_sqlite_reopen_gives_identical_results(db: Path) -> None:
    rng = np.random.default_rng(3)
    queries = [rng.normal(size=6).tolist() for _ in range(4)] + [[0.0] * 6]
    store = SQLiteStore(db)
    ms = [
        mem(
            f"m{i}",
            None if i % 7 == 0 else rng.normal(size=6).tolist(),
            valence=float(rng.uniform(-1, 1)),
            metadata={"i": i},
        )
        for i in range(300)
    ]
    for m in ms:
        store.save(m)
    for m in ms[::5]:
        store.delete(m.id)
    store.save(ms[1].model_copy(update={"content": "re-saved"}))
    store.save(ms[0])  # deleted above: goes to the end

    def observe(s: SQLiteStore) -> dict[str, Any]:
        out = state_of(s, queries)
        out["wide"] = [ids(s.search_by_embedding(q, 100)) for q in queries]
        return out

    before = observe(store)
    before_memories = store.list_all()
    store.close()
    with SQLiteStore(db) as reopened:
        assert_same_state(before, observe(reopened))
        assert reopened.list_all() == before_memories
        assert reopened.list_all()[-1].id == ms[0].id


def test_sqlite_new_process_reads_same_data(db: Path) -> None:
    rng = np.random.default_rng(5)
    with SQLiteStore(db) as store:
        for i in range(40):
            store.save(mem(f"m{i}", rng.normal(size=5).tolist(), metadata={"i": i}))
        store.save(mem("plain"))
        query = rng.normal(size=5).tolist()
        expected = {
            "memories": [
                [m.id, m.content, m.embedding, m.metadata, m.tag.model_dump(mode="json")]
                for m in store.list_all()
            ],
            "search": ids(store.search_by_embedding(query, 10)),
        }
    script = (
        "import json, sys\n"
        "from emotional_memory.stores import SQLiteStore\n"
        "with SQLiteStore(sys.argv[1]) as s:\n"
        "    out = {'memories': [[m.id, m.content, m.embedding, m.metadata,\n"
        "                         m.tag.model_dump(mode='json')] for m in s.list_all()],\n"
        "           'search': [m.id for m in s.search_by_embedding(json.loads(sys.argv[2]), 10)]}\n"
        "print(json.dumps(out))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", script, str(db), json.dumps(query)],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    assert json.loads(result.stdout) == json.loads(json.dumps(expected))


def test_sqlite_sees_other_connection(db: Path) -> None:
    # Every operation picks up other connections' commits (no refresh() needed).
    with SQLiteStore(db) as first, SQLiteStore(db) as second:
        a = mem("a", [1, 0])
        first.save(a)
        assert a.id in second
        assert second.get(a.id) == first.get(a.id)
        second.refresh()
        assert second.get(a.id) == first.get(a.id)


def test_sqlite_metadata_must_be_json(db: Path) -> None:
    with SQLiteStore(db) as store:
        store.save(mem("ok"))
        before = state_of(store)
        with pytest.raises(TypeError, match="metadata"):
            store.save(mem("bad", metadata={"when": object()}))
        assert_same_state(before, state_of(store))


class _FailingConnection:
    """Wraps a connection and fails the first INSERT (a disk error stand-in)."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn

    @property
    def in_transaction(self) -> bool:
        return self.conn.in_transaction

    def execute(self, sql: str, *args: Any) -> sqlite3.Cursor:
        if sql.lstrip().startswith("INSERT INTO em_memories"):
            raise sqlite3.OperationalError("disk I/O error")
        return self.conn.execute(sql, *args)

    def close(self) -> None:
        self.conn.close()


def test_sqlite_failed_statement_leaves_cache_unchanged(db: Path) -> None:
    store = SQLiteStore(db)
    ms = _populate(store)
    before = state_of(store, QUERIES)
    store._conn = _FailingConnection(store._conn)  # type: ignore[arg-type, assignment]
    with pytest.raises(sqlite3.OperationalError):
        store.save(mem("new", [1, 1, 1, 1]))
    with pytest.raises(sqlite3.OperationalError):
        store.save(ms[0].model_copy(update={"content": "changed"}))
    with pytest.raises(sqlite3.OperationalError), store.transaction():
        store.delete(ms[1].id)
        store.save(mem("new", [1, 1, 1, 1]))
    assert_same_state(before, state_of(store, QUERIES))
    store.close()
    with SQLiteStore(db) as reopened:
        assert_same_state(before, state_of(reopened, QUERIES))


def test_sqlite_closed_store_raises(db: Path) -> None:
    store = SQLiteStore(db)
    a = mem("a")
    store.save(a)
    store.close()
    store.close()
    assert store.closed
    with pytest.raises(ValueError, match="closed"):
        store.get(a.id)
    with pytest.raises(ValueError, match="closed"):
        store.save(mem("b"))


def test_sqlite_threads(db: Path) -> None:
    store = SQLiteStore(db)
    errors: list[BaseException] = []

    def worker(t: int) -> None:
        try:
            for i in range(40):
                store.save(mem(f"{t}-{i}", [float(t), float(i) + 1.0]))
                store.search_by_embedding([1.0, 0.0], 3)
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(t,)) for t in range(6)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert not errors
    assert len(store) == 240
    store.close()
    with SQLiteStore(db) as reopened:
        assert len(reopened) == 240


# --------------------------------------------------------------- state stores


def _state() -> AffectiveState:
    state = AffectiveState.initial(now=T0)
    state = state.update(CoreAffect(valence=0.3, arousal=0.6), now=T0 + timedelta(seconds=10))
    state = state.update(CoreAffect(valence=-0.2, arousal=0.8), now=T0 + timedelta(seconds=25))
    return state.update(
        CoreAffect(valence=0.5, arousal=0.4, dominance=0.7), now=T0 + timedelta(seconds=31)
    )


@pytest.fixture(params=["memory", "sqlite"])
def state_store(
    request: pytest.FixtureRequest, tmp_path: Path
) -> Iterator[InMemoryAffectiveStateStore | SQLiteAffectiveStateStore]:
    s: InMemoryAffectiveStateStore | SQLiteAffectiveStateStore = (
        InMemoryAffectiveStateStore()
        if request.param == "memory"
        else SQLiteAffectiveStateStore(tmp_path / "state.db")
    )
    yield s
    s.close()


def test_state_store_round_trip(
    state_store: InMemoryAffectiveStateStore | SQLiteAffectiveStateStore,
) -> None:
    assert isinstance(state_store, AffectiveStateStore)
    assert state_store.load() is None
    state = _state()
    snap = state.snapshot()
    state_store.save(snap)
    loaded = state_store.load_snapshot()
    assert loaded == snap
    # SPEC 11: load() is the original's protocol, an AffectiveState (history included)
    as_state = state_store.load()
    assert isinstance(as_state, AffectiveState)
    assert as_state.snapshot() == snap
    state_store.save(state)  # save(AffectiveState) stores its snapshot
    assert state_store.load_snapshot() == snap
    restored = AffectiveState.restore(loaded)
    assert restored.momentum == state.momentum and restored.mood == state.mood
    nxt = CoreAffect(valence=0.1, arousal=0.2)
    t = T0 + timedelta(seconds=40)
    assert restored.update(nxt, now=t).snapshot() == state.update(nxt, now=t).snapshot()
    state_store.clear()
    assert state_store.load_snapshot() is None
    state_store.clear()


def test_state_store_isolated_from_mutation(
    state_store: InMemoryAffectiveStateStore | SQLiteAffectiveStateStore,
) -> None:
    snap = _state().snapshot()
    state_store.save(snap)
    expected = json.loads(json.dumps(snap))
    snap["core_affect"]["valence"] = -1.0
    loaded = state_store.load_snapshot()
    assert loaded == expected
    assert loaded is not None
    loaded["mood"]["valence"] = 99
    assert state_store.load_snapshot() == expected


def test_state_store_replaces_and_rejects_bad_input(
    state_store: InMemoryAffectiveStateStore | SQLiteAffectiveStateStore,
) -> None:
    state_store.save({"a": 1})
    state_store.save({"b": 2})
    assert state_store.load_snapshot() == {"b": 2}
    with pytest.raises(TypeError, match="snapshot"):
        state_store.save([1, 2])  # type: ignore[arg-type]
    assert state_store.load_snapshot() == {"b": 2}


def test_sqlite_state_store_rejects_non_json(tmp_path: Path) -> None:
    with SQLiteAffectiveStateStore(tmp_path / "s.db") as s:
        s.save({"ok": True})
        with pytest.raises(TypeError, match="snapshot"):
            s.save({"x": object()})
        with pytest.raises(ValueError, match="snapshot"):
            s.save({"x": float("nan")})
        assert s.load_snapshot() == {"ok": True}


def test_sqlite_state_persists_across_reopen_and_keys(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    snap = _state().snapshot()
    with SQLiteAffectiveStateStore(path) as s, SQLiteAffectiveStateStore(path, key="b") as other:
        s.save(snap)
        other.save({"other": 1})
        stamp = s.updated_at()
        assert stamp is not None and stamp.tzinfo is not None
    with SQLiteAffectiveStateStore(path) as s:
        loaded = s.load_snapshot()
        assert loaded == snap
        assert AffectiveState.restore(loaded).momentum == _state().momentum
    with SQLiteAffectiveStateStore(path, key="b") as other:
        assert other.load_snapshot() == {"other": 1}
    with pytest.raises(ValueError, match="key"):
        SQLiteAffectiveStateStore(path, key="")


def test_state_and_memories_share_one_file(db: Path) -> None:
    snap = _state().snapshot()
    store = SQLiteStore(db)
    states = SQLiteAffectiveStateStore(db)
    a = mem("a", [1, 0])
    store.save(a)
    states.save(snap)
    store.save(mem("b", [0, 1]))
    states.save({**snap, "extra": 1})
    store.close()
    states.close()
    with SQLiteStore(db) as store2, SQLiteAffectiveStateStore(db) as states2:
        assert len(store2) == 2 and store2.list_all()[0].id == a.id
        assert states2.load_snapshot() == {**snap, "extra": 1}


def test_state_store_from_store_joins_transactions(db: Path) -> None:
    store = SQLiteStore(db)
    states = SQLiteAffectiveStateStore.from_store(store)
    states.save({"v": 0})
    with pytest.raises(RuntimeError), store.transaction():
        store.save(mem("a", [1, 0]))
        states.save({"v": 1})
        raise RuntimeError
    assert len(store) == 0 and states.load_snapshot() == {"v": 0}
    with store.transaction():
        store.save(mem("a", [1, 0]))
        states.save({"v": 2})
    states.close()  # leaves the store open
    assert len(store) == 1
    store.close()
    with SQLiteStore(db) as s2, SQLiteAffectiveStateStore(db) as st2:
        assert len(s2) == 1 and st2.load_snapshot() == {"v": 2}


def test_in_memory_store_context_manager() -> None:
    with InMemoryStore() as store, InMemoryAffectiveStateStore() as states:
        store.save(mem("a"))
        states.save({"x": 1})
        assert len(store) == 1 and states.load_snapshot() == {"x": 1}
