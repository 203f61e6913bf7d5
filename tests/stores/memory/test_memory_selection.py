"""InMemoryStore's own selection machinery: the column-wise ``where`` mask against the
reference semantics, and scope and expiry restored by a rolled-back transaction."""

from __future__ import annotations

from datetime import timedelta, timezone
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from emotional_memory import CoreAffect, EmotionalMemory, InMemoryStore
from emotional_memory.affect import AffectiveMomentum
from emotional_memory.embedders import HashingEmbedder
from emotional_memory.filters import parse_where
from emotional_memory.models import EmotionalTag, Memory
from emotional_memory.mood import MoodField
from support.scopes import T0, Clock


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


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
def test_filtered_rows_found_outside_the_lock_are_never_stale(kind: str, tmp_path: Any) -> None:
    """A filtered view finds its rows outside the store's lock; a write that ran
    meanwhile must make it find them again: every memory a filtered read returns
    matches the filter when returned, whatever a writer thread does meanwhile."""
    import threading

    from emotional_memory.stores.base import Selection
    from emotional_memory.stores.sqlite import SQLiteStore

    store: Any = InMemoryStore() if kind == "memory" else SQLiteStore(tmp_path / "m.db")
    engine = EmotionalMemory(store, HashingEmbedder(dim=16), clock=Clock())
    view = engine.scoped("s")
    made = view.encode_batch([f"note {i}" for i in range(300)],
                             metadata=[{"topic": "a", "i": i} for i in range(300)])
    stop = threading.Event()

    def flip() -> None:
        k = 0
        while not stop.is_set():
            memory = store.get(made[k % 300].id)
            topic = "b" if memory.metadata["topic"] == "a" else "a"
            store.update(memory.model_copy(update={"metadata": {**memory.metadata,
                                                                "topic": topic}}))
            k += 7

    where = parse_where({"$or": [{"topic": "a"}, *({"i": -j} for j in range(1, 40))]})
    writer = threading.Thread(target=flip)
    writer.start()
    try:
        reads = 0
        for _ in range(150):
            selected = store.selected(Selection(("s",), where))
            for _ in range(3):  # the same view again: its cached rows are checked too
                listed = selected.list_all()
                assert all(m.metadata["topic"] == "a" for m in listed)
                assert len(selected) >= 0
                reads += 1
    finally:
        stop.set()
        writer.join()
    assert reads == 450
    quiet = store.selected(Selection(("s",), where))
    assert sorted(m.id for m in quiet.list_all()) == sorted(
        m.id for m in store.list_all() if m.metadata["topic"] == "a")
