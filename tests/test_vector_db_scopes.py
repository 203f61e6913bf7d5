"""Scopes, ``where`` filters and expiry in QdrantStore (embedded local mode) and
ChromaStore (HttpClient against a real local ``chroma run`` server), with
InMemoryStore as the oracle (issue 23):

* the separate-engine contract over random interleavings in sibling scopes;
* the filter contract (``retrieve(where=F)`` as the float64 in-memory engine holding
  only the matching memories; ``list_all(where=F)`` as a plain-Python evaluation);
* that the confinement happens in the database's filter: a view never lists the whole
  store, every scan / count / nearest query carries a filter, and an exact filter's
  database answer is the answer (``list_all`` does not re-check it);
* filters the databases cannot express (string ranges, huge numbers) still answer
  exactly; records written before the filter fields load as root, unexpired.
"""

from __future__ import annotations

import uuid
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tests.test_scopes import (
    SCOPES,
    T0,
    WORDS,
    Clock,
    _explained,
    _fill,
    _oracle_matches,
    _tags,
    _text,
    operation,
    where_dicts,
)
from tests.test_vector_db_stores import chroma_server  # noqa: F401  (the fixture)

from emotional_memory import CoreAffect, EmotionalMemory, InMemoryStore
from emotional_memory.embedders import HashingEmbedder
from emotional_memory.models import Memory
from emotional_memory.stores.selection import Now, Selection
from emotional_memory.stores.vectordb.filter import translate

KINDS = ["qdrant", "chroma-http"]


@pytest.fixture(params=KINDS)
def kind(request: pytest.FixtureRequest) -> str:
    if request.param == "qdrant":
        pytest.importorskip("qdrant_client", reason="the qdrant extra is not installed")
    else:
        pytest.importorskip("chromadb", reason="the chroma extra is not installed")
        request.getfixturevalue("chroma_server")
    return str(request.param)


def _new_store(kind: str, request: pytest.FixtureRequest) -> Any:
    """A fresh, empty store of ``kind`` (a new collection on the Chroma server)."""
    if kind == "qdrant":
        from emotional_memory.stores.qdrant import QdrantStore

        return QdrantStore()
    from emotional_memory.stores.chroma import ChromaStore

    port = request.getfixturevalue("chroma_server")
    return ChromaStore(host="127.0.0.1", port=port, collection_name="s" + uuid.uuid4().hex)


def _oracle_store() -> InMemoryStore:
    return InMemoryStore(embedding_dtype="float64")  # these stores keep float64 embeddings


class Spy:
    """Records what a store asks its database, and refuses whole-store listings."""

    def __init__(self, store: Any, monkeypatch: pytest.MonkeyPatch) -> None:
        self.filters: list[Any] = []
        self.calls: list[str] = []
        self.armed = False
        for name in ("_scan", "_count", "_nearest"):
            original = getattr(store, name)

            def wrapper(*args: Any, _original: Any = original, _name: str = name,
                        **kwargs: Any) -> Any:
                if self.armed:
                    self.calls.append(_name)
                    self.filters.append(kwargs.get("flt", args[-1] if len(args) > 1 else None))
                return _original(*args, **kwargs)

            monkeypatch.setattr(store, name, wrapper)

        def no_listing() -> list[Memory]:
            if self.armed:
                raise AssertionError("a view listed the whole store")
            return type(store).list_all(store)

        monkeypatch.setattr(store, "list_all", no_listing)


# ----------------------------------------------------------- separate engines


