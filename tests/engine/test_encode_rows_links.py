"""``score_links`` against the per-pair functions it inlines (half precision, odd-shaped
memories kept whole), and the row linker's bookkeeping: no recent copies, rows written
from the vectors given, backward slots, nothing shared with the store.
"""

from __future__ import annotations

import math
from datetime import timedelta, timezone
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from emotional_memory import (
    CoreAffect,
    EmotionalMemoryConfig,
    InMemoryStore,
    Memory,
    ResonanceConfig,
)
from emotional_memory.affect import AffectiveMomentum
from emotional_memory.models import EmotionalTag, make_emotional_tag
from emotional_memory.mood import MoodField
from emotional_memory.replay import TickClock
from emotional_memory.resonance import _link_type, build_resonance_links, link_scores, score_links
from emotional_memory.stores._shared.rows import linking as linking_module
from emotional_memory.stores._shared.rows.linking import RowLinker
from support.row_path import (
    START,
    make,
    text,
)

# --------------------------------------------------------------- score_links


def _reference_links(new: Memory, candidates: list[Memory], cfg: ResonanceConfig) -> list[Any]:
    """The links as the per-pair functions give them (the code score_links inlines)."""
    scored = []
    for cand in candidates:
        if cand.id == new.id:
            continue
        score, sem, emo, temp = link_scores(new, cand, cfg)
        if score < cfg.threshold:
            continue
        scored.append((score, sem, emo, temp, cand))
    scored.sort(key=lambda item: -item[0])
    return [
        (
            cand.id,
            min(1.0, max(0.0, score)),
            _link_type(
                abs(new.tag.core_affect.valence - cand.tag.core_affect.valence),
                cand.tag.timestamp < new.tag.timestamp, sem, emo, temp, cfg,
            ),
        )
        for score, sem, emo, temp, cand in scored[: cfg.max_links]
    ]


finite = st.floats(-1e3, 1e3, allow_nan=False, allow_infinity=False)

components = st.one_of(
    finite, st.sampled_from([0.0, 1e-300, -1e-300, 1e200, float("nan"), float("inf")])
)

unit = st.floats(-1.0, 1.0, allow_nan=False)


@st.composite
def memories(draw: Any, dim: int) -> Memory:
    emb = draw(st.one_of(
        st.lists(components, min_size=dim, max_size=dim), st.none(), st.just([]),
        st.just([0.0] * dim),
    ))
    affect = CoreAffect(valence=draw(unit), arousal=draw(st.floats(0.0, 1.0)),
                        dominance=draw(unit))
    when = START + timedelta(microseconds=draw(st.integers(-10**13, 10**13)))
    if draw(st.booleans()):
        when = when.astimezone(timezone(timedelta(hours=-5)))
    tag: EmotionalTag = make_emotional_tag(
        affect, AffectiveMomentum.zero(), MoodField.neutral(when), 0.5, now=when
    )
    return Memory.create("x", tag, embedding=emb)


@pytest.mark.filterwarnings("ignore:overflow encountered:RuntimeWarning")
@settings(max_examples=300, deadline=None)
@given(
    data=st.data(),
    dim=st.integers(1, 9),
    threshold=st.sampled_from([-1.0, 0.0, 0.3, 0.5]),
    max_links=st.integers(1, 6),
    half_life=st.sampled_from([1e-6, 1.0, 3600.0, 1e9]),
)
def test_score_links_is_bit_for_bit_the_per_pair_functions(
    data: Any, dim: int, threshold: float, max_links: int, half_life: float
) -> None:
    new = data.draw(memories(dim))
    candidates = data.draw(st.lists(memories(dim), max_size=12))
    if candidates and data.draw(st.booleans()):
        candidates.append(candidates[0])  # equal scores: ties keep candidate order
    if data.draw(st.booleans()):
        candidates.insert(0, new)  # skipped
    cfg = ResonanceConfig(
        threshold=threshold, max_links=max_links, temporal_half_life_seconds=half_life
    )
    got = [(lk.target_id, lk.strength, lk.link_type)
           for lk in build_resonance_links(new, candidates, cfg)]
    expected = _reference_links(new, candidates, cfg)
    assert len(got) == len(expected)
    for (gid, gs, gt), (eid, es, et) in zip(got, expected, strict=True):
        assert gid == eid and gt == et
        assert gs == es or (math.isnan(gs) and math.isnan(es))


