"""Scopes, filters and expiry, tested against oracles.

* The separate-engine contract: for random interleavings of encode / retrieve /
  delete / set_affect in sibling scopes of ONE engine, each view answers exactly (ids
  mapped by content, order, scores, breakdowns, stored tags, state) as a separate
  engine holding only that scope's memories, on the in-memory and SQLite stores and
  on a plain protocol store (the generic path), with the lexical signal on and off.
* The filter contract: ``retrieve(q, where=F)`` answers, and changes the winners,
  exactly as a twin engine after deleting every memory that does not match ``F``;
  ``list_all(where=F)`` equals an independent plain-Python evaluation of the dialect.
* Cross-scope ids, nesting, per-scope state across a reopen, expiry, import/export
  through views, async views under ``asyncio.gather``, bad paths and bad filters.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Callable
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from emotional_memory import (
    AsyncEmotionalMemory,
    CoreAffect,
    EmotionalMemory,
    EmotionalMemoryConfig,
    InMemoryStore,
    SQLiteStore,
)
from emotional_memory.affect import AffectiveMomentum
from emotional_memory.embedders import HashingEmbedder
from emotional_memory.filters import parse_where
from emotional_memory.models import EmotionalTag, Memory
from emotional_memory.mood import MoodField
from emotional_memory.retrieval import RetrievalConfig
from emotional_memory.state_stores import InMemoryAffectiveStateStore, SQLiteAffectiveStateStore
from support.paths import README
from support.plain_store import PerMemoryStore

T0 = datetime(2025, 3, 1, 9, 0, tzinfo=UTC)
WORDS = ["rain", "bridge", "coffee", "storm", "harbour", "exam", "garden", "train", "dog",
         "music"]
SCOPES = ["alice", "bob", "carol"]


class Clock:
    """A clock the test moves by hand (every engine reads the same value)."""

    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> datetime:
        return self.now


def _config(lexical: bool) -> EmotionalMemoryConfig:
    if not lexical:
        return EmotionalMemoryConfig()
    return EmotionalMemoryConfig(
        retrieval=RetrievalConfig(lexical_weight=0.3, hybrid_candidates=True)
    )


def _make_store(kind: str, tmp: Path, name: str) -> Any:
    if kind == "memory":
        return InMemoryStore()
    if kind == "sqlite":
        return SQLiteStore(tmp / f"{name}.db")
    return PerMemoryStore()


def _text(words: list[int], i: int) -> str:
    return " ".join(WORDS[w] for w in words) + f" note {i}"


def _explained(results: list[Any]) -> list[tuple[Any, ...]]:
    return [
        (r.memory.content, r.score, tuple(r.breakdown.raw_signals), r.pass1_rank,
         r.pass2_rank, r.selected_as_seed, r.candidate_count)
        for r in results
    ]


def _tags(memories: list[Memory], inside: bool = False) -> list[tuple[Any, ...]]:
    """What a memory holds, links mapped from ids to contents (ids are uuid4s); with
    ``inside``, only the links among ``memories``."""
    content_of = {m.id: m.content for m in memories}
    out = []
    for m in memories:
        tag = m.tag.model_dump(mode="json", exclude={"resonance_links"})
        links = [(content_of.get(lk.target_id, "?"), lk.strength, lk.link_type)
                 for lk in m.tag.resonance_links
                 if not inside or lk.target_id in content_of]
        out.append((m.content, m.embedding, m.metadata, repr(tag), links))
    return out


operation = st.one_of(
    st.tuples(st.just("encode"), st.integers(0, 2),
              st.lists(st.integers(0, len(WORDS) - 1), min_size=1, max_size=4),
              st.floats(-1, 1), st.floats(0, 1)),
    st.tuples(st.just("retrieve"), st.integers(0, 2),
              st.lists(st.integers(0, len(WORDS) - 1), min_size=1, max_size=3),
              st.integers(1, 4)),
    st.tuples(st.just("delete"), st.integers(0, 2), st.integers(0, 20)),
    st.tuples(st.just("affect"), st.integers(0, 2), st.floats(-1, 1), st.floats(0, 1)),
)


@pytest.mark.parametrize("kind", ["memory", "sqlite", "plain"])
@pytest.mark.parametrize("lexical", [False, True])
@settings(max_examples=12, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=st.lists(operation, min_size=4, max_size=22))
def test_a_view_answers_as_a_separate_engine_of_its_scope(
    kind: str, lexical: bool, ops: list[tuple[Any, ...]], tmp_path_factory: Any
) -> None:
    tmp = tmp_path_factory.mktemp("scopes")
    clock = Clock()
    config = _config(lexical)
    embedder = HashingEmbedder(dim=32)
    shared = EmotionalMemory(_make_store(kind, tmp, "shared"), embedder, config=config,
                             clock=clock)
    views = [shared.scoped(s) for s in SCOPES]
    alone = [EmotionalMemory(_make_store(kind, tmp, s), embedder, config=config, clock=clock)
             for s in SCOPES]
    made: list[list[tuple[str, str]]] = [[] for _ in SCOPES]  # (view id, alone id)
    try:
        for step, op in enumerate(ops):
            clock.now = T0 + timedelta(minutes=7 * step)
            kind_of, s = op[0], op[1]
            view, oracle = views[s], alone[s]
            if kind_of == "encode":
                text = _text(op[2], step)
                affect = CoreAffect(valence=op[3], arousal=op[4])
                a = view.encode(text, metadata={"step": step}, affect=affect)
                b = oracle.encode(text, metadata={"step": step}, affect=affect)
                assert a.scope == (SCOPES[s],) and b.scope == ()
                made[s].append((a.id, b.id))
            elif kind_of == "retrieve":
                query = " ".join(WORDS[w] for w in op[2])
                assert _explained(view.retrieve_with_explanations(query, op[3])) == \
                    _explained(oracle.retrieve_with_explanations(query, op[3]))
            elif kind_of == "delete":
                if made[s]:
                    a_id, b_id = made[s].pop(op[2] % len(made[s]))
                    assert view.delete(a_id) is oracle.delete(b_id) is True
            else:
                affect = CoreAffect(valence=op[2], arousal=op[3])
                assert view.set_affect(affect).snapshot() == oracle.set_affect(affect).snapshot()
        for s, (view, oracle) in enumerate(zip(views, alone, strict=True)):
            assert _tags(view.list_all()) == _tags(oracle.list_all())
            assert view.get_state().snapshot() == oracle.get_state().snapshot()
            assert len(view) == len(oracle) == len(made[s])
        assert len(shared) == sum(len(m) for m in made)
    finally:
        for engine in (shared, *alone):
            engine.close()


# ---------------------------------------------------------------- where filters


def _oracle_value(memory: Memory, field: str) -> Any:
    missing = _MISSING
    builtins: dict[str, Callable[[Memory], Any]] = {
        "valence": lambda m: m.tag.core_affect.valence,
        "arousal": lambda m: m.tag.core_affect.arousal,
        "dominance": lambda m: m.tag.core_affect.dominance,
        "retrieval_count": lambda m: m.tag.retrieval_count,
        "timestamp": lambda m: m.tag.timestamp,
        "emotion": lambda m: m.tag.emotion_label.primary if m.tag.emotion_label else None,
    }
    if field in builtins:
        return builtins[field](memory)
    node: Any = memory.metadata
    for key in field.split("."):
        if not isinstance(node, dict) or key not in node:
            return missing
        node = node[key]
    return node


_MISSING = object()


def _kind(x: Any) -> str:
    if isinstance(x, bool):
        return "bool"
    if isinstance(x, int | float):
        return "num"
    return type(x).__name__


def _oracle_compare(value: Any, op: str, operand: Any) -> bool:
    def eq(v: Any, o: Any) -> bool:
        if o is None:
            return v is None or v is _MISSING
        return v is not _MISSING and _kind(v) == _kind(o) and v == o

    if op == "$exists":
        return (value is not _MISSING) is operand
    if op == "$eq":
        return eq(value, operand)
    if op == "$ne":
        return not eq(value, operand)
    if op == "$in":
        return any(eq(value, o) for o in operand)
    if op == "$nin":
        return not any(eq(value, o) for o in operand)
    if isinstance(operand, datetime):
        if not isinstance(value, datetime):
            return False
    elif value is _MISSING or value is None or _kind(value) != _kind(operand):
        return False
    return {"$gt": value > operand, "$gte": value >= operand, "$lt": value < operand,
            "$lte": value <= operand}[op]


def _oracle_matches(memory: Memory, where: dict[str, Any]) -> bool:
    """The dialect, evaluated directly on a memory (independent of the library)."""
    results = []
    for key, value in where.items():
        if key == "$and":
            results.append(all(_oracle_matches(memory, c) for c in value))
        elif key == "$or":
            results.append(any(_oracle_matches(memory, c) for c in value))
        elif isinstance(value, dict):
            for op, operand in value.items():
                if key == "timestamp" and isinstance(operand, str):
                    operand = datetime.fromisoformat(operand)
                results.append(_oracle_compare(_oracle_value(memory, key), op, operand))
        else:
            results.append(_oracle_compare(_oracle_value(memory, key), "$eq", value))
    return all(results)


leaf = st.one_of(
    st.builds(lambda op, v: {"valence": {op: v}}, st.sampled_from(["$gt", "$lte", "$lt"]),
              st.floats(-1, 1)),
    st.builds(lambda op, v: {"arousal": {op: v}}, st.sampled_from(["$gte", "$lt"]),
              st.floats(0, 1)),
    st.builds(lambda v: {"topic": v}, st.sampled_from(["work", "home", "travel"])),
    st.builds(lambda vs: {"topic": {"$in": vs}},
              st.lists(st.sampled_from(["work", "home", "travel"]), min_size=1, max_size=2)),
    st.builds(lambda vs: {"topic": {"$nin": vs}},
              st.lists(st.sampled_from(["work", "home"]), min_size=1, max_size=2)),
    st.builds(lambda v: {"tags.priority": {"$gte": v}}, st.integers(0, 3)),
    st.builds(lambda v: {"tags.priority": {"$ne": v}}, st.integers(0, 3)),
    st.builds(lambda b: {"tags": {"$exists": b}}, st.booleans()),
    st.builds(lambda m: {"timestamp": {"$lt": (T0 + timedelta(minutes=m)).isoformat()}},
              st.integers(0, 200)),
    st.builds(lambda e: {"emotion": e}, st.sampled_from(["joy", "sadness", "anger", "fear"])),
    st.builds(lambda n: {"retrieval_count": {"$gte": n}}, st.integers(0, 2)),
)
where_dicts = st.recursive(
    leaf,
    lambda inner: st.one_of(
        st.builds(lambda cs: {"$and": cs}, st.lists(inner, min_size=1, max_size=3)),
        st.builds(lambda cs: {"$or": cs}, st.lists(inner, min_size=1, max_size=3)),
    ),
    max_leaves=5,
)


def _fill(engine: EmotionalMemory, clock: Clock, n: int = 24) -> None:
    topics = ["work", "home", "travel"]
    for i in range(n):
        clock.now = T0 + timedelta(minutes=9 * i)
        meta: dict[str, Any] = {"topic": topics[i % 3]}
        if i % 4:
            meta["tags"] = {"priority": i % 4}
        words = [WORDS[(i * 3) % 10], WORDS[(i * 7 + 1) % 10], WORDS[i % 10]]
        engine.encode(" ".join(words) + f" n{i}", metadata=meta,
                      affect=CoreAffect(valence=math.sin(i), arousal=(i % 5) / 4))


@pytest.mark.parametrize("kind", ["memory", "sqlite", "plain"])
@settings(max_examples=25, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(where=where_dicts, words=st.lists(st.sampled_from(WORDS), min_size=1, max_size=3),
       top_k=st.integers(1, 5), lexical=st.booleans())
def test_retrieve_where_answers_as_the_engine_without_the_other_memories(
    kind: str, where: dict[str, Any], words: list[str], top_k: int, lexical: bool,
    tmp_path_factory: Any,
) -> None:
    tmp = tmp_path_factory.mktemp("where")
    clock = Clock()
    config = _config(lexical)
    embedder = HashingEmbedder(dim=32)
    filtered = EmotionalMemory(_make_store(kind, tmp, "f"), embedder, config=config, clock=clock)
    pruned = EmotionalMemory(_make_store(kind, tmp, "p"), embedder, config=config, clock=clock)
    try:
        for engine in (filtered, pruned):
            _fill(engine, clock)
        matching = [m for m in pruned.list_all() if _oracle_matches(m, where)]
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
        want = pruned.retrieve_with_explanations(query, top_k)
        assert _explained(got) == _explained(want)
        # the same side effects on the same winners, nothing else touched (the
        # matching memories' links to the others are what the deletes dropped)
        after = {m.content: m for m in filtered.list_all()}
        changed = [m.content for m in filtered.list_all() if m.tag.retrieval_count]
        assert changed == [m.content for m in pruned.list_all() if m.tag.retrieval_count]
        assert _tags([after[m.content] for m in pruned.list_all()], inside=True) == _tags(
            pruned.list_all()
        )
    finally:
        filtered.close()
        pruned.close()


@pytest.mark.parametrize(
    ("where", "message"),
    [
        ({"valence": {"$gtt": 1}}, "unknown operator '\\$gtt'"),
        ({"$nor": [{"a": 1}]}, "unknown operator '\\$nor'"),
        ({"valence": {"$gt": "high"}}, "valence"),
        ({"timestamp": {"$lt": "yesterday"}}, "timestamp"),
        ({"timestamp": {"$lt": "2025-01-01T00:00:00"}}, "timezone-aware"),
        ({"a": {"$in": 3}}, "\\$in takes a list"),
        ({"a": {"$exists": "yes"}}, "\\$exists"),
        ({"$and": []}, "\\$and takes a non-empty list"),
        ({"$or": {"a": 1}}, "\\$or takes a non-empty list"),
        ({"a": {"$gt": None}}, "number or a string"),
        ({"a": {"$gt": float("nan")}}, "finite"),
        ({"a": [1, 2]}, "string, number, boolean or null"),
        ({"": 1}, "non-empty string"),
        ({"a..b": 1}, "empty path segment"),
        ({}, "empty clause"),
        (["a"], "where must be a dict"),
    ],
)
def test_bad_where_is_refused_before_anything_changes(where: Any, message: str) -> None:
    clock = Clock()
    engine = EmotionalMemory(InMemoryStore(), HashingEmbedder(dim=16), clock=clock)
    engine.encode("a rainy bridge", metadata={"a": 1})
    before = _tags(engine.list_all())
    for call in (
        lambda: engine.retrieve("rain", where=where),
        lambda: engine.retrieve_with_explanations("rain", where=where),
        lambda: engine.list_all(where=where),
        lambda: engine.export_memories(where=where),
        lambda: engine.prune(0.99, where=where),
    ):
        with pytest.raises(ValueError, match=message):
            call()
    assert _tags(engine.list_all()) == before


def test_where_semantics_of_missing_fields_null_and_types() -> None:
    clock = Clock()
    engine = EmotionalMemory(InMemoryStore(), HashingEmbedder(dim=16), clock=clock)
    a = engine.encode("one", metadata={"n": 1, "s": "x", "b": True, "z": None})
    b = engine.encode("two", metadata={"n": 2.5, "s": "y"})
    c = engine.encode("three", metadata={})

    def ids(where: dict[str, Any]) -> list[str]:
        return [m.id for m in engine.list_all(where=where)]

    assert ids({"n": 1.0}) == [a.id]  # 1 == 1.0
    assert ids({"b": 1}) == []  # booleans only equal booleans
    assert ids({"n": {"$gt": "0"}}) == []  # strings never compare with numbers
    assert ids({"n": {"$ne": 1}}) == [b.id, c.id]  # missing counts as not equal
    assert ids({"n": {"$nin": [1, 2.5]}}) == [c.id]
    assert ids({"z": None}) == [a.id, b.id, c.id]  # null or missing
    assert ids({"z": {"$exists": True}}) == [a.id]
    assert ids({"s": {"$gte": "x"}}) == [a.id, b.id]
    assert ids({"metadata.n": 2.5}) == [b.id]
    assert ids({"$or": [{"n": 1}, {"s": "y"}], "s": {"$ne": "x"}}) == [b.id]


# ---------------------------------------------------------------- ids, nesting, state


def test_another_scopes_id_behaves_as_an_unknown_id() -> None:
    engine = EmotionalMemory(InMemoryStore(), HashingEmbedder(dim=16), clock=Clock())
    alice, bob = engine.scoped("alice"), engine.scoped("bob")
    secret = alice.encode("alice's secret")
    before = _tags(engine.list_all())
    assert bob.get(secret.id) is None
    assert bob.delete(secret.id) is False
    with pytest.raises(KeyError):
        bob.update_memory(secret.id, content="mine now")
    assert bob.list_all() == [] and len(bob) == 0 and bob.export_memories() == []
    assert bob.retrieve("secret") == []
    with pytest.raises(ValueError, match="cannot write"):
        bob.import_memories([secret.model_dump(mode="json") | {"scope": []}], overwrite=True)
    assert _tags(engine.list_all()) == before
    assert engine.get(secret.id) == alice.get(secret.id) == secret  # the root sees all


def test_nested_views_see_their_sub_scopes_and_links_stay_inside() -> None:
    engine = EmotionalMemory(InMemoryStore(), HashingEmbedder(dim=16), clock=Clock())
    alice = engine.scoped("alice")
    session = alice.scoped("s1")
    assert session.scope == ("alice", "s1") == engine.scoped("alice", "s1").scope
    top = alice.encode("rain on the bridge")
    inner = session.encode("rain on the bridge again")
    other = engine.scoped("bob").encode("rain on the bridge too")
    assert [m.id for m in alice.list_all()] == [top.id, inner.id]
    assert [m.id for m in session.list_all()] == [inner.id]
    # links only to memories the encoding view saw
    assert {lk.target_id for lk in inner.tag.resonance_links} <= {inner.id}
    assert other.tag.resonance_links == []
    assert {lk.target_id for lk in engine.get(top.id).tag.resonance_links} <= {top.id}
    # the root sees everything and may link across scopes
    root = engine.encode("rain on the bridge, from the root")
    assert {lk.target_id for lk in root.tag.resonance_links} & {top.id, inner.id, other.id}
    # deleting from a view drops the root's link to it (no link dangles)
    assert session.delete(inner.id)
    assert all(lk.target_id != inner.id for m in engine.list_all()
               for lk in m.tag.resonance_links)


@pytest.mark.parametrize("bad", [(), ("",), ("alice", 3), (None,), ("a\x00b",)])
def test_bad_scope_paths_are_refused(bad: tuple[Any, ...]) -> None:
    engine = EmotionalMemory(InMemoryStore(), HashingEmbedder(dim=16))
    with pytest.raises(ValueError, match=r"scope|path"):
        engine.scoped(*bad)


def test_per_scope_state_survives_a_reopen(tmp_path: Path) -> None:
    path = tmp_path / "m.db"
    clock = Clock()

    def open_engine() -> EmotionalMemory:
        store = SQLiteStore(path)
        return EmotionalMemory(store, HashingEmbedder(dim=16), clock=clock,
                               state_store=SQLiteAffectiveStateStore.from_store(store))

    engine = open_engine()
    alice, bob = engine.scoped("alice"), engine.scoped("bob")
    alice.set_affect(CoreAffect(valence=-0.8, arousal=0.9))
    clock.now += timedelta(minutes=5)
    alice.encode("a storm over the harbour", affect=CoreAffect(valence=-0.6, arousal=0.7))
    bob.set_affect(CoreAffect(valence=0.7, arousal=0.2))
    engine.set_affect(CoreAffect(valence=0.1, arousal=0.5))
    states = {s: v.get_state().snapshot() for s, v in (("alice", alice), ("bob", bob))}
    root_state = engine.get_state().snapshot()
    assert states["alice"] != states["bob"] != root_state
    engine.close()
    again = open_engine()
    assert again.get_state().snapshot() == root_state
    for name, snapshot in states.items():
        assert again.scoped(name).get_state().snapshot() == snapshot
    assert again.scoped("carol").get_state().snapshot()["mood"]["valence"] == 0.0
    assert [m.scope for m in again.list_all()] == [("alice",)]
    again.close()


def test_in_memory_state_store_keeps_one_state_per_scope() -> None:
    states = InMemoryAffectiveStateStore()
    engine = EmotionalMemory(InMemoryStore(), HashingEmbedder(dim=16), state_store=states)
    engine.scoped("alice").set_affect(CoreAffect(valence=-0.9, arousal=0.8))
    assert engine.get_state().core_affect.valence == 0.0
    assert engine.scoped("alice").get_state().core_affect.valence == -0.9  # restored
    assert states.load() is None or states.load().core_affect.valence == 0.0


def test_a_state_store_without_scopes_is_refused() -> None:
    class Plain:
        def save(self, state: Any) -> None: ...
        def load(self) -> Any: return None
        def clear(self) -> None: ...

    engine = EmotionalMemory(InMemoryStore(), HashingEmbedder(dim=16), state_store=Plain())
    with pytest.raises(TypeError, match="one state per scope"):
        engine.scoped("alice")


# ---------------------------------------------------------------- expiry


@pytest.mark.parametrize("kind", ["memory", "sqlite", "plain"])
def test_expired_memories_are_invisible_and_pruned(kind: str, tmp_path: Path) -> None:
    clock = Clock()
    engine = EmotionalMemory(_make_store(kind, tmp_path, "e"), HashingEmbedder(dim=16),
                             clock=clock)
    soon = T0 + timedelta(hours=1)
    brief = engine.encode("a storm on the harbour", expires_at=soon)
    kept = engine.encode("a storm on the harbour at night")
    batch = engine.encode_batch(["rain", "more rain"], expires_at=[None, soon])
    assert brief.expires_at == soon and batch[1].expires_at == soon
    assert engine.get(brief.id) is not None and len(engine) == 4
    clock.now = soon  # expired once the clock reaches it
    assert engine.get(brief.id) is None
    assert [m.id for m in engine.list_all()] == [kept.id, batch[0].id]
    assert brief.id not in [m.id for m in engine.retrieve("storm harbour", 5)]
    assert all(m["id"] != brief.id for m in engine.export_memories())
    late = engine.encode("a storm on the harbour again")
    if kind != "plain":  # a plain store's own search still sees them (documented)
        assert all(lk.target_id not in (brief.id, batch[1].id)
                   for lk in late.tag.resonance_links)
    assert engine.prune(0.0) == 2  # removes the expired ones, nothing else at 0
    assert len(engine.scoped("x")) == 0 and len(engine) == 3
    engine.close()


def test_expiry_travels_through_export_and_import_and_a_reopen(tmp_path: Path) -> None:
    clock = Clock()
    soon = T0 + timedelta(days=1)
    first = EmotionalMemory(SQLiteStore(tmp_path / "a.db"), HashingEmbedder(dim=16),
                            clock=clock)
    m = first.scoped("alice").encode("exam tomorrow", expires_at=soon)
    data = first.export_memories()
    first.close()
    reopened = EmotionalMemory(SQLiteStore(tmp_path / "a.db"), HashingEmbedder(dim=16),
                               clock=clock)
    assert reopened.get(m.id) == m
    other = EmotionalMemory(InMemoryStore(), HashingEmbedder(dim=16), clock=clock)
    assert other.import_memories(data) == 1
    assert other.get(m.id).expires_at == soon
    assert other.get(m.id).scope == ("alice",)  # a record keeps its scope ...
    assert other.scoped("alice").import_memories([data[0] | {"id": "z"}]) == 1
    with pytest.raises(ValueError, match="outside this view"):  # ... unless it is outside
        other.scoped("bob").import_memories([data[0] | {"id": "x"}])
    assert other.scoped("carol").import_memories([data[0] | {"id": "y", "scope": []}]) == 1
    assert other.get("y").scope == ("carol",)
    reopened.close()


def test_bad_expiry_is_refused() -> None:
    engine = EmotionalMemory(InMemoryStore(), HashingEmbedder(dim=16))
    with pytest.raises(ValueError, match="expires_at must be timezone-aware"):
        engine.encode("x", expires_at=datetime(2030, 1, 1))
    with pytest.raises(TypeError, match="expires_at"):
        engine.encode("x", expires_at="2030-01-01")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="one entry per content"):
        engine.encode_batch(["a", "b"], expires_at=[None])
    assert len(engine) == 0


# ---------------------------------------------------------------- async


def test_async_views_under_gather_answer_as_sync_separate_engines() -> None:
    clock = Clock()
    embedder = HashingEmbedder(dim=32)
    shared = AsyncEmotionalMemory(InMemoryStore(), embedder, clock=clock)
    views = [shared.scoped(s) for s in SCOPES]
    alone = [EmotionalMemory(InMemoryStore(), embedder, clock=clock) for _ in SCOPES]
    texts = {s: [f"{WORDS[(i + k) % 10]} {WORDS[(2 * i + k) % 10]} day {i}" for i in range(8)]
             for k, s in enumerate(SCOPES)}

    async def run() -> list[list[list[str]]]:
        await asyncio.gather(*(v.encode_batch(texts[s]) for v, s in zip(views, SCOPES,
                                                                          strict=True)))
        return list(await asyncio.gather(*(
            asyncio.gather(*(v.retrieve(q, 3) for q in ("rain bridge", "dog music")))
            for v in views
        )))

    got = asyncio.run(run())
    for s, oracle in enumerate(alone):
        oracle.encode_batch(texts[SCOPES[s]])
        want = [[m.content for m in oracle.retrieve(q, 3)] for q in ("rain bridge", "dog music")]
        assert [[m.content for m in r] for r in got[s]] == want
    assert views[0].scope == ("alice",)


def test_the_readme_example_runs_as_written(capsys: pytest.CaptureFixture[str]) -> None:
    import re

    readme = README
    section = readme.read_text(encoding="utf-8").split("## Many users in one store", 1)[1]
    code = re.findall(r"```python\n(.*?)```", section.split("\n## ", 1)[0], flags=re.S)[0]
    exec(compile(code, "README.md", "exec"), {})
    out = capsys.readouterr().out.splitlines()
    assert out[1] == "['The exam went fine.']"
    assert out[2] == "Lunch with Sam was lovely."


def test_mem0_users_are_hard_partitions() -> None:
    from emotional_memory.integrations.mem0 import EmotionalMemoryMem0Backend

    engine = EmotionalMemory(InMemoryStore(), HashingEmbedder(dim=32), clock=Clock())
    m = EmotionalMemoryMem0Backend(engine)
    for i in range(200):
        m.add(f"wedding day plans {i} with the family", user_id="alice")
    m.add("a quiet walk in the garden", user_id="bob", agent_id="coach")
    m.add("wedding music for the garden party", user_id="bob", agent_id="planner")
    before = _tags(engine.scoped("alice").list_all())
    # bob's memories rank below alice's for this query: bob still gets his own
    found = m.search("wedding day plans with the family", user_id="bob", limit=5)["results"]
    assert [r["memory"] for r in found] == [
        "wedding music for the garden party", "a quiet walk in the garden"
    ]
    assert _tags(engine.scoped("alice").list_all()) == before  # no side effect on alice
    only = m.search("garden", user_id="bob", agent_id="coach")["results"]
    assert [r["memory"] for r in only] == ["a quiet walk in the garden"]
    filtered = m.search("garden", user_id="bob", filters={"agent_id": {"$ne": "coach"}})
    assert [r["memory"] for r in filtered["results"]] == ["wedding music for the garden party"]
    assert [r["memory"] for r in m.get_all(user_id="bob", agent_id="planner")["results"]] == [
        "wedding music for the garden party"
    ]
    with pytest.raises(ValueError, match="unknown operator"):
        m.search("garden", user_id="bob", filters={"agent_id": {"$like": "c%"}})
    m.delete_all(user_id="bob", agent_id="coach")
    assert len(engine.scoped("bob")) == 1 and len(engine.scoped("alice")) == 200


def test_langchain_retriever_and_history_take_a_scope_and_where() -> None:
    from emotional_memory.integrations.langchain import (
        EmotionalMemoryChatHistory,
        EmotionalMemoryRetriever,
    )

    engine = EmotionalMemory(InMemoryStore(), HashingEmbedder(dim=32), clock=Clock())
    alice = EmotionalMemoryChatHistory(engine, scope=("alice",))
    bob = EmotionalMemoryChatHistory(engine, scope="bob")
    alice.add_user_message("my dog loves the harbour")
    bob.add_user_message("my dog hates the rain")
    alice.add_ai_message("the harbour is lovely in spring")
    assert [m.content for m in alice.messages] == [
        "my dog loves the harbour", "the harbour is lovely in spring"
    ]
    assert [m.content for m in EmotionalMemoryChatHistory(engine, scope="bob").messages] == [
        "my dog hates the rain"
    ]
    retriever = EmotionalMemoryRetriever(memory=engine, scope=("alice",), top_k=5,
                                         where={"role": "user"})
    docs = retriever.invoke("dog")
    assert [d.page_content for d in docs] == ["my dog loves the harbour"]
    with pytest.raises(ValueError, match="unknown operator"):
        EmotionalMemoryRetriever(memory=engine, where={"role": {"$regex": "u"}})
    bob.clear()
    assert len(engine.scoped("alice")) == 2 and len(engine.scoped("bob")) == 0


def test_a_schema_1_file_gains_scope_and_expiry_columns_in_one_open(tmp_path: Path) -> None:
    import json
    import sqlite3

    from emotional_memory.models import make_emotional_tag
    from emotional_memory.mood import MoodField

    path = tmp_path / "v1.db"
    tag = make_emotional_tag(CoreAffect.neutral(), __import__(
        "emotional_memory.affect", fromlist=["AffectiveMomentum"]).AffectiveMomentum.zero(),
        MoodField.neutral(T0), 0.5, now=T0)
    raw = sqlite3.connect(path)
    with raw:  # the layout main's schema 1 wrote
        raw.execute("CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
        raw.execute("INSERT INTO meta VALUES ('schema_version', '1')")
        raw.execute("""CREATE TABLE memories (seq INTEGER PRIMARY KEY AUTOINCREMENT,
            id TEXT NOT NULL UNIQUE, content TEXT NOT NULL, embedding BLOB, dim INTEGER,
            tag TEXT NOT NULL, metadata TEXT NOT NULL)""")
        raw.execute("CREATE TABLE changes (seq INTEGER PRIMARY KEY AUTOINCREMENT, "
                    "id TEXT NOT NULL, deleted INTEGER NOT NULL)")
        raw.execute("INSERT INTO memories (id, content, embedding, dim, tag, metadata) "
                    "VALUES ('old', 'an old memory', NULL, NULL, ?, ?)",
                    (tag.model_dump_json(), json.dumps({"k": 1})))
    raw.close()
    store = SQLiteStore(path)
    engine = EmotionalMemory(store, HashingEmbedder(dim=16), clock=Clock())
    assert [(m.id, m.scope, m.expires_at) for m in engine.list_all()] == [("old", (), None)]
    engine.scoped("alice").encode("new", expires_at=T0 + timedelta(days=1))
    engine.close()
    raw = sqlite3.connect(path)
    cols = {row[1] for row in raw.execute("PRAGMA table_info(em_memories)")}
    assert {"scope", "expires_at"} <= cols
    rows = raw.execute("SELECT id, scope, expires_at FROM em_memories ORDER BY seq").fetchall()
    raw.close()
    assert rows[0] == ("old", "[]", None) and rows[1][1] == '["alice"]'
    assert rows[1][2] == int((T0 + timedelta(days=1)).timestamp() * 1_000_000)


def test_a_rolled_back_transaction_restores_scope_and_expiry_of_updated_rows() -> None:
    store = InMemoryStore()
    engine = EmotionalMemory(store, HashingEmbedder(dim=16), clock=Clock())
    plain = engine.encode("plain memory")  # the store holds no scope or expiry yet
    before = store.get(plain.id)
    with pytest.raises(RuntimeError), store.transaction():
        store.update(plain.model_copy(update={"scope": ("alice",)}))  # a tag-only write
        store.update(plain.model_copy(update={
            "scope": ("bob",), "expires_at": T0 + timedelta(days=1),
        }))
        assert engine.scoped("bob").get(plain.id) is not None
        raise RuntimeError("roll back")
    assert store.get(plain.id) == before
    assert engine.scoped("alice").get(plain.id) is None
    assert engine.scoped("bob").get(plain.id) is None
    assert [m.id for m in engine.list_all()] == [plain.id]


# -- the column-wise where mask against the reference semantics ------------------------

_EMOTIONS = ["joy", "sadness", "anger", "fear"]
mask_leaf = st.one_of(
    st.builds(lambda f, op, v: {f: {op: v}},
              st.sampled_from(["valence", "arousal", "dominance"]),
              st.sampled_from(["$eq", "$ne", "$gt", "$gte", "$lt", "$lte"]),
              st.one_of(st.sampled_from([-0.5, 0.0, 0.25, 0.5, 1, 0]), st.floats(-1, 1))),
    st.builds(lambda op, v: {"retrieval_count": {op: v}},
              st.sampled_from(["$eq", "$ne", "$gt", "$gte", "$lt", "$lte"]),
              st.one_of(st.integers(-2, 4), st.sampled_from([2.5, 1.0, -0.5, 2**70, 1e300]))),
    st.builds(lambda op, vs: {"retrieval_count": {op: vs}}, st.sampled_from(["$in", "$nin"]),
              st.lists(st.one_of(st.none(), st.integers(0, 3), st.just(1.0)), max_size=3)),
    st.builds(lambda f, op: {f: {op: None}},
              st.sampled_from(["valence", "retrieval_count", "timestamp", "emotion"]),
              st.sampled_from(["$eq", "$ne"])),
    st.builds(lambda f, b: {f: {"$exists": b}},
              st.sampled_from(["arousal", "timestamp", "emotion", "topic"]), st.booleans()),
    st.builds(lambda op, m: {"timestamp": {op: (T0 + timedelta(minutes=m)).isoformat()}},
              st.sampled_from(["$eq", "$ne", "$gt", "$lte"]), st.integers(-5, 40)),
    st.builds(lambda op, e: {"emotion": {op: e}}, st.sampled_from(["$eq", "$ne", "$gt"]),
              st.sampled_from(_EMOTIONS)),
    st.builds(lambda op, es: {"emotion": {op: es}}, st.sampled_from(["$in", "$nin"]),
              st.lists(st.one_of(st.none(), st.sampled_from(_EMOTIONS)), max_size=2)),
    st.builds(lambda op, v: {"topic": {op: v}}, st.sampled_from(["$eq", "$ne"]),
              st.sampled_from(["home", "work", 1, True])),
    st.builds(lambda v: {"topic": {"$lt": v}}, st.sampled_from(["home", "work", 1])),
)
mask_where = st.recursive(
    mask_leaf,
    lambda inner: st.one_of(
        st.builds(lambda cs: {"$and": cs}, st.lists(inner, min_size=1, max_size=3)),
        st.builds(lambda cs: {"$or": cs}, st.lists(inner, min_size=1, max_size=3)),
    ),
    max_leaves=4,
)


def _mask_bank() -> tuple[InMemoryStore, list[Memory]]:
    """A store mixing compact rows and memories kept whole (a non-UTC timestamp, a
    counter too large for a float), labelled and not, with and without metadata."""
    from emotional_memory.categorize import EmotionLabel

    store = InMemoryStore()
    memories = []
    values = [-1.0, -0.5, 0.0, 0.25, 0.5, 1.0]
    for i in range(30):
        stamp = T0 + timedelta(minutes=i)
        if i % 7 == 3:
            stamp = stamp.astimezone(timezone(timedelta(hours=2)))
        label = None
        if i % 3:
            label = EmotionLabel(primary=_EMOTIONS[i % 4], intensity="moderate",
                                 name=_EMOTIONS[i % 4], confidence=0.5)
        tag = EmotionalTag(
            core_affect=CoreAffect(valence=values[i % 6], arousal=values[(i + 2) % 6] / 2 + 0.5,
                                   dominance=0.5),
            momentum=AffectiveMomentum.zero(),
            mood_snapshot=MoodField.neutral(T0),
            consolidation_strength=0.5,
            retrieval_count=2**53 if i == 11 else i % 5,
            timestamp=stamp,
            emotion_label=label,
        )
        meta = {} if i % 5 == 0 else {"topic": ["home", "work", 1][i % 3]}
        memory = Memory(id=f"m{i}", content=f"c{i}", tag=tag, embedding=[1.0, float(i)],
                        metadata=meta)
        store.save(memory)
        memories.append(memory)
    return store, memories


@settings(max_examples=200, deadline=None)
@given(where=mask_where)
def test_the_column_mask_equals_the_reference_semantics(where: dict[str, Any]) -> None:
    store, memories = _mask_bank()
    assert store._whole, "the bank must hold memories kept whole"
    parsed = parse_where(where)
    assert parsed is not None
    rows = np.flatnonzero(store._valid[: store._size]).astype(np.int64)
    got = store._where_mask(rows, parsed).tolist()
    assert got == [parsed.matches(m) for m in memories]
    assert got == [store._row_matches(int(r), parsed) for r in rows]
