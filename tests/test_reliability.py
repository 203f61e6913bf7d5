"""Reliability: threads, cancellation, event loops, atomic state, several connections
and processes on one SQLite file, aliasing, bounded work on hostile input.

Every case uses the real thing (threads, processes, SQLite files in ``tmp_path``) and
is bounded in count; nothing asserts wall-clock time.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import re
import sqlite3
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from emotional_memory import (
    AsyncEmotionalMemory,
    CoreAffect,
    EmotionalMemory,
    EmotionalMemoryConfig,
    InMemoryAffectiveStateStore,
    InMemoryStore,
    QueryClassifierConfig,
    ResonanceConfig,
    RetrievalConfig,
    SQLiteAffectiveStateStore,
    SQLiteStore,
    query_classifier,
)
from emotional_memory._validation import MAX_METADATA_DEPTH
from emotional_memory.embedders import HashingEmbedder
from emotional_memory.query_classifier import HeuristicQueryClassifier

WORDS = ("rain", "storm", "calm", "joy", "fear", "river", "bridge", "night", "sun", "loss")


def _text(rng: random.Random) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(4))


def _check_consistent(engine: EmotionalMemory) -> None:
    """No dangling links; every link leaves its holder; ids unique."""
    memories = engine.list_all()
    ids = [m.id for m in memories]
    assert len(ids) == len(set(ids)) == len(engine)
    known = set(ids)
    for m in memories:
        for link in m.tag.resonance_links:
            assert link.source_id == m.id
            assert link.target_id in known, f"dangling link {m.id} -> {link.target_id}"


# ---------------------------------------------------------------- 1. threads


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
def test_sync_engine_shared_by_eight_threads(kind: str, tmp_path: Path) -> None:
    store = InMemoryStore() if kind == "memory" else SQLiteStore(tmp_path / "m.db")
    engine = EmotionalMemory(store, HashingEmbedder(dim=32))
    for i in range(8):
        engine.encode(f"seed {i} " + WORDS[i])
    errors: list[BaseException] = []
    start = threading.Barrier(8)

    def worker(seed: int) -> None:
        rng = random.Random(seed)
        try:
            start.wait()
            for _ in range(12):
                op = rng.random()
                if op < 0.4:
                    engine.encode(_text(rng))
                elif op < 0.8:
                    engine.retrieve(_text(rng), top_k=3)
                else:
                    ids = [m.id for m in engine.list_all()]
                    if ids:
                        engine.delete(rng.choice(ids))
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(s,)) for s in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    assert not any(t.is_alive() for t in threads)
    assert errors == []
    _check_consistent(engine)
    if kind == "sqlite":
        # The file holds exactly what the engine saw.
        seen = {m.id: m for m in engine.list_all()}
        engine.close()
        with SQLiteStore(tmp_path / "m.db") as reopened:
            again = {m.id: m for m in reopened.list_all()}
        assert again.keys() == seen.keys()
        for mid, m in again.items():
            assert m.tag == seen[mid].tag


# ---------------------------------------------------------------- 2. async


class _GatedEmbedder:
    """A hashing embedder that records how many embed calls run at once and can be
    held inside ``embed`` until released (no sleeps: events decide the order)."""

    def __init__(self) -> None:
        self.inner = HashingEmbedder(dim=16)
        self.entered = threading.Event()
        self.release = threading.Event()
        self.release.set()
        self.active = 0
        self.max_active = 0
        self.calls: list[str] = []
        self._guard = threading.Lock()

    def embed(self, text: str) -> list[float]:
        with self._guard:
            self.active += 1
            self.max_active = max(self.max_active, self.active)
            self.calls.append(text)
        self.entered.set()
        try:
            assert self.release.wait(timeout=60)
            return self.inner.embed(text)
        finally:
            with self._guard:
                self.active -= 1

    def embed_batch(self, texts: list[str]) -> list[list[float]]:
        return [self.embed(t) for t in texts]


def test_cancelled_async_call_completes_whole_and_never_overlaps_the_next() -> None:
    embedder = _GatedEmbedder()
    engine = AsyncEmotionalMemory(InMemoryStore(), embedder)

    async def scenario() -> None:
        embedder.release.clear()
        embedder.entered.clear()
        first = asyncio.ensure_future(asyncio.wait_for(engine.encode("first event"), 30))
        await asyncio.to_thread(embedder.entered.wait, 30)
        first.cancel()  # the worker is inside embed: the caller stops waiting
        with pytest.raises(asyncio.CancelledError):
            await first
        second = asyncio.ensure_future(engine.encode("second event"))
        for _ in range(50):  # give the second call every chance to start early
            await asyncio.sleep(0.01)
            if len(embedder.calls) > 1:
                break
        assert embedder.calls == ["first event"]  # it has not started
        embedder.release.set()
        stored = await second
        assert stored.content == "second event"

    asyncio.run(scenario())
    assert embedder.max_active == 1
    contents = [m.content for m in engine.engine.list_all()]
    assert contents == ["first event", "second event"]  # the first completed entirely


def test_async_call_cancelled_before_its_turn_never_runs() -> None:
    embedder = _GatedEmbedder()
    engine = AsyncEmotionalMemory(InMemoryStore(), embedder)

    async def scenario() -> None:
        embedder.release.clear()
        embedder.entered.clear()
        first = asyncio.ensure_future(engine.encode("first"))
        await asyncio.to_thread(embedder.entered.wait, 30)
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(engine.encode("never"), 0.01)
        embedder.release.set()
        await first

    asyncio.run(scenario())
    assert [m.content for m in engine.engine.list_all()] == ["first"]
    assert embedder.calls == ["first"]


def test_one_async_engine_across_two_event_loops() -> None:
    engine = AsyncEmotionalMemory(InMemoryStore(), HashingEmbedder(dim=16))

    async def burst(tag: str) -> None:
        # Concurrent calls contend for the turn lock (binding it to this loop).
        await asyncio.gather(*(engine.encode(f"{tag} {i}") for i in range(4)))
        await asyncio.gather(*(engine.retrieve(tag, top_k=2) for _ in range(3)))

    asyncio.run(burst("first loop"))
    asyncio.run(burst("second loop"))
    assert len(engine.engine) == 8


# ---------------------------------------------------------------- 3. store + state


class _FailingStateStore(InMemoryAffectiveStateStore):
    """A real in-memory state store whose ``save`` raises while ``fail`` is set."""

    fail = False

    def save(self, snapshot: dict[str, Any]) -> None:
        if self.fail:
            raise OSError("state store unavailable")
        super().save(snapshot)


class _FailingSharedStateStore(SQLiteAffectiveStateStore):
    """Writes its row, then raises (a failure after the SQL write) while ``fail``."""

    fail = False

    def save(self, snapshot: dict[str, Any]) -> None:
        super().save(snapshot)
        if self.fail:
            raise OSError("state store failed after writing")


class _CommitFailingStore(InMemoryStore):
    """An in-memory store whose transaction fails at commit while ``fail_commit``."""

    fail_commit = False

    @contextmanager
    def transaction(self) -> Iterator[None]:
        with super().transaction():
            yield
            if self.fail_commit:
                raise OSError("commit failed")


def _persisted(states: Any) -> dict[str, Any] | None:
    """The persisted state as a snapshot dict (whether ``load`` gives a dict or a state)."""
    raw = states.load()
    return raw if raw is None or isinstance(raw, dict) else raw.snapshot()


def _picture(engine: EmotionalMemory) -> list[tuple[str, str, Any]]:
    return [(m.id, m.content, m.tag) for m in engine.list_all()]


def _seed(engine: EmotionalMemory) -> None:
    for i, text in enumerate(["rain on the river", "storm at night", "calm sun"]):
        engine.set_affect(CoreAffect(valence=0.3 * i - 0.3, arousal=0.2 + 0.2 * i))
        engine.encode(text)


def _fails_cleanly(engine: EmotionalMemory, states: Any, exc: type[BaseException]) -> None:
    before = _picture(engine)
    state_before = engine.get_state()
    persisted_before = _persisted(states)
    with pytest.raises(exc):
        engine.encode("rain storm river night")
    with pytest.raises(exc):
        engine.encode_batch(["rain again", "storm again"])
    assert _picture(engine) == before
    assert engine.get_state() == state_before
    assert _persisted(states) == persisted_before


def test_failing_state_store_rolls_the_memory_back() -> None:
    states = _FailingStateStore()
    engine = EmotionalMemory(InMemoryStore(), HashingEmbedder(dim=16), state_store=states)
    _seed(engine)
    states.fail = True
    _fails_cleanly(engine, states, OSError)
    states.fail = False
    engine.encode("works again")
    assert len(engine) == 4 and _persisted(states) == engine.get_state().snapshot()


def test_failing_commit_puts_the_persisted_state_back() -> None:
    store = _CommitFailingStore()
    states = InMemoryAffectiveStateStore()
    engine = EmotionalMemory(store, HashingEmbedder(dim=16), state_store=states)
    _seed(engine)
    store.fail_commit = True
    _fails_cleanly(engine, states, OSError)


@pytest.mark.parametrize("layout", ["from_store", "own_connection"])
def test_sqlite_state_on_the_store_file_commits_with_the_memories(
    layout: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "m.db"
    store = SQLiteStore(path)
    states = (
        _FailingSharedStateStore.from_store(store)
        if layout == "from_store" else _FailingSharedStateStore(path)
    )
    engine = EmotionalMemory(store, HashingEmbedder(dim=16), state_store=states)
    _seed(engine)
    persisted = _persisted(states)
    # Class-wide: the engine may save through a twin on the store's connection.
    monkeypatch.setattr(_FailingSharedStateStore, "fail", True)
    _fails_cleanly(engine, states, OSError)
    engine.close()
    # The file agrees: nothing of the failed calls was committed.
    with SQLiteStore(path) as again, SQLiteAffectiveStateStore(path) as state_again:
        assert len(again) == 3
        assert _persisted(state_again) == persisted


# ---------------------------------------------------------------- 4. several connections


def _links_symmetric(memories: list[Any]) -> None:
    by_id = {m.id: m for m in memories}
    for m in memories:
        for link in m.tag.resonance_links:
            assert link.target_id in by_id, f"dangling link {m.id} -> {link.target_id}"
            back = [lk for lk in by_id[link.target_id].tag.resonance_links
                    if lk.target_id == m.id]
            assert back, f"{link.target_id} lost its link back to {m.id}"


def test_two_store_objects_on_one_file_lose_no_update(tmp_path: Path) -> None:
    path = tmp_path / "shared.db"
    a = EmotionalMemory(SQLiteStore(path), HashingEmbedder(dim=16))
    b = EmotionalMemory(SQLiteStore(path), HashingEmbedder(dim=16))
    only = a.encode("the only memory")
    assert a.retrieve("memory", top_k=1)[0].tag.retrieval_count == 1
    assert b.retrieve("memory", top_k=1)[0].tag.retrieval_count == 2
    assert a.get(only.id).tag.retrieval_count == 2  # type: ignore[union-attr]
    # Links written through one connection are kept by writes through the other.
    a.encode("rain on the river")
    b.encode("rain on the bridge")
    a.encode("rain at night")
    for engine in (a, b):
        assert len(engine) == 4
        _links_symmetric(engine.list_all())
    # B deletes what A wrote; A sees it gone, with every link to it.
    assert b.delete(only.id) is True
    assert a.get(only.id) is None and len(a) == 3
    _links_symmetric(a.list_all())
    a.close()
    b.close()


_CHILD = """
import sys
from emotional_memory import EmotionalMemory, EmotionalMemoryConfig, ResonanceConfig, SQLiteStore
from emotional_memory.embedders import HashingEmbedder
config = EmotionalMemoryConfig(resonance=ResonanceConfig(max_links=64))
engine = EmotionalMemory(SQLiteStore(sys.argv[1]), HashingEmbedder(dim=16), config=config)
for i in range(int(sys.argv[2])):
    engine.encode(f"child event {i} rain river")
    engine.retrieve("rain river", top_k=2)
