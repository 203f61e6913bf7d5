"""An export imported into a fresh engine answers as the engine it came from.

The oracle is the source engine itself (its state copied over with ``save_state`` /
``load_state``): the fresh engine must accept the export and rank every query alike.
Memories that have expired are invisible to every read, so an export must not carry
links to them either (no record could then be imported, not even back into the
engine that wrote it).
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from emotional_memory import CoreAffect, EmotionalMemory, InMemoryStore, SQLiteStore
from emotional_memory.embedders import HashingEmbedder

T0 = datetime(2025, 3, 1, 9, 0, tzinfo=UTC)
WORDS = ["rain", "bridge", "coffee", "storm", "harbour", "exam"]
STORES = [InMemoryStore, SQLiteStore]


class Clock:
    """A clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> datetime:
        return self.now


def answers(engine: EmotionalMemory, query: str) -> list[tuple[Any, ...]]:
    return [(r.memory.content, r.score, r.pass1_rank, r.activation_level)
            for r in engine.retrieve_with_explanations(query, top_k=3)]


@pytest.mark.parametrize("source_store", STORES)
@pytest.mark.parametrize("target_store", STORES)
@settings(max_examples=25, deadline=None)
@given(events=st.lists(st.tuples(st.lists(st.integers(0, len(WORDS) - 1), min_size=1,
                                          max_size=3),
                                 st.floats(-1, 1), st.sampled_from([None, 5, 20, 90])),
                       min_size=2, max_size=8),
       read_at=st.integers(0, 120))
def test_export_after_expiry_imports_into_a_fresh_engine_with_the_same_answers(
    source_store: Any, target_store: Any,
    events: list[tuple[list[int], float, int | None]], read_at: int,
) -> None:
    clock = Clock()
    source = EmotionalMemory(source_store(), HashingEmbedder(dim=16), clock=clock)
    for i, (words, valence, lifetime) in enumerate(events):
        clock.now = T0 + timedelta(minutes=i)
        expires = None if lifetime is None else clock.now + timedelta(minutes=lifetime)
        source.encode(" ".join(WORDS[w] for w in words),
                      affect=CoreAffect(valence=valence, arousal=0.5), expires_at=expires)
    clock.now = T0 + timedelta(minutes=read_at)
    data = json.loads(json.dumps(source.export_memories()))
    exported = {d["id"] for d in data}
    assert all(link["target_id"] in exported for d in data for link in d["tag"]["resonance_links"])

    fresh = EmotionalMemory(target_store(), HashingEmbedder(dim=16), clock=clock)
    assert fresh.import_memories(data) == len(data) == len(source)
    fresh.load_state(source.save_state())
    for query in ("rain coffee", "storm exam bridge", "harbour"):
        assert answers(fresh, query) == answers(source, query)
    # and back into the engine that wrote it
    assert source.import_memories(data, overwrite=True) == len(data)


def test_an_expired_link_target_leaves_the_export_and_the_engine_re_imports_it() -> None:
    clock = Clock()
    engine = EmotionalMemory(InMemoryStore(), HashingEmbedder(dim=16), clock=clock)
    gone = engine.encode("rain on the bridge", expires_at=T0 + timedelta(minutes=30))
    kept = engine.encode("rain on the bridge again")
    assert [lk.target_id for lk in kept.tag.resonance_links] == [gone.id]
    clock.now = T0 + timedelta(hours=1)
    data = engine.export_memories()
    assert [d["id"] for d in data] == [kept.id]
    assert data[0]["tag"]["resonance_links"] == []
    clock.now = T0  # while the link target is alive, the export keeps the link
    assert [lk["target_id"] for lk in engine.export_memories()[1]["tag"]["resonance_links"]] \
        == [gone.id]
    clock.now = T0 + timedelta(hours=1)
    assert engine.import_memories(data, overwrite=True) == 1
