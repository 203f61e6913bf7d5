"""What one tenant's worst input can do to the engine, tested against oracles.

* An already-expired memory stored into a scope holding other memories is stored,
  invisible and linked exactly as a separate engine of that scope stores it.
* A filter integer beyond a float's range is refused, naming the field, before
  anything runs (it used to overflow in the stores).
"""

from __future__ import annotations

import asyncio
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from emotional_memory import (
    AsyncEmotionalMemory,
    CoreAffect,
    EmotionalMemory,
    InMemoryStore,
    SQLiteStore,
)
from emotional_memory.embedders import HashingEmbedder
from emotional_memory.filters import parse_where
from emotional_memory.models import Memory
from support.plain_store import PerMemoryStore

T0 = datetime(2025, 3, 1, 9, 0, tzinfo=UTC)


class Clock:
    """A clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> datetime:
        return self.now


def _store(kind: str, tmp: Path, name: str) -> Any:
    if kind == "memory":
        return InMemoryStore()
    if kind == "sqlite":
        return SQLiteStore(tmp / f"{name}.db")
    return PerMemoryStore()


def _held(memories: list[Memory]) -> list[tuple[Any, ...]]:
    """Content, expiry and links (ids mapped to contents) of each memory."""
    content_of = {m.id: m.content for m in memories}
    return [
        (m.content, m.expires_at,
         sorted((content_of[lk.target_id], lk.strength) for lk in m.tag.resonance_links))
        for m in memories
    ]


@pytest.mark.parametrize("kind", ["memory", "sqlite", "plain"])
def test_an_expired_memory_stored_in_a_scope_is_kept_invisible_as_alone(
    kind: str, tmp_path: Path
) -> None:
    clock = Clock()
    embedder = HashingEmbedder(dim=16)
    shared = EmotionalMemory(_store(kind, tmp_path, "shared"), embedder, clock=clock)
    alone = EmotionalMemory(_store(kind, tmp_path, "alone"), embedder, clock=clock)
    view = shared.scoped("a")
    past = T0 - timedelta(seconds=5)
    for engine in (view, alone):
        engine.encode("rain on the harbour bridge")
        gone = engine.encode("rain on the harbour bridge again", expires_at=past)
        assert gone.expires_at == past
        assert engine.get(gone.id) is None
        [kept] = engine.list_all()
        assert kept.content == "rain on the harbour bridge"
        batch = engine.encode_batch(["rain at the harbour", "more rain"],
                                    expires_at=[past, None])
        assert [engine.get(m.id) is None for m in batch] == [True, False]
    assert view.scope == ("a",)
    everything = shared.store.list_all()
    assert all(m.scope == ("a",) for m in everything)
    if kind != "plain":  # a plain store's root links to expired memories (documented)
        assert _held(everything) == _held(alone.store.list_all())
    else:
        assert [m.content for m in everything] == [m.content for m in alone.store.list_all()]
    assert [m.content for m in view.retrieve("rain harbour", 5)] == \
        [m.content for m in alone.retrieve("rain harbour", 5)]
    shared.close()
    alone.close()


@pytest.mark.parametrize("kind", ["memory", "sqlite", "plain"])
@pytest.mark.parametrize(
    "where",
    [
        {"valence": {"$gt": 10**400}},
        {"retrieval_count": -(10**309)},
        {"n": {"$in": [1, 2**1100]}},
        {"$or": [{"arousal": {"$lte": 0.5}}, {"dominance": {"$lt": -(2**1024)}}]},
    ],
)
def test_an_integer_beyond_a_floats_range_is_refused_naming_the_field(
    kind: str, where: dict[str, Any], tmp_path: Path
) -> None:
    engine = EmotionalMemory(_store(kind, tmp_path, "e"), HashingEmbedder(dim=16))
    engine.encode("hello there", metadata={"n": 1})
    field = next(iter(where)) if "$or" not in where else "dominance"
    with pytest.raises(ValueError, match=f"'{field}'.*range of a float"):
        parse_where(where)
    for call in (lambda: engine.retrieve("hello", 3, where=where),
                 lambda: engine.list_all(where=where)):
        with pytest.raises(ValueError, match=f"'{field}'.*range of a float"):
            call()
    assert len(engine) == 1 and engine.list_all()[0].tag.retrieval_count == 0
    # integers a float holds are accepted and compare exactly
    big = int(sys.float_info.max)
    assert len(engine.list_all(where={"n": {"$lt": big}})) == 1
    assert len(engine.list_all(where={"valence": {"$gt": -big}})) == 1
    assert len(engine.list_all(where={"retrieval_count": {"$lt": 2**70}})) == 1
    engine.close()


def test_every_top_k_is_served_by_a_few_programs_with_the_exact_seeds() -> None:
    import numpy as np

    from emotional_memory.decay import DecayConfig
    from emotional_memory.kernel.params import pack_params
    from emotional_memory.kernel.plan import retrieval_plan_packed, top_k_bucket
    from emotional_memory.retrieval import RetrievalConfig, scoring_params

    rng = np.random.default_rng(7)
    n, d = 64, 8
    embedding = rng.normal(size=(n, d))
    features = rng.uniform(0, 1, size=(n, 13))
    valid = np.arange(n) < 50  # padding rows at the end
    targets = rng.integers(-1, n, size=(n, 3)).astype(np.int32)
    strengths = rng.uniform(0, 1, size=(n, 3))
    params = pack_params(scoring_params(RetrievalConfig(), DecayConfig()))
    query = rng.normal(size=d)
    state = rng.uniform(0, 1, size=9)
    for k in (1, 2, 5, 7, 8, 9, 23, 49, 50, 64):
        exact = retrieval_plan_packed(params, query, state, embedding, features, valid,
                                      targets, strengths, top_k=k, hops=2, spread=True)
        bucketed = retrieval_plan_packed(params, query, state, embedding, features, valid,
                                         targets, strengths, top_k=top_k_bucket(k), hops=2,
                                         spread=True, seed_count=np.int32(k))
        assert top_k_bucket(k) >= k
        np.testing.assert_array_equal(np.asarray(exact[0]), np.asarray(bucketed[0]))
        np.testing.assert_array_equal(np.asarray(exact[1]), np.asarray(bucketed[1]))


def test_a_new_top_k_compiles_no_new_program_once_its_bucket_is_warm() -> None:
    from emotional_memory.kernel.plan import retrieval_plan_packed

    engine = EmotionalMemory(InMemoryStore(), HashingEmbedder(dim=16))
    engine.encode_batch([f"note {i} about rain and the harbour" for i in range(300)])
    before = retrieval_plan_packed._cache_size()
    sizes = [len(engine.retrieve("rain harbour", k)) for k in range(1, 41)]
    grown = retrieval_plan_packed._cache_size() - before
    assert sizes == list(range(1, 41))
    assert grown <= 8, f"{grown} programs compiled for 40 values of top_k"
    engine.close()


# ------------------------------------------------------------- concurrency per scope

WORDS = ["rain", "bridge", "coffee", "storm", "harbour", "exam", "garden", "train"]
TREES = [(("a",), ("a", "x")), (("b",), ("b", "y")), (("c",), ("c", "z"))]
"""Each worker owns one subtree: its top scope and a sub-scope of it."""

scope_op = st.one_of(
    st.tuples(st.just("encode"), st.integers(0, 1),
              st.lists(st.integers(0, len(WORDS) - 1), min_size=1, max_size=3),
              st.floats(-1, 1), st.floats(0, 1)),
    st.tuples(st.just("retrieve"), st.integers(0, 1),
              st.lists(st.integers(0, len(WORDS) - 1), min_size=1, max_size=2),
              st.integers(1, 4)),
    st.tuples(st.just("delete"), st.integers(0, 1), st.integers(0, 9)),
    st.tuples(st.just("affect"), st.integers(0, 1), st.floats(-1, 1), st.floats(0, 1)),
)


def _explained(results: list[Any]) -> list[tuple[Any, ...]]:
    return [(r.memory.content, r.score, tuple(r.breakdown.raw_signals)) for r in results]


def _tags(memories: list[Memory]) -> list[tuple[Any, ...]]:
    content_of = {m.id: m.content for m in memories}
    return [
        (m.content, m.metadata, repr(m.tag.model_dump(mode="json", exclude={"resonance_links"})),
         sorted((content_of.get(lk.target_id, "?"), lk.strength) for lk in m.tag.resonance_links))
        for m in memories
    ]


def _play(views: tuple[Any, Any], ops: list[tuple[Any, ...]], tag: str) -> list[Any]:
    """Run ``ops`` on a subtree's two views (top, sub); what each op answered."""
    out: list[Any] = []
    made: list[list[str]] = [[], []]
    for step, op in enumerate(ops):
        view = views[op[1]]
        if op[0] == "encode":
            text = " ".join(WORDS[w] for w in op[2]) + f" {tag} {step}"
            m = view.encode(text, metadata={"step": step},
                            affect=CoreAffect(valence=op[3], arousal=op[4]))
            made[op[1]].append(m.id)
            out.append(m.content)
        elif op[0] == "retrieve":
            query = " ".join(WORDS[w] for w in op[2])
            out.append(_explained(view.retrieve_with_explanations(query, op[3])))
        elif op[0] == "delete":
            ids = made[op[1]]
            out.append(view.delete(ids.pop(op[2] % len(ids))) if ids else None)
        else:
            out.append(view.set_affect(CoreAffect(valence=op[2], arousal=op[3])).snapshot())
    return out


