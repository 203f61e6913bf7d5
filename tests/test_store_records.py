"""InMemoryStore keeps memories as compact rows: every memory comes back equal.

Property tests over random memories (every optional tag field, links, metadata,
odd timezones that force the keep-whole path), saved, replaced, deleted and rolled
back, against a plain dict of the memories as the oracle.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from emotional_memory.affect import AffectiveMomentum, CoreAffect
from emotional_memory.appraisal import AppraisalVector
from emotional_memory.categorize import categorize_affect
from emotional_memory.models import LINK_TYPES, EmotionalTag, Memory, ResonanceLink
from emotional_memory.mood import MoodField
from emotional_memory.stores import InMemoryStore
from emotional_memory.stores._shared import records as _records

T0 = datetime(2025, 3, 1, tzinfo=UTC)
IDS = [f"id-{i}" for i in range(6)]

unit = st.floats(0.0, 1.0, allow_nan=False)
signed = st.floats(-1.0, 1.0, allow_nan=False)
small = st.floats(-5.0, 5.0, allow_nan=False)
zones = st.sampled_from([UTC, UTC, UTC, timezone(timedelta(hours=2)), timezone(timedelta(0), "Z")])


@st.composite
def moments(draw: Any, tz: Any = zones) -> datetime:
    return (T0 + timedelta(microseconds=draw(st.integers(-10**13, 10**13)))).astimezone(
        draw(tz)
    )


@st.composite
def memories(draw: Any, memory_id: str | None = None) -> Memory:
    mid = memory_id or draw(st.sampled_from(IDS))
    affect = CoreAffect(valence=draw(signed), arousal=draw(unit), dominance=draw(unit))
    n_links = draw(st.integers(0, 6))
    links = [
        ResonanceLink(
            source_id=mid if draw(st.integers(0, 9)) else "someone-else",
            target_id=draw(st.sampled_from([*IDS, "gone"])),
            strength=draw(unit),
            link_type=draw(st.sampled_from(LINK_TYPES)),
        )
        for _ in range(n_links)
    ]
    tag = EmotionalTag(
        core_affect=affect,
        momentum=AffectiveMomentum(
            d_valence=draw(small), d_arousal=draw(small), d_dominance=draw(small),
            dd_valence=draw(small), dd_arousal=draw(small), dd_dominance=draw(small),
        ),
        mood_snapshot=MoodField(
            valence=draw(signed), arousal=draw(unit), dominance=draw(unit),
            inertia=draw(unit), timestamp=draw(moments()),
        ),
        appraisal=draw(st.none() | st.builds(
            AppraisalVector, novelty=signed, goal_relevance=signed, coping_potential=unit,
            norm_congruence=signed, self_relevance=unit,
        )),
        resonance_links=links,
        timestamp=draw(moments()),
        consolidation_strength=draw(unit),
        last_retrieved=draw(st.none() | moments()),
        retrieval_count=draw(st.integers(0, 10**6)),
        reconsolidation_count=draw(st.integers(0, 50)),
        pending_appraisal=draw(st.booleans()),
        window_opened_at=draw(st.none() | moments()),
        expected_affect=draw(st.none() | st.builds(
            CoreAffect, valence=signed, arousal=unit, dominance=unit
        )),
        prediction_learning_rate=draw(st.floats(0.0, 1.0)),
        emotion_label=categorize_affect(affect) if draw(st.booleans()) else None,
    )
    embedding = draw(st.none() | st.just([]) | st.lists(
        st.floats(-1e3, 1e3, allow_nan=False, width=draw(st.sampled_from([32, 64]))),
        min_size=4, max_size=4,
    ))
    metadata = draw(st.dictionaries(st.sampled_from("abc"), st.integers() | st.text(max_size=3),
                                    max_size=2))
    return Memory(id=mid, content=draw(st.text(max_size=12)), embedding=embedding, tag=tag,
                  metadata=metadata)


def _same(got: Memory | None, want: Memory) -> None:
    assert got is not None
    assert got == want
    assert got.model_dump_json() == want.model_dump_json()
    assert type(got.tag.timestamp.tzinfo) is type(want.tag.timestamp.tzinfo)


def _check(store: InMemoryStore, oracle: dict[str, Memory]) -> None:
    assert len(store) == len(oracle)
    listed = store.list_all()
    assert [m.id for m in listed] == list(oracle)
    for got, want in zip(listed, oracle.values(), strict=True):
        _same(got, want)
    for targets in ({"gone"}, set(IDS[:2]), set(IDS)):
        assert store.linking_to(targets) == [
            m.id for m in oracle.values()
            if any(lk.target_id in targets for lk in m.tag.resonance_links)
        ]
    assert store.pending_ids() == [m.id for m in oracle.values() if m.tag.pending_appraisal]
    for mid, want in oracle.items():
        _same(store.get(mid), want)
        store._recent.clear()  # the next read rebuilds from the row
        _same(store.get(mid), want)


@pytest.mark.parametrize("mode", ["float32", "float64"])
@settings(deadline=None)
@given(ops=st.lists(st.tuples(st.sampled_from(["save", "delete", "fail"]), memories()),
                    min_size=1, max_size=14))
def test_rows_round_trip_every_memory(mode: str, ops: list[tuple[str, Memory]]) -> None:
    store = InMemoryStore(embedding_dtype=mode)  # type: ignore[arg-type]
    oracle: dict[str, Memory] = {}
    dim: int | None = None
    for op, memory in ops:
        if op == "delete":
            assert store.delete(memory.id) == (memory.id in oracle)
            oracle.pop(memory.id, None)
            if not any(m.embedding for m in oracle.values()):
                dim = None
        elif memory.embedding and dim is not None and len(memory.embedding) != dim:
            continue
        elif op == "save":
            store.save(memory)
            oracle[memory.id] = memory  # a replaced id keeps its position, as in the store
            dim = dim or (len(memory.embedding) if memory.embedding else None)
        else:  # a failing transaction leaves everything as it was
            with pytest.raises(RuntimeError), store.transaction():
                store.save(memory)
                for other in list(oracle)[:2]:
                    store.delete(other)
                raise RuntimeError("boom")
        _check(store, oracle)


@settings(deadline=None)
@given(memory=memories(memory_id="only"))
def test_compact_shape_is_the_utc_exact_class_shape(memory: Memory) -> None:
    tag = memory.tag
    times = [tag.timestamp, tag.mood_snapshot.timestamp, tag.last_retrieved,
             tag.window_opened_at]
    expected = all(t is None or t.tzinfo is UTC for t in times) and all(
        link.source_id == memory.id for link in tag.resonance_links
    )
    assert _records.fits(memory) == expected
    store = InMemoryStore()
    store.save(memory)
    assert (memory.id in store._whole) == (not expected)
    store._recent.clear()
    _same(store.get(memory.id), memory)


def test_tag_update_keeps_the_row_and_skips_the_vector() -> None:
    store = InMemoryStore()
    rng = np.random.default_rng(0)
    base = [
        Memory(id=f"m{i}", content=f"c{i}", embedding=rng.normal(size=8).tolist(),
               tag=EmotionalTag(
                   core_affect=CoreAffect(valence=0.1, arousal=0.2),
                   momentum=AffectiveMomentum(),
                   mood_snapshot=MoodField(valence=0, arousal=0.3, dominance=0.5,
                                           inertia=0.5, timestamp=T0),
                   timestamp=T0, consolidation_strength=0.5))
        for i in range(3)
    ]
    for m in base:
        store.save(m)
    got = store.get("m1")
    # Copies out: equal to the saved memory, sharing none of its lists.
    assert got == base[1] and got is not base[1]
    assert got.embedding is not base[1].embedding
    bumped = got.model_copy(update={"tag": got.tag.model_copy(update={"retrieval_count": 4})})
    store.save(bumped)
    assert [m.id for m in store.list_all()] == ["m0", "m1", "m2"]
    store._recent.clear()
    _same(store.get("m1"), bumped)


def test_objects_beyond_the_embedding_rows_stay_small() -> None:
    rng = np.random.default_rng(1)
    store = InMemoryStore()
    n = 3000
    ids = [f"{i:08d}-aaaa-bbbb-cccc-{i:012d}" for i in range(n)]
    vectors = rng.normal(size=(n, 32)).astype(np.float32)
    for i, mid in enumerate(ids):
        tag = EmotionalTag(
            core_affect=CoreAffect(valence=0.1, arousal=0.2),
            momentum=AffectiveMomentum(),
            mood_snapshot=MoodField(valence=0, arousal=0.3, dominance=0.5, inertia=0.5,
                                    timestamp=T0),
            appraisal=AppraisalVector.neutral(),
            resonance_links=[
                ResonanceLink(source_id=mid, target_id=ids[j], strength=0.5,
                              link_type="semantic")
                for j in range(max(0, i - 5), i)
            ],
            timestamp=T0 + timedelta(seconds=i), consolidation_strength=0.5,
        )
        store.save(Memory(id=mid, content=f"memory {i}", embedding=vectors[i].tolist(),
                          tag=tag))
    parts = store.nbytes()
    assert parts["embeddings"] == store.capacity * 32 * 4  # float32 rows, nothing aside
    # ids + content + packed links + index + recent objects, and the tag blocks
    assert parts["objects"] / n < 1500
    assert parts["columns"] / store.capacity < 400


@settings(max_examples=200, deadline=None)
@given(
    links=st.lists(
        st.tuples(st.sampled_from(IDS), unit, st.sampled_from(LINK_TYPES)), max_size=7
    )
)
def test_link_columns_pack_as_pack_links(links: list[tuple[str, float, str]]) -> None:
    """The columns the row linker holds links in (tuples and bytes) unpack from and
    pack back to the very record pack_links writes, and unpack_links reads it back."""
    models = [
        ResonanceLink(source_id="me", target_id=t, strength=s, link_type=k)  # type: ignore[arg-type]
        for t, s, k in links
    ]
    record = _records.pack_links(models, str)
    targets, strengths, codes = _records.unpack_link_columns(record)
    assert type(targets) is tuple and type(strengths) is tuple and type(codes) is bytes
    assert list(targets) == [t for t, _, _ in links]
    assert [s.hex() for s in strengths] == [float(s).hex() for _, s, _ in links]
    assert [LINK_TYPES[c] for c in codes] == [k for _, _, k in links]
    if record is None:
        assert not links
        return
    assert _records.pack_link_columns(targets, strengths, codes) == record
    assert _records.unpack_links("me", record) == models


@settings(max_examples=80, deadline=None)
@given(
    ops=st.lists(
        st.tuples(
            st.sampled_from(["save", "save", "delete", "fail", "compact"]),
            st.sampled_from(IDS),
            st.booleans(),  # a float32 number (in the matrix) or not (kept aside)
            st.integers(0, 2**32 - 1),
        ),
        min_size=1, max_size=30,
    )
)
def test_side_matrix_slots_follow_the_rows(ops: list[tuple[str, str, bool, int]]) -> None:
    """float64 embeddings kept aside live in slots of the side matrix: every live row
    kept aside owns a distinct slot holding its exact embedding (through saves,
    replacements, deletes, failed transactions and compaction), freed slots are
    reused, and the bytes counted are those of the slots in use."""
    store = InMemoryStore()
    oracle: dict[str, list[float]] = {}
    base = _tag_only_memory()
    for op, mid, exact32, seed in ops:
        vec = np.random.default_rng(seed).normal(size=3)
        if exact32:
            vec = vec.astype(np.float32).astype(np.float64)
        memory = base.model_copy(update={"id": mid, "embedding": vec.tolist()})
        if op == "save":
            store.save(memory)
            oracle[mid] = vec.tolist()
        elif op == "delete":
            assert store.delete(mid) == (mid in oracle)
            oracle.pop(mid, None)
        elif op == "compact":
            if store._dead:
                store._compact()
        else:
            with pytest.raises(RuntimeError), store.transaction():
                store.save(memory)
                for other in list(oracle)[:2]:
                    store.delete(other)
                raise RuntimeError("boom")
        rows = [store._row_of[m] for m in oracle]
        aside = [r for r in rows if store._aside[r]]
        slots = [int(store._side_slot[r]) for r in aside]
        assert len(set(slots)) == len(slots) and all(s >= 0 for s in slots)
        assert all(store._side_slot[r] == -1 for r in rows if not store._aside[r])
        assert sorted(slots + store._side_free) == list(range(store._side_top))
        assert store.embedding_nbytes() == store._matrix.nbytes + len(slots) * 3 * 8
        for mid, want in oracle.items():
            row = store._row_of[mid]
            assert store._exact_row(row).tolist() == want
        if rows:
            got = store._exact_rows(np.asarray(rows, dtype=np.int64))
            assert got.tolist() == list(oracle.values())


def _tag_only_memory() -> Memory:
    tag = EmotionalTag(
        core_affect=CoreAffect(valence=0.1, arousal=0.2, dominance=0.3),
        momentum=AffectiveMomentum.zero(),
        mood_snapshot=MoodField.neutral(T0),
        timestamp=T0,
        consolidation_strength=0.5,
    )
    return Memory(id="x", content="c", tag=tag)
