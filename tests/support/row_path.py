"""Embedders, clocks, workloads and hypothesis strategies shared by the row-path tests
(tests/engine/test_encode_rows*.py)."""

from __future__ import annotations

import itertools
import json
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

from hypothesis import strategies as st

from emotional_memory import (
    CoreAffect,
    EmotionalMemory,
    EmotionalMemoryConfig,
    KeywordAppraisalEngine,
    Memory,
    ResonanceConfig,
)
from emotional_memory.replay import TickClock

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


class _FailsOnProjection:
    """An appraisal whose projection to an affect fails."""

    def to_core_affect(self) -> CoreAffect:
        raise RuntimeError("appraisal failed")


class FailingAppraisal(KeywordAppraisalEngine):
    """Keyword appraisal whose answer for a text containing "boom" fails once the
    engine projects it to an affect, as it prepares that memory: in ``encode_batch``
    (whose appraisals all run before anything is stored) after the blocks before it
    were saved and linked."""

    def appraise(self, content: str, context: dict[str, Any] | None = None) -> Any:
        if "boom" in content:
            return _FailsOnProjection()
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