async def _play_async(views: tuple[Any, Any], ops: list[tuple[Any, ...]], tag: str) -> list[Any]:
    """:func:`_play` through async views (each op awaited in turn)."""
    out: list[Any] = []
    made: list[list[str]] = [[], []]
    for step, op in enumerate(ops):
        view = views[op[1]]
        if op[0] == "encode":
            text = " ".join(WORDS[w] for w in op[2]) + f" {tag} {step}"
            m = await view.encode(text, metadata={"step": step},
                                  affect=CoreAffect(valence=op[3], arousal=op[4]))
            made[op[1]].append(m.id)
            out.append(m.content)
        elif op[0] == "retrieve":
            query = " ".join(WORDS[w] for w in op[2])
            out.append(_explained(await view.retrieve_with_explanations(query, op[3])))
        elif op[0] == "delete":
            ids = made[op[1]]
            out.append(await view.delete(ids.pop(op[2] % len(ids))) if ids else None)
        else:  # under the scope's turn, as the service does it
            state = await view._run(view.engine.set_affect,
                                    CoreAffect(valence=op[2], arousal=op[3]))
            out.append(state.snapshot())
        await asyncio.sleep(0)
    return out


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
@pytest.mark.parametrize("mode", ["threads", "tasks"])
@settings(max_examples=5, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(plans=st.lists(st.lists(scope_op, min_size=3, max_size=10), min_size=3, max_size=3))
def test_sibling_and_nested_scopes_interleaved_answer_as_separate_engines(
    kind: str, mode: str, plans: list[list[tuple[Any, ...]]], tmp_path_factory: Any
) -> None:
    tmp = tmp_path_factory.mktemp("concurrent")
    clock = Clock()
    embedder = HashingEmbedder(dim=16)
    shared = EmotionalMemory(_store(kind, tmp, "shared"), embedder, clock=clock)
    alone = [EmotionalMemory(_store(kind, tmp, f"alone{i}"), embedder, clock=clock)
             for i in range(len(TREES))]
    # the oracle: each subtree alone in its own engine (its top scope is that
    # engine's view of the same path, so scope paths and sub-scopes match)
    oracle_views = [(e.scoped(*top), e.scoped(*sub))
                    for e, (top, sub) in zip(alone, TREES, strict=True)]
    expected = [_play(v, ops, str(i))
                for i, (v, ops) in enumerate(zip(oracle_views, plans, strict=True))]
    roots_seen: list[int] = []
    if mode == "threads":
        views = [(shared.scoped(*top), shared.scoped(*sub)) for top, sub in TREES]
        with ThreadPoolExecutor(len(TREES) + 1) as pool:
            futures = [pool.submit(_play, v, ops, str(i))
                       for i, (v, ops) in enumerate(zip(views, plans, strict=True))]
            while not all(f.done() for f in futures):  # the root excludes them all
                roots_seen.append(len(shared))
            got = [f.result() for f in futures]
    else:
        root = AsyncEmotionalMemory.from_engine(shared)
        async_views = [(root.scoped(*top), root.scoped(*sub)) for top, sub in TREES]
        views = [(a.engine, b.engine) for a, b in async_views]

        async def run_all() -> list[list[Any]]:
            async def watch() -> None:
                for _ in range(20):
                    roots_seen.append(await root.count())
                    await asyncio.sleep(0)
            *results, _ = await asyncio.gather(
                *(_play_async(v, ops, str(i))
                  for i, (v, ops) in enumerate(zip(async_views, plans, strict=True))),
                watch(),
            )
            return list(results)

        got = asyncio.run(run_all())
    assert got == expected
    for pair, oracle_pair in zip(views, oracle_views, strict=True):
        for mine, theirs in zip(pair, oracle_pair, strict=True):
            assert _tags(mine.list_all()) == _tags(theirs.list_all())
            assert mine.get_state().snapshot() == theirs.get_state().snapshot()
    assert len(shared) == sum(len(e) for e in alone)
    assert all(0 <= n <= len(shared) + 30 for n in roots_seen)
    shared.close()
    for e in alone:
        e.close()


class _MeetingEmbedder(HashingEmbedder):
    """Embeds texts starting with "meet" only once two such calls are inside at once."""

    def __init__(self, timeout: float) -> None:
        super().__init__(dim=16)
        self.barrier = threading.Barrier(2, timeout=timeout)

    def embed(self, text: str) -> Any:
        if text.startswith("meet"):
            self.barrier.wait()
        return super().embed(text)


def _encode_both(engine: EmotionalMemory, paths: list[tuple[str, ...]]) -> list[Any]:
    views = [engine.scoped(*p) if p else engine for p in paths]

    def encode(view: EmotionalMemory) -> Any:
        try:
            return view.encode("meet at the harbour").scope
        except threading.BrokenBarrierError as exc:
            return exc

    with ThreadPoolExecutor(2) as pool:
        return list(pool.map(encode, views))


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
def test_disjoint_scopes_run_at_once_and_overlapping_ones_take_turns(
    kind: str, tmp_path: Path
) -> None:
    # siblings: both encodes must be inside at once to get past the barrier
    engine = EmotionalMemory(_store(kind, tmp_path, "s"), _MeetingEmbedder(timeout=60))
    assert _encode_both(engine, [("a",), ("b",)]) == [("a",), ("b",)]
    assert _encode_both(engine, [("a", "x"), ("b", "y", "z")]) == [("a", "x"), ("b", "y", "z")]
    engine.close()
    # a scope and its sub-scope, or the root and any scope: never inside together
    for paths in ([("a",), ("a", "x")], [(), ("b",)], [("a", "x"), ("a",)]):
        engine = EmotionalMemory(_store(kind, tmp_path, f"o{len(paths[0])}"),
                                 _MeetingEmbedder(timeout=1.5))
        got = _encode_both(engine, paths)
        assert all(isinstance(g, threading.BrokenBarrierError) for g in got), got
        assert len(engine) == 0
        engine.close()


@settings(max_examples=25, deadline=None)
@given(paths=st.lists(st.lists(st.sampled_from(["a", "b", "c"]), max_size=3).map(tuple),
                      min_size=2, max_size=8))
def test_scope_locks_never_let_overlapping_paths_in_together(
    paths: list[tuple[str, ...]]
) -> None:
    from emotional_memory._scope_locks import ScopeLocks, overlap

    locks = ScopeLocks()
    inside: list[tuple[str, ...]] = []
    guard = threading.Lock()
    clashes: list[tuple[Any, Any]] = []

    def work(path: tuple[str, ...]) -> None:
        for _ in range(20):
            with locks.hold(path), locks.hold(path):  # re-entrant
                with guard:
                    clashes.extend((path, p) for p in inside if overlap(path, p))
                    inside.append(path)
                time.sleep(0.0005)
                with guard:
                    inside.remove(path)

    with ThreadPoolExecutor(len(paths)) as pool:
        list(pool.map(work, paths))
    assert clashes == []
    assert locks.acquire(("a",), blocking=False)
    assert not _other_thread_acquires(locks, ("a", "b")) and _other_thread_acquires(locks, ("b",))
    locks.release(("a",))
    assert _other_thread_acquires(locks, ("a", "b"))


def _other_thread_acquires(locks: Any, path: tuple[str, ...]) -> bool:
    with ThreadPoolExecutor(1) as pool:
        took: bool = pool.submit(locks.acquire, path, False).result()
    if took:  # release it from a thread (the owner's identity is only for nesting)
        locks.release(path)
    return took


# ------------------------------------------------------------------ paging in the store


@pytest.mark.parametrize("kind", ["memory", "sqlite", "plain"])
@settings(max_examples=8, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    deletes=st.lists(st.integers(0, 39), max_size=8),
    pages=st.lists(st.tuples(st.sampled_from([(), ("a",), ("a", "x"), ("b",)]),
                             st.sampled_from([None, {"n": {"$lt": 20}}]),
                             st.one_of(st.none(), st.integers(0, 50)), st.integers(0, 45)),
                   min_size=1, max_size=6),
)
def test_a_page_is_the_slice_of_the_whole_list(
    kind: str, deletes: list[int], pages: list[Any], tmp_path_factory: Any
) -> None:
    clock = Clock()
    engine = EmotionalMemory(_store(kind, tmp_path_factory.mktemp("pages"), "p"),
                             HashingEmbedder(dim=8), clock=clock)
    made = []
    for i in range(40):
        path = [(), ("a",), ("a", "x"), ("b",)][i % 4]
        view = engine.scoped(*path) if path else engine
        expires = T0 + timedelta(minutes=5) if i % 7 == 3 else None
        made.append(view.encode(f"memory {i}", metadata={"n": i}, expires_at=expires))
    for i in sorted(set(deletes)):
        engine.delete(made[i].id)
    clock.now = T0 + timedelta(minutes=10)  # some have expired
    for path, where, limit, offset in pages:
        view = engine.scoped(*path) if path else engine
        whole = [m.id for m in view.list_all(where=where)]
        stop = None if limit is None else offset + limit
        page = view.list_all(where=where, limit=limit, offset=offset)
        assert [m.id for m in page] == whole[offset:stop]
    with pytest.raises(ValueError, match="offset"):
        engine.list_all(offset=-1)
    with pytest.raises(TypeError, match="limit"):
        engine.list_all(limit=2.5)  # type: ignore[arg-type]
    engine.close()