engine.close()
"""


def test_two_processes_on_one_file(tmp_path: Path) -> None:
    path = tmp_path / "shared.db"
    # Room for every link, so that links must be symmetric (no eviction).
    config = EmotionalMemoryConfig(resonance=ResonanceConfig(max_links=64))
    engine = EmotionalMemory(SQLiteStore(path), HashingEmbedder(dim=16), config=config)
    engine.encode("seed one rain")
    engine.encode("seed two river")
    rounds = 12
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    child = subprocess.Popen([sys.executable, "-c", _CHILD, str(path), str(rounds)], env=env)
    try:
        for i in range(rounds):
            engine.encode(f"parent event {i} rain bridge")
            engine.retrieve("rain bridge", top_k=2)
    finally:
        assert child.wait(timeout=300) == 0
    memories = engine.list_all()
    assert len(memories) == 2 + 2 * rounds
    # Every retrieve incremented two memories: none of the increments was lost.
    assert sum(m.tag.retrieval_count for m in memories) == 2 * 2 * rounds
    _links_symmetric(memories)
    engine.close()
    with SQLiteStore(path) as again:
        assert [m.tag for m in again.list_all()] == [m.tag for m in memories]


# ---------------------------------------------------------------- 5. aliasing


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
def test_nothing_a_caller_holds_aliases_the_store(kind: str, tmp_path: Path) -> None:
    store = InMemoryStore() if kind == "memory" else SQLiteStore(tmp_path / "m.db")
    engine = EmotionalMemory(store, HashingEmbedder(dim=8))
    meta = {"tags": ["a"], "nested": {"k": [1, 2]}}
    memory = engine.encode("rain", metadata=meta)
    engine.encode("rain again")  # links back to the first memory
    expected = engine.get(memory.id)
    assert expected is not None
    # The caller's dict, the returned memory and a fetched one are all private.
    meta["tags"].append("caller")
    meta["nested"]["k"].append(3)
    memory.metadata["tags"].append("returned")
    assert memory.embedding is not None
    memory.embedding[0] = 123.0
    fetched = engine.get(memory.id)
    assert fetched is not None and fetched.embedding is not None
    fetched.metadata["nested"]["k"].clear()
    fetched.embedding[1] = -5.0
    fetched.tag.resonance_links.clear()
    for listed in [*engine.list_all(), *store.search_by_embedding([1.0] * 8, 2)]:
        listed.metadata.clear()
        assert listed.embedding is not None
        listed.embedding.clear()
    again = engine.get(memory.id)
    assert again == expected
    assert again.metadata == {"tags": ["a"], "nested": {"k": [1, 2]}}


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
def test_tag_only_updates_keep_the_store_private(kind: str, tmp_path: Path) -> None:
    """A retrieve's tag-only writes and an update with an equal embedding list share no
    list with the caller: mutating what was returned or passed changes nothing stored."""
    store = InMemoryStore() if kind == "memory" else SQLiteStore(tmp_path / "m.db")
    engine = EmotionalMemory(store, HashingEmbedder(dim=8))
    first = engine.encode("rain on the bridge")
    engine.encode("rain again")
    before = engine.get(first.id)
    assert before is not None and before.embedding is not None
    for returned in engine.retrieve("rain", top_k=2):  # tag-only updates inside
        assert returned.embedding is not None
        returned.embedding[0] = 77.0
    fetched = engine.get(first.id)
    assert fetched is not None and fetched.embedding == before.embedding
    assert fetched.tag.retrieval_count == before.tag.retrieval_count + 1
    # an explicit update whose embedding list equals the stored one, then mutated
    changed = fetched.model_copy(update={"content": "rain on the old bridge"})
    store.update(changed)
    assert changed.embedding is not None
    changed.embedding[1] = -9.0
    again = engine.get(first.id)
    assert again is not None
    assert again.embedding == before.embedding and again.content == "rain on the old bridge"


def test_store_save_copies_the_callers_lists() -> None:
    store = InMemoryStore()
    engine = EmotionalMemory(store, HashingEmbedder(dim=8))
    template = engine.encode("x", metadata={"a": [1]})
    mine = template.model_copy(update={"id": "mine", "embedding": [1.0, 2.0, 3.0, 4.0] * 2,
                                       "metadata": {"a": [1]}})
    store.save(mine)
    mine.metadata["a"].append(2)
    assert mine.embedding is not None
    mine.embedding[0] = 9.0
    kept = store.get("mine")
    assert kept is not None
    assert kept.metadata == {"a": [1]} and kept.embedding == [1.0, 2.0, 3.0, 4.0] * 2


# ---------------------------------------------------------------- 6. linear-time regexes

_OLD_DID = re.compile(r"\bdid\b.*?\b(?:before|after|first|last)\b", re.IGNORECASE | re.DOTALL)


def test_classifier_regexes_have_no_unbounded_wildcards() -> None:
    # Every pattern is literal words joined by \s+ (each scan is linear): no ".*",
    # ".+" or other wildcard that could rescan the text from each of many starts.
    patterns = [
        v for v in vars(query_classifier).values() if isinstance(v, re.Pattern)
    ] + [p for p in query_classifier._TEMPORAL_PATTERNS]
    assert patterns
    for p in patterns:
        assert ".*" not in p.pattern and ".+" not in p.pattern, p.pattern


@given(st.lists(st.sampled_from(["did", "Did", "first", "last", "before", "after", "x",
                                 "didfirst", " ", "\n", "-", "_", "9", "didn't"]),
                max_size=12))
def test_did_rule_matches_the_old_pattern(parts: list[str]) -> None:
    text = "".join(parts)
    expected = _OLD_DID.search(text) is not None
    assert query_classifier._did_then_order_word(text) == expected


def test_hostile_64kb_query_classifies() -> None:
    classifier = HeuristicQueryClassifier()
    assert classifier.classify("did " * 16384) == "open_domain"
    assert classifier.classify("did " * 16384 + "first") == "temporal"
    assert classifier.classify("how " * 16384) == "open_domain"


# ---------------------------------------------------------------- 7. hostile input


class _Opaque:
    pass


def _nested(depth: int) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for _ in range(depth - 1):
        out = {"x": out}
    return out


@pytest.mark.parametrize(
    ("metadata", "exc", "names"),
    [
        ({"obj": _Opaque()}, TypeError, "['obj'] is a _Opaque"),
        ({"a": [1, {"b": {1, 2}}]}, TypeError, "['a'][1]['b'] is a set"),
        ({1: "int key"}, TypeError, "key 1 of type int"),
        ({"deep": _nested(300)}, ValueError, "MAX_METADATA_DEPTH"),
        ({"s": "lone \ud800 surrogate"}, ValueError, "['s'] is not valid Unicode"),
    ],
)
@pytest.mark.parametrize("kind", ["memory", "sqlite"])
def test_encode_rejects_metadata_a_store_cannot_hold(
    metadata: dict[Any, Any], exc: type[Exception], names: str, kind: str, tmp_path: Path
) -> None:
    store = InMemoryStore() if kind == "memory" else SQLiteStore(tmp_path / "m.db")
    engine = EmotionalMemory(store, HashingEmbedder(dim=8))
    engine.encode("kept", metadata={"ok": [1, 2.5, None, True, "s", {"n": {}}]})
    state = engine.get_state()
    with pytest.raises(exc, match=re.escape(names)):
        engine.encode("bad", metadata=metadata)
    with pytest.raises(exc, match=re.escape(names)):
        engine.encode_batch(["fine", "bad"], metadata=[None, metadata])
    assert len(engine) == 1 and engine.get_state() == state
    assert engine.export_memories()[0]["metadata"]["ok"][5] == {"n": {}}
    # Exactly at the documented limit still works.
    engine.encode("limit", metadata=_nested(MAX_METADATA_DEPTH))
    assert len(engine.export_memories()) == 2


def test_unknown_keys_are_rejected_naming_them() -> None:
    with pytest.raises(ValueError, match="base_weigths"):
        EmotionalMemoryConfig.model_validate(
            {"retrieval": {"base_weigths": [0.5, 0.1, 0.1, 0.1, 0.1, 0.1]}}
        )
    with pytest.raises(ValueError, match="dominanse"):
        CoreAffect(valence=0.1, arousal=0.2, dominanse=0.9)  # type: ignore[call-arg]
    engine = EmotionalMemory(InMemoryStore(), HashingEmbedder(dim=8))
    snapshot = engine.save_state()
    with pytest.raises(ValueError, match="moood"):
        engine.load_state({**snapshot, "moood": snapshot["mood"]})
    with pytest.raises(ValueError, match="valance"):
        engine.load_state({**snapshot, "core_affect": {**snapshot["core_affect"], "valance": 0}})
    engine.encode("one")
    item = engine.export_memories()[0]
    fresh = EmotionalMemory(InMemoryStore(), HashingEmbedder(dim=8))
    with pytest.raises(ValueError, match="contnet"):
        fresh.import_memories([{**item, "id": "other", "contnet": "typo"}])
    with pytest.raises(ValueError, match="retrival_count"):
        fresh.import_memories([{**item, "tag": {**item["tag"], "retrival_count": 3}}])
    assert len(fresh) == 0


def test_the_originals_snapshot_config_and_export_still_load() -> None:
    # Keys as emotional_memory 0.18.1 writes them: state snapshots keep the history
    # under "_history"; memory exports and configs use the same field names as ours.
    original_snapshot = {
        "core_affect": {"valence": 0.2, "arousal": 0.4, "dominance": 0.5},
        "momentum": {"d_valence": 0.0, "d_arousal": 0.0, "d_dominance": 0.0,
                     "dd_valence": 0.0, "dd_arousal": 0.0, "dd_dominance": 0.0},
        "mood": {"valence": 0.0, "arousal": 0.0, "dominance": 0.5, "inertia": 0.5,
                 "timestamp": "2026-01-01T00:00:00Z"},
        "_history": [],
    }
    engine = EmotionalMemory(InMemoryStore(), HashingEmbedder(dim=8))
    engine.load_state(original_snapshot)
    assert engine.get_state().core_affect.valence == 0.2
    engine.load_state(engine.save_state())  # and our own
    config = EmotionalMemoryConfig().model_dump(mode="json")
    assert EmotionalMemoryConfig.model_validate(config) == EmotionalMemoryConfig()
    engine.encode("exported")
    again = EmotionalMemory(InMemoryStore(), HashingEmbedder(dim=8))
    assert again.import_memories(engine.export_memories()) == 1


def test_training_cli_rejects_a_misspelt_config(tmp_path: Path) -> None:
    typo = tmp_path / "typo.json"
    typo.write_text(json.dumps({"retrieval": {"base_weigths": [0.5, 0.1, 0.1, 0.1, 0.1, 0.1]}}))
    root = Path(__file__).resolve().parents[1]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(root), *sys.path]))
    result = subprocess.run(
        [sys.executable, "-m", "training", "evaluate", "--config", str(typo), "--quiet"],
        capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300,
    )
    assert result.returncode == 2
    assert "base_weigths" in result.stderr and str(typo) in result.stderr


# ---------------------------------------------------------------- 8. import checks


def test_import_applies_encodes_checks() -> None:
    config = EmotionalMemoryConfig(max_content_length=20)
    donor = EmotionalMemory(InMemoryStore(), HashingEmbedder(dim=8))
    first = donor.encode("rain on the river")
    donor.encode("rain on the bridge")  # links both ways
    data = donor.export_memories()
    engine = EmotionalMemory(InMemoryStore(), HashingEmbedder(dim=8), config=config)
    bad_cases = {
        "content": [{**data[0], "content": "x" * 21}],
        "id": [{**data[0], "id": ""}],
        "source_id": [{**data[0], "id": "renamed"}],  # its links leave another memory
        "target_id": [data[1]],  # links to a memory neither imported nor stored
        "more than once": [data[0], data[0]],
        "metadata": [{**data[0], "metadata": {"deep": _nested(100)}}],
    }
    for field, payload in bad_cases.items():
        with pytest.raises(ValueError, match=re.escape(field)):
            engine.import_memories(payload)
        assert len(engine) == 0
    assert engine.import_memories(data) == 2
    assert engine.get(first.id) == donor.get(first.id)


def test_weights_whose_sum_overflows_are_rejected() -> None:
    with pytest.raises(ValueError, match=r"base_weights.*MAX_WEIGHT_TOTAL"):
        RetrievalConfig(base_weights=[1e308] * 6)
    with pytest.raises(ValueError, match=r"routed_weights.*MAX_WEIGHT_TOTAL"):
        QueryClassifierConfig(routed_weights={"temporal": [1e308] * 6})
    # Large but summable weights still normalise to finite, non-zero weights.
    config = EmotionalMemoryConfig(retrieval=RetrievalConfig(base_weights=[1e299] * 6))
    engine = EmotionalMemory(InMemoryStore(), HashingEmbedder(dim=8), config=config)
    weights = engine.current_weights("x")
    assert weights.sum() == pytest.approx(1.0) and (weights > 0).all()


# ---------------------------------------------------------------- 8. SQLite input


def test_sqlite_keeps_embedding_values_beyond_float32(tmp_path: Path) -> None:
    path = tmp_path / "m.db"
    engine = EmotionalMemory(SQLiteStore(path), HashingEmbedder(dim=8))
    engine.encode("kept")
    big = [0.1, 0.2, 0.3, 1e39, 0.0, 0.0, 0.0, 0.0]
    engine.import_memories([{**engine.export_memories()[0], "id": "big", "embedding": big}])
    engine.close()
    with SQLiteStore(path) as store:
        got = store.get("big")
        assert got is not None and got.embedding == big


@pytest.mark.parametrize("path", ["", "file:x.db?mode=memory"])
def test_sqlite_refuses_paths_that_keep_nothing(path: str, tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ValueError, match="path"):
        SQLiteStore(path)
    assert list(tmp_path.iterdir()) == []  # no stray file either


def test_sqlite_on_a_foreign_database_changes_nothing(tmp_path: Path) -> None:
    foreign = tmp_path / "app.db"
    conn = sqlite3.connect(foreign)
    conn.execute("CREATE TABLE users (name TEXT)")
    conn.execute("CREATE TABLE memories (when_ TEXT, what TEXT)")  # not ours
    conn.execute("INSERT INTO users VALUES ('ada')")
    conn.commit()
    conn.close()
    before = foreign.read_bytes()
    with pytest.raises(ValueError, match=r"app\.db"):
        SQLiteStore(foreign)
    assert foreign.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["app.db"]  # no -wal / -shm


def test_sqlite_corruption_errors_name_the_file(tmp_path: Path) -> None:
    junk = tmp_path / "junk.db"
    junk.write_bytes(b"this is not a database" * 100)
    with pytest.raises(sqlite3.DatabaseError, match=r"junk\.db"):
        SQLiteStore(junk)


def test_sqlite_rows_are_validated_on_load(tmp_path: Path) -> None:
    path = tmp_path / "m.db"
    engine = EmotionalMemory(SQLiteStore(path), HashingEmbedder(dim=8))
    memory = engine.encode("text")
    engine.close()
    conn = sqlite3.connect(path)
    conn.execute("UPDATE em_memories SET content = ? WHERE id = ?", (b"\x00\x01", memory.id))
    conn.commit()
    conn.close()
    with pytest.raises(ValueError, match=re.escape(memory.id)):
        SQLiteStore(path)


# ---------------------------------------------------------------- 11. smaller items


def test_smaller_bad_inputs_name_the_field(tmp_path: Path) -> None:
    with pytest.raises(TypeError, match="store"):
        EmotionalMemory(None, HashingEmbedder(dim=8))  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="embedder"):
        EmotionalMemory(InMemoryStore(), None)  # type: ignore[arg-type]
    engine = EmotionalMemory(InMemoryStore(), HashingEmbedder(dim=8))
    with pytest.raises(TypeError, match="contents"):
        engine.encode_batch(None)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="metadata"):
        engine.encode_batch(["a"], metadata={"k": 1})  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"data\[0\]"):
        engine.import_memories([1])  # type: ignore[list-item]
    missing = tmp_path / "no" / "such" / "dir" / "x.db"
    with pytest.raises(FileNotFoundError, match=re.escape(str(missing))):
        SQLiteStore(missing)


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
def test_lone_surrogate_content_is_rejected_by_every_store(kind: str, tmp_path: Path) -> None:
    store = InMemoryStore() if kind == "memory" else SQLiteStore(tmp_path / "m.db")
    engine = EmotionalMemory(store, HashingEmbedder(dim=8))
    with pytest.raises(ValueError, match="content"):
        engine.encode("broken \ud83d text")
    with pytest.raises(ValueError, match=r"contents\[1\]"):
        engine.encode_batch(["fine", "broken \udc00"])
    assert len(engine) == 0
    engine.encode("emoji 😀 fine")
    assert len(engine) == 1


def test_training_fit_checks_its_output_folder_first(tmp_path: Path) -> None:
    root = Path(__file__).resolve().parents[1]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(root), *sys.path]))
    out = tmp_path / "missing" / "x.json"
    result = subprocess.run(
        [sys.executable, "-m", "training", "fit", "--dataset", str(tmp_path / "none.json"),
         "--out", str(out), "--quiet"],
        capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300,
    )
    assert result.returncode == 2
    assert "missing" in result.stderr and "none.json" not in result.stderr


def _same_as_reopened(store: SQLiteStore, path: Path) -> None:
    with SQLiteStore(path) as fresh:
        assert [(m.id, m.content, m.embedding, m.tag, m.metadata) for m in store.list_all()] == [
            (m.id, m.content, m.embedding, m.tag, m.metadata) for m in fresh.list_all()
        ]


@pytest.mark.parametrize("log_size", [4096, 3])
def test_two_connections_refresh_to_what_a_reopen_reads(
    log_size: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from emotional_memory.stores.sqlite import store as sqlite_module

    monkeypatch.setattr(sqlite_module, "_CHANGE_LOG", log_size)  # 3: the pruned-log path
    path = tmp_path / "m.db"
    stores = [SQLiteStore(path), SQLiteStore(path)]
    engines = [EmotionalMemory(s, HashingEmbedder(dim=8)) for s in stores]
    rng = random.Random(7)
    kept: list[Any] = []
    for step in range(40):
        who = rng.randrange(2)
        engine, store = engines[who], stores[who]
        op = rng.random()
        ids = [m.id for m in engine.list_all()]
        if op < 0.4 or not ids:
            kept.append(engine.encode(_text(rng), metadata={"step": step}))
        elif op < 0.6:
            engine.retrieve(_text(rng), top_k=2)
        elif op < 0.75:
            engine.update_memory(rng.choice(ids), metadata={"updated": step})
        elif op < 0.9:
            engine.delete(rng.choice(ids))
        else:  # delete and save again: the memory moves to the end
            victim = store.get(rng.choice(ids))
            assert victim is not None
            store.delete(victim.id)
            store.save(victim.model_copy(update={
                "tag": victim.tag.model_copy(update={"resonance_links": []})}))
        other = stores[1 - who]
        _same_as_reopened(other, path)
        _same_as_reopened(store, path)
    for s in stores:
        s.close()


def test_refresh_reads_only_the_changed_memories(tmp_path: Path) -> None:
    path = tmp_path / "m.db"
    a, b = SQLiteStore(path), SQLiteStore(path)
    engine_a = EmotionalMemory(a, HashingEmbedder(dim=8))
    for i in range(5):
        engine_a.encode(f"memory {i}")
    assert len(b) == 5
    cache = b._cache
    engine_a.encode("one more")
    engine_a.update_memory(engine_a.list_all()[0].id, metadata={"x": 1})
    assert len(b) == 6
    assert b._cache is cache  # refreshed in place, not rebuilt
    _same_as_reopened(b, path)
    a.close()
    b.close()


_KILLED_CHILD = """
import sys
from emotional_memory import EmotionalMemory, SQLiteAffectiveStateStore, SQLiteStore
from emotional_memory.embedders import HashingEmbedder
path, layout = sys.argv[1], sys.argv[2]
store = SQLiteStore(path)
states = (SQLiteAffectiveStateStore.from_store(store) if layout == "from_store"
          else SQLiteAffectiveStateStore(path))
