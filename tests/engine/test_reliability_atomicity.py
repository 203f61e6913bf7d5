"""Reliability of writes: memories and state commit or roll back together, several
connections and processes on one SQLite file, kill -9 mid-encode, refresh.

Every case uses the real thing (threads, processes, SQLite files in ``tmp_path``) and
is bounded in count; nothing asserts wall-clock time.
"""

from __future__ import annotations

import os
import random
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from emotional_memory import (
    CoreAffect,
    EmotionalMemory,
    EmotionalMemoryConfig,
    InMemoryAffectiveStateStore,
    InMemoryStore,
    ResonanceConfig,
    SQLiteAffectiveStateStore,
    SQLiteStore,
)
from emotional_memory.embedders import HashingEmbedder
from support.reliability import _text

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