def test_score_links_rejects_a_candidate_of_another_length() -> None:
    tag = make_emotional_tag(
        CoreAffect(valence=0.1, arousal=0.5, dominance=0.0), AffectiveMomentum.zero(),
        MoodField.neutral(START), 0.5, now=START,
    )
    new = Memory.create("a", tag, embedding=[0.0, 0.0])  # zero norm: still checked
    other = Memory.create("b", tag, embedding=[1.0, 2.0, 3.0])
    with pytest.raises(ValueError, match="length mismatch"):
        build_resonance_links(new, [other])
    # without an embedding there is no semantic component, hence no check
    assert len(build_resonance_links(Memory.create("c", tag), [other])) == 1


def test_score_links_takes_the_new_embedding_as_a_list_or_a_float64_vector() -> None:
    rng = np.random.default_rng(3)
    new = rng.standard_normal(6)
    vectors = [rng.standard_normal(6) for _ in range(8)]
    vectors[2] = None  # type: ignore[call-overload]
    affects = rng.uniform(-1, 1, (8, 3)).tolist()
    times = [1_000_000 * i for i in range(8)]
    ids = [f"m{i}" for i in range(8)]
    cfg = ResonanceConfig(threshold=-1.0, max_links=6)
    args = (ids, vectors, affects, times, cfg)
    by_list = score_links("new", new.tolist(), (0.1, 0.2, 0.3), 5_500_000, *args)
    assert by_list == score_links("new", new, (0.1, 0.2, 0.3), 5_500_000, *args)
    assert score_links("new", [], (0.1, 0.2, 0.3), 0, *args) == score_links(
        "new", np.zeros(0), (0.1, 0.2, 0.3), 0, *args
    )


def _odd_vectors(rng: np.random.Generator, dim: int) -> list[np.ndarray]:
    """Unit, float32-exact, huge, tiny, subnormal, zero, NaN and infinite vectors."""
    unit = rng.standard_normal(dim)
    with_nan = rng.standard_normal(dim)
    with_nan[1] = np.nan
    with_inf = rng.standard_normal(dim)
    with_inf[0] = np.inf
    return [
        unit / np.linalg.norm(unit),
        rng.standard_normal(dim).astype(np.float32).astype(np.float64),
        rng.standard_normal(dim) * 1e200,
        rng.standard_normal(dim) * 1e-200,
        rng.standard_normal(dim) * 1e-310,
        rng.standard_normal(dim) * 1e20,
        np.zeros(dim),
        with_nan,
        with_inf,
    ]


@pytest.mark.parametrize("dtype", ["float32", "float64", "float16", "bfloat16"])
def test_row_norms_are_the_norms_score_links_computes(dtype: Any) -> None:
    """The row path hands score_links the store's row norms: each must be
    ``sqrt(v . v)`` of the float64 vector the row path reads for that row."""
    rng = np.random.default_rng(5)
    store = InMemoryStore(embedding_dtype=dtype)
    tag = make_emotional_tag(CoreAffect.neutral(), AffectiveMomentum.zero(),
                             MoodField.neutral(START), 0.5, now=START)
    vectors = _odd_vectors(rng, 12)
    for vec in vectors:
        store.save(Memory.create("x", tag, embedding=vec.tolist()))
    rows = np.arange(len(vectors))
    exact = store._exact_rows(rows)
    with np.errstate(over="ignore", invalid="ignore"):
        want = [math.sqrt(v.dot(v)) for v in exact]
    got = store._norms[rows].tolist()
    assert [str(g) for g in got] == [str(w) for w in want]  # NaN == NaN


