"""``encode_batch``'s row path (``stores/_linking.py``) against the protocol path.

``InMemoryStore`` saves a block of new memories as rows, reads the candidates' link
columns from its rows and rewrites packed links in place; every other store goes
through ``MemoryLinker`` (``save`` / ``get`` / ``update`` / searches, as one
``encode`` per memory does). Both must build the very same store: links, their order,
strengths, types, every float, the returned memories and the final state. Also:
``score_links`` against the per-pair functions it inlines, rollback of a failing
batch (undo of in-place link writes, no stale recent objects), odd-shaped memories
kept whole, half precision and SQLite.
"""

from __future__ import annotations

import itertools
import json
import math
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from emotional_memory import (
    CoreAffect,
    EmotionalMemory,
    EmotionalMemoryConfig,
    InMemoryStore,
    KeywordAppraisalEngine,
    Memory,
    ResonanceConfig,
    SQLiteStore,
)
from emotional_memory._engine import encoding as engine_module
from emotional_memory.affect import AffectiveMomentum
from emotional_memory.models import EmotionalTag, make_emotional_tag
from emotional_memory.mood import MoodField
from emotional_memory.replay import TickClock
from emotional_memory.resonance import _link_type, build_resonance_links, link_scores, score_links
from emotional_memory.stores._shared.linking import MemoryLinker, linker_for
from emotional_memory.stores._shared.rows import linking as linking_module
from emotional_memory.stores._shared.rows import search as search_module
from emotional_memory.stores._shared.rows.linking import RowLinker
from plain_store import PerMemoryStore

START = datetime(2026, 1, 1, tzinfo=UTC)
DIM = 4


class TableEmbedder:
    """Text ``"t<i> ..."`` -> ``vectors[i]``; None and [] give no embedding (None: an
    embedder's empty list is refused as bad output)."""

    def __init__(self, vectors: Sequence[list[float] | None]) -> None:
        self.vectors = list(vectors)

    def embed(self, text: str) -> list[float] | None:
        vec = self.vectors[int(text.split()[0][1:])]
        return None if not vec else list(vec)

    def embed_batch(self, texts: Sequence[str]) -> list[list[float] | None]:
        return [self.embed(t) for t in texts]


class ZoneClock:
    """TickClock readings, every ``every``-th one in UTC+02:00 (kept whole by the store)."""

    def __init__(self, step: timedelta, every: int) -> None:
        self.inner = TickClock(START, step)
        self.every = every
        self.calls = 0

    def __call__(self) -> datetime:
        self.calls += 1
        now = self.inner()
        if self.every and self.calls % self.every == 0:
            return now.astimezone(timezone(timedelta(hours=2)))
        return now


class FailingAppraisal(KeywordAppraisalEngine):
    """Keyword appraisal that raises on texts containing "boom"."""

    def appraise(self, content: str, context: dict[str, Any] | None = None) -> Any:
        if "boom" in content:
            raise RuntimeError("appraisal failed")
        return super().appraise(content, context)


WORDS = ["happy", "furious", "calm", "sad", "party", "crashed", "garden", "storm"]


def text(i: int, extra: str = "") -> str:
    return f"t{i} {WORDS[i % len(WORDS)]} {WORDS[(i * 7 + 3) % len(WORDS)]}{extra}"


def canon(engine: EmotionalMemory) -> str:
    """Export and state as JSON with ids replaced by insertion index."""
    out = json.dumps({"memories": engine.export_memories(), "state": engine.save_state()})
    for i, memory in enumerate(engine.list_all()):
        out = out.replace(memory.id, f"#{i}")
    return out


def returned(memories: list[Memory], engine: EmotionalMemory) -> str:
    """The returned memories as JSON with ids replaced by insertion index."""
    out = json.dumps([m.model_dump(mode="json") for m in memories])
    for i, memory in enumerate(engine.list_all()):
        out = out.replace(memory.id, f"#{i}")
    return out


def make(store: Any, vectors: Sequence[list[float] | None], config: EmotionalMemoryConfig,
         clock: Any, appraisal: Any = None) -> EmotionalMemory:
    return EmotionalMemory(
        store, TableEmbedder(vectors), appraisal or KeywordAppraisalEngine(), config=config,
        clock=clock,
    )


def run(engine: EmotionalMemory, n: int, cuts: Sequence[int]) -> list[list[Memory]]:
    """Encode texts 0..n-1: batches split at ``cuts``, one plain encode, an affect change."""
    bounds = [0, *sorted({c for c in cuts if 0 < c < n}), n]
    out = []
    for k, (a, b) in enumerate(itertools.pairwise(bounds)):
        if k == 1:
            engine.set_affect(CoreAffect(valence=-0.8, arousal=0.9, dominance=-0.3))
        if b - a == 1:
            out.append([engine.encode(text(a))])
        else:
            out.append(engine.encode_batch([text(i) for i in range(a, b)]))
    return out


values = st.sampled_from([0.0, 1.0, -1.0, 0.5, 2.0, 1e-3, -0.25])
vector = st.lists(values, min_size=DIM, max_size=DIM)
# A small pool of vectors drawn again and again: equal embeddings, hence tied scores.
embeddings = st.lists(
    st.one_of(vector, st.just([0.0] * DIM), st.none(), st.just([])), min_size=1, max_size=6
).flatmap(
    lambda pool: st.lists(st.sampled_from(pool), min_size=1, max_size=36)
)
configs = st.builds(
    lambda threshold, max_links, multiplier: EmotionalMemoryConfig(
        resonance=ResonanceConfig(
            threshold=threshold, max_links=max_links, candidate_multiplier=multiplier
        )
    ),
    st.sampled_from([-1.0, 0.05, 0.3, 0.6]),
    st.integers(1, 4),
    st.integers(1, 3),
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
    for memory in outs[0][-1]:  # the store's copy, links included
        stored = rows.store.get(memory.id)
        assert stored is not None
        assert memory == stored and memory.model_dump() == stored.model_dump()


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
    for memory in rest:  # (the first has gained links since it was returned)
        got = store.get(memory.id)
        assert got is not None and got.model_dump() == memory.model_dump()
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
    assert [store.get(m.id) for m in batch] == batch
    single = engine.encode(text(10), metadata=meta)
    assert store.get(single.id) == single
    returned = [*batch, single]
    ids = {id(m.embedding) for m in returned} | {id(m.metadata) for m in returned}
    ids |= {id(m.tag.resonance_links) for m in returned}
    assert len(ids) == 3 * len(returned)
    for memory in returned:
        before = store.get(memory.id)
        assert memory.embedding is not None and memory.tag.resonance_links
        memory.embedding.append(9.0)
        memory.metadata["k"][1]["x"] = 3
        memory.tag.resonance_links.clear()
        assert store.get(memory.id) == before
    assert meta == {"k": [1, {"x": 2}]}
