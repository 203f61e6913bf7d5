"""The columnar store protocol: native candidate banks equal the adapter's, byte for byte.

``InMemoryStore`` and ``SQLiteStore`` gather retrieval candidates straight from their
row arrays; :class:`StoreAdapter` builds the same bank from ``Memory`` objects
(``search_by_embedding`` / ``list_all`` / ``get`` and ``bank_from_memories``), which
is the path of any plain store and what the engine did before. Every leaf of the
columns, the adjacency, the ids and the dimension must be identical, for stores of
every embedding precision, memories kept whole (odd shapes), missing and empty
embeddings, links leaving the candidate set, deletes and rolled-back writes.
"""

from __future__ import annotations

import dataclasses
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from emotional_memory import EmotionalMemory, InMemoryStore
from emotional_memory._bank import CandidateBank, LexicalQuery
from emotional_memory.affect import CoreAffect
from emotional_memory.embedders import HashingEmbedder
from emotional_memory.models import EmotionalTag, Memory, ResonanceLink
from emotional_memory.replay import TickClock
from emotional_memory.stores import SQLiteStore
from emotional_memory.stores.columnar import ColumnarStore, StoreAdapter, columnar
from support.banks import (
    DIM,
    T0,
    WORDS,
    assert_same_bank,
    random_memories,
    random_query,
)
from support.plain_store import PerMemoryStore


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    seed=st.integers(0, 10_000),
    n=st.integers(1, 40),
    mode=st.sampled_from(["float32", "float64", "float16", "bfloat16"]),
    odd_every=st.sampled_from([0, 3]),
    limit=st.one_of(st.none(), st.integers(1, 45)),
    query_kind=st.integers(0, 5),
    deletes=st.integers(0, 4),
    extra=st.integers(0, 6),
    lexical=st.one_of(st.none(), st.builds(
        LexicalQuery, terms=st.lists(st.sampled_from([*WORDS, "text", "7", "zzz"]),
                                     unique=True, max_size=3),
        shortlist=st.integers(0, 6), k1=st.just(1.2), b=st.just(0.75),
        statistics=st.booleans(),
    )),
)
def test_native_bank_equals_the_adapters(
    seed: int, n: int, mode: str, odd_every: int, limit: int | None, query_kind: int,
    deletes: int, extra: int, lexical: LexicalQuery | None,
) -> None:
    rng = np.random.default_rng(seed + 1)
    store = InMemoryStore(embedding_dtype=mode)  # type: ignore[arg-type]
    memories = random_memories(seed, n, odd_every)
    for m in memories:
        store.save(m)
    for mid in rng.choice([m.id for m in memories], size=min(deletes, n - 1), replace=False):
        store.delete(str(mid))
    now = T0 + timedelta(days=200, microseconds=int(rng.integers(0, 10**6)))
    query = random_query(query_kind, rng)
    also = [str(x) for x in rng.choice([m.id for m in memories] + ["nope"], size=extra)]
    adapter = StoreAdapter(store)
    got = store.candidate_bank(query, limit, now, also=also, lexical=lexical,
                               with_memories=True)
    want = adapter.candidate_bank(query, limit, now, also=also, lexical=lexical)
    assert_same_bank(got, want)
    assert got.memories == want.memories
    assert store.memories(got.ids) == adapter.memories(got.ids)
    if lexical is not None:  # one read equals the separate lexical calls
        shortlist = (
            store.lexical_search(lexical.terms, lexical.shortlist, lexical.k1, lexical.b)
            if lexical.shortlist and lexical.terms else []
        )
        apart = store.candidate_bank(query, limit, now, also=[*also, *shortlist])
        assert apart.ids == got.ids
        if lexical.statistics:
            stats = store.lexical_inputs(lexical.terms, got.ids)
            assert_same_bank(got, dataclasses.replace(apart, lexical=stats))
        else:
            assert got.lexical is None


def test_dimension_mismatch_raises_in_both() -> None:
    store = InMemoryStore()
    for m in random_memories(3, 8, 0):
        store.save(m)
    now = T0 + timedelta(days=1)
    for limit in (None, 3):
        with pytest.raises(ValueError, match=r"length|dimension"):
            store.candidate_bank([1.0, 2.0], limit, now)
        with pytest.raises(ValueError, match=r"length|dimension"):
            StoreAdapter(store).candidate_bank([1.0, 2.0], limit, now)


