"""Memory builders shared by the store and engine tests: simple memories, memories
with varied tags, awkward embedding rows, and a hypothesis strategy drawing memories
with every optional field."""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import numpy as np
from hypothesis import strategies as st

from emotional_memory.affect import AffectiveMomentum, CoreAffect
from emotional_memory.appraisal import AppraisalVector
from emotional_memory.categorize import categorize_affect
from emotional_memory.models import (
    LINK_TYPES,
    EmotionalTag,
    Memory,
    ResonanceLink,
    make_emotional_tag,
)
from emotional_memory.mood import MoodField

T0 = datetime(2025, 3, 1, tzinfo=UTC)
VARIED_T0 = datetime(2025, 3, 1, 9, 0, tzinfo=UTC)
INDEXED_T0 = datetime(2026, 5, 1, tzinfo=UTC)


def memory_key(memory: Memory | None) -> str | None:
    """A memory as text, for comparisons that must hold with NaN embeddings too
    (``NaN != NaN`` fails ``==``); None stays None."""
    if memory is None:
        return None
    return json.dumps(memory.model_dump(), default=str, sort_keys=True)


def basic_memory(
    content: str,
    embedding: Sequence[float] | None = None,
    *,
    valence: float = 0.0,
    metadata: dict[str, Any] | None = None,
) -> Memory:
    """A memory with a simple tag (arousal 0.5, neutral mood, consolidation 0.5)."""
    tag = make_emotional_tag(
        CoreAffect(valence=valence, arousal=0.5),
        AffectiveMomentum.zero(),
        MoodField.neutral(),
        0.5,
    )
    emb = None if embedding is None else [float(x) for x in embedding]
    return Memory.create(content, tag, embedding=emb, metadata=metadata)


def varied_memory(
    content: str,
    embedding: Sequence[float] | None,
    *,
    valence: float = 0.0,
    when: datetime = VARIED_T0,
    retrievals: int = 0,
) -> Memory:
    """A memory whose arousal and momentum vary with the content's length."""
    tag = make_emotional_tag(
        CoreAffect(valence=valence, arousal=0.4 + 0.1 * math.sin(len(content))),
        AffectiveMomentum(d_valence=0.01 * len(content), d_arousal=-0.02),
        MoodField(valence=valence / 2, arousal=0.3, dominance=0.6, inertia=0.5, timestamp=when),
        0.6,
        now=when,
    )
    if retrievals:
        tag = tag.model_copy(update={"retrieval_count": retrievals})
    emb = None if embedding is None else [float(x) for x in embedding]
    return Memory.create(content, tag, embedding=emb)


def tricky_vectors(rng: np.random.Generator, n: int, d: int) -> list[np.ndarray | None]:
    """Near-duplicates (cosines 1e-8 apart), exact duplicates, NaN, zero, tiny/huge
    norms, missing embeddings: the float32 pool must be widened and ties kept."""
    base = rng.normal(size=(12, d))
    out: list[np.ndarray | None] = []
    for _ in range(n):
        r = rng.uniform()
        if r < 0.35:
            out.append(base[rng.integers(12)] + rng.normal(size=d) * 1e-5)
        elif r < 0.42:
            out.append(base[rng.integers(12)].copy())
        elif r < 0.44:
            out.append(np.full(d, np.nan))
        elif r < 0.46:
            out.append(np.zeros(d))
        elif r < 0.47:
            out.append(rng.normal(size=d) * 1e-200)  # squares underflow: norm 0
        elif r < 0.48:
            out.append(rng.normal(size=d) * 1e-160)  # tiny but representable norm
        elif r < 0.49:
            out.append(rng.normal(size=d) * 1e155)  # norm beyond 1e150
        elif r < 0.50:
            out.append(None)
        else:
            out.append(rng.normal(size=d))
    return out


IDS = [f"id-{i}" for i in range(6)]


unit = st.floats(0.0, 1.0, allow_nan=False)


