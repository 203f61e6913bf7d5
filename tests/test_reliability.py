"""Reliability: threads, cancellation, event loops, atomic state, several connections
and processes on one SQLite file, aliasing, bounded work on hostile input.

Every case uses the real thing (threads, processes, SQLite files in ``tmp_path``) and
is bounded in count; nothing asserts wall-clock time.
"""

from __future__ import annotations

import random
import threading
from pathlib import Path

import pytest

from emotional_memory import EmotionalMemory, InMemoryStore, SQLiteStore
from emotional_memory.embedders import HashingEmbedder

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
