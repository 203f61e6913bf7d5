"""Helpers of the scoped-linking tests: a table embedder, clustered vectors, an
engine with a small link budget, memories compared by content."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np

from emotional_memory import EmotionalMemory, EmotionalMemoryConfig, ResonanceConfig
from emotional_memory.replay import TickClock

START = datetime(2026, 1, 1, tzinfo=UTC)


class Table:
    """Text ``"t<i>"`` -> row i of a table of vectors."""

    def __init__(self, vectors: np.ndarray) -> None:
        self.vectors = vectors

    def embed(self, text: str) -> list[float]:
        out: list[float] = self.vectors[int(text[1:])].tolist()
        return out

    def embed_batch(self, texts: list[str]) -> list[list[float]]:
        return [self.embed(t) for t in texts]


def clustered_vectors(n: int, seed: int) -> np.ndarray:
    """``n`` unit vectors around four directions (so memories link), every third
    one's numbers float32 values."""
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((4, 6))
    v = centres[rng.integers(0, 4, n)] + 0.3 * rng.standard_normal((n, 6))
    v /= np.linalg.norm(v, axis=1, keepdims=True)
    v[::3] = v[::3].astype(np.float32)
    return v


def small_link_engine(store: Any, vectors: np.ndarray) -> EmotionalMemory:
    """An engine over ``store`` embedding ``"t<i>"`` as ``vectors[i]``; max_links 2 x
    candidate multiplier 3, so a view holding more than 6 memories is searched; a
    clock that does not move (engines compared read it different numbers of times)."""
    cfg = EmotionalMemoryConfig(resonance=ResonanceConfig(max_links=2, candidate_multiplier=3))
    return EmotionalMemory(store, Table(vectors), config=cfg,
                           clock=TickClock(START, timedelta(0)))


def by_content(memories: list[Any]) -> list[Any]:
    """Memories as (content, affect, expiry, links as (target content, strength,
    type)): ids are random uuid4s, so two engines give different ones; a link to a
    memory outside ``memories`` shows its target as ``"?"``."""
    content = {m.id: m.content for m in memories}
    return [
        (m.content, m.tag.core_affect, m.expires_at,
         [(content.get(lk.target_id, "?"), lk.strength, lk.link_type)
          for lk in m.tag.resonance_links])
        for m in memories
    ]