def test_score_links_with_the_norms_given_equals_without() -> None:
    rng = np.random.default_rng(9)
    vectors: list[np.ndarray | None] = [*_odd_vectors(rng, 8), None]
    vectors += [rng.standard_normal(8) for _ in range(6)]
    n = len(vectors)
    with np.errstate(over="ignore", invalid="ignore"):
        norms = [0.0 if v is None else math.sqrt(v.dot(v)) for v in vectors]
    affects = rng.uniform(-1, 1, (n, 3)).tolist()
    times = [1_000_000 * i for i in range(n)]
    ids = [f"m{i}" for i in range(n)]
    cfg = ResonanceConfig(threshold=-1.0, max_links=n)
    for new in (rng.standard_normal(8), vectors[2], vectors[7], None):
        args = ("new", new, (0.1, 0.2, 0.3), 5_500_000, ids, vectors, affects, times, cfg)
        with np.errstate(over="ignore", invalid="ignore"):
            want = score_links(*args)  # type: ignore[arg-type]
            got = score_links(*args, norms)  # type: ignore[arg-type]
        assert str(got) == str(want)
        assert len(got) == n  # threshold -1: every candidate linked


def test_row_path_keeps_no_recent_copy_of_new_memories() -> None:
    """The row linker saves new memories with remember=False: no recent object (the
    memory handed back is built once linked), reads rebuild them from the rows."""
    vectors = [[1.0, 0.0, 0.0, 0.0], [0.0, 1.0, 0.0, 0.0], [1.0, 1.0, 0.0, 0.0]]
    store = InMemoryStore()
    engine = make(store, vectors, EmotionalMemoryConfig(),
                  TickClock(START, timedelta(seconds=2)))
    first = engine.encode_batch([text(0)])  # no candidates: not linked
    assert not set(store._recent.keys())
    assert store.get(first[0].id) == first[0]
    store._recent.clear()
    rest = engine.encode_batch([text(1), text(2)])
    assert not set(store._recent.keys())
    for memory in rest:  # (the earlier ones have gained links since they were made)
        got = store.get(memory.id)
        assert got is not None
        got = got.model_copy(update={"tag": got.tag.model_copy(
            update={"resonance_links": memory.tag.resonance_links})})
        assert got.model_dump() == memory.model_dump()
    assert store.get(rest[-1].id) == rest[-1]
    plain = InMemoryStore()
    plain.save(first[0])  # a plain save does keep one
    assert first[0].id in plain._recent


def test_row_linker_writes_rows_from_the_vectors_given() -> None:
    """encode_batch hands the row linker its cleaned float64 vectors: the rows are
    those the lists would give; a count mismatch is refused before any write."""
    tag = make_emotional_tag(CoreAffect.neutral(), AffectiveMomentum.zero(),
                             MoodField.neutral(START), 0.5, now=START)
    vecs = [np.array([0.1, 0.2, 0.3]), None, None]
    memories = [Memory.create(f"m{i}", tag, embedding=None if v is None else v.tolist())
                for i, v in enumerate(vecs)]
    memories[2] = Memory.create("m2", tag, embedding=[])
    given, plain = InMemoryStore(), InMemoryStore()
    with pytest.raises(ValueError, match="2 vectors for 3 memories"):
        given._link_save(memories, vecs[:2])
    assert len(given) == 0
    assert given._link_save(memories, vecs) == vecs
    plain._link_save(memories)
    for memory in memories:
        assert given.get(memory.id) == plain.get(memory.id) == memory
    assert np.array_equal(given.embedding_matrix()[1], plain.embedding_matrix()[1])
    assert np.array_equal(given._norms, plain._norms)


def _backward_reference(
    existing: list[Any], strengths: list[float], back: Any, strength: float, max_links: int
) -> bool:
    """The backward-twin rule as first written (append below max_links, else replace
    the first weakest when strictly stronger)."""
    if len(existing) < max_links:
        existing.append(back)
        strengths.append(strength)
        return True
    weakest = min(range(len(existing)), key=strengths.__getitem__)
    if strength > strengths[weakest]:
        existing[weakest] = back
        strengths[weakest] = strength
        return True
    return False