@settings(max_examples=6, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=st.lists(operation, min_size=4, max_size=16))
def test_a_view_answers_as_a_separate_in_memory_engine(
    kind: str, ops: list[tuple[Any, ...]], request: pytest.FixtureRequest,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    clock = Clock()
    embedder = HashingEmbedder(dim=32)
    store = _new_store(kind, request)
    spy = Spy(store, monkeypatch)
    shared = EmotionalMemory(store, embedder, clock=clock)
    views = [shared.scoped(s) for s in SCOPES]
    alone = [EmotionalMemory(_oracle_store(), embedder, clock=clock) for _ in SCOPES]
    made: list[list[tuple[str, str]]] = [[] for _ in SCOPES]
    try:
        for step, op in enumerate(ops):
            clock.now = T0 + timedelta(minutes=7 * step)
            what, s = op[0], op[1]
            view, oracle = views[s], alone[s]
            spy.armed = True  # a delete finds the links to drop in the filter too
            if what == "encode":
                text = _text(op[2], step)
                affect = CoreAffect(valence=op[3], arousal=op[4])
                a = view.encode(text, metadata={"step": step}, affect=affect)
                b = oracle.encode(text, metadata={"step": step}, affect=affect)
                made[s].append((a.id, b.id))
            elif what == "retrieve":
                query = " ".join(WORDS[w] for w in op[2])
                assert _explained(view.retrieve_with_explanations(query, op[3])) == \
                    _explained(oracle.retrieve_with_explanations(query, op[3]))
            elif what == "delete":
                if made[s]:
                    a_id, b_id = made[s].pop(op[2] % len(made[s]))
                    assert view.delete(a_id) is oracle.delete(b_id) is True
            else:
                affect = CoreAffect(valence=op[2], arousal=op[3])
                assert view.set_affect(affect).snapshot() == oracle.set_affect(affect).snapshot()
        spy.armed = True
        for s, (view, oracle) in enumerate(zip(views, alone, strict=True)):
            assert _tags(view.list_all()) == _tags(oracle.list_all())
            assert len(view) == len(oracle) == len(made[s])
        assert spy.filters and all(f is not None for f in spy.filters)
        spy.armed = False
        assert len(shared) == sum(len(m) for m in made)
    finally:
        store.close()


# ----------------------------------------------------------- where filters

more_leaves = st.one_of(
    where_dicts,
    # not expressible in the databases: answered from a narrowed superset
    st.builds(lambda v: {"topic": {"$gt": v}}, st.sampled_from(["home", "t", "a"])),
    st.builds(lambda v: {"tags.priority": {"$lt": v}}, st.just(2**60)),
    # nulls, booleans, mixed $in, $exists on leaves
    st.builds(lambda v: {"tags.priority": v}, st.sampled_from([None, 1, 1.0, True])),
    st.builds(lambda vs: {"topic": {"$in": vs}},
              st.lists(st.sampled_from(["work", 1, None, True]), min_size=1, max_size=3)),
    st.builds(lambda b: {"tags.priority": {"$exists": b}}, st.booleans()),
)


@settings(max_examples=10, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(where=more_leaves, words=st.lists(st.sampled_from(WORDS), min_size=1, max_size=3),
       top_k=st.integers(1, 5))
def test_retrieve_where_answers_as_the_in_memory_engine_without_the_others(
    kind: str, where: dict[str, Any], words: list[str], top_k: int,
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch,
) -> None:
    clock = Clock()
    embedder = HashingEmbedder(dim=32)
    store = _new_store(kind, request)
    spy = Spy(store, monkeypatch)
    filtered = EmotionalMemory(store, embedder, clock=clock)
    pruned = EmotionalMemory(_oracle_store(), embedder, clock=clock)
    try:
        for engine in (filtered, pruned):
            _fill(engine, clock, n=15)
        matching = [m for m in pruned.list_all() if _oracle_matches(m, where)]
        spy.armed = True
        assert [m.content for m in filtered.list_all(where=where)] == [
            m.content for m in matching
        ]
        keep = {m.id for m in matching}
        for m in pruned.list_all():
            if m.id not in keep:
                pruned.delete(m.id)
        clock.now = T0 + timedelta(hours=9)
        query = " ".join(words)
        got = filtered.retrieve_with_explanations(query, top_k, where=where)
        assert all(f is not None for f in spy.filters)
        spy.armed = False
        assert _explained(got) == _explained(pruned.retrieve_with_explanations(query, top_k))
        changed = [m.content for m in filtered.list_all() if m.tag.retrieval_count]
        assert changed == [m.content for m in pruned.list_all() if m.tag.retrieval_count]
    finally:
        store.close()


@settings(max_examples=15, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(where=where_dicts)
def test_an_exact_translation_is_the_databases_own_answer(
    kind: str, where: dict[str, Any], request: pytest.FixtureRequest
) -> None:
    """The rendered filter alone, asked of the database, selects exactly the
    memories the dialect selects (no re-check in Python behind it)."""
    from emotional_memory.filters import parse_where

    clock = Clock()
    store = _new_store(kind, request)
    engine = EmotionalMemory(store, HashingEmbedder(dim=16), clock=clock)
    try:
        _fill(engine, clock, n=12)
        selection = Selection((), parse_where(where), Now(T0 + timedelta(days=1)))
        cond, exact = translate(selection)
        assert exact
        flt = store._render(cond)
        records = store._scan(True, flt=flt) + store._scan(False, flt=flt)
        got = sorted(r.id for r in records)
        want = sorted(m.id for m in engine.list_all() if _oracle_matches(m, where))
        assert got == want
        assert store._count(True, flt) + store._count(False, flt) == len(want)
    finally:
        store.close()


def test_semantics_of_missing_fields_null_kinds_and_huge_numbers(
    kind: str, request: pytest.FixtureRequest
) -> None:
    store = _new_store(kind, request)
    engine = EmotionalMemory(store, HashingEmbedder(dim=16), clock=Clock())
    oracle = EmotionalMemory(_oracle_store(), HashingEmbedder(dim=16), clock=Clock())
    metas: list[dict[str, Any]] = [
        {"n": 1, "s": "x", "b": True, "z": None, "d": {"k": "v"}},
        {"n": 2.5, "s": "y", "l": ["x", 1], "big": 2**60 + 1},
        {"n": 1e308, "s": "", "dotted.key": 1, "b": False},
        {},
    ]
    try:
        for i, meta in enumerate(metas):
            for e in (engine, oracle):
                e.encode(f"memory {i}", metadata=meta)
        queries: list[dict[str, Any]] = [
            {"n": 1.0}, {"b": 1}, {"n": {"$gt": "0"}}, {"n": {"$ne": 1}},
            {"n": {"$nin": [1, 2.5]}}, {"z": None}, {"z": {"$exists": True}},
            {"s": {"$gte": "x"}}, {"metadata.n": 2.5}, {"n": {"$gt": 1e300}},
            {"$or": [{"n": 1}, {"s": "y"}], "s": {"$ne": "x"}}, {"s": ""},
            {"d.k": "v"}, {"d": {"$exists": True}}, {"d": None}, {"l": "x"},
            {"l": {"$exists": True}}, {"big": {"$gt": 2**60}}, {"big": {"$gt": 10}},
            {"b": False}, {"b": {"$ne": True}}, {"emotion": None},
            {"emotion": {"$ne": "joy"}}, {"emotion": {"$exists": False}},
            {"valence": None}, {"valence": {"$ne": None}}, {"dotted.key": 1},
        ]
        for where in queries:
            assert [m.content for m in engine.list_all(where=where)] == [
                m.content for m in oracle.list_all(where=where)
            ], where
    finally:
        store.close()


# ----------------------------------------------------------- ids, expiry, legacy


def test_another_scopes_id_is_unknown_and_expiry_is_in_the_filter(
    kind: str, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = Clock()
    store = _new_store(kind, request)
    engine = EmotionalMemory(store, HashingEmbedder(dim=16), clock=clock)
    try:
        alice, bob = engine.scoped("alice"), engine.scoped("bob")
        secret = alice.encode("alice's secret")
        assert bob.get(secret.id) is None and bob.delete(secret.id) is False
        with pytest.raises(KeyError):
            bob.update_memory(secret.id, content="mine now")
        assert bob.list_all() == [] and len(bob) == 0 and bob.retrieve("secret") == []
        soon = T0 + timedelta(hours=1)
        brief = alice.encode("a storm on the harbour", expires_at=soon)
        kept = alice.scoped("s1").encode("a storm on the harbour at night")
        assert len(alice) == 3
        clock.now = soon
        spy = Spy(store, monkeypatch)
        spy.armed = True
        assert alice.get(brief.id) is None
        assert [m.id for m in alice.list_all()] == [secret.id, kept.id]
        assert brief.id not in [m.id for m in alice.retrieve("storm harbour", 5)]
        late = alice.encode("a storm on the harbour again")
        assert all(lk.target_id != brief.id for lk in late.tag.resonance_links)
        assert len(alice) == 3 and len(engine) == 3
        assert all(f is not None for f in spy.filters)
        spy.armed = False
        assert engine.prune(0.0) == 1 and len(store) == 3
        # the root may link across scopes; a view's delete drops those links
        root = engine.encode("a storm on the harbour, from the root")
        assert kept.id in {lk.target_id for lk in root.tag.resonance_links}
        assert store.linking_to([kept.id]) == [m.id for m in engine.list_all()
                                               if any(lk.target_id == kept.id
                                                      for lk in m.tag.resonance_links)]
        spy.armed = True
        assert alice.scoped("s1").delete(kept.id)
        spy.armed = False
        assert all(lk.target_id != kept.id for m in engine.list_all()
                   for lk in m.tag.resonance_links)
        assert spy.filters and all(f is not None for f in spy.filters)
    finally:
        store.close()


def test_records_without_filter_fields_load_as_root_and_unexpired(tmp_path: Path) -> None:
    """A Qdrant collection in the original library's layout (payload ``id`` and
    ``data`` only) is given its filter fields on open: scoped views see none of it,
    ``where`` filters on its metadata work, nothing is expired."""
    pytest.importorskip("qdrant_client", reason="the qdrant extra is not installed")
    from qdrant_client import QdrantClient, models

    from emotional_memory.stores.qdrant import QdrantStore

    path = tmp_path / "old"
    client = QdrantClient(path=str(path))
    client.create_collection(
        "emotional_memory",
        vectors_config=models.VectorParams(size=16, distance=models.Distance.COSINE),
    )
    oracle = EmotionalMemory(_oracle_store(), HashingEmbedder(dim=16), clock=Clock())
    olds = [oracle.encode(f"old rain {i}", metadata={"i": i}) for i in range(4)]
    client.upsert(
        "emotional_memory",
        points=[models.PointStruct(id=str(uuid.uuid5(uuid.NAMESPACE_OID, m.id)),
                                   vector=m.embedding,
                                   payload={"id": m.id, "data": m.model_dump_json()})
                for m in olds],
    )
    client.close()
    store = QdrantStore(path=str(path))
    engine = EmotionalMemory(store, HashingEmbedder(dim=16), clock=Clock())
    try:
        assert [m.scope for m in engine.list_all()] == [()] * 4
        assert engine.scoped("alice").list_all() == [] and len(engine.scoped("x")) == 0
        # the original's layout has no insertion sequence: its records come in the
        # database's order, so compare the sets
        assert sorted(m.id for m in engine.list_all(where={"i": {"$gte": 2}})) == sorted(
            m.id for m in olds[2:]
        )
        assert [m.id for m in engine.retrieve("old rain", 4)] == [
            m.id for m in oracle.retrieve("old rain", 4)
        ]
    finally:
        store.close()


def test_chroma_records_without_filter_fields_load_as_root_and_unexpired(
    tmp_path: Path,
) -> None:
    """The same for a Chroma collection in the original layout (metadata ``id`` only):
    Chroma's update merges the filter fields into its metadata."""
    pytest.importorskip("chromadb", reason="the chroma extra is not installed")
    import chromadb

    from emotional_memory.stores.chroma import ChromaStore

    path = tmp_path / "old-chroma"
    collection = chromadb.PersistentClient(path=str(path)).create_collection(
        "emotional_memory", metadata={"hnsw:space": "cosine"}
    )
    oracle = EmotionalMemory(_oracle_store(), HashingEmbedder(dim=16), clock=Clock())
    olds = [oracle.encode(f"old rain {i}", metadata={"i": i}) for i in range(4)]
    collection.upsert(
        ids=[m.id for m in olds],
        embeddings=[m.embedding for m in olds],  # type: ignore[misc]
        documents=[m.model_dump_json() for m in olds],
        metadatas=[{"id": m.id} for m in olds],
    )
    store = ChromaStore(path=path)
    engine = EmotionalMemory(store, HashingEmbedder(dim=16), clock=Clock())
    try:
        assert [m.scope for m in engine.list_all()] == [()] * 4
        assert engine.scoped("alice").list_all() == [] and len(engine.scoped("x")) == 0
        # the original's layout has no insertion sequence: its records come in the
        # database's order, so compare the sets
        assert sorted(m.id for m in engine.list_all(where={"i": {"$gte": 2}})) == sorted(
            m.id for m in olds[2:]
        )
        assert [m.id for m in engine.retrieve("old rain", 4)] == [
            m.id for m in oracle.retrieve("old rain", 4)
        ]
    finally:
        store.close()


@pytest.mark.parametrize("small", [0, 256])
def test_selected_search_equals_in_memory_native_selection(
    kind: str, small: int, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Store level: ``selected(selection).search_by_embedding`` / ``list_all`` /
    ``len`` equal ``InMemoryStore``'s native selection, through the database's
    filtered nearest-neighbour query (``small=0``) and through the exact ranking of a
    small selection (the default)."""
    import math

    import numpy as np
    from tests.test_vector_db_stores import mem

    from emotional_memory.filters import parse_where
    from emotional_memory.stores.vectordb import base as _vector_db

    monkeypatch.setattr(_vector_db, "_SMALL_SELECTION", small)
    rng = np.random.default_rng(3)
    store = _new_store(kind, request)
    oracle = _oracle_store()
    try:
        for i in range(70):
            embedding = rng.normal(size=8).round(3).tolist()
            if i == 20:
                embedding = [0.0] * 8
            if i == 21:
                embedding = [math.nan] + [1.0] * 7
            m = mem(i, None if i == 22 else embedding)
            m = m.model_copy(update={
                "scope": (SCOPES[i % 3],) if i % 5 else (SCOPES[i % 3], "s1"),
                "metadata": {"i": i, "odd": bool(i % 2)},
                "expires_at": T0 + timedelta(minutes=30) if i % 7 == 0 else None,
            })
            store.save(m)
            oracle.save(m)
        spy = Spy(store, monkeypatch)
        cases = [((), None), (("alice",), None), (("bob",), {"odd": True}),
                 (("carol", "s1"), None), (("alice",), {"i": {"$gte": 30}}),
                 ((), {"$or": [{"i": {"$lt": 5}}, {"odd": False}]})]
        for scope, where in cases:
            spy.armed = bool(scope or where)  # the root searches the whole store
            for minutes in (0, 45):  # before and after some expire
                selection = Selection(scope, parse_where(where),
                                      Now(T0 + timedelta(minutes=minutes)))
                got, want = store.selected(selection), oracle.selected(selection)
                assert [m.id for m in got.list_all()] == [m.id for m in want.list_all()]
                assert len(got) == len(want)
                for _ in range(3):
                    query = rng.normal(size=8).tolist()
                    for k in (1, 4, 25):
                        assert [m.id for m in got.search_by_embedding(query, k)] == [
                            m.id for m in want.search_by_embedding(query, k)
                        ], (scope, where, minutes, k)
        assert spy.filters and all(f is not None for f in spy.filters)
        # the database's filtered nearest-neighbour query answered (or, for small
        # selections by default, one filtered scan ranked exactly)
        assert ("_nearest" in spy.calls) is (small == 0)
        # the database's filtered nearest-neighbour query answered (or, for small
        # selections by default, one filtered scan ranked exactly)
        assert ("_nearest" in spy.calls) is (small == 0)
    finally:
        store.close()
