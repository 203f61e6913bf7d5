"""``encode_batch``'s row path (``stores/_linking.py``) against the protocol path.

``InMemoryStore`` saves a block of new memories as rows, reads the candidates' link
columns from its rows and rewrites packed links in place; every other store goes
through ``MemoryLinker`` (``save`` / ``get`` / ``update`` / searches, as one
``encode`` per memory does). Both must build the very same store: links, their order,
strengths, types, every float, the returned memories and the final state. Also the
pipelined blocks (a block linked while the next is searched), rollback of a failing
batch and SQLite. ``score_links`` and the row linker's bookkeeping:
tests/engine/test_encode_rows_links.py.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from emotional_memory import (
    EmotionalMemory,
    EmotionalMemoryConfig,
    InMemoryStore,
    Memory,
    ResonanceConfig,
    SQLiteStore,
)
from emotional_memory._engine import encoding as engine_module
from emotional_memory.replay import TickClock
from emotional_memory.stores._shared.linking import MemoryLinker, linker_for
from emotional_memory.stores._shared.rows import linking as linking_module
from emotional_memory.stores._shared.rows import search as search_module
from emotional_memory.stores._shared.rows.linking import RowLinker
from support.plain_store import PerMemoryStore
from support.row_path import (
    DIM,
    START,
    FailingAppraisal,
    TableEmbedder,
    ZoneClock,
    canon,
    configs,
    embeddings,
    make,
    returned,
    run,
    text,
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    vectors=embeddings,
    config=configs,
    dtype=st.sampled_from(["float32", "float64", "float16", "bfloat16"]),
    block=st.integers(1, 9),
    cuts=st.lists(st.integers(1, 35), max_size=3),
    step=st.sampled_from([timedelta(0), timedelta(seconds=1), timedelta(minutes=47)]),
    whole_every=st.sampled_from([0, 3]),
)
def test_row_path_builds_the_same_store_as_the_protocol_path(
    vectors: list[list[float] | None], config: EmotionalMemoryConfig, dtype: Any, block: int,
    cuts: list[int], step: timedelta, whole_every: int,
) -> None:
    original = engine_module._LINK_SEARCH_BLOCK
    engine_module._LINK_SEARCH_BLOCK = block
    try:
        rows = InMemoryStore(embedding_dtype=dtype)
        plain = PerMemoryStore(InMemoryStore(embedding_dtype=dtype))
        assert isinstance(linker_for(rows, 2), RowLinker)
        assert isinstance(linker_for(plain, 2), MemoryLinker)  # type: ignore[arg-type]
        by_rows = make(rows, vectors, config, ZoneClock(step, whole_every))
        by_protocol = make(plain, vectors, config, ZoneClock(step, whole_every))
        out_rows = run(by_rows, len(vectors), cuts)
        out_protocol = run(by_protocol, len(vectors), cuts)
    finally:
        engine_module._LINK_SEARCH_BLOCK = original
    assert canon(by_rows) == canon(by_protocol)
    for a, b in zip(out_rows, out_protocol, strict=True):
        assert returned(a, by_rows) == returned(b, by_protocol)
    _assert_no_stale_recent(rows)


def _assert_no_stale_recent(store: InMemoryStore) -> None:
    """Every memory the store keeps as a recent object equals its row."""
    recent = {mid: store._recent[mid] for mid in list(store._recent.keys())}
    store._recent.clear()
    for mid, memory in recent.items():
        assert store.get(mid) == memory


@pytest.mark.parametrize("switch", ["every search", "batches only"])
def test_encode_batch_with_the_jitted_search_matches_the_protocol_path(
    monkeypatch: pytest.MonkeyPatch, switch: str
) -> None:
    """Random unit vectors (not float32 numbers: kept aside), blocks of 128, several
    batches, the jitted (XLA) batched search switched on from 256 rows (for every
    search, or for batches of at least 100 queries: the last, short block of each
    batch then takes the numpy pass)."""
    if switch == "every search":
        monkeypatch.setattr(search_module, "_JAX_MIN_ROWS", 256)
    else:
        monkeypatch.setattr(search_module, "_JAX_BATCH_MIN_ROWS", 256)
        monkeypatch.setattr(search_module, "_JAX_BATCH_MIN_QUERIES", 100)
    monkeypatch.setattr(engine_module, "_LINK_SEARCH_BLOCK", 128)
    rng = np.random.default_rng(7)
    vecs = rng.standard_normal((1200, 16))
    vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
    vectors = vecs.tolist()
    vectors[700] = vectors[699]  # a tie
    cfg = EmotionalMemoryConfig()
    rows = make(InMemoryStore(), vectors, cfg, TickClock(START, timedelta(seconds=2)))
    plain = make(PerMemoryStore(), vectors, cfg, TickClock(START, timedelta(seconds=2)))
    for engine in (rows, plain):
        for start in range(0, 1200, 400):
            engine.encode_batch([text(i) for i in range(start, start + 400)])
    assert canon(rows) == canon(plain)


def test_a_block_is_linked_while_the_next_blocks_search_runs(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The row linker starts a block's jitted search and hands the engine a lazy
    iterator: the previous block is linked while that search may still run, and no
    row is written before the running search has been fetched (it reads the search
    matrix in place)."""
    monkeypatch.setattr(search_module, "_JAX_BATCH_MIN_ROWS", 256)
    monkeypatch.setattr(search_module, "_JAX_BATCH_MIN_QUERIES", 100)
    monkeypatch.setattr(engine_module, "_LINK_SEARCH_BLOCK", 128)
    events: list[tuple[str, int]] = []
    running: set[int] = set()
    saves_while_running: list[set[int]] = []
    links_while_running: list[int] = []

    start = search_module.EmbeddingSearch._start_search_batch
    fetch = search_module.PendingSearch.fetch
    save = linking_module.RowLinking._link_save
    link = linking_module.RowLinker.link

    def started(self: Any, *args: Any) -> Any:
        pending = start(self, *args)
        if any(not isinstance(b[2], np.ndarray) for b in pending.blocks):  # jitted
            running.add(id(pending))
        events.append(("start", id(pending)))
        return pending

    def fetched(self: Any) -> None:
        fetch(self)
        running.discard(id(self))

    def saved(self: Any, *args: Any) -> Any:
        saves_while_running.append(set(running))
        return save(self, *args)

    def linked(self: Any, *args: Any) -> None:
        links_while_running.append(len(running))
        link(self, *args)

    monkeypatch.setattr(search_module.EmbeddingSearch, "_start_search_batch", started)
    monkeypatch.setattr(search_module.PendingSearch, "fetch", fetched)
    monkeypatch.setattr(linking_module.RowLinking, "_link_save", saved)
    monkeypatch.setattr(linking_module.RowLinker, "link", linked)
    rng = np.random.default_rng(3)
    vecs = rng.standard_normal((900, 16))
    vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
    engine = make(InMemoryStore(), vecs.tolist(), EmotionalMemoryConfig(),
                  TickClock(START, timedelta(seconds=2)))
    engine.encode_batch([text(i) for i in range(900)])
    assert len(saves_while_running) == 8  # blocks of 128
    assert all(not r for r in saves_while_running)
    assert sum(1 for r in links_while_running if r) >= 128  # a whole block overlapped
    assert not running  # every search fetched by the end
    assert sum(1 for kind, _ in events if kind == "start") >= 2


