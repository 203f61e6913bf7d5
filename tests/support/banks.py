"""Random memory banks for the columnar-store tests: odd shapes, links, precisions,
and a byte-for-byte comparison of two candidate banks."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import jax
import numpy as np

from emotional_memory._bank import CandidateBank
from emotional_memory.affect import AffectiveMomentum, CoreAffect
from emotional_memory.models import EmotionalTag, Memory, ResonanceLink
from emotional_memory.mood import MoodField

T0 = datetime(2025, 3, 1, tzinfo=UTC)


DIM = 6


LINK_TYPES = ["semantic", "emotional", "temporal", "causal", "contrastive"]


WORDS = ["rain", "bridge", "coffee", "harbour", "storm"]


def random_embedding(kind: int, rng: np.random.Generator, base: list[list[float]]) -> Any:
    """An embedding of ``kind``: 0 none, 1 empty, 2 float32 numbers, 3 a duplicate of
    one in ``base``, 4 zero, else float64 numbers."""
    if kind == 0:
        return None
    if kind == 1:
        return []
    if kind == 2:  # float32 numbers (the float32 store keeps them exactly)
        return rng.standard_normal(DIM).astype(np.float32).astype(np.float64).tolist()
    if kind == 3 and base:  # a duplicate of an earlier embedding (ties)
        return list(base[int(rng.integers(0, len(base)))])
    if kind == 4:
        return [0.0] * DIM  # zero norm
    return rng.standard_normal(DIM).tolist()  # float64 numbers (kept aside in float32)


def random_memories(seed: int, n: int, odd_every: int) -> list[Memory]:
    """``n`` memories ``m0..`` with random tags, links (some to a missing ``gone``) and
    embeddings; with ``odd_every``, every such memory has a non-UTC timestamp."""
    rng = np.random.default_rng(seed)
    ids = [f"m{i}" for i in range(n)]
    seen: list[list[float]] = []
    out = []
    for i in range(n):
        emb = random_embedding(int(rng.integers(0, 6)), rng, seen)
        if emb:
            seen.append(emb)
        zone = timezone(timedelta(hours=2)) if odd_every and i % odd_every == 1 else UTC
        links = [
            ResonanceLink(
                source_id=ids[i],
                target_id=str(rng.choice([*ids, "gone"])),
                strength=float(rng.uniform(0, 1)),
                link_type=LINK_TYPES[int(rng.integers(0, 5))],  # type: ignore[arg-type]
            )
            for _ in range(int(rng.integers(0, 12)))
        ]
        tag = EmotionalTag(
            core_affect=CoreAffect(valence=float(rng.uniform(-1, 1)),
                                   arousal=float(rng.uniform(0, 1)),
                                   dominance=float(rng.uniform(0, 1))),
            momentum=AffectiveMomentum(d_valence=float(rng.normal()),
                                       d_arousal=float(rng.normal()), d_dominance=0.125),
            mood_snapshot=MoodField(valence=float(rng.uniform(-1, 1)), arousal=0.3,
                                    dominance=0.6, inertia=0.5, timestamp=T0),
            consolidation_strength=float(rng.uniform(0, 1)),
            retrieval_count=int(rng.integers(0, 9)),
            timestamp=(T0 + timedelta(seconds=float(rng.uniform(0, 1e7)))).astimezone(zone),
            resonance_links=links,
        )
        words = " ".join(str(w) for w in rng.choice(WORDS, size=int(rng.integers(0, 4))))
        out.append(Memory(id=ids[i], content=f"text {i} {words}", tag=tag, embedding=emb))
    return out


def assert_same_bank(got: CandidateBank, want: CandidateBank) -> None:
    """Every field of two banks identical (arrays byte for byte)."""
    assert got.ids == want.ids
    assert got.dim == want.dim
    got_leaves, got_def = jax.tree_util.tree_flatten(got.columns)
    want_leaves, want_def = jax.tree_util.tree_flatten(want.columns)
    assert got_def == want_def
    for a, b in zip(got_leaves, want_leaves, strict=True):
        a, b = np.asarray(a), np.asarray(b)
        assert a.dtype == b.dtype and a.shape == b.shape
        assert a.tobytes() == b.tobytes()
    for a, b in zip(got.adjacency, want.adjacency, strict=True):
        assert a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()
    assert (got.lexical is None) == (want.lexical is None)
    if got.lexical is not None and want.lexical is not None:
        for a, b in zip(jax.tree_util.tree_leaves(got.lexical),
                        jax.tree_util.tree_leaves(want.lexical), strict=True):
            a, b = np.asarray(a), np.asarray(b)
            assert a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


def random_query(kind: int, rng: np.random.Generator) -> Any:
    """A query embedding of ``kind``: 0 none, 1 empty, 2 zero, else random."""
    return [None, [], [0.0] * DIM][kind] if kind < 3 else rng.standard_normal(DIM).tolist()