def test_rolled_back_writes_leave_the_same_bank() -> None:
    store = InMemoryStore()
    memories = random_memories(11, 20, 4)
    for m in memories:
        store.save(m)
    now = T0 + timedelta(days=3)
    query = np.random.default_rng(0).standard_normal(DIM).tolist()
    before = store.candidate_bank(query, 7, now, also=["m3", "m19"])
    with pytest.raises(RuntimeError), store.transaction():
        store.delete("m4")
        store.update(memories[5].model_copy(update={"embedding": [1.0] * DIM}))
        store.save(memories[0].model_copy(update={"id": "new", "embedding": query}))
        raise RuntimeError("roll back")
    assert_same_bank(store.candidate_bank(query, 7, now, also=["m3", "m19"]), before)
    assert_same_bank(before, StoreAdapter(store).candidate_bank(query, 7, now,
                                                                 also=["m3", "m19"]))


def test_sqlite_bank_equals_the_adapters_after_reopen(tmp_path: Path) -> None:
    path = tmp_path / "bank.db"
    memories = random_memories(5, 25, 0)
    with SQLiteStore(path) as store:
        for m in memories:
            store.save(m)
    now = T0 + timedelta(days=9)
    query = np.random.default_rng(1).standard_normal(DIM).tolist()
    with SQLiteStore(path) as store:
        for limit in (None, 6):
            got = store.candidate_bank(query, limit, now, also=["m1", "m24"])
            assert_same_bank(got, StoreAdapter(store).candidate_bank(
                query, limit, now, also=["m1", "m24"]))
        ids, cols = store.columns(now)
        a_ids, a_cols = StoreAdapter(store).columns(now)
        assert ids == a_ids
        assert np.asarray(cols.age_seconds).tobytes() == np.asarray(a_cols.age_seconds).tobytes()


def test_columnar_picks_native_stores_and_adapts_plain_ones(tmp_path: Path) -> None:
    mem = InMemoryStore()
    assert columnar(mem) is mem
    with SQLiteStore(tmp_path / "x.db") as lite:
        assert columnar(lite) is lite
    plain = PerMemoryStore(InMemoryStore())
    view = columnar(plain)
    assert isinstance(view, StoreAdapter) and view.store is plain
    assert isinstance(view, ColumnarStore)


def _engine(store: Any) -> EmotionalMemory:
    clock = TickClock(T0, timedelta(seconds=30))
    return EmotionalMemory(store, HashingEmbedder(dim=32), clock=clock)


def plan_view(e: EmotionalMemory, query: str) -> Any:
    """A plan with memories named by content (ids differ between engines)."""
    plan = e.plan_retrieval(query, 3)
    content = {m.id: m.content for m in e.list_all()}
    return (
        [(r.memory.content, r.score, r.breakdown) for r in plan.pass1],
        [(r.memory.content, r.score, r.breakdown) for r in plan.pass2],
        {content[k]: v for k, v in plan.activation_map.items()},
        [content[i] for i in plan.seed_ids], plan.candidate_count, list(plan.weights),
    )


def test_engine_over_a_plain_store_ranks_and_changes_the_same() -> None:
    """One engine path: a plain store (adapter) and the native store agree on every
    retrieval's explanations and on the stored memories after its side effects."""
    texts = [f"{w} {v} day {i}" for i, (w, v) in enumerate(
        (w, v) for w in ("rain", "launch", "coffee", "exam", "party") for v in ("calm", "mad"))]
    native = _engine(InMemoryStore())
    plain = _engine(PerMemoryStore(InMemoryStore()))
    assert isinstance(plain._columnar, StoreAdapter)
    for e in (native, plain):
        for i, t in enumerate(texts):
            if i % 3 == 0:
                e.set_affect(CoreAffect(valence=(i % 5) / 2 - 1, arousal=(i % 4) / 4))
            e.encode(t)
    for q in ("rain calm", "party", "exam mad day", "coffee launch", "rain calm"):
        a = native.retrieve_with_explanations(q, top_k=3)
        b = plain.retrieve_with_explanations(q, top_k=3)
        assert [(x.memory.content, x.score, x.pass1_rank, x.activation_level) for x in a] == [
            (x.memory.content, x.score, x.pass1_rank, x.activation_level) for x in b]
        assert plan_view(native, q) == plan_view(plain, q)

    def dump(e: EmotionalMemory) -> list[Any]:
        content = {m.id: m.content for m in e.list_all()}
        return [
            (m.content, m.tag.model_dump(mode="json", exclude={"resonance_links"}),
             [(content[lk.target_id], lk.strength, lk.link_type)
              for lk in m.tag.resonance_links])
            for m in e.list_all()
        ]

    assert dump(native) == dump(plain)


