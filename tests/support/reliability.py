"""Workload texts and consistency checks shared by the reliability tests
(tests/engine/test_reliability_*.py)."""

from __future__ import annotations

import random

from emotional_memory import EmotionalMemory

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
