"""A scope's batch searches its candidates before the store's transaction
(``stores/_shared/rows/prefetch.py``) and gives the links of a separate engine
encoding one memory at a time through the protocol linker: with exact ties between
old memories and batch-mates, zero vectors, expired batch-mates, every embedding
precision, and stores changed between the early search and the transaction."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from emotional_memory import InMemoryStore, SQLiteStore
from emotional_memory._engine import encoding as engine_module
from emotional_memory.stores._shared.linking import MemoryLinker
from emotional_memory.stores._shared.ranking import cosines, norm, row_norms, stable_top
from emotional_memory.stores._shared.rows import prefetch as prefetch_module
from emotional_memory.stores._shared.rows.linking import SelectedRowLinker
from support.scoped_links import START, by_content, small_link_engine

PAST = START.replace(year=2025)
POOL = 6  # distinct directions: equal vectors give exact ties


def _vectors(picks: list[int], seed: int) -> np.ndarray:
    """Row i = direction ``picks[i]`` of a small pool (the last one the zero vector)."""
    rng = np.random.default_rng(seed)
    pool = rng.standard_normal((POOL, 5))
    pool[-1] = 0.0
    pool[1] = pool[1].astype(np.float32)
    return pool[np.asarray(picks)]


def _store(kind: str, tmp: Path, name: str) -> Any:
    if kind == "sqlite":
        return SQLiteStore(tmp / f"{name}.db")
    return InMemoryStore(embedding_dtype=kind)


def _protocol_linker(target: Any, block: int, owner: Any = None) -> MemoryLinker:
    return MemoryLinker(target, None, 1, owner)


class _Spy:
    """Counts the blocks answered from the early search."""

    def __init__(self, patch: pytest.MonkeyPatch) -> None:
        self.used = 0
        original = prefetch_module.Prefetched.found

        def found(inner: Any, *args: Any, **kwargs: Any) -> Any:
            out = original(inner, *args, **kwargs)
            self.used += out is not None
            return out

        patch.setattr(prefetch_module.Prefetched, "found", found)


def _run(
    store: Any,
    vectors: np.ndarray,
    old: int,
    batch: list[int],
    expired: set[int],
    between: Callable[[Any], None] | None = None,
) -> tuple[Any, list[Any]]:
    """Scope "a" gets memories ``t0..t<old-1>`` one at a time (and the sibling "b"
    two), then ``between`` runs on the store, then the batch ``batch`` (indices
    into ``vectors``) is encoded into "a" as one ``encode_batch``."""
    engine = small_link_engine(store, vectors)
    a, b = engine.scoped("a"), engine.scoped("b")
    for i in range(old):
        a.encode(f"t{i}")
        if i < 2:
            b.encode(f"t{i}")
    if between is not None:
        between(store)
    expiry: list[datetime | None] = [PAST if k in expired else None for k in range(len(batch))]
    a.encode_batch([f"t{i}" for i in batch], expires_at=expiry)
    return engine, a.list_all()


def _oracle(
    kind: str, vectors: np.ndarray, old: int, batch: list[int], expired: set[int],
    between: Callable[[Any], None] | None = None,
) -> list[Any]:
    """The same operations on a separate in-memory engine holding only scope "a" (at
    ``kind``'s precision; SQLite keeps embeddings exactly), each memory encoded alone
    through the protocol linker."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(engine_module, "linker_for", _protocol_linker)
        store = InMemoryStore(embedding_dtype="float64" if kind == "sqlite" else kind)
        engine = small_link_engine(store, vectors)
        a = engine.scoped("a")
        for i in range(old):
            a.encode(f"t{i}")
        if between is not None:
            between(store)
        for k, i in enumerate(batch):
            a.encode(f"t{i}", expires_at=PAST if k in expired else None)
        return a.list_all()


@settings(max_examples=25, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(
    kind=st.sampled_from(["float32", "float64", "float16", "sqlite"]),
    old=st.integers(0, 14),
    batch=st.lists(st.integers(0, 13), min_size=1, max_size=14),
    picks=st.lists(st.integers(0, POOL - 1), min_size=14, max_size=14),
    expired=st.sets(st.integers(0, 13), max_size=2),
    block=st.sampled_from([1, 3, 64]),
)
def test_batches_link_as_one_at_a_time(
    tmp_path_factory: pytest.TempPathFactory, kind: str, old: int, batch: list[int],
    picks: list[int], expired: set[int], block: int,
) -> None:
    vectors = _vectors(picks, seed=old)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(engine_module, "_LINK_SEARCH_BLOCK", block)
        _, got = _run(_store(kind, tmp_path_factory.mktemp("p"), "m"), vectors, old, batch,
                      expired)
    assert by_content(got) == by_content(_oracle(kind, vectors, old, batch, expired))


def _change(content: str, what: str, vectors: np.ndarray) -> Callable[[Any], None]:
    """A write straight to the store between the early search and the transaction."""

    def apply(store: Any) -> None:
        memory = next(m for m in store.list_all() if m.content == content and m.scope == ("a",))
        if what == "delete":
            store.delete(memory.id)
        elif what == "embedding":
            store.update(memory.model_copy(update={"embedding": vectors[5].tolist()}))
        else:  # a new memory in the scope, as close to the batch as its twin
            tag = memory.tag.model_copy(update={"resonance_links": []})
            store.save(memory.model_copy(update={
                "id": "added", "content": "added", "tag": tag}))

    return apply


@pytest.mark.parametrize("what", ["delete", "embedding", "insert"])
@pytest.mark.parametrize("kind", ["float32", "sqlite"])
def test_a_store_changed_after_the_early_search_links_the_same(
    tmp_path: Path, kind: str, what: str
) -> None:
    vectors = _vectors([0, 1, 2, 0, 1, 2, 0, 1, 2, 3, 0, 1, 2, 4], seed=7)
    old, batch = 9, [9, 10, 11, 12, 13]
    change = _change("t3", what, vectors)
    with pytest.MonkeyPatch.context() as patch:
        spy = _Spy(patch)
        original = SelectedRowLinker.prefetch

        def prefetch_then_change(linker: Any, vecs: Any, limit: int) -> None:
            original(linker, vecs, limit)
            change(linker._view.owner)

        patch.setattr(SelectedRowLinker, "prefetch", prefetch_then_change)
        _, got = _run(_store(kind, tmp_path, "m"), vectors, old, batch, set())
    # a deleted row or a changed embedding: searched again; a row added after the
    # early search's rows: searched in the transaction with the batch's own rows
    assert spy.used == (what == "insert")
    assert by_content(got) == by_content(_oracle(kind, vectors, old, batch, set(), change))


@pytest.mark.parametrize("kind", ["float32", "float64", "float16", "sqlite"])
def test_an_unchanged_store_answers_from_the_early_search(tmp_path: Path, kind: str) -> None:
    vectors = _vectors([0, 1, 2, 3, 4, 5] * 4, seed=11)
    with pytest.MonkeyPatch.context() as patch:
        spy = _Spy(patch)
        _, got = _run(_store(kind, tmp_path, "m"), vectors, 10, list(range(10, 24)), set())
    assert spy.used == 1
    assert by_content(got) == by_content(_oracle(kind, vectors, 10, list(range(10, 24)), set()))


@settings(max_examples=60, deadline=None)
@given(
    n=st.integers(0, 40), dim=st.sampled_from([5, 384]), seed=st.integers(0, 10**6),
    limit=st.integers(1, 8), chunk=st.sampled_from([1, 3, 1 << 22]),
)
def test_many_queries_at_once_rank_as_one_at_a_time(
    n: int, dim: int, seed: int, limit: int, chunk: int
) -> None:
    rng = np.random.default_rng(seed)
    matrix = rng.standard_normal((n, dim))
    if n:  # equal rows (ties), a zero row, float32 values, extreme magnitudes
        matrix[rng.integers(0, n, n // 3)] = matrix[0]
        matrix[rng.integers(0, n)] = 0.0
        matrix[::4] = matrix[::4].astype(np.float32)
        matrix[rng.integers(0, n)] *= 1e300
        matrix[rng.integers(0, n)] *= 1e-300
    norms = row_norms(matrix)
    queries = [rng.standard_normal(dim) for _ in range(5)]
    if n:
        queries.append(matrix[0].copy())
    prefixes = [int(p) for p in rng.integers(0, n + 1, len(queries))]
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(prefetch_module, "_CHUNK_ELEMENTS", chunk)
        got = prefetch_module.exact_top_many(matrix, norms, queries, prefixes, limit)
    for query, p, (best, sims) in zip(queries, prefixes, got, strict=True):
        want = cosines(matrix[:p], norms[:p], query, norm(query))
        order = stable_top(-want, limit)
        assert best.tolist() == order.tolist()
        assert sims.tobytes() == want[order].tobytes()  # bit for bit
