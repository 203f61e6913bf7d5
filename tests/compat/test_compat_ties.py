"""Exact ties in similarity go to the later-inserted memory, as in the original 0.18.1.

An agent that stored "thanks" 30 times (one embedding) retrieves "thanks" with
``top_k=5``: the store holds more than ``top_k * 3`` memories, so the engine takes 15
candidates by similarity, all tied. The original's stores hand back the newest of them
(its in-memory store's ``argpartition`` + reversed ``argsort``; its SQLite store's
sqlite-vec index), so the answer is the most recent "thanks"; ranking ties by insertion
order instead took the 15 oldest and answered stale ones. Nothing here needs the
original: its answer is pinned below.
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from emotional_memory import EmotionalMemory, InMemoryStore
from emotional_memory.stores import SQLiteStore
from support.compat_original import START, HashEmbedder

# Pinned from the original 0.18.1 (InMemoryStore, HashEmbedder, no appraisal engine,
# its clock frozen at each encode): (timestamp, score) of retrieve("thanks", top_k=5)
# at START + 1 day, every result's content "thanks".
_ORIGINAL_THANKS = [
    ("02:48", 0.8492138070630362),
    ("02:41", 0.8484972175453427),
    ("02:34", 0.8478362885344479),
    ("02:27", 0.8470928215444261),
    ("02:20", 0.8464071031089327),
]


class _Clock:
    def __init__(self) -> None:
        self.t = START

    def __call__(self) -> Any:
        return self.t


def _thanks_thirty_times(store: Any) -> tuple[EmotionalMemory, _Clock]:
    """Every 7 minutes an event, then "thanks" (30 of each)."""
    clock = _Clock()
    eng = EmotionalMemory(store, HashEmbedder(), clock=clock)
    for i in range(30):
        clock.t = START + timedelta(minutes=7 * i)
        eng.encode(f"event number {i}")
        eng.encode("thanks")
    return eng, clock


@pytest.fixture(params=["memory", "sqlite"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Any:
    if request.param == "memory":
        yield InMemoryStore()
        return
    with SQLiteStore(tmp_path / "thanks.db") as opened:
        yield opened


def test_retrieving_a_repeated_text_answers_the_newest_as_the_original(store: Any) -> None:
    eng, clock = _thanks_thirty_times(store)
    clock.t = START + timedelta(days=1)
    got = eng.retrieve_with_explanations("thanks", top_k=5)
    assert [r.memory.content for r in got] == ["thanks"] * 5
    assert [r.memory.tag.timestamp.strftime("%H:%M") for r in got] == [
        t for t, _ in _ORIGINAL_THANKS]
    assert [r.score for r in got] == pytest.approx([s for _, s in _ORIGINAL_THANKS], abs=1e-12)


def test_tied_search_candidates_are_the_newest_first(store: Any) -> None:
    _thanks_thirty_times(store)
    found = store.search_by_embedding(HashEmbedder().embed("thanks"), 15)
    stamps = [START + timedelta(minutes=7 * i) for i in range(29, 14, -1)]
    assert [m.content for m in found] == ["thanks"] * 15
    assert [m.tag.timestamp for m in found] == stamps