@settings(max_examples=300, deadline=None)
@given(
    strengths=st.lists(st.sampled_from([0.0, 0.25, 0.5, 0.75, 1.0]), max_size=7),
    strength=st.sampled_from([0.0, 0.25, 0.5, 0.75, 1.0]),
    max_links=st.integers(1, 6),
)
def test_backward_slot_places_twins_as_the_list_rule(
    strengths: list[float], strength: float, max_links: int
) -> None:
    """backward_slot (the pending rows' tuples) and backward (lists) place a twin
    where the original list rule does (ties among the weakest included)."""
    entries = [f"t{i}" for i in range(len(strengths))]
    want_entries, want_strengths = list(entries), list(strengths)
    changed = _backward_reference(want_entries, want_strengths, "new", strength, max_links)
    got_entries, got_strengths = list(entries), list(strengths)
    assert linking_module.backward(
        got_entries, got_strengths, "new", strength, max_links
    ) is changed
    assert (got_entries, got_strengths) == (want_entries, want_strengths)
    slot = linking_module.backward_slot(tuple(strengths), strength, max_links)
    assert (slot >= 0) is changed
    if changed:
        assert want_entries[slot] == "new"


def test_row_path_bookkeeping_is_left_untracked_by_the_collector() -> None:
    """While a block is linked, the links held back and the undo entries of inserts
    and link writes are tuples of atoms (and bytes): after a collection or two (one
    for the inner tuples, one for the outer) the garbage collector no longer tracks
    them (it would traverse lists and objects in every
    collection until the transaction ends)."""
    import gc

    vectors = [[1.0, float(i), 0.5, 0.0] for i in range(40)]
    store = InMemoryStore()
    engine = make(store, vectors, EmotionalMemoryConfig(),
                  TickClock(START, timedelta(seconds=2)))
    engine.encode_batch([text(i) for i in range(20)])
    seen: dict[str, Any] = {}
    flush = RowLinker.flush

    def spy(self: RowLinker) -> None:
        gc.collect()  # a tuple of tracked tuples is untracked once they are
        gc.collect()
        seen["pending"] = list(self._pending.values())
        seen["undo"] = list(store._undo)
        flush(self)

    RowLinker.flush = spy  # type: ignore[method-assign]
    try:
        engine.encode_batch([text(i) for i in range(20, 40)])
    finally:
        RowLinker.flush = flush  # type: ignore[method-assign]
    assert seen["pending"] and seen["undo"]
    assert not any(gc.is_tracked(entry) for entry in seen["pending"])
    assert not any(gc.is_tracked(entry) for entry in seen["undo"])


def test_memories_handed_back_share_nothing_with_the_store() -> None:
    """encode / encode_batch hand back the memories they built, links filled in: their
    embedding lists, metadata and link lists are theirs alone (changing them changes
    neither the store nor another memory), and equal what ``get`` rebuilds."""
    vectors = [[1.0, float(i), 0.5, 0.0] for i in range(12)]
    store = InMemoryStore()
    engine = make(store, vectors, EmotionalMemoryConfig(),
                  TickClock(START, timedelta(seconds=2)))
    meta = {"k": [1, {"x": 2}]}
    batch = engine.encode_batch([text(i) for i in range(10)], [meta] * 10)
    assert store.get(batch[-1].id) == batch[-1]  # the others lack later twins
    for m in batch:
        stored = store.get(m.id)
        assert stored is not None and m == stored.model_copy(update={"tag": stored.tag.model_copy(
            update={"resonance_links": m.tag.resonance_links})})
    single = engine.encode(text(10), metadata=meta)
    assert store.get(single.id) == single
    returned = [*batch, single]
    ids = {id(m.embedding) for m in returned} | {id(m.metadata) for m in returned}
    ids |= {id(m.tag.resonance_links) for m in returned}
    assert len(ids) == 3 * len(returned)
    for memory in returned:
        before = store.get(memory.id)
        assert memory.embedding is not None
        assert memory.tag.resonance_links or memory is batch[0]  # the first: none yet
        memory.embedding.append(9.0)
        memory.metadata["k"][1]["x"] = 3
        memory.tag.resonance_links.clear()
        assert store.get(memory.id) == before
    assert meta == {"k": [1, {"x": 2}]}