signed = st.floats(-1.0, 1.0, allow_nan=False)


small = st.floats(-5.0, 5.0, allow_nan=False)


zones = st.sampled_from([UTC, UTC, UTC, timezone(timedelta(hours=2)), timezone(timedelta(0), "Z")])


@st.composite
def moments(draw: Any, tz: Any = zones) -> datetime:
    """A datetime within ~4 months of ``T0``, in one of ``zones``."""
    return (T0 + timedelta(microseconds=draw(st.integers(-10**13, 10**13)))).astimezone(
        draw(tz)
    )


@st.composite
def memories(draw: Any, memory_id: str | None = None) -> Memory:
    """A memory with every optional tag field drawn (links, appraisal, odd time zones,
    embeddings of float32 or float64 numbers, missing or empty), id from ``IDS``."""
    mid = memory_id or draw(st.sampled_from(IDS))
    affect = CoreAffect(valence=draw(signed), arousal=draw(unit), dominance=draw(unit))
    n_links = draw(st.integers(0, 6))
    links = [
        ResonanceLink(
            source_id=mid if draw(st.integers(0, 9)) else "someone-else",
            target_id=draw(st.sampled_from([*IDS, "gone"])),
            strength=draw(unit),
            link_type=draw(st.sampled_from(LINK_TYPES)),
        )
        for _ in range(n_links)
    ]
    tag = EmotionalTag(
        core_affect=affect,
        momentum=AffectiveMomentum(
            d_valence=draw(small), d_arousal=draw(small), d_dominance=draw(small),
            dd_valence=draw(small), dd_arousal=draw(small), dd_dominance=draw(small),
        ),
        mood_snapshot=MoodField(
            valence=draw(signed), arousal=draw(unit), dominance=draw(unit),
            inertia=draw(unit), timestamp=draw(moments()),
        ),
        appraisal=draw(st.none() | st.builds(
            AppraisalVector, novelty=signed, goal_relevance=signed, coping_potential=unit,
            norm_congruence=signed, self_relevance=unit,
        )),
        resonance_links=links,
        timestamp=draw(moments()),
        consolidation_strength=draw(unit),
        last_retrieved=draw(st.none() | moments()),
        retrieval_count=draw(st.integers(0, 10**6)),
        reconsolidation_count=draw(st.integers(0, 50)),
        pending_appraisal=draw(st.booleans()),
        window_opened_at=draw(st.none() | moments()),
        expected_affect=draw(st.none() | st.builds(
            CoreAffect, valence=signed, arousal=unit, dominance=unit
        )),
        prediction_learning_rate=draw(st.floats(0.0, 1.0)),
        emotion_label=categorize_affect(affect) if draw(st.booleans()) else None,
    )
    embedding = draw(st.none() | st.just([]) | st.lists(
        st.floats(-1e3, 1e3, allow_nan=False, width=draw(st.sampled_from([32, 64]))),
        min_size=4, max_size=4,
    ))
    metadata = draw(st.dictionaries(st.sampled_from("abc"), st.integers() | st.text(max_size=3),
                                    max_size=2))
    return Memory(id=mid, content=draw(st.text(max_size=12)), embedding=embedding, tag=tag,
                  metadata=metadata)


def indexed_memory(i: int, embedding: list[float] | None, content: str | None = None) -> Memory:
    """Memory number ``i`` (content ``memory i``, metadata ``{"i": i}``), its timestamp
    ``i`` minutes after ``INDEXED_T0``."""
    tag = EmotionalTag(
        core_affect=CoreAffect(valence=0.1 * (i % 5), arousal=0.5),
        momentum=AffectiveMomentum.zero(),
        mood_snapshot=MoodField.neutral(INDEXED_T0),
        timestamp=INDEXED_T0 + timedelta(minutes=i),
        consolidation_strength=0.5,
    )
    return Memory.create(
        content=content or f"memory {i}", tag=tag, embedding=embedding, metadata={"i": i}
    )
