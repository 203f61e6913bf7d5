"""The engine's one-step padded columns equal ``pad_columns(columns_from_memories(...))``."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import jax
import numpy as np
import pytest

from emotional_memory._bank import (
    _vector,
    columns_from_memories,
    padded_columns_from_memories,
    query_features,
)
from emotional_memory.affect import AffectiveMomentum, CoreAffect
from emotional_memory.kernel import QueryFeatures, pad_columns
from emotional_memory.models import EmotionalTag, Memory
from emotional_memory.mood import MoodField

T0 = datetime(2024, 1, 1, tzinfo=UTC)


def _memory(i: int, rng: np.random.Generator, embedding: list[float] | None) -> Memory:
    tag = EmotionalTag(
        core_affect=CoreAffect(valence=float(rng.uniform(-1, 1)),
                               arousal=float(rng.uniform(0, 1)),
                               dominance=float(rng.uniform(0, 1))),
        momentum=AffectiveMomentum(d_valence=float(rng.normal()), d_arousal=0.25,
                                   d_dominance=-0.125),
        mood_snapshot=MoodField(valence=float(rng.uniform(-1, 1)), arousal=0.3,
                                dominance=0.6, inertia=0.5, timestamp=T0),
        consolidation_strength=float(rng.uniform(0, 1)),
        retrieval_count=int(rng.integers(0, 50)),
        timestamp=T0 + timedelta(seconds=float(rng.uniform(0, 1e6))),
    )
    return Memory(id=f"m{i}", content=f"c{i}", tag=tag, embedding=embedding)


@pytest.mark.parametrize("n", [1, 5, 16, 17, 40])
def test_padded_columns_bit_identical(n: int) -> None:
    rng = np.random.default_rng(n)
    memories = []
    for i in range(n):
        kind = i % 4
        emb = None if kind == 1 else [] if kind == 2 else rng.standard_normal(6).tolist()
        memories.append(_memory(i, rng, emb))
    now = T0 + timedelta(days=30)
    ref = pad_columns(columns_from_memories(memories, now, 6))
    got = padded_columns_from_memories(memories, now, 6)
    ref_leaves, ref_def = jax.tree_util.tree_flatten(ref)
    got_leaves, got_def = jax.tree_util.tree_flatten(got)
    assert type(got) is type(ref) and got_def == ref_def
    for a, b in zip(ref_leaves, got_leaves, strict=True):
        assert isinstance(b, np.ndarray)
        assert a.dtype == b.dtype and a.shape == b.shape
        assert a.tobytes() == b.tobytes()


def test_query_features_is_the_module() -> None:
    affect = CoreAffect(valence=0.25, arousal=0.5, dominance=0.75)
    mood = MoodField(valence=-0.5, arousal=0.25, dominance=0.5, inertia=0.5, timestamp=T0)
    momentum = AffectiveMomentum(d_valence=0.125, d_arousal=0.0, d_dominance=-0.25)
    got = query_features([0.5, 0.25], affect, mood, momentum, 2)
    ref = QueryFeatures(
        embedding=_vector([0.5, 0.25], 2),
        affect=np.asarray(affect.as_tuple(), np.float64),
        mood=np.asarray(mood.as_tuple(), np.float64),
        velocity=np.asarray(momentum.velocity(), np.float64),
    )
    assert type(got) is QueryFeatures
    assert jax.tree_util.tree_structure(got) == jax.tree_util.tree_structure(ref)
    for a, b in zip(jax.tree_util.tree_leaves(ref), jax.tree_util.tree_leaves(got), strict=True):
        assert a.dtype == b.dtype and a.tobytes() == b.tobytes()