def test_with_fields_is_model_copy() -> None:
    """The side effects' fast copy builds what ``model_copy(update=...)`` builds."""
    from pydantic import PrivateAttr

    from emotional_memory.models import with_fields

    memory = random_memories(2, 3, 0)[1]
    link = ResonanceLink(source_id="a", target_id="b", strength=0.5, link_type="causal")
    cases: list[tuple[Any, dict[str, Any]]] = [
        (memory, {"tag": memory.tag}),
        (memory.tag, {"retrieval_count": 7, "last_retrieved": T0}),
        (memory.tag, {}),
        (link, {"strength": 0.75}),
    ]

    class Private(EmotionalTag):
        _note: str = PrivateAttr(default="kept")

    private = Private(**memory.tag.__dict__)
    cases.append((private, {"retrieval_count": 1}))
    for model, updates in cases:
        got, want = with_fields(model, updates), model.model_copy(update=updates)
        assert type(got) is type(want) and got == want and got is not model
        assert got.__pydantic_fields_set__ == want.__pydantic_fields_set__
        assert got.__pydantic_extra__ == want.__pydantic_extra__
        assert got.__pydantic_private__ == want.__pydantic_private__
        assert got.model_dump(exclude_unset=True) == want.model_dump(exclude_unset=True)


@pytest.mark.parametrize("mode", ["float32", "float16"])
def test_rolled_back_tag_only_updates_restore_every_row(mode: str) -> None:
    """Updates keeping the embedding log only the tag row ("tags" undo entries): a
    rollback restores rows, objects kept whole, links and the bank exactly."""
    store = InMemoryStore(embedding_dtype=mode)  # type: ignore[arg-type]
    memories = random_memories(21, 12, 3)  # every third memory kept whole (non-UTC time)
    for m in memories:
        store.save(m)
    now = T0 + timedelta(days=40)
    query = np.random.default_rng(4).standard_normal(DIM).tolist()
    before_bank = store.candidate_bank(query, None, now, with_memories=True)
    before = [store.get(m.id) for m in memories]
    with pytest.raises(RuntimeError), store.transaction():
        for round_ in range(2):  # the same rows twice: two entries per row
            for m in store.memories([m.id for m in memories]):
                tag = m.tag.model_copy(update={
                    "retrieval_count": m.tag.retrieval_count + 1 + round_,
                    "last_retrieved": now,
                    "resonance_links": m.tag.resonance_links[:1],
                    "consolidation_strength": 0.5,
                })
                store.update(m.model_copy(update={"tag": tag, "content": f"x{round_}"}))
        assert store.get(memories[0].id).content == "x1"  # type: ignore[union-attr]
        raise RuntimeError("roll back")
    assert [store.get(m.id) for m in memories] == before
    store._recent.clear()  # rebuilt from the rows
    assert [store.get(m.id) for m in memories] == before
    after_bank = store.candidate_bank(query, None, now, with_memories=True)
    assert_same_bank(after_bank, before_bank)
    assert after_bank.memories == before_bank.memories


@settings(max_examples=50, deadline=None)
@given(
    a=st.tuples(st.floats(-1, 1), st.floats(0, 1), st.floats(0, 1)),
    b=st.tuples(st.floats(-1, 1), st.floats(0, 1), st.floats(0, 1)),
    alpha=st.floats(-1, 2),
)
def test_lerp_builds_what_model_construct_builds(
    a: tuple[float, float, float], b: tuple[float, float, float], alpha: float
) -> None:
    """``CoreAffect.lerp``'s direct construction equals ``model_construct``'s object."""
    x, y = CoreAffect(valence=a[0], arousal=a[1], dominance=a[2]), CoreAffect(
        valence=b[0], arousal=b[1], dominance=b[2])
    got = x.lerp(y, alpha)
    t = min(max(alpha, 0.0), 1.0)
    want = CoreAffect.model_construct(
        valence=min(max(a[0] + t * (b[0] - a[0]), -1.0), 1.0),
        arousal=min(max(a[1] + t * (b[1] - a[1]), 0.0), 1.0),
        dominance=min(max(a[2] + t * (b[2] - a[2]), 0.0), 1.0),
    )
    assert type(got) is CoreAffect and got == want
    assert got.__pydantic_fields_set__ == want.__pydantic_fields_set__
    assert got.__pydantic_extra__ == want.__pydantic_extra__
    assert got.__pydantic_private__ == want.__pydantic_private__
    assert got.model_copy(update={"valence": 0.5}) == want.model_copy(update={"valence": 0.5})