engine = EmotionalMemory(store, HashingEmbedder(dim=16), state_store=states)
print("ready", flush=True)
i = 0
while True:
    engine.encode_batch([f"event {i} a", f"event {i} b"])
    engine.encode(f"event {i} c")
    i += 1
"""


@pytest.mark.parametrize("layout", ["from_store", "own_connection"])
def test_kill_during_encoding_keeps_memories_and_state_together(
    layout: str, tmp_path: Path
) -> None:
    path = tmp_path / "m.db"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    rng = random.Random(layout)
    before = 0
    for _ in range(2):
        child = subprocess.Popen(
            [sys.executable, "-c", _KILLED_CHILD, str(path), layout],
            env=env, stdout=subprocess.PIPE, text=True,
        )
        assert child.stdout is not None and child.stdout.readline().strip() == "ready"
        threading.Event().wait(rng.uniform(0.2, 0.8))  # let it encode for a while
        child.kill()
        child.wait(timeout=60)
        with SQLiteStore(path) as store, SQLiteAffectiveStateStore(path) as states:
            memories = store.list_all()
            snapshot = _persisted(states)
            assert memories and snapshot is not None
            # The persisted state is exactly the state after the last stored memory.
            latest = max(m.tag.timestamp for m in memories)
            assert datetime.fromisoformat(snapshot["mood"]["timestamp"]) == latest
            assert (len(memories) - before) % 3 in (0, 2)  # whole encode_batch calls only
            before = len(memories)
            _links_symmetric_or_full(memories)


def _links_symmetric_or_full(memories: list[Any]) -> None:
    """No dangling link (a full target may refuse a backward twin: max_links)."""
    known = {m.id for m in memories}
    for m in memories:
        for link in m.tag.resonance_links:
            assert link.target_id in known


def test_state_methods_never_block_an_event_loop_but_wait_elsewhere() -> None:
    embedder = _GatedEmbedder()
    engine = EmotionalMemory(InMemoryStore(), embedder)
    embedder.release.clear()
    embedder.entered.clear()
    worker = threading.Thread(target=engine.encode, args=("held inside embed",))
    worker.start()
    assert embedder.entered.wait(30)  # the encode holds the engine lock now

    async def on_the_loop() -> None:
        # Returns at once: blocking here could deadlock a worker waiting for the loop.
        engine.set_affect(CoreAffect(valence=0.5, arousal=0.5))
        engine.reset_state()

    asyncio.run(on_the_loop())
    done = threading.Event()

    def off_the_loop() -> None:
        engine.set_affect(CoreAffect(valence=-0.5, arousal=0.5))
        done.set()

    other = threading.Thread(target=off_the_loop)
    other.start()
    assert not done.wait(0.2)  # a plain thread waits for the running operation
    embedder.release.set()
    worker.join(30)
    other.join(30)
    assert done.is_set() and len(engine) == 1
    assert engine.get_state().core_affect.valence == -0.5