@pytest.fixture
def started_searches(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """The jitted batched search from 256 rows and 16 queries, 32 queries per XLA
    block; every batched search started is recorded (its ``PendingSearch``)."""
    monkeypatch.setattr(search_module, "_JAX_BATCH_MIN_ROWS", 256)
    monkeypatch.setattr(search_module, "_JAX_BATCH_MIN_QUERIES", 16)
    monkeypatch.setattr(search_module, "_QUERY_BLOCK", 32)
    pendings: list[Any] = []
    start = search_module.EmbeddingSearch._start_search_batch

    def started(self: Any, *args: Any) -> Any:
        pending = start(self, *args)
        pendings.append(pending)
        return pending

    monkeypatch.setattr(search_module.EmbeddingSearch, "_start_search_batch", started)
    return pendings


def test_a_blocks_first_queries_are_linked_before_its_last_are_searched(
    monkeypatch: pytest.MonkeyPatch, started_searches: list[Any]
) -> None:
    """Within one block, the jitted search runs in blocks of queries and each is
    finished when its memories' candidates are first read: the first memories are
    linked while later query blocks are still pending, and the store equals the
    protocol path's."""
    pendings = started_searches
    unfinished_at_link: list[int] = []
    link = linking_module.RowLinker.link

    def linked(self: Any, *args: Any) -> None:
        pending = pendings[-1]
        unfinished_at_link.append(len(pending.blocks) - pending._done)
        link(self, *args)

    monkeypatch.setattr(linking_module.RowLinker, "link", linked)
    rng = np.random.default_rng(5)
    vecs = rng.standard_normal((600, 16))
    vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
    cfg = EmotionalMemoryConfig()
    rows = make(InMemoryStore(), vecs.tolist(), cfg, TickClock(START, timedelta(seconds=2)))
    plain = make(PerMemoryStore(), vecs.tolist(), cfg, TickClock(START, timedelta(seconds=2)))
    for engine in (rows, plain):
        engine.encode_batch([text(i) for i in range(300)])
        engine.encode_batch([text(i) for i in range(300, 600)])  # one block, 10 query blocks
    assert canon(rows) == canon(plain)
    assert len(pendings[-1].blocks) == 10
    # the first memory is linked once its chunk of candidate columns is read: the
    # query blocks of that chunk are finished, the later ones not yet
    assert unfinished_at_link[-300] == 10 - linking_module._COLUMN_CHUNK // 32
    assert unfinished_at_link[-1] == 0


@pytest.mark.parametrize("fail", ["linking", "appraisal"])
def test_a_failure_fetches_the_running_search_before_the_rollback_writes(
    monkeypatch: pytest.MonkeyPatch, started_searches: list[Any], fail: str
) -> None:
    """A failure while block k is linked (block k+1's search started) or while block
    k+1 is prepared (block k's search running): the rollback's row writes come only
    after every started search was fetched, and the store is as before the batch."""
    monkeypatch.setattr(engine_module, "_LINK_SEARCH_BLOCK", 128)
    pendings = started_searches
    writes_while_running: list[str] = []

    def running() -> bool:
        return any(
            not isinstance(block[2], np.ndarray)
            for pending in pendings for block in pending.blocks[pending._done:]
        )

    for name in ("_write_row", "_clear_embedding", "_ensure_capacity", "_compact"):
        original = getattr(InMemoryStore, name)

        def spy(self: Any, *args: Any, _original: Any = original, _name: str = name,
                **kwargs: Any) -> Any:
            if running():
                writes_while_running.append(_name)
            return _original(self, *args, **kwargs)

        monkeypatch.setattr(InMemoryStore, name, spy)
    rng = np.random.default_rng(3)
    vecs = rng.standard_normal((700, 16))
    vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
    engine = make(InMemoryStore(), vecs.tolist(), EmotionalMemoryConfig(),
                  TickClock(START, timedelta(seconds=2)), FailingAppraisal())
    engine.encode_batch([text(i) for i in range(300)])
    before = canon(engine)
    batch = [text(i) for i in range(300, 600)]
    if fail == "linking":
        calls = [0]
        real = engine_module.score_links

        def failing(*args: Any, **kwargs: Any) -> Any:
            calls[0] += 1
            if calls[0] == 128 + 10:  # the 10th memory of the second block
                raise RuntimeError("scoring failed")
            return real(*args, **kwargs)

        monkeypatch.setattr(engine_module, "score_links", failing)
    else:
        batch.append(text(600, " boom"))  # its appraisal fails: a block still searching
    with pytest.raises(RuntimeError):
        engine.encode_batch(batch)
    assert len(pendings) >= 2
    assert not running()
    assert writes_while_running == []
    assert canon(engine) == before


def test_a_store_without_transactions_links_each_block_before_saving_the_next() -> None:
    """Protocol stores (no all-or-nothing writes) keep the sequential order: a
    failure while preparing a memory leaves every memory saved before it linked,
    as encoding them one ``encode`` at a time would."""

    class NoTransactions(PerMemoryStore):
        def __getattribute__(self, name: str) -> Any:
            if name == "transaction":
                raise AttributeError(name)
            return super().__getattribute__(name)

    vectors = [[1.0, 0.1 * i, 0.0, 0.0] for i in range(6)]
    cfg = EmotionalMemoryConfig()
    batch = NoTransactions()
    one_by_one = PerMemoryStore()
    engine = make(batch, vectors, cfg, TickClock(START, timedelta(seconds=2)),
                  FailingAppraisal())
    reference = make(one_by_one, vectors, cfg, TickClock(START, timedelta(seconds=2)),
                     FailingAppraisal())
    engine.encode_batch([text(0), text(1)])
    with pytest.raises(RuntimeError):
        engine.encode_batch([text(2), text(3), text(4, " boom")])
    for i in range(4):
        reference.encode(text(i))

    def memories(e: EmotionalMemory) -> str:  # the state differs: the batch failed
        out = json.dumps(e.export_memories())
        for i, memory in enumerate(e.list_all()):
            out = out.replace(memory.id, f"#{i}")
        return out

    assert len(batch) == 4
    assert memories(engine) == memories(reference)


@pytest.mark.parametrize("chunk", [1, 7, 64])
@pytest.mark.parametrize("kind", ["aside", "float32", "mixed"])
def test_candidate_columns_read_in_chunks_match_the_protocol_path(
    chunk: int, kind: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The row path gathers the candidates' columns of several memories at once (the
    float64 arrays kept aside uncopied when every candidate's is): every kind of row
    (kept aside, float32-exact, without an embedding) and chunk boundaries anywhere."""
    monkeypatch.setattr(linking_module, "_COLUMN_CHUNK", chunk)
    monkeypatch.setattr(engine_module, "_LINK_SEARCH_BLOCK", 50)
    rng = np.random.default_rng(11)
    vecs = rng.standard_normal((160, 8))
    vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
    if kind != "aside":
        vecs = vecs.astype(np.float32).astype(np.float64)  # float32 numbers: not aside
    vectors: list[list[float] | None] = vecs.tolist()
    if kind == "mixed":
        for i in range(0, 160, 3):
            vectors[i] = (vecs[i] + 1e-9).tolist()  # not float32 numbers: kept aside
        for i in range(5, 160, 11):
            vectors[i] = None if i % 2 else []
    cfg = EmotionalMemoryConfig()
    rows = make(InMemoryStore(), vectors, cfg, TickClock(START, timedelta(seconds=2)))
    plain = make(PerMemoryStore(), vectors, cfg, TickClock(START, timedelta(seconds=2)))
    outs = [
        [engine.encode_batch([text(i) for i in range(a, a + 80)]) for a in (0, 80)]
        for engine in (rows, plain)
    ]
    assert canon(rows) == canon(plain)
    for a, b in zip(*outs, strict=True):
        assert returned(a, rows) == returned(b, plain)
    for memory in outs[0][-1]:  # the store's copy, with the links of its own step
        stored = rows.store.get(memory.id)
        assert stored is not None
        same = stored.model_copy(update={"tag": stored.tag.model_copy(
            update={"resonance_links": memory.tag.resonance_links})})
        assert memory == same and memory.model_dump() == same.model_dump()
    assert outs[0][-1][-1] == rows.store.get(outs[0][-1][-1].id)  # the last: all of it


@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_failing_appraisal_mid_batch_rolls_back_links_written_in_place(
    dtype: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(engine_module, "_LINK_SEARCH_BLOCK", 8)
    rng = np.random.default_rng(3)
    vectors = rng.standard_normal((200, DIM)).tolist()
    cfg = EmotionalMemoryConfig(
        resonance=ResonanceConfig(threshold=0.05, max_links=3, candidate_multiplier=2)
    )
    store = InMemoryStore(embedding_dtype=dtype)
    engine = make(store, vectors, cfg, TickClock(START, timedelta(seconds=5)), FailingAppraisal())
    engine.encode_batch([text(i) for i in range(40)])
    before, state, count = canon(engine), engine.save_state(), len(engine)
    ids = [m.id for m in engine.list_all()]
    for mid in ids[-10:]:
        store.get(mid)  # recent objects, which in-place link writes must drop
    texts = [text(i, " boom" if i == 97 else "") for i in range(40, 120)]
    with pytest.raises(RuntimeError, match="appraisal failed"):
        engine.encode_batch(texts)  # blocks 40..95 were saved and linked first
    assert len(engine) == count
    assert canon(engine) == before
    assert engine.save_state() == state
    _assert_no_stale_recent(store)
    # the same steps on the protocol path, then the batch without the failure
    plain = make(PerMemoryStore(InMemoryStore(embedding_dtype=dtype)), vectors, cfg,
                 TickClock(START, timedelta(seconds=5)), FailingAppraisal())
    plain.encode_batch([text(i) for i in range(40)])
    with pytest.raises(RuntimeError, match="appraisal failed"):
        plain.encode_batch(texts)
    texts[57] = text(97)
    for twin in (engine, plain):
        twin.encode_batch(texts)
    assert canon(engine) == canon(plain)


@pytest.mark.parametrize("fail_at", [3, 13, 30])
def test_failure_while_a_block_is_linked_rolls_back_the_links_held_back(
    fail_at: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Links of compact rows are held back while a block is linked and written once
    at its end: a failure in the middle of a block (links held, some blocks already
    written) leaves the store, the state and the recent objects as they were."""
    monkeypatch.setattr(engine_module, "_LINK_SEARCH_BLOCK", 8)
    rng = np.random.default_rng(5)
    vectors = rng.standard_normal((120, DIM)).tolist()
    cfg = EmotionalMemoryConfig(resonance=ResonanceConfig(threshold=0.05, max_links=3))
    store = InMemoryStore()
    engine = make(store, vectors, cfg, TickClock(START, timedelta(0)))
    engine.encode_batch([text(i) for i in range(40)])
    before, state = canon(engine), engine.save_state()
    for memory in engine.list_all()[-20:]:
        store.get(memory.id)  # recent objects, which the held-back links must not stale
    calls = [0]
    real = engine_module.score_links

    def failing(*args: Any, **kwargs: Any) -> Any:
        calls[0] += 1
        if calls[0] == fail_at:
            raise RuntimeError("scoring failed")
        return real(*args, **kwargs)

    monkeypatch.setattr(engine_module, "score_links", failing)
    with pytest.raises(RuntimeError, match="scoring failed"):
        engine.encode_batch([text(i) for i in range(40, 80)])
    assert canon(engine) == before
    assert engine.save_state() == state
    _assert_no_stale_recent(store)
    # the same steps on the protocol path, then the batch (a constant clock: the
    # paths read it a different number of times before failing)
    plain = make(PerMemoryStore(), vectors, cfg, TickClock(START, timedelta(0)))
    monkeypatch.setattr(engine_module, "score_links", real)
    plain.encode_batch([text(i) for i in range(40)])
    calls[0] = 0
    monkeypatch.setattr(engine_module, "score_links", failing)
    with pytest.raises(RuntimeError, match="scoring failed"):
        plain.encode_batch([text(i) for i in range(40, 80)])
    monkeypatch.setattr(engine_module, "score_links", real)
    for twin in (engine, plain):
        twin.encode_batch([text(i) for i in range(40, 80)])
    assert canon(engine) == canon(plain)


def test_failing_embedder_writes_nothing() -> None:
    class Broken(TableEmbedder):
        def embed_batch(self, texts: Sequence[str]) -> list[list[float] | None]:
            raise RuntimeError("embedder down")

    store = InMemoryStore()
    engine = make(store, [[1.0, 0.0, 0.0, 0.0]] * 30, EmotionalMemoryConfig(),
                  TickClock(START, timedelta(seconds=1)))
    engine.encode_batch([text(i) for i in range(20)])
    before = canon(engine)
    engine.embedder = Broken([])
    with pytest.raises(RuntimeError, match="embedder down"):
        engine.encode_batch([text(i) for i in range(20, 30)])
    assert canon(engine) == before


def test_subclass_overriding_a_protocol_method_is_linked_through_it() -> None:
    class Counting(InMemoryStore):
        def __init__(self) -> None:
            super().__init__()
            self.updates = 0

        def update(self, memory: Memory) -> None:
            self.updates += 1
            super().update(memory)

    store = Counting()
    assert isinstance(linker_for(store, 4), MemoryLinker)
    engine = make(store, [[1.0, 0.5, 0.0, 0.0]] * 10, EmotionalMemoryConfig(),
                  TickClock(START, timedelta(seconds=1)))
    engine.encode_batch([text(i) for i in range(10)])
    assert store.updates > 0
    assert isinstance(linker_for(InMemoryStore(), 4), RowLinker)


def test_sqlite_batch_equals_repeated_encode_and_survives_reopening(tmp_path: Path) -> None:
    rng = np.random.default_rng(5)
    vectors = rng.standard_normal((60, DIM)).tolist()
    cfg = EmotionalMemoryConfig(
        resonance=ResonanceConfig(threshold=0.05, max_links=3, candidate_multiplier=2)
    )
    batch_path, single_path = tmp_path / "batch.db", tmp_path / "single.db"
    with SQLiteStore(batch_path) as store:
        engine = make(store, vectors, cfg, TickClock(START, timedelta(seconds=9)))
        engine.encode_batch([text(i) for i in range(25)])
        engine.encode_batch([text(i) for i in range(25, 60)])
        written = canon(engine)
    with SQLiteStore(single_path) as store:
        single = make(store, vectors, cfg, TickClock(START, timedelta(seconds=9)))
        for i in range(60):
            single.encode(text(i))
        assert canon(single) == written
    with SQLiteStore(batch_path) as store:
        reopened = make(store, vectors, cfg, TickClock(START, timedelta(seconds=9)))
        reopened.load_state(json.loads(written)["state"])
        assert json.loads(canon(reopened))["memories"] == json.loads(written)["memories"]