def test_subclass_overriding_a_search_is_served_through_the_adapter() -> None:
    """A subclass overriding ``search_by_embedding`` (say, to filter) keeps being
    called by retrieval: the engine reads it through the adapter."""

    class Filtering(InMemoryStore):
        def __init__(self) -> None:
            super().__init__()
            self.calls = 0

        def search_by_embedding(self, embedding: Any, top_k: int) -> list[Memory]:
            self.calls += 1
            return [m for m in super().search_by_embedding(embedding, top_k)
                    if "skip" not in m.content]

    class OwnBank(Filtering):
        def candidate_bank(self, *args: Any, **kwargs: Any) -> CandidateBank:
            return super().candidate_bank(*args, **kwargs)

    store = Filtering()
    assert isinstance(columnar(store), StoreAdapter)
    assert columnar(OwnBank()) is not None and not isinstance(columnar(OwnBank()), StoreAdapter)
    engine = _engine(store)
    for i in range(12):
        engine.encode(f"note {i}" + (" skip" if i % 2 else ""))
    calls = store.calls
    got = engine.retrieve("note", top_k=2)  # 12 memories > limit 6: a search
    assert store.calls == calls + 1
    assert got and all("skip" not in m.content for m in got)


def test_a_delegating_wrapper_without_a_library_base_is_used_as_it_is() -> None:
    """A user's class answering every protocol method through ``__getattr__`` (no
    library class in its bases) is a ColumnarStore; retrieval runs through it."""

    class Delegating:
        def __init__(self, inner: InMemoryStore) -> None:
            self.inner = inner

        def __getattr__(self, name: str) -> Any:
            return getattr(self.inner, name)

        def __len__(self) -> int:
            return len(self.inner)

    store = Delegating(InMemoryStore())
    assert columnar(store) is store  # type: ignore[arg-type]
    engine = _engine(store)
    for i in range(10):
        engine.encode(f"walk in the park {i}")
    assert len(engine.retrieve("park", top_k=2)) == 2


class _CountingStore(PerMemoryStore):
    """A plain store counting the full scans the engine makes."""

    def __init__(self) -> None:
        super().__init__()
        self.scans = 0

    def list_all(self) -> list[Memory]:
        self.scans += 1
        return super().list_all()


def test_a_plain_store_answers_a_lexical_retrieve_from_one_index() -> None:
    """With s7 on and hybrid candidates, a retrieve over a plain store builds the BM25
    index once (one ``list_all``) for both the shortlist and the term statistics, and
    ranks exactly as the native store does."""
    from emotional_memory import EmotionalMemoryConfig
    from emotional_memory.retrieval import RetrievalConfig

    config = EmotionalMemoryConfig(
        retrieval=RetrievalConfig(lexical_weight=0.4, hybrid_candidates=True)
    )
    plain_store = _CountingStore()
    engines = [
        EmotionalMemory(store, HashingEmbedder(dim=16), clock=TickClock(T0), config=config)
        for store in (InMemoryStore(), plain_store)
    ]
    texts = [f"{w} by the {v} number {i}" for i, (w, v) in enumerate(
        zip(WORDS * 6, ["sea", "town", "hill"] * 10, strict=False))]
    for engine in engines:
        for text in texts:
            engine.encode(text)
    assert isinstance(engines[1]._columnar, StoreAdapter)
    plain_store.scans = 0
    for query in ("rain bridge", "harbour storm sea", "coffee"):
        native, plain = (e.retrieve_with_explanations(query, top_k=3) for e in engines)
        assert [(r.memory.content, r.score) for r in native] == [
            (r.memory.content, r.score) for r in plain
        ]
    assert plain_store.scans == 3


def test_hybrid_candidates_over_every_memory_build_no_index() -> None:
    """Hybrid candidates with s7 off and every memory a candidate need no BM25 index:
    a plain store is scanned once per retrieve (its memories), as before."""
    from emotional_memory import EmotionalMemoryConfig
    from emotional_memory.retrieval import RetrievalConfig

    plain_store = _CountingStore()
    engine = EmotionalMemory(
        plain_store, HashingEmbedder(dim=16), clock=TickClock(T0),
        config=EmotionalMemoryConfig(retrieval=RetrievalConfig(hybrid_candidates=True)),
    )
    for i in range(6):  # fewer than top_k * candidate_multiplier: all are candidates
        engine.encode(f"rain by the sea {i}")
    plain_store.scans = 0
    engine.retrieve("rain", top_k=3)
    assert plain_store.scans == 1


def test_a_store_with_the_earlier_candidate_bank_signature_still_retrieves() -> None:
    """A user's ColumnarStore written before ``candidate_bank`` took ``lexical=`` keeps
    working while the retrieve has no lexical part (the default: s7 and hybrid
    candidates off); the keyword is passed only when there is one."""

    class EarlierSignature(InMemoryStore):
        def candidate_bank(  # type: ignore[override]
            self, embedding: Any, limit: int | None, now: datetime, *,
            also: Any = (), with_memories: bool = False,
        ) -> CandidateBank:
            return super().candidate_bank(
                embedding, limit, now, also=also, with_memories=with_memories
            )

    store = EarlierSignature()
    assert columnar(store) is store
    engine = _engine(store)
    for i in range(12):
        engine.encode(f"note {i}")
    assert len(engine.retrieve("note", top_k=2)) == 2
