"""Scopes, ``where`` filters and expiry in QdrantStore and ChromaStore: what only a
vector database does. What every backend answers (views as separate engines, filters,
expiry, selections) is the contract suite's (``tests/stores/contract/``); here:

* the confinement happens in the database's filter: a view never lists the whole
  store, and every scan / count / nearest query it makes carries a filter;
* an exact filter's database answer is the answer (nothing re-checked in Python);
* a selection's search through the database's filtered nearest-neighbour query, and
  through one filtered scan ranked exactly (small selections), equals the in-memory
  store's;
* records written in the original library's layout (no filter fields) load as root,
  unexpired.
"""

from __future__ import annotations

import uuid
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from emotional_memory import EmotionalMemory
from emotional_memory.embedders import HashingEmbedder
from emotional_memory.filters import parse_where
from emotional_memory.models import Memory
from emotional_memory.stores.base import Now, Selection
from emotional_memory.stores.vectordb.filter import translate
from support.backends import Backend, oracle_store
from support.scopes import (
    SCOPES,
    T0,
    Clock,
    explained,
    fill_bank,
    operation,
    run_scoped_operations,
    tags,
)
from support.selections import CASES, check_selections, fill_selection_bank
from support.where_oracle import oracle_matches, where_dicts


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


@settings(max_examples=4, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(ops=st.lists(operation, min_size=4, max_size=14))
def test_views_ask_the_database_with_a_filter_and_never_list_the_store(
    backend: Backend, ops: list[tuple[Any, ...]], monkeypatch: pytest.MonkeyPatch,
) -> None:
    clock = Clock()
    embedder = HashingEmbedder(dim=32)
    store = backend.new()
    spy = Spy(store, monkeypatch)
    shared = EmotionalMemory(store, embedder, clock=clock)
    views = [shared.scoped(s) for s in SCOPES]
    alone = [EmotionalMemory(oracle_store(), embedder, clock=clock) for _ in SCOPES]
    spy.armed = True  # a delete finds the links to drop in the filter too
    made = run_scoped_operations(views, alone, clock, ops)
    for view, oracle in zip(views, alone, strict=True):
        assert tags(view.list_all()) == tags(oracle.list_all())
    spy.armed = False
    assert spy.filters and all(f is not None for f in spy.filters)
    assert len(shared) == sum(len(m) for m in made)


WHERES: list[dict[str, Any]] = [
    {"topic": "work"}, {"tags.priority": {"$gte": 2}}, {"arousal": {"$lt": 0.5}},
    {"topic": {"$gt": "home"}},  # no database expresses it: a narrowed superset
    {"$or": [{"topic": "home"}, {"tags": {"$exists": False}}]},
]


def test_filters_are_asked_of_the_database(
    backend: Backend, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = Clock()
    store = backend.new()
    filtered = EmotionalMemory(store, HashingEmbedder(dim=32), clock=clock)
    fill_bank(filtered, clock, n=12)
    oracle = EmotionalMemory(oracle_store(), HashingEmbedder(dim=32), clock=clock)
    fill_bank(oracle, clock, n=12)
    spy = Spy(store, monkeypatch)
    for where in WHERES:
        # a where no database expresses reads the whole superset: with no expiring
        # memory, nothing at all confines it (no filter)
        spy.armed = where != {"topic": {"$gt": "home"}}
        got = [m.content for m in filtered.list_all(where=where)]
        found = filtered.retrieve_with_explanations("rain storm", 3, where=where)
        spy.armed = False
        assert got == [m.content for m in oracle.list_all(where=where)], where
        assert explained(found) == explained(
            oracle.retrieve_with_explanations("rain storm", 3, where=where)), where
    assert spy.filters and all(f is not None for f in spy.filters)


def test_an_exact_translation_is_the_databases_own_answer(backend: Backend) -> None:
    """The rendered filter alone, asked of the database, selects exactly the
    memories the dialect selects (no re-check in Python behind it)."""
    clock = Clock()
    store = backend.new()
    engine = EmotionalMemory(store, HashingEmbedder(dim=16), clock=clock)
    fill_bank(engine, clock, n=12)
    memories = engine.list_all()

    @settings(max_examples=15, deadline=None)
    @given(where=where_dicts)
    def check(where: dict[str, Any]) -> None:  # one bank, read only: filled once
        selection = Selection((), parse_where(where), Now(T0 + timedelta(days=1)))
        cond, exact = translate(selection)
        assert exact
        flt = store._render(cond)
        records = store._scan(True, flt=flt) + store._scan(False, flt=flt)
        want = sorted(m.id for m in memories if oracle_matches(m, where))
        assert sorted(r.id for r in records) == want
        assert store._count(True, flt) + store._count(False, flt) == len(want)

    check()


def test_expiry_and_a_views_deletes_are_in_the_filter(
    backend: Backend, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = Clock()
    store = backend.new()
    engine = EmotionalMemory(store, HashingEmbedder(dim=16), clock=clock)
    alice = engine.scoped("alice")
    secret = alice.encode("alice's secret")
    soon = T0 + timedelta(hours=1)
    brief = alice.encode("a storm on the harbour", expires_at=soon)
    kept = alice.scoped("s1").encode("a storm on the harbour at night")
    clock.now = soon
    spy = Spy(store, monkeypatch)
    spy.armed = True
    assert alice.get(brief.id) is None
    assert [m.id for m in alice.list_all()] == [secret.id, kept.id]
    assert brief.id not in [m.id for m in alice.retrieve("storm harbour", 5)]
    alice.encode("a storm on the harbour again")
    assert len(alice) == 3
    spy.armed = False
    # the root may link across scopes; a view's delete drops those links
    root = engine.encode("a storm on the harbour, from the root")
    assert kept.id in {lk.target_id for lk in root.tag.resonance_links}
    spy.armed = True
    assert alice.scoped("s1").delete(kept.id)
    spy.armed = False
    assert all(lk.target_id != kept.id for m in engine.list_all()
               for lk in m.tag.resonance_links)
    assert spy.filters and all(f is not None for f in spy.filters)


@pytest.mark.parametrize("small", [0, 256])
def test_a_selections_search_through_the_database_equals_the_in_memory_one(
    backend: Backend, small: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Store level: ``selected(selection)`` lists, counts and searches as
    ``InMemoryStore``'s own selection, through the database's filtered
    nearest-neighbour query (``small=0``) and through one filtered scan ranked
    exactly (a small selection, the default)."""
    from emotional_memory.stores.vectordb import base as _vector_db

    monkeypatch.setattr(_vector_db, "_SMALL_SELECTION", small)
    store, oracle = backend.new(), oracle_store()
    fill_selection_bank([store, oracle])
    spy = Spy(store, monkeypatch)
    spy.armed = True
    check_selections(store, oracle, cases=[c for c in CASES if c != ((), None)])
    spy.armed = False
    assert spy.filters and all(f is not None for f in spy.filters)
    assert ("_nearest" in spy.calls) is (small == 0)


# ----------------------------------------------------------- the original's layout


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
    oracle = EmotionalMemory(oracle_store(), HashingEmbedder(dim=16), clock=Clock())
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
    oracle = EmotionalMemory(oracle_store(), HashingEmbedder(dim=16), clock=Clock())
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


class _CountingClock:
    """A clock 30 s later at every reading (a replay's tick clock), counting them."""

    def __init__(self) -> None:
        self.reads = 0

    def __call__(self) -> Any:
        self.reads += 1
        return T0 + timedelta(seconds=30 * self.reads)


def _clock_reads_per_step(store: Any) -> list[tuple[str, int]]:
    """The engine's clock readings of each step of one scoped session over ``store``
    (no memory has an expiry)."""
    clock = _CountingClock()
    engine = EmotionalMemory(store, HashingEmbedder(dim=16), clock=clock)
    alice = engine.scoped("alice")
    steps: list[tuple[str, Any]] = [
        ("encode", lambda: alice.encode("rain on the harbour", metadata={"n": 1})),
        ("root encode", lambda: engine.encode("a storm at night", metadata={"n": 2})),
        ("list", lambda: alice.list_all()),
        ("list where", lambda: alice.list_all(where={"n": 1})),
        ("root list where", lambda: engine.list_all(where={"n": {"$gte": 1}})),
        ("retrieve", lambda: alice.retrieve("rain harbour", top_k=2)),
        ("retrieve where", lambda: engine.retrieve("storm", top_k=2, where={"n": 2})),
        ("len", lambda: len(alice)),
        ("export", lambda: alice.export_memories()),
        ("prune", lambda: alice.prune()),
        ("batch", lambda: alice.encode_batch(["one more", "and another"])),
    ]
    out = []
    for name, step in steps:
        before = clock.reads
        step()
        out.append((name, clock.reads - before))
    return out


def test_a_view_reads_the_clock_as_the_in_memory_store_does(backend: Backend) -> None:
    """While no memory has an expiry, a view's operation reads the engine clock as
    often as over InMemoryStore (it never needs the time to confine by expiry): the
    vector databases read it for every filter they built, so a tick clock (a replay)
    gave later memories other timestamps than the in-memory store's."""
    store = backend.new()
    assert _clock_reads_per_step(store) == _clock_reads_per_step(oracle_store())
